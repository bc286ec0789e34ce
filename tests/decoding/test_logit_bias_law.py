"""``logit_bias`` at T > 0 under ``chain``, ``specinfer`` and ``rrs``: the law is plain
sampling's with the bias (test_exactness.py law-tests ``none``, ``resispec`` and ``auto``).

The bias is added to the target's row at every node before the filters, and to the draft's
before q is made (``Generation._masked``), so the draws come from a biased q and the
verifier compares them with a biased p.  Each method runs on a tree (draws only, every
draw's q biased) and with context lookup (candidates that are functions of the context, among
them the banned token 0, which the prompt holds: a banned candidate must be rejected every
time, p(0) being 0).  The lookup cases count the verifications that held the banned token
as a candidate and assert there were many, none accepted.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from law_harness import N_TOKENS, check_law, exact_law, lookup_case, run_case, sample, RUNS, tree_case
from resispec_gguf.decoding import generation

# a ban (-inf), a raise and a cut (test_exactness.py's BIAS)
BIAS = ((0, -np.inf), (2, 1.5), (3, -0.7))
BANNED = 0


def _case(kind, method, temp):
    engine, target, prompt, sp, dp, plain = (tree_case(method, "budget", temp, "ample") if kind == "tree"
                                             else lookup_case(method, temp, "ample"))
    return engine, target, prompt, sp.replace(logit_bias=BIAS), dp, plain


@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("method", ["chain", "specinfer", "rrs"])
def test_logit_bias_keeps_the_law_exact_on_trees(method, temp):
    engine, target, prompt, sp, dp, plain = case = _case("tree", method, temp)
    law = exact_law(target, prompt, sp, N_TOKENS)
    assert not any(BANNED in s for s in law)
    assert law != exact_law(target, prompt, sp.replace(logit_bias=()), N_TOKENS)
    result = run_case(case, f"logit_bias/{method}/{temp}")
    assert result["cells"] > 1


@pytest.fixture
def banned_checks(monkeypatch):
    """Counts the verifications whose deterministic candidates held the banned token, and
    how often it was accepted there."""
    counts: Counter = Counter()
    verify = generation.verify

    def counted(method, p, q, draws, u, x0=-1):
        tok, idx = verify(method, p, q, draws, u, x0)
        fixed = [x0] if isinstance(x0, (int, np.integer)) else list(x0)
        if BANNED in fixed:
            counts["banned candidate checked"] += 1
            counts["banned candidate accepted"] += int(tok == BANNED)
        counts["verifications"] += 1
        return tok, idx

    monkeypatch.setattr(generation, "verify", counted)
    return counts


@pytest.mark.parametrize("method", ["chain", "specinfer", "rrs"])
def test_logit_bias_keeps_the_law_exact_with_lookup_candidates(method, banned_checks):
    engine, target, prompt, sp, dp, plain = _case("lookup", method, "T1")
    assert BANNED in prompt
    law = exact_law(target, prompt, sp, N_TOKENS)
    assert law != exact_law(target, prompt, sp.replace(logit_bias=()), N_TOKENS)
    counts = sample(engine, sp, dp, RUNS, plain)
    check_law(counts, law, f"logit_bias/lookup/{method}")
    assert banned_checks["banned candidate checked"] >= RUNS // 10, banned_checks
    assert banned_checks["banned candidate accepted"] == 0, banned_checks
