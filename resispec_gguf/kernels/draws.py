"""Draws from a distribution, by inverse CDF on caller-supplied uniforms.

One draw from a dense ``[V]`` distribution (``sample_dense``) or a sparse ``(ids, probs)``
one in ascending id order (``sample_sparse``, the same token ``sample_dense`` draws from
the dense form); iid draws (``sample_iid``, and ``sample_iid_q`` with each draw's
probability), and sequential draws without replacement (``sample_without_replacement``,
``rrs``'s candidates).  Sparse distributions are as ``sampling`` builds them.  Uniforms in
[0, 1) come from the caller's seeded ``numpy.random.Generator``; nothing here draws random
numbers itself.

May import ``config``, ``errors``, ``paths``, ``progress`` and other kernel modules (it
needs none); never a model, the decoding loop, an assistant feature or a surface, and never
llama_cpp.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .arrays import frozen

__all__ = ["sample_iid", "sample_iid_q", "sample_without_replacement", "sample_dense", "sample_sparse"]


@njit(cache=True)
def _cdf_index(probs, u):
    # Inverse CDF of a sparse distribution, as an index into probs; u in [0, 1).
    t = u * probs.sum()
    c = 0.0
    last = -1
    for j in range(probs.shape[0]):
        if probs[j] > 0.0:
            c += probs[j]
            last = j
            if c > t:
                return j
    return last  # round-off: the last entry with mass


@njit(cache=True)
def _sample_cdf(ids, probs, u):
    return ids[_cdf_index(probs, u)]


@njit(cache=True)
def _sample_iid(ids, probs, u):
    # u: [K] uniforms -> [K] draws
    out = np.empty(u.shape[0], np.int64)
    for k in range(u.shape[0]):
        out[k] = _sample_cdf(ids, probs, u[k])
    return out


@njit(cache=True)
def _sample_iid_q(ids, probs, u):
    # _sample_iid's draws and the probability of each: u [K] -> (draws [K], q [K])
    out = np.empty(u.shape[0], np.int64)
    q = np.empty(u.shape[0], np.float64)
    for k in range(u.shape[0]):
        pick = _cdf_index(probs, u[k])
        out[k] = ids[pick]
        q[k] = probs[pick]
    return out, q


@njit(cache=True)
def _sample_without_replacement(ids, probs, u):
    # Sequential draws, each from the distribution without the earlier draws, renormalised.
    n = probs.shape[0]
    k_max = min(u.shape[0], n)
    rest = probs.copy()
    out = np.empty(k_max, np.int64)
    k = 0
    while k < k_max:
        tot = rest.sum()
        if not tot > 0.0:
            break
        t = u[k] * tot
        c = 0.0
        pick = -1
        for j in range(n):
            if rest[j] > 0.0:
                c += rest[j]
                pick = j
                if c > t:
                    break
        out[k] = ids[pick]
        rest[pick] = 0.0
        k += 1
    return out[:k]


@njit(cache=True)
def _sample_dense(p, u):
    # the inverse CDF over token ids 0..V-1 (token 0 for a vector without mass, as before)
    return max(_cdf_index(p, u), 0)


@njit(cache=True)
def _sample_by_id(ids, probs, u):
    # Inverse CDF walked in ascending id order: the token sample_dense draws with the same u
    # from the dense vector (up to round-off), whatever order (ids, probs) come in.
    order = np.argsort(ids)
    t = u * probs.sum()
    c = 0.0
    last = -1
    for j in range(order.shape[0]):
        v = probs[order[j]]
        if v > 0.0:
            c += v
            last = order[j]
            if c > t:
                return ids[order[j]]
    return ids[last]


# --------------------------------------------------------------------------- wrappers


def sample_iid(ids, probs, u) -> np.ndarray:
    """``len(u)`` iid inverse-CDF draws from the sparse distribution ``(ids, probs)``."""
    return _sample_iid(frozen(ids, np.int64), frozen(probs, np.float64), frozen(u, np.float64))


def sample_iid_q(ids: np.ndarray, probs: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sample_iid``'s draws (the same tokens from the same uniforms) and the probability
    of each under ``(ids, probs)``: ``(draws [K] int64, q [K] float64)``."""
    return _sample_iid_q(frozen(ids, np.int64), frozen(probs, np.float64), frozen(u, np.float64))


def sample_without_replacement(ids, probs, u) -> np.ndarray:
    """Sequential draws without replacement (at most the support size), one uniform each."""
    return _sample_without_replacement(frozen(ids, np.int64), frozen(probs, np.float64), frozen(u, np.float64))


def sample_sparse(ids, probs, u: float) -> int:
    """One draw from the sparse distribution ``(ids, probs)``: the token ``sample_dense``
    draws with the same ``u`` from the same distribution held densely (ascending id order)."""
    return int(_sample_by_id(frozen(ids, np.int64), frozen(probs, np.float64), float(u)))


def sample_dense(p, u: float) -> int:
    """One inverse-CDF draw from a dense distribution ``p`` ``[V]``."""
    return int(_sample_dense(frozen(p, np.float64), float(u)))
