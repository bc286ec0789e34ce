"""Print the exactness harness's p-values: every configuration of tests/test_exactness.py,
the worst joint and conditional p-values, and the number of cells tested.

    python scripts/exactness_report.py            # 1,600 runs per configuration (the suite's)
    RESISPEC_EXACTNESS_RUNS=112000 python scripts/exactness_report.py   # full power, hours

The suite asserts each p-value >= 1e-5; this script shows how far from that they are.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_exactness as T  # noqa: E402

from resispec_gguf.config import DraftParams  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402


def configurations():
    for method, policy, temp, room in itertools.product(T.METHODS, ["budget", "static"], list(T.TEMPERATURES), list(T.ROOMS)):
        tc, dc, ds, plain = T.ROOMS[room](len(T.PROMPT))
        t, d = T._pair(tc, dc, ds)
        dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4, policy=policy)
        yield f"{method}/{policy}/{temp}/{room}", Engine(t, d), t, T.PROMPT, temp, dp, plain
    for method, temp, room in itertools.product(T.METHODS + ("lookup only",), ["T1", "T0.6-filters"], T.LOOKUP_ROOMS):
        tc, dc, ds, _ = T.ROOMS[room](len(T.LOOKUP_PROMPT))
        t, d = T._pair(tc, dc, ds)
        engine = Engine(t, None) if method == "lookup only" else Engine(t, d)
        m = "chain" if method == "lookup only" else method
        dp = DraftParams(method=m, draws=3, depth=3, budget=6, draft_support=4, lookup=True)
        yield f"lookup {method}/{temp}/{room}", engine, t, T.LOOKUP_PROMPT, temp, dp, 0
    for costs, temp, room in itertools.product(["gpu", "cpu", "gpu no draft"], list(T.TEMPERATURES), T.LOOKUP_ROOMS):
        tc, dc, ds, _ = T.ROOMS[room](len(T.LOOKUP_PROMPT))
        t, d = T._pair(tc, dc, ds)
        curves = {"gpu": (T.FLAT, T.FLAT), "cpu": (T.CPU_T, T.CPU_D), "gpu no draft": (T.FLAT, None)}[costs]
        engine = Engine(t, None if curves[1] is None else d, cost_curves=curves)
        dp = DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4)
        yield f"auto {costs}/{temp}/{room}", engine, t, T.LOOKUP_PROMPT, temp, dp, 0


def main() -> int:
    rows = []
    for label, engine, target, prompt, temp, dp, plain in configurations():
        sp = T.TEMPERATURES[temp]
        counts = T.sample(engine, sp, dp, T.RUNS, plain)
        pv = T.check_law(counts, T.exact_law(target, prompt, sp, T.N_TOKENS), label)
        rows.append((label, pv))
        print(f"{label:<44} joint p {pv['joint']:.3g}  conditional p {pv['conditional']:.3g}  cells {pv['cells']}", flush=True)
    worst_joint = min(rows, key=lambda r: r[1]["joint"])
    worst_cond = min(rows, key=lambda r: r[1]["conditional"])
    print(f"{len(rows)} configurations x {T.RUNS} runs; worst joint p {worst_joint[1]['joint']:.3g} ({worst_joint[0]}); "
          f"worst conditional p {worst_cond[1]['conditional']:.3g} ({worst_cond[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
