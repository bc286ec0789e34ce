"""Free draft candidates from the constraint: the tokens its grammar forces next.

Where a constraint leaves only one continuation of the text (a JSON key once its first bytes
are written, the punctuation after it, a tool call's fixed opening), it knows the next bytes
before any model does, and can tokenise them (``protocol.ForcingState.forced``).
``ForcedTokens`` asks it once per step and path, and proposes the first of those tokens as a
node's deterministic candidate: like a context-lookup candidate, it is a function of the
path alone, fixed before the node draws, checked first with probability p(x) under the
masked p and, if rejected, the draws verify against the rest (``verify.verify``'s ``x0``).
It is a candidate, never a decision: the mask may allow other tokenisations of the same
bytes (``{"`` as one token or two), and which one the target takes is part of its law.

Only a position whose mask allows exactly one token (``only_token``) is certain: p is a
point mass there whatever the target's row says, so its token is taken without a draw or a
uniform (the row is still computed: the next position needs it).

Pure Python/NumPy; the constraint comes in through ``protocol``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .protocol import ConstraintState, ForcingState

__all__ = ["ForcedTokens", "only_token"]

# forced tokens asked for per path at most (a chain longer than a step's tree is never used)
MAX_FORCED = 16


def only_token(mask: np.ndarray) -> int:
    """The token a packed bitmask ``[W]`` (int32 words) allows when it allows exactly one,
    else -1."""
    words = np.flatnonzero(mask)
    if words.shape[0] != 1:
        return -1
    w = int(mask[words[0]]) & 0xFFFFFFFF
    if w & (w - 1):  # more than one bit
        return -1
    return 32 * int(words[0]) + w.bit_length() - 1


class ForcedTokens:
    """One request's forced tokens by path (tree tokens below the root), asked of the
    constraint at most once per path and step; ``new_step`` forgets them (the committed
    tokens moved)."""

    def __init__(self, state: ConstraintState):
        self.state = state
        self._by_path: dict[tuple, list[int]] = {}

    @staticmethod
    def of(state: ConstraintState | None) -> "ForcedTokens | None":
        """The forced-token source of ``state``, None when it cannot tell its forced tokens."""
        return ForcedTokens(state) if isinstance(state, ForcingState) else None

    def new_step(self) -> None:
        self._by_path.clear()

    def tokens(self, path: Sequence[int]) -> list[int]:
        """The tokens the constraint forces after the committed tokens + ``path``, in order
        (empty when the next bytes are not forced)."""
        key = tuple(path)
        out = self._by_path.get(key)
        if out is None:
            out = self._by_path[key] = [int(t) for t in self.state.forced(key)][:MAX_FORCED]
        return out

    def first(self, path: Sequence[int]) -> int:
        """The candidate after ``path``: the first forced token, -1 when none."""
        out = self.tokens(path)
        return out[0] if out else -1
