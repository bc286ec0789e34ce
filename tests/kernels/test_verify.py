"""Exactness proofs for the node verifiers (verify.py).

1. A naive reference of every method (kernel_cases' stage rules, enumerated here), written
   from the rules in verify's module docstring, whose output distribution is computed by
   enumerating every draw sequence: it must equal p to 1e-12.
2. The Numba kernel itself, driven through exhaustive draws with its accept thresholds and
   fallback CDF recovered by bisection on the uniforms (``kernel_cases.kernel_law``): it
   must equal p to 1e-12 — on the reference's cases, with zero-probability entries in q,
   through the validating wrappers, with a deterministic candidate first, with a sparse
   target, and (inverse CDF) at a Qwen-sized vocabulary.
3. Seeded chi-square tests of ``verify_checked`` / ``verify`` on realistic vocabularies.
4. Greedy: one-hot p always yields the argmax.  Input validation of the wrappers.  The
   acceptance figures stay importable from verify.
"""

import numpy as np
import pytest
from scipy import stats

from resispec_gguf.kernels import acceptance, verify
from resispec_gguf.kernels.acceptance import expected_acceptance, schedule
from resispec_gguf.kernels.draws import sample_iid, sample_without_replacement
from resispec_gguf.kernels.verify import verify_checked

from kernel_cases import (
    _ALMOST_ONE,
    CASES,
    IID,
    ZERO_Q_CASES,
    _norm,
    _random_dist,
    candidate_distribution,
    kernel_distribution,
    make_cases,
    ref_resispec_rules,
    ref_specinfer_rules,
)


# --------------------------------------------------------------------------- 1. reference


def ref_iid_distribution(method, p, q, k):
    """Output distribution by enumerating all V^K draw sequences."""
    if method == "chain":
        k = 1
        rules, fallback = ref_specinfer_rules(p, q, 1)
    elif method == "specinfer":
        rules, fallback = ref_specinfer_rules(p, q, k)
    else:
        rules, fallback = ref_resispec_rules(p, q, k)
    out = np.zeros_like(p)
    supp = np.flatnonzero(q)

    def walk(stage, weight):
        if stage == k:
            out[:] += weight * fallback
            return
        for x in supp:
            w = weight * q[x]
            a = rules[stage][x]
            out[x] += w * a
            if a < 1.0:
                walk(stage + 1, w * (1.0 - a))

    walk(0, 1.0)
    return out


def ref_rrs_distribution(p, q, k):
    out = np.zeros_like(p)

    def walk(stage, weight, ps, qs):
        if stage == k or qs.sum() <= 0:
            out[:] += weight * ps
            return
        resid = np.maximum(0.0, ps - qs)
        for x in np.flatnonzero(qs):
            w = weight * qs[x]
            a = min(1.0, ps[x] / qs[x])
            out[x] += w * a
            if a < 1.0:
                rest = qs.copy()
                rest[x] = 0.0
                walk(stage + 1, w * (1.0 - a), _norm(resid), _norm(rest))

    walk(0, 1.0, p.copy(), q.copy())
    return out


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_reference_enumeration_is_exact(method):
    worst = 0.0
    for name, p, q, k in CASES:
        if method == "rrs":
            dist = ref_rrs_distribution(p, q, k)
        else:
            dist = ref_iid_distribution(method, p, q, k)
        err = np.abs(dist - p).max()
        worst = max(worst, err)
        assert err <= 1e-12, (method, name, err)
    assert worst <= 1e-12


# --------------------------------------------------------------------------- 2. kernel


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_kernel_enumeration_on_reference_cases(method):
    """The package's kernel on every case the reference is proved on."""
    for name, p, q, k in CASES:
        if method == "chain":
            k = 1
        err = np.abs(kernel_distribution(method, p, q, k) - p).max()
        assert err <= 1e-12, (method, name, err)


KERNEL_CASES = make_cases(40, max_v=5, max_k=3, seed=1)


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_kernel_enumeration_is_exact(method):
    for name, p, q, k in KERNEL_CASES:
        if method == "chain":
            k = 1
        dist = kernel_distribution(method, p, q, k)
        err = np.abs(dist - p).max()
        assert err <= 1e-12, (method, name, err)


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_zero_q_entries_keep_every_path_exact(method):
    """q entries equal to 0 in (qids, qprobs) — unvalidated, validated and with a candidate."""
    for name, p, q, k, qids, qp in ZERO_Q_CASES:
        assert (qp == 0).any()
        k = 1 if method == "chain" else k
        paths = {
            "verify": lambda d, u: verify.verify(method, p, (qids, qp), d, u),
            "verify_checked": lambda d, u: verify.verify_checked(method, p, (qids, qp), d, u),
        }
        for path, run in paths.items():
            err = np.abs(kernel_distribution(method, p, q, k, run=run) - p).max()
            assert err <= 1e-12, (method, path, name, err)
        for x0 in qids[qp == 0][:1].tolist() + qids[qp > 0][:1].tolist():
            err = np.abs(candidate_distribution(method, p, x0, q, k, (qids, qp)) - p).max()
            assert err <= 1e-12, (method, "with candidate", x0, name, err)


def _inverse_cdf_checks(res):
    """(u, token) pairs pinning the inverse CDF of the vector res: for every token with mass,
    the middle of its CDF step and points 1e-12 inside both ends."""
    cdf = np.cumsum(res) / res.sum()
    toks = np.flatnonzero(res > 0)
    left = np.concatenate(([0.0], cdf[toks][:-1]))
    right = cdf[toks]
    assert (right - left).min() > 1e-9  # every step far wider than the probes' margin
    us = np.concatenate((left + 1e-12, 0.5 * (left + right), np.minimum(right - 1e-12, _ALMOST_ONE)))
    return us, np.tile(toks, 3)


def test_fallback_law_across_blocks_at_qwen_vocabulary():
    """The fallback's block-sum sampler at V = 151,936 (74 full blocks and a partial one):
    mass in the first and the last partial block, empty blocks between, a block whose
    p-mass is fully covered by c q (zero residual), tokens 0 and V - 1.  For uniforms at
    every residual step the token must be the residual's inverse CDF, computed in NumPy."""
    v, block = 151_936, verify._BLOCK
    n_blocks = -(-v // block)
    assert v % block and n_blocks > 2
    rng = np.random.default_rng(11)
    groups = {0: 6, 3: 10, 40: 8, n_blocks - 1: 6}  # block -> number of tokens with p > 0
    p = np.zeros(v)
    ids = {}
    for b, n in groups.items():
        hi = min((b + 1) * block, v)
        ids[b] = np.sort(rng.choice(np.arange(b * block, hi), n, replace=False))
    ids[0][0], ids[n_blocks - 1][-1] = 0, v - 1
    for b, share in zip(groups, (0.25, 0.2, 0.3, 0.25)):
        p[ids[b]] = share * rng.dirichlet(np.full(len(ids[b]), 5.0))
    p /= p.sum()
    dead = np.arange(10 * block + 5, 10 * block + 10)  # q > 0, p = 0: draws that never pass
    q = np.zeros(v)
    q[ids[3]] = 2.5 * p[ids[3]]  # r < 1 <= c: block 3's residual is empty
    q[dead] = 0.06
    q[ids[40][:3]] = 0.5 * p[ids[40][:3]]
    q[v - 1] = 0.3 * p[v - 1]
    q /= q.sum()
    qids = np.flatnonzero(q)
    qp = q[qids]
    x0 = int(ids[40][np.argmax(p[ids[40]])])  # a candidate with mass, rejected below

    def residual(method, target, k):
        if method == "rrs":  # the reference rule, dense
            ps, qs = target.copy(), q.copy()
            for x in dead[:k]:
                ps = _norm(np.maximum(0.0, ps - qs))
                qs[x] = 0.0
                qs = _norm(qs)
            return ps
        c = schedule(method, target, q, k)[2] if k else 0.0
        return np.maximum(0.0, target - c * q)

    p_wo = p.copy()
    p_wo[x0] = 0.0
    p_wo /= p_wo.sum()
    for method in IID + ("rrs",):
        k = 1 if method == "chain" else 3
        draws = dead[:k].copy()
        for with_x0 in (False, True):
            res = residual(method, p_wo if with_x0 else p, k)
            # what the test is about: mass in the first and the last (partial) block, none in
            # block 3 although p has mass there
            assert res[ids[3]].max() == 0 and res[:block].sum() > 0 and res[-(v % block):].sum() > 0
            for u_fb, tok in zip(*_inverse_cdf_checks(res)):
                if with_x0:
                    u = np.concatenate(([_ALMOST_ONE], np.zeros(k), [u_fb]))
                    got = verify.verify(method, p, (qids, qp), draws, u, x0)
                else:
                    got = verify.verify(method, p, (qids, qp), draws, np.append(np.zeros(k), u_fb))
                assert got == (tok, -1), (method, with_x0, u_fb, tok, got)
    # a lookup-only node (K = 0) samples p without x0
    for u_fb, tok in zip(*_inverse_cdf_checks(p_wo)):
        got = verify.verify("resispec", p, (None, None), dead[:0], np.array([_ALMOST_ONE, u_fb]), x0)
        assert got == (tok, -1), (u_fb, tok, got)


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


# --------------------------------------------------------------------------- 3. statistics


def _zipf_pair(rng, v, temperature):
    ranks = np.arange(1, v + 1)
    logits = -1.1 * np.log(ranks) + rng.normal(0, 0.3, v)
    logits = logits[rng.permutation(v)]
    draft = logits + rng.normal(0, 0.8, v)
    p = np.exp((logits - logits.max()) / temperature)
    q = np.exp((draft - draft.max()) / temperature)
    return p / p.sum(), q / q.sum()


def _chi2_pvalue(counts, p, n):
    expected = p * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 5:  # fold a tiny tail into the largest cell
        obs[np.argmax(exp[:-1])] += obs[-1]
        exp[np.argmax(exp[:-1])] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    assert obs.sum() == n
    return stats.chisquare(obs, exp * (n / exp.sum())).pvalue


@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("method,v,k", [("chain", 50, 1), ("specinfer", 200, 4), ("rrs", 1000, 4), ("resispec", 200, 6)])
def test_statistical_exactness(method, v, k, temperature):
    rng = np.random.default_rng(1234 + v + k)
    p, q = _zipf_pair(rng, v, temperature)
    qids = np.flatnonzero(q)
    n = 200_000
    counts = np.zeros(v, np.int64)
    accepted = 0
    for _ in range(n):
        ud = rng.random(k)
        if method == "rrs":
            draws = sample_without_replacement(qids, q[qids], ud)
        else:
            draws = sample_iid(qids, q[qids], ud)
        tok, idx = verify_checked(method, p, q, draws, rng.random(len(draws) + 1))
        counts[tok] += 1
        accepted += idx >= 0
    assert _chi2_pvalue(counts, p, n) >= 1e-4
    # the empirical acceptance rate agrees with the exact expectation
    acc = expected_acceptance(method, p, q, k) if method != "rrs" else None
    if acc is not None:
        assert abs(accepted / n - acc) < 5 * np.sqrt(acc * (1 - acc) / n) + 1e-9


@pytest.mark.parametrize("method,k", [("chain", 1), ("specinfer", 3), ("rrs", 3), ("resispec", 3), ("resispec", 0)])
def test_candidate_statistical_exactness(method, k):
    """A lookup guess x0 (the target's third choice) ahead of K draws from the sampling module."""
    rng = np.random.default_rng(4321 + k)
    v, n = 300, 40_000
    p, q = _zipf_pair(rng, v, 0.8)
    qids = np.flatnonzero(q)
    x0 = int(np.argsort(p)[-3])
    draw = sample_without_replacement if method == "rrs" else sample_iid
    ud, uv = rng.random((n, k)), rng.random((n, k + 2))
    toks, idxs = np.empty(n, np.int64), np.empty(n, np.int64)
    for i in range(n):
        draws = draw(qids, q[qids], ud[i])
        toks[i], idxs[i] = verify.verify(method, p, (qids, q[qids]), draws, uv[i], x0)
    assert _chi2_pvalue(np.bincount(toks, minlength=v), p, n) >= 1e-4
    assert ((toks == x0) == (idxs == 0)).all()  # p'(x0) = 0: x0 comes only from its own stage
    hit = (idxs == 0).mean()
    assert abs(hit - p[x0]) < 5 * np.sqrt(p[x0] * (1 - p[x0]) / n)
    assert idxs.min() >= -1 and idxs.max() <= k


# --------------------------------------------------------------------------- 4. greedy, errors, names


def test_greedy_one_hot_p_always_gives_argmax():
    rng = np.random.default_rng(5)
    for _ in range(300):
        v = int(rng.integers(2, 40))
        p = np.zeros(v)
        best = int(rng.integers(v))
        p[best] = 1.0
        q = rng.dirichlet(np.ones(v))
        for method in IID + ("rrs",):
            k = 1 if method == "chain" else int(rng.integers(1, 5))
            qids = np.flatnonzero(q)
            ud = rng.random(k)
            draws = (sample_without_replacement if method == "rrs" else sample_iid)(qids, q[qids], ud)
            tok, idx = verify_checked(method, p, q, draws, rng.random(len(draws) + 1))
            assert tok == best
            assert idx == -1 or draws[idx] == best
    assert verify.verify_greedy(3, [5, 3, 1]) == (3, 1)
    assert verify.verify_greedy(4, [5, 3, 1]) == (4, -1)


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        (dict(method="nope"), "unknown method"),
        (dict(p=np.array([0.5, 0.6])), "sum to 1"),
        (dict(q=np.array([0.5, 0.5, 0.0])), "expected 2"),
        (dict(draws=[1], u=[0.5]), "len\\(draws\\) \\+ 1"),
        (dict(u=[0.5, 1.0]), r"\[0, 1\)"),
        (dict(method="chain", draws=[0, 1], u=[0.1, 0.1, 0.1]), "exactly one"),
        (dict(q=np.array([1.0, 0.0])), "q > 0"),
        (dict(method="rrs", draws=[1, 1], u=[0.1, 0.1, 0.1]), "distinct"),
        (dict(p=np.array([np.nan, 1.0])), "finite"),
    ],
)
def test_verify_node_rejects_bad_input(kwargs, msg):
    args = dict(method="resispec", p=np.array([0.5, 0.5]), q=np.array([0.5, 0.5]), draws=[1], u=[0.5, 0.5])
    args.update(kwargs)
    with pytest.raises(ValueError, match=msg):
        verify_checked(args["method"], args["p"], args["q"], args["draws"], args["u"])


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        (dict(method="nope"), "unknown method"),
        (dict(x0=3), r"x0 must be a token id in \[0, 3\)"),
        (dict(x0=-1), r"x0 must be a token id in \[0, 3\)"),
        (dict(x0=1.0), "x0 must be an integer token id"),
        (dict(u=[0.5, 0.5]), r"len\(draws\) \+ 2 = 3"),
        (dict(draws=[], u=[0.5]), r"len\(draws\) \+ 2 = 2"),
        (dict(u=[0.5, 0.5, 1.0]), r"\[0, 1\)"),
        (dict(method="chain", draws=[0, 1], u=[0.1] * 4), "chain verifies at most one draw"),
        (dict(draws=[2]), "q > 0"),
        (dict(method="rrs", draws=[1, 1], u=[0.1] * 4), "distinct"),
        (dict(qids=None, qprobs=None), "draws need the q they were drawn from"),
        (dict(p=np.array([0.5, 0.6, 0.0])), "sum to 1"),
        (dict(qprobs=[0.5, 0.6]), "q must sum to 1"),
        (dict(draws=[[0]]), "1-D array"),
    ],
)
def test_verify_with_candidate_rejects_bad_input(kwargs, msg):
    args = dict(method="resispec", p=np.array([0.2, 0.3, 0.5]), x0=2, qids=[0, 1], qprobs=[0.5, 0.5], draws=[1], u=[0.5, 0.5, 0.5])
    args.update(kwargs)
    with pytest.raises(ValueError, match=msg):
        verify.verify_checked(args["method"], args["p"], (args["qids"], args["qprobs"]), args["draws"], args["u"], x0=args["x0"])


def test_verify_with_candidate_accepts_lookup_only_nodes():
    p = np.array([0.2, 0.3, 0.5])
    for qids, qprobs in ((None, None), ([], []), ([0, 1], [0.5, 0.5])):
        assert verify.verify_checked("rrs", p, (qids, qprobs), [], [0.9, 0.99], x0=2) == (1, -1)
    assert verify.verify_checked("chain", p, (None, None), np.array([], np.int64), [0.1, 0.0], x0=np.int64(2)) == (2, 0)


def test_acceptance_figures_stay_importable_from_verify():
    """The exact acceptance figures live in ``acceptance``; callers that import them from
    ``verify`` get the same objects."""
    for name in ("schedule", "expected_acceptance", "optimal_acceptance", "acceptance_profile", "draw_chances",
                 "expected_distinct"):
        assert getattr(verify, name) is getattr(acceptance, name), name
