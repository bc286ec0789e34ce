"""Chat planning (assist/plan.py) on the tiny pair: the prompt and constraint ``plan_chat``
makes of messages, tools and response formats, the option checks that need no model, and
messages checked once per request (in-process and through the server's fields and worker)."""

from __future__ import annotations

import json

import pytest

from resispec_gguf.assist import chat_format, formats, tools
from resispec_gguf.assist.chat_format import MessageError, Messages, check_messages
from resispec_gguf.assist.plan import (ChatOptions, RequestError, answered_calls, check_chat_options, plan_chat,
                                      response_schema)
from resispec_gguf.config import DraftParams, SamplingParams

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
ROUND_TRIP = MSGS + [{"role": "assistant", "content": None, "tool_calls": [CALL]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "5"}]


def test_plain_chat_is_the_chat_prompt_and_no_constraint(engine):
    plan = plan_chat(engine, MSGS)
    assert plan.prompt == engine.chat_tokens(MSGS)
    assert plan.constraint is None and plan.tools is None and plan.format is None
    assert not plan.tools_active and plan.tool_calls('<tool_call>\n{"name": "add"}\n</tool_call>') is None


@pytest.mark.parametrize("response_format,schema", [
    ({"type": "json_object"}, True),
    ({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}, {"type": "integer"}),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, True),
])
def test_response_formats_become_a_json_constraint(engine, response_format, schema):
    assert response_schema(response_format) == schema
    plan = plan_chat(engine, MSGS, response_format=response_format)
    assert plan.prompt == engine.chat_tokens(MSGS) and plan.tools is None
    assert plan.constraint is engine.compile_constraint(json_schema=schema)  # compiled once, cached
    assert plan_chat(engine, MSGS, response_format={"type": "text"}).constraint is None


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "add"}}])
def test_tools_give_the_formats_prompt_and_grammar(engine, choice):
    options = check_chat_options([ADD], choice)
    plan = plan_chat(engine, MSGS, tools=[ADD], tool_choice=choice)
    fmt = engine.tool_format()
    assert isinstance(fmt, formats.GenericFormat)  # the tiny pair's ChatML knows no tools
    msgs, shown = fmt.prepare_messages(check_messages(MSGS), options.tools)
    assert shown is None and fmt.system_text(options.tools) in msgs[0]["content"]
    assert plan.prompt == engine.chat_tokens(msgs, tools=shown)
    assert plan.constraint is engine.compile_constraint(grammar=fmt.grammar(options.tools))
    assert plan.tools_active and plan.format is fmt and plan.tools == options.tools
    # the same plan from options checked beforehand (as the server does)
    assert plan_chat(engine, MSGS, checked=options).prompt == plan.prompt
    reply = 'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    content, calls = plan.tool_calls(reply)
    assert content == "Sure." and [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 2, "b": 3})]


def test_tool_messages_are_rendered_without_tools_on_offer(engine):
    plan = plan_chat(engine, ROUND_TRIP, tools=[ADD], tool_choice="none")
    assert plan.tools is None and plan.constraint is None and not plan.tools_active
    assert plan.format is engine.tool_format()  # it renders the earlier call and its result
    msgs, shown = plan.format.prepare_messages(check_messages(ROUND_TRIP), None)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"] and shown is None
    assert msgs[3]["content"] == "<tool_response>\n5\n</tool_response>"
    assert plan.prompt == engine.chat_tokens(msgs)


def test_options_are_checked_without_a_model():
    bad = [
        (dict(response_format="json"), RequestError, "response_format"),
        (dict(response_format={"type": "xml"}), RequestError, "response_format.type"),
        (dict(response_format={"type": "json_schema"}), RequestError, "response_format.json_schema"),
        (dict(response_format={"type": "json_schema", "json_schema": {"schema": [1]}}), RequestError,
         "response_format.json_schema.schema"),
        (dict(tools=[ADD], tool_choice="sometimes"), tools.ToolError, "tool_choice"),
        (dict(tool_choice="required"), tools.ToolError, "tool_choice"),
        (dict(tools=[ADD], parallel_tool_calls="yes"), tools.ToolError, "parallel_tool_calls"),
    ]
    for kw, error, param in bad:
        with pytest.raises(error) as e:
            check_chat_options(**kw)
        assert e.value.param == param, kw
    none = check_chat_options()
    assert isinstance(none, ChatOptions) and not none.tools.active and none.schema is None
    assert none.constraint_param == "response_format"
    assert check_chat_options([ADD]).constraint_param == "tools"
    # tools=none with a format: the format constrains the reply; with callable tools (once a
    # 400) it is the answer a reply may give instead of calling, under "auto" only
    assert check_chat_options([ADD], "auto", response_format={"type": "json_object"}).final is True
    assert check_chat_options([ADD], "required", response_format={"type": "json_object"}).final is None
    assert check_chat_options([ADD], "none", response_format={"type": "json_object"}).schema is True
    # the legacy spelling: functions and function_call
    legacy = check_chat_options(functions=[ADD["function"]], function_call={"name": "add"})
    assert (legacy.tools.choice, legacy.tools.allowed) == ("required", ["add"])


def test_bad_messages_are_named_after_the_options(engine):
    with pytest.raises(MessageError) as e:
        plan_chat(engine, [{"role": "wizard", "content": "x"}])
    assert e.value.param == "messages[0].role"
    with pytest.raises(tools.ToolError):  # the options first, as the server checks them
        plan_chat(engine, [{"role": "wizard"}], tool_choice="required")


def _count_checks(monkeypatch) -> list:
    """The contents of every message ``check_messages`` validates (not those it passes through)."""
    seen = []
    real = chat_format._check_message

    def counting(m, where):
        seen.append(m.get("content") if isinstance(m, dict) else m)
        return real(m, where)

    monkeypatch.setattr(chat_format, "_check_message", counting)
    return seen


@pytest.mark.parametrize("kw", [{}, {"tools": [ADD]}, {"tools": [ADD], "tool_choice": "none"}])
def test_messages_are_checked_once_per_request_in_process(engine, monkeypatch, kw):
    from resispec_gguf.surfaces.api import create_chat_completion

    seen = _count_checks(monkeypatch)
    create_chat_completion(engine, ROUND_TRIP, stream=True, **kw)  # planned at once, generated when read
    assert seen == [m["content"] for m in ROUND_TRIP]


def test_messages_are_checked_once_per_request_in_the_server(engine, monkeypatch):
    pytest.importorskip("starlette")
    from resispec_gguf.surfaces.server import fields, worker

    body = {"messages": ROUND_TRIP, "tools": [ADD], "tool_choice": "auto"}
    seen = _count_checks(monkeypatch)
    req = fields.parse(body, "chat", SamplingParams(), DraftParams(), engine.max_prompt_bytes, engine.n_ctx)
    assert isinstance(req.prompt, Messages) and seen == [m["content"] for m in ROUND_TRIP]
    plan = worker.prepare(engine, req)  # rendering, tokenizing and the tool format check nothing again
    assert seen == [m["content"] for m in ROUND_TRIP]
    assert plan.prompt == plan_chat(engine, ROUND_TRIP, tools=[ADD]).prompt


ANSWER = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}
TYPED = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}}


def test_tools_with_a_response_format_are_calls_or_the_answer(engine):
    """As agent frameworks ask for a typed output: under "auto" one grammar whose first token
    chooses a call or the answer's JSON (no free text); "required" is calls only, "none" the
    schema only."""
    fmt = engine.tool_format()
    plan = plan_chat(engine, MSGS, tools=[ADD], response_format=TYPED)
    req = check_chat_options([ADD]).tools
    text = fmt.grammar(req, ANSWER)
    start = text.splitlines()[0]
    # a bare call object (how Qwen2.5 models write calls) may stand in the answer's place
    assert start == 'start: "<tool_call>" body | final | call_body' and "final: %json" in text and '"sum"' in text
    assert "TEXT" not in text and text.count("call_body: %json") == 1
    assert plan.constraint is engine.compile_constraint(grammar=text) and plan.final == ANSWER
    parallel = plan_chat(engine, MSGS, tools=[ADD], response_format=TYPED, parallel_tool_calls=True)
    assert parallel.constraint is engine.compile_constraint(grammar=fmt.grammar(check_chat_options(
        [ADD], parallel_tool_calls=True).tools, ANSWER))
    assert 'body: "\\n" call_body "\\n" "</tool_call>" ("\\n" call)*' in fmt.grammar(
        check_chat_options([ADD], parallel_tool_calls=True).tools, ANSWER)
    any_object = fmt.grammar(req, True)
    assert '"type": "object"' in any_object.split("final: %json", 1)[1]
    required = plan_chat(engine, MSGS, tools=[ADD], tool_choice="required", response_format=TYPED)
    assert required.final is None
    assert required.constraint is engine.compile_constraint(grammar=fmt.grammar(check_chat_options(
        [ADD], "required").tools))
    none = plan_chat(engine, MSGS, tools=[ADD], tool_choice="none", response_format=TYPED)
    assert none.constraint is engine.compile_constraint(json_schema=ANSWER) and not none.tools_active


def test_calls_or_the_answer_are_read_back_alike_streamed_or_not(engine):
    plan = plan_chat(engine, MSGS, tools=[ADD], response_format=TYPED)
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    bare = '{"name": "add", "arguments": {"a": 2, "b": 3}}'  # a call written as the object alone
    unknown = '{"name": "mul", "arguments": {"a": 2, "b": 3}}'  # no offered function: the answer
    for text, calls in [(call, [("add", {"a": 2, "b": 3})]), ('{"sum": 5}', None), (bare, [("add", {"a": 2, "b": 3})]),
                        (" " + bare, [("add", {"a": 2, "b": 3})]), (unknown, None), (bare[:-9], None),
                        ('{"sum": 5, "note": "<tool_call>"}', None), ("<tool_call>\n{\"name\": \"ad", None)]:
        parsed = plan.tool_calls(text)
        assert ([(c.name, json.loads(c.arguments)) for c in parsed[1]] if parsed else None) == calls, text
        stream = plan.tool_stream()
        out = "".join(stream.push(text[i:i + 3]) for i in range(0, len(text), 3))
        rest, streamed = stream.finish(text)
        assert (out + rest) == (parsed[0] if parsed else text)
        assert (streamed is None) == (parsed is None)
        if calls is None and text in ('{"sum": 5}', unknown, '{"sum": 5, "note": "<tool_call>"}'):
            assert out == text  # the answer streams as text once its opening rules a call out
        if text == bare[:-9]:
            assert out == ""  # a call object cut short is held back to the end, then is content


def test_a_bare_call_object_may_stand_in_the_answers_place(engine):
    """Under tools with a typed output the grammar takes a call written as the object alone
    (naming an offered function, its arguments under the schema) as well as the answer."""
    from resispec_gguf.kernels.sampling import mask_allows

    plan = plan_chat(engine, MSGS, tools=[ADD], response_format=TYPED)

    def follows(text):
        state = plan.constraint.start()
        for t in engine.target.tokenize(text, add_special=False, parse_special=True):
            if not mask_allows(state.mask([]), t):
                return False
            state.advance([t])
        return state.is_stopped() or mask_allows(state.mask([]), engine.target.eos)

    assert follows('{"name": "add", "arguments": {"a": 2, "b": 3}}')
    assert follows('{"sum": 5}')
    assert not follows('{"name": "mul", "arguments": {"a": 2, "b": 3}}')
    assert not follows('{"name": "add", "arguments": {"a": "two", "b": 3}}')
    # right after a tool result a JSON object is the answer (small models repeat the call
    # there); a further call needs the marker
    result = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}]
    after = plan_chat(engine, result, tools=[ADD], response_format=TYPED)
    assert after.constraint is engine.compile_constraint(grammar=engine.tool_format().grammar(
        check_chat_options([ADD]).tools, ANSWER, bare=False))
    assert after.tool_calls('{"name": "add", "arguments": {"a": 2, "b": 3}}') is None
    assert after.tool_calls('<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>')


def _read(plan, text, size=None):
    """``(content, [(name, arguments)] or None)`` of a finished reply, or streamed ``size``
    characters at a time."""
    if size is None:
        parsed = plan.tool_calls(text)
        content, calls = parsed if parsed else (text, None)
    else:
        stream = plan.tool_stream()
        out = "".join(stream.push(text[i:i + size]) for i in range(0, len(text), size))
        rest, calls = stream.finish(text)
        content = out + rest
    return content.strip(), calls and [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("size", [None, 1, 5])
def test_right_after_tool_results_a_reply_repeating_the_answered_calls_is_text(engine, size):
    """Under "auto" with a text answer: small models answer a tool result by making the same
    call again, which an agent framework would run again, and again."""
    # equal arguments (a null member counts as one left out)
    again = '<tool_call>\n{"name": "add", "arguments": {"b": 3, "a": 2, "c": null}}\n</tool_call>'
    other = '<tool_call>\n{"name": "add", "arguments": {"a": 5, "b": 1}}\n</tool_call>'
    after = plan_chat(engine, ROUND_TRIP, tools=[ADD], tool_choice="auto")
    assert after.answered == (("add", {"a": 2, "b": 3}),)
    assert _read(after, again, size) == (again, None)
    assert _read(after, "So:\n" + other, size) == ("So:", [("add", {"a": 5, "b": 1})])
    both = '{"name": "add", "arguments": {"a": 2, "b": 3}}\n{"name": "add", "arguments": {"a": 5, "b": 1}}'
    parallel = plan_chat(engine, ROUND_TRIP, tools=[ADD], tool_choice="auto", parallel_tool_calls=True)
    assert _read(parallel, both, size)[1] == [("add", {"a": 2, "b": 3}), ("add", {"a": 5, "b": 1})]
    # the first turn, a forced call, and a typed answer read calls as always
    for plan in (plan_chat(engine, MSGS, tools=[ADD], tool_choice="auto"),
                 plan_chat(engine, ROUND_TRIP, tools=[ADD], tool_choice="required"),
                 plan_chat(engine, ROUND_TRIP, tools=[ADD], response_format=TYPED)):
        assert not plan.answered or plan.final is not None
        assert _read(plan, again, size)[1] == [("add", {"a": 2, "b": 3, "c": None})]


def test_the_answered_calls_are_those_the_trailing_tool_results_answer():
    first = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "sub", "arguments": {"a": 1}}}]}
    last = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 2}}},
        {"id": "c2", "type": "function", "function": {"name": "mul", "arguments": {}}}]}
    results = [{"role": "tool", "tool_call_id": "c1", "content": "x"}, {"role": "tool", "tool_call_id": "c2",
                                                                        "content": "y"}]
    assert answered_calls(MSGS + [first, results[0], last] + results) == (("add", {"a": 2}), ("mul", {}))
    assert answered_calls(MSGS + [last] + results + [{"role": "user", "content": "and?"}]) == ()
    assert answered_calls(MSGS) == () and answered_calls([]) == ()
