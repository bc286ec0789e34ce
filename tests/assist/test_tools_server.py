"""Tool calls, JSON schemas and grammars: the server end to end on the tiny GGUF pair with
the official ``openai`` client (forced calls, streamed calls, the tool round trip, ``parse``
with a Pydantic model, ``json_object``, tools with a response format, nested tool
parameters, a fenced JSON call under "auto", and every bad input a 400 naming its field)."""

from __future__ import annotations

import json

import pytest

from resispec_gguf.assist import formats
from resispec_gguf.config import DraftParams, SamplingParams

from tool_cases import ADD, ORDER, WEATHER

jsonschema = pytest.importorskip("jsonschema")


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
