"""Draws (draws.py): ``sample_iid`` / ``sample_dense`` against ``np.searchsorted`` on the
cumulative sum; ``sample_iid_q`` against ``sample_iid``; ``sample_without_replacement``
against a sequential reference and, statistically, the exact law of ordered pairs.
"""

import itertools

import numpy as np
from scipy import stats

from resispec_gguf.kernels.draws import sample_dense, sample_iid, sample_without_replacement


# --------------------------------------------------------------------------- references


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


# --------------------------------------------------------------------------- iid and dense draws


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


# --------------------------------------------------------------------------- draws without replacement


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
