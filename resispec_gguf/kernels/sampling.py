"""Logits processing: one logits row to the distribution a token is sampled from.

Turns one float32 logits row into the distribution a token is sampled from (``probs_sparse``,
``probs_dense``) and reads the model's own log-probabilities (``token_logprob``).
Everything here works on plain arrays; it never touches a model, never draws random numbers
itself (the draws, in ``draws``, take uniforms from a seeded ``numpy.random.Generator``)
and never imports llama_cpp.

Transform order (identical for target and draft): temperature -> top-k -> top-p -> min-p,
then renormalise.  Temperature 0 means greedy: the distribution is one-hot on the argmax
(ties go to the lowest token id).  The draft may additionally cap its support to its top
``cap`` tokens; the capped, renormalised distribution is the one its candidates are drawn
from, so it is also the ``q`` the verifier must use.

Sparse distributions are ``(ids, probs)`` pairs: ``ids`` int64 token ids, ``probs`` float64,
both ``[n]``, sorted by probability descending (ties by id), summing to 1, every prob > 0.

The k largest logits of a row come from ``topk`` (one read of the row); draws from these
distributions are in ``draws``, token masks in ``masks``, and ``overlap`` / ``values_at`` in
``acceptance``: all re-exported here for the callers that import them from this module.

May import ``config``, ``errors``, ``paths``, ``progress`` and other kernel modules; never
a model, the decoding loop, an assistant feature or a surface.
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import njit

from .acceptance import overlap, values_at  # noqa: F401  (re-exported)
from .draws import (  # noqa: F401  (re-exported)
    sample_dense,
    sample_iid,
    sample_iid_q,
    sample_sparse,
    sample_without_replacement,
)
from .masks import bias_arrays, bias_logits, bitmask_from_ids, mask_allows, mask_logits  # noqa: F401  (re-exported)
from .topk import _BLOCK, _NO_CAND, _SCAN_K_MAX, _scan, _scan_top, _top_k_ids

__all__ = [
    "probs_sparse",
    "probs_dense",
    "sample_iid",
    "sample_iid_q",
    "sample_without_replacement",
    "sample_dense",
    "sample_sparse",
    "token_logprob",
]


# --------------------------------------------------------------------------- kernels


@njit(cache=True)
def _weight_sum(logits, ids, m, inv_t):
    # Softmax normaliser relative to the max logit m: over ids, or over every finite entry
    # when ids is empty.
    z = 0.0
    if ids.shape[0] > 0:
        for j in range(ids.shape[0]):
            z += math.exp((np.float64(logits[ids[j]]) - m) * inv_t)
        return z
    for i in range(logits.shape[0]):
        v = logits[i]
        if v > -np.inf:
            z += math.exp((np.float64(v) - m) * inv_t)
    return z


@njit(cache=True)
def _sparse_from_candidates(logits, ids, inv_t, top_p, min_p, z_all):
    # ids: [n] candidate ids sorted by logit descending (ties by id).  z_all: the softmax
    # normaliser of the whole distribution the candidates come from (<= 0: the candidates are
    # the whole distribution).
    n = ids.shape[0]
    m = np.float64(logits[ids[0]])
    w = np.empty(n, np.float64)
    z = 0.0
    for j in range(n):
        w[j] = math.exp((np.float64(logits[ids[j]]) - m) * inv_t)
        z += w[j]
    if z_all > 0.0:
        z = z_all
    keep = n
    if top_p < 1.0:
        target = top_p * z
        c = 0.0
        for j in range(n):
            c += w[j]
            if c >= target:
                keep = j + 1
                break
    if min_p > 0.0:
        thr = min_p * w[0]
        k2 = 0
        while k2 < keep and w[k2] >= thr:
            k2 += 1
        keep = max(k2, 1)
    z = 0.0
    for j in range(keep):
        z += w[j]
    probs = np.empty(keep, np.float64)
    for j in range(keep):
        probs[j] = w[j] / z
    # Probabilities that underflowed to 0 (a low temperature) are not support: a zero-weight
    # id would be a candidate the verifier has to divide by.  They form a tail (sorted
    # descending, probs[0] > 0).
    while keep > 1 and probs[keep - 1] == 0.0:
        keep -= 1
    return ids[:keep].copy(), probs[:keep].copy()


@njit(cache=True)
def _limited_ids(logits, k, kc, top_p, z_row, bv, inv_t, cand):
    # A count limit (kc < V): the ids of the kc largest logits, descending, and the normaliser
    # top-p must measure the nucleus on (-1.0: the kept candidates' own).  k: top-k's limit
    # (V when it does not limit), kc: min(k, cap); z_row, cand: as _probs_sparse's.
    V = logits.shape[0]
    z_all = -1.0
    if kc < k and top_p < 1.0:
        # The cap comes after top-p: the nucleus is measured on the uncapped (top-k)
        # distribution, so top-p needs that distribution's normaliser.
        if k < V:
            ids = _top_k_ids(logits, k, cand)
            z_all = _weight_sum(logits, ids, np.float64(bv), inv_t)
            ids = ids[:kc]
        else:
            ids = _top_k_ids(logits, kc, cand)
            z_all = z_row if z_row > 0.0 else _weight_sum(logits, ids[:0], np.float64(bv), inv_t)
    else:
        ids = _top_k_ids(logits, kc, cand)
    return ids, z_all


@njit(cache=True)
def _logit_floor(bv, floor_w, temperature):
    # A float32 at or below every logit whose weight exp((l - bv) / T) reaches floor_w (-inf
    # when floor_w is 0): a test on the logit alone that keeps every such entry, so that only
    # the entries past it need their weight computed.  The slack (1e-9, relative) dwarfs the
    # rounding of exp, log and the products (about 1e-16).
    if floor_w <= 0.0:
        return np.float32(-np.inf)
    y = math.log(floor_w)
    y -= 1e-9 * (1.0 + abs(y))
    lo = np.float64(bv) + y * temperature
    lo -= 1e-9 * (1.0 + abs(np.float64(bv)) + abs(y * temperature))
    lo32 = np.float32(lo)
    return np.nextafter(lo32, np.float32(-np.inf))  # the cast may have rounded up


@njit(cache=True)
def _gather(logits, s, e, bvf, inv_t, floor_w, cand, cv, n):
    # Entries s..e-1 whose weight reaches floor_w, appended to cand/cv at n: the new n.
    for i in range(s, e):
        v = logits[i]
        if v > -np.inf:
            wi = math.exp((np.float64(v) - bvf) * inv_t)
            if wi >= floor_w:
                cand[n] = i
                cv[n] = np.float64(v)
                n += 1
    return n


@njit(cache=True)
def _reaching(logits, bvf, inv_t, floor_w):
    # The entries whose weight exp((l - bvf) * inv_t) reaches floor_w, ascending: (ids, logits
    # as float64).  The blocks holding an entry at or above the floor's logit (_logit_floor)
    # first, by a vectorised test, then only their entries' weights (arrays sized by those
    # blocks: V-sized ones would cost their page faults).
    V = logits.shape[0]
    lo = _logit_floor(bvf, floor_w, 1.0 / inv_t)
    nb = V // _BLOCK
    hit = np.empty(nb, np.int64)
    n_hit = 0
    for b in range(nb):
        s = b * _BLOCK
        c = np.int32(0)
        for j in range(_BLOCK):  # an OR of int32s: LLVM vectorises it
            c |= np.int32(logits[s + j] >= lo)
        if c != 0:
            hit[n_hit] = s
            n_hit += 1
    size = n_hit * _BLOCK + V - nb * _BLOCK
    cand = np.empty(size, np.int64)
    cv = np.empty(size, np.float64)
    n = 0
    for h in range(n_hit):
        n = _gather(logits, hit[h], hit[h] + _BLOCK, bvf, inv_t, floor_w, cand, cv, n)
    n = _gather(logits, nb * _BLOCK, V, bvf, inv_t, floor_w, cand, cv, n)
    return cand[:n], cv[:n]


@njit(cache=True)
def _unlimited_ids(logits, bv, inv_t, top_p, min_p, z_row):
    # No count limit: the ids that can be in the nucleus and above min-p's floor, sorted
    # descending (ties: ascending id), and the row's normaliser (z_row when given; -1.0
    # without top-p, which alone needs it).
    # Tokens whose probability is below (1 - top_p) / V can never be in the nucleus
    # (everything at or below them weighs < 1 - top_p), nor above min_p's floor when it is
    # higher: only the rest needs sorting.  The floor is a floor on the logit too
    # (_logit_floor): a block of entries none of which reaches it is skipped after a
    # vectorised test, and only the others' weights are computed.
    V = logits.shape[0]
    bvf = np.float64(bv)
    z = -1.0
    floor_w = 0.0
    if top_p < 1.0 and z_row > 0.0:
        z = z_row
        floor_w = (1.0 - top_p) / V * z
    elif top_p < 1.0:
        z = 0.0
        for i in range(V):
            v = logits[i]
            if v > -np.inf:
                z += math.exp((np.float64(v) - bvf) * inv_t)
        floor_w = (1.0 - top_p) / V * z
    if min_p > floor_w:
        floor_w = min_p  # the argmax weighs 1, so min-p's floor is min_p itself
    cand, cv = _reaching(logits, bvf, inv_t, floor_w)
    n = cand.shape[0]
    if top_p < 1.0 and n > 2048:
        # The nucleus is usually far smaller than the candidates: find the k largest
        # (k = 1024, 4096, ...) by partition until they hold the nucleus mass with room
        # to spare, and sort only those (all ties of the k-th value included).
        target = top_p * z * (1.0 + 1e-9)
        k = 1024
        while k < n:
            thr = np.partition(cv, n - k)[n - k]
            mass = 0.0
            for j in range(n):
                if cv[j] >= thr:
                    mass += math.exp((cv[j] - bvf) * inv_t)
            if mass >= target:
                sel = cv >= thr
                cand = cand[sel]
                cv = cv[sel]
                break
            k *= 4
    order = np.argsort(-cv, kind="mergesort")  # stable: ties keep ascending id
    return cand[order], z


@njit(cache=True)
def _probs_sparse(logits, temperature, top_k, top_p, min_p, cap, z_row, best, cand):
    # logits: [V] float32 -> (ids [n] int64, probs [n] float64).  z_row: the whole row's
    # normaliser sum exp((l - max l) / T) when the caller has it (<= 0: not computed).
    # best: the argmax (first maximum), which NumPy finds with SIMD.  cand: the ranked ids of
    # the top top_k logits, or of the top cap when top_k does not limit (empty: the whole row;
    # see _candidates).
    V = logits.shape[0]
    bv = logits[best]
    if temperature <= 0.0 or not bv > -np.inf:
        ids = np.empty(1, np.int64)
        ids[0] = best
        return ids, np.ones(1, np.float64)
    inv_t = 1.0 / temperature
    k = V
    if top_k > 0 and top_k < k:
        k = top_k
    kc = k
    if cap > 0 and cap < kc:
        kc = cap
    if kc < V:
        ids, z_all = _limited_ids(logits, k, kc, top_p, z_row, bv, inv_t, cand)
    else:
        ids, z_all = _unlimited_ids(logits, bv, inv_t, top_p, min_p, z_row)
    return _sparse_from_candidates(logits, ids, inv_t, top_p, min_p, z_all)


@njit(cache=True)
def _probs_row(logits, temperature, top_k, top_p, min_p, cap):
    # probs_sparse's scan and distribution in one call, when no row normaliser is needed:
    # (status, ids, probs), status 1 for a NaN or +inf, 2 for no finite entry.
    V = logits.shape[0]
    limit = 0
    if temperature > 0.0:
        if 0 < top_k < V:
            limit = top_k
        elif 0 < cap < V:
            limit = cap
    kk = limit if 0 < limit <= _SCAN_K_MAX else 1
    bad, best, top = _scan_top(logits, kk)
    if bad:
        return 1, _NO_CAND, np.empty(0, np.float64)
    if not logits[best] > -np.inf:
        return 2, _NO_CAND, np.empty(0, np.float64)
    cand = top if kk == limit else _NO_CAND
    ids, probs = _probs_sparse(logits, temperature, top_k, top_p, min_p, cap, -1.0, best, cand)
    return 0, ids, probs


# --------------------------------------------------------------------------- wrappers


_F32 = np.dtype(np.float32)


def _row(logits) -> np.ndarray:
    """The row as a contiguous, read-only, non-empty 1-D float32 array (see ``_check_logits``);
    the backend's rows already are, and pass through at the cost of a few attribute reads."""
    if type(logits) is np.ndarray and logits.dtype is _F32 and logits.ndim == 1 and logits.shape[0] > 0:
        flags = logits.flags  # a new object at each access
        if not flags.writeable and flags.c_contiguous:
            return logits
    logits = np.asarray(logits, dtype=np.float32)  # not ascontiguousarray: it makes 0-D 1-D
    if logits.ndim != 1 or logits.shape[0] == 0:
        raise ValueError(f"logits must be a non-empty 1-D array, got shape {logits.shape}")
    logits = np.ascontiguousarray(logits)
    if logits.flags.writeable:
        logits = logits.view()  # the caller's array stays writable
        logits.flags.writeable = False
    return logits


def _check_logits(logits: np.ndarray, k: int = 0) -> tuple[np.ndarray, int, np.ndarray]:
    """The row as a contiguous, read-only float32 array, its argmax (first maximum) and the
    candidates of its k largest logits (``_scan``), in one read of the row.

    Read-only always: Numba compiles one version of a kernel per argument type, and a
    read-only array is another type.  The backend's rows are read-only views of llama.cpp's
    buffer; a writable row (a test's, a copy) would otherwise need a second compilation of
    every logits kernel, in the middle of a reply.
    """
    logits = _row(logits)
    best, cand = _scan(logits, k)
    if not np.isfinite(logits[best]):
        raise ValueError("logits have no finite entry")
    return logits, best, cand


_work = threading.local()  # per thread: a float64 row for _row_normaliser


def _row_normaliser(logits, temperature):
    """``sum exp((l - max l) / T)`` over the row with NumPy's SIMD exp (Numba's is scalar),
    in a float64 row kept per thread: a fresh one would cost a page fault every 4 KB."""
    V = logits.shape[0]
    buf = getattr(_work, "row", None)
    if buf is None or buf.shape[0] < V:
        buf = _work.row = np.empty(V, np.float64)
    x = buf[:V]
    np.subtract(logits, np.float64(logits.max()), out=x)
    x *= 1.0 / temperature
    np.exp(x, out=x)
    return float(x.sum())


def probs_sparse(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, cap=0):
    """Sampling distribution of one logits row as ``(ids, probs)`` (see module docstring).

    ``top_k``/``cap`` of 0 mean no limit.  Requires a 1-D logits row with at least one finite
    entry; returns at least one token.  ``ids`` is read-only on every path (one Numba type for
    the kernels it is handed to).
    """
    temperature, top_k, top_p, min_p, cap = float(temperature), int(top_k), float(top_p), float(min_p), int(cap)
    logits = _row(logits)
    V = logits.shape[0]
    if temperature > 0 and top_p < 1.0 and not 0 < top_k < V:
        # top-p is measured on the whole row (before the cap cuts it, if any; see
        # _probs_sparse): the kernel needs the row's normaliser, which NumPy's SIMD exp
        # computes faster
        logits, best, cand = _check_logits(logits, cap)
        z_row = _row_normaliser(logits, temperature)
        ids, probs = _probs_sparse(logits, temperature, top_k, top_p, min_p, cap, z_row, best, cand)
    else:
        status, ids, probs = _probs_row(logits, temperature, top_k, top_p, min_p, cap)
        if status:
            raise ValueError("logits contain NaN or +inf" if status == 1 else "logits have no finite entry")
    # One Numba type for every q's ids, whichever path built them, so that the kernels they are
    # handed to compile once (_probs_row's already are read-only: Numba types its result as its
    # read-only _NO_CAND branch).
    ids.flags.writeable = False
    return ids, probs


def probs_dense(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    """Sampling distribution of one logits row as a dense float64 ``[V]`` array."""
    top_k = int(top_k)
    V = np.shape(logits)[0] if np.ndim(logits) == 1 else 0
    logits, best, cand = _check_logits(logits, top_k if 0 < top_k < V and temperature > 0 else 0)
    if temperature > 0 and top_k <= 0 and top_p >= 1.0 and min_p <= 0.0:
        # a plain softmax: NumPy's vectorised exp is ~3x faster than Numba's scalar one here
        out = logits.astype(np.float64)
        out -= out[best]
        out *= 1.0 / float(temperature)
        np.exp(out, out=out)
        out /= out.sum()
        return out
    # top-p without a top-k limit measures the nucleus on the whole row: NumPy's normaliser
    z_row = _row_normaliser(logits, temperature) if temperature > 0 and top_p < 1.0 and not 0 < top_k < V else -1.0
    ids, probs = _probs_sparse(logits, float(temperature), top_k, float(top_p), float(min_p), 0, z_row, best, cand)
    out = np.zeros(logits.shape[0], np.float64)
    out[ids] = probs
    return out


def token_logprob(logits, token: int, n_top: int = 0) -> tuple[float, np.ndarray, np.ndarray]:
    """The model's own log-probability of ``token`` at this row, at temperature 1 and before
    any filter (what OpenAI and vLLM report as ``logprobs``), and the ``n_top`` most likely
    tokens with theirs: ``(logprob, top_ids, top_logprobs)``, ``top_*`` ``[min(n_top, #finite)]``
    sorted by log-probability descending (ties: lower id first).  A token whose logit is
    -inf gets -inf."""
    n_top = int(n_top)
    logits, best, cand = _check_logits(logits, n_top if 0 < n_top < np.shape(logits)[-1] else 0)
    lse = float(logits[best]) + math.log(_row_normaliser(logits, 1.0))  # log sum exp, in float64
    ids = _top_k_ids(logits, n_top, cand) if n_top > 0 else _NO_CAND
    return float(logits[int(token)]) - lse, ids, logits[ids].astype(np.float64) - lse
