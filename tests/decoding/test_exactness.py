"""Exactness through the engine, at scale, on Markov fake models: every method, tree policy,
room regime, temperature, lookup and auto against the exact law of the first tokens (the
harness and its statistics are in law_harness.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from fake_models import MarkovModel
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from law_harness import (RUNS, N_TOKENS, PROMPT, LOOKUP_PROMPT, TEMPERATURES, ROOMS, METHODS, FLAT, _pair,
                         exact_law, sample, check_law, TREE_GRID, LOOKUP_GRID, AUTO_GRID, tree_case, lookup_case,
                         auto_case, run_case)


@pytest.mark.parametrize("room", TREE_GRID[3])
@pytest.mark.parametrize("temp", TREE_GRID[2])
@pytest.mark.parametrize("policy", TREE_GRID[1])
@pytest.mark.parametrize("method", TREE_GRID[0])
def test_engine_output_law_is_exact(method, policy, temp, room):
    run_case(tree_case(method, policy, temp, room), f"{method}/{policy}/{temp}/{room}")


@pytest.mark.parametrize("room", LOOKUP_GRID[2])
@pytest.mark.parametrize("temp", LOOKUP_GRID[1])
@pytest.mark.parametrize("method", LOOKUP_GRID[0])
def test_lookup_candidates_keep_the_law_exact(method, temp, room):
    """A context-lookup candidate at every node, checked before the draws (or alone, with no
    draft model)."""
    run_case(lookup_case(method, temp, room), f"lookup/{method}/{temp}/{room}")


@pytest.mark.parametrize("room", AUTO_GRID[2])
@pytest.mark.parametrize("temp", AUTO_GRID[1])
@pytest.mark.parametrize("costs", AUTO_GRID[0])
def test_auto_output_law_is_exact(costs, temp, room):
    """auto's own choices: plain or tree per step, dynamic width and depth, lookup."""
    run_case(auto_case(costs, temp, room), f"auto/{costs}/{temp}/{room}")


@pytest.mark.parametrize("temp", list(TEMPERATURES))
def test_plain_decoding_law_is_exact(temp):
    target, draft = _pair()
    sp = TEMPERATURES[temp]
    counts = sample(Engine(target, draft), sp, DraftParams(method="none"), RUNS)
    check_law(counts, exact_law(target, PROMPT, sp, N_TOKENS), f"none/{temp}")


@pytest.mark.parametrize("room", list(ROOMS))
@pytest.mark.parametrize("policy", ["budget", "static"])
@pytest.mark.parametrize("method", METHODS)
def test_greedy_output_is_the_target_argmax_path(method, policy, room):
    sp = SamplingParams(temperature=0.0)
    for lookup, prompt in ((False, PROMPT), (True, LOOKUP_PROMPT)):
        target_ctx, draft_ctx, draft_seq, plain = ROOMS[room](len(prompt))
        target, draft = _pair(target_ctx, draft_ctx, draft_seq)
        dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4, policy=policy, lookup=lookup)
        law = exact_law(target, prompt, sp, N_TOKENS)
        assert len(law) == 1
        counts = sample(Engine(target, draft, cost_curves=(FLAT, FLAT)), sp, dp, 3, plain)
        assert list(counts) == list(law)


# --------------------------------------------------------------------------- regression


S, A, B, C, D, X, Y = range(7)


def _two_token_rows(rows, n=7):
    """Order-1 logits rows from ``{token: {next: prob}}``; other tokens go to X or Y evenly."""
    out = {}
    for t in range(n):
        probs = np.zeros(n)
        for nxt, pr in rows.get(t, {X: 0.5, Y: 0.5}).items():
            probs[nxt] = pr
        with np.errstate(divide="ignore"):
            r = np.log(probs).astype(np.float32)
        r.flags.writeable = False
        out[(t,)] = r
    return out


def test_pruning_regression_equal_draws_are_not_favoured():
    """The counterexample that exposed the pruning bias.  At B the draft says (C .5, D .5)
    and the target (C .9, D .1); with resispec and K = 3, P(C | three equal draws) = 0.6 but
    P(C | mixed draws) = 1.0, so any survival rule that depends on whether B's draws repeat
    moves P(C | B) away from 0.9 (the old static early stop gave 0.94)."""
    target = MarkovModel(_two_token_rows({S: {A: 0.5, B: 0.5}, B: {C: 0.9, D: 0.1}}), 7, n_ctx=7, name="t")
    draft = MarkovModel(_two_token_rows({S: {A: 0.85, B: 0.15}, B: {C: 0.5, D: 0.5}}), 7, name="d")
    engine = Engine(target, draft)
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=2)
    dp = DraftParams(method="resispec", draws=3, depth=3, budget=6, draft_support=2, policy="static")
    runs = 6000
    after_b = Counter()
    for seed in range(runs):
        toks = engine.generate([S], sp.replace(seed=seed), dp).tokens
        if toks[0] == B:
            after_b[toks[1]] += 1
    n = sum(after_b.values())
    assert set(after_b) <= {C, D} and n > runs * 0.45
    # sd of the estimate ~0.0055 at n ~ 3000: 0.94 would be 7 sd away
    z = (after_b[C] - 0.9 * n) / np.sqrt(n * 0.9 * 0.1)
    assert abs(z) < 4.5, f"P(C | B) = {after_b[C] / n:.4f}, exact 0.9 (z = {z:.1f})"


# --------------------------------------------------------------------------- logit bias


# a ban (-inf), a raise and a cut: the target's law moves, and the draft's q (biased alike)
# still proposes tokens the target then finds banned where the draft's own row favours them
BIAS = ((0, -np.inf), (2, 1.5), (3, -0.7))


def _biased_case(method, temp):
    if method == "auto":
        engine, target, prompt, sp, dp, plain = auto_case("gpu", temp, "ample")
    else:
        engine, target, prompt, sp, dp, plain = tree_case(method, "budget", temp, "ample")
    return engine, target, prompt, sp.replace(logit_bias=BIAS), dp, plain


@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("method", ["none", "resispec", "auto"])
def test_logit_bias_keeps_the_law_exact(method, temp):
    """The bias is a fixed function of the token id, added to the target's row at every tree
    node before the filters: the law is plain sampling's with the bias (docs/verification.md)."""
    engine, target, prompt, sp, dp, plain = case = _biased_case(method, temp)
    law = exact_law(target, prompt, sp, N_TOKENS)
    assert not any(0 in s for s in law)  # banned
    assert law != exact_law(target, prompt, sp.replace(logit_bias=()), N_TOKENS)
    result = run_case(case, f"logit_bias/{method}/{temp}")
    assert result["cells"] > 1


@pytest.mark.parametrize("method", ["none", "chain", "resispec", "auto"])
def test_greedy_with_a_logit_bias_is_the_biased_argmax_path(method):
    engine, target, prompt, sp, dp, plain = _biased_case(method, "T1")
    sp = sp.replace(temperature=0.0)
    law = exact_law(target, prompt, sp, N_TOKENS)
    assert len(law) == 1 and law != exact_law(target, prompt, sp.replace(logit_bias=()), N_TOKENS)
    assert list(sample(engine, sp, dp, 3, plain)) == list(law)
