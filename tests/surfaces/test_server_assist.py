"""The assistant-facing extras of the server, end to end on real uvicorn servers: logprobs
(chat and completions, streamed or not) and code infill (``suffix`` on completions, llama.cpp's
``/infill``).  Servers and helpers as in servers.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from scipy.special import log_softmax  # noqa: E402

from resispec_gguf import create_chat_completion  # noqa: E402
from resispec_gguf.config import DraftParams, SamplingParams  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402
from resispec_gguf.surfaces.server import create_app  # noqa: E402
from servers import MESSAGES, api_error, serving  # noqa: E402


def _load(pair) -> Engine:
    """One thread (see servers.load); flash attention off, so that a tree decode's rows
    equal the sequential reference's to ~1e-5 (on the CPU it rounds through F16)."""
    # no memory of past answers: these tests compare seeded replies made one after another
    return Engine.load(str(pair[0]), str(pair[1]), n_ctx=512, n_threads=1, flash_attn=False, progress=False,
                       memory_size=0)


def _served(engine, name):
    """A server for ``engine`` (24-token replies by default), yielding its URL."""
    app = create_app(engine, model_name=name, draft_params=DraftParams(), sampling_defaults=SamplingParams(max_tokens=24))
    with serving(app) as url:
        yield url


def _loaded(pair):
    """An engine for ``pair``, closed after the module."""
    e = _load(pair)
    yield e
    e.close()


@pytest.fixture(scope="module")
def plain_engine(tiny_pair):
    yield from _loaded(tiny_pair)


@pytest.fixture(scope="module")
def plain_server(plain_engine):
    yield from _served(plain_engine, "tiny")


@pytest.fixture(scope="module")
def client(plain_server):
    with openai.OpenAI(base_url=f"{plain_server}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


# ---------------------------------------------------------------------------------- logprobs


def _same_tokens(engine, prompt, **kw):
    """The tokens the server generated for these settings (same seed: same output)."""
    sp = SamplingParams(max_tokens=24).replace(**kw)
    return prompt, engine.generate(prompt, sp, DraftParams()).tokens


def test_chat_logprobs_are_the_targets_log_softmax(client, plain_engine):
    kw = dict(temperature=0.9, seed=11, max_tokens=20)
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, logprobs=True, top_logprobs=3, **kw)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens >= 1
    prompt, tokens = _same_tokens(plain_engine, plain_engine.chat_tokens(MESSAGES), **kw)
    assert len(tokens) == len(content)
    ref = plain_engine.reference_logits(prompt + tokens)[len(prompt) - 1:]
    for i, (item, tok) in enumerate(zip(content, tokens)):
        lp = log_softmax(ref[i].astype(np.float64))
        assert bytes(item.bytes) == plain_engine.token_piece(tok)
        assert item.logprob == pytest.approx(lp[tok], abs=5e-4)
        tops = item.top_logprobs
        assert len(tops) == 3 and [t.logprob for t in tops] == sorted((t.logprob for t in tops), reverse=True)
        assert tops[0].logprob == pytest.approx(lp.max(), abs=5e-4)
        assert all(isinstance(t.token, str) and t.bytes is not None for t in tops)
    text = b"".join(bytes(item.bytes) for item in content).decode("utf-8", "replace")
    assert text.startswith(r.choices[0].message.content)


@pytest.mark.parametrize("stop", [None, ["e"]])
def test_streamed_chat_logprobs_concatenate_to_the_full_list(client, stop):
    kw = dict(model="tiny", messages=MESSAGES, temperature=1.0, seed=5, max_tokens=30, logprobs=True,
              top_logprobs=2, stop=stop)
    full = client.chat.completions.create(**kw).choices[0].logprobs.content
    chunks = list(client.chat.completions.create(**kw, stream=True))
    streamed = [item for c in chunks if c.choices and c.choices[0].logprobs for item in c.choices[0].logprobs.content]
    # the same tokens with the same values (the second request reuses the prompt's KV cache, so
    # rows may differ in the last bits and alternatives tied at the top may swap)
    assert [i.token for i in streamed] == [i.token for i in full]
    for a, b in zip(streamed, full):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4) and a.bytes == b.bytes
        assert sorted(t.logprob for t in a.top_logprobs) == pytest.approx(sorted(t.logprob for t in b.top_logprobs),
                                                                          abs=1e-4)
    assert chunks[0].choices[0].logprobs is None  # the role chunk has no token


def test_completion_logprobs_legacy_shape(client, plain_server):
    kw = dict(model="tiny", prompt="Once upon a time", temperature=0.8, seed=3, max_tokens=25)
    r = client.completions.create(**kw, logprobs=2)
    lp = r.choices[0].logprobs
    n = r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert all(len(d) <= 2 and max(d.values()) >= v - 5e-4 for d, v in zip(lp.top_logprobs, lp.token_logprobs))
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    text = r.choices[0].text
    assert all(text[o:].startswith(t) for o, t in zip(lp.text_offset, lp.tokens) if "\\x" not in t)
    # streamed: each list is the concatenation of the chunks'
    chunks = list(client.completions.create(**kw, logprobs=2, stream=True))
    for field in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        got = [x for c in chunks if c.choices and c.choices[0].logprobs for x in getattr(c.choices[0].logprobs, field)]
        want = getattr(lp, field)
        if field == "top_logprobs":
            # the second request reuses the prompt's KV cache, so rows may differ in the last
            # bits, and two alternatives tied at the top may swap: compare the values
            got = [sorted(d.values()) for d in got]
            want = [sorted(d.values()) for d in want]
            assert len(got) == len(want) and all(g == pytest.approx(w, abs=1e-4) for g, w in zip(got, want)), field
        elif field == "token_logprobs":
            assert got == pytest.approx(want, abs=1e-4), field
        else:
            assert got == want, field
    # off: null, as before
    assert client.completions.create(**kw).choices[0].logprobs is None
    raw = httpx.post(f"{plain_server}/v1/completions", json={**kw, "logprobs": 0}).json()
    assert raw["choices"][0]["logprobs"]["top_logprobs"] == [{}] * raw["usage"]["completion_tokens"]


def test_create_chat_completion_logprobs(plain_engine):
    kw = dict(messages=MESSAGES, temperature=0.7, seed=2, max_tokens=12, logprobs=True, top_logprobs=1)
    out = create_chat_completion(plain_engine, **kw)
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"]
    streamed = [item for c in create_chat_completion(plain_engine, **kw, stream=True) if c.get("choices")
                and c["choices"][0]["logprobs"] for item in c["choices"][0]["logprobs"]["content"]]
    assert streamed == content
    json.dumps(out, allow_nan=False)
    with pytest.raises(ValueError, match="top_logprobs"):
        create_chat_completion(plain_engine, messages=MESSAGES, top_logprobs=2)


# ---------------------------------------------------------------------------------- infill


@pytest.fixture(scope="module")
def fim_engine(fim_pair):
    yield from _loaded(fim_pair)


@pytest.fixture(scope="module")
def fim_server(fim_engine):
    yield from _served(fim_engine, "tiny-fim")


PREFIX = "def area(width, height):\n    "
SUFFIX = "\n\nprint(area(2, 3))\n"


def test_completion_with_suffix_fills_in_the_middle(fim_server, fim_engine):
    kw = dict(model="tiny-fim", prompt=PREFIX, suffix=SUFFIX, temperature=0.8, seed=4, max_tokens=20)
    with openai.OpenAI(base_url=f"{fim_server}/v1", api_key="x", max_retries=0, timeout=30) as c:
        r = c.completions.create(**kw)
        streamed = "".join(ch.choices[0].text for ch in c.completions.create(**kw, stream=True) if ch.choices)
    tokens, _ = fim_engine.infill_tokens(PREFIX, SUFFIX, reserve=20)
    expect = fim_engine.generate(tokens, SamplingParams(temperature=0.8, seed=4, max_tokens=20), DraftParams())
    assert r.choices[0].text == expect.text == streamed
    assert r.usage.prompt_tokens == len(tokens)


def test_suffix_or_infill_without_fim_tokens_is_400(plain_server):
    r = httpx.post(f"{plain_server}/v1/completions", json={"prompt": "a", "suffix": "b"})
    assert api_error(r, 400, "suffix")["code"] == "unsupported_value"
    assert "fill-in-the-middle" in r.json()["error"]["message"]
    r = httpx.post(f"{plain_server}/infill", json={"input_prefix": "a", "input_suffix": "b"})
    assert "fill-in-the-middle" in api_error(r, 400)["message"]
    # an empty suffix is a plain completion, as before
    r = httpx.post(f"{plain_server}/v1/completions", json={"prompt": "a", "suffix": "", "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_infill_answers_in_llama_cpps_shape(fim_server, fim_engine):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "return ",
            "input_extra": [{"filename": "util.py", "text": "def double(x):\n    return 2 * x\n"}],
            "n_predict": 16, "temperature": 0.7, "top_k": 40, "top_p": 0.99, "seed": 9, "stream": False,
            "n_indent": 4, "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_predict_ms": 500}
    r = httpx.post(f"{fim_server}/infill", json=body, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    tokens, cut = fim_engine.infill_tokens(PREFIX, SUFFIX, middle="return ", extra=[("util.py", body["input_extra"][0]["text"])],
                                           repo_level=True, reserve=16)
    expect = fim_engine.generate(tokens, SamplingParams(temperature=0.7, top_k=40, top_p=0.99, seed=9, max_tokens=16),
                                 DraftParams())
    assert out["content"] == expect.text and out["stop"] is True and out["truncated"] is False and not cut
    assert out["tokens_predicted"] == len(expect.tokens) and out["tokens_evaluated"] == len(tokens)
    assert out["stop_type"] in ("eos", "limit") and out["generation_settings"]["n_predict"] == 16
    assert out["timings"]["predicted_n"] == len(expect.tokens) and out["timings"]["prompt_n"] >= 0
    assert out["speculative"]["method"] == "auto"
    # streamed: llama.cpp's events, content pieces then the final object, no [DONE]
    with httpx.stream("POST", f"{fim_server}/infill", json={**body, "stream": True}, timeout=30) as s:
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    assert "".join(e["content"] for e in events) == out["content"]
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert events[-1]["tokens_predicted"] == out["tokens_predicted"]
    # response_fields: only these, under their paths (llama.vim reads "timings/prompt_n")
    fields = ["content", "timings/prompt_n", "timings/predicted_ms", "truncated", "nothing/here"]
    r = httpx.post(f"{fim_server}/infill", json={**body, "response_fields": fields}, timeout=30).json()
    assert set(r) == {"content", "timings/prompt_n", "timings/predicted_ms", "truncated"}
    assert r["content"] == out["content"]


def test_infill_cuts_a_long_file_to_fit(fim_server):
    body = {"input_prefix": "x = 1\n" * 400, "input_suffix": "y = 2\n" * 400, "n_predict": 4}
    out = httpx.post(f"{fim_server}/infill", json=body, timeout=30).json()
    assert out["truncated"] is True and out["tokens_evaluated"] <= 512 - 4


INFILL_BAD = [
    ({"input_suffix": "b"}, "input_prefix", "missing_field"),
    ({"input_prefix": "a"}, "input_suffix", "missing_field"),
    ({"input_prefix": 5, "input_suffix": "b"}, "input_prefix", "invalid_type"),
    ({"input_prefix": "a", "input_suffix": "b", "prompt": ["x"]}, "prompt", "invalid_type"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": "x"}, "input_extra", "invalid_type"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": ["x"]}, "input_extra[0]", "invalid_type"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": 5}]}, "input_extra[0].text", "invalid_type"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "t", "filename": 1}]},
     "input_extra[0].filename", "invalid_type"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "x" * 5000}] * 2}, "input_extra",
     "context_length_exceeded"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": ""}] * 512}, "input_extra",
     "context_length_exceeded"),
    ({"input_prefix": "a" * 8000, "input_suffix": "b"}, "input_prefix", "context_length_exceeded"),
    ({"input_prefix": "a", "input_suffix": "b", "n_predict": 0}, "n_predict", "invalid_value"),
    ({"input_prefix": "a", "input_suffix": "b", "temperature": "hot"}, "temperature", "invalid_type"),
    ({"input_prefix": "a", "input_suffix": "b", "response_fields": "content"}, "response_fields", "invalid_type"),
]


@pytest.mark.parametrize("body,param,code", INFILL_BAD)
def test_bad_infill_is_400_naming_the_field(fim_server, body, param, code):
    r = httpx.post(f"{fim_server}/infill", json=body, timeout=10)
    assert api_error(r, 400, param)["code"] == code


def test_infill_seed_minus_one_and_unlimited_n_predict(fim_server):
    r = httpx.post(f"{fim_server}/infill", json={"input_prefix": "a", "input_suffix": "b", "seed": -1,
                                                "n_predict": -1, "temperature": 0}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["generation_settings"]["n_predict"] == 512


def test_infill_needs_the_key(fim_engine):
    app = create_app(fim_engine, model_name="k", draft_params=DraftParams(method="none"),
                     sampling_defaults=SamplingParams(max_tokens=2), api_key="sekret")
    with serving(app) as url:
        body = {"input_prefix": "a", "input_suffix": "b"}
        assert api_error(httpx.post(f"{url}/infill", json=body), 401)["code"] == "invalid_api_key"
        ok = httpx.post(f"{url}/infill", json=body, headers={"Authorization": "Bearer sekret"})
        assert ok.status_code == 200 and ok.json()["tokens_predicted"] <= 2


def test_completion_with_suffix_refuses_a_prompt_too_long_as_without_one(fim_server):
    long = "x = 1\n" * 400  # fits the byte limit, not the 512-token context
    r = httpx.post(f"{fim_server}/v1/completions", json={"prompt": long, "max_tokens": 4}, timeout=30)
    assert api_error(r, 400, "prompt")["code"] == "context_length_exceeded"
    r = httpx.post(f"{fim_server}/v1/completions", json={"prompt": long, "suffix": "y = 2\n", "max_tokens": 4},
                   timeout=30)
    assert api_error(r, 400, "prompt")["code"] == "context_length_exceeded"


# ---------------------------------------------------------------------------------- constraints


class _SlowMasks:
    """A fake mask timer for one compiled grammar: each mask "takes" a quarter of the limit of
    one mask, so the request's budget is spent after a few dozen masks."""

    def __init__(self):
        from resispec_gguf.assist import grammar as grammar_mod

        self.t, self.step = 0.0, grammar_mod.MASK_SECONDS / 4

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_a_constraint_failing_after_the_first_token_ends_the_reply_with_an_error(plain_server, plain_engine):
    schema = {"type": "string", "minLength": 170}  # more masks than the budget allows
    grammar = plain_engine.compile_constraint(json_schema=schema)
    grammar.clock = _SlowMasks()
    body = {"messages": MESSAGES, "max_tokens": 300, "temperature": 1.0, "seed": 5,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
    param = "response_format.json_schema.schema"
    try:
        # nothing sent yet: a 400 naming the field and the budget
        err = api_error(httpx.post(f"{plain_server}/v1/chat/completions", json=body, timeout=60), 400, param)
        assert err["code"] == "constraint_failed" and "per request" in err["message"] and "\n" not in err["message"]
        # streamed: the pieces so far, the finish chunk with finish_reason "error", the error, [DONE]
        with httpx.stream("POST", f"{plain_server}/v1/chat/completions", json={**body, "stream": True},
                          timeout=60) as s:
            lines = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        events = [json.loads(x) for x in lines[:-1]]
        assert events[-1]["error"]["param"] == param and "per request" in events[-1]["error"]["message"]
        reasons = [c["choices"][0]["finish_reason"] for c in events[:-1] if c.get("choices")]
        assert reasons[-1] == "error" and set(reasons[:-1]) == {None}
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in events[:-1] if c.get("choices"))
    finally:
        grammar.clock = type(grammar).__init__.__defaults__[0]
    r = httpx.post(f"{plain_server}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4}, timeout=60)
    assert r.status_code == 200, r.text  # the engine moved on


def test_streamed_and_unstreamed_logprobs_agree_over_50_seeds(client):
    """The server formats logprobs on the event loop while the engine detokenises on its own
    thread: a shared ctypes out-buffer once gave a streamed alternative another token's text."""
    def unique(d):  # alternatives whose logprob no other alternative shares (ties may swap)
        values = [round(v, 3) for v in d.values()]
        return {k: round(v, 3) for k, v in d.items() if values.count(round(v, 3)) == 1}

    for seed in range(50):
        kw = dict(model="tiny", prompt="Once upon a time", temperature=1.0, seed=seed, max_tokens=8, logprobs=20)
        lp = client.completions.create(**kw).choices[0].logprobs
        chunks = list(client.completions.create(**kw, stream=True))
        tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
        tops = [d for c in chunks if c.choices and c.choices[0].logprobs for d in c.choices[0].logprobs.top_logprobs]
        assert tokens == lp.tokens, seed
        assert [unique(d) for d in tops] == [unique(d) for d in lp.top_logprobs], seed
