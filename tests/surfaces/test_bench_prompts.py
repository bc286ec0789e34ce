"""``surfaces.bench_prompts``: prompt files with tool requests, the order a workload's items
run in (a tool loop method by method), the memory emptied before a sequence, ``-n`` against
the items' own budgets, and a plan's own constraint when bench adds none."""

from __future__ import annotations

import json

import pytest

from resispec_gguf.errors import UserError
from resispec_gguf.surfaces import bench, bench_prompts, workloads

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
    assert bench_prompts.run_order(2, 2, False) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert bench_prompts.run_order(2, 2, True) == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert bench_prompts.is_sequential(ITEMS) and not bench_prompts.is_sequential(workloads.WORKLOADS["chat"])
    assert not bench_prompts.is_sequential([])
    bench_prompts.forget(object())  # an engine without a memory: nothing to empty


def test_without_max_tokens_lets_the_command_line_set_every_reply():
    stripped = bench.without_max_tokens({"agent": ITEMS})["agent"]
    assert all("max_tokens" not in item for item in stripped) and all("max_tokens" in item for item in ITEMS)


def test_forget_empties_the_memory_the_engine_keeps():
    cleared = []

    class Engine:
        memory = type("Memory", (), {"clear": lambda self: cleared.append(1)})()

    bench_prompts.forget(Engine())
    assert cleared == [1]


def test_a_plan_s_own_constraint_runs_unless_bench_gives_one():
    class Plan:
        constraint = "tools grammar"

        def constrain(self, inner):
            return ("after thinking", inner)

    assert bench_prompts.as_run(Plan(), None) == "tools grammar"
    assert bench_prompts.as_run(Plan(), "schema") == ("after thinking", "schema")
    assert bench_prompts.as_run(None, "schema") == "schema"
