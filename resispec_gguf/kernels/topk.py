"""The k largest logits of a row: the heap over candidate ids and the one-read scan.

``_top_k_heap`` keeps the k largest finite logits among candidate ids in a min-heap (ties:
lower id first) and returns them sorted descending; ``_top_k_ids`` runs it over the whole
row, or takes the first of ranked candidates.  ``_scan_top`` reads a row once and returns
its argmax and the ids of its k largest finite logits in that same order, skipping whole blocks that cannot enter the
heap (a vectorised test), with a threshold seeded from block maxima (``_seed_threshold``);
``_scan`` / ``_candidates`` are its Python entries.  ``sampling`` builds distributions on
these candidates; nothing here knows about temperature or filters.

Plain NumPy/Numba on float32 rows and int64 ids: may import ``config``, ``errors``,
``paths``, ``progress`` and other kernel modules (it needs none); never a model, the decoding
loop, an assistant feature or a surface, and never llama_cpp.
"""

from __future__ import annotations

import numpy as np
from numba import njit


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
    """Ids of the k largest finite logits (ties: lower id first), sorted descending: the
    first k of ``cand`` (``_scan_top``'s ranked ids of at least the k largest) or, when
    ``cand`` is empty, the heap over the row."""
    # logits: [V] float32, cand: [m] int64 -> ids [min(k, #finite)] int64
    if k <= 0:  # the heap needs a root
        return np.empty(0, np.int64)
    if cand.shape[0] > 0:
        return cand[:k]
    return _top_k_heap(logits, np.arange(logits.shape[0]), k)


_NO_CAND = np.empty(0, np.int64)
_NO_CAND.flags.writeable = False  # as the kernels see a global array: one Numba type, whoever hands it on
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
    """One read of the row: ``(bad, best, top)``.  ``top``: ids of the k largest finite
    logits, sorted descending (ties: lower id first; fewer when the row has fewer finite
    entries), what ``_top_k_heap`` returns over the whole row: the heap's keys sort in that
    order, so ranking them is one sort of k integers; ``best``: the first maximum (0 when no
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
    keys = np.sort(h[:n])  # ascending keys: the weakest first
    top = np.empty(n, np.int64)
    for j in range(n):
        top[j] = _LOW - (keys[n - 1 - j] & _LOW)
    best = top[0] if n > 0 else 0
    return False, best, top


def _scan(logits, k: int) -> tuple[int, np.ndarray]:
    """The row's argmax (first maximum) and the ids of its k largest finite logits, sorted
    descending (ties: lower id first), from one read of the row (``_scan_top``); the candidates are
    empty (meaning: all of them) when ``k`` is 0 or past ``_SCAN_K_MAX``.  ``ValueError``
    for a row holding a NaN or +inf.  ``logits``: as ``_check_logits`` leaves it.
    """
    kk = k if 0 < k <= _SCAN_K_MAX else 1
    bad, best, top = _scan_top(logits, kk)
    if bad:
        raise ValueError("logits contain NaN or +inf")
    return int(best), top if kk == k else _NO_CAND


def _candidates(logits: np.ndarray, k: int) -> np.ndarray:
    """The ids of the row's k largest finite logits, ranked (see ``_scan``); empty (meaning: all
    of them) when the shortcut does not apply (see ``_scan``)."""
    return _scan(logits, k)[1]
