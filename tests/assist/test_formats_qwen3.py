"""The Qwen3 / QwQ format (``formats.qwen3``) on a tiny GGUF with a Qwen3-style template
(Hermes calls, ``<think>`` reasoning): detection, rendering, a forced call, a lazy call, a
parallel call, parsing and streaming — Hermes' behaviour, with the thinking markers named for
the reasoning support."""

from __future__ import annotations

import pytest
from tool_formats import (CALLS, EXPECTED, HISTORY, MSGS, TOOLS, as_pairs, check_parallel_grammar, family_engine,
                          follows, forced_calls,
                          prompt_text, streamed, tokens, valid_call)

from resispec_gguf.assist.formats import Qwen3Format
from resispec_gguf.assist.plan import plan_chat

pytest.importorskip("jsonschema")

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with family_engine(tmp_path_factory, "qwen3") as e:
        yield e


def test_the_template_names_the_format(engine):
    fmt = engine.tool_format()
    assert type(fmt) is Qwen3Format and fmt.native and fmt.reasoning == ("<think>", "</think>")
    assert set(fmt.special) == {"<tool_call>", "</tool_call>"}


def test_the_template_renders_tools_calls_and_results(engine):
    text = prompt_text(engine, plan_chat(engine, HISTORY, tools=TOOLS))
    assert "<tools>" in text and '<tool_call>\n{"name": "get_weather"' in text and "<tool_response>" in text


def test_a_forced_call_names_an_offered_function_with_valid_arguments(engine):
    replies = forced_calls(engine)
    assert replies and all(calls and len(calls) == 1 and valid_call(calls[0]) for calls in replies)


def test_a_lazy_call_is_free_text_until_its_opening_then_constrained(engine):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto")
    assert follows(plan.constraint, tokens(engine, "Let me add.\n" + CALL))
    assert follows(plan.constraint, tokens(engine, '```json\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n```'))
    bad = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": "'
    assert not follows(plan.constraint, tokens(engine, bad))
    assert as_pairs(plan.tool_calls("Let me add.\n" + CALL)[1]) == [("add", {"a": 2, "b": 3})]


def test_parallel_calls(engine):
    check_parallel_grammar(engine, single_choice=None)


def test_parsing_reads_back_what_the_format_writes():
    fmt = Qwen3Format()
    assert as_pairs(fmt.parse(fmt.write_calls(CALLS), ["get_weather", "add"])[1]) == EXPECTED


@pytest.mark.parametrize("size", [1, 5])
def test_streamed_deltas_read_as_the_unstreamed_reply(engine, size):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    text = "Both.\n" + engine.tool_format().write_calls(CALLS)
    content, calls = streamed(plan, text, size)
    assert content.strip() == "Both." and as_pairs(calls) == EXPECTED
