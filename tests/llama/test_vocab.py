"""Draft/target vocabulary compatibility (llama.cpp's rules), on VocabInfo records and on a
real incompatible pair."""

import pytest

from resispec_gguf.llama import vocab
from resispec_gguf.llama.vocab import VocabInfo
from resispec_gguf.engine import Engine
from resispec_gguf.errors import UserError


def _info(**kw):
    base = dict(vocab_type=2, n_vocab=10, bos=1, eos=2, add_bos=False, add_eos=False, texts=tuple(b"t%d" % i for i in range(10)))
    base.update(kw)
    return VocabInfo(**base)


def test_vocab_check_rules():
    assert vocab.first_mismatch(_info(), _info()) is None
    assert "types differ" in vocab.first_mismatch(_info(), _info(vocab_type=1))
    assert "BOS" in vocab.first_mismatch(_info(add_bos=True), _info(add_bos=True, bos=3))
    assert vocab.first_mismatch(_info(bos=5), _info(bos=6)) is None  # BOS unused
    texts = list(_info().texts)
    texts[7] = b"other"
    assert "token 7" in vocab.first_mismatch(_info(), _info(texts=tuple(texts)))
    texts[7], texts[3] = b"t7", b"other"
    assert vocab.first_mismatch(_info(), _info(texts=tuple(texts))) is None  # ids < 5 unchecked
    big = _info(n_vocab=200, texts=tuple(b"t%d" % i for i in range(200)))
    assert "sizes differ" in vocab.first_mismatch(_info(), big)


def test_incompatible_pair_refused(tiny_pair, incompatible_draft):
    with pytest.raises(UserError, match=r"incompatible.*token 5"):
        Engine.load(str(tiny_pair[0]), str(incompatible_draft), n_ctx=128, progress=False)


def test_the_route_of_a_pair(tiny_pair, cross_draft, incompatible_draft):
    from resispec_gguf.llama import backend

    models = [backend.LlamaModel(str(p), n_ctx=64, n_threads=1) for p in (tiny_pair[0], tiny_pair[1], cross_draft,
                                                                        incompatible_draft)]
    try:
        t, same, cross, bad = (m.vocab_info() for m in models)
        assert vocab.route(t, same) == "same" and vocab.route(t, cross) == "text"
        assert vocab.unspellable(cross) == "" and vocab.unspellable(t) == ""
        assert set(vocab.unspellable(bad)) >= set("!#@~")
        with pytest.raises(UserError, match=r"incompatible.*cannot spell its text"):
            vocab.route(t, bad)
    finally:
        for m in models:
            m.close()


def test_a_draft_of_another_vocabulary_runs_on_the_text_route(tiny_pair, cross_draft):
    """The tiny Mistral-style target with a Llama-3-style draft (other specials, other merges):
    the pair loads, says its route, its chains are offered, and greedy output is plain's."""
    from resispec_gguf.config import DraftParams, SamplingParams

    with Engine.load(str(tiny_pair[0]), str(cross_draft), n_ctx=256, n_threads=1, progress=False) as engine:
        assert engine.has_draft and engine.draft is None and engine.text_draft is not None
        assert engine.info()["draft"]["route"] == "text"
        text = b"hello the cat"
        assert engine.text_draft.tokenize(text) != engine.tokenize(text.decode())  # other tokens, one text
        sp = SamplingParams(temperature=0.0, max_tokens=24)
        plain = engine.generate("hello there", sp, DraftParams(method="none"))
        for method in ("auto", "chain"):
            res = engine.generate("hello there", sp, DraftParams(method=method, depth=4))
            assert res.tokens == plain.tokens, method
        res = engine.generate("hello there", SamplingParams(temperature=1.0, seed=2, max_tokens=24),
                              DraftParams(method="chain", depth=4))
        assert res.stats.candidates["text draft"][0] > 0
