"""OpenAI-shaped results (api.py): ``create_chat_completion`` on the tiny pair and the
finish-reason vocabulary."""

import pytest

from resispec_gguf.surfaces import shapes
from resispec_gguf.surfaces.api import create_chat_completion
from resispec_gguf.config import ConfigError, DraftParams, SamplingParams


def test_create_chat_completion_shapes(engine):
    msgs = [{"role": "user", "content": "Hi"}]
    out = create_chat_completion(engine, msgs, temperature=0.0, max_tokens=8)
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert out["usage"]["completion_tokens"] == out["speculative"]["tokens"]
    chunks = list(create_chat_completion(engine, msgs, temperature=0.0, max_tokens=8, stream=True))
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == out["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_unset_sampling_arguments_take_the_settings_defaults(engine):
    msgs = [{"role": "user", "content": "Hi"}]
    default = SamplingParams(seed=5)
    out = create_chat_completion(engine, msgs, seed=5, max_tokens=6, draft=DraftParams(method="none"))
    ref = engine.generate(engine.chat_tokens(msgs), default.replace(max_tokens=6), DraftParams(method="none"))
    assert out["choices"][0]["message"]["content"] == ref.text
    with pytest.raises(ConfigError) as e:
        create_chat_completion(engine, msgs, top_p=0.0)
    assert e.value.field == "top_p"


def test_finish_reasons_in_openai_terms():
    assert [shapes.finish_reason(r) for r in ("eos", "stop", "length")] == ["stop", "stop", "length"]
    assert shapes.finish_reason("interrupted") == "interrupted"  # OpenAI has no word for it
