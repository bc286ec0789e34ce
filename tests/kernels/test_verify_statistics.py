"""Exactness of the node verifiers (verify.py), continued from test_verify.py (3): seeded
chi-square tests of ``verify_checked`` / ``verify`` on realistic vocabularies, with and
without a lookup guess ahead of the draws.
"""

import numpy as np
import pytest
from scipy import stats

from resispec_gguf.kernels import verify
from resispec_gguf.kernels.acceptance import expected_acceptance
from resispec_gguf.kernels.draws import sample_iid, sample_without_replacement
from resispec_gguf.kernels.verify import verify_checked


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
