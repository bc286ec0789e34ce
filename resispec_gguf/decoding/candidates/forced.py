"""The grammar source: free draft candidates from the constraint, the tokens its grammar
forces next.

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

``ForcedSource`` is the candidate source (``candidates.base``) over ``ForcedTokens``: one bin
(prior 0.9), the grammar arm's (``ahead``: the forced chain at the root, which ``auto`` weighs).

Pure Python/NumPy; the constraint comes in through ``protocol``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..protocol import ConstraintState, ForcingState
from .base import Candidate, Request, SourceDefaults, register

__all__ = ["ForcedSource", "ForcedTokens", "only_token"]

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


@register
class ForcedSource(SourceDefaults):
    """The grammar's forced tokens as a candidate source: at a node, the first token the
    constraint forces after its path (module docstring)."""

    name = "forced"
    priors = (0.9,)  # accepted unless the target prefers another tokenisation of the same bytes
    arm = "grammar"

    def __init__(self, forced: ForcedTokens):
        self.forced = forced

    @classmethod
    def build(cls, request: Request) -> "ForcedSource | None":
        if request.dp.method == "none":
            return None
        forced = ForcedTokens.of(request.constraint)
        return None if forced is None else cls(forced)

    def propose(self, path: Sequence[int], run: int = 0) -> list[Candidate]:
        f = self.forced.first(path)
        return [Candidate(f, 0)] if f >= 0 else []

    def new_step(self) -> None:
        self.forced.new_step()

    def ahead(self) -> int:
        return len(self.forced.tokens(()))
