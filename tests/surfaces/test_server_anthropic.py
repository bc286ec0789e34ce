"""Anthropic's Messages API on the server (``/v1/messages``, ``/v1/messages/count_tokens``),
end to end through the official ``anthropic`` client and raw ``httpx`` on the tiny pair:
text, the official stream of events (and that it reassembles to the non-streamed message),
``system`` as a string or blocks, stop sequences and ``stop_reason``, tools with each
``tool_choice`` and ``tool_result`` turns, JSON output, a reasoning model's thinking blocks,
``count_tokens``, the ``x-api-key`` header, and bad fields as 400s in Anthropic's error shape
naming the field.  Servers and helpers as in servers.py."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_cpp")
httpx = pytest.importorskip("httpx")
anthropic = pytest.importorskip("anthropic")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("uvicorn")

from resispec_gguf.config import DraftParams, ReasoningParams, SamplingParams  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402
from resispec_gguf.surfaces.server import create_app  # noqa: E402
from servers import anthropic_error, serving  # noqa: E402

USER = [{"role": "user", "content": "Tell me a story."}]
GREEDY = {"temperature": 0, "seed": 1}
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                            "required": ["city"], "additionalProperties": False}}


@pytest.fixture(scope="module")
def engine(tiny_pair):
    # the tiny vocabulary spells text byte by byte: tools in the prompt need the room
    e = Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=4096, n_threads=1, progress=False,
                    memory_size=0)  # seeded replies are compared: no memory of past answers
    yield e
    e.close()


@pytest.fixture(scope="module")
def url(engine):
    app = create_app(engine, model_name="tiny", draft_params=DraftParams(), sampling_defaults=SamplingParams(),
                     api_key="sekret")
    with serving(app) as u:
        yield u


@pytest.fixture(scope="module")
def client(url):
    with anthropic.Anthropic(base_url=url, api_key="sekret", max_retries=0, timeout=60) as c:
        yield c


def _post(url, body, path="/v1/messages"):
    raw = json.dumps(body).encode()  # lone surrogates as \ud800 escapes
    return httpx.post(f"{url}{path}", content=raw, headers={"x-api-key": "sekret", "content-type": "application/json"},
                      timeout=60)


def _events(url, body) -> list[tuple[str, dict]]:
    """``(event name, data)`` of a streamed message, as sent."""
    out, name = [], None
    with httpx.stream("POST", f"{url}/v1/messages", json={**body, "stream": True}, headers={"x-api-key": "sekret"},
                      timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == name
                out.append((name, data))
    return out


def test_text_reply_and_its_stream_agree(client, url):
    msg = client.messages.create(model="anything", max_tokens=20, messages=USER, system="Be brief.", extra_body=GREEDY)
    assert msg.type == "message" and msg.role == "assistant" and msg.model == "tiny" and msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"]
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.stop_sequence is None
    assert (msg.stop_reason == "max_tokens") == (msg.usage.output_tokens == 20)
    assert msg.usage.input_tokens > 5
    extra = msg.model_extra
    assert extra["timings"]["predicted_n"] == extra["speculative"]["tokens"]
    with client.messages.stream(model="x", max_tokens=20, messages=USER, system="Be brief.", extra_body=GREEDY) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == msg.content[0].text == final.content[0].text
    assert final.stop_reason == msg.stop_reason and final.usage.output_tokens == msg.usage.output_tokens
    assert final.usage.input_tokens == msg.usage.input_tokens
    # a system prompt as text blocks is the same prompt as the string
    blocks = client.messages.create(model="x", max_tokens=20, messages=USER, extra_body=GREEDY,
                                    system=[{"type": "text", "text": "Be brief."}])
    assert blocks.content[0].text == msg.content[0].text and blocks.usage.input_tokens == msg.usage.input_tokens


def test_the_stream_is_the_official_sequence_of_events(url):
    events = _events(url, {"max_tokens": 12, "messages": USER, **GREEDY})
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert names[2] == "content_block_start" and names[-3] == "content_block_stop"
    assert set(names[3:-3]) <= {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["output_tokens"] == 0
    assert all(d["delta"]["type"] == "text_delta" and d["index"] == 0 for n, d in events if n == "content_block_delta")
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens") and delta["usage"]["output_tokens"] >= 1
    assert delta["timings"]["predicted_n"] == delta["usage"]["output_tokens"]


def test_stop_sequences(client):
    full = client.messages.create(model="x", max_tokens=30, messages=USER, extra_body=GREEDY).content[0].text
    assert len(full) >= 6
    stop = full[3:5]
    cut = full[:full.index(stop)]
    for stream in (False, True):
        kw = dict(model="x", max_tokens=30, messages=USER, stop_sequences=["never here", stop], extra_body=GREEDY)
        if stream:
            with client.messages.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = client.messages.create(**kw)
        assert msg.content[0].text == cut
        assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_tool_call_is_a_tool_use_block(client, stream):
    kw = dict(model="x", max_tokens=200, messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=[WEATHER],
              tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
              extra_body={"seed": 3})
    if stream:
        with client.messages.stream(**kw) as s:
            kinds = [e.delta.type for e in s if e.type == "content_block_delta"]
            msg = s.get_final_message()
        assert "input_json_delta" in kinds
    else:
        msg = client.messages.create(**kw)
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and msg.stop_reason == "tool_use"
    assert len({u.id for u in uses}) == len(uses)
    for u in uses:
        jsonschema.validate(u.input, WEATHER["input_schema"])
    # the results go back as tool_result blocks, and the next turn answers
    results = [{"type": "tool_result", "tool_use_id": u.id, "content": "sunny"} for u in uses]
    turn2 = client.messages.create(model="x", max_tokens=8, tools=[WEATHER], extra_body={"seed": 3}, messages=[
        kw["messages"][0], {"role": "assistant", "content": msg.content}, {"role": "user", "content": results}])
    assert turn2.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_tool_choice_any_and_none(client):
    other = {**WEATHER, "name": "get_time", "description": "The time in a city"}
    base = dict(model="x", max_tokens=300, messages=[{"role": "user", "content": "Weather in Oslo?"}],
                tools=[WEATHER, other], extra_body={"seed": 5})
    msg = client.messages.create(**base, tool_choice={"type": "any", "disable_parallel_tool_use": True})
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name in ("get_weather", "get_time") and msg.stop_reason == "tool_use"
    none = client.messages.create(**{**base, "max_tokens": 8}, tool_choice={"type": "none"})
    assert [b.type for b in none.content] == ["text"] and none.stop_reason != "tool_use"


def test_json_output_follows_the_schema(client):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 10},
                                               "n": {"type": "integer"}},
              "required": ["answer", "n"], "additionalProperties": False}
    msg = client.messages.create(model="x", max_tokens=200, messages=USER, extra_body={
        "seed": 2, "output_config": {"format": {"type": "json_schema", "schema": schema}}})
    jsonschema.validate(json.loads(msg.content[0].text), schema)


def test_tools_are_shown_to_the_template_in_openais_order():
    """A custom tool becomes OpenAI's tool object, name, description, parameters in that
    order (what the chat template is shown), whatever order the client wrote."""
    from resispec_gguf.surfaces.server.anthropic import _tools

    sent = {"input_schema": WEATHER["input_schema"], "cache_control": {"type": "ephemeral"},
            "description": WEATHER["description"], "name": "get_weather"}
    fn = {"name": "get_weather", "description": WEATHER["description"], "parameters": WEATHER["input_schema"]}
    (tool,) = _tools({"tools": [sent]})
    assert json.dumps(tool) == json.dumps({"type": "function", "function": fn})
    (tool,) = _tools({"tools": [{"input_schema": {}, "name": "f"}]})
    assert list(tool["function"]) == ["name", "parameters"]


def test_count_tokens_is_the_prompt_the_message_used(client):
    kw = dict(model="x", messages=USER, system="Be brief.", tools=[WEATHER])
    counted = client.messages.count_tokens(**kw)
    msg = client.messages.create(**kw, max_tokens=1, extra_body=GREEDY)
    assert counted.input_tokens == msg.usage.input_tokens
    assert client.messages.count_tokens(model="x", messages=USER).input_tokens < counted.input_tokens


def test_the_key_is_required_as_x_api_key_or_bearer(url):
    body = {"max_tokens": 2, "messages": USER}
    r = httpx.post(f"{url}/v1/messages", json=body)
    assert anthropic_error(r, 401)["type"] == "authentication_error"
    anthropic_error(httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": "wrong"}), 401)
    assert httpx.post(f"{url}/v1/messages", json=body, headers={"Authorization": "Bearer sekret"}).status_code == 200
    with anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0) as bad:
        with pytest.raises(anthropic.AuthenticationError):
            bad.messages.create(model="x", max_tokens=2, messages=USER)


BAD = [
    ({"messages": USER}, "max_tokens"),
    ({"max_tokens": "5", "messages": USER}, "max_tokens"),
    ({"max_tokens": 0, "messages": USER}, "max_tokens"),
    ({"max_tokens": 4}, "messages"),
    ({"max_tokens": 4, "messages": []}, "messages"),
    ({"max_tokens": 4, "messages": "hi"}, "messages"),
    ({"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"max_tokens": 4, "messages": [{"role": "user"}]}, "messages[0].content"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
     "messages[0].content[0].text"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0].type"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"max_tokens": 4, "messages": [*USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "f", "input": "x"}]}]}, "messages[1].content[0].input"),
    ({"max_tokens": 4, "messages": [*USER, {"role": "assistant", "content": "prefill"}]}, "messages[1].role"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "\ud800"}]}, "messages[0].content[0].text"),
    ({"max_tokens": 4, "messages": USER, "system": 5}, "system"),
    ({"max_tokens": 4, "messages": USER, "system": [{"type": "image"}]}, "system[0].type"),
    ({"max_tokens": 4, "messages": USER, "stop_sequences": "x"}, "stop_sequences"),
    ({"max_tokens": 4, "messages": USER, "stop_sequences": [""]}, "stop_sequences"),
    ({"max_tokens": 4, "messages": USER, "temperature": "hot"}, "temperature"),
    ({"max_tokens": 4, "messages": USER, "top_k": -1}, "top_k"),
    ({"max_tokens": 4, "messages": USER, "top_p": 0}, "top_p"),
    ({"max_tokens": 4, "messages": USER, "stream": "yes"}, "stream"),
    ({"max_tokens": 4, "messages": USER, "tools": {}}, "tools"),
    ({"max_tokens": 4, "messages": USER, "tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({"max_tokens": 4, "messages": USER, "tools": [{"name": "f f", "input_schema": {}}]}, "tools[0].name"),
    ({"max_tokens": 4, "messages": USER, "tools": [{"name": "f", "input_schema": 5}]}, "tools[0].input_schema"),
    ({"max_tokens": 4, "messages": USER, "tools": [{"type": "web_search_20250305", "name": "w"}]}, "tools[0].type"),
    ({"max_tokens": 4, "messages": USER, "tools": [WEATHER], "tool_choice": "auto"}, "tool_choice"),
    ({"max_tokens": 4, "messages": USER, "tools": [WEATHER], "tool_choice": {"type": "magic"}}, "tool_choice.type"),
    ({"max_tokens": 4, "messages": USER, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "other"}},
     "tool_choice.name"),
    ({"max_tokens": 4, "messages": USER, "tools": [WEATHER],
      "tool_choice": {"type": "any", "disable_parallel_tool_use": "yes"}}, "tool_choice.disable_parallel_tool_use"),
    ({"max_tokens": 4, "messages": USER, "tool_choice": {"type": "any"}}, "tool_choice"),
    ({"max_tokens": 4, "messages": USER, "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"max_tokens": 4, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": -5}},
     "thinking.budget_tokens"),
    ({"max_tokens": 4, "messages": USER, "thinking": {"type": "sometimes"}}, "thinking.type"),
    ({"max_tokens": 4, "messages": USER, "output_config": {"format": {"type": "json_object"}}}, "output_config.format"),
    ({"max_tokens": 4, "messages": USER, "output_config": {"format": {"type": "json_schema", "schema": 5}}},
     "output_config.format.schema"),
    ({"max_tokens": 4, "messages": USER, "speculative": {"p_min": 0.5}}, "speculative.p_min"),
]


@pytest.mark.parametrize("stream", [False, True])
def test_bad_fields_are_400s_in_anthropics_shape_naming_the_field(url, stream):
    for body, param in BAD:
        err = anthropic_error(_post(url, {"stream": stream, **body}), 400, param)
        assert err["type"] == "invalid_request_error" and param.split("[")[0].split(".")[0] in err["message"]
    counted = _post(url, {"messages": "hi"}, "/v1/messages/count_tokens")
    anthropic_error(counted, 400, "messages")


def test_bad_requests_raise_the_clients_errors(client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="x", max_tokens=4, messages=USER, stop_sequences=[""])
    assert e.value.body["error"]["param"] == "stop_sequences"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="x", max_tokens=4, messages=[{"role": "user", "content": "a b " * 2100}])


@pytest.fixture(scope="module")
def think_url(open_think_pair):
    engine = Engine.load(str(open_think_pair[0]), str(open_think_pair[1]), n_ctx=512, n_threads=1, flash_attn=False,
                         progress=False, memory_size=0)  # seeded replies are compared: no memory of past answers
    app = create_app(engine, model_name="think", draft_params=DraftParams(), sampling_defaults=SamplingParams(),
                     reasoning=ReasoningParams(reasoning_budget=5))
    with serving(app) as u:
        yield u
    engine.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_reasoning_models_thinking_is_a_thinking_block(think_url, seed):
    with anthropic.Anthropic(base_url=think_url, api_key="x", max_retries=0, timeout=60) as client:
        kw = dict(model="x", max_tokens=16, messages=USER, extra_body={"seed": seed})
        msg = client.messages.create(**kw)
        assert msg.content[0].type == "thinking" and msg.content[0].thinking and "</think>" not in msg.content[0].thinking
        assert all(b.type != "thinking" for b in msg.content[1:])
        with client.messages.stream(**kw) as s:
            kinds = [e.delta.type for e in s if e.type == "content_block_delta"]
            final = s.get_final_message()
        assert kinds[0] == "thinking_delta"
        assert [b.model_dump() for b in final.content] == [b.model_dump() for b in msg.content]
        # thinking disabled: a budget of 0, no thinking block
        off = client.messages.create(**kw, thinking={"type": "disabled"})
        assert all(b.type != "thinking" or not b.thinking for b in off.content)
        # an earlier turn's thinking block is accepted and dropped
        again = client.messages.create(model="x", max_tokens=4, extra_body={"seed": seed}, messages=[
            *USER, {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
            {"role": "user", "content": "And then?"}])
        assert again.stop_reason in ("end_turn", "max_tokens")
