"""Logits rows rebuilt from a row's largest entries (llama.cpp's backend top-k).

With backend sampling on (``backend.LlamaModel.set_row_top_k``), llama.cpp runs one top-k
inside the model graph for every output row and returns only the ``k + slack`` largest raw
logits with their ids, not the ``[V]`` row.  ``dense_row`` puts them back into a float32
``[V]`` row, every other entry ``-inf``.

Why no law changes.  For a request with ``top_k = k > 0`` every distribution this project
makes from a row (``sampling.probs_sparse`` with or without the draft's cap, ``probs_dense``,
greedy's argmax) reads only the row's k largest finite logits, chosen by value and, on ties,
by lower id, and their values: temperature, top-p (measured on the top-k distribution),
min-p (relative to the largest) and the cap all work on those.  So the rebuilt row gives
bit for bit the distribution of the true row as long as it holds that same set with the
same values.  It does when the smallest value returned is below the k-th largest: then
every token outside has a smaller logit than the k-th, so the k largest (ties at the k-th
value included, whichever of them llama.cpp's unstable partial sort kept) are all there.
When the smallest returned value equals the k-th largest, a token tied with it may have
been left out and the lower-id rule could pick it: the set is undetermined and
``dense_row`` returns None; the backend then evaluates that row in full (see
``backend.LlamaModel``).  The tests compare the distributions bit for bit
(``tests/test_backend_rows.py``) and run the engine through the joint-law harness with
rows rebuilt this way (``tests/test_exactness.py``).

What the rebuilt row does not serve: a request without top-k (the whole row matters: its
normaliser), a constraint (the mask comes before top-k), logprobs (the whole row's
normaliser).  ``Engine`` turns backend rows off for those.  Nothing here imports llama_cpp.
"""

from __future__ import annotations

import numpy as np

__all__ = ["dense_row", "determined"]


def determined(values, k: int) -> bool:
    """Whether the ``len(values) > k`` largest entries of a row (any order), chosen with ties
    broken arbitrarily, surely hold every entry tied with the k-th largest."""
    v = np.sort(np.asarray(values, np.float32))[::-1]
    return bool(0 < k < v.shape[0] and v[v.shape[0] - 1] < v[k - 1])


def dense_row(ids, values, n_vocab: int, k: int) -> np.ndarray | None:
    """The float32 ``[n_vocab]`` row holding ``values`` at ``ids`` and ``-inf`` elsewhere, or
    None when ``determined(values, k)`` is false (the row must be read in full)."""
    ids = np.asarray(ids, np.int64)
    values = np.asarray(values, np.float32)
    if ids.shape != values.shape:
        raise ValueError(f"ids {ids.shape} and values {values.shape} differ in shape")
    if np.isnan(values).any() or np.isposinf(values).any():
        raise ValueError("logits contain NaN or +inf")
    if not determined(values, k):
        return None
    row = np.full(int(n_vocab), -np.inf, np.float32)
    row[ids] = values
    return row
