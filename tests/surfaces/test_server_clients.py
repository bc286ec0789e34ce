"""The server with requests shaped as agent frameworks send them (instructor, pydantic-ai,
openai-agents, langchain-openai, ``llm``; ``scripts/frameworks_check.py`` runs the
frameworks themselves): tools whose parameters are nested Pydantic models, structured output
with nested and recursive models, tools together with a typed output, the request fields
those libraries add, and a schema feature the grammar engine cannot honour.  Through the
official ``openai`` client and raw ``httpx``, on the tiny pair (helpers in servers.py)."""

from __future__ import annotations

import json
from enum import Enum
from typing import Literal, Optional, Union

import pytest

pytest.importorskip("llama_cpp")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pydantic = pytest.importorskip("pydantic")
pytest.importorskip("uvicorn")

from pydantic import BaseModel, Field  # noqa: E402

from resispec_gguf.config import DraftParams, SamplingParams  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402
from resispec_gguf.surfaces.server import create_app  # noqa: E402
from servers import api_error, serving  # noqa: E402


class Size(str, Enum):
    S = "S"
    M = "M"


class Item(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{3}-[0-9]{3}$")
    quantity: int = Field(ge=1, le=20)
    size: Optional[Size] = None


class Pickup(BaseModel):
    kind: Literal["pickup"]
    store: str = Field(max_length=12)


class Delivery(BaseModel):
    kind: Literal["delivery"]
    city: str = Field(max_length=12)


class Order(BaseModel):
    """$defs and $ref, a list of nested models with bounds, an enum, Optional (anyOf with null),
    a Literal-discriminated union (oneOf with a discriminator), a pattern."""

    customer: str = Field(min_length=1, max_length=12)
    items: list[Item] = Field(min_length=1, max_length=2)
    shipping: Union[Pickup, Delivery] = Field(discriminator="kind")


class Line(BaseModel):
    sku: str = Field(max_length=10)
    quantity: int


class Receipt(BaseModel):
    order_id: str = Field(max_length=10)
    status: Literal["placed", "failed"]
    lines: list[Line] = Field(max_length=2)
    note: Optional[str] = Field(default=None, max_length=10)


class Section(BaseModel):
    """A recursive model (``$ref`` to itself through ``$defs``)."""

    title: str = Field(max_length=10)
    children: list["Section"] = Field(max_length=1)


MSGS = [{"role": "user", "content": "Order two ABC-123 for Ana, delivered to Oslo, then give the receipt."}]
SEEDS = [1, 2]


@pytest.fixture(scope="module")
def served(tiny_pair):
    engine = Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=4096, n_threads=1, progress=False,
                         memory_size=0)  # seeded replies are compared: no memory of past answers
    app = create_app(engine, model_name="tiny", draft_params=DraftParams(method="resispec"),
                     sampling_defaults=SamplingParams(max_tokens=1500))
    with serving(app) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120) as client:
        yield url, client
    engine.close()


def _order_tool():
    """The tool as the ``openai`` client writes it from a Pydantic model (strict, $defs)."""
    return openai.pydantic_function_tool(Order, name="place_order", description="Place an order")


def _valid_order(arguments: str) -> None:
    args = json.loads(arguments)
    jsonschema.validate(args, _order_tool()["function"]["parameters"])
    Order.model_validate(args)


def test_the_tool_parameters_use_the_features_under_test():
    text = json.dumps(_order_tool()["function"]["parameters"])
    for feature in ('"$defs"', '"$ref"', '"anyOf"', '"enum"', '"pattern"', '"maxItems"', '"discriminator"',
                    '"additionalProperties"', '"maxLength"'):
        assert feature in text


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_with_nested_pydantic_parameters_gives_valid_calls(served, stream):
    _, client = served
    for seed in SEEDS:
        kw = dict(model="tiny", messages=MSGS, tools=[_order_tool()], tool_choice="required", seed=seed,
                  parallel_tool_calls=False)
        if stream:
            args, finish = "", None
            for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
                for c in chunk.choices:
                    finish = c.finish_reason or finish
                    args += "".join(d.function.arguments or "" for d in c.delta.tool_calls or [])
        else:
            ch = client.chat.completions.create(**kw).choices[0]
            finish, args = ch.finish_reason, ch.message.tool_calls[0].function.arguments
            assert ch.message.tool_calls[0].function.name == "place_order"
        assert finish == "tool_calls"
        _valid_order(args)


@pytest.mark.parametrize("stream", [False, True])
def test_allowed_tools_under_required_calls_an_allowed_function(served, stream):
    """OpenAI's ``{"type": "allowed_tools", ...}`` tool_choice: a call of a listed function."""
    url, _ = served
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    choice = {"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "function", "function": {"name": "place_order"}}]}}
    body = {"model": "tiny", "messages": MSGS, "tools": [other, _order_tool()], "tool_choice": choice, "seed": 1,
            "stream": stream}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    if stream:
        deltas = [json.loads(line[6:])["choices"] for line in r.text.splitlines()
                  if line.startswith("data: {")]
        calls = [d for ch in deltas for c in ch for d in c["delta"].get("tool_calls") or []]
        name, args = calls[0]["function"]["name"], "".join(d["function"]["arguments"] for d in calls)
    else:
        call = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]
        name, args = call["name"], call["arguments"]
    assert name == "place_order"
    _valid_order(args)


@pytest.mark.parametrize("model", [Receipt, Section])
@pytest.mark.parametrize("stream", [False, True])
def test_structured_output_with_nested_and_recursive_models_parses(served, model, stream):
    _, client = served
    for seed in SEEDS:
        kw = dict(model="tiny", messages=MSGS, response_format=model, seed=seed, max_completion_tokens=1500)
        if stream:
            with client.chat.completions.stream(**kw) as s:
                parsed = s.get_final_completion().choices[0].message.parsed
        else:
            parsed = client.chat.completions.parse(**kw).choices[0].message.parsed
        assert isinstance(parsed, model)


@pytest.mark.parametrize("stream", [False, True])
def test_nested_tools_together_with_a_nested_typed_output(served, stream):
    """What openai-agents and pydantic-ai (NativeOutput) send for an agent with tools and an
    output type: a parsed call or a parsed answer, never a refusal."""
    _, client = served
    kinds = set()
    for seed in SEEDS + [3, 4]:
        kw = dict(model="tiny", messages=MSGS, tools=[_order_tool()], response_format=Receipt, seed=seed)
        if stream:
            with client.chat.completions.stream(**kw) as s:
                msg = s.get_final_completion().choices[0].message
        else:
            msg = client.chat.completions.parse(**kw).choices[0].message
        if msg.tool_calls:
            _valid_order(msg.tool_calls[0].function.arguments)
            kinds.add("call")
        else:
            assert isinstance(msg.parsed, Receipt)
            kinds.add("answer")
    assert kinds  # which of the two, the model's first token chose


def test_the_request_fields_agent_frameworks_send_are_accepted(served):
    """A developer message with text parts, a user ``name``, an assistant message with tool
    calls and null content, a tool result as parts, strict tools and response_format, a named
    tool_choice, parallel_tool_calls, stream_options, max_completion_tokens, n, seed, logprobs,
    user, store, metadata."""
    url, _ = served
    tool = _order_tool()
    call = {"id": "call_1", "type": "function",
            "function": {"name": "place_order", "arguments": json.dumps(
                {"customer": "Ana", "items": [{"sku": "ABC-123", "quantity": 2, "size": None}],
                 "shipping": {"kind": "delivery", "city": "Oslo"}})}}
    history = [{"role": "developer", "content": [{"type": "text", "text": "You place orders."}]},
               {"role": "user", "name": "ana", "content": [{"type": "text", "text": MSGS[0]["content"]}]},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "name": "place_order",
                "content": [{"type": "text", "text": "Order 1042 placed."}]}]
    receipt = {"type": "json_schema", "json_schema": {"name": "Receipt", "strict": True,
                                                      "schema": openai.lib._pydantic.to_strict_json_schema(Receipt)}}
    extras = {"n": 1, "seed": 7, "logprobs": False, "user": "u1", "store": False, "metadata": {"k": "v"},
              "max_completion_tokens": 1500, "parallel_tool_calls": False}
    bodies = [
        {"messages": history, "tools": [tool], "tool_choice": {"type": "function", "function": {"name": "place_order"}}},
        {"messages": history, "tools": [tool], "tool_choice": "auto", "response_format": receipt},
        {"messages": history, "response_format": receipt},
    ]
    for body in bodies:
        for stream in (False, True):
            b = {"model": "tiny", **extras, **body, "stream": stream}
            if stream:
                b["stream_options"] = {"include_usage": True}
            r = httpx.post(f"{url}/v1/chat/completions", json=b, timeout=120)
            assert r.status_code == 200, r.text
            if stream:
                assert r.text.rstrip().endswith("data: [DONE]") and '"usage"' in r.text


# (where the feature goes, the request field the 400 names, the keyword or value it names)
UNHONOURED = [
    ({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}},
     ".properties.tags", "'uniqueItems'"),
    ({"type": "object", "properties": {"o": {"$ref": "#/$defs/O"}},
      "$defs": {"O": {"type": "object", "properties": {"code": {"type": "string", "pattern": "(?<=a)b"}}}}},
     ".$defs.O.properties.code.pattern", "look-around"),
    ({"type": "object", "properties": {"o": {"$ref": "#/$defs/Nope"}}}, ".properties.o.$ref", "'#/$defs/Nope'"),
]


@pytest.mark.parametrize("schema,where,named", UNHONOURED)
@pytest.mark.parametrize("stream", [False, True])
def test_a_schema_feature_that_cannot_be_honoured_is_400_naming_it_and_its_path(served, schema, where, named,
                                                                                stream):
    url, _ = served
    tools = [{"type": "function", "function": {"name": "ok", "parameters": {"type": "object"}}},
             {"type": "function", "function": {"name": "f", "strict": True, "parameters": schema}}]
    cases = [({"tools": tools, "tool_choice": "required"}, "tools[1].function.parameters"),
             ({"tools": tools[:1], "response_format": {"type": "json_schema", "json_schema": {
                 "name": "x", "strict": True, "schema": schema}}}, "response_format.json_schema.schema"),
             ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}},
              "response_format.json_schema.schema")]
    for fields, field in cases:
        body = {"model": "tiny", "messages": MSGS, "stream": stream, **fields}
        err = api_error(httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60), 400, field + where)
        assert err["message"].startswith(field + where + ": ") and named in err["message"]
        for ours in ("%json", "start:", "call_body", "TEXT", "x-guidance\": {\"whitespace"):
            assert ours not in err["message"]
