"""Exactness proofs for the node verifiers.

1. A naive reference of every method, written from the rules in verify's module docstring,
   whose output distribution is computed by enumerating every draw sequence: it must equal p
   to 1e-12.
2. The Numba kernel itself, driven through exhaustive draws with its accept thresholds and
   fallback CDF recovered by bisection on the uniforms: it must equal p to 1e-12 — on the
   reference's cases, with zero-probability entries in q, through the validating wrappers,
   with a deterministic candidate first, and (inverse CDF) at a Qwen-sized vocabulary.
3. Seeded chi-square tests of ``verify_checked`` / ``verify`` on
   realistic vocabularies.
4. Acceptance identities: ResiSpec = sum min(p, F1 q) >= SpecInfer, <= alpha*, = LP optimum;
   rrs acceptance against brute force over draw orders.
5. Greedy: one-hot p always yields the argmax.  Input validation of the wrappers.
"""

import itertools

import numpy as np
import pytest
from scipy import optimize, stats

from resispec_gguf.kernels import acceptance, stages, verify
from resispec_gguf.kernels.acceptance import expected_acceptance, optimal_acceptance, schedule
from resispec_gguf.kernels.draws import sample_iid, sample_without_replacement
from resispec_gguf.kernels.verify import verify_checked

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
    """SpecInfer's greedy stage rules a_i = min(1, R_i / (P_i q)), R_{i+1} = R_i - m_i, and
    fallback norm(R_{K+1}), with plain dense arrays."""
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
    """ResiSpec's backward filling, a_i = clip((r - F_{i+1}) / P_i, 0, 1) with F_1 found by
    shooting, with plain dense sums (no sorting, no prefix sums) and its own bisection."""
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


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_kernel_enumeration_on_reference_cases(method):
    """The package's kernel on every case the reference is proved on."""
    for name, p, q, k in CASES:
        if method == "chain":
            k = 1
        err = np.abs(kernel_distribution(method, p, q, k) - p).max()
        assert err <= 1e-12, (method, name, err)


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


def _as_rows(tuples, k):
    rows = list(tuples)
    return np.array(rows, np.int64).reshape(len(rows), k)


def draw_sequences(method, q, k):
    """Every draw sequence of length k the method can see, with its probability.

    iid from q (every ordered k-tuple over supp q), or without replacement for rrs (every
    ordering of min(k, |supp q|) distinct tokens).  Returns ([S, k] int64, [S] float64).
    """
    supp = np.flatnonzero(q)
    if method == "rrs":
        k = min(k, len(supp))
        seqs = _as_rows(itertools.permutations(supp.tolist(), k), k)
        weights = []
        for seq in seqs:
            w, left = 1.0, q.copy()
            for x in seq:
                w *= left[x] / left.sum()
                left[x] = 0.0
            weights.append(w)
        return seqs, np.array(weights, np.float64)
    seqs = _as_rows(itertools.product(supp.tolist(), repeat=k), k)
    return seqs, q[seqs].prod(axis=1)


def _bisect(f, lo, hi, iters=64):
    """(lo, hi) narrowed around the switch of f, for f(lo) true and f(hi) false."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if f(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def kernel_law(run, v, seqs, weights, stage_tokens):
    """Exact output law of a verifier, by exhaustive draws and bisection on the uniforms.

    ``run(draws, u) -> (token, accepted_index)``; stage s (``accepted_index == s``) emits
    ``stage_tokens(draws)[s]`` and is decided by ``u[s]``, the fallback (index -1) by ``u[-1]``.
    Every other stage uniform is held just below 1 (reject), so a stage's acceptance
    probability is the switch point of ``u[s]`` and the fallback law is read off as the steps
    of the token as a function of ``u[-1]`` (an inverse CDF: it must increase).

    Thresholds found for a (stage, token) or for a fallback token are tried first in later
    sequences and kept only if two kernel calls confirm that they still bracket the switch,
    so a correct kernel costs few calls per sequence and a kernel whose decisions depend on
    the rest of the sequence is measured afresh.
    """
    out = np.zeros(v)
    n_stage = len(stage_tokens(seqs[0]))
    stage_hint, fb_hint = {}, {}
    u = np.empty(n_stage + 1)  # the kernels only read it

    def accepts(draws, s, us):
        u.fill(_ALMOST_ONE)
        u[s] = us
        return run(draws, u)[1] == s

    def fallback(draws, uf):
        u.fill(_ALMOST_ONE)
        u[-1] = uf
        tok, idx = run(draws, u)
        assert idx == -1, "with every stage uniform near 1 the token must be the fallback"
        return tok

    for draws, w in zip(seqs, weights):
        reach = 1.0
        for s, x in enumerate(stage_tokens(draws)):
            # (lo, hi): accepted at u = lo, not at u = hi; lo < 0: never; hi > 1: always
            lo, hi = stage_hint.get((s, x), (None, None))
            confirmed = lo is not None and (lo < 0 or accepts(draws, s, lo)) and (hi > 1 or not accepts(draws, s, hi))
            if not confirmed:
                if not accepts(draws, s, 0.0):
                    lo, hi = -1.0, 0.0
                elif accepts(draws, s, _ALMOST_ONE):
                    lo, hi = _ALMOST_ONE, 2.0
                else:
                    lo, hi = _bisect(lambda us: accepts(draws, s, us), 0.0, _ALMOST_ONE)
                stage_hint[s, x] = lo, hi
            a = 0.0 if lo < 0 else 1.0 if hi > 1 else 0.5 * (lo + hi)
            out[x] += w * reach * a
            reach *= 1.0 - a
            if reach == 0.0:
                break
        if reach == 0.0:
            continue
        last = fallback(draws, _ALMOST_ONE)
        t, pos, cdf_prev = fallback(draws, 0.0), 0.0, 0.0
        while t != last:
            # the step from t to the next token lies in (lo, hi]
            lo, hi = fb_hint.get(t, (None, None))
            nxt = None
            if lo is not None and lo >= pos and fallback(draws, lo) <= t:
                nxt = fallback(draws, hi)
            if nxt is None or nxt <= t:
                lo, hi = _bisect(lambda uf: fallback(draws, uf) <= t, pos, _ALMOST_ONE)
                fb_hint[t] = lo, hi
                nxt = fallback(draws, hi)
            assert t < nxt <= last, "the fallback token must increase with its uniform"
            cdf = 0.5 * (lo + hi)
            out[t] += w * reach * (cdf - cdf_prev)
            t, pos, cdf_prev = nxt, hi, cdf
        out[last] += w * reach * (1.0 - cdf_prev)
    return out


def kernel_distribution(method, p, q, k, support=None, run=None):
    """Output law of the compiled kernel (or of ``run(draws, u)``) for K draws from q.

    ``support``: the ``(qids, qprobs)`` handed to the kernel; by default supp q.  The draws are
    always enumerated from q's positive entries.
    """
    if support is None:
        qids = np.flatnonzero(q).astype(np.int64)
        support = qids, q[qids]
    if run is None:
        code = stages._CODE[method]

        def run(draws, u):
            return verify._verify(code, p, support[0], support[1], draws, u)

    seqs, weights = draw_sequences(method, q, k)
    return kernel_law(run, len(p), seqs, weights, lambda draws: draws.tolist())


KERNEL_CASES = make_cases(40, max_v=5, max_k=3, seed=1)


@pytest.mark.parametrize("method", IID + ("rrs",))
def test_kernel_enumeration_is_exact(method):
    for name, p, q, k in KERNEL_CASES:
        if method == "chain":
            k = 1
        dist = kernel_distribution(method, p, q, k)
        err = np.abs(dist - p).max()
        assert err <= 1e-12, (method, name, err)


def zero_q_cases(seed=2):
    """Small (p, q, k, qids, qprobs) cases whose sparse q also lists tokens with q = 0 (an
    underflowed probability), some of them where p > 0, in no particular order."""
    rng = np.random.default_rng(seed)
    cases = [
        # the low-temperature case: q one-hot, its underflowed neighbours still listed
        ("one-hot q with zeros", np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.0, 1.0, 0.0, 0.0]), 3, [1, 0, 2, 3]),
        ("zeros where p is large", np.array([0.6, 0.1, 0.1, 0.2]), np.array([0.0, 0.5, 0.5, 0.0]), 2, [2, 1, 0, 3]),
        ("q = 0 everywhere p > 0", np.array([0.7, 0.3, 0.0]), np.array([0.0, 0.0, 1.0]), 2, [0, 2, 1]),
    ]
    for i in range(14):
        v = int(rng.integers(3, 6))
        k = int(rng.integers(1, 4))
        p = _random_dist(rng, v, ["dirichlet", "sparse", "onehot"][i % 3])
        q = _random_dist(rng, v, "sparse")
        while np.count_nonzero(q) == v:
            q = _random_dist(rng, v, "sparse")
        listed = rng.permutation(v)[: max(np.count_nonzero(q) + 1, int(rng.integers(2, v + 1)))]
        listed = np.union1d(listed, np.flatnonzero(q))
        cases.append((f"random {i} V={v} K={k}", p, q, k, rng.permutation(listed).tolist()))
    return [(name, p, q, k, np.array(ids, np.int64), q[ids]) for name, p, q, k, ids in cases]


ZERO_Q_CASES = zero_q_cases()


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


def test_zero_q_entries_leave_schedule_and_optimum_unchanged():
    for name, p, q, k, qids, qp in ZERO_Q_CASES:
        plain = stages._sorted_support(p, np.flatnonzero(q), q[q > 0])
        padded = stages._sorted_support(p, qids, qp)
        assert np.isinf(padded[0][-int((qp == 0).sum()):]).all(), name
        for code in (stages._SPECINFER, stages._RESISPEC):
            for a, b in zip(stages._schedule(code, *plain, k), stages._schedule(code, *padded, k)):
                assert np.allclose(a, b, rtol=0, atol=1e-15), (name, code)
        assert abs(acceptance._optimal(*plain, k) - acceptance._optimal(*padded, k)) <= 1e-15, name
        assert abs(acceptance._optimal(*padded, k) - optimal_acceptance(p, q, k)) <= 1e-15, name


def test_check_dist_renormalises():
    p = np.array([0.1, 0.2, 0.3, 0.4]) * (1 + 5e-7)  # accepted: |sum - 1| <= 1e-6
    q = np.array([0.4, 0.3, 0.2, 0.1]) * (1 - 4e-7)
    p_n, q_n = p / p.sum(), q / q.sum()
    assert np.abs(stages._check_dist("p", p) - p_n).max() <= 1e-16
    qids = np.arange(4)
    for method in IID + ("rrs",):
        k = 1 if method == "chain" else 2
        runs = {
            "verify_checked dense q": lambda d, u: verify_checked(method, p, q, d, u),
            "verify_checked sparse q": lambda d, u: verify.verify_checked(method, p, (qids, q), d, u),
        }
        for path, run in runs.items():
            err = np.abs(kernel_distribution(method, p_n, q_n, k, run=run) - p_n).max()
            assert err <= 1e-12, (method, path, err)

        def run(d, u):
            return verify.verify_checked(method, p, (qids, q), d, u, x0=2)

        err = np.abs(candidate_distribution(method, p_n, 2, q_n, k, run=run) - p_n).max()
        assert err <= 1e-12, (method, "verify_checked with x0", err)


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


def candidate_distribution(method, p, x0, q, k, support=None, run=None):
    """Output law of ``verify`` (or of ``run(draws, u)``): x0 first,
    then K draws from q; ``support`` as in ``kernel_distribution``."""
    if support is None:
        qids = np.flatnonzero(q).astype(np.int64)
        support = qids, q[qids]
    if run is None:

        def run(draws, u):
            return verify.verify(method, p, (support[0], support[1]), draws, u, x0)

    seqs, weights = draw_sequences(method, q, k)
    return kernel_law(run, len(p), seqs, weights, lambda draws: [x0] + draws.tolist())


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
        assert abs(expected_acceptance("rrs", p, q, k) - ref_rrs_acceptance(p, q, k)) <= 1e-12, ("rrs", name)


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


# --------------------------------------------------------------------------- a sparse target


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
        assert sampling.sample_sparse(pids, pp, u[-1]) == sampling.sample_dense(p, u[-1])


# --------------------------------------------------------------------------- 6. what auto learns


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


def test_acceptance_figures_stay_importable_from_verify():
    """The exact acceptance figures live in ``acceptance``; callers that import them from
    ``verify`` get the same objects."""
    for name in ("schedule", "expected_acceptance", "optimal_acceptance", "acceptance_profile", "draw_chances",
                 "expected_distinct"):
        assert getattr(verify, name) is getattr(acceptance, name), name
