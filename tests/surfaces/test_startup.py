"""What a start prints on stderr, piped (no terminal): a first line at once (which models it
loads), a line before each slow thing it does (the build check, measuring auto's costs) and
what auto expects here; a second start reuses the measured costs and says nothing about them.
On the tiny pair, through ``python -m resispec_gguf chat`` as a user pipes it."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _chat(tiny_pair, env) -> tuple[list[tuple[float, str]], str]:
    """``([(seconds since start, stderr line)], stdout)`` of one piped chat start."""
    argv = [sys.executable, "-m", "resispec_gguf", "chat", "--target", str(tiny_pair[0]), "--draft",
            str(tiny_pair[1]), "--max-tokens", "4"]
    start = time.monotonic()
    p = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdin.write("Hi\n/exit\n")
    p.stdin.close()
    lines = [(time.monotonic() - start, line.rstrip("\n")) for line in p.stderr]
    out = p.stdout.read()
    assert p.wait(timeout=120) == 0, lines
    return lines, out


def test_a_piped_start_says_what_it_does_and_a_second_reuses_the_costs(tiny_pair, tmp_path):
    env = {**os.environ, "RESISPEC_COSTS": str(tmp_path / "costs.json"),
           "RESISPEC_BUILDCHECK": str(tmp_path / "buildcheck.json")}
    env.pop("RESISPEC_COST_CHECK", None)  # as a user runs it: correction on
    first, out = _chat(tiny_pair, env)
    text = [line for _, line in first]
    assert text[0] == f"resispec-gguf: loading target {tiny_pair[0]} and draft {tiny_pair[1]} ..."
    assert text[1].startswith("resispec-gguf: checking that this llama.cpp build can load and decode")
    measuring = [line for line in text if "measuring what a decode" in line]
    assert [("the target" in m, "the draft" in m) for m in measuring] == [(True, False), (False, True)], text
    assert all(re.search(r"about \d+ s, more on a busy machine; then cached in ", m) for m in measuring)
    assert any(re.match(r"resispec-gguf: auto: (plain decoding|speculation) likely: a 4-row decode costs "
                        r"[\d.]+x one row", line) for line in text), text
    assert "tokens" in out
    second, _ = _chat(tiny_pair, env)
    text = [line for _, line in second]
    assert text[0].startswith("resispec-gguf: loading target") and not any("measuring" in x for x in text), text
    assert not any("checking that this llama.cpp build" in x for x in text)  # the verdict is cached too
    # the first line comes before any slow work: after Python's and the package's imports only
    # (about 0.3 s on a quiet machine; loose here, where the suite loads the machine)
    assert second[0][0] < 10 and second[0][0] < second[-1][0]
