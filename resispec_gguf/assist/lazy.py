"""A constraint that starts after a free block: ``After(inner, close)``.

A reply may open with a block of free text that ends at a closing token (a reasoning
model's ``</think>``); the inner constraint (a tool-call grammar, a JSON schema) applies only
from the token after it.  Three phases, read from the path's tokens alone:

* ``BEFORE`` — the block may still open: the ``open`` token enters it, any other token is
  the inner constraint's first (the mask is the inner's first mask plus ``open``);
* ``FREE`` — inside the block: every token is allowed (the inner constraint never sees
  them) but, when there is an inner constraint, the ``ends`` tokens (end of generation: a
  reply that ends inside the block never meets the inner constraint), until ``budget`` of
  them have been emitted, after which only ``close`` is;
* ``AFTER`` — past ``close``: the inner constraint's mask, on the tokens after ``close``
  (no inner: every token).

The phase at a tree node is a function of the committed tokens and the node's path, so each
node's mask is too, and speculation stays exact (the law is plain sampling under the same
masks).  A budget changes the law from the unbudgeted one by design: it makes ``p`` one-hot on
``close`` once the block holds ``budget`` tokens.  ``open`` and ``close`` are single tokens;
a trigger that spans several tokens needs matching on text, which this class does not do.

Generic: a tool call constrained from its opening token on is ``After(call, open_token,
feed_close=True)``.  May import ``kernels`` and ``spec.protocol``; nothing about text,
templates or models.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..kernels.masks import bitmask_from_ids
from ..spec.protocol import Constraint, ConstraintState

__all__ = ["After", "AfterState", "BEFORE", "FREE", "AFTER"]

BEFORE, FREE, AFTER = "before", "free", "after"
_PHASES = (BEFORE, FREE, AFTER)


class After:
    """A ``protocol.Constraint``: free tokens up to ``close``, then ``inner`` (None: none).

    ``n_vocab``: the logits row length.  ``phase``: where a reply starts (``BEFORE`` needs an
    ``open`` token; ``FREE`` when the prompt already opened the block; ``AFTER`` when it is
    closed already).  ``budget``: the most tokens the block may hold before only ``close`` is
    allowed (-1: no limit).  ``feed_close``: the closing token is also the inner constraint's
    first token (a tool call whose grammar starts at its opening marker), rather than the
    block's last.  ``ends``: the end-of-generation tokens, refused inside the block when there
    is an inner constraint."""

    def __init__(self, inner: Constraint | None, close: int, n_vocab: int, *, open: int | None = None,
                 phase: str = FREE, budget: int = -1, feed_close: bool = False, ends=()):
        if phase not in _PHASES:
            raise ValueError(f"phase must be one of {_PHASES}, got {phase!r}")
        if phase == BEFORE and open is None:
            raise ValueError("a block that may still open needs its open token")
        if not 0 <= close < n_vocab or (open is not None and not 0 <= open < n_vocab):
            raise ValueError("open and close must be tokens of the vocabulary")
        self.inner, self.close, self.open = inner, int(close), None if open is None else int(open)
        self.n_vocab, self.phase, self.budget = int(n_vocab), phase, int(budget)
        self.feed_close = bool(feed_close)
        self._all = bitmask_from_ids(range(self.n_vocab), self.n_vocab)
        ends = [int(t) for t in ends if 0 <= int(t) < self.n_vocab] if inner is not None else []
        self._free = bitmask_from_ids(sorted(set(range(self.n_vocab)) - set(ends)), self.n_vocab) if ends else self._all
        self._close_only = bitmask_from_ids([self.close], self.n_vocab)

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
    """One reply's position in an ``After`` (``protocol.ConstraintState``)."""

    def __init__(self, spec: After, inner: ConstraintState | None):
        self.spec, self.inner = spec, inner
        self.phase, self.count = spec.phase, 0  # count: tokens in the free block so far

    def _walk(self, tokens: Sequence[int]) -> tuple[str, int, list[int]]:
        """``(phase, count, inner_tokens)`` after ``tokens`` from the committed state:
        ``inner_tokens`` are those the inner constraint gets (the ones past ``close``)."""
        s = self.spec
        phase, count, inner = self.phase, self.count, []
        for t in tokens:
            t = int(t)
            if phase == BEFORE:
                phase = FREE if t == s.open else AFTER
                if phase == AFTER:
                    inner.append(t)
            elif phase == FREE:
                if t == s.close:
                    phase = AFTER
                    if s.feed_close:
                        inner.append(t)
                else:
                    count += 1
            else:
                inner.append(t)
        return phase, count, inner

    def mask(self, path: Sequence[int]) -> np.ndarray:
        s = self.spec
        phase, count, inner = self._walk(path)
        if phase == FREE:
            return s._close_only.copy() if 0 <= s.budget <= count else s._free.copy()
        if self.inner is None:
            return s._all.copy()
        first = self.inner.mask(inner)
        if phase == BEFORE:
            return _union(first, bitmask_from_ids([s.open], s.n_vocab))
        return first

    def forced(self, path: Sequence[int]) -> list[int]:
        """The tokens forced after ``path`` (``protocol.ForcingState``, the engine's free
        candidates): ``close`` once the budget is spent, the inner constraint's forced tokens
        past the block (when it can tell them), nothing while the text is free."""
        s = self.spec
        phase, count, inner = self._walk(path)
        if phase == FREE:
            return [s.close] if 0 <= s.budget <= count else []
        forced = getattr(self.inner, "forced", None)
        return list(forced(inner)) if phase == AFTER and forced is not None else []

    def advance(self, tokens: Sequence[int]) -> None:
        self.phase, self.count, inner = self._walk(tokens)
        if inner and self.inner is not None:
            self.inner.advance(inner)

    def is_stopped(self) -> bool:
        return self.phase == AFTER and self.inner is not None and self.inner.is_stopped()
