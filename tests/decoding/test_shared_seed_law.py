"""Requests that share a seed keep the target's law when state spans requests.

The memory of past answers, the acceptance figures ``auto`` carries between requests and,
under ``--parallel``, the requests beside one in a pass are all functions of other
requests' uniforms.  Each case below runs, for every seed s of the harness, a sequence of
requests on one engine *all seeded s* (the memory emptied between seeds), and checks the
law of the last request's first tokens (and, for two requests in one pass, their joint law
against the product of their laws: ``seeding`` gives them different streams).  A request
that drew its uniforms from its seed alone would re-draw the first request's tokens with
the same uniforms and then verify the memory's copy of the next one with the uniform that
produced it (the fair coin's third token came out 0 three times in four).
"""

from __future__ import annotations

from collections import Counter
import itertools

import numpy as np
import pytest

from fake_models import MarkovModel, PathConstraint
from law_harness import (COST_REGIMES, EOG, LOOKUP_PROMPT, RUNS, TEMPERATURES, V, _pair, check_law,
                         constrained_law, exact_law)
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine

# a context-free fair coin: tokens 0 and 1 at 1/2 each; 2 (the prompt's) and 3 (end) never
COIN_V, COIN_EOG = 4, 3
COIN_ROW = np.array([0.0, 0.0, -1e4, -1e4], np.float32)
COIN_PROMPT = [2, 2, 2, 2]
COIN_N = 5
T1 = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)

PLAIN = DraftParams(method="none")
LOOKUP = DraftParams(method="chain", lookup=True, use_draft=False, depth=4, budget=8, lookup_k=3)
AUTO = DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4, lookup_k=3)


def _coin(n_slots=1):
    return MarkovModel(lambda ctx: COIN_ROW, COIN_V, order=1, n_seq_max=97 + n_slots, eog=(COIN_EOG,), name="coin",
                       n_slots=n_slots)


def _coin_law(n):
    return {seq: 0.5 ** n for seq in itertools.product((0, 1), repeat=n)}


def _seq(res, eog):
    return tuple(res.tokens) + ((eog,) if res.finish_reason == "eos" else ())


def _shared_seed_runs(engine, prompt, sp, steps, n, constraint=None):
    """For every seed: empty the memory (answers and learnt bins), then run ``steps`` in turn,
    every request seeded alike; ``steps`` items are a ``DraftParams`` or "forget answers"
    (the answers emptied, the learnt bins kept).  The last request's first ``n`` tokens."""
    counts: Counter = Counter()
    for seed in range(RUNS):
        engine.memory.clear()
        res = None
        for step in steps:
            if step == "forget answers":
                engine.memory.clear(learnt=False)
                continue
            res = engine.generate(prompt, sp.replace(seed=seed, max_tokens=n), step, constraint=constraint)
        counts[_seq(res, EOG if engine.n_vocab == V else COIN_EOG)] += 1
    return counts


COIN_CASES = {
    # the issue's counterexample: request 2 re-draws request 1's tokens, then checks its copy
    "plain then lookup": [PLAIN, LOOKUP],
    "plain then lookup twice": [PLAIN, LOOKUP, LOOKUP],
    "auto twice": [AUTO, AUTO],
    "auto three times": [AUTO, AUTO, AUTO],
}


@pytest.mark.parametrize("case", list(COIN_CASES))
def test_requests_sharing_a_seed_keep_the_coins_law(case):
    engine = Engine(_coin(), None, cost_curves=COST_REGIMES["gpu no draft"])
    counts = _shared_seed_runs(engine, COIN_PROMPT, T1, COIN_CASES[case], COIN_N)
    check_law(counts, _coin_law(COIN_N), f"shared seed/{case}")


PAIR_CASES = {  # (requests, constrained, cost regime)
    "plain then auto": ([PLAIN, AUTO], False, "gpu"),
    "auto then auto, constrained": ([AUTO, AUTO], True, "gpu"),
    # what auto learnt of the memory's candidates, carried alone (on the CPU's curves its
    # trees, and the uniforms they take, follow those bins)
    "carried bins alone": ([AUTO, "forget answers", AUTO], False, "cpu"),
    "plain then resispec + lookup": ([PLAIN, DraftParams(method="resispec", draws=3, depth=3, budget=8,
                                                         draft_support=4, lookup=True, lookup_k=3)], False, "gpu"),
}


@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("case", list(PAIR_CASES))
def test_requests_sharing_a_seed_keep_the_pairs_law(case, temp):
    steps, constrained, costs = PAIR_CASES[case]
    target, draft = _pair()
    engine = Engine(target, draft, cost_curves=COST_REGIMES[costs])
    sp = TEMPERATURES[temp]
    n = 4
    constraint = PathConstraint(V, EOG) if constrained else None
    counts = _shared_seed_runs(engine, LOOKUP_PROMPT, sp, steps, n, constraint)
    law = (constrained_law(target, LOOKUP_PROMPT, sp, n, constraint) if constraint is not None
           else exact_law(target, LOOKUP_PROMPT, sp, n))
    check_law(counts, law, f"shared seed/{case}/{temp}")


def test_two_requests_of_one_seed_in_one_pass_after_a_third():
    """``--parallel``: request A (plain, seed s) runs alone and its answer joins the memory;
    then B (lookup) and C (auto) run in one pass, both seeded s.  Each keeps its law, and the
    pair's joint law is the product of theirs: they read the memory and each other's steps,
    so neither draws from the seed alone."""
    n = COIN_N
    engine = Engine(_coin(2), None, cost_curves=COST_REGIMES["gpu no draft"])
    pairs: Counter = Counter()
    for seed in range(RUNS):
        engine.memory.clear()
        batch = engine.batch()
        sp = T1.replace(seed=seed, max_tokens=n)
        a = batch.admit(engine.generation(COIN_PROMPT, sp, PLAIN))
        while batch.busy:
            batch.step()
        reqs = [batch.admit(engine.generation(COIN_PROMPT, sp, dp)) for dp in (LOOKUP, AUTO)]
        while batch.busy:
            batch.step()
        assert a.gen.result().tokens
        pairs[tuple(_seq(r.gen.result(), COIN_EOG) for r in reqs)] += 1
    law = _coin_law(n)
    for i, label in enumerate(("lookup", "auto")):
        counts: Counter = Counter()
        for pair, c in pairs.items():
            counts[pair[i]] += c
        check_law(counts, law, f"one pass/{label}")
    joint = Counter({a + b: c for (a, b), c in pairs.items()})
    check_law(joint, {a + b: pa * pb for a, pa in law.items() for b, pb in law.items()}, "one pass/joint")


# --------------------------------------------------------------------------- what a seed reproduces


def test_a_seed_alone_fixes_requests_that_read_no_shared_state():
    """Plain decoding, and a one-slot engine's requests with ``use_memory`` False, draw from
    the seed alone: the same seed gives the same reply whatever ran before."""
    target, draft = _pair()
    engine = Engine(target, draft, cost_curves=COST_REGIMES["gpu"])
    sp = TEMPERATURES["T1"].replace(seed=5, max_tokens=12)
    for dp in (PLAIN, AUTO.replace(use_memory=False), LOOKUP.replace(use_memory=False)):
        first = engine.generate(LOOKUP_PROMPT, sp, dp).tokens
        engine.generate(LOOKUP_PROMPT, sp.replace(seed=6), AUTO)  # fills the memory
        assert engine.generate(LOOKUP_PROMPT, sp, dp).tokens == first
        assert engine.seed_key(5, dp) is None


def test_a_seed_and_the_same_history_reproduce_a_reply_that_reads_the_memory():
    """Two fresh engines given the same requests give the same replies: a seed's first use is
    the seed alone, its later uses under keys of their own, so a repeat is a new draw."""
    def replies():
        target, draft = _pair()
        engine = Engine(target, draft, cost_curves=COST_REGIMES["gpu"])
        sp = TEMPERATURES["T1"].replace(seed=5, max_tokens=16)
        return [tuple(engine.generate(LOOKUP_PROMPT, sp, dp).tokens) for dp in (AUTO, PLAIN, AUTO, AUTO, LOOKUP)]

    first, second = replies(), replies()
    assert first == second
    alone = Engine(*_pair(), cost_curves=COST_REGIMES["gpu"], memory=None)
    assert first[0] == tuple(alone.generate(LOOKUP_PROMPT, TEMPERATURES["T1"].replace(seed=5, max_tokens=16),
                                            AUTO).tokens)  # a first use: the seed alone
    assert len({first[0], first[2], first[3]}) > 1  # repeats under auto: new draws


def test_starting_afresh_replays_a_seed():
    """``start_afresh`` forgets the memory and the ledger together: a replayed seed then draws
    what it drew on the fresh engine (what benchmarks that replay their seeds need)."""
    engine = Engine(*_pair(), cost_curves=COST_REGIMES["gpu"])
    sp = TEMPERATURES["T1"].replace(seed=3, max_tokens=16)
    first = [engine.generate(LOOKUP_PROMPT, sp, AUTO).tokens for _ in range(3)]
    engine.start_afresh()
    assert engine.memory.stats()["answers"] == 0 and engine.memory.learnt() is None
    assert [engine.generate(LOOKUP_PROMPT, sp, AUTO).tokens for _ in range(3)] == first
