"""Tool calls, JSON schemas and grammars: the tool-format unit (no model): checks of tools,
tool choices and tool messages, Hermes parsing and streaming, calls written as JSON alone,
local references rebased, and every format's stream against its unstreamed reply.  The
llguidance adapter on the tiny GGUF pair is in test_tools_engine.py, the server end to end in
test_tools_server.py."""

from __future__ import annotations

import json

import pytest

from resispec_gguf.surfaces import shapes
from resispec_gguf.assist import formats, tools

from tool_cases import ADD, WEATHER


# ---------------------------------------------------------------------------------- the unit


def test_tool_checks_name_the_field():
    bad = [
        ("tools", {"x": 1}, "tools"),
        ("tools", [5], "tools[0]"),
        ("tools", [{"type": "retrieval"}], "tools[0].type"),
        ("tools", [{"type": "function"}], "tools[0].function"),
        ("tools", [{"type": "function", "function": {"name": "bad name!"}}], "tools[0].function.name"),
        ("tools", [WEATHER, WEATHER], "tools[1].function.name"),
        ("tools", [{"type": "function", "function": {"name": "f", "parameters": []}}], "tools[0].function.parameters"),
    ]
    for _, value, param in bad:
        with pytest.raises(tools.ToolError) as e:
            tools.check_tools(value)
        assert e.value.param == param
    fns = tools.check_tools([WEATHER, ADD])
    for choice, param in [("sometimes", "tool_choice"), ({"type": "function", "function": {"name": "nope"}},
                                                         "tool_choice.function.name"), (7, "tool_choice")]:
        with pytest.raises(tools.ToolError) as e:
            tools.check_tool_choice(choice, fns)
        assert e.value.param == param
    with pytest.raises(tools.ToolError):
        tools.check_tool_choice("required", [])
    assert tools.check_tool_choice(None, fns).choice == "auto"
    named = tools.check_tool_choice({"type": "function", "function": {"name": "add"}}, fns)
    assert (named.choice, named.allowed) == ("required", ["add"])


def test_allowed_tools_limits_what_may_be_called():
    """OpenAI's newer tool_choice shape: a mode and the functions that may be called."""
    fns = tools.check_tools([WEATHER, ADD])
    spec = {"mode": "required", "tools": [{"type": "function", "function": {"name": "add"}}]}
    req = tools.check_tool_choice({"type": "allowed_tools", "allowed_tools": spec}, fns)
    assert (req.choice, req.allowed, req.active) == ("required", ["add"], True)
    req = tools.check_tool_choice({"type": "allowed_tools", "allowed_tools": {**spec, "mode": "auto"}}, fns, True)
    assert (req.choice, req.allowed, req.parallel) == ("auto", ["add"], True)
    for bad, param in [({"mode": "sometimes", "tools": spec["tools"]}, "tool_choice.allowed_tools"),
                       ({"mode": "auto", "tools": []}, "tool_choice.allowed_tools"),
                       (None, "tool_choice.allowed_tools"),
                       ({"mode": "auto", "tools": [{"function": {"name": "nope"}}]},
                        "tool_choice.allowed_tools.tools[0]")]:
        with pytest.raises(tools.ToolError) as e:
            tools.check_tool_choice({"type": "allowed_tools", "allowed_tools": bad}, fns)
        assert e.value.param == param


def test_tool_messages_are_checked():
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    msgs = [{"role": "user", "content": "?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "3"}]
    out = tools.check_tool_messages(msgs)
    assert out[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1, "b": 2}
    with pytest.raises(tools.ToolError) as e:
        tools.check_tool_messages(msgs[:2] + [{"role": "tool", "tool_call_id": "zz", "content": "3"}])
    assert e.value.param == "messages[2].tool_call_id"
    bad_args = {**call, "function": {"name": "add", "arguments": "[1, 2]"}}
    with pytest.raises(tools.ToolError) as e:
        tools.check_tool_messages([msgs[0], {"role": "assistant", "tool_calls": [bad_args]}])
    assert e.value.param == "messages[1].tool_calls[0].function.arguments"


def test_tool_names_are_whole_names():
    # "$" matches before a final newline; a name is checked whole
    for name in ["get\n", "get\r\n", "a b", "<|im_end|>", "x" * 65]:
        with pytest.raises(tools.ToolError) as e:
            tools.check_tools([{"type": "function", "function": {"name": name}}])
        assert e.value.param == "tools[0].function.name"
    assert tools.check_tools([{"type": "function", "function": {"name": "get.v2-x_y"}}])[0]["name"] == "get.v2-x_y"


def test_named_tool_choice_keeps_parallel_tool_calls():
    fns = tools.check_tools([WEATHER, ADD])
    named = {"type": "function", "function": {"name": "add"}}
    assert tools.check_tool_choice(named, fns, True).parallel is True
    assert tools.check_tool_choice(named, fns).parallel is False
    assert tools.check_tool_choice(named, fns, False).parallel is False


def test_assistant_tool_call_names_are_checked_like_tool_names():
    for name in ["add\n", "<|im_end|>", "a b", ""]:
        call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}
        with pytest.raises(tools.ToolError) as e:
            tools.check_tool_messages([{"role": "assistant", "content": None, "tool_calls": [call]}])
        assert e.value.param == "messages[0].tool_calls[0].function.name"


def test_hermes_parse_and_hold_back():
    fmt = formats.HermesFormat()
    text = 'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n' \
           '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call>'
    content, calls = fmt.parse(text)
    assert content == "Sure."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 1, "b": 2}),
                                                                 ("get_weather", {"city": "Oslo", "unit": "c"})]
    assert len({c.id for c in calls}) == 2
    content, cut = fmt.parse(text + '\n<tool_call>\n{"name": "ad')  # a third call cut by max_tokens
    assert content == "Sure." and len(cut) == 2
    assert tools.check_tool_choice(None, tools.check_tools([ADD])).parallel is False  # llama.cpp's default
    assert fmt.parse("no call here") is None
    assert fmt.parse('<tool_call>\n{"name": "add", "argu') is None  # cut short: stays text
    assert fmt.parse(text, allowed=["add"]) is None  # a function that was not offered
    assert fmt.pending("hello <tool") == len("hello ")
    assert fmt.pending("hello <tool_call>{") == len("hello ")
    assert fmt.pending("a < b") == len("a < b")


def test_streamed_calls_reassemble():
    calls = [tools.ToolCall("call_1", "add", '{"a": 1}'), tools.ToolCall("call_2", "get_weather", '{"city": "x"}')]
    merged: dict[int, dict] = {}
    for entries in shapes.tool_call_deltas(calls):
        for d in entries:
            m = merged.setdefault(d["index"], {"arguments": ""})
            m.update({k: d[k] for k in ("id", "type") if k in d})
            if "name" in d["function"]:
                m["name"] = d["function"]["name"]
            m["arguments"] += d["function"]["arguments"]
    assert [merged[i] for i in sorted(merged)] == [
        {"id": c.id, "type": "function", "name": c.name, "arguments": c.arguments} for c in calls]


def _streamed(stream, parts):
    return [stream.push(p) for p in parts]


def test_tool_stream_passes_text_through_without_tools():
    s = tools.ToolStream()
    assert _streamed(s, ["a <tool", "_call>", "b"]) == ["a <tool", "_call>", "b"]
    assert s.finish("a <tool_call>b") == ("", None)


def test_tool_stream_holds_back_a_call_and_returns_it_at_the_end():
    text = 'Sure <tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    s = tools.ToolStream(formats.HermesFormat(), ["add"])
    assert _streamed(s, [text[:8], text[8:20], text[20:]]) == ["Sure ", "", ""]
    rest, calls = s.finish(text)
    assert rest == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 1, "b": 2})]
    # a call of a function that was not offered is no call: the held-back text is content
    s = tools.ToolStream(formats.HermesFormat(), ["get_weather"])
    _streamed(s, [text])
    assert s.finish(text) == (text[len("Sure "):], None)


def test_tool_stream_releases_what_turns_out_not_to_be_a_marker():
    s = tools.ToolStream(formats.HermesFormat(), ["add"])
    assert _streamed(s, ["a <", "b", " <tool_c", "x>"]) == ["a ", "<b", " ", "<tool_cx>"]
    assert _streamed(s, ["<tool_call>{bad"]) == [""]
    assert s.finish("a <b <tool_cx><tool_call>{bad") == ("<tool_call>{bad", None)  # malformed: text


OSLO = '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}'
ADD_CALL = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
OFFERED = ["get_weather", "add"]
JSON_CALLS = [  # (reply, content, [(name, arguments)]): calls written as JSON alone
    ("```json\n" + OSLO + "\n```", "", [("get_weather", {"city": "Oslo", "unit": "c"})]),
    ("```\n" + OSLO + "\n```\n", "", [("get_weather", {"city": "Oslo", "unit": "c"})]),
    (OSLO, "", [("get_weather", {"city": "Oslo", "unit": "c"})]),
    ("Let me look that up.\n\n```json\n" + OSLO + "\n```", "Let me look that up.",
     [("get_weather", {"city": "Oslo", "unit": "c"})]),
    ("Checking.\n" + ADD_CALL + "\n", "Checking.", [("add", {"a": 1, "b": 2})]),
    ("```json\n" + ADD_CALL + "\n```\n```json\n" + OSLO + "\n```", "",
     [("add", {"a": 1, "b": 2}), ("get_weather", {"city": "Oslo", "unit": "c"})]),
    (ADD_CALL + "\n" + OSLO, "", [("add", {"a": 1, "b": 2}), ("get_weather", {"city": "Oslo", "unit": "c"})]),
    ('```json\n{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}\n```', "", [("add", {"a": 1, "b": 2})]),
]
JSON_TEXTS = [  # replies whose JSON is no call: they stay text
    "```json\n" + OSLO.replace("get_weather", "get_time") + "\n```",  # a function not offered
    "```json\n" + '{"city": "Oslo", "name": "get_weather"}' + "\n```",  # first key is not "name"
    '```json\n{"name": "add", "arguments": {"a": 1, "b": 2}, "id": 7}\n```',  # another key
    '```json\n{"name": "add", "arguments": [1, 2]}\n```',  # arguments not an object
    '```json\n{"name": "add", "arguments": "[1, 2]"}\n```',
    '```json\n{"name": "add", "arguments": {"a": 1, "b": 2}\n```',  # malformed
    '```json\n{"name": "add", "argu',  # cut short
    "```python\n" + ADD_CALL + "\n```",  # not JSON
    "A call looks like this:\n" + ADD_CALL + "\nand the tool then runs.",  # an example amid prose
    "For example:\n```json\n" + ADD_CALL + "\n```\nadds 1 and 2.",
    "Try " + ADD_CALL,  # not at the start of a line
    '```json\n{"name": "add", "arguments": {"a": 1}}\n``` done',
]


def _calls(calls):
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("text,content,expected", JSON_CALLS)
def test_calls_written_as_json_alone_are_calls(text, content, expected):
    parsed = formats.HermesFormat().parse(text, OFFERED)
    assert parsed is not None and parsed[0] == content and _calls(parsed[1]) == expected
    assert formats.HermesFormat().parse(text) is None  # no function offered: no call
    assert formats.HermesFormat().parse(text, ["other"]) is None


def test_without_parallel_tool_calls_the_first_json_call_is_kept():
    text = "```json\n" + ADD_CALL + "\n```\n```json\n" + OSLO + "\n```"
    content, calls = formats.HermesFormat().parse(text, OFFERED, parallel=False)
    assert content == "" and _calls(calls) == [("add", {"a": 1, "b": 2})]
    s = tools.ToolStream(formats.HermesFormat(), OFFERED, parallel=False)
    assert "".join(_streamed(s, [text[:9], text[9:]])) == "" and _calls(s.finish(text)[1]) == _calls(calls)


@pytest.mark.parametrize("text", JSON_TEXTS)
def test_json_that_is_no_call_of_an_offered_function_stays_text(text):
    assert formats.HermesFormat().parse(text, OFFERED) is None


def _stream_by(text, size):
    s = tools.ToolStream(formats.HermesFormat(), OFFERED)
    out = "".join(s.push(text[k:k + size]) for k in range(0, len(text), size))
    rest, calls = s.finish(text)
    return out + rest, calls


@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_streamed_json_calls_read_as_the_unstreamed_reply(size):
    for text, content, expected in JSON_CALLS:
        streamed, calls = _stream_by(text, size)
        assert streamed.strip() == content and _calls(calls) == expected, (text, size)
    for text in JSON_TEXTS:
        assert _stream_by(text, size) == (text, None), (text, size)


def test_streamed_and_unstreamed_replies_agree_on_mixed_fragments():
    """Replies pieced together from fences, objects, names and prose, streamed in random
    pieces: what streams out as text is never read back as a call (each "cannot be a call"
    is final), and the content and calls are those of the whole reply."""
    import random

    frags = ["```json\n", "```\n", "```", ADD_CALL, OSLO.replace("get_weather", "sub"), '{"city": 1}', "\n", "\n\n",
             "Hi. ", '{"name": "ad', "`", "{", "}", '"name"', ": ", '"add"', " ", '{"name": "add", "arguments": "{}"}']
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice(frags) for _ in range(rng.randint(1, 8)))
        s = tools.ToolStream(formats.HermesFormat(), OFFERED)
        out, k = "", 0
        while k < len(text):
            n = rng.randint(1, 6)
            out, k = out + s.push(text[k:k + n]), k + n
        rest, calls = s.finish(text)
        parsed = formats.HermesFormat().parse(text, OFFERED)
        if parsed is None:
            assert (out + rest, calls) == (text, None), text
        else:
            assert (out + rest).strip() == parsed[0] and _calls(calls) == _calls(parsed[1]), text


def test_what_cannot_be_a_json_call_streams_out_at_once():
    s = tools.ToolStream(formats.HermesFormat(), OFFERED)
    assert _streamed(s, ["Here:\n", "``", "`pyt", "hon\n", "x = 1\n"]) == ["Here:\n", "", "```pyt", "hon\n", "x = 1\n"]
    assert _streamed(s, ["{", '"na', 'me": "ad', 'd"', ', "ar']) == [""] * 5  # may still be a call of add
    s = tools.ToolStream(formats.HermesFormat(), OFFERED)
    assert _streamed(s, ["{", '"nam', 'e": "su', 'b"']) == ["", "", '{"name": "su', 'b"']  # no offered name begins su
    s = tools.ToolStream(formats.HermesFormat(), OFFERED)
    assert _streamed(s, ["```json\n", '{"c', 'ity"']) == ["", '```json\n{"c', 'ity"']  # first key not "name"
    s = tools.ToolStream(formats.HermesFormat(), OFFERED)
    assert _streamed(s, [ADD_CALL, "\n", "So"]) == ["", "", ADD_CALL + "\nSo"]  # prose after it


def test_tool_call_blocks_still_come_first():
    text = "```json\n" + ADD_CALL + "\n```\n<tool_call>\n" + OSLO + "\n</tool_call>"
    content, calls = formats.HermesFormat().parse(text, OFFERED)
    assert content == "```json\n" + ADD_CALL + "\n```" and _calls(calls) == [("get_weather", {"city": "Oslo",
                                                                                               "unit": "c"})]
    streamed, calls = _stream_by(text, 3)
    assert streamed.strip() == content and len(calls) == 1


def test_local_references_are_rebased_where_the_parameters_are_placed():
    schema = {"$defs": {"A": {"const": {"$ref": "#/kept"}}}, "items": {"$ref": "#/$defs/A"}, "tree": {"$ref": "#"}}
    moved = tools.rebased(schema, "/anyOf/1/properties/arguments")
    assert moved["items"] == {"$ref": "#/anyOf/1/properties/arguments/$defs/A"}
    assert moved["tree"] == {"$ref": "#/anyOf/1/properties/arguments"}
    assert moved["$defs"]["A"] == {"const": {"$ref": "#/kept"}}  # data, not a reference
    assert tools.rebased({"$ref": "other.json#/x"}, "/p") == {"$ref": "other.json#/x"}  # not local


_FUZZ_CALLS = [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                "arguments": {"city": "Oslo", "unit": "c"}}},
               {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]


@pytest.mark.parametrize("name", sorted(formats.FORMATS))
def test_every_format_streams_as_the_unstreamed_reply_for_any_split_and_any_cut(name):
    """Replies of the shape a tool grammar allows (prose, then the calls as the format
    writes them), whole or cut anywhere (max_tokens), streamed in random pieces: the content
    that streams out reassembles to the unstreamed content (up to its surrounding
    whitespace) and the calls are the same."""
    import random

    fmt = formats.FORMATS[name]()
    written = [fmt.write_calls(_FUZZ_CALLS[:1]), fmt.write_calls(_FUZZ_CALLS[1:]), fmt.write_calls(_FUZZ_CALLS)]
    prose = ["Hi. ", "\n", " ", "{", "}", '"name"', ": ", '"add"', "```json\n", "```", '{"a": 1}',
             fmt.open[: max(1, len(fmt.open) // 2)]]
    rng = random.Random(3)
    for _ in range(1500):
        text = "".join(rng.choice(prose) for _ in range(rng.randint(0, 4)))
        if rng.random() < 0.7:
            text += rng.choice(["", "\n"]) + rng.choice(written)
        if rng.random() < 0.4:
            text = text[: rng.randint(0, len(text))]
        for parallel in (True, False):
            s = tools.ToolStream(fmt, OFFERED, parallel)
            out, k = "", 0
            while k < len(text):
                n = rng.randint(1, 7)
                out, k = out + s.push(text[k:k + n]), k + n
            rest, calls = s.finish(text)
            parsed = fmt.parse(text, OFFERED, parallel)
            if parsed is None:
                assert (out + rest, calls) == (text, None), text
            else:
                assert (out + rest).strip() == parsed[0] and _calls(calls) == _calls(parsed[1]), text
