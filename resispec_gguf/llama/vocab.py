"""Draft/target vocabulary compatibility, checked the way llama.cpp's speculative tools do,
and the route a pair takes (``route``): one vocabulary, or the text route when the draft's
differs but it can spell the target's text (``unspellable``).

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


# what a draft must spell for the text route: printable ASCII, the space, the newline and the tab
SPELLED = "".join(chr(c) for c in range(0x21, 0x7F)) + " \n\t"
_SPACES = {" ": ("\u0120", "\u2581"), "\n": ("\u010a",), "\t": ("\u0109",)}  # byte-level and SentencePiece forms


def unspellable(info) -> str:
    """The characters of ``SPELLED`` that no token of ``info`` (a ``VocabInfo``) writes alone,
    in its raw, byte-level (``Ġ``) or SentencePiece (``▁``) form or as a byte token
    (``<0x41>``); empty when it can spell them all."""
    texts = {t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in info.texts}
    missing = []
    for c in SPELLED:
        forms = (c, f"<0x{ord(c):02X}>", *_SPACES.get(c, ()))
        if not any(f in texts for f in forms):
            missing.append(c)
    return "".join(missing)


def route(target, draft) -> str:
    """How ``draft`` serves ``target``: ``"same"`` (one vocabulary: the draft's q over the
    target's ids) or ``"text"`` (another vocabulary, read through text:
    ``decoding.textdraft``); ``UserError`` when it cannot spell the target's text."""
    why = first_mismatch(target, draft)
    if why is None:
        return "same"
    if target.vocab_type == 0 or draft.vocab_type == 0:
        raise UserError(f"draft model is incompatible with the target: {why}, and a model has no vocabulary")
    missing = unspellable(draft)
    if missing:
        raise UserError(f"draft model is incompatible with the target: {why}, and the draft cannot spell its text "
                        f"(no token for {missing[:12]!r})")
    return "text"


def check_compatible(target, draft) -> None:
    """Raise ``UserError`` naming the first mismatch when the draft cannot serve the target."""
    why = first_mismatch(target, draft)
    if why is not None:
        raise UserError(f"draft model is incompatible with the target: {why}")


class TableTokenizer:
    """The tokenizer the grammar engine (llguidance) is given: the model's own tokenizer,
    held to the engine's token table.

    The grammar engine masks and commits tokens by their bytes in ``tokens`` (one ``bytes``
    per id: the token's piece, a special token's text after a 0xFF byte), and it tokenizes
    the bytes a grammar forces with this object's ``__call__``.  llama.cpp's tokenizer is not
    always the inverse of its pieces: a SentencePiece vocabulary reads the text ``▁``
    (U+2581) as a space and gives the ``▁`` token, whose piece is `` ``, so a grammar forcing
    ``<｜tool▁sep｜>`` as text got tokens spelling ``<｜tool sep｜>``, which the engine then
    refused to commit.  So a tokenization whose pieces do not spell the text exactly is
    replaced, from its first wrong token on, by the longest-match one over the table (every
    non-special token's bytes), which spells it by construction where every byte has a
    token (a byte-fallback or byte-level vocabulary); it stops where none does.

    ``tokenize(data: bytes) -> list[int]``: the model's tokenizer without special parsing or
    BOS.  Implements llguidance's ``TokenizerWrapper`` protocol (the attributes below and
    ``__call__``).  Pure Python."""

    is_tokenizer_wrapper = True

    def __init__(self, tokens, special_ids, tokenize, eos: int, bos: int | None):
        self.tokens = list(tokens)
        self.special_token_ids = sorted(int(t) for t in special_ids)
        self.eos_token_id = int(eos)
        self.bos_token_id = None if bos is None or bos < 0 else int(bos)
        self._tokenize = tokenize
        self._special = special = frozenset(self.special_token_ids)
        self._by_bytes: dict[bytes, int] = {}
        for i, b in enumerate(self.tokens):
            if b and i not in special:
                self._by_bytes.setdefault(b, i)  # the lowest id of equal pieces
        self._longest = max((len(b) for b in self._by_bytes), default=1)

    def __call__(self, text) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out = [int(t) for t in self._tokenize(data)]
        at = 0
        for n, t in enumerate(out):  # keep the model's tokens while they spell the text
            piece = self.tokens[t] if 0 <= t < len(self.tokens) else b""
            if not piece or t in self._special or data[at:at + len(piece)] != piece:
                return out[:n] + self.longest_match(data[at:])
            at += len(piece)
        return out if at == len(data) else out + self.longest_match(data[at:])

    def longest_match(self, data: bytes) -> list[int]:
        """``data`` as the longest table pieces from the left; stops before a byte no piece
        starts with."""
        out, at = [], 0
        while at < len(data):
            for n in range(min(self._longest, len(data) - at), 0, -1):
                t = self._by_bytes.get(data[at:at + n])
                if t is not None:
                    out.append(t)
                    at += n
                    break
            else:
                break
        return out
