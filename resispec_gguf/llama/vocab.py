"""Draft/target vocabulary compatibility, checked the way llama.cpp's speculative tools do.

``VocabInfo`` holds what the check compares (``backend`` fills one from a model); the check
is pure Python on ``VocabInfo``-like objects (attributes ``vocab_type, n_vocab, bos, eos,
add_bos, add_eos, texts``).  Imports only ``errors``; never llama_cpp or ``backend``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError

MAX_SIZE_DIFFERENCE = 128
CHECK_START_TOKEN_ID = 5

_VOCAB_TYPES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo-2", 7: "test"}


@dataclass(frozen=True)
class VocabInfo:
    """What the draft/target compatibility check compares (see ``check_compatible``)."""

    vocab_type: int
    n_vocab: int
    bos: int
    eos: int
    add_bos: bool
    add_eos: bool
    texts: tuple  # token text (bytes) per id


def first_mismatch(target, draft) -> str | None:
    """A one-line description of the first incompatibility, or None when compatible."""
    if target.vocab_type != draft.vocab_type:
        t, d = (_VOCAB_TYPES.get(v.vocab_type, str(v.vocab_type)) for v in (target, draft))
        return f"vocabulary types differ (target {t}, draft {d})"
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos != draft.bos):
        return f"BOS differs (target {target.bos} add={target.add_bos}, draft {draft.bos} add={draft.add_bos})"
    if target.add_eos != draft.add_eos or (target.add_eos and target.eos != draft.eos):
        return f"EOS differs (target {target.eos} add={target.add_eos}, draft {draft.eos} add={draft.add_eos})"
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > MAX_SIZE_DIFFERENCE:
        return f"vocabulary sizes differ by {diff} > {MAX_SIZE_DIFFERENCE} (target {target.n_vocab}, draft {draft.n_vocab})"
    for i in range(CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        if target.texts[i] != draft.texts[i]:
            return f"token {i} differs (target {target.texts[i]!r}, draft {draft.texts[i]!r})"
    return None


def check_compatible(target, draft) -> None:
    """Raise ``UserError`` naming the first mismatch when the draft cannot serve the target."""
    why = first_mismatch(target, draft)
    if why is not None:
        raise UserError(f"draft model is incompatible with the target: {why}")
