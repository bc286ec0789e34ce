"""Exactness proofs for the node verifiers (verify.py).

1. A naive reference of every method (kernel_cases' stage rules, enumerated here), written
   from the rules in verify's module docstring, whose output distribution is computed by
   enumerating every draw sequence: it must equal p to 1e-12.
2. The Numba kernel itself, driven through exhaustive draws with its accept thresholds and
   fallback CDF recovered by bisection on the uniforms (``kernel_cases.kernel_law``): it
   must equal p to 1e-12 — on the reference's cases, with zero-probability entries in q,
   through the validating wrappers, and (inverse CDF) at a Qwen-sized vocabulary; with a
   deterministic candidate first and with a sparse target in test_verify_candidates.py.
3. Seeded chi-square tests of ``verify_checked`` / ``verify`` on realistic vocabularies:
   test_verify_statistics.py.
4. Greedy: one-hot p always yields the argmax.  Input validation of the wrappers.  The
   acceptance figures stay importable from verify.
"""

import numpy as np
import pytest

from resispec_gguf.kernels import acceptance, verify
from resispec_gguf.kernels.acceptance import schedule
from resispec_gguf.kernels.draws import sample_iid, sample_without_replacement
from resispec_gguf.kernels.verify import verify_checked

from kernel_cases import (
    _ALMOST_ONE,
    CASES,
    IID,
    KERNEL_CASES,
    ZERO_Q_CASES,
    _norm,
    candidate_distribution,
    kernel_distribution,
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
