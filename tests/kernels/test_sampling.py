"""Logits processing and draws compared with naive NumPy references.

1. ``probs_sparse`` / ``probs_dense`` against a reference written from the module docstring
   (temperature -> top-k -> top-p -> min-p -> renormalise, then the draft's support cap), on
   random rows of every awkward shape: V from 1 to 5000, -inf entries, one finite entry,
   logits of magnitude 1e4, ties.
2. The top-k selection kernel (``_top_k_ids``, which ``probs_sparse`` filters with) against a
   lexsort.
3. ``sample_iid`` / ``sample_dense`` against ``np.searchsorted`` on the cumulative sum;
   ``sample_without_replacement`` against a sequential reference and, statistically, the
   exact law of ordered pairs.
4. Bad logits rows raise ValueError.
"""

import itertools

import numpy as np
import pytest
from scipy import special, stats

from resispec_gguf.kernels.draws import sample_dense, sample_iid, sample_without_replacement
from resispec_gguf.kernels.sampling import probs_dense, probs_sparse
from resispec_gguf.kernels.topk import _candidates, _top_k_ids

RTOL = 1e-12
ATOL = 1e-300  # subnormal probabilities carry fewer significant bits


# --------------------------------------------------------------------------- references


def ref_order(logits):
    """Finite ids sorted by logit descending, ties by ascending id."""
    # logits: [V] float32 -> [n_finite] int64
    ids = np.flatnonzero(np.isfinite(logits))
    return ids[np.lexsort((ids, -logits[ids].astype(np.float64)))]


def ref_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, cap=0):
    """The sampling distribution as (ids, probs), straight from the module docstring."""
    logits = np.asarray(logits, np.float32)
    if temperature <= 0:
        return np.array([int(np.argmax(logits))]), np.ones(1)  # argmax: first maximum
    ids = ref_order(logits)
    x = logits[ids].astype(np.float64)
    w = np.exp((x - x[0]) * (1.0 / temperature))
    if top_k > 0:
        ids, w = ids[:top_k], w[:top_k]
    if top_p < 1.0:
        # Smallest prefix holding top_p of the mass.  Compared unnormalised, as the kernel
        # does, so prefixes that hit the target exactly (ties) are cut the same way.
        hit = np.flatnonzero(np.cumsum(w) >= top_p * w.sum())
        keep = hit[0] + 1 if hit.size else len(w)
        ids, w = ids[:keep], w[:keep]
    if min_p > 0.0:
        keep = max(1, int(np.sum(w >= min_p * w[0])))
        ids, w = ids[:keep], w[:keep]
    if cap > 0:
        ids, w = ids[:cap], w[:cap]
    p = w / w.sum()
    return ids[p > 0], p[p > 0]  # probabilities that underflowed to 0 are not support


def ref_dense(logits, **kw):
    ids, p = ref_probs(logits, **kw)
    out = np.zeros(len(logits))
    out[ids] = p
    return out


def ref_without_replacement(probs, u):
    rest = np.array(probs, np.float64)
    out = []
    for uk in u:
        if not rest.sum() > 0:
            break
        j = ref_inverse_cdf(rest, uk)
        out.append(j)
        rest[j] = 0.0
    return np.array(out, np.int64)


def ref_inverse_cdf(probs, u):
    """Index of the first cumulative sum above u * total (the last positive entry at worst)."""
    c = np.cumsum(probs)
    j = int(np.searchsorted(c, u * np.sum(probs), side="right"))
    return min(j, int(np.flatnonzero(probs > 0)[-1]))


# --------------------------------------------------------------------------- logits rows


def random_logits(rng, v, kind):
    if kind == "normal":
        x = rng.normal(0.0, rng.choice([0.5, 3.0, 15.0]), v)
    elif kind == "zipf":
        x = -1.1 * np.log(np.arange(1, v + 1)) + rng.normal(0, 0.3, v)
        rng.shuffle(x)
    elif kind == "neginf":
        x = rng.normal(0.0, 4.0, v)
        x[rng.random(v) < 0.5] = -np.inf
        if not np.isfinite(x).any():
            x[rng.integers(v)] = rng.normal()
    elif kind == "single":
        x = np.full(v, -np.inf)
        x[rng.integers(v)] = rng.normal(0, 100)
    elif kind == "huge":
        x = rng.uniform(-1e4, 1e4, v)
        x[rng.integers(v)] = 1e4  # and a few within reach of the max
        x[rng.integers(v, size=min(v, 3))] = 1e4 - rng.uniform(0, 20, min(v, 3))
    elif kind == "huge_neg":
        x = -1e4 + rng.normal(0, 2.0, v)
    elif kind == "ties":
        x = rng.integers(-3, 1, v).astype(np.float64)
    elif kind == "flat":
        x = np.full(v, 0.25)
    else:
        raise AssertionError(kind)
    return x.astype(np.float32)


KINDS = ("normal", "zipf", "neginf", "single", "huge", "huge_neg", "ties", "flat")
SIZES = (1, 2, 3, 7, 64, 300, 5000)
SETTINGS = [
    dict(temperature=1.0),
    dict(temperature=0.0),
    dict(temperature=0.0, top_k=5, top_p=0.5),
    dict(temperature=0.7),
    dict(temperature=0.6, top_k=40, top_p=0.95),
    dict(temperature=1.5, top_p=0.9),
    dict(temperature=0.3, top_p=0.5, min_p=0.05),
    dict(temperature=1.0, min_p=0.2),
    dict(temperature=1.0, top_k=1),
    dict(temperature=0.8, top_k=10, min_p=0.1),
    dict(temperature=1.0, top_k=100000),
    dict(temperature=1.0, top_p=0.25),
    dict(temperature=1e-3, top_p=0.99),
]
CAPS = (0, 1, 3, 64)


def all_rows(seed=0, reps=2):
    rng = np.random.default_rng(seed)
    for v, kind, rep in itertools.product(SIZES, KINDS, range(reps)):
        yield f"{kind}-V{v}-{rep}", random_logits(rng, v, kind)


ROWS = list(all_rows())


# --------------------------------------------------------------------------- probs


def check_sparse_shape(ids, probs, logits):
    assert ids.dtype == np.int64 and probs.dtype == np.float64
    assert ids.ndim == 1 and ids.shape == probs.shape and ids.shape[0] >= 1
    assert not np.isnan(probs).any()
    assert (probs >= 0).all()
    assert abs(probs.sum() - 1.0) <= 1e-12
    assert np.unique(ids).shape[0] == ids.shape[0]
    assert np.isfinite(logits[ids]).all() or ids.shape[0] == 1
    assert (np.diff(probs) <= 0).all(), "not sorted by probability descending"
    eq = np.diff(logits[ids]) == 0
    assert (np.diff(ids)[eq] > 0).all(), "tied logits not ordered by id"


@pytest.mark.parametrize("cap", CAPS)
def test_probs_sparse_matches_reference(cap):
    for (name, logits), kw in itertools.product(ROWS, SETTINGS):
        ids, probs = probs_sparse(logits, cap=cap, **kw)
        check_sparse_shape(ids, probs, logits)
        rids, rprobs = ref_probs(logits, cap=cap, **kw)
        np.testing.assert_array_equal(ids, rids, err_msg=f"{name} {kw} cap={cap}")
        np.testing.assert_allclose(probs, rprobs, rtol=RTOL, atol=ATOL, err_msg=f"{name} {kw} cap={cap}")


def test_probs_dense_matches_reference():
    for (name, logits), kw in itertools.product(ROWS, SETTINGS):
        p = probs_dense(logits, **kw)
        assert p.dtype == np.float64 and p.shape == logits.shape
        assert not np.isnan(p).any() and abs(p.sum() - 1.0) <= 1e-12
        np.testing.assert_allclose(p, ref_dense(logits, **kw), rtol=RTOL, atol=ATOL, err_msg=f"{name} {kw}")
        ids, probs = probs_sparse(logits, **kw)
        np.testing.assert_allclose(p[ids], probs, rtol=RTOL, atol=ATOL)
        assert np.count_nonzero(p) == np.count_nonzero(probs)


def test_dense_softmax_equals_scipy():
    rng = np.random.default_rng(1)
    for t in (0.5, 1.0, 2.0):
        x = random_logits(rng, 5000, "normal")
        np.testing.assert_allclose(probs_dense(x, t), special.softmax(x.astype(np.float64) / t), rtol=1e-12)


def test_greedy_ties_go_to_lowest_id():
    x = np.array([-np.inf, 1.0, 3.0, 0.5, 3.0, 3.0], np.float32)
    for kw in (dict(), dict(top_k=2), dict(top_p=0.1), dict(min_p=0.5)):
        ids, probs = probs_sparse(x, temperature=0.0, cap=4, **kw)
        assert ids.tolist() == [2] and probs.tolist() == [1.0]
        assert probs_dense(x, 0.0, **kw).tolist() == [0, 0, 1.0, 0, 0, 0]


def test_cap_applies_after_top_p():
    # p = [0.4, 0.4, 0.2]: the 0.5-nucleus is {0, 1}; capping to 2 keeps it whole.
    x = np.log(np.array([0.4, 0.4, 0.2])).astype(np.float32)
    for top_k in (0, 3):
        ids, probs = probs_sparse(x, top_p=0.5, top_k=top_k, cap=2)
        assert ids.tolist() == [0, 1]
        np.testing.assert_allclose(probs, [0.5, 0.5], rtol=1e-12)
    # the cap renormalises what top-p / min-p leave
    x = np.log(np.array([0.1, 0.5, 0.25, 0.15])).astype(np.float32)
    ids, probs = probs_sparse(x, top_p=0.8, cap=2)
    assert ids.tolist() == [1, 2]
    np.testing.assert_allclose(probs, [2 / 3, 1 / 3], rtol=1e-6)  # float32 logits


def test_probs_accept_lists_and_float64():
    x = [0.0, 1.0, -np.inf, 2.0]
    ids, probs = probs_sparse(x)
    rids, rprobs = ref_probs(np.array(x, np.float32))
    assert ids.tolist() == rids.tolist()
    np.testing.assert_allclose(probs, rprobs, rtol=RTOL)
    np.testing.assert_allclose(probs_dense(np.array(x, np.float64)), ref_dense(np.array(x, np.float32)), rtol=RTOL)


BAD_LOGITS = [
    ("2-D", np.zeros((2, 3), np.float32)),
    ("empty", np.zeros(0, np.float32)),
    ("NaN", np.array([0.0, np.nan, 1.0], np.float32)),
    ("+inf", np.array([0.0, np.inf, 1.0], np.float32)),
    ("NaN and -inf", np.array([-np.inf, np.nan], np.float32)),
    ("scalar", np.float32(1.0)),
]


@pytest.mark.parametrize("name,x", BAD_LOGITS, ids=[b[0] for b in BAD_LOGITS])
def test_bad_logits_raise(name, x):
    with pytest.raises(ValueError):
        probs_sparse(x)
    with pytest.raises(ValueError):
        probs_dense(x)
    with pytest.raises(ValueError):
        probs_sparse(x, temperature=0.0)


def test_no_finite_logit_raises():
    x = np.full(4, -np.inf, np.float32)
    for t in (0.0, 1.0):
        with pytest.raises(ValueError):
            probs_sparse(x, t)
        with pytest.raises(ValueError):
            probs_dense(x, t)


# --------------------------------------------------------------------------- top-k selection


def test_top_k_kernel_matches_lexsort():
    for (name, logits), k in itertools.product(ROWS, (0, 1, 2, 5, 40, 6000)):
        x = np.ascontiguousarray(logits, np.float32)
        got = _top_k_ids(x, k, _candidates(x, k))
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, ref_order(logits)[:k], err_msg=f"{name} k={k}")
    assert _top_k_ids(np.full(4, -np.inf, np.float32), 2, np.empty(0, np.int64)).shape == (0,)


# --------------------------------------------------------------------------- draws


def random_sparse(rng, n, zeros=False):
    probs = rng.dirichlet(np.full(n, rng.choice([0.2, 1.0, 5.0])))
    if zeros:
        probs[rng.random(n) < 0.3] = 0.0
        if probs.sum() == 0:
            probs[rng.integers(n)] = 1.0
        probs /= probs.sum()
    ids = rng.choice(10 * n + 5, n, replace=False).astype(np.int64)
    return ids, probs


def edge_uniforms(rng, m):
    return np.concatenate([[0.0, np.nextafter(1.0, 0.0), 0.5], rng.random(m)])


def test_sample_iid_is_inverse_cdf():
    rng = np.random.default_rng(2)
    for n, zeros in itertools.product((1, 2, 5, 64, 1000), (False, True)):
        ids, probs = random_sparse(rng, n, zeros)
        u = edge_uniforms(rng, 500)
        got = sample_iid(ids, probs, u)
        assert got.dtype == np.int64 and got.shape == u.shape
        want = ids[[ref_inverse_cdf(probs, uk) for uk in u]]
        np.testing.assert_array_equal(got, want)
        pos = dict(zip(ids.tolist(), probs.tolist()))
        assert all(pos[t] > 0 for t in got.tolist())
    assert sample_iid([3], [1.0], np.zeros(0)).shape == (0,)


def test_sample_dense_is_inverse_cdf():
    rng = np.random.default_rng(3)
    for v in (1, 3, 50, 5000):
        p = rng.dirichlet(np.ones(v))
        p[rng.random(v) < 0.3] = 0.0
        if p.sum() == 0:
            p[0] = 1.0
        p /= p.sum()
        nz = np.flatnonzero(p)
        for uk in edge_uniforms(rng, 100):
            tok = sample_dense(p, uk)
            assert isinstance(tok, int) and tok == ref_inverse_cdf(p, uk)
            # and the same token as the sparse draw over the support in id order
            assert tok == int(sample_iid(nz, p[nz], [uk])[0])


def test_sample_without_replacement_matches_sequential_reference():
    rng = np.random.default_rng(4)
    for n, zeros, k in itertools.product((1, 2, 5, 64), (False, True), (1, 3, 8, 100)):
        ids, probs = random_sparse(rng, n, zeros)
        for _ in range(20):
            u = rng.random(k)
            got = sample_without_replacement(ids, probs, u)
            assert got.dtype == np.int64
            assert got.shape[0] == min(k, np.count_nonzero(probs))
            assert np.unique(got).shape[0] == got.shape[0]
            np.testing.assert_array_equal(got, ids[ref_without_replacement(probs, u)])


def test_sample_without_replacement_pair_law():
    """Ordered pairs from q = [.5, .25, .15, .07, .03]: chi-square against the exact law."""
    q = np.array([0.5, 0.25, 0.15, 0.07, 0.03])
    ids = np.array([11, 3, 7, 0, 20])
    n_draw = 60_000
    rng = np.random.default_rng(5)
    u = rng.random((n_draw, 2))
    counts = {}
    for row in u:
        a, b = sample_without_replacement(ids, q, row).tolist()
        counts[(a, b)] = counts.get((a, b), 0) + 1
    pairs = [(i, j) for i in range(5) for j in range(5) if i != j]
    expected = np.array([q[i] * q[j] / (1.0 - q[i]) for i, j in pairs])
    assert abs(expected.sum() - 1.0) < 1e-12
    observed = np.array([counts.pop((ids[i], ids[j]), 0) for i, j in pairs])
    assert not counts, f"impossible pairs drawn: {counts}"
    res = stats.chisquare(observed, expected * n_draw)
    assert res.pvalue >= 1e-4, res


def test_kernel_computes_row_normaliser_itself():
    """The private kernel, given no precomputed normaliser, cuts the nucleus the same way."""
    from resispec_gguf.kernels.sampling import _probs_sparse

    for name, logits in ROWS:
        for kw in (dict(temperature=0.7, top_p=0.9), dict(temperature=1.0, top_p=0.25, min_p=0.05)):
            ids, probs = probs_sparse(logits, cap=3, **kw)
            x = np.ascontiguousarray(logits, np.float32)
            kids, kprobs = _probs_sparse(x, kw["temperature"], 0, kw["top_p"], kw.get("min_p", 0.0), 3, -1.0, int(np.argmax(x)), np.empty(0, np.int64))
            np.testing.assert_array_equal(kids, ids, err_msg=name)
            np.testing.assert_allclose(kprobs, probs, rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("temperature", [0.01, 0.001, 1e-6])
def test_low_temperature_support_has_no_zero_probabilities(temperature):
    """At a low temperature most weights underflow to 0: they must leave the support, or the
    verifier would divide by them."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        x = rng.normal(0, 3, 1000).astype(np.float32)
        for cap in (0, 64):
            ids, probs = probs_sparse(x, temperature, 0, 1.0, 0.0, cap)
            assert (probs > 0).all() and abs(probs.sum() - 1) < 1e-12
            assert ids[0] == int(np.argmax(x))


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


def test_one_read_scan_finds_argmax_and_top_k_with_a_tail():
    """``_scan`` (one read, blocks skipped by a vectorised count): the first maximum and the
    exact top-k set, for V that is not a multiple of the block, maxima tied across blocks and
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
                assert cand.shape[0] == min(k, V) and np.all(np.diff(cand) > 0)
                np.testing.assert_array_equal(np.sort(ref_order(x)[:k]), cand)
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
    """``_scan_top`` skips blocks: the same set as ``_top_k_heap`` fed every id, and the
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
                np.testing.assert_array_equal(top, np.sort(want), err_msg=f"{name} V={V} k={k}")
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
    maxima of the first blocks): the same set and first maximum as ``_top_k_heap`` fed every
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
                np.testing.assert_array_equal(top, np.sort(want), err_msg=f"{name} V={V} k={k}")
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


def test_sample_iid_q_draws_as_sample_iid_and_reads_their_q():
    """``sample_iid_q``: the tokens ``sample_iid`` draws from the same uniforms, each with its
    probability, on random distributions, ties, zero entries and uniforms at the edges."""
    from resispec_gguf.kernels.draws import sample_iid, sample_iid_q

    rng = np.random.default_rng(31)
    for trial in range(300):
        n = int(rng.integers(1, 80))
        ids = rng.permutation(200_000)[:n].astype(np.int64)
        probs = rng.random(n) ** 3
        if trial % 3 == 0:
            probs = np.round(probs, 1)  # ties and zeros
        if trial % 5 == 0:
            probs[: n // 2] = 0.0
        if not probs.sum() > 0:
            probs[-1] = 1.0
        probs = probs / probs.sum()
        u = rng.random(int(rng.integers(1, 9)))
        u[0] = [0.0, float(np.nextafter(1.0, 0.0)), u[0]][trial % 3]
        draws, q = sample_iid_q(ids, probs, u)
        np.testing.assert_array_equal(draws, sample_iid(ids, probs, u))
        for x, qx in zip(draws.tolist(), q.tolist()):
            assert qx == probs[ids.tolist().index(x)]


def test_overlap_of_a_sparse_p_equals_the_intersect1d_sum():
    """``overlap`` with a sparse p: bit for bit ``np.minimum`` at ``np.intersect1d``'s
    common ids, summed by NumPy (auto learns from it: its choices must not move)."""
    from resispec_gguf.kernels.acceptance import overlap

    rng = np.random.default_rng(41)
    for trial in range(300):
        m, n = int(rng.integers(1, 200)), int(rng.integers(1, 70))
        pool = rng.permutation(1000)
        pids = pool[:m].astype(np.int64)
        qids = np.concatenate([pool[max(0, m - n // 2):m], pool[m:m + n]])[:n].astype(np.int64)
        rng.shuffle(qids)
        pp, qp = rng.random(m) ** 2, rng.random(qids.shape[0]) ** 2
        if trial % 4 == 0:
            pp, qp = np.round(pp, 1), np.round(qp, 1)
        _, ip, iq = np.intersect1d(pids, qids, assume_unique=True, return_indices=True)
        want = float(np.minimum(pp[ip], qp[iq]).sum())
        assert overlap((pids, pp), qids, qp) == want


def test_moved_names_stay_importable_from_sampling():
    """The draws, the token masks and the overlap figures live in their own modules; callers
    that import them from ``sampling`` get the same objects."""
    from resispec_gguf.kernels import acceptance, draws, masks, sampling

    for module, names in ((draws, draws.__all__), (masks, masks.__all__), (acceptance, ("overlap", "values_at"))):
        for name in names:
            assert getattr(sampling, name) is getattr(module, name), name


def test_probs_sparse_ids_are_read_only_on_every_path():
    """One Numba type for every q's ids, whichever path built them (the one-call kernel, or
    top-p before the cap with NumPy's normaliser), so the kernels they are handed to compile
    once (see kernels.warmup)."""
    row = np.linspace(-2.0, 2.0, 300).astype(np.float32)
    for args in ((1.0,), (0.7, 0, 0.9, 0.05, 8), (0.7, 40, 0.9, 0.0, 8), (0.0,), (1.0, 0, 1.0, 0.0, 3)):
        ids, probs = probs_sparse(row, *args)
        assert not ids.flags.writeable, args
