"""Exactness proofs for the node verifiers.

1. A naive reference of every method, written from verification.md, whose output distribution
   is computed by enumerating every draw sequence: it must equal p to 1e-12.
2. The Numba kernel itself, driven through exhaustive draws with its accept thresholds and
   fallback CDF recovered by bisection on the uniforms: it must equal p to 1e-12.
3. Seeded chi-square tests of ``verify_node`` on realistic vocabularies.
4. Acceptance identities: ResiSpec = sum min(p, F1 q) >= SpecInfer, <= alpha*, = LP optimum.
5. Greedy: one-hot p always yields the argmax.
"""

import itertools

import numpy as np
import pytest
from scipy import optimize, stats

from resispec_gguf import verify
from resispec_gguf.sampling import sample_iid, sample_without_replacement
from resispec_gguf.verify import (
    expected_acceptance,
    optimal_acceptance,
    schedule,
    verify_node,
)

IID = ("chain", "specinfer", "resispec")


# --------------------------------------------------------------------------- cases


def _random_dist(rng, v, kind):
    if kind == "dirichlet":
        return rng.dirichlet(np.full(v, rng.choice([0.3, 1.0, 3.0])))
    if kind == "sparse":
        x = rng.dirichlet(np.ones(v))
        x[rng.random(v) < 0.4] = 0.0
        if x.sum() == 0:
            x[rng.integers(v)] = 1.0
        return x / x.sum()
    if kind == "onehot":
        x = np.zeros(v)
        x[rng.integers(v)] = 1.0
        return x
    raise AssertionError(kind)


def make_cases(n_random, max_v=8, max_k=5, seed=0):
    """Random small (p, q, K) cases plus the adversarial ones the issue names."""
    rng = np.random.default_rng(seed)
    cases = []
    u3 = np.array([0.2, 0.3, 0.5])
    cases.append(("p == q", u3, u3.copy(), 3))
    cases.append(("one-hot p", np.array([0.0, 1.0, 0.0]), u3, 3))
    cases.append(("one-hot q", u3, np.array([0.0, 0.0, 1.0]), 2))
    cases.append(("one-hot both equal", np.array([0, 1.0, 0]), np.array([0, 1.0, 0]), 4))
    cases.append(("disjoint supports", np.array([0.5, 0.5, 0, 0]), np.array([0, 0, 0.3, 0.7]), 3))
    cases.append(("q zero where p large", np.array([0.7, 0.1, 0.2]), np.array([0.0, 0.5, 0.5]), 4))
    cases.append(("draft over-confident", np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.97, 0.01, 0.01, 0.01]), 5))
    cases.append(("V=2 K=5", np.array([0.9, 0.1]), np.array([0.2, 0.8]), 5))
    for i in range(n_random):
        v = int(rng.integers(2, max_v + 1))
        k = int(rng.integers(1, max_k + 1))
        while v**k > 6000:
            k -= 1
        kinds = ["dirichlet", "dirichlet", "sparse", "onehot"]
        p = _random_dist(rng, v, kinds[rng.integers(4)] if i % 5 else "dirichlet")
        q = _random_dist(rng, v, kinds[rng.integers(3)])
        cases.append((f"random {i} V={v} K={k}", p, q, k))
    return cases


CASES = make_cases(300)


# --------------------------------------------------------------------------- 1. reference


def _norm(x):
    s = x.sum()
    return x / s if s > 0 else x


def ref_specinfer_rules(p, q, k):
    """Stage rules a_i(x) and fallback exactly as the table in verification.md §2."""
    rules, reach, resid = [], 1.0, p.copy()
    for _ in range(k):
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.where(q > 0, np.minimum(1.0, resid / (reach * q)), 0.0) if reach > 0 else np.zeros_like(p)
        rules.append(a)
        m = reach * q * a
        resid = resid - m
        reach = reach - m.sum()
    return rules, _norm(np.maximum(resid, 0.0))


def ref_resispec_rules(p, q, k):
    """§3 with plain dense sums (no sorting, no prefix sums) and its own bisection."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(q > 0, p / q, 0.0)

    def shoot(f1):
        f, reach, out = f1, 1.0, []
        for _ in range(k):
            f_next = f - reach
            out.append((f_next, reach))
            reach = reach - np.sum(q * np.clip(r - f_next, 0.0, reach))
            f = f_next
        return f, out

    lo, hi = 1.0, float(k)
    for _ in range(200):
        mid = (lo + hi) / 2
        if shoot(mid)[0] > 0:
            hi = mid
        else:
            lo = mid
    f1 = hi
    _, stages = shoot(f1)
    rules = []
    for f_next, reach in stages:
        if reach > 0:
            rules.append(np.where(q > 0, np.clip((r - f_next) / reach, 0.0, 1.0), 0.0))
        else:
            rules.append(np.zeros_like(p))
    return rules, _norm(np.maximum(0.0, p - f1 * q))


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


@pytest.mark.parametrize("method", ("specinfer", "resispec"))
def test_kernel_schedule_matches_reference(method):
    """The kernel's sorted/prefix-sum schedule gives the reference's stage rules."""
    ref = ref_specinfer_rules if method == "specinfer" else ref_resispec_rules
    for name, p, q, k in CASES:
        if expected_acceptance(method, p, q, k) > 1 - 1e-9:
            continue  # every candidate is accepted: the schedule is not unique, both are exact
        lo, reach, c = schedule(method, p, q, k)
        rules, _ = ref(p, q, k)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(q > 0, p / q, 0.0)
        for i in range(k):
            if reach[i] <= 1e-12:
                continue
            a = np.where(q > 0, np.clip((r - lo[i]) / reach[i], 0, 1), 0)
            assert np.abs(a - rules[i]).max() <= 1e-9, (method, name, i)


# --------------------------------------------------------------------------- 2. kernel


_ALMOST_ONE = np.nextafter(1.0, 0.0)


def _kernel(method, p, qids, qp, draws, u):
    return verify._verify(verify._CODE[method], p, qids, qp, draws, u)


def _threshold(f, lo=0.0, hi=1.0, iters=64):
    """Sup of u in [0, 1) with f(u) true, for f true on [0, t) and false on [t, 1)."""
    if not f(lo):
        return 0.0
    if f(_ALMOST_ONE):
        return 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if f(mid):
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def kernel_distribution(method, p, q, k):
    """Output distribution of the compiled kernel, by exhaustive draws + bisection on u."""
    qids = np.flatnonzero(q).astype(np.int64)
    qp = q[qids]
    out = np.zeros_like(p)
    if method == "rrs":
        seqs = itertools.permutations(qids.tolist(), min(k, len(qids)))
    else:
        seqs = itertools.product(qids.tolist(), repeat=k)
    for seq in seqs:
        draws = np.array(seq, np.int64)
        kk = len(draws)
        if method == "rrs":
            weight, left = 1.0, q.copy()
            for x in seq:
                weight *= left[x] / left.sum()
                left[x] = 0.0
        else:
            weight = float(np.prod(q[draws]))
        reach = 1.0
        for i in range(kk):
            def accepted(ui, i=i):
                u = np.full(kk + 1, _ALMOST_ONE)
                u[i] = ui
                return _kernel(method, p, qids, qp, draws, u)[1] == i

            a = _threshold(accepted)
            out[draws[i]] += weight * reach * a
            reach *= 1.0 - a
            if reach == 0.0:
                break
        if reach > 0.0:
            def token(ui):
                u = np.full(kk + 1, _ALMOST_ONE)
                u[kk] = ui
                tok, idx = _kernel(method, p, qids, qp, draws, u)
                assert idx == -1
                return tok

            prev = 0.0
            for t in range(len(p)):
                cdf = _threshold(lambda ui: token(ui) <= t)
                out[t] += weight * reach * (cdf - prev)
                prev = cdf
    return out


KERNEL_CASES = make_cases(40, max_v=5, max_k=3, seed=1)


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_kernel_enumeration_is_exact(method):
    for name, p, q, k in KERNEL_CASES:
        if method == "chain":
            k = 1
        dist = kernel_distribution(method, p, q, k)
        err = np.abs(dist - p).max()
        assert err <= 1e-12, (method, name, err)


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
        tok, idx = verify_node(method, p, q, draws, rng.random(len(draws) + 1))
        counts[tok] += 1
        accepted += idx >= 0
    assert _chi2_pvalue(counts, p, n) >= 1e-4
    # the empirical acceptance rate agrees with the exact expectation
    acc = expected_acceptance(method, p, q, k) if method != "rrs" else None
    if acc is not None:
        assert abs(accepted / n - acc) < 5 * np.sqrt(acc * (1 - acc) / n) + 1e-9


# --------------------------------------------------------------------------- 4. acceptance


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
        if len(p) <= 8:
            rrs_dist_acc = expected_acceptance("rrs", p, q, k)
            assert 0.0 <= rrs_dist_acc <= 1.0 + 1e-12


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
    assert abs(verify.expected_distinct(q, 2) - 1.5) < 1e-15


# --------------------------------------------------------------------------- 5. greedy, errors


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
            tok, idx = verify_node(method, p, q, draws, rng.random(len(draws) + 1))
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
        verify_node(args["method"], args["p"], args["q"], args["draws"], args["u"])
