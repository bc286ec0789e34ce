"""``bench.inputs``: prompt files with tool requests, the order a workload's items
run in (a tool loop method by method), a sequence started cold, ``-n`` against
the items' own budgets, and a plan's own constraint when bench adds none."""

from __future__ import annotations

import json

import pytest

from resispec_gguf.errors import UserError
from resispec_gguf.bench import inputs
from resispec_gguf.bench import measure as bench
from resispec_gguf.bench import workloads

ITEMS = workloads.WORKLOADS["agent"]


def test_a_prompt_file_may_hold_tool_requests(tmp_path):
    f = tmp_path / "loop.jsonl"
    f.write_text("".join(json.dumps(item) + "\n" for item in ITEMS[:2]), encoding="utf-8")
    back = bench.parse_prompts(str(f))
    assert back == ITEMS[:2] and bench.is_sequential(back)
    bad = dict(ITEMS[0], tools=[{"type": "function", "function": {"name": "bad name"}}])
    f.write_text(json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"loop.jsonl:1: .*tools\[0\]"):
        bench.parse_prompts(str(f))
    f.write_text(json.dumps(dict(ITEMS[0], max_tokens=0)) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="max_tokens must be a whole number >= 1"):
        bench.parse_prompts(str(f))


def test_run_order_interleaves_or_runs_each_variant_s_sequence():
    assert inputs.run_order(2, 2, False) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert inputs.run_order(2, 2, True) == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert inputs.is_sequential(ITEMS) and not inputs.is_sequential(workloads.WORKLOADS["chat"])
    assert not inputs.is_sequential([])
    inputs.forget(object())  # an engine without a memory: nothing to empty


def test_without_max_tokens_lets_the_command_line_set_every_reply():
    stripped = bench.without_max_tokens({"agent": ITEMS})["agent"]
    assert all("max_tokens" not in item for item in stripped) and all("max_tokens" in item for item in ITEMS)


def test_forget_starts_a_sequence_cold_on_the_tiny_pair(engine):
    """The models' caches and the RAM prompt cache emptied: the next prompt is prefilled whole."""
    from resispec_gguf.config import DraftParams, SamplingParams
    from resispec_gguf.decoding.promptcache import PromptCache

    prompt = engine.text_tokens("A prompt the models will hold.")
    sp = SamplingParams(temperature=0.0, max_tokens=2, seed=0)
    engine.generate(prompt, sp, DraftParams(method="chain"))
    assert engine.generate(prompt, sp, DraftParams(method="chain")).stats.prompt_reused == len(prompt) - 1
    ram = PromptCache(1 << 20)
    ram.put("target", [1] * 64, b"state", 5)
    engine.prompt_cache, saved = ram, engine.prompt_cache
    try:
        inputs.forget(engine)  # the tiny pair's engine keeps no memory (yet): the rest still goes
    finally:
        engine.prompt_cache = saved
    assert len(ram) == 0 and ram.used_bytes == 0
    assert engine.generate(prompt, sp, DraftParams(method="chain")).stats.prompt_reused == 0


def test_a_plan_s_own_constraint_runs_unless_bench_gives_one():
    class Plan:
        constraint = "tools grammar"

        def constrain(self, inner):
            return ("after thinking", inner)

    assert inputs.as_run(Plan(), None) == "tools grammar"
    assert inputs.as_run(Plan(), "schema") == ("after thinking", "schema")
    assert inputs.as_run(None, "schema") == "schema"
