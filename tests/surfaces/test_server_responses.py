"""OpenAI's Responses API on the server (``/v1/responses``), end to end through the official
``openai`` client (``responses.create``, ``stream=True``, ``responses.stream``,
``responses.parse``) and the OpenAI Agents SDK on its default model class, on the tiny pair:
text, the stream of events (and that it reassembles to the non-streamed response), function
tools and ``function_call_output`` turns, structured output through ``text.format``,
``max_output_tokens``, ``previous_response_id`` with ``store`` and the bounded store, and bad
fields as 400s naming the field.  Servers and helpers as in servers.py."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("llama_cpp")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("uvicorn")

from pydantic import BaseModel, Field  # noqa: E402

from resispec_gguf.config import DraftParams, SamplingParams  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402
from resispec_gguf.surfaces.server import create_app  # noqa: E402
from resispec_gguf.surfaces.server.responses import ResponseStore  # noqa: E402
from servers import api_error, serving  # noqa: E402

GREEDY = {"temperature": 0, "extra_body": {"seed": 1}}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                          "required": ["city"], "additionalProperties": False}}


class Answer(BaseModel):
    answer: str = Field(max_length=10)
    n: int


@pytest.fixture(scope="module")
def engine(tiny_pair):
    # the tiny vocabulary spells text byte by byte: tools in the prompt need the room; no
    # memory of past answers, so that a seed picked for its reply keeps it
    e = Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=4096, n_threads=1, progress=False, memory_size=0)
    yield e
    e.close()


@pytest.fixture(scope="module")
def url(engine):
    app = create_app(engine, model_name="tiny", draft_params=DraftParams(), sampling_defaults=SamplingParams())
    with serving(app) as u:
        yield u


@pytest.fixture(scope="module")
def client(url):
    with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60) as c:
        yield c


def test_text_response_and_its_stream_agree(client):
    r = client.responses.create(model="tiny", input="Tell me a story.", instructions="Be brief.", max_output_tokens=20,
                                **GREEDY)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "tiny"
    assert r.status in ("completed", "incomplete") and [i.type for i in r.output] == ["message"]
    assert (r.status == "incomplete") == (r.usage.output_tokens == 20)
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.input_tokens > 5 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.instructions == "Be brief." and r.max_output_tokens == 20
    assert r.model_extra["timings"]["predicted_n"] == r.model_extra["speculative"]["tokens"]
    events = list(client.responses.create(model="tiny", input="Tell me a story.", instructions="Be brief.",
                                          max_output_tokens=20, stream=True, **GREEDY))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == ("response.incomplete" if r.status == "incomplete" else "response.completed")
    for k in ("response.output_item.added", "response.content_part.added", "response.output_text.done",
              "response.content_part.done", "response.output_item.done"):
        assert kinds.count(k) == 1, k
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == r.output_text == events[-1].response.output_text
    with client.responses.stream(model="tiny", input="Tell me a story.", instructions="Be brief.",
                                 max_output_tokens=20, **GREEDY) as s:
        streamed = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        if r.status == "completed":
            final = s.get_final_response()
            assert final.output_text == r.output_text
    assert streamed == r.output_text


@pytest.mark.parametrize("stream", [False, True])
def test_a_required_function_call_and_its_output(client, stream):
    kw = dict(model="tiny", input="Weather in Oslo?", tools=[WEATHER], tool_choice="required", max_output_tokens=200,
              parallel_tool_calls=False, extra_body={"seed": 3})
    if stream:
        with client.responses.stream(**kw) as s:
            kinds = [e.type for e in s]
            r = s.get_final_response()
        assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    else:
        r = client.responses.create(**kw)
    calls = [i for i in r.output if i.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id and r.status == "completed"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
    # the call and its output go back as input items
    turn2 = client.responses.create(model="tiny", tools=[WEATHER], max_output_tokens=8, extra_body={"seed": 3}, input=[
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather", "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}])
    assert turn2.status in ("completed", "incomplete")


@pytest.mark.parametrize("stream", [False, True])
def test_structured_output_through_text_format(client, stream):
    kw = dict(model="tiny", input="Answer.", max_output_tokens=200, extra_body={"seed": 2}, text_format=Answer)
    if stream:
        with client.responses.stream(**kw) as s:
            r = s.get_final_response()
    else:
        r = client.responses.parse(**kw)
    assert isinstance(r.output_parsed, Answer)
    schema = {**Answer.model_json_schema(), "additionalProperties": False}
    raw = client.responses.create(model="tiny", input="Answer.", max_output_tokens=200, extra_body={"seed": 2}, text={
        "format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}})
    Answer.model_validate_json(raw.output_text)


def test_previous_response_id_continues_a_stored_conversation(client, url):
    first = client.responses.create(model="tiny", input="My name is Ana.", max_output_tokens=4, **GREEDY)
    second = client.responses.create(model="tiny", input="What is my name?", previous_response_id=first.id,
                                     max_output_tokens=4, **GREEDY)
    assert second.previous_response_id == first.id
    # the stored turn is in the prompt: as long as sending the whole conversation
    whole = client.responses.create(model="tiny", max_output_tokens=4, **GREEDY, input=[
        {"role": "user", "content": "My name is Ana."}, {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "What is my name?"}])
    assert second.usage.input_tokens == whole.usage.input_tokens
    assert second.output_text == whole.output_text
    assert client.responses.retrieve(first.id).id == first.id
    unstored = client.responses.create(model="tiny", input="x", max_output_tokens=2, store=False)
    err = api_error(httpx.post(f"{url}/v1/responses", json={"input": "y", "previous_response_id": unstored.id}), 400,
                    "previous_response_id")
    assert err["code"] == "not_found"
    api_error(httpx.get(f"{url}/v1/responses/{unstored.id}"), 404, "response_id")


def test_function_tools_are_shown_to_the_template_in_openais_order():
    """A flat function tool becomes the chat's tool object, name, description, parameters in
    that order (what the chat template is shown), whatever order the client wrote."""
    from resispec_gguf.surfaces.server.responses import _tools

    sent = {"parameters": WEATHER["parameters"], "strict": True, "description": WEATHER["description"],
            "name": "get_weather", "type": "function"}
    fn = {"name": "get_weather", "description": WEATHER["description"], "parameters": WEATHER["parameters"]}
    (tool,) = _tools({"tools": [sent]})
    assert json.dumps(tool) == json.dumps({"type": "function", "function": fn})


def test_the_store_keeps_the_last_responses_first_in_first_out():
    store = ResponseStore(limit=3)
    for i in range(5):
        store.put({"id": f"r{i}"}, [{"role": "user", "content": str(i)}])
    assert len(store) == 3 and store.response("r0") is None and store.messages("r1") is None
    assert store.messages("r4") == [{"role": "user", "content": "4"}] and store.response("r2") == {"id": "r2"}
    store.messages("r4").append("x")  # a copy
    assert len(store.messages("r4")) == 1


BAD = [
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": [5]}, "input[0]"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]}, "input[0].content[0].text"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}, "input[0].arguments"),
    ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"input": "\ud800"}, "input"),
    ({"input": "x", "instructions": 5}, "instructions"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "max_output_tokens": "5"}, "max_output_tokens"),
    ({"input": "x", "temperature": "hot"}, "temperature"),
    ({"input": "x", "stream": "yes"}, "stream"),
    ({"input": "x", "store": "yes"}, "store"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "function", "name": "f f"}]}, "tools[0].name"),
    ({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 5}]}, "tools[0].parameters"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}}, "tool_choice.name"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "file_search"}}, "tool_choice.type"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice"),
    ({"input": "x", "parallel_tool_calls": "yes", "tools": [WEATHER]}, "parallel_tool_calls"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "a", "schema": 5}}}, "text.format.schema"),
    ({"input": "x", "text": "json"}, "text"),
    ({"input": "x", "previous_response_id": 5}, "previous_response_id"),
    ({"input": "x", "previous_response_id": "resp_nope"}, "previous_response_id"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "reasoning": "high"}, "reasoning"),
    ({"input": "x", "speculative.n_min": 2}, "speculative.n_min"),
]


@pytest.mark.parametrize("stream", [False, True])
def test_bad_fields_are_400s_naming_the_field(url, stream):
    with httpx.Client(base_url=url, timeout=30) as http:
        for body, param in BAD:
            raw = json.dumps({"stream": stream, **body}).encode()  # lone surrogates as \ud800 escapes
            r = http.post("/v1/responses", content=raw, headers={"content-type": "application/json"})
            api_error(r, 400, param)


def test_the_agents_sdk_runs_on_the_default_model_class(url):
    pytest.importorskip("agents")
    from agents import Agent, ModelSettings, RunConfig, Runner, function_tool
    from agents.models.openai_responses import OpenAIResponsesModel

    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny"

    async def run():
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)
        model = OpenAIResponsesModel(model="tiny", openai_client=client)
        # a seed whose reply ends before max_tokens (the SDK takes an incomplete response for an
        # error); plain sampling ("none"), so the seed fixes the reply on any machine: auto's
        # trees follow the costs it measures, and a seeded sample follows the tree
        fixed = {"seed": 0, "method": "none"}
        settings = ModelSettings(max_tokens=400, extra_body=fixed)
        config = RunConfig(tracing_disabled=True)
        plain = await Runner.run(Agent(name="a", instructions="Be brief.", model=model, model_settings=settings),
                                 "Hi", run_config=config, max_turns=1)
        typed = await Runner.run(Agent(name="t", model=model, model_settings=settings, output_type=Answer),
                                 "Answer.", run_config=config, max_turns=1)
        tooled = await Runner.run(
            Agent(name="w", model=model, tools=[get_weather], tool_use_behavior="stop_on_first_tool",
                  model_settings=ModelSettings(max_tokens=200, tool_choice="required", parallel_tool_calls=False,
                                              extra_body=fixed)),
            "Weather in Oslo?", run_config=config, max_turns=2)
        streamed = Runner.run_streamed(Agent(name="s", instructions="Be brief.", model=model, model_settings=settings),
                                       "Hi", run_config=config, max_turns=1)
        async for _ in streamed.stream_events():
            pass
        await client.close()
        return plain, typed, tooled, streamed

    plain, typed, tooled, streamed = asyncio.run(run())
    assert isinstance(plain.final_output, str)
    assert isinstance(typed.final_output, Answer)
    assert len(calls) == 1 and tooled.final_output == "sunny"
    assert isinstance(streamed.final_output, str)
