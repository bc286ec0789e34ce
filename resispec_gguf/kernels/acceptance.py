"""Exact acceptance figures of a node: how likely the verifier is to accept, computed, not drawn.

``overlap`` (a chain's acceptance ``sum min(p, q)``) and ``values_at`` (p at q's ids) on
dense or sparse distributions; the iid stage ``schedule``; ``expected_acceptance`` (any
method, ``rrs`` by enumeration over draw orders), the set-level optimum
``optimal_acceptance``; ``acceptance_profile`` (``resispec``'s acceptance and the expected
number of distinct draws for several K at once, what ``auto`` learns from at every drafted
node) and ``draw_chances`` (the chance that each draw as drawn is the one accepted);
``expected_distinct``.  Every figure follows the rules in ``verify`` through the schedule in
``stages``; the tests check them against the verifier's enumerated output.

Plain NumPy/Numba, no randomness: may import ``config``, ``errors``, ``paths``,
``progress`` and other kernel modules (``stages``), but not ``verify`` (which re-exports
these figures); never a model, the decoding loop, an assistant feature or a surface, and
never llama_cpp.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .arrays import frozen
from .stages import (
    _CHAIN,
    _RESISPEC,
    _RRS,
    _check_dist,
    _index_of,
    _mass_min,
    _method_code,
    _schedule,
    _sorted_by_ratio,
    _sorted_support,
    _stage_accept,
)

__all__ = [
    "overlap",
    "values_at",
    "schedule",
    "expected_acceptance",
    "optimal_acceptance",
    "acceptance_profile",
    "draw_chances",
    "expected_distinct",
]


# --------------------------------------------------------------------------- kernels


@njit(cache=True)
def _common_mins(pids, pp, qids, qp):
    # min(p, q) over the ids both hold (each side's ids distinct), in ascending id order
    op = np.argsort(pids)
    oq = np.argsort(qids)
    out = np.empty(min(pids.shape[0], qids.shape[0]), np.float64)
    i = j = n = 0
    while i < op.shape[0] and j < oq.shape[0]:
        a, b = pids[op[i]], qids[oq[j]]
        if a < b:
            i += 1
        elif b < a:
            j += 1
        else:
            out[n] = min(pp[op[i]], qp[oq[j]])
            n += 1
            i += 1
            j += 1
    return out[:n]


@njit(cache=True)
def _values_at(pids, pp, qids):
    # p(x) for each x in qids (0 where p has no entry); each side's ids distinct
    op = np.argsort(pids)
    sp = pids[op]
    out = np.zeros(qids.shape[0], np.float64)
    for j in range(qids.shape[0]):
        i = np.searchsorted(sp, qids[j])
        if i < sp.shape[0] and sp[i] == qids[j]:
            out[j] = pp[op[i]]
    return out


@njit(cache=True)
def _acceptance_profile(pv, qp, ks):
    # for each K in ks: resispec's exact acceptance M(F_1) (K = 1: the chain's M(1)) and the
    # expected number of distinct tokens among K iid draws from q
    rs, qc, pc = _sorted_by_ratio(pv, qp)
    acc = np.empty(ks.shape[0], np.float64)
    distinct = np.empty(ks.shape[0], np.float64)
    for i in range(ks.shape[0]):
        k = ks[i]
        if k == 1:
            c = 1.0
        else:
            _, _, c = _schedule(_RESISPEC, rs, qc, pc, k)
        acc[i] = min(1.0, _mass_min(rs, qc, pc, c))
        d = 0.0
        for j in range(qp.shape[0]):
            d += 1.0 - (1.0 - qp[j]) ** k
        distinct[i] = d
    return acc, distinct


@njit(cache=True)
def _draw_chances(method, pv, qids, qp, draws):
    # chance that stage i is reached and accepts draw i, for the draws as drawn
    rs, qc, pc = _sorted_by_ratio(pv, qp)
    k = draws.shape[0]
    lo, reach, _ = _schedule(method, rs, qc, pc, k)
    out = np.zeros(k, np.float64)
    left = 1.0
    for i in range(k):
        j = _index_of(qids, draws[i])
        if j < 0 or not qp[j] > 0.0:
            continue
        a = _stage_accept(pv[j] / qp[j] - lo[i], reach[i])
        out[i] = left * a
        left *= 1.0 - a
    return out


@njit(cache=True)
def _optimal(rs, qc, pc, k):
    best = 1.0
    for j in range(rs.shape[0] + 1):
        v = pc[j] + 1.0 - qc[j] ** k
        if v < best:
            best = v
    return best


# --------------------------------------------------------------------------- wrappers


def values_at(p, qids) -> np.ndarray:
    """p(x) for each x in ``qids``, float64 in that order.  ``p``: dense ``[V]`` or sparse
    ``(ids, probs)``."""
    if isinstance(p, tuple):
        return _values_at(frozen(p[0], np.int64), frozen(p[1], np.float64), frozen(qids, np.int64))
    return np.asarray(p[qids], np.float64)


def overlap(p, qids, qprobs) -> float:
    """``sum_x min(p(x), q(x))``: the chance that one draw from q passes a chain's test
    against p.  ``p``: dense ``[V]`` or sparse ``(ids, probs)``; q sparse."""
    if isinstance(p, tuple):
        # min(p, q) at the common ids in ascending id order (as np.intersect1d gives them),
        # summed by NumPy: the same terms in the same order, so the same float
        return float(_common_mins(frozen(p[0], np.int64), frozen(p[1], np.float64), frozen(qids, np.int64),
                                  frozen(qprobs, np.float64)).sum())
    return float(np.minimum(p[qids], qprobs).sum())


def _support(p, q):
    p = _check_dist("p", p)
    q = _check_dist("q", q, p.shape[0])
    qids = np.flatnonzero(q)
    return p, qids, q[qids]


def schedule(method: str, p, q, k: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The iid stage schedule ``(lo [K], P [K], c)`` (see the module docstring)."""
    code = _method_code(method)
    if code == _RRS:
        raise ValueError("rrs has no iid schedule")
    if code == _CHAIN and k != 1:
        raise ValueError("chain has K = 1")
    p, qids, qp = _support(p, q)
    rs, qc, pc = _sorted_support(p, qids, qp)
    return _schedule(code, rs, qc, pc, int(k))


def expected_acceptance(method: str, p, q, k: int) -> float:
    """Exact probability that some of k candidates is accepted (1 - P(fallback))."""
    code = _method_code(method)
    if k < 1:
        raise ValueError("k must be >= 1")
    if code == _CHAIN and k != 1:
        raise ValueError("chain has K = 1")
    p, qids, qp = _support(p, q)
    if code == _RRS:
        return _rrs_acceptance(p, qids, qp, int(k))
    rs, qc, pc = _sorted_support(p, qids, qp)
    _, _, c = _schedule(code, rs, qc, pc, int(k))
    return float(_mass_min(rs, qc, pc, c))


def _rrs_acceptance(p, qids, qp, k, max_support=10):
    """Exact recursion over ordered draws without replacement (small supports only)."""
    n = qids.shape[0]
    if n > max_support:
        raise ValueError(f"exact rrs acceptance enumerates draw orders; supp q has {n} > {max_support} tokens")
    qs = np.zeros_like(p)
    qs[qids] = qp
    return float(_rrs_stage(p, qs, k))


def _rrs_stage(ps, qs, k):
    # Probability that a stage reached with residual ps and draw law qs, or a later one, accepts.
    if k == 0:
        return 0.0
    res = np.maximum(0.0, ps - qs)
    z = res.sum()
    acc = 0.0
    for x in np.flatnonzero(qs > 0):
        a = min(1.0, ps[x] / qs[x])
        acc += qs[x] * a
        rest = qs.copy()
        rest[x] = 0.0
        if a < 1.0 and z > 0 and rest.sum() > 0:
            acc += qs[x] * (1.0 - a) * _rrs_stage(res / z, rest / rest.sum(), k - 1)
    return acc


def acceptance_profile(p_at_q, qprobs, ks) -> tuple[np.ndarray, np.ndarray]:
    """For each K in ``ks``: the exact chance that a ``resispec`` node with K iid draws from q
    accepts one (K = 1: a chain's draw, ``sum min(p, q)``), and the expected number of
    distinct tokens among the K draws (the node's children).  ``p_at_q``: p at q's ids, in
    q's order; ``qprobs``: q on its support.  Depends on p and q only, not on any draw, so
    ``auto`` learns every K's acceptance at each drafted node, whatever K the step drew."""
    return _acceptance_profile(frozen(p_at_q, np.float64), frozen(qprobs, np.float64), frozen(ks, np.int64))


def draw_chances(method: str, p_at_q, qids, qprobs, draws) -> np.ndarray:
    """For the K draws of an iid node as drawn: the chance that the verifier reaches draw i
    and accepts it (what ``verify`` does with uniforms not yet drawn).  ``p_at_q``:
    the target on q's ids (less a lookup candidate, rescaled, when the node has one)."""
    code = _method_code(method)
    if code == _RRS:
        raise ValueError("rrs draws are not iid")
    return _draw_chances(code, frozen(p_at_q, np.float64), frozen(qids, np.int64), frozen(qprobs, np.float64),
                         frozen(draws, np.int64))


def optimal_acceptance(p, q, k: int) -> float:
    """Set-level optimum ``alpha* = min_H p(H) + 1 - q(H)^k`` for k iid draws (one sort)."""
    p, qids, qp = _support(p, q)
    rs, qc, pc = _sorted_support(p, qids, qp)
    return float(_optimal(rs, qc, pc, int(k)))


def expected_distinct(q, k: int) -> float:
    """Expected number of distinct tokens among k iid draws from q (the child nodes)."""
    q = np.asarray(q, np.float64)
    q = q[q > 0]
    return float(np.sum(1.0 - (1.0 - q) ** k))
