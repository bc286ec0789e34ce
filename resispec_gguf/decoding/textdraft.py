"""A draft with another vocabulary, read through text: ``TextDraft`` (the store ``"text_draft"``).

Why.  A draft whose tokens are not the target's cannot hand the verifier a q over the target's
ids, but it can write text.  ``TextDraft`` holds such a draft model; each request follows it
with a ``Follower``: the draft's own context, in the draft's own tokens, kept equal to the text
the target has committed (the prompt's text, then every emitted token's); at a step the
follower asks the draft for a greedy chain (argmax after argmax) and returns the chain's text.
The candidate source ``candidates.textdraft`` re-tokenizes that text with the target's
tokenizer and offers the tokens as deterministic candidates.  The chain stays in the draft's
cache and among the follower's tokens: when the target accepts a prefix of it, the next
``follow`` keeps the draft tokens that spell what was accepted (the boundary rule below) and
their cache rows with them, so the draft decodes only what is new; the rest is dropped there.

The boundary.  A target token may end inside a draft token (the draft spelled ``hello`` as one
token, the target has emitted ``hel``), and a text re-tokenized in pieces is not the draft's
own tokenization of the whole.  So ``follow`` keeps the draft tokens whose text lies inside
the committed text, backs off ``back`` more (the last of them may merge with what follows),
and re-tokenizes only the text after them (``resync``); the model's cache keeps its longest
common prefix with the new tokens (``sync_prefix``), so the prompt is read once per request.
Trailing bytes of an unfinished UTF-8 character wait for the token that completes them.

Law.  Everything here is a function of the committed text: the chain is the draft's argmax
at every position, no random draw is taken, and the model's cache is reset when another request
used it since (``TextDraft.claim``), so one request's chain never depends on what another
wrote.  Its tokens are therefore deterministic candidates (docs/verification.md, "Drafts with
another vocabulary").

Pure Python over ``protocol.ModelBackend`` plus the draft's ``tokenize``/``token_piece``.
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence

import numpy as np

from ..errors import ContextFullError

__all__ = ["Follower", "TextDraft", "complete_utf8", "resync"]

BACK = 1  # draft tokens re-tokenized before the boundary (the last kept one may merge with what follows)


def complete_utf8(data: bytes) -> int:
    """The length of ``data`` without the bytes of an unfinished UTF-8 character at its end."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b < 0x80:  # ASCII: nothing unfinished after it
            return n
        if b >= 0xC0:  # a lead byte: is its character complete?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return n if back >= need else n - back
    return n


def resync(tokens: list[int], ends: list[int], text: bytes, tokenize: Callable[[bytes], list[int]],
           piece: Callable[[int], bytes], fixed: int, back: int = BACK) -> tuple[list[int], list[int], bool]:
    """``(tokens, ends, exact)``: ``tokens`` made to spell ``text``, ``ends[i]`` where token
    ``i``'s text ends, ``exact`` whether their pieces spell ``text`` (a tokenizer may not).

    The tokens whose text lies inside the common prefix of their text and ``text`` are kept,
    ``back`` fewer (never the first ``fixed``: a BOS), and the rest of ``text`` is tokenized
    after them.  Only that boundary window is re-tokenized."""
    spelt = ends[-1] if ends else 0
    # the window starts before the shorter of the two texts: tokens may spell past ``text`` (a chain)
    first = _first_after(ends, max(0, min(spelt, len(text)) - 64))
    held = b"".join(piece(t) for t in tokens[first:]) if tokens else b""
    start = spelt - len(held)
    common = start + _common(held, text[start:])
    k = _first_after(ends, common + 1)  # tokens ending at or before ``common``
    k = max(fixed, min(k, len(tokens)) - back)
    keep = ends[k - 1] if k > 0 else 0
    new = tokenize(text[keep:]) if keep < len(text) else []
    out, out_ends = tokens[:k], ends[:k]
    at, spelt_new = keep, []
    for t in new:
        spelt_new.append(piece(t))
        at += len(spelt_new[-1])
        out.append(int(t))
        out_ends.append(at)
    return out, out_ends, b"".join(spelt_new) == text[keep:]


def _first_after(ends: list[int], at: int) -> int:
    """The index of the first token whose end is at or past ``at`` (``len(ends)``: none)."""
    lo, hi = 0, len(ends)
    while lo < hi:
        mid = (lo + hi) // 2
        if ends[mid] < at:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _common(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class TextDraft:
    """A draft model of another vocabulary (module docstring), shared by the engine's requests.

    ``model``: a ``protocol.ModelBackend`` with ``tokenize(bytes, add_special=, parse_special=)``
    and ``token_piece``; ``bos``: the token its context starts with (None: none); ``target``:
    the target's tokenizer (``candidates.base.TextCodec``; the engine binds its own when
    None).  ``p_min``: a chain stops where the draft's own probability of its argmax falls
    below it."""

    route = "text"

    def __init__(self, model, *, bos: int | None, target=None, p_min: float = 0.2):
        self.model = model
        self.bos = bos
        self.target = target
        self.p_min = float(p_min)
        self._lock = threading.Lock()
        self._owner: Follower | None = None

    def bind(self, target) -> "TextDraft":
        """Use ``target`` as the target's tokenizer unless one was given."""
        if self.target is None:
            self.target = target
        return self

    def follower(self, text: bytes) -> "Follower":
        """A request's follower, its context the prompt's ``text``."""
        return Follower(self, text)

    def tokenize(self, data: bytes) -> list[int]:
        """``data`` in the draft's tokens: plain text, no BOS, special texts not parsed."""
        return [int(t) for t in self.model.tokenize(bytes(data), add_special=False, parse_special=False)]

    def piece(self, token: int) -> bytes:
        return self.model.token_piece(int(token))

    def claim(self, follower: "Follower") -> None:
        """``follower`` is about to use the model (under the lock): when another request used
        it since, its cache is emptied, so that nothing of that request shapes this one's
        chains (not even their rounding)."""
        if self._owner is not follower:
            self.model.reset()
            self._owner = follower

    def finish(self, answer: Sequence[int], learnt=None) -> None:
        """A request ended (``candidates.Sources.finish`` tells every store): nothing kept."""

    def describe(self) -> dict:
        out = dict(self.model.describe()) if hasattr(self.model, "describe") else {}
        out["route"] = self.route
        return out

    def close(self) -> None:
        self.model.close()


class Follower:
    """One request's draft context (module docstring): ``follow`` the committed text,
    ``chain`` the draft's greedy continuation of it."""

    def __init__(self, owner: TextDraft, text: bytes):
        self.owner = owner
        self.fixed = 0 if owner.bos is None else 1
        self.tokens: list[int] = [] if owner.bos is None else [int(owner.bos)]
        self.ends: list[int] = [0] * self.fixed
        self.committed = b""
        self.exact = True
        self.ahead = False  # the tokens spell the last chain after the committed text
        self.follow(text)

    @property
    def spelt(self) -> bytes:
        """The text the draft's tokens spell (after the BOS)."""
        return b"".join(self.owner.piece(t) for t in self.tokens[self.fixed:])

    def follow(self, text: bytes) -> None:
        """The committed text is now ``text`` (the whole of it): the draft tokens are made to
        spell its complete characters, re-tokenizing only the boundary window."""
        self.committed = bytes(text)
        usable = self.committed[:complete_utf8(self.committed)]
        self.tokens, self.ends, self.exact = resync(self.tokens, self.ends, usable, self.owner.tokenize,
                                                    self.owner.piece, self.fixed)
        self.ahead = False

    def chain(self, n: int) -> tuple[bytes, list[tuple[int, float]]]:
        """``(text, spans)``: the text after the committed text that the draft's greedy chain
        of at most ``n`` tokens writes, and per chain token ``(where its text ends in that
        text, the draft's probability of it)``; empty when the chain does not continue the
        committed text or there is no room.  The chain's tokens stay in the draft's cache and
        after the follower's tokens (``ahead``) until the next ``follow``."""
        model, owner = self.owner.model, self.owner
        if self.ahead:  # asked again without a commit: back to the committed text first
            self.follow(self.committed)
        if not self.tokens or not self.exact:
            return b"", []
        n = min(n, model.n_ctx - len(self.tokens) - 1, model.n_seq_max - 2)
        if n <= 0:
            return b"", []
        with owner._lock:
            owner.claim(self)
            try:
                drafted, decoded = _greedy(model, self.tokens, n, owner.p_min)
            except ContextFullError:
                model.drop_uncommitted()
                return b"", []
            model.commit(list(range(decoded)))  # the chain's rows: the next step's prefix where accepted
        spelt = self.ends[-1] if self.ends else 0
        pieces = [owner.piece(t) for t, _ in drafted]
        at = spelt
        for (t, _), piece in zip(drafted, pieces):
            at += len(piece)
            self.tokens.append(int(t))
            self.ends.append(at)
        self.ahead = bool(drafted)
        whole = self.committed[:spelt] + b"".join(pieces)
        if not whole.startswith(self.committed):
            return b"", []
        spans, at = [], spelt - len(self.committed)
        for (_, p), piece in zip(drafted, pieces):
            at += len(piece)
            if at > 0:
                spans.append((at, p))
        return whole[len(self.committed):], spans


def _greedy(model, tokens: list[int], n: int, p_min: float) -> tuple[list[tuple[int, float]], int]:
    """The draft's argmax chain after ``tokens`` (at most ``n``; it stops at an end token or
    where the argmax's probability falls below ``p_min``), with those probabilities, and the
    number of uncommitted nodes decoded (``tokens[-1]``, then the chain's but its last: a
    chain from node 0).  The cache keeps its longest common prefix with ``tokens``."""
    model.sync_prefix(tokens)
    row = model.decode([tokens[-1]], [-1])[0]
    out: list[tuple[int, float]] = []
    while True:
        logits = np.asarray(row, np.float64)
        t = int(np.argmax(logits))
        p = 1.0 / float(np.exp(logits - logits[t]).sum())
        if model.is_eog(t) or p < p_min:
            return out, len(out) + 1
        out.append((t, p))
        if len(out) >= n:
            return out, len(out)
        row = model.decode([t], [len(out) - 1])[0]
