"""scripts/ram_cache_ttft.py (the RAM prompt cache's time-to-first-token figure): on the
tiny pair, the timed request reuses its whole prompt but its last token with the cache on
and only what the evicting prompt shares with it off.  Never a speed."""

from __future__ import annotations


import pytest

pytest.importorskip("llama_cpp")

from script_loader import load_script
rct = load_script("ram_cache_ttft")


def test_the_timed_prompt_comes_back_from_ram_only_with_the_cache_on(tiny_pair):
    from resispec_gguf.config import DraftParams
    from resispec_gguf.engine import Engine

    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=256, n_threads=1, flash_attn=False, n_slots=2,
                     cache_ram_mib=16, progress=False) as engine:
        prompts = [engine.target.tokenize(t) for t in
                   ("def fibonacci(n): return the n-th Fibonacci number, iteratively and fast, for any n",
                    "Once upon a time, in a land far away, there lived a king who had three daughters and")]
        rows = rct.measure(engine, prompts, 2, DraftParams(method="chain"))
    assert [(x["round"], x["prompt"], x["mode"]) for x in rows] == [
        (0, 0, "off"), (0, 0, "on"), (0, 1, "off"), (0, 1, "on"),
        (1, 0, "on"), (1, 0, "off"), (1, 1, "on"), (1, 1, "off")]
    for x in rows:
        assert x["reused"] == (x["prompt_tokens"] - 1 if x["mode"] == "on" else 1), x  # off: BOS alone
    s = rct.summary(rows)
    assert s["reused_on"] == s["prompt_tokens"] - 1 and s["reused_off"] == 1 and s["ratio"] > 0
