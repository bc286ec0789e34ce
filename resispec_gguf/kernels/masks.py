"""Token masks: which tokens a constraint allows next, as a packed bitmask.

A mask is int32 ``[ceil(n / 32)]`` words, token ``i`` allowed iff bit ``i % 32`` of word
``i // 32`` is set (the layout grammar engines such as llguidance fill).  Tokens past the
mask's end are not allowed.  ``mask_logits`` applies a mask to a logits row before any
sampling transform; ``mask_allows`` tests one token; ``bitmask_from_ids`` builds a mask.
``bias_logits`` adds a request's logit bias to a row, which comes before the mask.

NumPy and Numba: may import ``config``, ``errors``, ``paths``, ``progress`` and other kernel
modules (it needs none); never the grammar engine (``assist`` drives it and hands masks
here), a model, the decoding loop or a surface, and never llama_cpp.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["mask_logits", "mask_allows", "bitmask_from_ids", "bias_arrays", "bias_logits"]


@njit(cache=True)
def _apply_mask(logits, words, out):
    # out[i] = logits[i] where bit i of words is set, else -inf; one pass (a word at a time)
    V = logits.shape[0]
    n = min(V, 32 * words.shape[0])
    ninf = np.float32(-np.inf)
    full = n // 32
    for w in range(full):
        bits = words[w]
        base = 32 * w
        if bits == -1:  # every token of the word allowed
            for j in range(32):
                out[base + j] = logits[base + j]
        elif bits == 0:
            for j in range(32):
                out[base + j] = ninf
        else:
            for j in range(32):
                out[base + j] = logits[base + j] if (bits >> j) & 1 else ninf
    for i in range(32 * full, V):
        out[i] = logits[i] if i < n and (words[i >> 5] >> (i & 31)) & 1 else ninf


def mask_logits(logits, bitmask) -> np.ndarray:
    """A float32 copy of ``logits`` ``[V]`` with every token ``bitmask`` disallows at -inf.

    Masking comes before every transform (temperature, top-k, top-p, min-p): the filters then
    see only the allowed tokens, which is what plain constrained sampling does."""
    logits = np.ascontiguousarray(logits, np.float32)
    words = np.ascontiguousarray(bitmask, dtype=np.int32)
    out = np.empty(logits.shape[0], np.float32)
    _apply_mask(logits, words, out)
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


def bias_arrays(pairs) -> tuple[np.ndarray, np.ndarray] | None:
    """``(ids, biases)`` (int64 and float32 ``[n]``) of ``(token id, bias)`` pairs with distinct
    ids, or None for none."""
    if not pairs:
        return None
    return np.array([i for i, _ in pairs], np.int64), np.array([b for _, b in pairs], np.float32)


def bias_logits(logits, ids, biases) -> np.ndarray:
    """A float32 copy of ``logits`` ``[V]`` with ``biases[j]`` added at ``ids[j]`` (distinct);
    ids at or past ``V`` are skipped (a draft's smaller vocabulary).  A bias of -inf leaves
    that token at -inf."""
    out = np.array(logits, np.float32)  # a copy: the backend's rows are read-only views
    keep = ids < out.shape[0]
    out[ids[keep]] += biases[keep]
    return out
