"""A request's random stream, and the ledger that keeps it apart from state earlier requests'
randomness shaped.

Why.  Some state outlives a request: the memory of past answers, the acceptance figures
``auto`` carries from one request to the next, and, under ``--parallel``, what the other
requests in the pass did (the rows each request may use are shared by their past steps).
All of it is a function of other requests' uniforms.  A request that reads it and draws its
own uniforms from its seed alone can verify a candidate with the very uniform that produced
it: request 1 plain, request 2 lookup, both seed s, a fair coin for a target; request 2
re-draws request 1's first tokens from the same uniforms, then the memory proposes request
1's third token and checks it with the uniform that drew it (0 comes out 3 times in 4).

The rule.  A seeded request that reads such state draws from ``SeedSequence(seed,
spawn_key=key)``, where ``key`` is the ledger's next stamp: a SHA-256 chain advanced once per
such request, so no two of them share a stream.  Every request whose uniforms could have
shaped the state it reads drew from another stream (its own key, or its seed alone if it
read nothing, or fresh entropy if it had no seed), so the state is independent of the
uniforms it verifies with, and every proof for one request holds as written.  A request
that reads nothing of the kind draws from its seed alone and reproduces from it.

Reproducing.  The chain starts from a constant for a new memory (or none), and from the
stamp a memory file was saved with, so the same seed gives the same reply on an engine with
the same history (a fresh engine's first request, say); saving the stamp with the file
keeps a later process from reusing a key whose request left its answer in that file.

NumPy and hashlib only; no model, no decoding.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np

__all__ = ["Ledger", "side_stream", "stream"]

_ORIGIN = hashlib.sha256(b"resispec-gguf ledger").hexdigest()


class Ledger:
    """The chain of stamps handed to seeded requests that read cross-request state.

    ``stamp``: where the chain stands (hex), e.g. as a memory file saved it; "" starts it
    at its origin."""

    def __init__(self, stamp: str = ""):
        self._stamp = stamp or _ORIGIN
        self._lock = threading.Lock()

    @property
    def stamp(self) -> str:
        """Where the chain stands now (what a memory file saves)."""
        with self._lock:
            return self._stamp

    def next_key(self) -> tuple[int, ...]:
        """The key of the next request that reads cross-request state (8 words of 32 bits),
        the chain advanced past it: each call returns a new key."""
        with self._lock:
            key = self._stamp
            self._stamp = hashlib.sha256(("next " + key).encode()).hexdigest()
        return tuple(int(key[i:i + 8], 16) for i in range(0, 64, 8))


def stream(seed: int, key: tuple[int, ...] | None) -> np.random.Generator:
    """The generator every uniform of a request comes from: ``default_rng(seed)`` when
    ``key`` is None, else spawned from the seed under ``key`` (``Ledger.next_key``)."""
    if key is None:
        return np.random.default_rng(seed)
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=tuple(int(k) for k in key)))


def side_stream(seed: int, key: tuple[int, ...] | None) -> np.random.Generator:
    """The generator ``auto`` draws its learning (shadow) draws from, apart from ``stream``:
    ``default_rng([seed, 1])``, or spawned under ``key``."""
    if key is None:
        return np.random.default_rng([seed, 1])
    return np.random.default_rng(np.random.SeedSequence([seed, 1], spawn_key=tuple(int(k) for k in key)))
