"""The generic fallback (``formats.generic``): a template that knows no tools (the tiny
pair's ChatML) gets the tool list and the ``<tool_call>`` syntax in a system message, and
earlier calls and results as text; calls are constrained and read as Hermes'.  Also: any
family on such a template writes its own syntax into that message (``--tool-format``)."""

from __future__ import annotations

import pytest
from tool_formats import (CALLS, EXPECTED, HISTORY, MSGS, TOOLS, as_pairs, family_engine, follows, forced_calls,
                          tokens, valid_call)

from resispec_gguf.assist import formats
from resispec_gguf.assist.chat_format import check_messages
from resispec_gguf.assist.plan import check_chat_options, plan_chat

pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with family_engine(tmp_path_factory, "generic") as e:
        yield e


def test_a_template_without_tools_gets_the_generic_format(engine):
    fmt = engine.tool_format()
    assert type(fmt) is formats.GenericFormat and not fmt.native


def test_tools_calls_and_results_are_written_as_text():
    req = check_chat_options(TOOLS).tools
    msgs, shown = formats.GenericFormat().prepare_messages(check_messages(HISTORY), req)
    assert shown is None and msgs[0]["role"] == "system" and "<tool_call>" in msgs[0]["content"]
    assert msgs[2]["content"] == formats.GenericFormat().write_calls(
        [{**CALLS[0], "function": {**CALLS[0]["function"]}}])
    assert msgs[3] == {"role": "user", "content": "<tool_response>\n12 C, clear\n</tool_response>"}


@pytest.mark.parametrize("name", ["llama3", "mistral", "deepseek_r1"])
def test_each_family_describes_its_own_syntax_to_a_template_without_tools(name):
    fmt = formats.FORMATS[name](native=False)
    msgs, _ = fmt.prepare_messages(check_messages(HISTORY), check_chat_options(TOOLS).tools)
    assert fmt.example in msgs[0]["content"] and as_pairs(fmt.parse(msgs[2]["content"], ["get_weather"])[1]) == \
        EXPECTED[:1]


def test_forced_and_lazy_calls(engine):
    replies = forced_calls(engine)
    assert replies and all(calls and len(calls) == 1 and valid_call(calls[0]) for calls in replies)
    plan = plan_chat(engine, MSGS, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    two = engine.tool_format().write_calls(CALLS)
    assert follows(plan.constraint, tokens(engine, "Both.\n" + two))
    assert as_pairs(plan.tool_calls("Both.\n" + two)[1]) == EXPECTED
