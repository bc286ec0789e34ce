"""Memory candidates keep the output law exact: the joint law of the first tokens through the
real engine (law_harness) with the engine's memory of past answers pre-filled, so that
every node carries several counted candidates from it and from the request's own context:
alone (no draft model), mixed with the draft's draws under fixed methods and ``auto``,
under a path-dependent constraint, and with several requests in one step sharing (and
filling) one memory.  The memory also grows with every run's answer, so later runs see
candidates that earlier runs taught it.  Greedy stays the target's argmax path."""

from __future__ import annotations

from collections import Counter

import pytest

from fake_models import PathConstraint
from law_harness import (COST_REGIMES, EOG, LOOKUP_PROMPT, N_TOKENS, RUNS, TEMPERATURES, V, _pair, check_law,
                         constrained_law, exact_law, filled_memory, sample, sample_batch, sample_constrained,
                         slotted_pair)
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.decoding.candidates.context import ContextSource


def test_the_filled_memory_gives_several_candidates_per_node():
    drafts = ContextSource(LOOKUP_PROMPT, filled_memory(), k=3)
    assert len(drafts.propose()) >= 3
    assert len(drafts.propose([0])) >= 2 and len(drafts.propose([0, 1])) >= 2


CASES = {
    "memory alone": (None, DraftParams(method="chain", lookup=True, use_draft=False, depth=3, budget=6, lookup_k=3)),
    "resispec + memory": ("draft", DraftParams(method="resispec", draws=3, depth=3, budget=8, draft_support=4,
                                               lookup=True, lookup_k=3)),
    "rrs + memory": ("draft", DraftParams(method="rrs", draws=2, depth=3, budget=8, draft_support=4, lookup=True,
                                          lookup_k=2)),
    "chain + memory": ("draft", DraftParams(method="chain", depth=3, budget=6, lookup=True, lookup_k=3)),
    "auto": ("auto", DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4, lookup_k=3)),
    # no draft model: every step is the lookup (or grammar) arm's, grown best-first and cut whole
    "auto, memory alone": ("auto-free", DraftParams(method="auto", depth=4, budget=8, lookup_k=3)),
}


def _engine(kind):
    target, draft = _pair()
    if kind in ("auto", "auto-free"):
        return target, Engine(target, draft if kind == "auto" else None, cost_curves=COST_REGIMES["gpu"],
                              memory=filled_memory())
    return target, Engine(target, draft if kind == "draft" else None, memory=filled_memory())


@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("case", list(CASES))
def test_memory_candidates_keep_the_law_exact(case, temp):
    kind, dp = CASES[case]
    target, engine = _engine(kind)
    sp = TEMPERATURES[temp]
    before = engine.memory.stats()["answers"]
    counts = sample(engine, sp, dp, RUNS)
    check_law(counts, exact_law(target, LOOKUP_PROMPT, sp, N_TOKENS), f"memory/{case}/{temp}")
    assert engine.memory.stats()["answers"] > before  # the runs' answers joined it


@pytest.mark.parametrize("case", ["memory alone", "resispec + memory", "auto", "auto, memory alone"])
def test_memory_candidates_under_a_constraint_keep_the_constrained_law(case):
    kind, dp = CASES[case]
    target, engine = _engine(kind)
    constraint = PathConstraint(V, EOG)
    sp = TEMPERATURES["T1"]
    counts = sample_constrained(engine, LOOKUP_PROMPT, sp, dp, RUNS, constraint)
    check_law(counts, constrained_law(target, LOOKUP_PROMPT, sp, N_TOKENS, constraint), f"memory/constrained/{case}")


def test_requests_in_one_step_sharing_the_memory_keep_their_laws():
    """Two requests per step (``--parallel``), one memory they read and fill as they end."""
    target, draft = slotted_pair(2)
    engine = Engine(target, draft, cost_curves=COST_REGIMES["gpu"], memory=filled_memory())
    sp = TEMPERATURES["T1"]
    requests = [(LOOKUP_PROMPT, sp, CASES["auto"][1], None), (LOOKUP_PROMPT, sp, CASES["resispec + memory"][1], None)]
    runs = sample_batch(engine, requests, RUNS)
    law = exact_law(target, LOOKUP_PROMPT, sp, N_TOKENS)
    for i in range(2):
        check_law(Counter(run[i] for run in runs), law, f"memory/batch/request {i}")


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_with_memory_is_the_argmax_path(case):
    kind, dp = CASES[case]
    target, engine = _engine(kind)
    sp = SamplingParams(temperature=0.0, max_tokens=10)
    plain = engine.generate(LOOKUP_PROMPT, sp, DraftParams(method="none", use_memory=False)).tokens
    for seed in range(3):
        assert engine.generate(LOOKUP_PROMPT, sp.replace(seed=seed), dp).tokens == plain, case
