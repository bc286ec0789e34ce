"""scripts/cold_ttft.py (uncached prompts arriving together against their bound): on the tiny
pair, prompts that fit one chunk are prefilled by one decode and all get their first token
in the first step; the figures are complete.  Never a speed."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")

from script_loader import load_script
ct = load_script("cold_ttft")


@pytest.mark.parametrize("method", ["none", "chain"])
def test_prompts_that_fit_one_chunk_start_together(tiny_pair, method):
    from resispec_gguf.config import DraftParams
    from resispec_gguf.engine import Engine

    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=256, n_threads=1, flash_attn=False, n_slots=3,
                     cache_ram_mib=16, progress=False) as engine:
        prompts = [engine.target.tokenize(t) for t in ("def fibonacci(n):", "Once upon a time", "The list: 1, 2, 3")]
        rows = ct.measure(engine, prompts, 2, DraftParams(method=method), chunk=32)
        assert engine.target.slot_tokens(0) == []  # the chunk's decode left nothing behind
    for x in rows:
        assert x["first_step"] == [1, 1, 1], x
        assert len(x["together"]) == len(x["alone"]) == len(x["bound"]) == 3
        assert all(b == pytest.approx(a + x["chunk"] + x["step"]) for a, b in zip(x["alone"], x["bound"]))
        assert x["chunk"] > 0 and x["step"] > 0
    s = ct.summary(rows)
    assert s["requests"] == 6 and 0 <= s["within"] <= 6 and s["together_p95"] >= s["together_p50"] > 0


def test_bad_counts_are_one_line_and_exit_2(capsys):
    assert ct.main(["--prompts", "0"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_the_report_names_every_figure():
    rows = [{"together": [1.0, 2.0], "alone": [0.5, 0.6], "bound": [3.0, 3.1], "chunk": 2.0, "step": 0.5,
             "first_step": [1, 1], "prompt_tokens": [10, 12]}]
    text = ct.report(rows, ct.summary(rows), "chat", "none")
    assert "2 uncached prompts (10, 12 tokens)" in text and "within their bound: 2 of 2" in text
    assert "p95 1.950 s" in text and "one chunk 2.000 s, one step 0.500 s" in text
