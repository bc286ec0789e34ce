"""A request's random stream, and the ledger that keeps it apart from state other requests'
randomness shaped.

Why.  Some state outlives a request: the memory of past answers, the acceptance figures
``auto`` carries from one request to the next, and, with several slots, the requests beside
one in a pass (their steps decide the rows and tree room it gets).  All of it is a function
of other requests' uniforms.  Two requests with one seed drawing from that seed alone share
their uniforms, so the second can verify a candidate with the very uniform that produced
it: request 1 plain, request 2 lookup, both seed s, a fair coin for a target; request 2
re-draws request 1's first tokens from the same uniforms, then the memory proposes request
1's third token and checks it with the uniform that drew it (0 came out 3 times in 4).

The rule.  On an engine whose state spans requests, a seeded request that takes part in it
(reads or adds to the memory, or shares a pass) draws from ``SeedSequence(seed,
spawn_key=key)``, ``key`` from the ledger: the ledger's stamp and the number of such
requests that used this seed before (``Ledger.key``).  No two of them share a key, so every
request whose uniforms could have shaped the state a request reads drew from another stream
(a key of its own, or fresh entropy if it had no seed), the state is independent of the
uniforms it is verified with, and every proof for one request holds as written.  The first
use of a seed on a new ledger has no key: the seed alone, as a request that takes no part.

Reproducing.  A seed therefore reproduces a reply on its first use on a fresh engine (or
always, for a request that takes no part), and a repeat of a seed gets a fresh stream.  A
ledger read from a memory file starts from the stamp saved with it, never the origin, so a
later process never reuses a stream whose answers are in that file.

NumPy and hashlib only; no model, no decoding.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np

__all__ = ["Ledger", "side_stream", "stream"]

_ORIGIN = hashlib.sha256(b"resispec-gguf ledger").hexdigest()
# distinct seeds counted before the ledger moves to a new stamp (the counts then start over)
MAX_SEEDS = 100_000


class Ledger:
    """Which seeds the requests taking part in cross-request state used, and how often.

    ``stamp``: where its chain stands (hex), as a memory file saved it; "" for a new one."""

    def __init__(self, stamp: str = ""):
        self._stamp = stamp or _ORIGIN
        self._uses: dict[int, int] = {}
        self._lock = threading.Lock()

    def key(self, seed: int) -> tuple[int, ...] | None:
        """The key of a seeded request that takes part (``seeding`` module docstring), the use
        counted: None on a seed's first use on a new ledger (the seed alone), else 8 words of
        the stamp and the number of earlier uses.  No two calls for one seed return the same
        key (the stream is made from the seed and the key)."""
        with self._lock:
            if len(self._uses) >= MAX_SEEDS:  # a new stamp: every (stamp, count) is new again
                self._stamp = _advance(self._stamp, "rolled")
                self._uses.clear()
            n = self._uses.get(seed, 0)
            self._uses[seed] = n + 1
            stamp = self._stamp
        if n == 0 and stamp == _ORIGIN:
            return None
        return tuple(int(stamp[i:i + 8], 16) for i in range(0, 56, 8)) + (n,)

    def saved_stamp(self) -> str:
        """The stamp a file saved now carries: past this ledger's own, so that a process that
        loads the file draws under keys this one never used."""
        with self._lock:
            return _advance(self._stamp, "saved")


def _advance(stamp: str, why: str) -> str:
    return hashlib.sha256(f"{why} {stamp}".encode()).hexdigest()


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
