"""scripts/bench_suffix.py runs end to end on a small corpus and prints every figure."""

import re

import numpy as np

from script_loader import load_script


def test_the_bench_prints_its_figures(capsys):
    bench = load_script("bench_suffix")
    tokens = bench.corpus()
    assert tokens.dtype == np.int64 and tokens.size > 50_000 and tokens.min() == 0
    assert bench.main(["--tokens", "6000", "--answer", "200", "--repeats", "1", "--limit", "20000"]) == 0
    out = capsys.readouterr().out
    for row in ("extend 1 token per call", "add 300-token sequence", "global: nodes per token",
                "match 32 + top-4, context held", "match 32 + top-4, context not held",
                "advance + top-4 along a path", "save (s)", "load (s)", "remove (us/token)"):
        assert re.search(re.escape(row) + r".*\s\d+\.\d+", out), row
    assert "arctic" in out  # measured, or why not
