"""The DeepSeek-R1 format (``formats.deepseek_r1``) on a tiny GGUF with an R1-style template
(``<｜tool▁calls▁begin｜>`` … ``<｜tool▁calls▁end｜>``, each call's arguments in a fenced json
block): detection, rendering, a forced call, a lazy call, a parallel call, parsing and
streaming, and the reasoning markers it names for the reasoning support."""

from __future__ import annotations

import pytest
from tool_formats import (CALLS, EXPECTED, HISTORY, MSGS, TOOLS, as_pairs, check_parallel_grammar, family_engine,
                          follows, forced_calls,
                          prompt_text, streamed, tokens, valid_call)

from resispec_gguf.assist.formats import DeepSeekR1Format
from resispec_gguf.assist.plan import plan_chat

pytest.importorskip("jsonschema")

CALL = ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{"a": 2, "b": 3}\n```'
        '<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
BAD = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{"a": "two"'


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with family_engine(tmp_path_factory, "deepseek_r1") as e:
        yield e


def test_the_template_names_the_format(engine):
    fmt = engine.tool_format()
    assert type(fmt) is DeepSeekR1Format and fmt.native and fmt.reasoning == ("<think>", "</think>")
    assert {"<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>"} <= set(fmt.special)


def test_the_template_renders_tools_calls_and_results(engine):
    text = prompt_text(engine, plan_chat(engine, HISTORY, tools=TOOLS))
    assert '"name": "add"' in text
    assert ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
            '{"city": "Oslo", "unit": "c"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>') in text
    assert "<｜tool▁output▁begin｜>12 C, clear<｜tool▁output▁end｜>" in text


def test_a_forced_call_names_an_offered_function_with_valid_arguments(engine):
    replies = forced_calls(engine)
    assert replies and all(calls and len(calls) == 1 and valid_call(calls[0]) for calls in replies)


def test_a_lazy_call_is_free_text_until_the_marker_then_constrained(engine):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto")
    assert follows(plan.constraint, tokens(engine, "Any text ```json\n{}\n``` at all. " + CALL))
    assert not follows(plan.constraint, tokens(engine, "Adding. " + BAD))
    content, calls = plan.tool_calls("Adding. " + CALL)
    assert content == "Adding." and as_pairs(calls) == [("add", {"a": 2, "b": 3})]


def test_parallel_calls(engine):
    check_parallel_grammar(engine)


def test_parsing_reads_back_what_the_format_writes():
    fmt = DeepSeekR1Format()
    content, calls = fmt.parse("Both. " + fmt.write_calls(CALLS), ["get_weather", "add"])
    assert content == "Both." and as_pairs(calls) == EXPECTED
    assert fmt.parse(CALL, ["get_weather"]) is None and fmt.parse(CALL[:-20], ["add"]) is None


@pytest.mark.parametrize("size", [1, 4, 9])
def test_streamed_deltas_read_as_the_unstreamed_reply(engine, size):
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    for text in ["Both. " + engine.tool_format().write_calls(CALLS), "No call <｜tool here.", CALL[:40]]:
        content, calls = streamed(plan, text, size)
        whole = plan.tool_calls(text)
        assert (content.strip(), calls and as_pairs(calls)) == ((whole[0], as_pairs(whole[1])) if whole
                                                                 else (text.strip(), None))
