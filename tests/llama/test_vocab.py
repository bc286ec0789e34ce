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
