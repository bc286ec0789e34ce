"""Top-k selection (topk.py) against a lexsort (``kernel_cases.ref_order``).

1. The heap (``_top_k_ids``) on kernel_cases' rows, fed the candidates ``_candidates`` finds
   from a strided sample, up to Qwen's vocabulary (and ``probs_sparse`` filtering with them
   against the reference).
2. The one-read scan: ``_scan`` (through sampling's ``_check_logits``) finds the first
   maximum and the exact top-k, ranked; ``_scan_top`` equals the heap fed every id on rows built
   to make block skipping go wrong, also when it starts from ``_seed_threshold``; NaN and
   +inf are reported wherever they are.
"""

import itertools

import numpy as np
import pytest

from resispec_gguf.kernels.sampling import probs_dense, probs_sparse
from resispec_gguf.kernels.topk import _candidates, _top_k_ids

from kernel_cases import ATOL, ROWS, RTOL, ref_order, ref_probs


# --------------------------------------------------------------------------- the heap and its candidates


def test_top_k_kernel_matches_lexsort():
    for (name, logits), k in itertools.product(ROWS, (0, 1, 2, 5, 40, 6000)):
        x = np.ascontiguousarray(logits, np.float32)
        got = _top_k_ids(x, k, _candidates(x, k))
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, ref_order(logits)[:k], err_msg=f"{name} k={k}")
    assert _top_k_ids(np.full(4, -np.inf, np.float32), 2, np.empty(0, np.int64)).shape == (0,)


def test_vectorised_prefilter_keeps_the_top_k_at_qwen_vocabulary():
    """The candidates found from a strided sample hold the k largest logits, ties included."""
    rng = np.random.default_rng(11)
    V = 151_936
    for trial in range(6):
        x = rng.normal(0, 3, V).astype(np.float32)
        if trial % 2:
            x = np.round(x, 1)  # many ties
        if trial == 4:
            x[rng.random(V) < 0.9] = -np.inf
        for k in (1, 40, 64, 500):
            cand = _candidates(x, k)
            assert cand.shape[0] < V and (cand.shape[0] >= k or (trial == 4 and k == 500 and cand.shape[0] == 0))
            np.testing.assert_array_equal(_top_k_ids(x, k, cand), ref_order(x)[:k])
        for kw in (dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05), dict(temperature=1.0, top_k=0, top_p=0.9)):
            ids, probs = probs_sparse(x, cap=64, **kw)
            rids, rprobs = ref_probs(x, cap=64, **kw)
            np.testing.assert_array_equal(ids, rids)
            np.testing.assert_allclose(probs, rprobs, rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- the one-read scan


def test_one_read_scan_finds_argmax_and_top_k_with_a_tail():
    """``_scan`` (one read, blocks skipped by a vectorised count): the first maximum and the
    exact top-k, ranked, for V that is not a multiple of the block, maxima tied across blocks and
    in the tail, and bad entries anywhere."""
    from resispec_gguf.kernels.sampling import _check_logits
    from resispec_gguf.kernels.topk import _BLOCK

    rng = np.random.default_rng(5)
    for V in (1, 3, 63, 64, 65, 4096, 5000, 32_000 + 37, 151_936):
        for trial in range(4):
            x = rng.normal(0, 2, V).astype(np.float32)
            if trial == 1:
                x = np.round(x, 1)
            if trial == 2:  # the maximum twice: in a late block and in the tail
                x[V - 1] = x[V // 2] = x.max() + 1
            if trial == 3:  # the maximum in two blocks
                x[(5 * _BLOCK + 3) % V] = x[(2 * _BLOCK + 7) % V] = x.max() + 1
            _, best, _ = _check_logits(x)
            assert best == int(np.argmax(x)), (V, trial)
            for k in (1, 16, 40):
                _, best, cand = _check_logits(x, k)
                assert best == int(np.argmax(x))
                assert cand.shape[0] == min(k, V)
                np.testing.assert_array_equal(ref_order(x)[:k], cand)  # ranked
                np.testing.assert_array_equal(_top_k_ids(x, k, cand), ref_order(x)[:k])
        for bad in (np.nan, np.inf):
            for where in (0, V // 3, V - 1):
                y = rng.normal(0, 2, V).astype(np.float32)
                y[where] = bad
                with pytest.raises(ValueError, match="NaN or"):
                    probs_sparse(y, 0.8, 40, 0.95, 0.05, 64)
        y = np.full(V, -np.inf, np.float32)
        with pytest.raises(ValueError, match="no finite"):
            probs_dense(y, 0.8, 40)


def test_one_read_scan_equals_the_heap_over_the_whole_row():
    """``_scan_top`` skips blocks: the same ranked ids as ``_top_k_heap`` fed every id, and the
    first maximum, on rows built to make skipping go wrong (sorted either way, all equal,
    ties at the k-th value across blocks, mostly -inf, fewer finite entries than k)."""
    from resispec_gguf.kernels.topk import _BLOCK, _scan_top, _top_k_heap

    rng = np.random.default_rng(17)
    for V in (1, 5, _BLOCK - 1, _BLOCK, _BLOCK + 1, 3 * _BLOCK + 5, 2000, 20_011):
        rows = {
            "normal": rng.normal(0, 3, V),
            "coarse ties": np.round(rng.normal(0, 1, V)),
            "ascending": np.arange(V, dtype=np.float64),
            "descending": -np.arange(V, dtype=np.float64),
            "all equal": np.zeros(V),
            "two values": rng.integers(0, 2, V).astype(np.float64),
            "signed zeros": rng.choice([-0.0, 0.0, -1.0], V),  # -0.0 ties with +0.0
        }
        x = rng.normal(0, 3, V)
        x[rng.random(V) < 0.97] = -np.inf
        rows["mostly -inf"] = x
        y = np.full(V, -np.inf)
        y[rng.integers(V)] = 1.0
        rows["one finite"] = y
        rows["none finite"] = np.full(V, -np.inf)
        z = rng.normal(0, 3, V)
        z[rng.choice(V, min(V, 50), replace=False)] = 9.0  # ties at the top spread over blocks
        rows["tied top"] = z
        for name, row in rows.items():
            row = np.ascontiguousarray(row, np.float32)
            n_fin = int(np.isfinite(row).sum())
            for k in (1, 2, 7, 40, 64, 300):
                bad, best, top = _scan_top(row, k)
                assert not bad
                want = _top_k_heap(row, np.arange(V), k)
                np.testing.assert_array_equal(top, want, err_msg=f"{name} V={V} k={k}")
                assert top.shape[0] == min(k, n_fin)
                if n_fin:
                    assert best == int(np.argmax(row)), (name, V, k)
                    assert want[0] == best
    # a NaN or +inf anywhere is reported, also in a block the count would skip once full
    for V in (70, 5000):
        for bad_value in (np.nan, np.inf):
            for where in (0, 40, V // 2, V - 1):
                row = np.zeros(V, np.float32)
                row[where] = bad_value
                for k in (1, 40):
                    assert _scan_top(row, k)[0], (V, bad_value, where, k)


def test_seeded_scan_equals_the_heap_over_the_whole_row():
    """``_scan_top`` starts from ``_seed_threshold`` (a value below the k-th largest, from the
    maxima of the first blocks): the same ranked ids and first maximum as ``_top_k_heap`` fed every
    id on rows where that bound is tight, negative, a signed zero, or missing (the first
    blocks -inf), and NaNs of either sign or +inf are still reported."""
    from resispec_gguf.kernels.topk import _BLOCK, _scan_top, _seed_threshold, _top_k_heap

    rng = np.random.default_rng(23)
    for V in (8 * _BLOCK * 4, 20_011, 151_936):
        nb = V // _BLOCK
        rows = {
            "normal": rng.normal(0, 3, V),
            "negative": -np.abs(rng.normal(50, 3, V)),
            "zipf": 18.0 - 1.6 * np.log(rng.permutation(np.arange(1, V + 1))),
            "coarse ties": np.round(rng.normal(0, 0.5, V)),
            "zeros on top": np.where(rng.random(V) < 0.02, rng.choice([-0.0, 0.0], V), -1.0 - rng.random(V)),
            "tiny": rng.normal(0, 1e-38, V),
            "huge": np.where(rng.random(V) < 0.01, 3.4e38, rng.normal(0, 1, V)),
        }
        x = rng.normal(0, 3, V)
        x[: V // 4] = -np.inf  # the seed's blocks hold nothing finite
        rows["-inf prefix"] = x
        x = rng.normal(0, 3, V)
        x[: V // 8] += 20.0  # the seed is the top of the prefix: later blocks never reach it
        rows["high prefix"] = x
        x = rng.normal(0, 3, V)
        x[V // 16: V // 8] = 7.0  # the seed sits on a tie of many entries
        rows["tied seed"] = x
        for name, row in rows.items():
            row = np.ascontiguousarray(row, np.float32)
            bits = row.view(np.int32)
            for k in (1, 4, 8, 40, 64, 256):
                t = _seed_threshold(bits, nb, k)
                kth = np.sort(row[np.isfinite(row)])[::-1][min(k, int(np.isfinite(row).sum())) - 1]
                assert t == -np.inf or t < kth, (name, V, k, t, kth)
                bad, best, top = _scan_top(row, k)
                assert not bad
                want = _top_k_heap(row, np.arange(V), k)
                np.testing.assert_array_equal(top, want, err_msg=f"{name} V={V} k={k}")
                assert best == int(np.argmax(row)), (name, V, k)
    neg_nan = np.array([-0x400000], np.int32).view(np.float32)[0]  # x86's default NaN, sign set
    assert np.isnan(neg_nan) and np.signbit(neg_nan)
    for V in (8 * _BLOCK * 4, 20_011):
        for bad_value in (np.nan, neg_nan, np.inf):
            for where in (0, 70, V // 16, V // 2, V - 1):
                row = rng.normal(0, 3, V).astype(np.float32)
                row[where] = bad_value
                for k in (4, 40, 64):
                    assert _scan_top(row, k)[0], (V, bad_value, where, k)
                row[:] = -np.inf
                row[where] = bad_value
                assert _scan_top(row, 40)[0], (V, bad_value, where)
