"""Micro-benchmark of the per-node CPU work: logits processing and node verification.

Everything is timed against one plain NumPy softmax of a full Qwen-sized logits row (float32
in, float64 probabilities out), the cost the target side pays anyway.  The issue's targets:
a ResiSpec node verification costs less than that softmax, and the first import with a warm
Numba cache takes under 2 s.  Nothing is asserted; the table is printed (and optionally
written as JSON).

    python scripts/bench_kernels.py [--reps 200] [--vocab 151936] [--json OUT]
    python scripts/bench_kernels.py --steps --vocab 32000,151936,262144

``--steps`` times the engine's host work per step instead: whole generations through
``Engine`` on fake models that return precomputed Zipf-like rows of the given vocabulary at
no model cost, so everything but a few microseconds of list handling in the fake's decode is
what ``bench`` reports as overhead_ms_per_step (logits -> distributions, draws,
verification, the tree, the loop), for plain decoding, the issue's tree shapes and ``auto``
(choosing on GPU-like cost curves, so that it speculates).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
from numba import njit

from resispec_gguf.kernels import sampling, verify

try:
    import ctypes
    import resource

    _LIBC = ctypes.CDLL("libc.so.6")
except (ImportError, OSError):  # not Linux/glibc: no page-fault counts, no mallopt
    _LIBC = None

QWEN_VOCAB = 151_936
_ALMOST_ONE = float(np.nextafter(1.0, 0.0))


# --------------------------------------------------------------------------- inputs


def zipf_logits(rng, v, scale=1.6, noise=0.6):
    """Zipf-like logits: rank r gets -scale * log r plus noise, shuffled over the vocabulary."""
    x = 18.0 - scale * np.log(np.arange(1, v + 1)) + rng.normal(0.0, noise, v)
    return rng.permutation(x).astype(np.float32)


def draft_logits(rng, target, noise=1.0):
    """A draft that mostly agrees with the target."""
    return (target + rng.normal(0.0, noise, target.shape[0])).astype(np.float32)


def numpy_softmax(logits):
    # logits: [V] float32 -> [V] float64
    x = logits.astype(np.float64)
    e = np.exp(x - x.max())
    e /= e.sum()
    return e


# --------------------------------------------------------------------------- timing


def pin_malloc():
    """Stop glibc from trimming the heap / mmapping each V-sized temporary.

    With glibc's adaptive defaults, a process whose allocation history happens to lower the
    trim threshold pays fresh-page faults (~560 per float64 row of 151,936, ~1 ms) on every
    V-sized temporary: the same softmax then measures 5x slower.  Pinning the thresholds
    measures the compute, which is what a long-running engine sees once its heap is warm.
    """
    if _LIBC is None:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    ok = _LIBC.mallopt(m_mmap_threshold, 1 << 28) and _LIBC.mallopt(m_trim_threshold, 1 << 29)
    return bool(ok)


def _minflt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if _LIBC is not None else 0


def median_us(fn, args_list, warmup=5):
    """(median wall time of fn(*args) in microseconds, minor page faults per call)."""
    for i in range(warmup):
        fn(*args_list[i % len(args_list)])
    times = []
    f0 = _minflt()
    for args in args_list:
        t0 = time.perf_counter_ns()
        fn(*args)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3, (_minflt() - f0) / len(args_list)


@njit(cache=True)
def _numba_sum(p):
    # what _sample_residual's p.sum() costs: a sequential, unvectorised reduction
    return p.sum()


def import_time(code, runs=3):
    """Median wall time of a fresh interpreter running code (after one cache-warming run)."""
    cmd = [sys.executable, "-c", code]
    env = dict(os.environ)
    subprocess.run(cmd, check=True, env=env)  # populates the Numba cache if it is cold
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=env)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


FIRST_CALLS = """
import numpy as np
from resispec_gguf.kernels import sampling, verify
x = np.linspace(-3, 3, 50).astype(np.float32)
p = sampling.probs_dense(x)
sampling.probs_dense(x, 0.6, 40, 0.95)
ids, q = sampling.probs_sparse(x + 0.1, cap=8)
d = sampling.sample_iid(ids, q, np.full(4, 0.3))
for m in ("specinfer", "resispec"):
    verify.verify_checked(m, p, (ids, q), d, np.full(5, 0.5))
verify.verify_checked("rrs", p, (ids, q), sampling.sample_without_replacement(ids, q, np.full(4, 0.3)), np.full(5, 0.5))
verify.verify("resispec", p, (ids, q), d, np.full(6, 0.5), 3)
"""


# --------------------------------------------------------------------------- benchmark


def run(v, reps, k, cap, seed):
    rng = np.random.default_rng(seed)
    n_rows = 8
    tgt = [zipf_logits(rng, v) for _ in range(n_rows)]
    dft = [draft_logits(rng, t) for t in tgt]
    rows = []

    def row(name, timing, note=""):
        us, faults = timing
        rows.append({"name": name, "us": us, "faults_per_call": faults, "note": note})

    def cyc(lst):
        return [lst[i % len(lst)] for i in range(reps)]

    # (a) the reference unit
    t_soft = median_us(numpy_softmax, cyc([(t,) for t in tgt]))
    row("numpy softmax (float32 -> float64)", t_soft, "reference unit")
    t_soft = t_soft[0]

    # (b) target side
    row("probs_dense T=1", median_us(sampling.probs_dense, cyc([(t, 1.0) for t in tgt])))
    row(
        "probs_dense T=0.6 top_k=40 top_p=0.95",
        median_us(sampling.probs_dense, cyc([(t, 0.6, 40, 0.95) for t in tgt])),
    )
    row(
        "probs_dense T=0.6 top_p=0.95 (no top_k)",
        median_us(sampling.probs_dense, cyc([(t, 0.6, 0, 0.95) for t in tgt])),
    )

    # (c) draft side
    row(f"probs_sparse T=1 cap={cap}", median_us(sampling.probs_sparse, cyc([(d, 1.0, 0, 1.0, 0.0, cap) for d in dft])))
    row(
        f"probs_sparse T=0.6 top_p=0.95 cap={cap}",
        median_us(sampling.probs_sparse, cyc([(d, 0.6, 0, 0.95, 0.0, cap) for d in dft])),
        "cap after top-p: + NumPy row normaliser",
    )
    row(
        f"probs_sparse T=0.6 top_k=40 top_p=0.95 cap={cap}",
        median_us(sampling.probs_sparse, cyc([(d, 0.6, 40, 0.95, 0.0, cap) for d in dft])),
    )

    # (d)-(f) node verification, T=1, full dense p (the fallback then scans all of V)
    ps = [sampling.probs_dense(t, 1.0) for t in tgt]
    qs = [sampling.probs_sparse(d, 1.0, 0, 1.0, 0.0, cap) for d in dft]

    def iid_cases(typical):
        cases = []
        for i in range(reps):
            p = ps[i % n_rows]
            qids, qp = qs[i % n_rows]
            if typical:
                draws = sampling.sample_iid(qids, qp, rng.random(k))
                u = rng.random(k + 1)
            else:
                # every draw is the token the target likes least relative to q, every u near 1:
                # all stages reject and the O(V) fallback runs
                j = int(np.argmin(p[qids] / qp))
                draws = np.full(k, qids[j], np.int64)
                u = np.full(k + 1, 1.0 - 1e-12)
                u[k] = rng.random()
            cases.append((p, qids, qp, draws, u))
        return cases

    def rrs_cases(typical):
        cases = []
        for i in range(reps):
            p = ps[i % n_rows]
            qids, qp = qs[i % n_rows]
            draws = sampling.sample_without_replacement(qids, qp, rng.random(k))
            u = rng.random(k + 1) if typical else np.full(k + 1, 1.0 - 1e-12)
            if not typical:
                u[k] = rng.random()
            cases.append((p, qids, qp, draws, u))
        return cases

    def accept_rate(method, cases):
        return float(np.mean([verify.verify_checked(method, p, (qids, qp), d, u)[1] >= 0
                              for p, qids, qp, d, u in cases]))

    for method in ("resispec", "specinfer", "rrs"):
        make = rrs_cases if method == "rrs" else iid_cases
        for typical in (True, False):
            cases = make(typical)
            acc = accept_rate(method, cases)
            label = "typical" if typical else ("u[:K] near 1" if method == "rrs" else "forced fallback")
            row(
                f"verify_checked {method} K={k} {label}",
                median_us(lambda p, qids, qp, d, u, m=method: verify.verify_checked(m, p, (qids, qp), d, u), cases),
                f"accept rate {acc:.2f}",
            )
            row(
                f"verify {method} K={k} {label}",
                median_us(lambda p, qids, qp, d, u, m=method: verify.verify(m, p, (qids, qp), d, u), cases),
                "no validation",
            )
            if typical:
                # a lookup guess (the target's argmax) ahead of the draws, rejected: the
                # method then runs on p without it
                cand = [(p, int(np.argmax(p)), qids, qp, d, np.append(_ALMOST_ONE, u)) for p, qids, qp, d, u in cases]
                row(
                    f"verify {method} K={k} x0 rejected",
                    median_us(lambda p, x0, qids, qp, d, u, m=method: verify.verify(m, p, (qids, qp), d, u, x0), cand),
                    "no validation",
                )

    # (e) the ResiSpec schedule solve alone, and the other pieces of a node verification
    sup = [(ps[i], *qs[i]) for i in range(n_rows)]
    row("_sorted_support (|supp q| = cap)", median_us(verify._sorted_support, cyc(sup)))
    sorted_sup = [verify._sorted_support(*s) for s in sup]
    row(
        f"_schedule resispec K={k}",
        median_us(lambda rs, qc, pc: verify._schedule(verify._RESISPEC, rs, qc, pc, k), cyc(sorted_sup)),
    )
    row(
        f"_schedule specinfer K={k}",
        median_us(lambda rs, qc, pc: verify._schedule(verify._SPECINFER, rs, qc, pc, k), cyc(sorted_sup)),
    )
    c_vals = [float(verify._schedule(verify._RESISPEC, *s, k)[2]) for s in sorted_sup]
    fb = [(ps[i], *qs[i], c_vals[i], 0.999) for i in range(n_rows)]
    row("_fallback_iid (two O(V) passes)", median_us(verify._fallback_iid, cyc(fb)), "u = 0.999")
    row("  of which p.sum() in Numba", median_us(_numba_sum, cyc([(p,) for p in ps])), "sequential reduction")
    row("np.sum(p) for comparison", median_us(np.sum, cyc([(p,) for p in ps])), "pairwise SIMD")
    row("wrapper: _check_dist(p)", median_us(verify._check_dist, cyc([("p", p) for p in ps])))
    row("wrapper: _check_sparse", median_us(verify._check_sparse, cyc(sup)))
    dr = iid_cases(True)
    row(
        "wrapper: _check_draws",
        median_us(lambda p, qids, qp, d, u: verify._check_draws(verify._RESISPEC, lambda x: np.isin(x, qids), d, u), dr),
    )
    row("kernel: _verify resispec typical", median_us(lambda *a: verify._verify(verify._RESISPEC, *a), dr))
    row("sampling: _check_logits (row)", median_us(sampling._check_logits, cyc([(t,) for t in tgt])))

    for r in rows:
        r["ratio"] = r["us"] / t_soft
    return rows


# --------------------------------------------------------------------------- host work per step


class _PoolModel:
    """A ``protocol.ModelBackend`` at no model cost: after token t the row is
    ``pool[t % len(pool)]`` (read-only float32 [V], as the real backend's rows)."""

    def __init__(self, pool, n_ctx=4096, n_seq_max=98):
        self.pool = pool
        self.n_vocab = pool[0].shape[0]
        self.n_ctx, self.n_seq_max, self.n_threads = n_ctx, n_seq_max, 1
        self.cached, self.nodes = [], []

    @property
    def n_past(self):
        return len(self.cached)

    def sync_prefix(self, tokens):
        self.nodes = []
        self.cached = list(tokens[:-1])
        return 0

    def decode(self, tokens, parents, want_logits=None):
        self.nodes += list(tokens)
        want = [True] * len(tokens) if want_logits is None else want_logits
        return [self.pool[int(t) % len(self.pool)] for t, w in zip(tokens, want) if w]

    def commit(self, path):
        self.cached += [self.nodes[i] for i in path]
        self.nodes = []

    def drop_uncommitted(self):
        self.nodes = []

    def reset(self):
        self.cached, self.nodes = [], []

    def is_eog(self, token):
        return False

    def token_piece(self, token):
        return b"x"

    def cost_key(self):
        return f"pool:{self.n_vocab}"


STEP_SHAPES = (
    ("plain", dict(method="none")),
    ("chain d5", dict(method="chain", depth=5, budget=5)),
    ("resispec K4 d5 b12", dict(method="resispec", draws=4, depth=5, budget=12)),
    ("resispec K4 d6 b64", dict(method="resispec", draws=4, depth=6, budget=64)),
    ("auto", dict(method="auto")),  # on GPU-like cost curves (_gpu_like_curves), so that it speculates
)
STEP_SAMPLING = (
    ("default sampling", dict()),  # T 0.8, top-k 40, top-p 0.95, min-p 0.05
    ("full distribution", dict(top_k=0, top_p=1.0, min_p=0.0)),
)


def _gpu_like_curves():
    """``(target, draft)`` cost curves of a GPU pair (as scripts/auto_gpu_like.py): a target
    decode of n rows costs 20 ms + 0.2 ms n, a draft one 2 ms + 0.1 ms n.  Only ``auto``
    reads them (to choose); the fakes still cost nothing."""
    from resispec_gguf.decoding import autotune
    from resispec_gguf.decoding import costs

    rows = costs.ROW_COUNTS
    return (costs.CostCurve(rows, tuple(0.020 + 0.0002 * n for n in rows)),
            costs.CostCurve(rows, tuple(0.002 + 0.0001 * n for n in rows)))


def run_steps(v, tokens, seed, n_rows=16):
    """``[{"vocab", "sampling", "shape", "overhead_ms_per_step", "nodes_per_step", "tau"}]``."""
    from resispec_gguf.config import DraftParams, SamplingParams
    from resispec_gguf.engine import Engine

    rng = np.random.default_rng(seed)
    tgt = [zipf_logits(rng, v) for _ in range(n_rows)]
    dft = [draft_logits(rng, t, noise=0.5) for t in tgt]
    for r in tgt + dft:
        r.flags.writeable = False
    engine = Engine(_PoolModel(tgt), _PoolModel(dft), cost_curves=_gpu_like_curves())
    engine.prepare()
    out = []
    for sname, skw in STEP_SAMPLING:
        for name, dkw in STEP_SHAPES:
            sp, dp = SamplingParams(max_tokens=tokens, seed=seed, **skw), DraftParams(**dkw)
            engine.generate([1, 2, 3], sp.replace(max_tokens=8), dp)  # warm-up
            best = None
            for rep in range(3):  # the quietest of three generations
                st = engine.generate([1, 2, 3], sp.replace(seed=seed + rep), dp).stats
                ms = 1000 * st.overhead_time / st.steps
                if best is None or ms < best[0]:
                    best = (ms, st)
            ms, st = best
            out.append({"vocab": v, "sampling": sname, "shape": name, "overhead_ms_per_step": ms,
                        "nodes_per_step": st.nodes_per_step, "tau": st.tau})
    return out


def main_steps(args):
    import tempfile

    # the fake models' cost curves stay out of the user's cache
    os.environ["RESISPEC_COSTS"] = os.path.join(tempfile.mkdtemp(), "costs.json")
    if args.cpu_time:  # the engine's clock becomes this process's CPU time: steadier on a shared machine
        time.perf_counter = time.process_time
    pinned = False if args.no_mallopt else pin_malloc()
    vocabs = [int(x) for x in str(args.vocab).split(",")]
    rows = [r for v in vocabs for r in run_steps(v, args.tokens, args.seed)]
    print(f"host work per step (ms{', CPU time' if args.cpu_time else ''}), best of 3 generations of {args.tokens} tokens; "
          f"malloc thresholds {'pinned' if pinned else 'glibc default'}")
    print(f"{'sampling':<18} {'shape':<20} " + " ".join(f"{'V=' + str(v):>10}" for v in vocabs) + "   nodes  tau")
    for sname, _ in STEP_SAMPLING:
        for name, _ in STEP_SHAPES:
            cells = [r for r in rows if r["sampling"] == sname and r["shape"] == name]
            print(f"{sname:<18} {name:<20} " + " ".join(f"{r['overhead_ms_per_step']:>10.3f}" for r in cells)
                  + f"   {cells[-1]['nodes_per_step']:5.1f} {cells[-1]['tau']:4.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tokens": args.tokens, "malloc_pinned": pinned, "steps": rows}, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default=str(QWEN_VOCAB), help="vocabulary size (--steps: comma-separated sizes)")
    ap.add_argument("--steps", action="store_true", help="time the engine's host work per step instead (see above)")
    ap.add_argument("--tokens", type=int, default=96, help="--steps: tokens per generation")
    ap.add_argument("--cpu-time", action="store_true", help="--steps: time with the process's CPU clock "
                                                            "(steadier when other processes share the cores)")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--k", type=int, default=16, help="iid draws per node")
    ap.add_argument("--cap", type=int, default=64, help="draft support cap")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-import", action="store_true", help="skip the start-up measurements")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    ap.add_argument("--no-mallopt", action="store_true", help="keep glibc's adaptive malloc thresholds")
    args = ap.parse_args(argv)
    if args.steps:
        return main_steps(args)
    args.vocab = int(args.vocab)

    pinned = False if args.no_mallopt else pin_malloc()
    rows = run(args.vocab, args.reps, args.k, args.cap, args.seed)
    startup = {}
    if not args.no_import:
        startup["import (warm cache)"] = import_time("import resispec_gguf.kernels.verify, resispec_gguf.kernels.sampling")
        startup["import + first call of every kernel (warm cache)"] = import_time(FIRST_CALLS)

    print(f"V = {args.vocab}, K = {args.k}, cap = {args.cap}, median of {args.reps} calls")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
          f"malloc thresholds {'pinned' if pinned else 'glibc default'}")
    w = max(len(r["name"]) for r in rows)
    print(f"{'':{w}}  {'us':>9}  {'x softmax':>9}  {'faults':>6}")
    for r in rows:
        print(f"{r['name']:{w}}  {r['us']:9.1f}  {r['ratio']:9.3f}  {r['faults_per_call']:6.0f}  {r['note']}")
    for name, s in startup.items():
        print(f"{name}: {s:.2f} s (median of 3)")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"vocab": args.vocab, "k": args.k, "cap": args.cap, "reps": args.reps,
                       "malloc_pinned": pinned, "rows": rows, "startup_s": startup}, f, indent=1)


if __name__ == "__main__":
    main()
