"""The server's utility and operations surface, end to end on the tiny pair: llama.cpp's
``/tokenize``, ``/detokenize``, ``/apply-template``, ``/props`` and ``/slots``; ``/metrics``
read with Prometheus' own text parser, its counters moving with the requests; the
``timings`` object on every completion; llama.cpp's per-request ``speculative.*`` fields;
the API key from the settings, a key file or ``RESISPEC_API_KEY`` on every route but
``/health``; and malformed bodies on every POST route answered 4xx in the route's shape, never
500.  Servers and helpers as in servers.py."""

from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("llama_cpp")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

import tool_formats as tf  # noqa: E402
from resispec_gguf.config import ConfigError, DraftParams, SamplingParams, ServerParams  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402
from resispec_gguf.errors import UserError  # noqa: E402
from resispec_gguf.surfaces.server import API_KEY_ENV, api_key, create_app  # noqa: E402
from servers import (MESSAGES, POST_ROUTES, SlowEngine, anthropic_error, api_error, load, read_until_content,  # noqa: E402
                     serving, still_healthy, wait_for)

GET_ROUTES = ["/v1/models", "/v1/models/tiny", "/props", "/slots", "/metrics", "/v1/responses/resp_x"]


@pytest.fixture(scope="module")
def engines(tiny_pair):
    loaded = [load(tiny_pair) for _ in range(2)]
    yield loaded
    for e in loaded:
        e.close()


@pytest.fixture(scope="module")
def url(engines):
    app = create_app(engines[0], model_name="tiny", draft_params=DraftParams(method="resispec"),
                     sampling_defaults=SamplingParams(max_tokens=24))
    with serving(app) as u:
        yield u


def _families(text: str) -> dict:
    """``{sample name + labels: value}`` of a /metrics page, read by prometheus_client's parser
    (which raises on anything outside the text format)."""
    parser = pytest.importorskip("prometheus_client.parser")
    out = {}
    for family in parser.text_string_to_metric_families(text):
        assert family.documentation, family.name
        for s in family.samples:
            out[s.name + json.dumps(s.labels, sort_keys=True) * bool(s.labels)] = s.value
    return out


def test_tokenize_and_detokenize_round_trip(url, engines):
    engine = engines[0]
    r = httpx.post(f"{url}/tokenize", json={"content": "Once upon"}).json()
    assert r["tokens"] == engine.tokenize("Once upon") and engine.target.bos not in r["tokens"]
    with_bos = httpx.post(f"{url}/tokenize", json={"content": "Once upon", "add_special": True}).json()["tokens"]
    assert with_bos == engine.text_tokens("Once upon")
    pieces = httpx.post(f"{url}/tokenize", json={"content": "Once é", "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == engine.tokenize("Once é")
    # the tiny vocabulary spells text byte by byte: é is two pieces that are not UTF-8 alone
    assert [p["piece"] for p in pieces][:5] == ["O", "n", "c", "e", " "] and pieces[-1]["piece"] == [0xA9]
    back = httpx.post(f"{url}/detokenize", json={"tokens": with_bos}).json()["content"]
    assert back.endswith("Once upon") and back != "Once upon"  # BOS comes back as its text
    # a control token's text is parsed into it, or not
    bos = back[: -len("Once upon")]
    assert httpx.post(f"{url}/tokenize", json={"content": bos}).json()["tokens"] == [engine.target.bos]
    assert len(httpx.post(f"{url}/tokenize", json={"content": bos, "parse_special": False}).json()["tokens"]) > 1


def test_apply_template_is_the_prompt_a_chat_gets(url, engines):
    r = httpx.post(f"{url}/apply-template", json={"messages": MESSAGES}).json()
    assert r["prompt"] == engines[0].render_chat(MESSAGES)
    chat = httpx.post(f"{url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1}).json()
    assert chat["usage"]["prompt_tokens"] == len(engines[0].text_tokens(r["prompt"]))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with_tools = httpx.post(f"{url}/apply-template", json={"messages": MESSAGES, "tools": tools}).json()["prompt"]
    assert '"name": "f"' in with_tools or '"f"' in with_tools and with_tools != r["prompt"]


def test_apply_template_shows_the_tools_as_the_client_sent_them(url, engines):
    """A template that renders tools (Hermes') is shown each tool object exactly as sent: its
    keys' order, a key the server does not use, no ``parameters`` when none came, text
    unescaped; the tiny model's own template, which knows no tools, gets each function as sent
    in the system text."""
    tools = [{"function": {"description": "it's <b> & é", "name": "look_up", "strict": True,
                           "parameters": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {}}}},
              "type": "function"},
             {"type": "function", "function": {"name": "ping"}}]
    hermes = Engine(engines[1].target, engines[1].draft, chat_template=tf.HERMES)
    app = create_app(hermes, model_name="hermes", draft_params=DraftParams(), sampling_defaults=SamplingParams())
    with serving(app) as u:
        prompt = httpx.post(f"{u}/apply-template", json={"messages": MESSAGES, "tools": tools}).json()["prompt"]
    assert "<tools>" + "".join(json.dumps(t, ensure_ascii=False) for t in tools) + "</tools>" in prompt
    assert "\\u0027" not in prompt and "it's <b> & é" in prompt
    plain = httpx.post(f"{url}/apply-template", json={"messages": MESSAGES, "tools": tools}).json()["prompt"]
    for t in tools:
        assert json.dumps({"type": "function", "function": t["function"]}, ensure_ascii=False) in plain


def test_props_and_slots(url, engines):
    props = httpx.get(f"{url}/props").json()
    assert props["default_generation_settings"]["n_ctx"] == engines[0].n_ctx
    params = props["default_generation_settings"]["params"]
    assert params["n_predict"] == 24 and params["draft"]["method"] == "resispec" and params["speculative.n_min"] == 0
    assert props["total_slots"] == 1 and props["model_path"].endswith("target.gguf")
    assert props["draft_model_path"].endswith("draft.gguf") and "im_start" in props["chat_template"]
    assert props["build_info"].startswith("resispec-gguf ")
    assert httpx.get(f"{url}/slots").json() == [{"id": 0, "n_ctx": engines[0].n_ctx, "speculative": True,
                                                 "is_processing": False}]


def test_slots_and_metrics_show_a_running_request(engines):
    engine = SlowEngine(engines[1])
    app = create_app(engine, model_name="slow", draft_params=DraftParams(), sampling_defaults=SamplingParams())
    body = {"messages": MESSAGES, "stream": True, "max_tokens": 100_000, "temperature": 0.5}
    with serving(app) as u, httpx.Client(base_url=u, timeout=20) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            read_until_content(lines)
            slot = http.get("/slots").json()[0]
            assert slot["is_processing"] and slot["kind"] == "chat" and slot["params"]["temperature"] == 0.5
            assert slot["n_prompt_tokens"] > 5 and slot["elapsed_s"] >= 0
            assert _families(http.get("/metrics").text)["llamacpp:requests_processing"] == 1
        wait_for(lambda: not http.get("/slots").json()[0]["is_processing"])
        assert _families(http.get("/metrics").text)["llamacpp:requests_processing"] == 0


def test_metrics_parse_and_move_with_the_requests(url):
    before = _families(httpx.get(f"{url}/metrics").text)
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 20, "seed": 3}).json()
    t = r["timings"]
    spec = r["speculative"]
    after = _families(httpx.get(f"{url}/metrics").text)

    def moved(name):
        return after[name] - before.get(name, 0)

    assert moved("resispec:generations_total") == 1
    assert moved("llamacpp:tokens_predicted_total") == t["predicted_n"] == r["usage"]["completion_tokens"] > 0
    assert moved("llamacpp:prompt_tokens_total") == t["prompt_n"]
    assert moved("resispec:prompt_tokens_reused_total") == t["cache_n"]
    assert moved("llamacpp:n_decode_total") == spec["target_calls"] == moved("resispec:steps_total")
    assert moved("resispec:draft_tokens_total") == t["draft_n"] > 0
    assert moved("resispec:draft_tokens_accepted_total") == t["draft_n_accepted"] == sum(spec["accepted_by_depth"])
    for d, n in enumerate(spec["reached_by_depth"]):
        assert moved(f'resispec:draft_reached_total{{"depth": "{d + 1}"}}') == n
    assert sum(moved(f'resispec:steps_by_kind_total{{"kind": "{k}"}}') for k in spec["steps_by_kind"]) == spec["steps"]
    assert sum(moved(f'resispec:tokens_by_kind_total{{"kind": "{k}"}}') for k in spec["tokens_by_kind"]) == t["predicted_n"]
    assert after["llamacpp:predicted_tokens_seconds"] > 0 and after["llamacpp:requests_deferred"] == 0
    assert after["resispec:tau"] >= 1 and after["resispec:rows_per_step"] >= 1
    assert 0 <= after['resispec:acceptance_rate{"depth": "1"}'] <= 1


def test_every_completion_carries_timings(url):
    chat = httpx.post(f"{url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 5}).json()
    t = chat["timings"]
    assert t["predicted_n"] == chat["speculative"]["tokens"] and t["prompt_n"] + t["cache_n"] == chat["usage"]["prompt_tokens"]
    assert set(t) >= {"prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                      "predicted_per_token_ms", "predicted_per_second", "draft_n", "draft_n_accepted"}
    for body, path in ((MESSAGES, "/v1/chat/completions"), (None, "/v1/completions")):
        req = {"messages": body} if body else {"prompt": "Once"}
        with httpx.stream("POST", f"{url}{path}", json={**req, "max_tokens": 5, "stream": True}) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        assert "timings" in chunks[-1] and all("timings" not in c for c in chunks[:-1])


def test_llama_cpps_speculative_fields_map_onto_ours(url):
    def spec(**extra):
        body = {"prompt": "Once upon a time", "max_tokens": 12, "seed": 1, **extra}
        r = httpx.post(f"{url}/v1/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()["speculative"]

    nested, dotted = spec(speculative={"n_max": 2, "n_min": 0}), spec(**{"speculative.n_max": 2})
    assert len(nested["reached_by_depth"]) == 2 and len(spec()["reached_by_depth"]) > 2  # n_max is the depth
    for key in ("tokens", "steps", "reached_by_depth", "accepted_by_depth"):
        assert nested[key] == dotted[key], key
    assert spec(**{"speculative.n_max": 0})["method"] == "none"
    for body, param in (({"speculative.p_min": 0.75}, "speculative.p_min"),
                        ({"speculative": {"n_min": 3}}, "speculative.n_min"),
                        ({"speculative": {"n_max": 33}}, "speculative.n_max"),
                        ({"speculative": {"n_max": "2"}}, "speculative.n_max"),
                        ({"speculative": {"draft": 2}}, "speculative.draft"),
                        ({"speculative": 2}, "speculative"),
                        ({"speculative": {"n_max": 2}, "speculative.n_max": 2}, "speculative.n_max"),
                        ({"speculative.n_max": 2, "depth": 3}, "speculative.n_max")):
        api_error(httpx.post(f"{url}/v1/completions", json={"prompt": "a", **body}), 400, param)


# ---------------------------------------------------------------------------------- the key


def _refused(u, path, method, **headers):
    r = httpx.request(method, f"{u}{path}", headers=headers,
                      **({"json": {"messages": MESSAGES, "prompt": "a"}} if method == "POST" else {}))
    if path.startswith("/v1/messages"):
        return anthropic_error(r, 401)
    return api_error(r, 401)


def test_every_route_but_health_needs_the_key(engines, tmp_path, monkeypatch):
    key_file = tmp_path / "key"
    key_file.write_text("s3cret\n")
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    for params, key in ((ServerParams(api_key_file=str(key_file)), "s3cret"), (ServerParams(), "from-env"),
                        (ServerParams(api_key="given"), "given")):
        app = create_app(SlowEngine(engines[1]), params, draft_params=DraftParams(method="none"),
                         sampling_defaults=SamplingParams(max_tokens=2))
        with serving(app) as u:
            assert httpx.get(f"{u}/health").status_code == 200
            for path in POST_ROUTES:
                _refused(u, path, "POST")
                _refused(u, path, "POST", authorization="Bearer wrong")
            for path in GET_ROUTES:
                assert _refused(u, path, "GET", **{"x-api-key": "wrong"})["code"] == "invalid_api_key"
            for headers in ({"Authorization": f"Bearer {key}"}, {"x-api-key": key}):
                assert httpx.get(f"{u}/props", headers=headers).status_code == 200
                assert httpx.get(f"{u}/metrics", headers=headers).status_code == 200
                r = httpx.post(f"{u}/v1/messages", headers=headers, json={"max_tokens": 2, "messages": MESSAGES[1:]})
                assert r.status_code == 200, r.text


def test_the_key_comes_from_one_place(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("  k3y  \nsecond line\n")
    assert api_key(ServerParams(api_key_file=str(key_file)), environ={API_KEY_ENV: "env"}) == "k3y"
    assert api_key(ServerParams(api_key="flag"), environ={API_KEY_ENV: "env"}) == "flag"
    assert api_key(ServerParams(), environ={API_KEY_ENV: "env"}) == "env"
    assert api_key(ServerParams(), environ={}) is None
    with pytest.raises(ConfigError, match="not both"):
        ServerParams(api_key="a", api_key_file=str(key_file))
    with pytest.raises(UserError, match="cannot read"):
        api_key(ServerParams(api_key_file=str(tmp_path / "missing")), environ={})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        api_key(ServerParams(api_key_file=str(tmp_path / "empty")), environ={})
    with pytest.raises(ConfigError, match=API_KEY_ENV):
        api_key(ServerParams(), environ={API_KEY_ENV: "cl\u00e9"})


# ---------------------------------------------------------------------------------- hostile input

MALFORMED = [b"{not json", b"", b"[1, 2]", b'"text"', b"null", b"\xff\xfe\x00", b'{"temperature": NaN}',
             b"[" * 100_000, b"{}"]
# every field of every new route given the wrong type: never a 500
WRONG = [5, "x", None, [], {}, [5], [{}], {"type": 5}, True, -1, 10**40, "\ud800", [{"type": "text", "text": 5}]]
FIELDS = {
    "/v1/messages": ["max_tokens", "messages", "system", "tools", "tool_choice", "stop_sequences", "temperature", "top_p",
                     "top_k", "thinking", "output_config", "stream", "metadata", "speculative"],
    "/v1/messages/count_tokens": ["messages", "system", "tools", "tool_choice", "thinking"],
    "/v1/responses": ["input", "instructions", "tools", "tool_choice", "text", "max_output_tokens", "temperature",
                      "top_p", "previous_response_id", "store", "stream", "reasoning", "parallel_tool_calls",
                      "metadata", "speculative"],
    "/tokenize": ["content", "add_special", "parse_special", "with_pieces"],
    "/detokenize": ["tokens"],
    "/apply-template": ["messages", "tools", "tool_choice", "chat_template_kwargs"],
}
VALID = {"/v1/messages": {"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
         "/v1/messages/count_tokens": {"messages": [{"role": "user", "content": "hi"}]},
         "/v1/responses": {"input": "hi", "max_output_tokens": 2}, "/tokenize": {"content": "hi"},
         "/detokenize": {"tokens": [5, 6]}, "/apply-template": {"messages": MESSAGES}}


def _not_500(r, path):
    assert 400 <= r.status_code < 500 or r.status_code == 200, (path, r.status_code, r.text)
    if r.status_code >= 400:
        if path.startswith("/v1/messages"):
            anthropic_error(r, r.status_code)
        else:
            api_error(r, r.status_code)


def test_malformed_bodies_on_every_route_are_4xx_never_500(url):
    with httpx.Client(base_url=url, timeout=30) as http:
        for path in POST_ROUTES:
            for raw in MALFORMED:
                r = http.post(path, content=raw, headers={"content-type": "application/json"})
                assert r.status_code == 400, (path, raw[:20], r.text)
                _not_500(r, path)
            r = http.post(path, content=b'{"a": 1}', headers={"content-type": "text/plain"})
            assert r.status_code == 415
        for path, names in FIELDS.items():
            for name in names:
                for value in WRONG:
                    raw = json.dumps({**VALID[path], name: value}).encode()
                    _not_500(http.post(path, content=raw, headers={"content-type": "application/json"}), path)
            for stream in (False, True):  # nested wrong values in the streamed routes too
                for value in WRONG:
                    body = {**VALID[path], "stream": stream, "messages": [{"role": "user", "content": value}],
                            "input": [{"role": "user", "content": value}]}
                    raw = json.dumps(body).encode()
                    _not_500(http.post(path, content=raw, headers={"content-type": "application/json"}), path)
        still_healthy(url)


def test_many_requests_at_once_on_the_new_routes_stay_correct(url):
    """The new routes share the queue: concurrent requests all answer, none 500."""
    out = []

    def ask(path, body):
        out.append(httpx.post(f"{url}{path}", json=body, timeout=60))

    jobs = [("/v1/messages", VALID["/v1/messages"]), ("/v1/responses", VALID["/v1/responses"]),
            ("/tokenize", VALID["/tokenize"]), ("/v1/messages/count_tokens", VALID["/v1/messages/count_tokens"])] * 2
    threads = [threading.Thread(target=ask, args=j) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(r.status_code for r in out) == [200] * len(jobs)
