"""Cases and references the kernel tests share: a helper module (not a test file; the test
files import it).

Sampling (test_sampling, test_topk): ``ref_order`` and ``ref_probs``, the sampling
distribution written from sampling's module docstring (temperature -> top-k -> top-p ->
min-p -> renormalise, then the draft's support cap), and ``ROWS``, seeded logits rows of
every awkward shape (V from 1 to 5000, -inf entries, one finite entry, logits of magnitude
1e4, ties).

Verification (test_verify, test_stages, test_acceptance): the small (p, q, K) ``CASES``,
the reference stage rules of SpecInfer and ResiSpec written from verify's module
docstring, every draw sequence a method can see with its probability, the exact output law
of a verifier by exhaustive draws and bisection on its uniforms (``kernel_law``,
``kernel_distribution``, ``candidate_distribution``), and ``ZERO_Q_CASES``, sparse q's that
also list tokens of probability 0.
"""

import itertools

import numpy as np

from resispec_gguf.kernels import stages, verify


# --------------------------------------------------------------------------- sampling: references


RTOL = 1e-12
ATOL = 1e-300  # subnormal probabilities carry fewer significant bits


def ref_order(logits):
    """Finite ids sorted by logit descending, ties by ascending id."""
    # logits: [V] float32 -> [n_finite] int64
    ids = np.flatnonzero(np.isfinite(logits))
    return ids[np.lexsort((ids, -logits[ids].astype(np.float64)))]


def ref_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, cap=0):
    """The sampling distribution as (ids, probs), straight from sampling's module docstring."""
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


# --------------------------------------------------------------------------- sampling: logits rows


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


def all_rows(seed=0, reps=2):
    rng = np.random.default_rng(seed)
    for v, kind, rep in itertools.product(SIZES, KINDS, range(reps)):
        yield f"{kind}-V{v}-{rep}", random_logits(rng, v, kind)


ROWS = list(all_rows())


# --------------------------------------------------------------------------- verification: cases


IID = ("chain", "specinfer", "resispec")


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
KERNEL_CASES = make_cases(40, max_v=5, max_k=3, seed=1)  # the kernel's own (test_verify, test_verify_candidates)


# --------------------------------------------------------------------------- verification: reference rules


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


# --------------------------------------------------------------------------- verification: the kernel's exact law


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


def candidate_distribution(method, p, x0, q, k, support=None, run=None):
    """Output law of ``verify`` (or of ``run(draws, u)``): x0 first (a token, or a
    sequence of them checked in order), then K draws from q; ``support`` as in ``kernel_distribution``."""
    if support is None:
        qids = np.flatnonzero(q).astype(np.int64)
        support = qids, q[qids]
    if run is None:

        def run(draws, u):
            return verify.verify(method, p, (support[0], support[1]), draws, u, x0)

    seqs, weights = draw_sequences(method, q, k)
    fixed = [int(x) for x in np.atleast_1d(x0)]  # one candidate, or several checked in order
    return kernel_law(run, len(p), seqs, weights, lambda draws: fixed + draws.tolist())


# --------------------------------------------------------------------------- verification: q entries equal to 0


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
