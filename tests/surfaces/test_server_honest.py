"""What the server cannot honour it refuses, on every route, streamed or not (samplers.py,
chat_format's parts, the translations); ``logit_bias`` it honours exactly; ``/v1/models``
carries the model's figures; and while the models load, ``/health`` says so (503) and every
other route answers 503 instead of hanging (app.py's ``attach`` and ``serve(load=...)``).

Real uvicorn servers on loopback ports over the tiny GGUF pair; a second engine of the same
pair computes the reference replies (an engine serves one thread at a time)."""

from __future__ import annotations

import math
import threading

import pytest

pytest.importorskip("llama_cpp")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from resispec_gguf.assist.plan import plan_chat  # noqa: E402
from resispec_gguf.config import DraftParams, SamplingParams  # noqa: E402
from resispec_gguf.errors import UserError  # noqa: E402
from resispec_gguf.surfaces.server import create_app, listen, serve  # noqa: E402
from servers import MESSAGES, anthropic_error, api_error, load, serving, wait_for  # noqa: E402

USER = "Tell me a story."
BODIES = {
    "/v1/chat/completions": {"messages": MESSAGES, "max_tokens": 4},
    "/v1/completions": {"prompt": "Once upon a time", "max_tokens": 4},
    "/v1/responses": {"instructions": "Be brief.", "input": USER, "max_output_tokens": 4},
    "/v1/messages": {"system": "Be brief.", "messages": [{"role": "user", "content": USER}], "max_tokens": 4},
}
INFILL = {"input_prefix": "def f(", "input_suffix": ")\n", "n_predict": 4}
REFUSED = [("frequency_penalty", 0.5), ("presence_penalty", -1.0), ("repeat_penalty", 1.1), ("repeat_penalty", 0.9),
           ("dry_multiplier", 0.8), ("xtc_probability", 0.5), ("mirostat", 2), ("typical_p", 0.9), ("tfs_z", 0.95),
           ("top_n_sigma", 1.0), ("dynatemp_range", 0.5), ("min_keep", 5), ("ignore_eos", True),
           ("grammar", 'root ::= "a"'), ("json_schema", {"type": "object"}), ("audio", {"voice": "alloy"}),
           ("modalities", ["text", "audio"])]
NO_OPS = {"frequency_penalty": 0, "presence_penalty": 0.0, "repeat_penalty": 1.0, "logit_bias": {}, "typical_p": 1,
          "mirostat": 0, "dry_multiplier": 0, "ignore_eos": False, "grammar": "", "repeat_last_n": 64,
          "penalize_nl": True, "modalities": ["text"], "top_n_sigma": -1}


@pytest.fixture(scope="module")
def engines(tiny_pair):
    loaded = [load(tiny_pair) for _ in range(2)]
    yield loaded
    for e in loaded:
        e.close()


@pytest.fixture(scope="module")
def server(engines):
    app = create_app(engines[0], model_name="tiny", draft_params=DraftParams(),
                     sampling_defaults=SamplingParams(max_tokens=8))
    with serving(app) as url:
        yield url


def _post(url, route, body):
    return httpx.post(f"{url}{route}", json=body, timeout=30)


def _refused(r, route, param):
    """The route's error shape, naming ``param``."""
    if route == "/v1/messages":
        return anthropic_error(r, 400, param)
    return api_error(r, 400, param)


# ---------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("field,value", REFUSED)
def test_a_sampler_the_server_does_not_run_is_refused_naming_it(server, field, value, stream):
    err = _refused(_post(server, "/v1/chat/completions", {**BODIES["/v1/chat/completions"], field: value,
                                                          "stream": stream}), "/v1/chat/completions", field)
    assert err["code"] == "unsupported_value" and "not supported" in err["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", list(BODIES) + ["/infill"])
@pytest.mark.parametrize("field,value", [("frequency_penalty", 0.3), ("presence_penalty", 0.6),
                                         ("repeat_penalty", 1.15), ("logit_bias", {"999999": -100})])
def test_every_route_refuses_what_it_cannot_honour(server, route, field, value, stream):
    body = {**(INFILL if route == "/infill" else BODIES[route]), field: value, "stream": stream}
    err = _refused(_post(server, route, body), route, field)
    if field.endswith("penalty"):
        assert "draft tree" in err["message"] and "only" in err["message"]  # why, and what is accepted
    else:
        assert "999999" in err["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", list(BODIES))
def test_no_op_values_are_accepted(server, route, stream):
    r = _post(server, route, {**BODIES[route], **NO_OPS, "stream": stream})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("value,needle", [
    ({"999999": 1}, "not a token of this model"),
    ({"5": 150}, "from -100 to 100"),
    ([[5, -100.5]], "from -100 to 100"),
    ({"Hello": -100}, "biasing text is not supported"),
    ([["Hello", -1]], "biasing text is not supported"),
    ({"5": True}, "or false to ban it"),
    ({"5": "x"}, "must be a number"),
    ([[5, 1], [5, 2]], "token 5 twice"),
    ([[5]], "a [token id, bias] pair"),
    ("x", "an object"),
])
def test_a_bad_logit_bias_is_a_400_naming_it(server, value, needle):
    err = api_error(_post(server, "/v1/chat/completions", {**BODIES["/v1/chat/completions"], "logit_bias": value}),
                    400, "logit_bias")
    assert needle in err["message"], err


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route,body,param", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, IMAGE]}]},
     "messages[0].content[1].type"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]}, "messages[0].content[0].type"),
    ("/v1/chat/completions", {"messages": [MESSAGES[0], {"role": "user", "content": [
        {"type": "file", "file": {"file_id": "file-1"}}]}]}, "messages[1].content[0].type"),
    ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is it?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]},
     "messages[0].content[1].type"),
    ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]},
     "messages[0].content[0].type"),
    ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": "What is it?"},
                                                              {"type": "input_image", "image_url": "data:,"}]}]},
     "input[0].content[1].type"),
    ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
     "input[0].content[0].type"),
])
def test_image_audio_and_file_parts_are_refused_the_model_serves_text_only(server, route, body, param, stream):
    err = _refused(_post(server, route, {**body, "stream": stream}), route, param)
    assert "text only" in err["message"], err


# ---------------------------------------------------------------------------------- logit_bias honoured


def _reference(engine, prompt, bias=(), method="none", max_tokens=6):
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, logit_bias=bias)
    return engine.generate(prompt, sp, DraftParams(method=method))


@pytest.mark.parametrize("method", ["chain", "resispec", "auto"])
def test_greedy_with_a_logit_bias_is_plain_greedy_with_it(engines, method):
    """Speculation changes nothing: the biased argmax path, token for token."""
    ref = engines[1]
    prompt = ref.text_tokens("Once upon a time")
    plain = _reference(ref, prompt).tokens
    for bias in [((plain[0], -100.0),), ((plain[0], -math.inf), (plain[1], 3.0)), ((plain[-1], 100.0),)]:
        biased = _reference(ref, prompt, bias).tokens
        assert biased != plain
        assert _reference(ref, prompt, bias, method).tokens == biased, (method, bias)


def test_logit_bias_is_honoured_on_completions(server, engines):
    ref = engines[1]
    prompt = ref.text_tokens("Once upon a time")
    plain = _reference(ref, prompt)
    first = plain.tokens[0]
    down = _reference(ref, prompt, ((first, -100.0),))
    banned = _reference(ref, prompt, ((first, -math.inf),))
    assert first not in banned.tokens[:1] and down.tokens != plain.tokens
    body = {"prompt": prompt, "temperature": 0, "max_tokens": 6}
    for method in ("none", "resispec", "auto"):
        def text(**extra):
            r = _post(server, "/v1/completions", {**body, "method": method, **extra})
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["text"]

        assert text() == plain.text
        assert text(logit_bias={str(first): -100}) == down.text
        assert text(logit_bias=[[first, -100]]) == down.text  # llama.cpp's pairs
        assert text(logit_bias=[[first, False]]) == banned.text  # false: -inf
        assert text(logit_bias={str(first): False}) == banned.text


def test_logit_bias_is_honoured_streamed_and_on_every_chat_route(server, engines):
    ref = engines[1]
    prompt = plan_chat(ref, MESSAGES).prompt
    plain = _reference(ref, prompt, max_tokens=4)
    bias = {str(plain.tokens[0]): -100}
    down = _reference(ref, prompt, ((plain.tokens[0], -100.0),), max_tokens=4)
    assert down.text != plain.text
    with openai.OpenAI(base_url=f"{server}/v1", api_key="x", max_retries=0, timeout=30) as client:
        kw = dict(model="tiny", messages=MESSAGES, temperature=0, max_tokens=4)
        assert client.chat.completions.create(**kw).choices[0].message.content == plain.text
        assert client.chat.completions.create(**kw, logit_bias=bias).choices[0].message.content == down.text
        chunks = client.chat.completions.create(**kw, logit_bias=bias, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == down.text
    r = _post(server, "/v1/messages", {**BODIES["/v1/messages"], "temperature": 0, "logit_bias": bias})
    assert r.status_code == 200 and "".join(b.get("text", "") for b in r.json()["content"]) == down.text
    r = _post(server, "/v1/responses", {**BODIES["/v1/responses"], "temperature": 0, "logit_bias": bias})
    assert r.status_code == 200, r.text
    assert r.json()["output"][-1]["content"][0]["text"] == down.text


def test_a_logit_bias_outside_the_vocabulary_is_refused_by_the_engine_too(engines):
    with pytest.raises(UserError, match="logit_bias names token"):
        _reference(engines[1], [1, 2], ((engines[1].n_vocab, 1.0),))


# ---------------------------------------------------------------------------------- /v1/models


def test_models_carry_the_context_and_the_models_figures(server, engines):
    engine = engines[0]
    card = httpx.get(f"{server}/v1/models").json()["data"][0]
    meta = card["meta"]
    assert {k: card[k] for k in ("id", "object", "owned_by")} == {"id": "tiny", "object": "model",
                                                                   "owned_by": "resispec-gguf"}
    assert meta["n_vocab"] == engine.n_vocab and meta["n_ctx"] == engine.n_ctx and meta["n_slots"] == 1
    assert meta["n_ctx_train"] > 0 and meta["n_params"] > 0 and meta["size"] > 0 and meta["n_embd"] > 0
    assert meta["draft"]["n_vocab"] == engine.n_vocab and meta["draft"]["n_params"] > 0
    with openai.OpenAI(base_url=f"{server}/v1", api_key="x", max_retries=0, timeout=30) as client:
        [listed] = client.models.list().data
        assert listed.id == "tiny" and listed.model_extra["meta"] == meta
        assert client.models.retrieve("tiny").model_extra["meta"] == meta


# ---------------------------------------------------------------------------------- loading


def test_while_the_models_load_health_says_so_and_the_routes_answer_503(engines):
    app = create_app(None, model_name="tiny", api_key="k", draft_params=DraftParams(method="none"),
                     sampling_defaults=SamplingParams(max_tokens=4))
    key = {"Authorization": "Bearer k"}
    with serving(app) as url:
        r = httpx.get(f"{url}/health")
        assert r.status_code == 503 and r.json() == {"status": "loading model"} and r.headers["retry-after"]
        api_error(httpx.get(f"{url}/v1/models"), 401)  # the key first
        err = api_error(httpx.get(f"{url}/v1/models", headers=key), 503)
        assert err["code"] == "model_loading"
        for route, body in BODIES.items():
            r = httpx.post(f"{url}{route}", json=body, headers=key, timeout=10)
            err = anthropic_error(r, 503) if route == "/v1/messages" else api_error(r, 503)
            assert "loading" in err["message"]
        app.state.resispec.attach(engines[0])
        r = httpx.get(f"{url}/health")
        assert r.status_code == 200 and r.json()["status"] == "ok"
        r = httpx.post(f"{url}/v1/chat/completions", json=BODIES["/v1/chat/completions"], headers=key, timeout=30)
        assert r.status_code == 200, r.text


def test_serve_listens_before_its_load_returns_and_stops_when_it_fails():
    """``serve(load=...)``: /health is 503 while the loader is held back; the loader's error
    stops the server and is raised by ``serve``."""
    release = threading.Event()

    def held_back():
        release.wait(30)
        raise UserError("the model file is gone")

    sock = listen("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    raised = []

    def run():
        try:
            serve(params=None, load=held_back, sock=sock, model_name="tiny")
        except UserError as e:
            raised.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        def answers():
            try:
                return httpx.get(f"{url}/health", timeout=1).status_code == 503
            except httpx.TransportError:
                return False

        wait_for(answers, timeout=10)
        assert httpx.get(f"{url}/health").json() == {"status": "loading model"}
        assert httpx.get(f"{url}/v1/models").status_code == 503
    finally:
        release.set()
        thread.join(15)
    assert not thread.is_alive() and [str(e) for e in raised] == ["the model file is gone"]
    with pytest.raises(TypeError):
        serve(object(), load=held_back)
