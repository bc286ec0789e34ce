"""Logits processing (sampling.py) compared with a naive NumPy reference.

1. ``probs_sparse`` / ``probs_dense`` against ``kernel_cases.ref_probs`` (temperature ->
   top-k -> top-p -> min-p -> renormalise, then the draft's support cap), on random rows of
   every awkward shape: V from 1 to 5000, -inf entries, one finite entry, logits of
   magnitude 1e4, ties.
2. Bad logits rows raise ValueError.
3. Without a count limit, the logit floor (entries skipped before their weight is
   computed) keeps the reference's support for every filter combination; top-p's row
   normaliser, in a row kept per thread, serves rows of any length in any thread.
4. The private kernel computes the row's normaliser itself; at low temperatures weights that
   underflow leave the support; q's ids are read-only on every path; the names that moved to
   draws, masks and acceptance stay importable from sampling.
"""

import itertools

import numpy as np
import pytest
from scipy import special

from resispec_gguf.kernels.sampling import probs_dense, probs_sparse

from kernel_cases import ATOL, ROWS, RTOL, random_logits, ref_probs


# --------------------------------------------------------------------------- references


def ref_dense(logits, **kw):
    ids, p = ref_probs(logits, **kw)
    out = np.zeros(len(logits))
    out[ids] = p
    return out


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


# --------------------------------------------------------------------------- bad rows


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


# --------------------------------------------------------------------------- the kernel, low temperatures, the module's names


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


def _rows_around_the_floor(rng, V, temperature, min_p):
    """Rows for the logit floor's test: normal, coarse ties, mostly -inf, magnitude 1e4, and
    entries sitting on min-p's floor and a few float32 steps either side of it."""
    x = rng.normal(0, 3, V)
    yield "normal", x
    yield "coarse ties", np.round(x, 0)
    y = x.copy()
    y[rng.random(V) < 0.97] = -np.inf
    y[rng.integers(V)] = 1.0
    yield "mostly -inf", y
    yield "huge", x * 1e4
    if min_p > 0.0:
        edge = np.float32(x.max() + temperature * np.log(min_p))
        steps = [edge]
        for _ in range(3):
            steps = [np.nextafter(steps[0], np.float32(-np.inf))] + steps + [np.nextafter(steps[-1], np.float32(np.inf))]
        on = x.copy()
        where = rng.choice(V, min(V - 1, 40 * len(steps)), replace=False)
        on[where] = np.array(steps)[np.arange(where.shape[0]) % len(steps)]
        yield "on the floor", on


@pytest.mark.parametrize("V", [63, 64, 65, 5000, 151_936])
def test_logit_floor_keeps_the_support_of_every_unlimited_filter(V):
    """Without a count limit, entries whose logit is below ``_logit_floor`` are skipped
    before their weight is computed: p (sparse and dense) and q equal the reference for every
    top-p / min-p / temperature / cap combination, on rows with ties, -inf entries and
    entries on the floor."""
    rng = np.random.default_rng(V)
    for temperature, top_p, min_p in itertools.product((0.3, 0.8, 1.5), (1.0, 0.9, 0.5), (0.0, 0.05, 0.5, 1.0)):
        for name, x in _rows_around_the_floor(rng, V, temperature, min_p):
            x = np.ascontiguousarray(x, np.float32)
            kw = dict(temperature=temperature, top_p=top_p, min_p=min_p)
            for cap in (0, 64):
                ids, probs = probs_sparse(x, cap=cap, **kw)
                rids, rprobs = ref_probs(x, cap=cap, **kw)
                np.testing.assert_array_equal(ids, rids, err_msg=f"{name} {kw} cap={cap}")
                rtol = RTOL if ids.shape[0] < 10_000 else 1e-10  # 100k weights summed in another order
                np.testing.assert_allclose(probs, rprobs, rtol=rtol, atol=ATOL, err_msg=f"{name} {kw} cap={cap}")
            dense = probs_dense(x, **kw)
            rids, rprobs = ref_probs(x, **kw)
            assert np.count_nonzero(dense) == rids.shape[0], f"{name} {kw} dense"
            rtol = RTOL if rids.shape[0] < 10_000 else 1e-10
            np.testing.assert_allclose(dense[rids], rprobs, rtol=rtol, atol=ATOL, err_msg=f"{name} {kw} dense")


def test_logit_floor_is_below_every_entry_that_reaches_the_weight():
    """``_logit_floor``: every float32 logit whose weight reaches the floor is at or above it,
    and it is tight (within a few float32 steps of the exact threshold)."""
    from resispec_gguf.kernels.sampling import _logit_floor

    rng = np.random.default_rng(3)
    assert _logit_floor(np.float32(1.0), 0.0, 0.8) == -np.inf
    for _ in range(300):
        bv = np.float32(rng.choice([0.0, -0.0, 1e4, -1e4]) + rng.normal(0, 30))
        temperature = float(rng.choice([1e-3, 0.3, 0.8, 1.0, 1.7]))
        floor_w = float(rng.choice([1.0, 0.5, 0.05, 1e-6, 1e-30]) * rng.uniform(0.5, 1.0))
        lo = _logit_floor(bv, floor_w, temperature)
        exact = np.float32(bv + temperature * np.log(floor_w))
        v = exact
        for _ in range(8):
            v = np.nextafter(v, np.float32(-np.inf))
        for _ in range(16):
            w = np.exp((np.float64(v) - np.float64(bv)) * (1.0 / temperature))
            if w >= floor_w:
                assert v >= lo, (bv, temperature, floor_w, v, lo)
            v = np.nextafter(v, np.float32(np.inf))
        assert lo > exact - 1e-6 * (1 + abs(float(exact))), (bv, temperature, floor_w, lo, exact)


def test_row_normaliser_serves_rows_of_any_length_in_any_thread():
    """Top-p's row normaliser works in a float64 row kept per thread: rows longer and
    shorter than the last one, in the main thread and in another, give the reference's p."""
    import threading

    rng = np.random.default_rng(9)
    rows = [rng.normal(0, 3, V).astype(np.float32) for V in (5000, 100, 20_000, 7)]
    kw = dict(temperature=0.8, top_p=0.9, min_p=0.01)
    got = {}

    def run(name):
        got[name] = [probs_sparse(x, **kw) for x in rows]

    worker = threading.Thread(target=run, args=("worker",))
    worker.start()
    run("main")
    worker.join()
    for name, results in got.items():
        for x, (ids, probs) in zip(rows, results):
            rids, rprobs = ref_probs(x, **kw)
            np.testing.assert_array_equal(ids, rids, err_msg=name)
            np.testing.assert_allclose(probs, rprobs, rtol=RTOL, atol=ATOL, err_msg=name)


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
