"""Logits processing and draws from caller-supplied uniforms.

Turns one float32 logits row into the distribution a token is sampled from, and turns
uniforms in [0, 1) into draws.  Everything here works on plain arrays; it never touches a
model, never draws random numbers itself (callers pass uniforms from a seeded
``numpy.random.Generator``) and never imports llama_cpp.

Transform order (identical for target and draft): temperature -> top-k -> top-p -> min-p,
then renormalise.  Temperature 0 means greedy: the distribution is one-hot on the argmax
(ties go to the lowest token id).  The draft may additionally cap its support to its top
``cap`` tokens; the capped, renormalised distribution is the one its candidates are drawn
from, so it is also the ``q`` the verifier must use.

Sparse distributions are ``(ids, probs)`` pairs: ``ids`` int64 token ids, ``probs`` float64,
both ``[n]``, sorted by probability descending (ties by id), summing to 1, every prob > 0.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

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
def _weaker(vals, idx, a, b):
    # heap order: entry a ranks below entry b (smaller value; on a tie, the larger id)
    return vals[a] < vals[b] or (vals[a] == vals[b] and idx[a] > idx[b])


@njit(cache=True)
def _heap_sift_down(vals, idx, start, n):
    # min-heap on (vals, -idx): the root is the weakest kept element
    i = start
    while True:
        left = 2 * i + 1
        if left >= n:
            break
        m = left
        right = left + 1
        if right < n and _weaker(vals, idx, right, left):
            m = right
        if _weaker(vals, idx, m, i):
            vals[m], vals[i] = vals[i], vals[m]
            idx[m], idx[i] = idx[i], idx[m]
            i = m
        else:
            break


@njit(cache=True)
def _heap_push(vals, idx, n, v, i):
    # sift up the new element at n (min-heap on (vals, -idx))
    j = n
    vals[j] = v
    idx[j] = i
    while j > 0:
        parent = (j - 1) // 2
        if _weaker(vals, idx, j, parent):
            vals[j], vals[parent] = vals[parent], vals[j]
            idx[j], idx[parent] = idx[parent], idx[j]
            j = parent
        else:
            break


@njit(cache=True)
def _top_k_heap(logits, cand, k):
    """Ids of the k largest finite logits among ``cand`` (ascending ids; ties: lower id
    first), sorted descending."""
    # logits: [V] float32, cand: [m] int64 -> ids [min(k, #finite)] int64
    n_fin = 0
    vals = np.empty(k, np.float64)
    idx = np.empty(k, np.int64)
    for c in range(cand.shape[0]):
        i = cand[c]
        v = logits[i]
        if not v > -np.inf:  # -inf and NaN are never candidates
            continue
        if n_fin < k:
            _heap_push(vals, idx, n_fin, v, i)
            n_fin += 1
        elif v > vals[0]:
            vals[0] = v
            idx[0] = i
            _heap_sift_down(vals, idx, 0, k)
    vals = vals[:n_fin]
    idx = idx[:n_fin]
    # sort descending by value, ascending id on ties
    order = np.argsort(idx, kind="mergesort")
    vals = vals[order]
    idx = idx[order]
    order = np.argsort(-vals, kind="mergesort")
    return idx[order]


@njit(cache=True)
def _top_k_ids(logits, k, cand):
    """Ids of the k largest finite logits (ties: lower id first), sorted descending, among
    ``cand`` (ascending ids known to hold them all) or, when ``cand`` is empty, the row."""
    # logits: [V] float32, cand: [m] int64 -> ids [min(k, #finite)] int64
    if k <= 0:  # the heap needs a root
        return np.empty(0, np.int64)
    if cand.shape[0] == 0:
        cand = np.arange(logits.shape[0])
    return _top_k_heap(logits, cand, k)


_NO_CAND = np.empty(0, np.int64)
_BLOCK = 64  # the one-read scan tests a row 64 entries at a time (a vectorised test) ...
_SUB = 16  # ... then a flagged block 16 at a time
_SCAN_K_MAX = 4096  # larger k: the scan finds the argmax only, the heap then reads the row


_LOW = np.int64(0xFFFFFFFF)


@njit(cache=True)
def _key_sift_down(h, n):
    # min-heap of int64 keys: the root is the weakest kept entry
    i = 0
    while True:
        m = 2 * i + 1
        if m >= n:
            break
        if m + 1 < n and h[m + 1] < h[m]:
            m += 1
        if h[m] < h[i]:
            h[m], h[i] = h[i], h[m]
            i = m
        else:
            break


@njit(cache=True)
def _heap_feed(logits, bits, s, e, h, n, k, t):
    """The heap's loop over ids s..e-1 of the row, holding n keys and ``t`` the value of its
    weakest once full (else -inf): ``(n, t)``, n -1 at a NaN or +inf.

    A key orders entries as ``_top_k_heap`` does, by value then lower id first, in one int64:
    the value's bits made monotone (-0.0 read as +0.0, which compares equal to it) above the
    complement of the id."""
    for i in range(s, e):
        v = logits[i]
        if not v <= t:  # v > t, or NaN
            if v != v or v == np.inf:
                return -1, t
            b = bits[i]
            if b == np.int32(-2147483648):  # -0.0
                b = np.int32(0)
            b = b ^ ((b >> 31) & np.int32(0x7FFFFFFF))
            key = (np.int64(b) << 32) | (_LOW - i)
            if n < k:  # sift up
                j = n
                h[j] = key
                n += 1
                while j > 0:
                    parent = (j - 1) // 2
                    if h[j] < h[parent]:
                        h[j], h[parent] = h[parent], h[j]
                        j = parent
                    else:
                        break
                if n == k:
                    t = logits[_LOW - (h[0] & _LOW)]
            else:  # v > t: it replaces the weakest
                h[0] = key
                _key_sift_down(h, k)
                t = logits[_LOW - (h[0] & _LOW)]
    return n, t


_SEED_SHARE = 8  # _seed_threshold reads 1/8 of the row's blocks (at least _SEED_MIN x k of them)
_SEED_MIN = 2
_INT32_MIN = np.int32(-2147483648)
_KEY_NINF = np.int32(-2139095041)  # the monotone int32 key of -inf (see _heap_feed)


@njit(cache=True)
def _seed_threshold(bits, nb, k):
    """A float32 strictly below the k-th largest finite logit, or -inf: the k-th largest of
    the maxima of the first m blocks of ``_BLOCK`` entries (m about nb / ``_SEED_SHARE``) is
    the value of k distinct entries at least, so at least k entries reach it; the threshold
    is the next float32 below it.  -inf when there are too few blocks, when fewer than k of
    them hold a finite entry, or when a maximum is NaN or +inf (the scan then finds it).

    The maxima are taken on monotone int32 keys of the bits (an integer max, which LLVM
    vectorises): NaNs map above +inf or below -inf."""
    m = max(nb // _SEED_SHARE, _SEED_MIN * k)
    if m > nb or k < 4 or k > 256:  # a small heap fills at once; a large one sorts slowly
        return np.float32(-np.inf)
    # the k largest block maxima, ascending, in a small sorted buffer
    top = np.empty(k, np.int32)
    for b in range(m):
        s = b * _BLOCK
        mx = _INT32_MIN
        for j in range(_BLOCK):
            x = bits[s + j]
            x = x ^ ((x >> np.int32(31)) & np.int32(0x7FFFFFFF))
            mx = max(mx, x)
        if b < k:
            top[b] = mx
            if b == k - 1:
                top.sort()
        elif mx > top[0]:
            j = 1
            while j < k and top[j] < mx:
                top[j - 1] = top[j]
                j += 1
            top[j - 1] = mx
    t0 = top[0]
    if t0 <= _KEY_NINF or t0 >= np.int32(0x7F800000):  # too few finite entries, or a NaN/+inf
        return np.float32(-np.inf)
    key = np.empty(1, np.int32)
    key[0] = t0 ^ ((t0 >> np.int32(31)) & np.int32(0x7FFFFFFF))  # the key back to the bits
    return np.nextafter(key.view(np.float32)[0], np.float32(-np.inf))


@njit(cache=True)
def _scan_top(logits, k):
    """One read of the row: ``(bad, best, top)``.  ``top``: ascending ids of the k largest
    finite logits (ties: lower id first; fewer when the row has fewer finite entries), the
    set ``_top_k_heap`` keeps over the whole row; ``best``: the first maximum (0 when no
    entry is finite); ``bad``: the row holds a NaN or +inf (then nothing else is meaningful).

    It is ``_top_k_heap``'s heap fed with every id in ascending order, except that a block of
    ``_BLOCK`` entries (then of ``_SUB``) none of which exceeds the heap's weakest value (the
    heap full) is skipped after a vectorised test: each of its entries would have been turned
    away, since the weakest value only rises.  The test also flags NaN (``not v <= t``), so
    a skipped block holds none, nor a +inf (it exceeds any weakest value but a +inf, which
    was caught when it entered the heap)."""
    # logits: [V] float32 -> (bool, int64, [min(k, #finite)] int64); k >= 1, V < 2**32
    V = logits.shape[0]
    bits = logits.view(np.int32)
    h = np.empty(k, np.int64)
    n = 0
    nb = V // _BLOCK
    # the weakest value once the heap is full; until then a value below the k-th largest
    # (_seed_threshold), so that the first blocks are not all fed to the heap
    t = _seed_threshold(bits, nb, k)
    for b in range(nb):
        s = b * _BLOCK
        c = np.int32(0)
        for j in range(_BLOCK):  # an OR of int32s: LLVM vectorises it
            c |= np.int32(not (logits[s + j] <= t))
        if c == 0:
            continue
        for s2 in range(s, s + _BLOCK, _SUB):
            c = np.int32(0)
            for j in range(_SUB):
                c |= np.int32(not (logits[s2 + j] <= t))
            if c != 0:
                n, t = _heap_feed(logits, bits, s2, s2 + _SUB, h, n, k, t)
                if n < 0:
                    return True, 0, _NO_CAND
    n, t = _heap_feed(logits, bits, nb * _BLOCK, V, h, n, k, t)
    if n < 0:
        return True, 0, _NO_CAND
    top = np.empty(n, np.int64)
    best = 0
    if n > 0:
        hi = h[0]
        for j in range(n):
            top[j] = _LOW - (h[j] & _LOW)
            if h[j] > hi:
                hi = h[j]
        best = _LOW - (hi & _LOW)
    top.sort()
    return False, best, top


def _scan(logits, k: int) -> tuple[int, np.ndarray]:
    """The row's argmax (first maximum) and ascending ids of its k largest finite logits
    (ties: lower id first), from one read of the row (``_scan_top``); the candidates are
    empty (meaning: all of them) when ``k`` is 0 or past ``_SCAN_K_MAX``.  ``ValueError``
    for a row holding a NaN or +inf.  ``logits``: as ``_check_logits`` leaves it.
    """
    kk = k if 0 < k <= _SCAN_K_MAX else 1
    bad, best, top = _scan_top(logits, kk)
    if bad:
        raise ValueError("logits contain NaN or +inf")
    return int(best), top if kk == k else _NO_CAND


def _candidates(logits: np.ndarray, k: int) -> np.ndarray:
    """Ascending ids that surely hold the row's k largest finite logits; empty (meaning: all
    of them) when the shortcut does not apply (see ``_scan``)."""
    return _scan(logits, k)[1]


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
def _probs_sparse(logits, temperature, top_k, top_p, min_p, cap, z_row, best, cand):
    # logits: [V] float32 -> (ids [n] int64, probs [n] float64).  z_row: the whole row's
    # normaliser sum exp((l - max l) / T) when the caller has it (<= 0: not computed).
    # best: the argmax (first maximum), which NumPy finds with SIMD.  cand: ascending ids
    # holding the top top_k logits, or the top cap when top_k does not limit (empty: the whole row; see _candidates).
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
    z_all = -1.0
    if kc < V:
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
    else:
        # No count limit.  Tokens whose probability is below (1 - top_p) / V can never be in
        # the nucleus (everything at or below them weighs < 1 - top_p), nor above min_p's
        # floor when it is higher: only the rest needs sorting.
        bvf = np.float64(bv)
        z = 0.0
        for i in range(V):
            v = logits[i]
            if v > -np.inf:
                z += math.exp((np.float64(v) - bvf) * inv_t)
        floor_w = 0.0
        if top_p < 1.0:
            floor_w = (1.0 - top_p) / V * z
        if min_p > floor_w:
            floor_w = min_p  # the argmax weighs 1, so min-p's floor is min_p itself
        z_all = z
        cand = np.empty(V, np.int64)
        cv = np.empty(V, np.float64)
        n = 0
        for i in range(V):
            v = logits[i]
            if v > -np.inf:
                wi = math.exp((np.float64(v) - bvf) * inv_t)
                if wi >= floor_w:
                    cand[n] = i
                    cv[n] = np.float64(v)
                    n += 1
        cand = cand[:n]
        cv = cv[:n]
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
        ids = cand[order]
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


@njit(cache=True)
def _sample_cdf(ids, probs, u):
    # Inverse CDF of a sparse distribution; u in [0, 1).
    t = u * probs.sum()
    c = 0.0
    last = -1
    for j in range(probs.shape[0]):
        if probs[j] > 0.0:
            c += probs[j]
            last = j
            if c > t:
                return ids[j]
    return ids[last]


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
        t = u[k] * probs.sum()
        c = 0.0
        last = -1
        pick = -2
        for j in range(probs.shape[0]):
            if probs[j] > 0.0:
                c += probs[j]
                last = j
                if c > t:
                    pick = j
                    break
        if pick == -2:  # as _sample_cdf: the last entry with mass
            pick = last
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
    t = u * p.sum()
    c = 0.0
    last = 0
    for i in range(p.shape[0]):
        if p[i] > 0.0:
            c += p[i]
            last = i
            if c > t:
                return i
    return last


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


def _row(logits) -> np.ndarray:
    """The row as a contiguous, read-only, non-empty 1-D float32 array (see ``_check_logits``);
    the backend's rows already are, and pass through at the cost of a few attribute reads."""
    if (type(logits) is np.ndarray and logits.dtype == np.float32 and logits.ndim == 1 and logits.shape[0] > 0
            and not logits.flags.writeable and logits.flags.c_contiguous):
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


def _row_normaliser(logits, temperature):
    """``sum exp((l - max l) / T)`` over the row with NumPy's SIMD exp (Numba's is scalar)."""
    x = logits.astype(np.float64)
    x -= x.max()
    x *= 1.0 / temperature
    np.exp(x, out=x)
    return float(x.sum())


def probs_sparse(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, cap=0):
    """Sampling distribution of one logits row as ``(ids, probs)`` (see module docstring).

    ``top_k``/``cap`` of 0 mean no limit.  Requires a 1-D logits row with at least one finite
    entry; returns at least one token.
    """
    temperature, top_k, top_p, min_p, cap = float(temperature), int(top_k), float(top_p), float(min_p), int(cap)
    logits = _row(logits)
    V = logits.shape[0]
    if temperature > 0 and top_p < 1.0 and 0 < cap < V and not 0 < top_k < V:
        # top-p is measured on the whole row before the cap cuts it (see _probs_sparse): the
        # kernel needs the row's normaliser, which NumPy's SIMD exp computes faster
        logits, best, cand = _check_logits(logits, cap)
        z_row = _row_normaliser(logits, temperature)
        return _probs_sparse(logits, temperature, top_k, top_p, min_p, cap, z_row, best, cand)
    status, ids, probs = _probs_row(logits, temperature, top_k, top_p, min_p, cap)
    if status:
        raise ValueError("logits contain NaN or +inf" if status == 1 else "logits have no finite entry")
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
    ids, probs = _probs_sparse(logits, float(temperature), top_k, float(top_p), float(min_p), 0, -1.0, best, cand)
    out = np.zeros(logits.shape[0], np.float64)
    out[ids] = probs
    return out


def sample_iid(ids, probs, u) -> np.ndarray:
    """``len(u)`` iid inverse-CDF draws from the sparse distribution ``(ids, probs)``."""
    return _sample_iid(np.asarray(ids, np.int64), np.asarray(probs, np.float64), np.asarray(u, np.float64))


def sample_iid_q(ids: np.ndarray, probs: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sample_iid``'s draws (the same tokens from the same uniforms) and the probability
    of each under ``(ids, probs)``: ``(draws [K] int64, q [K] float64)``.  No conversion:
    ``ids`` int64, ``probs`` and ``u`` float64 arrays, as ``probs_sparse`` and a
    ``numpy.random.Generator`` give them."""
    return _sample_iid_q(ids, probs, u)


def sample_without_replacement(ids, probs, u) -> np.ndarray:
    """Sequential draws without replacement (at most the support size), one uniform each."""
    return _sample_without_replacement(
        np.asarray(ids, np.int64), np.asarray(probs, np.float64), np.asarray(u, np.float64)
    )


def sample_sparse(ids, probs, u: float) -> int:
    """One draw from the sparse distribution ``(ids, probs)``: the token ``sample_dense``
    draws with the same ``u`` from the same distribution held densely (ascending id order)."""
    return int(_sample_by_id(np.asarray(ids, np.int64), np.asarray(probs, np.float64), float(u)))


def sample_dense(p, u: float) -> int:
    """One inverse-CDF draw from a dense distribution ``p`` ``[V]``."""
    return int(_sample_dense(np.asarray(p, np.float64), float(u)))


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


# --------------------------------------------------------------------------- token masks
#
# A token mask (a constraint's answer to "which tokens may come next") is a packed bitmask:
# int32 ``[ceil(n / 32)]`` words, token ``i`` allowed iff bit ``i % 32`` of word ``i // 32``
# is set (the layout grammar engines such as llguidance fill).  Tokens past the mask's end
# are not allowed.


def mask_logits(logits, bitmask) -> np.ndarray:
    """A float32 copy of ``logits`` ``[V]`` with every token ``bitmask`` disallows at -inf.

    Masking comes before every transform (temperature, top-k, top-p, min-p): the filters then
    see only the allowed tokens, which is what plain constrained sampling does."""
    logits = np.asarray(logits, np.float32)
    words = np.ascontiguousarray(bitmask, dtype=np.int32)
    n = min(logits.shape[0], 32 * words.shape[0])
    bits = np.unpackbits(words.view(np.uint8), count=n, bitorder="little").view(bool)
    out = np.full(logits.shape[0], -np.inf, np.float32)
    np.copyto(out[:n], logits[:n], where=bits)
    return out


def mask_allows(bitmask, token: int) -> bool:
    """Whether ``bitmask`` allows ``token``."""
    w = token >> 5
    return 0 <= token and w < len(bitmask) and bool((int(bitmask[w]) >> (token & 31)) & 1)


def bitmask_from_ids(ids, n_vocab: int) -> np.ndarray:
    """The packed bitmask allowing exactly ``ids`` out of ``n_vocab`` tokens."""
    bits = np.zeros(32 * ((n_vocab + 31) // 32), np.uint8)
    bits[np.asarray(list(ids), np.int64)] = 1
    return np.packbits(bits, bitorder="little").view(np.int32).copy()


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


def values_at(p, qids) -> np.ndarray:
    """p(x) for each x in ``qids``, float64 in that order.  ``p``: dense ``[V]`` or sparse
    ``(ids, probs)``."""
    if isinstance(p, tuple):
        return _values_at(p[0], p[1], qids)
    return np.asarray(p[qids], np.float64)


def overlap(p, qids, qprobs) -> float:
    """``sum_x min(p(x), q(x))``: the chance that one draw from q passes a chain's test
    against p.  ``p``: dense ``[V]`` or sparse ``(ids, probs)``; q sparse."""
    if isinstance(p, tuple):
        # min(p, q) at the common ids in ascending id order (as np.intersect1d gives them),
        # summed by NumPy: the same terms in the same order, so the same float
        return float(_common_mins(p[0], p[1], qids, qprobs).sum())
    return float(np.minimum(p[qids], qprobs).sum())
