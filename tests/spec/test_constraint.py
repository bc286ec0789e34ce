"""Constrained generation under speculation: the law is plain constrained sampling.

At every position the constraint's mask comes first (disallowed logits -> -inf), then
temperature -> top-k -> top-p -> min-p.  A ``fake_models.PathConstraint`` allows a set that
depends on the whole path (so a sibling leaking into another node's mask, or a mask taken
at the wrong node, changes the law), and ends the reply early on some paths.  The harness of
test_exactness.py checks the joint law of the first 4 tokens through the real engine for
every method, both tree policies, lookup on and off, and auto; greedy must be plain
constrained greedy.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from fake_models import PathConstraint
from resispec_gguf.kernels import sampling
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from law_harness import (COST_REGIMES, EOG, LOOKUP_PROMPT, METHODS, N_TOKENS, PROMPT, RUNS, TEMPERATURES, V,
                            _pair, check_law)

CONSTRAINT = PathConstraint(V, EOG)


def constrained_law(target, prompt, sp: SamplingParams, n: int) -> dict[tuple, float]:
    """``{sequence: probability}`` of the first ``n`` tokens under plain constrained
    sampling; a sequence ending in EOG (sampled, or forced by a complete constraint) stops."""
    law: dict[tuple, float] = {}

    def rec(prefix, prob):
        if len(prefix) == n:
            law[prefix] = prob
            return
        allowed = CONSTRAINT.allowed(prefix)
        if allowed == [EOG]:
            law[prefix + (EOG,)] = law.get(prefix + (EOG,), 0.0) + prob
            return
        row = target.row(list(prompt) + list(prefix))
        masked = sampling.mask_logits(row, sampling.bitmask_from_ids(allowed, V))
        if sp.greedy:
            p = np.zeros(V)
            p[int(np.argmax(masked))] = 1.0
        else:
            p = sampling.probs_dense(masked, sp.temperature, sp.top_k, sp.top_p, sp.min_p)
        assert set(np.flatnonzero(p)) <= set(allowed)
        for x in np.flatnonzero(p):
            if x == EOG:
                law[prefix + (EOG,)] = law.get(prefix + (EOG,), 0.0) + prob * p[x]
            else:
                rec(prefix + (int(x),), prob * p[x])

    rec((), 1.0)
    return law


def sample(engine: Engine, prompt, sp: SamplingParams, dp: DraftParams, runs: int) -> Counter:
    counts: Counter = Counter()
    for seed in range(runs):
        res = engine.generate(prompt, sp.replace(seed=seed, max_tokens=N_TOKENS), dp, constraint=CONSTRAINT)
        seq = tuple(res.tokens) + ((EOG,) if res.finish_reason == "eos" else ())
        assert len(seq) == N_TOKENS or seq[-1] == EOG, (seq, res.finish_reason)
        counts[seq] += 1
    return counts


CASES = (
    [(m, "budget", lookup) for m in METHODS for lookup in (False, True)]
    + [(m, "static", False) for m in METHODS]
    + [("auto", "budget", True)]
)


@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("method,policy,lookup", CASES)
def test_constrained_output_law_is_exact(method, policy, lookup, temp):
    target, draft = _pair()
    sp = TEMPERATURES[temp]
    prompt = LOOKUP_PROMPT if lookup or method == "auto" else PROMPT
    if method == "auto":
        engine = Engine(target, draft, cost_curves=COST_REGIMES["gpu"])
        dp = DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4)
    else:
        engine = Engine(target, draft)
        dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4, policy=policy, lookup=lookup)
    counts = sample(engine, prompt, sp, dp, RUNS)
    check_law(counts, constrained_law(target, prompt, sp, N_TOKENS), f"constrained/{method}/{policy}/{lookup}/{temp}")


def test_lookup_only_constrained_law_is_exact():
    target, _ = _pair()
    sp = TEMPERATURES["T1"]
    dp = DraftParams(method="chain", depth=3, budget=6, lookup=True)
    counts = sample(Engine(target, None), LOOKUP_PROMPT, sp, dp, RUNS)
    check_law(counts, constrained_law(target, LOOKUP_PROMPT, sp, N_TOKENS), "constrained/lookup-only")


@pytest.mark.parametrize("method", ("none",) + METHODS + ("auto",))
def test_constrained_greedy_is_plain_constrained_greedy(method):
    sp = SamplingParams(temperature=0.0)
    for lookup, prompt in ((False, PROMPT), (True, LOOKUP_PROMPT)):
        target, draft = _pair()
        law = constrained_law(target, prompt, sp, N_TOKENS)
        assert len(law) == 1
        dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4,
                         lookup=lookup and method not in ("none", "auto"))
        counts = sample(Engine(target, draft, cost_curves=COST_REGIMES["gpu"]), prompt, sp, dp, 3)
        assert list(counts) == list(law)


def test_a_complete_constraint_ends_the_reply_without_a_model_call():
    """Once only an end token may follow, the reply ends ("eos") at no further target cost."""
    target, draft = _pair()
    engine = Engine(target, draft)
    for seed in range(40):
        before = target.calls
        res = engine.generate(PROMPT, SamplingParams(temperature=1.0, seed=seed, max_tokens=30),
                              DraftParams(method="none"), constraint=CONSTRAINT)
        h = res.tokens
        for i, x in enumerate(h):
            assert x in CONSTRAINT.allowed(h[:i])
        if len(h) >= 2 and h[-1] == h[-2]:
            assert res.finish_reason == "eos"
            assert target.calls - before == len(h)  # one decode per token, none after the last
