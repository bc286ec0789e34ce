"""Several requests at once on GPU-like costs, in modelled time.

The Markov fakes of the tests (tests/fake_models.py) with slots, a target whose decode of n
rows costs 20 ms + 0.2 ms n and a draft at 2 ms + 0.1 ms n (as scripts/auto_gpu_like.py):
every decode call adds its modelled cost to a clock, so the rates below are what those
costs would give (host work excluded).  At each concurrency c, c requests of TOKENS tokens
run together in one ``Engine.batch()``; per draft quality it prints the aggregate modelled
tokens/s of

* ``joint``: every request ``auto``, the step's rows shared across them by the cost curves;
* ``fixed``: every request the best fixed setting of one request alone (``bench --sweep
  quick``'s grid at c = 1);
* ``plain``: every request plain decoding, batched;

and joint's ratio to the better of the other two.  Nothing is asserted.

    python scripts/batch_gpu_like.py [SEEDS [TOKENS [LEVELS]]]   # defaults: 2 seeds, 200 tokens, 1,2,4,8
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np  # noqa: E402
from fake_models import Clocked, MarkovModel, random_rows  # noqa: E402
from resispec_gguf.config import DraftParams, SamplingParams  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402
from resispec_gguf.decoding import costs  # noqa: E402
from resispec_gguf.bench import measure as bench  # noqa: E402

SEEDS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 200
LEVELS = [int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "1,2,4,8").split(",")]
ROWS = costs.ROW_COUNTS


def _curve(per_row, fixed):
    return costs.CostCurve(ROWS, tuple(fixed + per_row * n for n in ROWS))


GPU_T = _curve(0.0002, 0.020)
GPU_D = _curve(0.0001, 0.002)


def engine(noise, slots, clock, V=6, seed=11):
    rows_t = random_rows(V, 1, seed, scale=2.5)
    rng = np.random.default_rng(5)
    rows_d = {c: (r + rng.standard_normal(V).astype(np.float32) * noise).astype(np.float32) for c, r in rows_t.items()}
    seqs = min(256, slots * 98)  # llama.cpp's limit on sequences, as the real backend
    t = MarkovModel(rows_t, V, name="t", n_ctx=4096, n_slots=slots, n_seq_max=seqs)
    d = MarkovModel(rows_d, V, name="d", n_ctx=4096, n_slots=slots, n_seq_max=seqs)
    return Engine(Clocked(t, GPU_T, clock), Clocked(d, GPU_D, clock), cost_curves=(GPU_T, GPU_D))


def rate(noise, c, dp):
    clock = [0.0]
    e = engine(noise, c, clock)
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=TOKENS)
    toks = 0
    for seed in range(SEEDS):
        batch = e.batch()
        reqs = [batch.admit(e.generation([1, 2 + i % 3], sp.replace(seed=100 * seed + i), dp)) for i in range(c)]
        while batch.busy:
            batch.step()
        toks += sum(len(r.gen.out) + r.gen.stats.eos_tokens for r in reqs)
    return toks / clock[0]


for noise in (0.5, 1.5):
    grid = [(n, d) for n, d in bench.sweep_grid("quick", DraftParams(budget=32, depth=6)) if n not in ("auto", "none")]
    single = {name: rate(noise, 1, dp) for name, dp in grid}
    best = max(single, key=single.get)
    best_dp = dict(grid)[best]
    for c in LEVELS:
        joint = rate(noise, c, DraftParams(method="auto", budget=32, depth=6))
        fixed = rate(noise, c, best_dp)
        plain = rate(noise, c, DraftParams(method="none"))
        print(f"noise {noise} c={c}: joint {joint:.1f}, fixed {best} {fixed:.1f}, plain {plain:.1f} tokens/s; "
              f"joint = {joint / fixed:.2f} x fixed, {joint / max(fixed, plain):.2f} x the better of fixed and plain",
              flush=True)
