"""A request's uniforms, drawn from its seeded generator a block at a time.

``Generator.random(n)`` costs about a microsecond whatever ``n`` up to a few dozen, and a
step asks for a handful of uniforms at each of a dozen nodes.  A ``numpy.random.Generator``'s
doubles are one stream (``random(n)`` gives the next n values, as n calls of ``random()``
would), so handing out a block's values in order gives every caller exactly the uniforms it
would have drawn itself: the draws, the verification and the output do not change.  Nothing
is drawn before the first uniform is asked for (a reply that needs none leaves the generator
where its seed put it).

NumPy only; no model, no decoding.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Uniforms"]

_EMPTY = np.empty(0, np.float64)


class Uniforms:
    """The uniforms of ``rng`` in [0, 1), in its order, ``block`` at a time."""

    def __init__(self, rng: np.random.Generator, block: int = 64):
        self.rng = rng
        self.block = int(block)
        self._buf = _EMPTY
        self._at = 0

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` uniforms, float64 ``[n]``: a view of the block, which nothing writes
        to (writable, as ``Generator.random`` gives them: the kernels that take them compile
        for that type once); a later block is a new array."""
        at, end = self._at, self._at + n
        if end > self._buf.shape[0]:
            self._buf = np.concatenate([self._buf[at:], self.rng.random(max(self.block, n))])
            at, end = 0, n
        self._at = end
        return self._buf[at:end]

    def one(self) -> float:
        """The next uniform."""
        return float(self.take(1)[0])
