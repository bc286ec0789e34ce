"""auto against the best fixed setting on GPU-like costs, in modelled time.

The Markov fakes of the tests (tests/fake_models.py) with a target whose decode of n rows
costs 20 ms + 0.2 ms n and a draft at 2 ms + 0.1 ms n: every decode call adds its modelled
cost to a clock, so the rates below are what those costs would give (host work excluded).
Prints, per draft quality, the best of ``bench --sweep full``'s fixed settings and auto's
rate against it.  Nothing is asserted.

    python scripts/auto_gpu_like.py [SEEDS [VOCAB [TOKENS]]]     # defaults: 3 seeds, 6 tokens, 300
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from fake_models import Clocked, MarkovModel, random_rows
from resispec_gguf.decoding import autotune
from resispec_gguf.decoding import costs
from resispec_gguf.bench import measure as bench
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine

ROWS = costs.ROW_COUNTS
SEEDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
VOCAB = int(sys.argv[2]) if len(sys.argv) > 2 else 6
TOKENS = int(sys.argv[3]) if len(sys.argv) > 3 else 300
def _curve(per_row, fixed):
    return costs.CostCurve(ROWS, tuple(fixed + per_row * n for n in ROWS))
GPU_T = _curve(0.0002, 0.020)
GPU_D = _curve(0.0001, 0.002)

def pair(noise, V=6, seed=11):
    rows_t = random_rows(V, 1, seed, scale=2.5)
    rng = np.random.default_rng(5)
    rows_d = {c: (r + rng.standard_normal(V).astype(np.float32) * noise).astype(np.float32) for c, r in rows_t.items()}
    return MarkovModel(rows_t, V, name="t", n_ctx=4096), MarkovModel(rows_d, V, name="d", n_ctx=4096)

for noise in (0.0, 0.5, 1.5):
    t, d = pair(noise, VOCAB)
    clock = [0.0]
    e = Engine(Clocked(t, GPU_T, clock), Clocked(d, GPU_D, clock), cost_curves=(GPU_T, GPU_D))
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=TOKENS)
    rates = {}
    for name, dp in bench.sweep_grid("full", DraftParams(budget=32, depth=6)):
        toks = secs = 0.0
        for seed in range(SEEDS):
            clock[0] = 0.0
            r = e.generate([1, 2], sp.replace(seed=seed), dp)
            toks += len(r.tokens) + r.stats.eos_tokens
            secs += clock[0]
        rates[name] = toks / secs
    best = max((n for n in rates if n != "auto"), key=rates.get)
    print(f"noise {noise}: best {best} {rates[best]:.1f}, auto {rates['auto']:.1f} = {rates['auto']/rates[best]:.3f} x best, plain {rates['none']:.1f}")
