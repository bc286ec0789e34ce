"""The assistant-facing extras of the server, end to end on real uvicorn servers: logprobs
(chat and completions, streamed or not) and code infill (``suffix`` on completions, llama.cpp's
``/infill``).  Servers and helpers as in test_server.py."""

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
from resispec_gguf.server import create_app  # noqa: E402
from test_server import MESSAGES, _error, _serve  # noqa: E402


def _load(pair) -> Engine:
    """One thread (see test_server._load); flash attention off, so that a tree decode's rows
    equal the sequential reference's to ~1e-5 (on the CPU it rounds through F16)."""
    return Engine.load(str(pair[0]), str(pair[1]), n_ctx=512, n_threads=1, flash_attn=False, progress=False)


@pytest.fixture(scope="module")
def plain_engine(tiny_pair):
    e = _load(tiny_pair)
    yield e
    e.close()


@pytest.fixture(scope="module")
def plain_server(plain_engine):
    app = create_app(plain_engine, model_name="tiny", draft_params=DraftParams(),
                     sampling_defaults=SamplingParams(max_tokens=24))
    with _serve(app) as url:
        yield url


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
    assert [i.model_dump() for i in streamed] == [i.model_dump() for i in full]
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
        assert got == getattr(lp, field), field
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
