"""The OpenAI-compatible server, end to end: real uvicorn servers on loopback ports, driven by
the official ``openai`` client and by raw ``httpx`` requests.

Servers per module: the tiny model pair (``server``), the same pair behind an API key
(``auth_server``), and a "slow" engine (the tiny pair's tokenizer and chat template with a fake
generator that yields one piece every few milliseconds and records cancellation) behind a
queue of four, to probe hostile input deterministically (helpers in servers.py).  The queue,
client disconnects, unexpected errors and several slots are in test_server_queue.py.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from resispec_gguf.config import DraftParams, SamplingParams  # noqa: E402
from resispec_gguf.surfaces.server import create_app  # noqa: E402
from servers import (MESSAGES, POST_ROUTES, SlowEngine, anthropic_error, api_error, load, serving,  # noqa: E402
                     still_healthy, stream_text, wait_for)



@pytest.fixture(scope="module")
def engines(tiny_pair):
    loaded = [load(tiny_pair) for _ in range(3)]
    yield loaded
    for e in loaded:
        e.close()


@pytest.fixture(scope="module")
def server(engines):
    app = create_app(engines[0], model_name="tiny", draft_params=DraftParams(),
                     sampling_defaults=SamplingParams(max_tokens=48))
    with serving(app) as url:
        yield url


@pytest.fixture(scope="module")
def auth_server(engines):
    app = create_app(engines[1], model_name="tiny", draft_params=DraftParams(method="none"),
                     sampling_defaults=SamplingParams(max_tokens=8), api_key="sekret")
    with serving(app) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


# ---------------------------------------------------------------------------------- happy paths


def test_health_and_models(server, client):
    health = httpx.get(f"{server}/health").json()
    assert {k: health[k] for k in ("status", "slots")} == {"status": "ok", "slots": {"busy": 0, "idle": 1, "waiting": 0}}
    assert set(health) <= {"status", "slots", "prompt_cache"}  # one slot keeps a RAM cache too, when on
    r = httpx.get(f"{server}/v1/models").json()
    assert r["object"] == "list" and [m["id"] for m in r["data"]] == ["tiny"]
    assert [m.id for m in client.models.list()] == ["tiny"]
    assert client.models.retrieve("tiny").id == "tiny"
    api_error(httpx.get(f"{server}/v1/models/other"), 404, "model")


def test_chat_stream_matches_non_stream(client, engines):
    kw = dict(model="anything", messages=MESSAGES, temperature=0, seed=3, max_tokens=40)
    full = client.chat.completions.create(**kw)
    choice = full.choices[0]
    assert full.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length")
    spec = full.model_extra["speculative"]
    assert spec["method"] == DraftParams().method and spec["target_calls"] >= 1
    # usage: the rendered ChatML prompt has no BOS text, so the server adds BOS when tokenizing
    rendered = engines[1].render_chat(MESSAGES)
    assert full.usage.prompt_tokens == len(engines[1].text_tokens(rendered)) == spec["prompt_tokens"]
    assert full.usage.completion_tokens == spec["tokens"] >= 1
    assert full.usage.total_tokens == full.usage.prompt_tokens + full.usage.completion_tokens
    assert (choice.finish_reason == "length") == (full.usage.completion_tokens == 40)

    text, chunks = stream_text(client.chat.completions.create(**kw, stream=True,
                                                               stream_options={"include_usage": True}))
    assert text == choice.message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [choice.finish_reason]
    last = chunks[-1]
    assert last.choices == [] and last.usage.model_dump() == full.usage.model_dump()
    assert last.model_extra["speculative"]["tokens"] == spec["tokens"]
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_without_usage_puts_stats_on_finish_chunk(client):
    text, chunks = stream_text(client.chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0, max_tokens=10, stream=True))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert "speculative" in chunks[-1].model_extra
    assert all(c.usage is None for c in chunks)


def test_completions_both_ways(client):
    kw = dict(model="tiny", prompt="Once upon a time", temperature=0, max_tokens=30)
    full = client.completions.create(**kw)
    assert full.object == "text_completion"
    text = full.choices[0].text
    assert full.usage.prompt_tokens == full.model_extra["speculative"]["prompt_tokens"] > 1
    assert full.usage.completion_tokens == full.model_extra["speculative"]["tokens"]
    chunks = list(client.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].model_extra["speculative"]["tokens"] == full.usage.completion_tokens
    # a list holding one string is the same prompt
    assert client.completions.create(**{**kw, "prompt": ["Once upon a time"]}).choices[0].text == text


def test_stop_strings(client):
    kw = dict(model="tiny", prompt="Once upon a time", temperature=0, max_tokens=30)
    text = client.completions.create(**kw).choices[0].text
    assert len(text) >= 4
    stop = text[len(text) // 2: len(text) // 2 + 2]
    cut = text[: text.index(stop)]
    for stops in (stop, [stop, "never matches"]):
        r = client.completions.create(**kw, stop=stops)
        assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
        chunks = list(client.completions.create(**kw, stop=stops, stream=True))
        assert "".join(c.choices[0].text for c in chunks) == cut
        assert chunks[-1].choices[0].finish_reason == "stop"


def test_the_memory_field_is_a_boolean(client):
    """``"memory": false`` leaves the server's memory of past answers out of one request."""
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, extra_body={"memory": False})
    assert r.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, extra_body={"memory": "off"})
    assert e.value.body["param"] == "memory"


def test_seed_determinism_and_draft_overrides(client):
    kw = dict(model="tiny", messages=MESSAGES, temperature=1.0, seed=1234, max_tokens=30)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.completion_tokens == b.usage.completion_tokens
    text, _ = stream_text(client.chat.completions.create(**kw, stream=True))
    assert text == a.choices[0].message.content
    c = client.chat.completions.create(**kw, top_p=0.9, extra_body={
        "top_k": 20, "min_p": 0.01, "method": "chain", "depth": 2, "budget": 4, "draws": 2})
    spec = c.model_extra["speculative"]
    assert spec["method"] == "chain" and len(spec["reached_by_depth"]) <= 2
    d = client.completions.create(model="tiny", prompt="abc", max_tokens=5, seed=5, extra_body={"method": "none"})
    assert d.model_extra["speculative"]["method"] == "none" and d.model_extra["speculative"]["draft_calls"] == 0
    assert d.model_extra["speculative"]["tau"] == 1.0 and d.model_extra["speculative"]["acceptance_rate"] is None
    assert d.usage.completion_tokens <= 5


# ---------------------------------------------------------------------------------- bad requests

BAD = [
    ("chat", {"messages": MESSAGES, "temperature": "hot"}, "temperature"),
    ("chat", {"messages": MESSAGES, "temperature": 500}, "temperature"),
    ("chat", {"messages": MESSAGES, "temperature": True}, "temperature"),
    ("chat", {"messages": MESSAGES, "max_tokens": -5}, "max_tokens"),
    ("chat", {"messages": MESSAGES, "max_tokens": 0}, "max_tokens"),
    ("chat", {"messages": MESSAGES, "max_tokens": 10**7}, "max_tokens"),
    ("chat", {"messages": MESSAGES, "max_tokens": 10**40}, "max_tokens"),
    ("chat", {"messages": MESSAGES, "max_tokens": "5"}, "max_tokens"),
    ("chat", {"messages": MESSAGES, "max_completion_tokens": 2.5}, "max_completion_tokens"),
    ("chat", {"messages": MESSAGES, "max_completion_tokens": 0}, "max_completion_tokens"),
    ("chat", {"messages": MESSAGES, "method": "rrs", "draws": 65}, "draws"),
    ("chat", {"messages": MESSAGES, "budget": 10**6}, "budget"),
    ("chat", {"messages": MESSAGES, "top_p": 0}, "top_p"),
    ("chat", {"messages": MESSAGES, "top_k": -1}, "top_k"),
    ("chat", {"messages": MESSAGES, "top_k": 10**30}, "top_k"),
    ("chat", {"messages": MESSAGES, "min_p": 1.5}, "min_p"),
    ("chat", {"messages": MESSAGES, "seed": -1}, "seed"),
    ("chat", {"messages": MESSAGES, "seed": "x"}, "seed"),
    ("chat", {"messages": MESSAGES, "stop": 5}, "stop"),
    ("chat", {"messages": MESSAGES, "stop": [""]}, "stop"),
    ("chat", {"messages": MESSAGES, "stop": ["x" * 1001]}, "stop"),
    ("chat", {"messages": MESSAGES, "n": 2}, "n"),
    ("chat", {"messages": MESSAGES, "stream": "yes"}, "stream"),
    ("chat", {"messages": MESSAGES, "stream_options": "x", "stream": True}, "stream_options"),
    ("chat", {"messages": MESSAGES, "method": "magic"}, "method"),
    ("chat", {"messages": MESSAGES, "method": 3}, "method"),
    ("chat", {"messages": MESSAGES, "draws": 0}, "draws"),
    ("chat", {"messages": MESSAGES, "depth": 100}, "depth"),
    ("chat", {"messages": MESSAGES, "logprobs": "yes"}, "logprobs"),
    ("chat", {"messages": MESSAGES, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("chat", {"messages": MESSAGES, "logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("chat", {"messages": MESSAGES, "top_logprobs": 2}, "top_logprobs"),
    ("chat", {"messages": MESSAGES, "logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ("chat", {"model": "tiny"}, "messages"),
    ("chat", {"messages": "hi"}, "messages"),
    ("chat", {"messages": []}, "messages"),
    ("chat", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ("chat", {"messages": [{"content": "x"}]}, "messages[0]"),
    ("chat", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("chat", {"messages": ["hi"]}, "messages[0]"),
    ("completions", {}, "prompt"),
    ("completions", {"prompt": 5}, "prompt"),
    ("completions", {"prompt": [[1, 2]]}, "prompt"),
    ("completions", {"prompt": []}, "prompt"),
    ("completions", {"prompt": "a", "n": 3}, "n"),
    ("completions", {"prompt": "a", "echo": True}, "echo"),
    ("completions", {"prompt": "a", "logprobs": 21}, "logprobs"),
    ("completions", {"prompt": "a", "logprobs": True}, "logprobs"),
    ("completions", {"prompt": "a", "logprobs": "2"}, "logprobs"),
    ("completions", {"prompt": "a", "max_tokens": -5}, "max_tokens"),
    ("completions", {"prompt": [100000]}, None),  # token id outside the vocabulary: the engine's UserError
]


@pytest.mark.parametrize("stream", [False, True])
def test_bad_fields_are_400(server, stream):
    with httpx.Client(base_url=server, timeout=30) as http:
        for route, body, param in BAD:
            body = {"stream": stream, **body}
            r = http.post(f"/v1/{'chat/completions' if route == 'chat' else 'completions'}", json=body)
            api_error(r, 400, param)
        assert http.get("/health").status_code == 200


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"text"', b"null", b"\xff\xfe\x00",
                                 b'{"prompt": "a", "temperature": NaN}', b"[" * 100_000])
def test_malformed_bodies_are_400(server, raw):
    for route in POST_ROUTES:  # each answers in its own shape (Anthropic's for /v1/messages)
        r = httpx.post(f"{server}{route}", content=raw, headers={"content-type": "application/json"})
        (anthropic_error if route.startswith("/v1/messages") else api_error)(r, 400)
    assert httpx.get(f"{server}/health").status_code == 200


def test_unknown_routes_and_methods(server):
    assert api_error(httpx.get(f"{server}/v1/nothing"), 404)["code"] == "not_found"
    assert api_error(httpx.get(f"{server}/v1/chat/completions"), 405)["code"] == "method_not_allowed"


def test_prompt_longer_than_context_is_400(client, server):
    long = "a b " * 400  # about 1600 tokens, the context holds 512
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": long}], stream=stream)
        assert e.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="tiny", prompt=long, stream=stream)
        assert e.value.code == "context_length_exceeded"
    err = api_error(httpx.post(f"{server}/v1/completions", json={"prompt": long}), 400, "prompt")
    assert "context" in err["message"]
    assert client.completions.create(model="tiny", prompt="ok", max_tokens=2).choices


# ---------------------------------------------------------------------------------- API key


def test_api_key_required_on_v1(auth_server):
    assert httpx.get(f"{auth_server}/health").status_code == 200
    assert api_error(httpx.get(f"{auth_server}/v1/models"), 401)["code"] == "invalid_api_key"
    api_error(httpx.get(f"{auth_server}/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
    api_error(httpx.post(f"{auth_server}/v1/completions", json={"prompt": "a"}), 401)
    ok = httpx.get(f"{auth_server}/v1/models", headers={"Authorization": "Bearer sekret"})
    assert ok.status_code == 200 and ok.json()["data"][0]["id"] == "tiny"
    with openai.OpenAI(base_url=f"{auth_server}/v1", api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    with openai.OpenAI(base_url=f"{auth_server}/v1", api_key="sekret", max_retries=0) as good:
        r = good.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, seed=0)
        assert r.model_extra["speculative"]["method"] == "none"


# ---------------------------------------------------------------------------------- hostile input
# After every probe the server must still answer a normal request, correctly and within 2 s.

@pytest.fixture(scope="module")
def slow4(engines):
    """The slow engine behind a queue of four."""
    engine = SlowEngine(engines[2])
    app = create_app(engine, model_name="slow", draft_params=DraftParams(method="none"),
                     sampling_defaults=SamplingParams(max_tokens=3), max_queue=4)
    with serving(app) as url:
        yield url, app, engine


def test_huge_prompt_is_refused_before_tokenizing(slow4):
    url, app, engine = slow4
    assert still_healthy(url) == "xxxx"
    limit = engines_limit = app.state.resispec.max_prompt_bytes
    assert limit == engine.real.target.n_ctx * engine.real.target.max_piece_bytes()
    engine.tokenized = 0
    probes = [
        ("completions", {"prompt": "hello world " * 25000}, "prompt"),  # the repro: 300 KB
        ("completions", {"prompt": "a" * (limit + 1)}, "prompt"),
        ("completions", {"prompt": ["\u00e9" * (limit // 2 + 1)]}, "prompt"),  # few characters, too many bytes
        ("completions", {"prompt": list(range(engines_limit))}, "prompt"),  # token ids: more than n_ctx
        ("chat/completions", {"messages": [{"role": "user", "content": "x" * (limit // 2 + 1)},
                                           {"role": "user", "content": [{"type": "text", "text": "y" * (limit // 2)}]}]},
         "messages"),
        ("chat/completions", {"messages": [{"role": "user"}] * app.state.resispec.n_ctx}, "messages"),
    ]
    for route, body, param in probes:
        t = time.monotonic()
        r = httpx.post(f"{url}/v1/{route}", json=body, timeout=10)
        assert api_error(r, 400, param)["code"] == "context_length_exceeded"
        assert time.monotonic() - t < 2
        still_healthy(url)
    assert engine.tokenized == len(probes)  # only the health checks were tokenized
    # at the limit it is tokenized (the slow engine's fake generator takes any length)
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "a" * limit}, timeout=10)
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == limit + 1  # BOS + one per byte
    assert engine.tokenized == len(probes) + 1


def test_abandoned_slow_tokenization_delays_nobody(slow4):
    """Tokenizing happens off the engine thread: a client that leaves while its prompt is being
    tokenized frees its place at once, and the next request is served meanwhile."""
    url, app, engine = slow4
    worker = app.state.resispec.worker
    engine.tokenize_delay["slow prompt"] = 3.0
    try:
        t = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/completions", json={"prompt": "slow prompt"}, timeout=0.5)
        wait_for(lambda: worker.inflight == 0, timeout=1.0)  # its place is free before it is tokenized
        assert still_healthy(url) == "xxxx"
        assert time.monotonic() - t < 2.5  # well before the abandoned tokenization ends
    finally:
        del engine.tokenize_delay["slow prompt"]


def test_clients_leaving_the_queue_free_their_places(slow4):
    url, app, engine = slow4
    worker = app.state.resispec.worker
    results = []

    def request(timeout):
        try:
            results.append(httpx.post(f"{url}/v1/completions", json={"prompt": "q", "max_tokens": 3}, timeout=timeout))
        except httpx.ReadTimeout:
            results.append(None)

    with httpx.Client(base_url=url, timeout=20) as http:
        with http.stream("POST", "/v1/completions", json={"prompt": "a", "stream": True, "max_tokens": 100_000}) as a:
            lines = a.iter_lines()
            for line in lines:  # A runs
                if '"text":"x"' in line:
                    break
            leavers = [threading.Thread(target=request, args=(0.5,)) for _ in range(4)]
            for th in leavers:
                th.start()
            wait_for(lambda: worker.inflight == 5)  # the queue is full ...
            for th in leavers:
                th.join(5)
            assert results == [None] * 4
            wait_for(lambda: worker.inflight == 1, timeout=1.0)  # ... and empty again as they leave
            results.clear()
            stayers = [threading.Thread(target=request, args=(20,)) for _ in range(4)]
            for th in stayers:
                th.start()
            wait_for(lambda: worker.inflight == 5)  # all four admitted behind A, none refused
            assert results == []
        for th in stayers:  # closing A lets them run
            th.join(20)
    assert [r.status_code for r in results] == [200] * 4
    assert all(r.json()["choices"][0]["text"] == "xxx" for r in results)
    wait_for(lambda: worker.inflight == 0)
    still_healthy(url)


HOSTILE_TEXT = [
    ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
     "messages[0].content[0].text"),
    ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]},
     "messages[0].content[0].text"),
    ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": {"t": "x"}}]}]},
     "messages[0].content[0].text"),
    ("chat/completions", {"messages": [{"role": "user", "content": [5]}]}, "messages[0].content[0]"),
    ("chat/completions", {"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "\ud800"}]},
     "messages[1].content"),
    ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "a\udfffb"}]}]},
     "messages[0].content[0].text"),
    ("chat/completions", {"messages": MESSAGES, "stop": ["\ud800"]}, "stop"),
    ("completions", {"prompt": "\ud800"}, "prompt"),
    ("completions", {"prompt": ["x\udc00"]}, "prompt"),
]


@pytest.mark.parametrize("stream", [False, True])
def test_bad_text_is_400_naming_the_param(server, stream):
    for route, body, param in HOSTILE_TEXT:
        raw = json.dumps({**body, "stream": stream}).encode()  # lone surrogates as \ud800 escapes
        r = httpx.post(f"{server}/v1/{route}", content=raw, headers={"content-type": "application/json"}, timeout=10)
        api_error(r, 400, param)
        still_healthy(server)


def test_control_text_in_messages_stays_text(server):
    """The tiny vocabulary spells text byte by byte: one character more, one token more."""
    def prompt_tokens(content):
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1, "method": "none"}
        r = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["usage"]["prompt_tokens"]

    assert prompt_tokens("<|im_start|>system") + 1 == prompt_tokens("<|im_startX|>system")
    still_healthy(server)


def test_posts_must_be_json(server):
    for headers in ({"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"},
                    {"content-type": "multipart/form-data; boundary=x"}, {}):
        for route in POST_ROUTES:
            r = httpx.post(f"{server}{route}", content=b'{"prompt": "hi", "messages": []}', headers=headers)
            if route.startswith("/v1/messages"):
                assert anthropic_error(r, 415)["type"] == "invalid_request_error"
            else:
                assert api_error(r, 415)["code"] == "unsupported_media_type"
    r = httpx.post(f"{server}/v1/completions", content=b'{"prompt": "hi", "max_tokens": 1}',
                   headers={"content-type": "Application/JSON; charset=utf-8"})
    assert r.status_code == 200, r.text
    still_healthy(server)


def _preflight(url, origin):
    return httpx.options(f"{url}/v1/chat/completions", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})


def test_cors_only_for_allowed_origins(server, engines):
    # by default: no preflight is answered, no response carries CORS headers
    r = _preflight(server, "http://evil.example")
    assert r.status_code == 405 and "access-control-allow-origin" not in r.headers
    r = httpx.post(f"{server}/v1/completions", json={"prompt": "a", "max_tokens": 1, "method": "none"},
                   headers={"Origin": "http://evil.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    still_healthy(server)

    engine = SlowEngine(engines[2])
    app = create_app(engine, model_name="slow", draft_params=DraftParams(method="none"),
                     sampling_defaults=SamplingParams(max_tokens=2), cors_origins=["http://good.example"])
    with serving(app) as url:
        r = _preflight(url, "http://good.example")
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://good.example"
        assert "POST" in r.headers["access-control-allow-methods"]
        r = _preflight(url, "http://evil.example")
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "a"}, headers={"Origin": "http://good.example"})
        assert r.json()["choices"][0]["text"] == "xx" and r.headers["access-control-allow-origin"] == "http://good.example"
        assert still_healthy(url) == "xxxx"


@pytest.mark.parametrize("key", ["", "cl\u00e9", "tab\tkey", " padded"])
def test_unusable_api_keys_are_refused(engines, key):
    from resispec_gguf.errors import UserError

    with pytest.raises(UserError, match="api_key"):
        create_app(engines[2], model_name="x", draft_params=DraftParams(method="none"), api_key=key)
