"""A constraint that starts after a free block: ``After(inner, close)``.

A reply may open with a block of free text that ends at a closing marker (a reasoning
model's ``</think>``); the inner constraint (a tool-call grammar, a JSON schema) applies only
from the token after it.  Three phases, read from the path's tokens alone:

* ``BEFORE`` — the block may still open: the ``open`` marker's first token enters it, any
  other token is the inner constraint's first (the mask is the inner's first mask plus that
  token);
* ``FREE`` — inside the block: every token is allowed (the inner constraint never sees
  them) but, when there is an inner constraint, the ``ends`` tokens (end of generation: a
  reply that ends inside the block never meets the inner constraint), until ``budget`` of
  them have been emitted, after which only ``close`` is;
* ``AFTER`` — past ``close``: the inner constraint's mask, on the tokens after ``close``
  (no inner: every token).

A marker is a token or a token sequence: one fixed tokenisation of its text (a vocabulary
without a ``<think>`` token spells it in several).  A marker is recognised when the path's
tokens spell it in that tokenisation, never on text: so the phase at a tree node is a
function of the committed tokens and the node's path, and so is each node's mask; speculation
stays exact, the law being plain sampling under the same masks.  For a marker of several
tokens that law is the target's under these masks:

* opening: while the reply's tokens are a proper prefix of ``open``, the mask is the next
  token of ``open`` plus, when the inner constraint allows those tokens, the inner's mask
  after them; a token off ``open`` hands them all to the inner constraint, the last token of
  ``open`` enters the block (so the inner constraint's own law is never cut);
* closing: the block ends once its tokens end with ``close``; at the budget only the next
  token of ``close`` may follow, continuing any start of it the block already ends with.

A budget changes the law from the unbudgeted one by design: it makes ``p`` one-hot on the
close's next token once the block holds ``budget`` tokens.  A marker the model spells in
another tokenisation is text to this class.

Generic: a tool call constrained from its opening token on is ``After(call, open_token,
feed_close=True)``.  May import ``kernels`` and ``decoding.protocol``; nothing about text,
templates or models.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..kernels.masks import bitmask_from_ids, mask_allows
from ..decoding.protocol import Constraint, ConstraintState

__all__ = ["After", "AfterState", "BEFORE", "FREE", "AFTER", "marker_progress"]

BEFORE, FREE, AFTER = "before", "free", "after"
_PHASES = (BEFORE, FREE, AFTER)


def _marker(value, name: str, n_vocab: int) -> tuple[int, ...]:
    """A marker as a tuple of tokens (one token given as an int)."""
    toks = (int(value),) if isinstance(value, (int, np.integer)) else tuple(int(t) for t in value)
    if not toks or not all(0 <= t < n_vocab for t in toks):
        raise ValueError(f"{name} must be a token or tokens of the vocabulary")
    return toks


def marker_progress(tail: Sequence[int], marker: Sequence[int]) -> int:
    """The length of the longest end of ``tail`` that is a proper start of ``marker``: how
    much of the marker a block ending with ``tail`` has written already."""
    for k in range(min(len(marker) - 1, len(tail)), 0, -1):
        if tuple(tail[len(tail) - k:]) == tuple(marker[:k]):
            return k
    return 0


class After:
    """A ``protocol.Constraint``: free tokens up to ``close``, then ``inner`` (None: none).

    ``close`` and ``open``: a token, or the tokens that spell the marker.  ``n_vocab``: the
    logits row length.  ``phase``: where a reply starts (``BEFORE`` needs ``open``; ``FREE``
    when the prompt already opened the block; ``AFTER`` when it is closed already).
    ``budget``: the most tokens the block may hold before only ``close`` is allowed (-1: no
    limit).  ``feed_close``: the closing tokens are also the inner constraint's first tokens
    (a tool call whose grammar starts at its opening marker), rather than the block's last.
    ``ends``: the end-of-generation tokens, refused inside the block when there is an inner
    constraint."""

    def __init__(self, inner: Constraint | None, close, n_vocab: int, *, open=None,
                 phase: str = FREE, budget: int = -1, feed_close: bool = False, ends=()):
        if phase not in _PHASES:
            raise ValueError(f"phase must be one of {_PHASES}, got {phase!r}")
        if phase == BEFORE and open is None:
            raise ValueError("a block that may still open needs its open marker")
        self.close = _marker(close, "close", n_vocab)
        self.open = None if open is None else _marker(open, "open", n_vocab)
        self.inner, self.n_vocab, self.phase, self.budget = inner, int(n_vocab), phase, int(budget)
        self.feed_close = bool(feed_close)
        self._all = bitmask_from_ids(range(self.n_vocab), self.n_vocab)
        ends = [int(t) for t in ends if 0 <= int(t) < self.n_vocab] if inner is not None else []
        self._free = bitmask_from_ids(sorted(set(range(self.n_vocab)) - set(ends)), self.n_vocab) if ends else self._all

    def start(self) -> "AfterState":
        """A fresh state; the inner constraint starts now (so an inner one that cannot start
        is refused before the reply begins)."""
        return AfterState(self, self.inner.start() if self.inner is not None else None)


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = max(len(a), len(b))
    out = np.zeros(n, np.int32)
    out[:len(a)] |= a
    out[:len(b)] |= b
    return out


class AfterState:
    """One reply's position in an ``After`` (``protocol.ConstraintState``).  ``tail``: in
    ``BEFORE``, the reply's tokens so far (a proper start of ``open``); in ``FREE``, the
    block's last tokens (fewer than ``close``'s)."""

    def __init__(self, spec: After, inner: ConstraintState | None):
        self.spec, self.inner = spec, inner
        self.phase, self.count, self.tail = spec.phase, 0, ()  # count: tokens in the free block so far

    def _walk(self, tokens: Sequence[int]) -> tuple[str, int, tuple, list[int]]:
        """``(phase, count, tail, inner_tokens)`` after ``tokens`` from the committed state:
        ``inner_tokens`` are those the inner constraint gets."""
        s = self.spec
        phase, count, tail, inner = self.phase, self.count, self.tail, []
        for t in tokens:
            t = int(t)
            if phase == BEFORE:
                if t == s.open[len(tail)]:
                    tail += (t,)
                    if len(tail) == len(s.open):
                        phase, tail = FREE, ()
                else:
                    phase, inner, tail = AFTER, inner + list(tail) + [t], ()
            elif phase == FREE:
                seen = tail + (t,)
                if seen[-len(s.close):] == s.close:
                    phase, tail = AFTER, ()
                    if s.feed_close:
                        inner += list(s.close)
                else:
                    count += 1
                    tail = seen[max(0, len(seen) - len(s.close) + 1):]
            else:
                inner.append(t)
        return phase, count, tail, inner

    def _inner_allows(self, tokens: tuple) -> bool:
        """Whether the inner constraint allows ``tokens`` from its start (asked only along
        prefixes it allows, as a grammar engine needs)."""
        for i, t in enumerate(tokens):
            if not mask_allows(self.inner.mask(list(tokens[:i])), t):
                return False
        return True

    def _closing(self, count: int, tail: tuple) -> list[int]:
        """The rest of ``close`` once the budget is spent (empty before)."""
        s = self.spec
        return list(s.close[marker_progress(tail, s.close):]) if 0 <= s.budget <= count else []

    def mask(self, path: Sequence[int]) -> np.ndarray:
        s = self.spec
        phase, count, tail, inner = self._walk(path)
        if phase == FREE:
            closing = self._closing(count, tail)
            return bitmask_from_ids(closing[:1], s.n_vocab) if closing else s._free.copy()
        if self.inner is None:
            return s._all.copy()
        opening = bitmask_from_ids([s.open[len(tail)]], s.n_vocab) if phase == BEFORE else None
        if phase == BEFORE and tail and not self._inner_allows(tail):
            return opening
        first = self.inner.mask(list(tail) if phase == BEFORE else inner)
        return _union(first, opening) if phase == BEFORE else first

    def forced(self, path: Sequence[int]) -> list[int]:
        """The tokens forced after ``path`` (``protocol.ForcingState``, the engine's free
        candidates): the rest of ``close`` once the budget is spent, the rest of ``open``
        once the inner constraint no longer allows the reply's tokens, the inner
        constraint's forced tokens past the block (when it can tell them), nothing while the
        text is free."""
        s = self.spec
        phase, count, tail, inner = self._walk(path)
        if phase == FREE:
            return self._closing(count, tail)
        if phase == BEFORE:
            alone = self.inner is not None and tail and not self._inner_allows(tail)
            return list(s.open[len(tail):]) if alone else []
        forced = getattr(self.inner, "forced", None)
        return list(forced(inner)) if forced is not None else []

    def advance(self, tokens: Sequence[int]) -> None:
        self.phase, self.count, self.tail, inner = self._walk(tokens)
        if inner and self.inner is not None:
            self.inner.advance(inner)

    def is_stopped(self) -> bool:
        return self.phase == AFTER and self.inner is not None and self.inner.is_stopped()
