"""Exact multi-candidate verification at one tree node.

The rules below, and why each keeps the output law exactly p, are derived step by step in
``docs/verification.md``.

Terms, used the same way everywhere in the project:

* ``p`` — the target's next-token distribution after the sampling transforms, dense ``[V]``.
* ``q`` — the distribution the node's candidates were actually drawn from (draft, after its
  transforms and support cap).  ``r(x) = p(x) / q(x)`` on ``supp q``.
* *draws* — the K candidates in draw order; *stage* i verifies draw i; *accepted* — the draw
  that stage took; *fallback* — the sample from the residual when no stage accepts.

For the iid methods (``chain``, ``specinfer``, ``resispec``) every stage rule has the form
``a_i(x) = clip((r(x) - lo_i) / P_i, 0, 1)`` where ``P_i`` is the probability of reaching
stage i, and the fallback is ``norm(max(0, p - c q))``.  With ``M(t) = sum_x min(p(x), t q(x))``:

* specinfer: ``lo_i = S_{i-1}`` with ``S_i = P_1 + ... + P_i`` and ``P_{i+1} = 1 - M(S_i)``;
  ``c = S_K`` (chain is the case K = 1);
* resispec: ``lo_i = F_{i+1}`` with ``F_i = P_i + ... + P_K``, ``F_{K+1} = 0``, solved by
  shooting on ``F_1`` (bisection); ``c = F_1``.

Stage i thus takes the slice ``[lo_i q, (lo_i + P_i) q]`` of each token's target mass: specinfer
fills slices bottom-up (greedy), resispec top-down (later stages keep the low slices, which is
where repeated draws land).  ``M`` is evaluated in O(log n) from the support sorted by ``r``
with prefix sums of ``q`` and ``p``.

``rrs`` draws without replacement and keeps an explicit residual on ``supp q``.

The sparse q may list tokens with ``q = 0`` (an underflowed probability).  They are given
``r = +inf``: they add nothing to ``M`` (``t q = 0``), their whole target mass stays in the
fallback, and a draw q cannot produce is never accepted (a probability-zero event, so the
choice does not touch the output law).  K = 0 is allowed by the kernels: the node then emits
a sample from p.

**Deterministic candidate.**  A node may also carry one candidate ``x0`` that was not drawn
from q (a context-lookup guess).  It is checked first: accept it when ``u[0] < p(x0)``.
Otherwise run the chosen method, unchanged, with ``u[1:]`` and the draws against the
residual target ``p'(y) = p(y) / (1 - p(x0))`` for ``y != x0``, ``p'(x0) = 0``; with no draws
(K = 0) that is one sample from ``p'``.  Accepted index 0 means x0, ``1 + i`` draw i, -1 the
fallback.  Exactness: ``P(out = x0) = p(x0) + (1 - p(x0)) P'(out = x0) = p(x0)``, since every
method is exact for its own target and ``p'(x0) = 0``; for ``y != x0``,
``P(out = y) = (1 - p(x0)) p'(y) = p(y)``.  The method's exactness conditions still hold after
a rejection of x0: the draws are iid (or without replacement) from q and were made
independently of ``u[0]``, and ``u[1:]`` are fresh uniforms, so conditioning on the rejection
changes neither their law nor q.  ``p(x0) = 1`` always accepts, ``p(x0) = 0`` always rejects.
The argument needs x0 fixed before the node's draws (from the context alone): an x0 chosen
from the draws changes ``p'`` with them, and the average over draws is no longer p (with
``p = (.5, .3, .2)``, ``q = (.6, .3, .1)``, chain and "x0 = the draw" emit ``(.4, .3, .3)``).
The kernels never copy p for this: ``p'`` is read as ``p`` scaled by ``1 / (1 - p(x0))`` with x0
masked out, and x0 joins the support list (with ``q = 0`` when the draft lacks it) so the
fallback excludes it.

This module is pure NumPy/Numba: no model, no randomness of its own (uniforms come in), no
llama_cpp.
"""

from __future__ import annotations

import operator

import numpy as np
from numba import njit

from ..config import SPEC_METHODS

__all__ = [
    "verify",
    "verify_checked",
    "verify_greedy",
    "schedule",
    "expected_acceptance",
    "optimal_acceptance",
    "expected_distinct",
]

_CODE = {m: i for i, m in enumerate(SPEC_METHODS)}
_CHAIN, _SPECINFER, _RRS, _RESISPEC = (_CODE[m] for m in ("chain", "specinfer", "rrs", "resispec"))
_BISECTIONS = 64
_NO_IDS = np.empty(0, np.int64)  # the q of a node without draws
_NO_PROBS = np.empty(0, np.float64)


# --------------------------------------------------------------------------- kernels


@njit(cache=True)
def _target_at(p, x0, s0, x):
    """p'(x), the target with token x0 removed and the rest scaled by s0 = 1 / (1 - p(x0)).

    x0 < 0 (and s0 = 1) means no removal: p'(x) = p(x) exactly.
    """
    if x == x0:
        return 0.0
    return p[x] * s0


@njit(cache=True)
def _sorted_support(p, qids, qp, x0=-1, s0=1.0):
    # p: [V] float64 dense; qids, qp: [n] -> r sorted ascending, prefix sums [n+1] of q and p'.
    n = qids.shape[0]
    pv = np.empty(n, np.float64)
    for j in range(n):
        pv[j] = _target_at(p, x0, s0, qids[j])
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


_BLOCK = 2048


@njit(cache=True, fastmath=True)
def _block_sums(p, block):
    """Sums of p over consecutive blocks; reassociation lets the compiler vectorise."""
    nb = (p.shape[0] + block - 1) // block
    out = np.zeros(nb, np.float64)
    for b in range(nb):
        s = 0.0
        for i in range(b * block, min((b + 1) * block, p.shape[0])):
            s += p[i]
        out[b] = s
    return out


@njit(cache=True)
def _sample_residual(p, sids, sres, u):
    """Inverse-CDF draw from the dense vector equal to p outside sids and sres on sids.

    sids: [n] ascending token ids; sres: [n] their residual mass.  One vectorised pass of
    block sums picks the block, a scalar walk inside it picks the token; returns -1 when the
    vector is all zero.
    """
    V = p.shape[0]
    n = sids.shape[0]
    sums = _block_sums(p, _BLOCK)
    for j in range(n):
        sums[sids[j] // _BLOCK] += sres[j] - p[sids[j]]
    tot = 0.0
    for b in range(sums.shape[0]):
        if sums[b] > 0.0:
            tot += sums[b]
    if not tot > 0.0:
        return -1
    t = u * tot
    c = 0.0
    last = -1
    j = 0
    for b in range(sums.shape[0]):
        if not sums[b] > 0.0:
            continue
        if c + sums[b] <= t and b < sums.shape[0] - 1:
            c += sums[b]
            continue
        while j < n and sids[j] < b * _BLOCK:
            j += 1
        for i in range(b * _BLOCK, min((b + 1) * _BLOCK, V)):
            if j < n and sids[j] == i:
                v = sres[j]
                j += 1
            else:
                v = p[i]
            if v > 0.0:
                c += v
                last = i
                if c > t:
                    return i
        # round-off left t just past this block's exact sum: take its last token
        if last >= 0:
            return last
    return last


@njit(cache=True)
def _sample_target(p, x0, u):
    """Inverse-CDF draw from p' (p without x0 when x0 >= 0); -1 when p' has no mass."""
    ids = np.full(1 if x0 >= 0 else 0, x0, np.int64)
    return _sample_residual(p, ids, np.zeros(ids.shape[0], np.float64), u)


@njit(cache=True)
def _fallback_iid(p, qids, qp, c, u, x0=-1, s0=1.0):
    # Draw from norm(max(0, p' - c q)).  _sample_residual reads p itself outside qids, so the
    # values on qids are passed divided by s0 (a common scale does not change the law);
    # x0, when removed, must therefore be among qids (with q = 0 if the draft lacks it).
    order = np.argsort(qids)
    n = qids.shape[0]
    sids = np.empty(n, np.int64)
    sres = np.empty(n, np.float64)
    for j in range(n):
        x = qids[order[j]]
        sids[j] = x
        v = _target_at(p, x0, s0, x) - c * qp[order[j]]
        sres[j] = v / s0 if v > 0.0 else 0.0
    tok = _sample_residual(p, sids, sres, u)
    if tok < 0:  # the residual is empty: reached only through round-off
        tok = _sample_target(p, x0, u)
    return tok


@njit(cache=True)
def _stage_accept(excess, reach):
    """A stage's chance to accept its draw x: ``clip((r(x) - lo_i) / P_i, 0, 1)`` from
    ``excess = r(x) - lo_i`` (a stage unreachable in exact arithmetic: 1 where r > lo_i)."""
    if reach > 0.0:
        return min(1.0, max(0.0, excess / reach))
    return 1.0 if excess > 0.0 else 0.0


@njit(cache=True)
def _verify_iid(method, p, qids, qp, draws, u, x0, s0):
    k = draws.shape[0]
    rs, qc, pc = _sorted_support(p, qids, qp, x0, s0)
    lo, reach, c = _schedule(method, rs, qc, pc, k)
    for i in range(k):
        x = draws[i]
        j = _index_of(qids, x)
        if j < 0 or not qp[j] > 0.0:
            continue  # q cannot produce x: a probability-zero event, never accepted
        if u[i] < _stage_accept(_target_at(p, x0, s0, x) / qp[j] - lo[i], reach[i]):
            return x, i
    return _fallback_iid(p, qids, qp, c, u[k], x0, s0), -1


@njit(cache=True)
def _verify_rrs(p, qids, qp, draws, u, x0, s0):
    k = draws.shape[0]
    n = qids.shape[0]
    order = np.argsort(qids)
    sids = qids[order].copy()
    qs = qp[order].copy()
    ps = np.empty(n, np.float64)
    p_in = 0.0
    for j in range(n):
        ps[j] = _target_at(p, x0, s0, sids[j])
        p_in += ps[j]
    p_out = 0.0  # mass of p' outside qids, scaled by `scale` below
    scale = 1.0
    for i in range(k):
        x = draws[i]
        jx = np.searchsorted(sids, x)
        if jx < n and sids[jx] == x and qs[jx] > 0.0:
            if u[i] < ps[jx] / qs[jx]:
                return x, i
        else:
            jx = -1  # q cannot produce x: a probability-zero event, never accepted
        if i == 0:  # the one O(V) pass, needed only once a draw is rejected
            p_total = _block_sums(p, _BLOCK).sum()
            if x0 >= 0:
                p_total = (p_total - p[x0]) * s0
            p_out = p_total - p_in
        # rejected: p_{i+1} = norm(max(0, p_i - q_i)), q_{i+1} = q_i without x, renormalised
        z = scale * p_out
        for j in range(n):
            v = ps[j] - qs[j]
            ps[j] = v if v > 0.0 else 0.0
            z += ps[j]
        if not z > 0.0:  # p_i == q_i: acceptance was certain; round-off only
            break
        for j in range(n):
            ps[j] /= z
        scale /= z
        if jx >= 0:
            qs[jx] = 0.0
        qsum = qs.sum()
        if qsum > 0.0:
            for j in range(n):
                qs[j] /= qsum
    # fallback from p_{K+1}: p' * scale = p * (s0 * scale) outside qids, ps on them
    ps_unscaled = ps / (scale * s0)
    tok = _sample_residual(p, sids, ps_unscaled, u[k])
    if tok < 0:
        tok = _sample_target(p, x0, u[k])
    return tok, -1


@njit(cache=True)
def _verify_target(method, p, qids, qp, draws, u, x0, s0):
    """Verify draws against p' (see _target_at); x0, if removed, must be among qids."""
    if method == _RRS:
        return _verify_rrs(p, qids, qp, draws, u, x0, s0)
    return _verify_iid(method, p, qids, qp, draws, u, x0, s0)


@njit(cache=True)
def _verify(method, p, qids, qp, draws, u):
    # qids, qp: [n]; draws: [K]; u: [K + 1]
    return _verify_target(method, p, qids, qp, draws, u, -1, 1.0)


@njit(cache=True)
def _verify_with_candidate(method, p, x0, qids, qp, draws, u):
    # qids, qp: [n] (n may be 0 when K = 0); draws: [K]; u: [K + 2]
    px0 = p[x0]
    if u[0] < px0 or not px0 < 1.0:
        return x0, 0
    s0 = 1.0 / (1.0 - px0)
    if _index_of(qids, x0) >= 0:
        tok, idx = _verify_target(method, p, qids, qp, draws, u[1:], x0, s0)
    else:  # p'(x0) = 0 must be visible to the fallback: add x0 to the support with q = 0
        n = qids.shape[0]
        ids = np.empty(n + 1, np.int64)
        probs = np.zeros(n + 1, np.float64)
        ids[:n] = qids
        probs[:n] = qp
        ids[n] = x0
        tok, idx = _verify_target(method, p, ids, probs, draws, u[1:], x0, s0)
    if tok < 0:  # p' has no mass: p is one-hot on x0 up to round-off
        return x0, 0
    return tok, idx + 1 if idx >= 0 else -1


@njit(cache=True)
def _verify_sparse(method, pids, pp, x0, qids, qp, draws, u):
    """``_verify`` (x0 < 0) or ``_verify_with_candidate`` for a sparse target ``(pids, pp)``,
    run on the node's own small vocabulary: the ascending union of supp p, the q ids, the
    draws and x0.  Every token outside it has p = q = 0, is never a candidate and carries
    no mass in any residual, and renumbering the rest in ascending order keeps every
    inverse-CDF walk in the same token order: the kernels see the same distributions on
    fewer ids, and the output (token, index) is the one a dense p would give, up to the
    round-off of summing in another grouping."""
    # pids, pp: [m]; qids, qp: [n]; draws: [K]; u: [K + 1], or [K + 2] with x0 >= 0
    m, n, k = pids.shape[0], qids.shape[0], draws.shape[0]
    every = np.empty(m + n + k + 1, np.int64)
    every[:m] = pids
    every[m:m + n] = qids
    every[m + n:m + n + k] = draws
    every[m + n + k] = pids[0] if x0 < 0 else x0
    space = np.unique(every)  # sorted
    p = np.zeros(space.shape[0], np.float64)
    for j in range(m):
        p[np.searchsorted(space, pids[j])] = pp[j]
    qc = np.searchsorted(space, qids)
    dc = np.searchsorted(space, draws)
    if x0 >= 0:
        tok, idx = _verify_with_candidate(method, p, np.searchsorted(space, x0), qc, qp, dc, u)
    else:
        tok, idx = _verify(method, p, qc, qp, dc, u)
    return space[tok], idx


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


def _check_token(name: str, x, size: int) -> int:
    try:
        x = operator.index(x)
    except TypeError:
        raise ValueError(f"{name} must be an integer token id, got {x!r}") from None
    if not 0 <= x < size:
        raise ValueError(f"{name} must be a token id in [0, {size}), got {x}")
    return x


def _check_sparse(p, qids, qprobs):
    qids = np.ascontiguousarray(qids, dtype=np.int64)
    qprobs = _check_dist("q", qprobs)
    if qids.shape != qprobs.shape:
        raise ValueError(f"q ids {qids.shape} and probabilities {qprobs.shape} differ in shape")
    if (qids < 0).any() or (qids >= p.shape[0]).any():
        raise ValueError("q ids out of the vocabulary range")
    keep = qprobs > 0
    if not keep.all():
        qids, qprobs = qids[keep], qprobs[keep]
    if np.unique(qids).shape[0] != qids.shape[0]:
        raise ValueError("q ids must be distinct")
    return qids, qprobs


def _check_draws(code: int, in_support, draws, u, with_candidate: bool = False):
    # with_candidate: a deterministic candidate comes first; it takes one more uniform and
    # the draws may be empty (a lookup-only node)
    draws = np.ascontiguousarray(draws, dtype=np.int64)
    u = np.ascontiguousarray(u, dtype=np.float64)
    extra = 2 if with_candidate else 1
    if draws.ndim != 1 or (draws.shape[0] == 0 and not with_candidate):
        raise ValueError(f"draws must be a {'' if with_candidate else 'non-empty '}1-D array of token ids")
    k = draws.shape[0]
    if u.shape != (k + extra,):
        raise ValueError(f"u must have len(draws) + {extra} = {k + extra} entries, got {u.shape}")
    if (u < 0).any() or (u >= 1).any():
        raise ValueError("u must lie in [0, 1)")
    if code == _CHAIN and (k > 1 if with_candidate else k != 1):
        raise ValueError("chain verifies at most one draw after the candidate" if with_candidate else "chain verifies exactly one draw")
    if (draws < 0).any() or not in_support(draws).all():
        raise ValueError("every draw must have q > 0")
    if code == _RRS and np.unique(draws).shape[0] != draws.shape[0]:
        raise ValueError("rrs draws are without replacement and must be distinct")
    return draws, u


def verify(method: str, p, q, draws, u, x0: int = -1) -> tuple[int, int]:
    """Verify one node's candidates: the engine's hot path, without input validation.
    Returns ``(token, accepted_index)``.

    ``p``: the target, dense ``[V]`` (``sampling.probs_dense``) or sparse ``(pids [m],
    pprobs [m])`` (``sampling.probs_sparse``, m >= 1: then no work grows with V; same law
    and, up to round-off, the same result as the dense call with the same uniforms).  ``q``:
    ``(qids [n], qprobs [n])``, the law the draws came from (``sampling.probs_sparse``;
    entries with q = 0 are fine), or None when there are no draws.  ``draws``: ``[K]`` int64
    candidates in draw order (iid from q; without replacement for ``rrs``; K <= 1 for
    ``chain``), K >= 0.  ``x0``: a deterministic candidate (e.g. from context lookup) checked
    before the draws, -1 for none.  ``u``: uniforms in [0, 1), ``[K+1]`` without x0 (``u[i]``
    decides stage i, ``u[K]`` drives the fallback) and ``[K+2]`` with it (``u[0]`` decides
    x0, ``u[1 + i]`` draw i).  ``accepted_index``: the accepted draw's index (counting x0 as
    0 when there is one), or -1 for the fallback sample.  Deterministic in its inputs; the
    token has exactly p's law when the draws and uniforms have the stated laws.  Anything
    not built as stated must go through ``verify_checked``.
    """
    code = _CODE[method]
    qids, qprobs = (_NO_IDS, _NO_PROBS) if q is None or q[0] is None else q
    if isinstance(p, tuple):
        tok, idx = _verify_sparse(code, p[0], p[1], int(x0), qids, qprobs, draws, u)
    elif x0 >= 0:
        tok, idx = _verify_with_candidate(code, p, x0, qids, qprobs, draws, u)
    else:
        tok, idx = _verify(code, p, qids, qprobs, draws, u)
    return int(tok), int(idx)


def verify_checked(method: str, p, q, draws, u, x0: int | None = None) -> tuple[int, int]:
    """``verify`` with every input validated (a ``ValueError`` saying what is wrong), for
    callers outside the engine.  ``p``: a dense ``[V]`` probability vector.  ``q``: a dense
    ``[V]`` vector, ``(qids, qprobs)``, or None (or empty) when there are no draws.  ``x0``:
    None for no deterministic candidate, else a token id."""
    code = _method_code(method)
    p = _check_dist("p", p)
    if q is None or (isinstance(q, tuple) and all(a is None or np.size(a) == 0 for a in q)):
        if np.size(draws) > 0:
            raise ValueError("draws need the q they were drawn from; q is empty")
        qids, qprobs = _NO_IDS, _NO_PROBS
    elif isinstance(q, tuple):
        qids, qprobs = _check_sparse(p, *q)
    else:
        qd = _check_dist("q", q, p.shape[0])
        qids = np.flatnonzero(qd)
        qprobs = qd[qids]
    draws, u = _check_draws(code, lambda d: np.isin(d, qids), draws, u, with_candidate=x0 is not None)
    if x0 is None:
        tok, idx = _verify(code, p, qids, qprobs, draws, u)
    else:
        x0 = _check_token("x0", x0, p.shape[0])
        tok, idx = _verify_with_candidate(code, p, x0, qids, qprobs, draws, u)
    return int(tok), int(idx)


def verify_greedy(target_argmax: int, draws) -> tuple[int, int]:
    """Temperature 0: accept the candidate equal to the target's argmax, else emit it."""
    hits = np.flatnonzero(np.asarray(draws) == target_argmax)
    return int(target_argmax), int(hits[0]) if hits.size else -1


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
    return _acceptance_profile(np.asarray(p_at_q, np.float64), np.asarray(qprobs, np.float64),
                               np.asarray(ks, np.int64))


def draw_chances(method: str, p_at_q, qids, qprobs, draws) -> np.ndarray:
    """For the K draws of an iid node as drawn: the chance that the verifier reaches draw i
    and accepts it (what ``verify_prepared`` does with uniforms not yet drawn).  ``p_at_q``:
    the target on q's ids (less a lookup candidate, rescaled, when the node has one)."""
    code = _method_code(method)
    if code == _RRS:
        raise ValueError("rrs draws are not iid")
    return _draw_chances(code, np.asarray(p_at_q, np.float64), np.asarray(qids, np.int64),
                         np.asarray(qprobs, np.float64), np.asarray(draws, np.int64))


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
