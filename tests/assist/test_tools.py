"""Tool calls, JSON schemas and grammars: the tool-format unit (no model), the llguidance
adapter on the tiny GGUF pair (outputs parse and validate under every method; greedy is
plain constrained greedy), and the server end to end with the official ``openai`` client
(forced calls, streamed calls, the tool round trip, ``parse`` with a Pydantic model,
``json_object``, and every bad input a 400 naming its field)."""

from __future__ import annotations

import json

import pytest

from resispec_gguf.surfaces import shapes
from resispec_gguf.assist import formats, tools
from resispec_gguf.config import DraftParams, SamplingParams

jsonschema = pytest.importorskip("jsonschema")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"], "additionalProperties": False},
    },
}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0},
                   "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
METHODS = ("none", "chain", "specinfer", "rrs", "resispec", "auto")


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


# ---------------------------------------------------------------------------------- the engine


def _valid(text, schema):
    jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("method", METHODS)
def test_schema_outputs_parse_and_validate(engine, method):
    c = engine.compile_constraint(json_schema=PERSON)
    lookup = method in ("chain", "resispec")
    for seed in range(4):
        res = engine.generate("Describe someone:", SamplingParams(temperature=1.0, seed=seed, max_tokens=120),
                              DraftParams(method=method, lookup=lookup), constraint=c)
        if res.finish_reason == "eos":
            _valid(res.text, PERSON)
        else:  # cut by max_tokens: a prefix of valid JSON, never anything else
            assert res.finish_reason == "length" and res.text.startswith("{")


def test_constrained_greedy_is_identical_across_methods(engine):
    c = engine.compile_constraint(json_schema=PERSON)
    texts = {m: engine.generate("Describe someone:", SamplingParams(temperature=0.0, max_tokens=60),
                                DraftParams(method=m), constraint=c).text for m in METHODS}
    assert len(set(texts.values())) == 1, texts


def test_gbnf_and_lark_grammars(engine):
    gbnf = 'root ::= "yes" | "no" | "maybe"'
    lark = 'start: ("ab" | "cd")+ "!"'
    for seed in range(5):
        sp = SamplingParams(temperature=1.0, seed=seed, max_tokens=40)
        assert engine.generate("q", sp, DraftParams(method="resispec"), grammar=gbnf).text in ("yes", "no", "maybe")
        text = engine.generate("q", sp, DraftParams(method="chain"), grammar=lark).text
        assert text.endswith("!") or len(text) >= 39
        assert set(text.rstrip("!").replace("ab", "").replace("cd", "")) <= {"a", "c"}


def test_bad_constraints_are_one_line_errors(engine):
    from resispec_gguf.assist.grammar import GrammarError

    for kw in [dict(grammar="start: ("), dict(json_schema="{nope"), dict(json_schema={"type": "integer", "minimum": 5,
                                                                                       "maximum": 1}),
               dict(json_schema=[1]), dict(grammar=""), dict(json_schema="x" * 300_000)]:
        with pytest.raises(GrammarError) as e:
            engine.generate("q", SamplingParams(max_tokens=4), DraftParams(method="none"),
                            constraint=engine.compile_constraint(**kw))
        assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------- the server


@pytest.fixture(scope="module")
def tool_server(tiny_pair):
    openai = pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    pytest.importorskip("starlette")
    from servers import serving

    from resispec_gguf.engine import Engine
    from resispec_gguf.surfaces.server import create_app

    # the generic format's tool description is ~800 byte-level tokens
    engine = Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=2048, n_threads=1, progress=False)
    # a fixed method: auto's choices follow this machine's measured costs, so a seed would not
    # reproduce across machines (the output law is the same either way)
    app = create_app(engine, model_name="tiny", draft_params=DraftParams(method="resispec"),
                     sampling_defaults=SamplingParams(max_tokens=256))
    with serving(app) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60) as client:
        yield url, client
    engine.close()


MSGS = [{"role": "user", "content": "What is the weather in Oslo? And 2+3?"}]


def _schema_of(name):
    return {"get_weather": WEATHER, "add": ADD}[name]["function"]["parameters"]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_forced_tool_calls_name_a_function_with_valid_arguments(tool_server, choice):
    _, client = tool_server
    done = 0
    for seed in range(4):
        r = client.chat.completions.create(model="tiny", messages=MSGS, tools=[WEATHER, ADD], tool_choice=choice,
                                           seed=seed, temperature=1.0, parallel_tool_calls=False)
        ch = r.choices[0]
        if ch.finish_reason == "length":
            continue  # the tiny random model may ramble inside a string until max_tokens
        assert ch.finish_reason == "tool_calls", ch
        done += 1
        (call,) = ch.message.tool_calls
        assert call.type == "function" and call.id
        if isinstance(choice, dict):
            assert call.function.name == "add"
        jsonschema.validate(json.loads(call.function.arguments), _schema_of(call.function.name))
    assert done >= 1


def test_streamed_tool_calls_reassemble_to_the_same_call(tool_server):
    _, client = tool_server
    kw = dict(model="tiny", messages=MSGS, tools=[WEATHER, ADD], tool_choice={"type": "function",
                                                                               "function": {"name": "add"}},
              seed=5, temperature=0.0)
    whole = client.chat.completions.create(**kw).choices[0]
    chunks = list(client.chat.completions.create(stream=True, **kw))
    calls: dict[int, dict] = {}
    for c in chunks:
        for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            m = calls.setdefault(d.index, {"name": "", "arguments": ""})
            if d.function.name:
                m["name"] = d.function.name
            m["arguments"] += d.function.arguments or ""
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.finish_reason
    if whole.finish_reason == "tool_calls":
        assert [(m["name"], m["arguments"]) for _, m in sorted(calls.items())] == \
            [(t.function.name, t.function.arguments) for t in whole.message.tool_calls]


def test_tool_result_round_trip_gives_text(tool_server):
    _, client = tool_server
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    msgs = MSGS + [{"role": "assistant", "content": None, "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    r = client.chat.completions.create(model="tiny", messages=msgs, tools=[ADD], tool_choice="none", seed=1,
                                       max_tokens=8)
    assert r.choices[0].message.tool_calls is None and isinstance(r.choices[0].message.content, str)


def test_parse_with_a_pydantic_model(tool_server):
    pydantic = pytest.importorskip("pydantic")
    from typing import Literal

    class Person(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=8)
        age: int
        kind: Literal["cat", "dog"]

    _, client = tool_server
    done = 0
    for seed in range(4):
        r = client.chat.completions.parse(model="tiny", messages=MSGS, response_format=Person, seed=seed,
                                          temperature=0.7, max_tokens=160)
        if r.choices[0].finish_reason == "stop":
            assert isinstance(r.choices[0].message.parsed, Person)
            done += 1
    assert done >= 1


def test_json_object_replies_parse(tool_server):
    _, client = tool_server
    done = 0
    for seed in range(3):
        r = client.chat.completions.create(model="tiny", messages=MSGS, response_format={"type": "json_object"},
                                           seed=seed, temperature=0.0 if seed == 0 else 1.0, max_tokens=160)
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].message.content), dict)
            done += 1
    assert done >= 1


SUM = {"type": "object", "properties": {"sum": {"type": "integer"}, "note": {"type": "string", "maxLength": 8}},
       "required": ["sum", "note"], "additionalProperties": False}
TYPED = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SUM, "strict": True}}


def _call_or_answer(ch, schema=SUM) -> str:
    """Which the reply is, checked: a call whose arguments validate, or the answer under ``schema``."""
    if ch.finish_reason == "tool_calls":
        assert ch.message.tool_calls and not ch.message.content
        for call in ch.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), _schema_of(call.function.name))
        return "call"
    assert ch.finish_reason == "stop" and ch.message.tool_calls is None, ch
    jsonschema.validate(json.loads(ch.message.content), schema)
    return "answer"


@pytest.mark.parametrize("fmt,schema", [(TYPED, SUM), ({"type": "json_object"}, {"type": "object"})])
def test_tools_with_a_response_format_give_a_call_or_the_answer(tool_server, fmt, schema):
    """What pydantic-ai and openai-agents send for an agent with tools and a typed output."""
    _, client = tool_server
    seen = []
    for seed in range(5):
        r = client.chat.completions.create(model="tiny", messages=MSGS, tools=[WEATHER, ADD], tool_choice="auto",
                                           response_format=fmt, seed=seed, temperature=1.0, max_tokens=160)
        if r.choices[0].finish_reason != "length":  # the tiny random model may ramble in a string
            seen.append(_call_or_answer(r.choices[0], schema))
    assert seen


@pytest.mark.parametrize("seed", [3, 4])  # on the tiny pair: the answer, and a call
def test_tools_with_a_response_format_stream_as_they_answer(tool_server, seed):
    _, client = tool_server
    kw = dict(model="tiny", messages=MSGS, tools=[WEATHER, ADD], response_format=TYPED, seed=seed, temperature=1.0,
              max_tokens=160)
    whole = client.chat.completions.create(**kw).choices[0]
    chunks = [c.choices[0] for c in client.chat.completions.create(stream=True, **kw) if c.choices]
    calls: dict[int, list] = {}
    for c in chunks:
        for d in c.delta.tool_calls or []:
            m = calls.setdefault(d.index, ["", ""])
            m[0] += d.function.name or ""
            m[1] += d.function.arguments or ""
    assert chunks[-1].finish_reason == whole.finish_reason
    assert ("".join(c.delta.content or "" for c in chunks) or None) == whole.message.content
    assert [tuple(m) for _, m in sorted(calls.items())] == \
        [(t.function.name, t.function.arguments) for t in whole.message.tool_calls or []]


def test_parse_with_a_strict_tool_and_a_pydantic_output(tool_server):
    """docs/server.md's snippet: ``parse`` with a strict tool and a model gives a parsed call or a
    parsed answer (a reply cut by max_tokens is the client's LengthFinishReasonError)."""
    pydantic = pytest.importorskip("pydantic")
    import openai

    class Weather(pydantic.BaseModel):
        city: str = pydantic.Field(max_length=8)

    class Answer(pydantic.BaseModel):
        summary: str = pydantic.Field(max_length=8)
        temperature_c: int

    _, client = tool_server
    tool = openai.pydantic_function_tool(Weather, name="get_weather", description="Current weather for a city")
    kinds = set()
    for seed in range(6):
        try:
            r = client.chat.completions.parse(model="tiny", messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                              tools=[tool], response_format=Answer, seed=seed, max_tokens=160)
        except openai.LengthFinishReasonError:
            continue
        m = r.choices[0].message
        if m.tool_calls:
            assert isinstance(m.tool_calls[0].function.parsed_arguments, Weather) and m.parsed is None
            kinds.add("call")
        else:
            assert isinstance(m.parsed, Answer)
            kinds.add("answer")
    assert kinds  # on the tiny pair seeds 0-5 give both kinds


BAD = [
    ({"tools": [{"type": "function", "function": {"name": "x y"}}]}, "tools[0].function.name"),
    ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": 3,
                                                                            "maximum": 1}}}},
     "response_format.json_schema.schema"),
    ({"messages": MSGS + [{"role": "tool", "tool_call_id": "ghost", "content": "1"}]}, "messages[1].tool_call_id"),
    # tools together with a response_format are answered (calls or the answer); a bad schema is named
    ({"tools": [ADD], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "integer", "minimum": 3, "maximum": 1}}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"enum": []}}}},
     "response_format.json_schema.schema"),
    # llguidance's limits met only at the first tokens are found when compiling
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"anyOf": [
        {"type": "object", "properties": {f"k{i}": {"const": i}}, "required": [f"k{i}"]} for i in range(2100)]}}}},
     "response_format.json_schema.schema"),
    ({"tools": [ADD, {"type": "function", "function": {"name": "many", "parameters": {
        "type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(600)}}}}]},
     "tools[1].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "integer", "minimum": 5,
                                                                              "maximum": 1}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "get\n"}}]}, "tools[0].function.name"),
    ({"messages": MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "<|im_end|>", "arguments": "{}"}}]}]},
     "messages[1].tool_calls[0].function.name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": False}}}, "response_format"),
]


@pytest.mark.parametrize("stream", [False, True])
def test_bad_tool_and_format_fields_are_400(tool_server, stream):
    import httpx

    url, _ = tool_server
    for body, param in BAD:
        r = httpx.post(f"{url}/v1/chat/completions", json={"messages": MSGS, "stream": stream, **body}, timeout=30)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.json())
        message = r.json()["error"]["message"]
        assert "\n" not in message and "start:" not in message and "x-guidance" not in message, message
        if param.endswith((".schema", ".parameters")):
            assert message.startswith(param), message
    assert httpx.get(f"{url}/health").status_code == 200


class FencedCallEngine:
    """The tiny engine serving, with a Hermes template's format, a scripted reply: the call
    Qwen2.5-Coder writes under tool_choice "auto", as a fenced JSON block after a line of text."""

    PIECES = ["I'll check.\n", "```", "json\n", '{"name": "get_', 'weather", "arguments": ',
              '{"city": "Oslo", "unit": "c"}}', "\n```"]

    def __init__(self, real):
        self.real, self.last_result = real, None

    def __getattr__(self, name):
        return getattr(self.real, name)

    def tool_format(self):
        return formats.HermesFormat()

    def stream(self, prompt, sampling=None, draft=None, constraint=None, cancel=None):
        from resispec_gguf.engine import Result, Stats

        try:
            yield from self.PIECES
        finally:
            n = len(self.PIECES)
            self.last_result = Result(tokens=[7] * n, text="".join(self.PIECES), finish_reason="eos",
                                      stats=Stats(method="none", prompt_tokens=len(prompt), tokens=n), seed=0)


def test_a_fenced_json_call_under_auto_is_a_tool_call(engine):
    """Agents leave tool_choice "auto"; the call Qwen2.5-Coder then writes as fenced JSON comes
    back as a call (finish_reason "tool_calls"), streamed or not: before, it was text."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    from servers import serving

    from resispec_gguf.surfaces.server import create_app

    app = create_app(FencedCallEngine(engine), model_name="qwen", draft_params=DraftParams(method="none"),
                     sampling_defaults=SamplingParams(max_tokens=64))
    with serving(app) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60) as client:
        kw = dict(model="qwen", messages=MSGS, tools=[WEATHER, ADD], tool_choice="auto")
        ch = client.chat.completions.create(**kw).choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.content == "I'll check."
        (call,) = ch.message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Oslo",
                                                                                             "unit": "c"})
        chunks = [c for c in client.chat.completions.create(stream=True, **kw) if c.choices]
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    streamed = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert content.strip() == "I'll check." and chunks[-1].choices[0].finish_reason == "tool_calls"
    assert streamed[0].function.name == "get_weather"
    assert "".join(d.function.arguments or "" for d in streamed) == call.function.arguments


def test_a_tool_schema_is_measured_as_utf8_as_sent(engine):
    # 150 KB of CJK text as UTF-8; 300 KB once written as \\u escapes
    big = {"type": "function", "function": {"name": "note", "parameters": {
        "type": "object", "description": "説明" * 25_000, "properties": {"x": {"type": "integer"}}}}}
    fns = tools.check_tools([big])
    req = tools.check_tool_choice("required", fns)
    constraint = engine.compile_constraint(grammar=formats.HermesFormat().grammar(req))
    assert constraint.start() is not None


def _spelt(engine, tokens) -> str:
    return b"".join(engine.target.token_piece(t) for t in tokens).decode()


def _forced_after(engine, grammar: str, text: str) -> str:
    """The text the tool grammar forces after ``text`` (the tiny vocabulary's bytes)."""
    state = engine.compile_constraint(grammar=grammar).start()
    return _spelt(engine, state.forced(engine.target.tokenize(text, add_special=False)))


@pytest.mark.parametrize("fmt,opening", [("hermes", "<tool_call>\n"), ("mistral", "[TOOL_CALLS]")])
def test_a_forced_call_is_laid_out_on_one_line_unless_its_parameters_ask(engine, fmt, opening):
    """A call object is laid out as JSON under a schema is (one line, ", " and ": "), so
    the grammar forces the bytes from the name to the first argument's value; a function
    whose parameters carry their own "x-guidance" asking for whitespace gets the flexible
    layout for its whole call (``tools.own_guidance``)."""
    f = formats.FORMATS[fmt]()
    head = opening + ('[{"name": "add"' if fmt == "mistral" else '{"name": "add"')
    req = tools.check_tool_choice("required", tools.check_tools([ADD]))
    assert _forced_after(engine, f.grammar(req), head) == ', "arguments": {"a": '
    flexible = json.loads(json.dumps(ADD))
    flexible["function"]["parameters"]["x-guidance"] = {"whitespace_flexible": True}
    fns = tools.check_tools([flexible])
    assert tools.own_guidance(fns) == {"whitespace_flexible": True}
    assert tools.own_guidance(tools.check_tools([ADD])) is None
    assert _forced_after(engine, f.grammar(tools.check_tool_choice("required", fns)), head) == ""


ORDER = {  # what Pydantic writes for a tool taking an Order with a list of Items
    "type": "function",
    "function": {"name": "place_order", "description": "Place an order", "parameters": {
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string", "maxLength": 8},
                                                             "qty": {"type": "integer", "minimum": 1}},
                           "required": ["sku", "qty"], "additionalProperties": False}},
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1, "maxItems": 2},
                       "note": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}]}},
        "required": ["items", "note"], "additionalProperties": False}},
}


def test_local_references_are_rebased_where_the_parameters_are_placed():
    schema = {"$defs": {"A": {"const": {"$ref": "#/kept"}}}, "items": {"$ref": "#/$defs/A"}, "tree": {"$ref": "#"}}
    moved = tools.rebased(schema, "/anyOf/1/properties/arguments")
    assert moved["items"] == {"$ref": "#/anyOf/1/properties/arguments/$defs/A"}
    assert moved["tree"] == {"$ref": "#/anyOf/1/properties/arguments"}
    assert moved["$defs"]["A"] == {"const": {"$ref": "#/kept"}}  # data, not a reference
    assert tools.rebased({"$ref": "other.json#/x"}, "/p") == {"$ref": "other.json#/x"}  # not local


@pytest.mark.parametrize("offered", [[ORDER], [ADD, ORDER]])
def test_nested_tool_parameters_compile_and_calls_validate(tool_server, offered):
    """A tool whose parameters use $defs/$ref (every nested Pydantic model) is a forced call
    whose arguments validate, with one tool offered or several (the refs then live under
    anyOf): before, a 400 "Pointer '/$defs/Item' does not exist"."""
    _, client = tool_server
    done = 0
    for seed in range(4):
        r = client.chat.completions.create(model="tiny", messages=MSGS, tools=offered, seed=seed, temperature=1.0,
                                           tool_choice={"type": "function", "function": {"name": "place_order"}})
        ch = r.choices[0]
        if ch.finish_reason == "length":
            continue  # the tiny random model may ramble inside a string until max_tokens
        assert ch.finish_reason == "tool_calls", ch
        (call,) = ch.message.tool_calls
        assert call.function.name == "place_order"
        jsonschema.validate(json.loads(call.function.arguments), ORDER["function"]["parameters"])
        done += 1
    assert done >= 1


def test_a_response_format_with_defs_compiles(engine):
    grammar = engine.compile_constraint(json_schema=ORDER["function"]["parameters"])
    assert grammar.start().mask(()).any()


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
