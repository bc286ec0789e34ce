"""Exact acceptance figures (acceptance.py).

1. ResiSpec = sum min(p, F1 q) >= SpecInfer, <= alpha*, = the LP optimum; every method's
   expected acceptance against the reference rules (rrs: brute force over draw orders);
   alpha* as the minimum over all subsets; ``expected_distinct``.
2. What auto learns: ``acceptance_profile`` for every K at once, ``draw_chances`` against
   the reference rules and against the verifier itself, and ``overlap`` against
   ``np.intersect1d``.
"""

import itertools

import numpy as np
import pytest
from scipy import optimize

from resispec_gguf.kernels import acceptance, verify
from resispec_gguf.kernels.acceptance import expected_acceptance, optimal_acceptance, schedule
from resispec_gguf.kernels.draws import sample_iid

from kernel_cases import CASES, IID, _norm, draw_sequences, ref_resispec_rules, ref_specinfer_rules


# --------------------------------------------------------------------------- 1. acceptance


def lp_optimum(p, q, k):
    """max sum m_i(x) s.t. m_i(x) <= P_i q(x), sum_i m_i(x) <= p(x), P_{i+1} = P_i - sum_x m_i(x)."""
    v = len(p)
    nm = k * v
    nvar = nm + k + 1  # m, then P_1..P_{K+1}
    c = np.zeros(nvar)
    c[:nm] = -1.0
    a_ub, b_ub = [], []
    for i in range(k):
        for x in range(v):
            row = np.zeros(nvar)
            row[i * v + x] = 1.0
            row[nm + i] = -q[x]
            a_ub.append(row)
            b_ub.append(0.0)
    for x in range(v):
        row = np.zeros(nvar)
        row[[i * v + x for i in range(k)]] = 1.0
        a_ub.append(row)
        b_ub.append(p[x])
    a_eq, b_eq = [], []
    row = np.zeros(nvar)
    row[nm] = 1.0
    a_eq.append(row)
    b_eq.append(1.0)
    for i in range(k):
        row = np.zeros(nvar)
        row[nm + i + 1] = 1.0
        row[nm + i] = -1.0
        row[i * v : (i + 1) * v] = 1.0
        a_eq.append(row)
        b_eq.append(0.0)
    res = optimize.linprog(c, A_ub=np.array(a_ub), b_ub=b_ub, A_eq=np.array(a_eq), b_eq=b_eq, bounds=(0, None), method="highs")
    assert res.status == 0
    return -res.fun


def ref_rrs_acceptance(p, q, k):
    """P(some stage accepts) for rrs: brute force over every ordered draw without replacement,
    each stage's acceptance from the reference rule along that order."""
    acc = 0.0
    seqs, weights = draw_sequences("rrs", q, k)
    for seq, w in zip(seqs, weights):
        ps, qs, all_reject = p.copy(), q.copy(), 1.0
        for x in seq:
            all_reject *= 1.0 - min(1.0, ps[x] / qs[x])
            ps = _norm(np.maximum(0.0, ps - qs))
            qs[x] = 0.0
            qs = _norm(qs)
        acc += w * (1.0 - all_reject)
    return acc


def test_resispec_acceptance_identities():
    for name, p, q, k in CASES:
        res = expected_acceptance("resispec", p, q, k)
        _, _, f1 = schedule("resispec", p, q, k)
        assert abs(res - np.minimum(p, f1 * q).sum()) <= 1e-12, name
        assert res >= expected_acceptance("specinfer", p, q, k) - 1e-12, name
        assert res <= optimal_acceptance(p, q, k) + 1e-12, name
        if k == 1:
            assert abs(res - expected_acceptance("chain", p, q, 1)) <= 1e-12


def test_resispec_is_the_lp_optimum():
    for name, p, q, k in CASES[:120]:
        assert abs(expected_acceptance("resispec", p, q, k) - lp_optimum(p, q, k)) <= 1e-7, name


def test_expected_acceptance_matches_reference_enumeration():
    for name, p, q, k in CASES[:100]:
        for method in IID:
            kk = 1 if method == "chain" else k
            rules, _ = (ref_specinfer_rules if method != "resispec" else ref_resispec_rules)(p, q, kk)
            reach, acc = 1.0, 0.0
            for a in rules:
                s = np.sum(q * a)
                acc += reach * s
                reach *= 1.0 - s
            assert abs(expected_acceptance(method, p, q, kk) - acc) <= 1e-12, (method, name)
        assert abs(expected_acceptance("rrs", p, q, k) - ref_rrs_acceptance(p, q, k)) <= 1e-12, ("rrs", name)


def test_optimal_acceptance_is_min_over_all_subsets():
    for name, p, q, k in CASES[:150]:
        v = len(p)
        best = min(
            p[list(h)].sum() + 1.0 - q[list(h)].sum() ** k
            for n in range(v + 1)
            for h in itertools.combinations(range(v), n)
        )
        assert abs(optimal_acceptance(p, q, k) - best) <= 1e-12, name


def test_expected_distinct_small():
    q = np.array([0.5, 0.5])
    assert abs(acceptance.expected_distinct(q, 2) - 1.5) < 1e-15


# --------------------------------------------------------------------------- 2. what auto learns


def test_acceptance_profile_is_each_k_s_exact_acceptance_and_width():
    """auto's per-node figures for every K at once equal ``expected_acceptance`` (chain at K
    = 1, resispec above) and ``expected_distinct``."""
    ks = np.arange(1, 6)
    for name, p, q, _ in CASES[:150]:
        qids = np.flatnonzero(q)
        acc, distinct = acceptance.acceptance_profile(p[qids], q[qids], ks)
        for k, a, d in zip(ks, acc, distinct):
            assert abs(a - expected_acceptance("chain" if k == 1 else "resispec", p, q, int(k))) <= 1e-12, (name, k)
            assert abs(d - acceptance.expected_distinct(q, int(k))) <= 1e-12, (name, k)


@pytest.mark.parametrize("method", ["chain", "resispec"])
def test_draw_chances_follow_the_reference_rules_and_average_to_the_acceptance(method):
    """For every draw sequence: the chance that stage i is reached and accepts, as the
    reference rules give it (1e-9, their bisection's; skipped where every candidate is
    accepted: the schedule is not unique there); averaged over the sequences' probabilities,
    their sum is the exact acceptance (1e-12)."""
    for name, p, q, k in CASES[:120]:
        k = 1 if method == "chain" else k
        rules, _ = (ref_specinfer_rules if method == "chain" else ref_resispec_rules)(p, q, k)
        unique = expected_acceptance(method, p, q, k) <= 1 - 1e-9
        qids = np.flatnonzero(q)
        seqs, weights = draw_sequences(method, q, k)
        total = 0.0
        for seq, w in zip(seqs, weights):
            got = acceptance.draw_chances(method, p[qids], qids, q[qids], seq)
            left, want = 1.0, []
            for a, x in zip(rules, seq):
                want.append(left * a[x])
                left *= 1.0 - a[x]
            assert not unique or np.max(np.abs(got - want)) <= 1e-9, (name, seq)
            total += w * got.sum()
        assert abs(total - expected_acceptance(method, p, q, k)) <= 1e-12, name


def test_draw_chances_are_what_the_verifier_does():
    """Seeded: the kernel verifier, run on fixed draws with fresh uniforms, accepts draw i
    as often as ``draw_chances`` says (5 sigma)."""
    rng = np.random.default_rng(3)
    v, k, n = 40, 4, 20000
    p, q = rng.dirichlet(np.full(v, 0.5)), rng.dirichlet(np.full(v, 0.5))
    qids = np.flatnonzero(q)
    draws = np.asarray(sample_iid(qids, q[qids], rng.random(k)), np.int64)
    chances = acceptance.draw_chances("resispec", p[qids], qids, q[qids], draws)
    counts = np.zeros(k)
    for _ in range(n):
        _, idx = verify.verify("resispec", p, (qids, q[qids]), draws, rng.random(k + 1))
        if idx >= 0:
            counts[idx] += 1
    sigma = np.sqrt(chances * (1.0 - chances) / n)
    assert np.all(np.abs(counts / n - chances) <= 5 * sigma + 1e-9), (counts / n, chances)


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
