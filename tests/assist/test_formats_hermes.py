"""The Hermes / Qwen2.5 format (``formats.hermes``) on a tiny GGUF with a Qwen2.5-style
template: detection, rendering, a forced call, a lazy call from each opening models use
(``<tool_call>``, a fenced json block, a bare object), a parallel call, parsing and streaming;
and the same with the markers as plain text rather than special tokens."""

from __future__ import annotations

import pytest
from tool_formats import (ADD, CALLS, EXPECTED, HISTORY, MSGS, TOOLS, as_pairs, family_engine, follows,
                          forced_calls, prompt_text, streamed, tokens, valid_call)

from resispec_gguf.assist.formats import HermesFormat
from resispec_gguf.assist.plan import plan_chat

pytest.importorskip("jsonschema")

CALL = '{"name": "add", "arguments": {"a": 2, "b": 3}}'
BAD = '{"name": "add", "arguments": {"a": "two"'


@pytest.fixture(scope="module", params=[True, False], ids=["special", "text"])
def engine(tmp_path_factory, request):
    with family_engine(tmp_path_factory, "hermes", special=request.param) as e:
        yield e


def test_the_template_names_the_format(engine):
    fmt = engine.tool_format()
    assert type(fmt) is HermesFormat and fmt.native
    assert set(fmt.special) in ({"<tool_call>", "</tool_call>"}, set())


def test_the_template_renders_tools_calls_and_results(engine):
    text = prompt_text(engine, plan_chat(engine, HISTORY, tools=TOOLS))
    assert '"name": "get_weather"' in text and "<tools>" in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}' in text
    assert "<tool_response>\n12 C, clear\n</tool_response>" in text


def test_a_forced_call_names_an_offered_function_with_valid_arguments(engine):
    replies = forced_calls(engine)
    assert replies and all(calls and len(calls) == 1 and valid_call(calls[0]) for calls in replies)
    named = forced_calls(engine, {"type": "function", "function": {"name": "add"}})
    assert named and all(calls and [c.name for c in calls] == ["add"] for calls in named)


# the openings models use, and the closing each needs; "{" a call in doubled braces, as
# Qwen2.5's template shows the call syntax ({{"name": ..., "arguments": ...}})
OPENINGS = {"<tool_call>\n": "\n</tool_call>", "```json\n": "\n```", "": "", "{": "}", "```json\n{": "}\n```"}


@pytest.mark.parametrize("opening", list(OPENINGS), ids=["marker", "fenced", "bare", "doubled", "fenced-doubled"])
def test_a_lazy_call_is_free_text_until_its_opening_then_constrained(engine, opening):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto")
    close = OPENINGS[opening]
    assert follows(plan.constraint, tokens(engine, "Any text {at all}.\n" + opening + CALL + close))
    assert not follows(plan.constraint, tokens(engine, "Let me add.\n" + opening + BAD))
    assert plan.tool_calls("Let me add.\n" + opening + CALL + close)[1][0].name == "add"


def test_what_the_grammar_lets_through_after_a_call_object_is_what_is_read_back(engine):
    """Only the blanks the JSON scanner skips (never a Unicode space such as U+205F) before a
    fence's close, and a doubled call's closing brace right after the object: a reply the
    grammar let through is read as the call."""
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    for text in (f"```json\n{CALL}\n \t```", "{" + CALL + "}", f"{CALL}\n\n{CALL}"):
        assert follows(plan.constraint, tokens(engine, text)) and plan.tool_calls(text)[1][0].name == "add"
    for text in (f"```json\n{CALL}\u205f```", "{" + CALL + " }", "{" + CALL + "\n}", f"{CALL}\u205f{CALL}"):
        assert not follows(plan.constraint, tokens(engine, text)), text


def test_json_that_calls_no_offered_function_stays_free_text(engine):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto")
    text = 'A person:\n{"name": "Bob", "age": "x"}\nand mid-line {"name": "add", "arguments": 7}'
    assert follows(plan.constraint, tokens(engine, text))
    assert plan.tool_calls(text) is None


def test_parallel_calls(engine):
    replies = forced_calls(engine, parallel=True)
    assert replies and all(calls and all(valid_call(c) for c in calls) for calls in replies)
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    fmt = engine.tool_format()
    two = fmt.write_calls(CALLS)
    assert follows(plan.constraint, tokens(engine, "Both.\n" + two))
    assert follows(plan.constraint, tokens(engine, f"Both.\n```json\n{CALL}\n```\n```json\n{CALL}\n```"))
    assert as_pairs(plan.tool_calls("Both.\n" + two)[1]) == EXPECTED


def test_parsing_reads_back_what_the_format_writes():
    fmt = HermesFormat()
    content, calls = fmt.parse("I'll check.\n" + fmt.write_calls(CALLS), ["get_weather", "add"])
    assert content == "I'll check." and as_pairs(calls) == EXPECTED
    assert fmt.parse("<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>", ["add"]) is None


@pytest.mark.parametrize("size", [1, 4, 9])
def test_streamed_deltas_read_as_the_unstreamed_reply(engine, size):
    plan = plan_chat(engine, MSGS, tools=[*TOOLS, ADD][:2], tool_choice="auto", parallel_tool_calls=True)
    for text in ["I'll check.\n" + engine.tool_format().write_calls(CALLS), f"Sure:\n```json\n{CALL}\n```",
                 "No call here, {\"name\": \"x\"} is text.", f"Sure:\n{{{CALL}}}", f"Cut:\n{{{CALL}"]:
        content, calls = streamed(plan, text, size)
        whole = plan.tool_calls(text)
        assert (content.strip(), calls and as_pairs(calls)) == ((whole[0], as_pairs(whole[1])) if whole
                                                                 else (text.strip(), None))
