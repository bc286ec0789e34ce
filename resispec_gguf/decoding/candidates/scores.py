"""A node's deterministic candidates, as the tree and the draws see them: how the fixed
methods score them (``FixedScores``; ``autorequest.Auto`` is ``auto``'s scorer), and the law a
node's draws come from when candidates are tried first (``without``).

Where candidates come from is the sources of this package (``frame.Sources`` asks them); why
checking them first keeps the law exact is ``kernels.verify``'s docstring.  Plain NumPy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FixedScores", "without"]

# score factor of a context or memory candidate under the fixed methods (auto learns its own)
_LOOKUP_WEIGHT = 0.5


def without(ids: np.ndarray, probs: np.ndarray, fixed: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """q with the node's deterministic candidates removed and renormalised: the law a node's
    draws come from when candidates are tried first.  The verifier's target after their
    rejection gives them nothing, so a draw landing on one would be wasted; q without them
    is fixed before the draws (the candidates are), so it is a law like any other for the
    draws (``docs/verification.md``).  Empty when q has no mass elsewhere."""
    keep = ~np.isin(ids, fixed)
    if keep.all():
        return ids, probs
    ids, probs = ids[keep], probs[keep]
    total = probs.sum()
    if not total > 0.0:
        return ids[:0], probs[:0]
    return ids, probs / total


class FixedScores:
    """Candidate scores under a fixed method: the draft's probabilities (EAGLE-2), the
    context's and memory's candidates raised by ``_LOOKUP_WEIGHT`` (the first) and half as
    much (the others); nothing learnt."""

    @staticmethod
    def weights(qx: dict, fixed: list, k: int) -> tuple[dict, None]:
        w = dict(qx)
        for i, (x, _bin) in enumerate(fixed):
            lift = _LOOKUP_WEIGHT if i == 0 else _LOOKUP_WEIGHT / 2
            w[x] = 1.0 - (1.0 - lift) * (1.0 - w.get(x, 0.0))
        return w, None

    @staticmethod
    def lookup_worth(fixed: list, probs) -> list:
        return fixed
