"""``assist.prompts.Prompts`` on the tiny target: plain prompts, the size check before
tokenizing, special-token text.  Chat prompts are tested in test_chat_tokens.py, infill
layouts in test_fim.py; both go through the same class."""

import pytest

from resispec_gguf.assist.prompts import Prompts
from resispec_gguf.errors import ContextFullError, UserError


@pytest.fixture()
def prompts(engine):
    return Prompts(engine.target, engine.chat_template)


def test_text_tokens_add_bos_once(prompts, engine):
    vocab = engine.target
    plain = prompts.text_tokens("hello")
    if vocab.add_bos:
        assert plain[0] == vocab.bos and plain.count(vocab.bos) == 1
        assert prompts.text_tokens(prompts.special_text(vocab.bos) + "hello") == plain
    assert engine.text_tokens("hello") == plain  # the Engine's method is this one


def test_a_prompt_that_cannot_fit_is_refused_before_tokenizing(prompts, engine, monkeypatch):
    monkeypatch.setattr(engine.target, "tokenize", lambda *a, **k: pytest.fail("tokenized"))
    with pytest.raises(ContextFullError, match="cannot fit the context"):
        prompts.text_tokens("x" * (prompts.max_prompt_bytes + 1))


def test_a_lone_surrogate_is_a_user_error(prompts):
    with pytest.raises(UserError, match="lone surrogate"):
        prompts.check_prompt_size("ab\ud800")


def test_special_text_outside_the_vocabulary_is_empty(prompts, engine):
    assert prompts.special_text(None) == "" and prompts.special_text(engine.n_vocab) == ""
    assert prompts.special_text(-1) == ""
