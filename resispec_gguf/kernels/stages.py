"""The stage schedule of the iid verification rules, shared by the verifier and the figures.

For ``chain``, ``specinfer`` and ``resispec`` stage i accepts its draw x with chance
``clip((r(x) - lo_i) / P_i, 0, 1)``, ``r = p / q`` (derived in ``verify``'s docstring and in
``docs/verification.md``).  Here: the method codes; the target read with a lookup candidate
removed (``_target_at``: a node's deterministic candidates); q's support sorted by r with prefix sums of q and p, on which
``M(t) = sum_x min(p(x), t q(x))`` costs one binary search (``_mass_min``); the thresholds,
reach probabilities and fallback constant (``_schedule``, by bisection for ``resispec``);
a stage's accept chance (``_stage_accept``); and the two input checks every validating
wrapper shares (``_method_code``, ``_check_dist``).  ``verify`` runs the rules on these,
``acceptance`` computes exact acceptance figures from them.

Plain NumPy/Numba, no randomness: may import ``config`` (method names), ``errors``,
``paths``, ``progress`` and other kernel modules, but not ``verify`` or ``acceptance``
(both import this one); never a model, the decoding loop, an assistant feature or a
surface, and never llama_cpp.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..config import SPEC_METHODS

_CODE = {m: i for i, m in enumerate(SPEC_METHODS)}
_CHAIN, _SPECINFER, _RRS, _RESISPEC = (_CODE[m] for m in ("chain", "specinfer", "rrs", "resispec"))
_BISECTIONS = 64


@njit(cache=True)
def _target_at(p, xs, s0, x):
    """p'(x), the target with the tokens ``xs`` removed and the rest scaled by
    s0 = 1 / (1 - p(xs)).

    An empty ``xs`` (and s0 = 1) means no removal: p'(x) = p(x) exactly.  ``xs`` holds a
    node's few deterministic candidates, so a scan beats a hash.
    """
    for j in range(xs.shape[0]):
        if x == xs[j]:
            return 0.0
    return p[x] * s0


@njit(cache=True)
def _sorted_support(p, qids, qp):
    # p: [V] float64 dense; qids, qp: [n] -> r sorted ascending, prefix sums [n+1] of q and p.
    return _sorted_by_ratio(p[qids], qp)


@njit(cache=True)
def _sorted_support_without(p, qids, qp, xs, s0):
    """``_sorted_support`` of p' (``_target_at``: the tokens ``xs`` removed, the rest scaled by s0)."""
    n = qids.shape[0]
    pv = np.empty(n, np.float64)
    for j in range(n):
        pv[j] = _target_at(p, xs, s0, qids[j])
    return _sorted_by_ratio(pv, qp)


@njit(cache=True)
def _sorted_by_ratio(pv, qp):
    # pv, qp: p and q on supp q, aligned -> r sorted ascending, prefix sums [n+1] of q and p.
    # An entry with q = 0 gets r = +inf: it sorts last and adds nothing to M(t) (t q = 0).
    n = qp.shape[0]
    r = np.empty(n, np.float64)
    for j in range(n):
        r[j] = pv[j] / qp[j] if qp[j] > 0.0 else np.inf
    order = np.argsort(r)
    rs = r[order]
    qc = np.zeros(n + 1, np.float64)
    pc = np.zeros(n + 1, np.float64)
    for j in range(n):
        qc[j + 1] = qc[j] + qp[order[j]]
        pc[j + 1] = pc[j] + pv[order[j]]
    return rs, qc, pc


@njit(cache=True)
def _mass_min(rs, qc, pc, t):
    """M(t) = sum over supp q of min(p, t q); two prefix sums and one binary search."""
    j = np.searchsorted(rs, t, side="right")
    return pc[j] + t * (qc[-1] - qc[j])


@njit(cache=True)
def _shoot(rs, qc, pc, f1, k, lo, reach):
    # Run the ResiSpec recursion forward from F_1 = f1; fills lo[i] = F_{i+1}, reach[i] = P_i.
    f = f1
    pr = 1.0
    for i in range(k):
        fn = f - pr
        lo[i] = fn
        reach[i] = pr
        pr = pr - (_mass_min(rs, qc, pc, f) - _mass_min(rs, qc, pc, fn))
        if pr < 0.0:
            pr = 0.0
        f = fn
    return f  # F_{K+1}


@njit(cache=True)
def _schedule(method, rs, qc, pc, k):
    """Stage thresholds lo [K], reach probabilities P [K] and the fallback constant c."""
    lo = np.zeros(k, np.float64)
    reach = np.zeros(k, np.float64)
    if method == _RESISPEC:
        a = 1.0
        b = float(k)
        for _ in range(_BISECTIONS):
            mid = 0.5 * (a + b)
            if mid <= a or mid >= b:
                break
            if _shoot(rs, qc, pc, mid, k, lo, reach) > 0.0:
                b = mid
            else:
                a = mid
        _shoot(rs, qc, pc, b, k, lo, reach)
        return lo, reach, b
    # specinfer (chain = K 1): slices bottom-up
    s = 0.0
    pr = 1.0
    for i in range(k):
        lo[i] = s
        reach[i] = pr
        s += pr
        pr = 1.0 - _mass_min(rs, qc, pc, s)
        if pr < 0.0:
            pr = 0.0
    return lo, reach, s


@njit(cache=True)
def _index_of(ids, x):
    for j in range(ids.shape[0]):
        if ids[j] == x:
            return j
    return -1


@njit(cache=True)
def _stage_accept(excess, reach):
    """A stage's chance to accept its draw x: ``clip((r(x) - lo_i) / P_i, 0, 1)`` from
    ``excess = r(x) - lo_i`` (a stage unreachable in exact arithmetic: 1 where r > lo_i)."""
    if reach > 0.0:
        return min(1.0, max(0.0, excess / reach))
    return 1.0 if excess > 0.0 else 0.0

# --------------------------------------------------------------------------- input checks


def _method_code(method: str) -> int:
    try:
        return _CODE[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(SPEC_METHODS)}") from None


def _check_dist(name: str, a, size: int | None = None) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    if a.ndim != 1 or a.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {a.shape}")
    if size is not None and a.shape[0] != size:
        raise ValueError(f"{name} has {a.shape[0]} entries, expected {size}")
    s = a.sum()  # not finite iff some entry is not
    if not np.isfinite(s) or a.min() < 0:
        raise ValueError(f"{name} must be finite and non-negative")
    if abs(s - 1.0) > 1e-6:
        raise ValueError(f"{name} must sum to 1 (sums to {s:.9g})")
    if s != 1.0:  # the kernels are exact for a normalised distribution: make it one
        a = a / s
    return a
