"""The Llama 3.x format (``formats.llama3``) on a tiny GGUF with a Llama-3.1-style template
(``ipython`` role, ``<|python_tag|>``, ``<|eom_id|>``/``<|eot_id|>``): detection, rendering,
a forced call, a lazy call (a reply that opens with the call's JSON), a parallel call,
parsing and streaming."""

from __future__ import annotations

import pytest
from tool_formats import (CALLS, EXPECTED, HISTORY, MSGS, TOOLS, as_pairs, family_engine, follows, forced_calls,
                          prompt_text, streamed, tokens, valid_call)

from resispec_gguf.assist.formats import Llama3Format
from resispec_gguf.assist.plan import plan_chat

pytest.importorskip("jsonschema")

CALL = '{"name": "add", "parameters": {"a": 2, "b": 3}}'
BAD = '{"name": "add", "parameters": {"a": "two"'


@pytest.fixture(scope="module", params=[True, False], ids=["special", "text"])
def engine(tmp_path_factory, request):
    with family_engine(tmp_path_factory, "llama3", special=request.param) as e:
        yield e


def test_the_template_names_the_format(engine):
    fmt = engine.tool_format()
    assert type(fmt) is Llama3Format and fmt.native and set(fmt.special) in ({"<|python_tag|>"}, set())


def test_a_call_ends_the_turn_at_eom_or_eot(engine):
    """llama.cpp knows both by their text as end-of-generation tokens: a reply ends there."""
    if not engine.tool_format().special:
        pytest.skip("a vocabulary without Llama's special tokens")
    for marker in ("<|eom_id|>", "<|eot_id|>"):
        (token,) = tokens(engine, marker)
        assert engine.target.is_eog(token)


def test_the_template_renders_tools_calls_and_results_in_the_ipython_role(engine):
    text = prompt_text(engine, plan_chat(engine, HISTORY, tools=TOOLS))
    assert "Environment: ipython" in text and '"name": "add"' in text
    assert '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "c"}}<|eom_id|>' in text
    assert "<|start_header_id|>ipython<|end_header_id|>\n\n12 C, clear<|eot_id|>" in text


def test_a_forced_call_names_an_offered_function_with_valid_arguments(engine):
    replies = forced_calls(engine)
    assert replies and all(calls and len(calls) == 1 and valid_call(calls[0]) for calls in replies)
    named = forced_calls(engine, {"type": "function", "function": {"name": "add"}})
    assert named and all(calls and [c.name for c in calls] == ["add"] for calls in named)


def test_a_lazy_call_opens_at_the_start_of_the_reply(engine):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto")
    assert follows(plan.constraint, tokens(engine, CALL))
    assert follows(plan.constraint, tokens(engine, "<|python_tag|>" + CALL))
    assert not follows(plan.constraint, tokens(engine, BAD))
    assert as_pairs(plan.tool_calls(" " + CALL)[1]) == [("add", {"a": 2, "b": 3})]
    prose = 'Sure. In JSON: {"name": "add", "parameters": "anything"}'
    assert follows(plan.constraint, tokens(engine, prose)) and plan.tool_calls(prose) is None
    assert follows(plan.constraint, tokens(engine, '{"name": "Bob", "age": 3}'))


def test_parallel_calls(engine):
    """(On the tiny random model, replies under a forced parallel grammar rarely end: it keeps
    adding calls; the grammar is checked on given replies.)"""
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    two = engine.tool_format().write_calls(CALLS)
    assert follows(plan.constraint, tokens(engine, two)) and follows(plan.constraint, tokens(engine, f"{CALL}; {CALL}"))
    assert as_pairs(plan.tool_calls(two)[1]) == EXPECTED
    single = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto")
    assert not follows(single.constraint, tokens(engine, two))


def test_parsing_reads_back_what_the_format_writes():
    fmt = Llama3Format()
    content, calls = fmt.parse(fmt.write_calls(CALLS), ["get_weather", "add"])
    assert content == "" and as_pairs(calls) == EXPECTED
    assert as_pairs(fmt.parse("<|python_tag|>" + CALL, ["add"])[1]) == [("add", {"a": 2, "b": 3})]
    assert fmt.parse(CALL, ["get_weather"]) is None and fmt.parse("Text first. " + CALL, ["add"]) is None


@pytest.mark.parametrize("size", [1, 4, 9])
def test_streamed_deltas_read_as_the_unstreamed_reply(engine, size):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    for text in [engine.tool_format().write_calls(CALLS), "{not a call", 'Text, then {"name": "add"}.']:
        content, calls = streamed(plan, text, size)
        whole = plan.tool_calls(text)
        assert (content.strip(), calls and as_pairs(calls)) == ((whole[0], as_pairs(whole[1])) if whole
                                                                 else (text.strip(), None))


def test_with_a_typed_output_a_call_opens_with_the_python_tag(engine):
    """The answer is JSON too: the first token tells a call from the answer."""
    typed = {"type": "json_schema", "json_schema": {"name": "Sum", "schema": {
        "type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"],
        "additionalProperties": False}}}
    plan = plan_chat(engine, MSGS, tools=TOOLS, response_format=typed)
    assert follows(plan.constraint, tokens(engine, "<|python_tag|>" + CALL))
    assert follows(plan.constraint, tokens(engine, '{"sum": 5}')) and not follows(plan.constraint, tokens(engine, CALL))
    assert as_pairs(plan.tool_calls("<|python_tag|>" + CALL)[1]) == [("add", {"a": 2, "b": 3})]
    assert plan.tool_calls('{"sum": 5}') is None
