"""Exactness proofs for the node verifiers (verify.py), continued from test_verify.py (2b, 2c):
the kernel's output law, by exhaustive draws (``kernel_cases.candidate_distribution``), is p
to 1e-12 with one or several deterministic candidates checked ahead of the draws, and with a
sparse target (the node's own small vocabulary) it gives the dense kernel's result.
"""

import numpy as np
import pytest
from scipy import stats

from resispec_gguf.kernels import verify
from resispec_gguf.kernels.draws import sample_iid, sample_without_replacement

from kernel_cases import (
    _ALMOST_ONE,
    IID,
    KERNEL_CASES,
    ZERO_Q_CASES,
    _random_dist,
    candidate_distribution,
    kernel_distribution,
)


# --------------------------------------------------------------------------- 2b. candidate


def candidate_cases(seed=3, per_k=25):
    """(name, p, q, k, x0) for K = 0..3 and the candidate positions that matter."""
    rng = np.random.default_rng(seed)
    cases = []
    for k in range(4):
        for i in range(per_k):
            v = int(rng.integers(2, 6 if k == 3 else 7))
            p = _random_dist(rng, v, ["dirichlet", "dirichlet", "sparse"][i % 3])
            q = _random_dist(rng, v, ["dirichlet", "sparse", "onehot"][i % 3])
            role = ["outside supp q", "p(x0) = 0", "p(x0) = 1", "mode of q", "any"][i % 5]
            if role == "outside supp q" and (q == 0).any():
                x0 = int(rng.choice(np.flatnonzero(q == 0)))
            elif role == "p(x0) = 0" and (p > 0).sum() > 1:
                x0 = int(rng.integers(v))
                p[x0] = 0.0
                p /= p.sum()
            elif role == "p(x0) = 1":
                x0 = int(rng.integers(v))
                p = np.eye(v)[x0]
            elif role == "mode of q":
                x0 = int(np.argmax(q))
            else:
                role, x0 = "any", int(rng.integers(v))
            cases.append((f"K={k} {role} {i} V={v}", p, q, k, x0))
    return cases


CANDIDATE_CASES = candidate_cases()


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_candidate_enumeration_is_exact(method):
    roles = set()
    for i, (name, p, q, k, x0) in enumerate(CANDIDATE_CASES):
        if method == "chain" and k > 1:
            continue
        support = (None, None) if k == 0 and i % 2 else None  # a lookup-only node may omit q
        err = np.abs(candidate_distribution(method, p, x0, q, k, support) - p).max()
        assert err <= 1e-12, (method, name, err)
        roles.add(name.split(" ", 1)[1].rsplit(" ", 2)[0])
    assert roles == {"outside supp q", "p(x0) = 0", "p(x0) = 1", "mode of q", "any"}


def test_candidate_accepted_index():
    p, q = np.array([0.2, 0.3, 0.5]), np.array([0.5, 0.5])  # p' = (0.4, 0.6, 0) after x0 = 2
    almost = _ALMOST_ONE
    def vw(method, p, x0, qids, qprobs, draws, u):
        return verify.verify_checked(method, p, (qids, qprobs), draws, u, x0=x0)

    assert vw("resispec", p, 2, [0, 1], q, [0, 1], [0.49, 0.0, 0.0, 0.0]) == (2, 0)
    assert vw("specinfer", p, 2, [0, 1], q, [0, 1], [0.5, 0.0, 0.0, 0.0]) == (0, 1)
    assert vw("rrs", p, 2, [0, 1], q, [0, 1], [0.5, almost, 0.0, 0.0]) == (1, 2)
    assert vw("specinfer", p, 2, [0, 1], q, [], [0.9, 0.2]) == (0, -1)  # lookup only: from p'
    assert vw("chain", p, 2, None, None, [], [0.9, 0.7]) == (1, -1)
    # p(x0) = 1 is always accepted, p(x0) = 0 never
    assert vw("specinfer", np.eye(3)[1], 1, [0, 1], q, [0], [almost, 0.0, 0.0]) == (1, 0)
    assert vw("specinfer", np.eye(3)[1], 0, [0, 1], q, [1], [0.0, 0.0, 0.0]) == (1, 1)
    assert vw("rrs", np.eye(3)[1], 2, None, None, [], [0.0, 0.3]) == (1, -1)
    # a draw equal to the rejected candidate is never accepted: p'(x0) = 0
    for method in IID + ("rrs",):
        assert vw(method, p, 0, [0, 1], q, [0], [almost, 0.0, 0.1]) == (2, -1), method


def several_candidate_cases(seed=11, per_k=24):
    """(name, p, q, k, xs): m = 2..4 distinct candidates ahead of K = 0..3 draws, with the
    roles that matter among them: outside supp q, p = 0, all of p's mass on the candidates,
    one-hot p on the last candidate, q's top tokens."""
    rng = np.random.default_rng(seed)
    cases = []
    for k in range(4):
        for i in range(per_k):
            v = int(rng.integers(4, 6 if k == 3 else 8))
            m = int(rng.integers(2, min(4, v - 1) + 1))
            p = _random_dist(rng, v, ["dirichlet", "dirichlet", "sparse"][i % 3])
            q = _random_dist(rng, v, ["dirichlet", "sparse", "onehot"][(i // 6) % 3])
            role = ["outside supp q", "p = 0", "mass on the candidates", "one-hot on the last", "top of q", "any"][i % 6]
            xs = rng.permutation(v)[:m]
            if role == "outside supp q" and (q == 0).any():
                xs[0] = int(rng.choice(np.flatnonzero(q == 0)))
                xs = np.concatenate([xs[:1], [x for x in rng.permutation(v) if x != xs[0]][: m - 1]])
            elif role == "p = 0" and (p > 0).sum() > m:
                p[xs[: m - 1]] = 0.0
                p /= p.sum()
            elif role == "mass on the candidates":
                p = np.zeros(v)
                p[xs] = rng.dirichlet(np.ones(m))
            elif role == "one-hot on the last":
                p = np.eye(v)[xs[-1]]
            elif role == "top of q":
                xs = np.argsort(-q, kind="stable")[:m]
            elif role != "one-hot on the last":
                role = "any"
            cases.append((f"K={k} {role} {i} V={v} m={m}", p, q, k, [int(x) for x in xs]))
    return cases


SEVERAL_CASES = several_candidate_cases()


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_several_candidates_enumeration_is_exact(method):
    """Several deterministic candidates checked in order, then the draws against p without
    them: the output law is p (1e-12), dense and with a sparse target."""
    roles = set()
    for i, (name, p, q, k, xs) in enumerate(SEVERAL_CASES):
        if method == "chain" and k > 1:
            continue
        support = (None, None) if k == 0 and i % 2 else None
        err = np.abs(candidate_distribution(method, p, xs, q, k, support) - p).max()
        assert err <= 1e-12, (method, name, err)
        qids = np.flatnonzero(q).astype(np.int64)
        pids, pp = _sparse_target(p)

        def run(d, u, qids=qids, q=q, pids=pids, pp=pp, xs=xs):
            return verify.verify(method, (pids, pp), (qids, q[qids]), d, u, np.array(xs, np.int64))

        err = np.abs(candidate_distribution(method, p, xs, q, k, run=run) - p).max()
        assert err <= 1e-12, (method, "sparse", name, err)
        roles.add(name.split(" ", 1)[1].rsplit(" ", 3)[0])
    assert roles == {"outside supp q", "p = 0", "mass on the candidates", "one-hot on the last", "top of q", "any"}


def test_several_candidates_accepted_index():
    """Candidate j is accepted with p(x_j) / (1 - p(earlier)); index m + i is draw i."""
    p, q = np.array([0.2, 0.3, 0.4, 0.1]), np.array([0.5, 0.5])
    almost = _ALMOST_ONE

    def vw(method, xs, draws, u, qids=(0, 1)):
        return verify.verify_checked(method, p, (list(qids), q) if qids else None, draws, u, x0=xs)

    assert vw("resispec", [2, 1], [0], [0.39, 0.0, 0.0, 0.0]) == (2, 0)
    # reached: 1 - 0.4 left; 0.3 / 0.6 = 0.5
    assert vw("resispec", [2, 1], [0], [0.41, 0.49, 0.0, 0.0]) == (1, 1)
    assert vw("resispec", [2, 1], [0], [0.41, 0.51, 0.0, 0.0]) == (0, 2)
    # both rejected: the draw of token 1 (a candidate) is never accepted, p' = (2/3, 0, 0, 1/3)
    for method in IID + ("rrs",):
        assert vw(method, [2, 1], [1], [almost, almost, 0.0, 0.1]) == (0, -1), method
    assert vw("chain", [2, 1, 0], [], [almost, almost, almost, 0.3], qids=None) == (3, -1)
    # all of p on the candidates: the last is accepted once the others are rejected
    p2 = np.array([0.5, 0.0, 0.5, 0.0])
    assert verify.verify_checked("resispec", p2, None, [], [almost, 0.0, 0.5], x0=[0, 2]) == (2, 1)
    with pytest.raises(ValueError, match="distinct"):
        vw("resispec", [2, 2], [0], [0.5] * 4)
    with pytest.raises(ValueError, match=r"len\(draws\) \+ 3"):
        vw("resispec", [2, 1], [0], [0.5] * 3)


@pytest.mark.parametrize("method", ["resispec", "rrs"])
def test_several_candidates_statistical_exactness(method):
    """Three guesses (the target's 2nd, 5th and a token q lacks) ahead of 3 draws from the
    sampling module, at a realistic vocabulary: chi-square against p."""
    rng = np.random.default_rng(5)
    v, k, n = 64, 3, 40_000
    p = rng.dirichlet(np.full(v, 0.3))
    q = np.where(rng.random(v) < 0.5, rng.dirichlet(np.full(v, 0.3)), 0.0)
    q /= q.sum()
    order = np.argsort(-p)
    xs = [int(order[1]), int(order[4]), int(np.flatnonzero(q == 0)[0])]
    qids = np.flatnonzero(q).astype(np.int64)
    toks = np.empty(n, np.int64)
    idxs = np.empty(n, np.int64)
    for i in range(n):
        u = rng.random(k)
        draws = sample_without_replacement(qids, q[qids], u) if method == "rrs" else sample_iid(qids, q[qids], u)
        toks[i], idxs[i] = verify.verify(method, p, (qids, q[qids]), draws, rng.random(len(xs) + k + 1), xs)
    for j, x in enumerate(xs):  # a candidate comes only from its own stage
        assert ((toks == x) == (idxs == j)).all()
    counts = np.bincount(toks, minlength=v)
    big = p * n >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(p[big] * n, p[~big].sum() * n)
    assert stats.chisquare(obs, exp).pvalue > 1e-4


# --------------------------------------------------------------------------- 2c. a sparse target


def _spread(v, stride=3):
    """Token i of a small case becomes ``stride * i + 1`` of a vocabulary with tokens of
    p = q = 0 around and between them."""
    return stride * np.arange(v) + 1, stride * v + 2


def _sparse_target(p_big):
    """``(pids, pprobs)`` as ``sampling.probs_sparse`` gives them: the support of p, by
    probability descending."""
    ids = np.flatnonzero(p_big)
    order = np.lexsort((ids, -p_big[ids]))
    return ids[order].astype(np.int64), p_big[ids[order]]


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_sparse_target_enumeration_is_exact(method):
    """``verify`` (the node's own small vocabulary) has the law p on the
    kernel cases, the cases with q = 0 entries, and with a candidate first (K = 0..3,
    candidates outside supp p and supp q), in a vocabulary with unused tokens around."""
    for name, p, q, k in KERNEL_CASES:
        k = 1 if method == "chain" else k
        where, V = _spread(len(p))
        pb, qb = np.zeros(V), np.zeros(V)
        pb[where], qb[where] = p, q
        pids, pp = _sparse_target(pb)
        qids = np.flatnonzero(qb)

        def run(d, u):
            return verify.verify(method, (pids, pp), (qids, qb[qids]), d, u, -1)

        err = np.abs(kernel_distribution(method, pb, qb, k, run=run) - pb).max()
        assert err <= 1e-12, (method, name, err)
    for name, p, q, k, qids, qp in ZERO_Q_CASES:
        k = 1 if method == "chain" else k
        where, V = _spread(len(p))
        pb, qb = np.zeros(V), np.zeros(V)
        pb[where], qb[where] = p, q
        pids, pp = _sparse_target(pb)
        bq = where[qids]

        def run(d, u):
            return verify.verify(method, (pids, pp), (bq, qp), d, u, -1)

        err = np.abs(kernel_distribution(method, pb, qb, k, run=run) - pb).max()
        assert err <= 1e-12, (method, "zero q", name, err)
    for i, (name, p, q, k, x0) in enumerate(CANDIDATE_CASES):
        if method == "chain" and k > 1:
            continue
        where, V = _spread(len(p))
        pb, qb = np.zeros(V), np.zeros(V)
        pb[where], qb[where] = p, q
        pids, pp = _sparse_target(pb)
        qids = np.flatnonzero(qb)
        support = (None, None) if k == 0 and i % 2 else (qids, qb[qids])
        bx0 = int(where[x0]) if i % 7 else V - 1  # some candidates have p = q = 0

        def run(d, u):
            return verify.verify(method, (pids, pp), (support[0], support[1]), d, u, bx0)

        err = np.abs(candidate_distribution(method, pb, bx0, qb, k, run=run) - pb).max()
        assert err <= 1e-12, (method, "candidate", name, err)


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_sparse_target_gives_the_dense_result(method):
    """Same uniforms, same (token, index) as the dense kernels at a Qwen-sized vocabulary."""
    from resispec_gguf.kernels import sampling
    from resispec_gguf.kernels.draws import sample_dense, sample_sparse

    rng = np.random.default_rng(9)
    V, k = 151_936, 1 if method == "chain" else 4
    for trial in range(60):
        x = (rng.normal(0, 2.5, V) + 8 * (rng.random(V) < 1e-4)).astype(np.float32)
        d = (x + rng.normal(0, 1.0, V)).astype(np.float32)
        pids, pp = sampling.probs_sparse(x, 0.8, 40, 0.95, 0.05)
        p = sampling.probs_dense(x, 0.8, 40, 0.95, 0.05)
        qids, qp = sampling.probs_sparse(d, 0.8, 40, 0.95, 0.05, 64)
        sample = sample_without_replacement if method == "rrs" else sample_iid
        draws = sample(qids, qp, rng.random(k))
        x0 = int(rng.choice(pids)) if trial % 3 == 0 else (int(rng.integers(V)) if trial % 3 == 1 else -1)
        u = rng.random(len(draws) + (2 if x0 >= 0 else 1))
        if x0 >= 0:
            dense = verify.verify(method, p, (qids, qp), draws, u, x0)
        else:
            dense = verify.verify(method, p, (qids, qp), draws, u)
        assert verify.verify(method, (pids, pp), (qids, qp), draws, u, x0) == dense, trial
        assert sample_sparse(pids, pp, u[-1]) == sample_dense(p, u[-1])
