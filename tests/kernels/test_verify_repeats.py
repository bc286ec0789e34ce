"""Repeated deterministic candidates at the hot-path ``verify`` (kernels/verify.py).

The engine builds a node's candidates distinct (``ContextSource.propose`` drops a memory token
the context already gave, ``_propose`` the forced token already there), but ``verify`` does
not check it: before the kernel skipped repeats, candidates ``[0, 0]`` with ``p = (.3, .7)``
emitted 0 with chance .6.  Now a candidate equal to an earlier one is skipped (its uniform
unread): once the first was rejected p' gives it 0, so the rule is unchanged.

1. The exact output law, by exhaustive draws and bisection on the uniforms
   (``kernel_cases.candidate_distribution``), is p to 1e-12 for candidate lists with repeats
   (adjacent, apart, tripled, of a token outside supp q, of a token with p = 0, with all of
   p on the candidates, one-hot p), K = 0..3, every method, dense p and sparse p (the node's
   own small vocabulary, in a larger one).
2. The same (token, index) as the list without its repeats, with the repeats' uniforms
   removed: a repeat changes nothing but the index positions.
3. ``verify_checked`` still refuses repeats (a caller outside the engine gets told).
"""

import numpy as np
import pytest

from resispec_gguf.kernels import verify
from resispec_gguf.kernels.draws import sample_iid, sample_without_replacement

from kernel_cases import IID, _random_dist, candidate_distribution

METHODS = IID + ("rrs",)
ROLES = ("adjacent", "apart", "tripled", "outside supp q", "p = 0", "mass on the candidates", "one-hot on a repeat",
         "any")


def repeat_cases(seed=17, per_k=16):
    """(name, p, q, k, xs): 2-3 distinct tokens among 3-5 candidates, some repeated."""
    rng = np.random.default_rng(seed)
    cases = []
    for k in range(4):
        for i in range(per_k):
            v = int(rng.integers(4, 6 if k == 3 else 7))
            p = _random_dist(rng, v, ["dirichlet", "dirichlet", "sparse"][i % 3])
            q = _random_dist(rng, v, ["dirichlet", "sparse", "onehot"][(i // 3) % 3])
            role = ROLES[i % len(ROLES)]
            a, b, c = (int(x) for x in rng.permutation(v)[:3])
            xs = {"adjacent": [a, a, b], "apart": [a, b, a], "tripled": [a, b, a, c, a]}.get(role, [a, b, b, a])
            if role == "outside supp q" and (q == 0).any():
                z = int(rng.choice(np.flatnonzero(q == 0)))
                xs = [z, b if b != z else c, z]
            elif role == "p = 0" and (p > 0).sum() > 2:
                p[a] = 0.0
                p /= p.sum()
            elif role == "mass on the candidates":
                p = np.zeros(v)
                p[[a, b]] = rng.dirichlet(np.ones(2))
            elif role == "one-hot on a repeat":
                p = np.eye(v)[b]
            cases.append((f"K={k} {role} {i} V={v}", p, q, k, [int(x) for x in xs]))
    return cases


CASES = repeat_cases()


def _spread(v, stride=3):
    return stride * np.arange(v) + 1, stride * v + 2


def _sparse_target(p_big):
    ids = np.flatnonzero(p_big)
    order = np.lexsort((ids, -p_big[ids]))
    return ids[order].astype(np.int64), p_big[ids[order]]


def test_the_counterexample_is_gone():
    """Candidates (0, 0), p = (.3, .7), no draws: 0 comes out with chance .3 (it was .6)."""
    p = np.array([0.3, 0.7])
    law = candidate_distribution("chain", p, [0, 0], np.array([1.0, 0.0]), 0, support=(None, None))
    assert np.abs(law - p).max() <= 1e-12, law
    # the repeat's uniform is never read: u[1] = 0 would have accepted it
    assert verify.verify("chain", p, None, np.empty(0, np.int64), np.array([0.5, 0.0, 0.2]), [0, 0]) == (1, -1)


@pytest.mark.parametrize("method", METHODS)
def test_repeated_candidates_enumeration_is_exact(method):
    roles = set()
    for i, (name, p, q, k, xs) in enumerate(CASES):
        if method == "chain" and k > 1:
            continue
        support = (None, None) if k == 0 and i % 2 else None
        err = np.abs(candidate_distribution(method, p, xs, q, k, support) - p).max()
        assert err <= 1e-12, (method, "dense", name, xs, err)
        # sparse p in a vocabulary with unused tokens around and between
        where, big = _spread(len(p))
        pb, qb = np.zeros(big), np.zeros(big)
        pb[where], qb[where] = p, q
        pids, pp = _sparse_target(pb)
        qids = np.flatnonzero(qb).astype(np.int64)
        bxs = np.array(where[xs], np.int64)

        def run(d, u, pids=pids, pp=pp, qids=qids, qb=qb, bxs=bxs):
            return verify.verify(method, (pids, pp), (qids, qb[qids]), d, u, bxs)

        err = np.abs(candidate_distribution(method, pb, bxs, qb, k, run=run) - pb).max()
        assert err <= 1e-12, (method, "sparse", name, xs, err)
        roles.add(name.split(" ", 1)[1].rsplit(" ", 2)[0])
    assert roles == set(ROLES)


@pytest.mark.parametrize("method", METHODS)
def test_a_repeat_changes_nothing_but_the_index_positions(method):
    """Random cases and uniforms: ``verify(xs)`` equals ``verify(distinct xs)`` run on the
    uniforms without the repeats', its index mapped back to the first occurrence."""
    rng = np.random.default_rng(23)
    for trial in range(400):
        v = int(rng.integers(3, 40))
        p = _random_dist(rng, v, ["dirichlet", "sparse"][trial % 2])
        q = _random_dist(rng, v, ["dirichlet", "sparse"][(trial // 2) % 2])
        k = 1 if method == "chain" else int(rng.integers(0, 4))
        qids = np.flatnonzero(q).astype(np.int64)
        if k:
            sample = sample_without_replacement if method == "rrs" else sample_iid
            draws = sample(qids, q[qids], rng.random(k))
        else:
            draws = np.empty(0, np.int64)
        k = draws.shape[0]
        pool = rng.permutation(v)[: int(rng.integers(1, min(v, 4) + 1))]
        xs = rng.choice(pool, int(rng.integers(2, 6))).astype(np.int64)
        first = [j for j in range(len(xs)) if xs[j] not in xs[:j]]
        distinct = xs[first]
        u = rng.random(len(xs) + k + 1)
        u[: len(xs)] = np.where(rng.random(len(xs)) < 0.6, 0.999, u[: len(xs)])  # reach the draws often
        u_distinct = np.concatenate([u[first], u[len(xs):]])
        for target in (p, _sparse_target(p)):
            got = verify.verify(method, target, (qids, q[qids]), draws, u, xs)
            want_tok, want_idx = verify.verify(method, target, (qids, q[qids]), draws, u_distinct, distinct)
            if want_idx >= len(distinct):  # a draw
                want_idx += len(xs) - len(distinct)
            elif want_idx >= 0:  # a candidate: its first occurrence
                want_idx = first[want_idx]
            assert got == (want_tok, want_idx), (method, trial, xs.tolist(), draws.tolist())


def test_verify_checked_still_refuses_repeats():
    with pytest.raises(ValueError, match="distinct"):
        verify.verify_checked("resispec", np.array([0.3, 0.7]), None, [], [0.5, 0.5, 0.5], x0=[0, 0])
