"""Print the exactness harness's p-values: every configuration of tests/decoding/test_exactness.py,
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

import law_harness as T  # noqa: E402



def main() -> int:
    rows = []
    grids = ((T.tree_case, T.TREE_GRID, ""), (T.lookup_case, T.LOOKUP_GRID, "lookup "), (T.auto_case, T.AUTO_GRID, "auto "))
    for build, grid, prefix in grids:
        for args in itertools.product(*grid):
            label = prefix + "/".join(args)
            pv = T.run_case(build(*args), label)
            rows.append((label, pv))
            print(f"{label:<44} joint p {pv['joint']:.3g}  conditional p {pv['conditional']:.3g}  cells {pv['cells']}", flush=True)
    worst_joint = min(rows, key=lambda r: r[1]["joint"])
    worst_cond = min(rows, key=lambda r: r[1]["conditional"])
    print(f"{len(rows)} configurations x {T.RUNS} runs; worst joint p {worst_joint[1]['joint']:.3g} ({worst_joint[0]}); "
          f"worst conditional p {worst_cond[1]['conditional']:.3g} ({worst_cond[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
