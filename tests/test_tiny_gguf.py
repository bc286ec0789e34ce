"""The tiny GGUF test models load in llama.cpp, give finite logits and round-trip text."""

from __future__ import annotations

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

import tiny_gguf  # noqa: E402

TEXT = "héllo wörld 🙂\nTabs\tand  spaces"


def _load(path):
    return llama_cpp.Llama(model_path=str(path), n_ctx=256, verbose=False, logits_all=True)


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def test_pair_loads_finite_logits_and_round_trips(tiny_pair):
    target, draft = (_load(p) for p in tiny_pair)
    for llm in (target, draft):
        assert llm.n_vocab() == tiny_gguf.N_VOCAB
        assert llm.token_bos() == tiny_gguf.BOS_ID and llm.token_eos() == tiny_gguf.EOS_ID
        toks = llm.tokenize(TEXT.encode())
        assert toks[0] == tiny_gguf.BOS_ID
        assert llm.detokenize(toks).decode() == TEXT
        assert llm.tokenize(b"<|im_end|>", add_bos=False, special=True) == [tiny_gguf.IM_END_ID]
        llm.eval(toks)
        logits = np.asarray(llm.scores[: len(toks)])
        assert np.isfinite(logits).all()
        assert np.ptp(logits[-1]) > 1.0  # not a flat distribution
    # Shared vocabulary, partially agreeing next-token distributions.
    p = _softmax(np.asarray(target.scores[len(toks) - 1], dtype=np.float64))
    q = _softmax(np.asarray(draft.scores[len(toks) - 1], dtype=np.float64))
    assert 0.2 < np.minimum(p, q).sum() < 0.999


def test_pair_is_deterministic(tmp_path, tiny_pair):
    target, draft = tiny_gguf.write_tiny_pair(tmp_path)
    assert target.read_bytes() == tiny_pair[0].read_bytes()
    assert draft.read_bytes() == tiny_pair[1].read_bytes()
    assert target.read_bytes() != draft.read_bytes()


def test_incompatible_draft_differs_only_in_token_text(tiny_pair, incompatible_draft):
    target, bad = _load(tiny_pair[0]), _load(incompatible_draft)
    assert bad.n_vocab() == target.n_vocab()
    assert (bad.token_bos(), bad.token_eos()) == (target.token_bos(), target.token_eos())

    def texts(llm):
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        return [llama_cpp.llama_vocab_get_text(vocab, i) for i in range(llm.n_vocab())]

    assert texts(bad)[5:] != texts(target)[5:]


def test_garbage_files_fail_to_load(not_gguf_file, truncated_gguf):
    for path in (not_gguf_file, truncated_gguf):
        with pytest.raises(ValueError):
            _load(path)
