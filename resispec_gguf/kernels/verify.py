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

**Deterministic candidates.**  A node may also carry m distinct candidates ``x_1..x_m`` that
were not drawn from q (context lookup, memory, the grammar's forced token).  They are checked
first, in order: candidate j, reached when the earlier ones were rejected, is accepted when
``u[j] (1 - p(x_1) - ... - p(x_{j-1})) < p(x_j)``.  If none is, run the chosen method,
unchanged, with the remaining uniforms and the draws against the residual target
``p'(y) = p(y) / (1 - p(X))`` for ``y`` outside ``X = {x_1..x_m}``, ``p'(X) = 0``; with no draws
(K = 0) that is one sample from ``p'``.  Accepted index j < m means candidate j, ``m + i``
draw i, -1 the fallback.  Exactness: stage j is reached with chance ``1 - p(x_1..x_{j-1})``
(the product of the rejections telescopes), so ``P(out = x_j) = p(x_j)`` from its own stage,
and p' gives X nothing; for ``y`` outside X, ``P(out = y) = (1 - p(X)) p'(y) = p(y)``, since
every method is exact for its own target.  The method's exactness conditions still hold after
the rejections: the draws are iid (or without replacement) from q and were made independently
of the candidates' uniforms, and the rest are fresh, so conditioning on the rejections changes
neither their law nor q.  ``p(x_j)`` equal to all the mass left always accepts, 0 always
rejects.  A repeated candidate (``x_j = x_i``, i < j) is skipped, its uniform unread: it is
reached only once ``x_i`` was rejected, and p' then gives it 0, so skipping it is the rule
(checking it with ``p(x_j)`` again would emit it too often: candidates (0, 0) with
``p = (.3, .7)`` would give 0 with chance .3 + .7 (.3 / .7) = .6).  The argument needs X
fixed before the node's draws (from the context alone): a candidate chosen from the draws
changes ``p'`` with them, and the average over draws is no longer p (with
``p = (.5, .3, .2)``, ``q = (.6, .3, .1)``, chain and "x0 = the draw" emit ``(.4, .3, .3)``).
The kernels never copy p for this: ``p'`` is read as ``p`` scaled by
``1 / (1 - p(X))`` with X masked out (``stages._target_at``), and X joins the support list
(with ``q = 0`` where the draft lacks a candidate) so the fallback excludes it.

The rules' shared schedule (method codes, the support sorted by r, ``M(t)``, ``lo_i``, ``P_i``
and ``c``) lives in ``stages``; the exact acceptance figures built on it (``schedule``,
``expected_acceptance``, ``optimal_acceptance``, ``acceptance_profile``, ``draw_chances``,
``expected_distinct``) in ``acceptance``, re-exported here for the callers that import them
from this module.

Pure NumPy/Numba, no randomness of its own (uniforms come in): may import ``config``,
``errors``, ``paths``, ``progress`` and other kernel modules; never a model, the decoding
loop, an assistant feature or a surface, and never llama_cpp.
"""

from __future__ import annotations

import operator

import numpy as np
from numba import njit

from .acceptance import (  # noqa: F401  (re-exported: callers import them from here)
    acceptance_profile,
    draw_chances,
    expected_acceptance,
    expected_distinct,
    optimal_acceptance,
    schedule,
)
from .arrays import frozen
from .stages import (  # noqa: F401  (_RESISPEC, _SPECINFER: read as verify._* by scripts/bench_kernels.py)
    _CHAIN,
    _CODE,
    _RESISPEC,
    _RRS,
    _SPECINFER,
    _check_dist,
    _index_of,
    _method_code,
    _schedule,
    _sorted_support,
    _sorted_support_without,
    _stage_accept,
    _target_at,
)

__all__ = [
    "verify",
    "verify_checked",
    "verify_greedy",
    "schedule",
    "expected_acceptance",
    "optimal_acceptance",
    "expected_distinct",
]

_NO_IDS = frozen(np.empty(0, np.int64), np.int64)  # the q of a node without draws
_NO_PROBS = frozen(np.empty(0, np.float64), np.float64)


# --------------------------------------------------------------------------- kernels


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
def _sample_target(p, xs, u):
    """Inverse-CDF draw from p' (p without the tokens xs); -1 when p' has no mass."""
    ids = np.sort(xs)
    return _sample_residual(p, ids, np.zeros(ids.shape[0], np.float64), u)


@njit(cache=True)
def _fallback_iid(p, qids, qp, c, u, xs, s0):
    # Draw from norm(max(0, p' - c q)).  _sample_residual reads p itself outside qids, so the
    # values on qids are passed divided by s0 (a common scale does not change the law);
    # the removed tokens xs must therefore be among qids (with q = 0 if the draft lacks them).
    order = np.argsort(qids)
    n = qids.shape[0]
    sids = np.empty(n, np.int64)
    sres = np.empty(n, np.float64)
    for j in range(n):
        x = qids[order[j]]
        sids[j] = x
        v = _target_at(p, xs, s0, x) - c * qp[order[j]]
        sres[j] = v / s0 if v > 0.0 else 0.0
    tok = _sample_residual(p, sids, sres, u)
    if tok < 0:  # the residual is empty: reached only through round-off
        tok = _sample_target(p, xs, u)
    return tok


@njit(cache=True)
def _verify_iid(method, p, qids, qp, draws, u, xs, s0):
    k = draws.shape[0]
    rs, qc, pc = _sorted_support_without(p, qids, qp, xs, s0)
    lo, reach, c = _schedule(method, rs, qc, pc, k)
    for i in range(k):
        x = draws[i]
        j = _index_of(qids, x)
        if j < 0 or not qp[j] > 0.0:
            continue  # q cannot produce x: a probability-zero event, never accepted
        if u[i] < _stage_accept(_target_at(p, xs, s0, x) / qp[j] - lo[i], reach[i]):
            return x, i
    return _fallback_iid(p, qids, qp, c, u[k], xs, s0), -1


@njit(cache=True)
def _verify_rrs(p, qids, qp, draws, u, xs, s0):
    k = draws.shape[0]
    n = qids.shape[0]
    order = np.argsort(qids)
    sids = qids[order].copy()
    qs = qp[order].copy()
    ps = np.empty(n, np.float64)
    p_in = 0.0
    for j in range(n):
        ps[j] = _target_at(p, xs, s0, sids[j])
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
            for j in range(xs.shape[0]):
                p_total -= p[xs[j]]
            p_out = p_total * s0 - p_in
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
        tok = _sample_target(p, xs, u[k])
    return tok, -1


@njit(cache=True)
def _verify_target(method, p, qids, qp, draws, u, xs, s0):
    """Verify draws against p' (see _target_at); the removed tokens xs must be among qids."""
    if method == _RRS:
        return _verify_rrs(p, qids, qp, draws, u, xs, s0)
    return _verify_iid(method, p, qids, qp, draws, u, xs, s0)


@njit(cache=True)
def _verify(method, p, qids, qp, draws, u):
    # qids, qp: [n]; draws: [K]; u: [K + 1]
    return _verify_target(method, p, qids, qp, draws, u, np.empty(0, np.int64), 1.0)


@njit(cache=True)
def _verify_with_candidates(method, p, xs, qids, qp, draws, u):
    """Deterministic candidates ``xs`` (m >= 1) checked in order, then the method's draws
    against the target without them.  Candidate j, reached when the ones before it were
    rejected, is accepted when ``u[j] * rest < p(xs[j])``, ``rest = 1 - p(xs[:j])``: the chance
    ``p'(xs[j])`` of the target with the earlier candidates removed.  A candidate equal to an
    earlier one is skipped (its uniform goes unread): once that one was rejected, p' gives
    it 0, so checking it again is the rule itself, where counting its mass twice would
    over-weight it.  Accepted index j means candidate j, ``m + i`` draw i, -1 the fallback."""
    # qids, qp: [n] (n may be 0 when K = 0); draws: [K]; u: [m + K + 1]
    m = xs.shape[0]
    rest = 1.0
    repeats = 0
    last = m - 1  # the last candidate checked (not a repeat)
    for j in range(m):
        x = xs[j]
        again = False
        for i in range(j):  # a scan: a node holds a few candidates
            if xs[i] == x:
                again = True
                break
        if again:
            repeats += 1
            continue
        last = j
        px = p[x]
        if u[j] * rest < px or not px < rest:
            return x, j
        rest -= px
    if repeats:  # the draws' stages and the fallback see each removed token once
        distinct = np.empty(m - repeats, np.int64)
        t = 0
        for j in range(m):
            if _index_of(distinct[:t], xs[j]) < 0:
                distinct[t] = xs[j]
                t += 1
        xs = distinct
    s0 = 1.0 / rest
    n = qids.shape[0]
    c = xs.shape[0]
    missing = 0
    for j in range(c):
        if _index_of(qids, xs[j]) < 0:
            missing += 1
    if missing:  # p'(x) = 0 on xs must be visible to the fallback: xs join the support with q = 0
        ids = np.empty(n + missing, np.int64)
        probs = np.zeros(n + missing, np.float64)
        ids[:n] = qids
        probs[:n] = qp
        t = n
        for j in range(c):
            if _index_of(qids, xs[j]) < 0:
                ids[t] = xs[j]
                t += 1
        tok, idx = _verify_target(method, p, ids, probs, draws, u[m:], xs, s0)
    else:
        tok, idx = _verify_target(method, p, qids, qp, draws, u[m:], xs, s0)
    if tok < 0:  # p' has no mass: p lies on xs up to round-off
        return xs[c - 1], last
    return tok, idx + m if idx >= 0 else -1


@njit(cache=True)
def _verify_sparse(method, pids, pp, xs, qids, qp, draws, u):
    """``_verify`` (no candidates) or ``_verify_with_candidates`` for a sparse target ``(pids,
    pp)``, run on the node's own small vocabulary: the ascending union of supp p, the q ids,
    the draws and the candidates.  Every token outside it has p = q = 0, is never a
    candidate and carries no mass in any residual, and renumbering the rest in ascending
    order keeps every inverse-CDF walk in the same token order: the kernels see the same
    distributions on fewer ids, and the output (token, index) is the one a dense p would
    give, up to the round-off of summing in another grouping."""
    # pids, pp: [m]; qids, qp: [n]; draws: [K]; xs: [c]; u: [c + K + 1]
    m, n, k, c = pids.shape[0], qids.shape[0], draws.shape[0], xs.shape[0]
    every = np.empty(m + n + k + c, np.int64)
    every[:m] = pids
    every[m:m + n] = qids
    every[m + n:m + n + k] = draws
    every[m + n + k:] = xs
    space = np.unique(every)  # sorted
    p = np.zeros(space.shape[0], np.float64)
    for j in range(m):
        p[np.searchsorted(space, pids[j])] = pp[j]
    qc = np.searchsorted(space, qids)
    dc = np.searchsorted(space, draws)
    if c:
        tok, idx = _verify_with_candidates(method, p, np.searchsorted(space, xs), qc, qp, dc, u)
    else:
        tok, idx = _verify(method, p, qc, qp, dc, u)
    return space[tok], idx


# --------------------------------------------------------------------------- wrappers


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


def _check_draws(code: int, in_support, draws, u, n_fixed: int = 0):
    # n_fixed: deterministic candidates come first; they take one uniform each and the draws
    # may then be empty (a lookup-only node)
    draws = np.ascontiguousarray(draws, dtype=np.int64)
    u = np.ascontiguousarray(u, dtype=np.float64)
    extra = 1 + n_fixed
    if draws.ndim != 1 or (draws.shape[0] == 0 and not n_fixed):
        raise ValueError(f"draws must be a {'' if n_fixed else 'non-empty '}1-D array of token ids")
    k = draws.shape[0]
    if u.shape != (k + extra,):
        raise ValueError(f"u must have len(draws) + {extra} = {k + extra} entries, got {u.shape}")
    if (u < 0).any() or (u >= 1).any():
        raise ValueError("u must lie in [0, 1)")
    if code == _CHAIN and (k > 1 if n_fixed else k != 1):
        raise ValueError("chain verifies at most one draw after the candidates" if n_fixed else "chain verifies exactly one draw")
    if (draws < 0).any() or not in_support(draws).all():
        raise ValueError("every draw must have q > 0")
    if code == _RRS and np.unique(draws).shape[0] != draws.shape[0]:
        raise ValueError("rrs draws are without replacement and must be distinct")
    return draws, u


def _fixed(x0) -> np.ndarray:
    """The engine's deterministic candidates as the kernels take them (``frozen``): an int
    (-1: none) or a sequence of token ids, in checking order."""
    if isinstance(x0, (int, np.integer)):
        return _NO_IDS if x0 < 0 else frozen([x0], np.int64)
    return frozen(x0, np.int64)


def verify(method: str, p, q, draws, u, x0=-1) -> tuple[int, int]:
    """Verify one node's candidates: the engine's hot path, without input validation.
    Returns ``(token, accepted_index)``.

    ``p``: the target, dense ``[V]`` (``sampling.probs_dense``) or sparse ``(pids [m],
    pprobs [m])`` (``sampling.probs_sparse``, m >= 1: then no work grows with V; same law
    and, up to round-off, the same result as the dense call with the same uniforms).  ``q``:
    ``(qids [n], qprobs [n])``, the law the draws came from (``sampling.probs_sparse``;
    entries with q = 0 are fine), or None when there are no draws.  ``draws``: ``[K]`` int64
    candidates in draw order (iid from q; without replacement for ``rrs``; K <= 1 for
    ``chain``), K >= 0.  ``x0``: the node's deterministic candidates (context lookup, memory,
    the grammar), checked in order before the draws: a token id (-1 for none) or a sequence
    of m ids, distinct as the engine builds them (a repeat is skipped, its uniform unread:
    once the first was rejected it has chance 0, so the law stays p).  ``u``: uniforms in
    [0, 1), ``[m + K + 1]``: ``u[j]`` decides candidate j, ``u[m + i]`` draw i, ``u[m + K]``
    drives the fallback.
    ``accepted_index``: j for candidate j, ``m + i`` for draw i, -1 for the fallback sample.
    Deterministic in its inputs; the token has exactly p's law when the draws and uniforms
    have the stated laws and the candidates were fixed before the draws.  Anything not
    built as stated must go through ``verify_checked``.
    """
    code = _CODE[method]
    qids, qprobs = (_NO_IDS, _NO_PROBS) if q is None or q[0] is None else q
    qids, qprobs = frozen(qids, np.int64), frozen(qprobs, np.float64)
    draws, u, xs = frozen(draws, np.int64), frozen(u, np.float64), _fixed(x0)
    if isinstance(p, tuple):
        tok, idx = _verify_sparse(code, frozen(p[0], np.int64), frozen(p[1], np.float64), xs, qids, qprobs, draws, u)
        return int(tok), int(idx)
    p = frozen(p, np.float64)
    if xs.shape[0]:
        tok, idx = _verify_with_candidates(code, p, xs, qids, qprobs, draws, u)
    else:
        tok, idx = _verify(code, p, qids, qprobs, draws, u)
    return int(tok), int(idx)


def verify_checked(method: str, p, q, draws, u, x0=None) -> tuple[int, int]:
    """``verify`` with every input validated (a ``ValueError`` saying what is wrong), for
    callers outside the engine.  ``p``: a dense ``[V]`` probability vector.  ``q``: a dense
    ``[V]`` vector, ``(qids, qprobs)``, or None (or empty) when there are no draws.  ``x0``:
    None for no deterministic candidate, else a token id or a sequence of distinct ids."""
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
    if x0 is None:
        xs = _NO_IDS
    elif isinstance(x0, (int, np.integer)) or np.ndim(x0) == 0:
        xs = np.array([_check_token("x0", x0, p.shape[0])], np.int64)
    else:
        xs = np.array([_check_token("x0", x, p.shape[0]) for x in x0], np.int64)
        if xs.shape[0] == 0 or np.unique(xs).shape[0] != xs.shape[0]:
            raise ValueError("x0 must hold distinct token ids (at least one)")
    draws, u = _check_draws(code, lambda d: np.isin(d, qids), draws, u, n_fixed=xs.shape[0])
    if xs.shape[0]:
        tok, idx = _verify_with_candidates(code, p, xs, qids, qprobs, draws, u)
    else:
        tok, idx = _verify(code, p, qids, qprobs, draws, u)
    return int(tok), int(idx)


def verify_greedy(target_argmax: int, draws) -> tuple[int, int]:
    """Temperature 0: accept the candidate equal to the target's argmax, else emit it."""
    hits = np.flatnonzero(np.asarray(draws) == target_argmax)
    return int(target_argmax), int(hits[0]) if hits.size else -1
