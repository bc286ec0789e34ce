"""An answer joining the memory in the middle of a request's step keeps the law exact.

The memory is shared by every request, slot and thread, so another request's answer may
join it while a request grows its step's tree: a cursor the request made before the join is
then stale (``suffix_index``: a write between queries makes the next one raise it), and ``ContextSource.propose`` catches ``StaleCursor`` and proposes again from the
memory as it now is, so one tree holds candidates from two states of the memory.  Each
node's candidates are still fixed before its uniforms are drawn, so the law must stay the
target's.

Here the join is made to happen inside a proposal: ``_Joiner`` wraps the memory index's
``top`` and, once per step, at the step's first, second or third proposal in turn (the root's
or a deeper node's), remembers another answer (from its own generator, never the request's
uniforms) just before the query, which then finds its cursor stale.  Each test counts the
joins and the ``StaleCursor`` retries (a wrapper on ``ContextSource._propose`` sees the
exception go by), asserts that every join was retried and that there were many, then checks
the joint law of the first tokens (law_harness.check_law).
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from law_harness import (COST_REGIMES, EOG, LOOKUP_PROMPT, N_TOKENS, RUNS, TEMPERATURES, _pair, check_law, exact_law,
                         filled_memory, sample)
from resispec_gguf.config import DraftParams
from resispec_gguf.decoding import drafting
from resispec_gguf.decoding.candidates.context import ContextSource
from resispec_gguf.decoding.suffix_index import StaleCursor
from resispec_gguf.engine import Engine

CASES = {
    "memory alone": (None, DraftParams(method="chain", lookup=True, use_draft=False, depth=3, budget=6, lookup_k=3)),
    "resispec + memory": ("draft", DraftParams(method="resispec", draws=3, depth=3, budget=8, draft_support=4,
                                               lookup=True, lookup_k=3)),
    # on these flat curves and this memory, auto's steps are all lookup trees (grown and cut whole)
    "auto": ("auto", DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4, lookup_k=3)),
    # a plain step, then auto's draft trees in a fixed shape (law_harness._ScriptedTuner), continued
    # by lookup tails: joins while the draft's levels draw
    "auto, draft trees": ("auto", DraftParams(method="resispec", draws=3, depth=3, budget=8, draft_support=4,
                                               lookup_k=3)),
}
PLAIN_STEPS = {"auto, draft trees": 1}


class _Joiner:
    """Wraps ``memory.index.top``: when armed, the next query first remembers another answer
    (the prompt's tail and 6 tokens, or 6 tokens, the prompt's tail and 3 of them, from its
    own generator), then runs on the cursor it was given, which the join made stale."""

    def __init__(self, memory, seed=11):
        self.memory = memory
        self.rng = np.random.default_rng(seed)
        self.armed = False
        self.counts: Counter = Counter()
        self._top = memory.index.top
        memory.index.top = self.top

    def _answer(self):
        body = self.rng.choice(EOG, size=6, p=[0.1, 0.15, 0.2, 0.25, 0.3]).tolist()  # unlike filled_memory's
        tail = LOOKUP_PROMPT[-3:]
        return tail + body if self.rng.random() < 0.5 else body + tail + body[:3]

    def top(self, cursor, k):
        if self.armed:
            self.armed = False
            self.memory.remember(self._answer())
            self.counts["joins"] += 1
        return self._top(cursor, k)


@pytest.fixture
def joins(monkeypatch):
    """``.install(memory)`` puts a ``_Joiner`` on the memory, armed once per step (at the
    step's proposal 1, 2 or 3 in turn); ``.counts``: the steps, StaleCursor retries and
    proposals made after a join within its step (``.install``'s joiner counts the joins)."""
    counts: Counter = Counter()
    state = {"tree": None, "n": 0, "steps": 0, "joined": False}
    joiner = [None]
    propose_at, propose = drafting.DraftPhase._propose, ContextSource._propose

    def counted_propose_at(self, tree, node):
        if tree is not state["tree"]:  # a new step's tree
            state.update(tree=tree, n=0, steps=state["steps"] + 1, joined=False)
            counts["steps"] += 1
        state["n"] += 1
        j = joiner[0]
        context = self.sources.source("context")
        if j is not None and context is not None and context.memory is j.memory:
            if state["joined"]:
                counts["proposals after a join in the step"] += 1
            elif state["n"] == 1 + state["steps"] % 3:
                j.armed, state["joined"] = True, True
        return propose_at(self, tree, node)

    def counted_propose(self, path, run):
        try:
            return propose(self, path, run)
        except StaleCursor:
            counts["stale retries"] += 1
            raise

    def install(memory):
        joiner[0] = _Joiner(memory)
        return joiner[0]

    monkeypatch.setattr(drafting.DraftPhase, "_propose", counted_propose_at)
    monkeypatch.setattr(ContextSource, "_propose", counted_propose)
    return SimpleNamespace(counts=counts, install=install)


def _engine(kind):
    target, draft = _pair()
    memory = filled_memory()
    if kind == "auto":
        return target, Engine(target, draft, cost_curves=COST_REGIMES["gpu"], memory=memory)
    return target, Engine(target, draft if kind == "draft" else None, memory=memory)


@pytest.mark.parametrize("case", list(CASES))
def test_an_answer_joining_mid_step_keeps_the_law(case, joins):
    kind, dp = CASES[case]
    target, engine = _engine(kind)
    joiner = joins.install(engine.memory)
    sp = TEMPERATURES["T1"]
    before = engine.memory.stats()["answers"]
    counts = sample(engine, sp, dp, RUNS, PLAIN_STEPS.get(case, 0))
    seen = joins.counts + joiner.counts
    # the mechanism: joins inside proposals, every one retried, in a good share of the steps,
    # and nodes of the same step proposed from the memory as the join left it
    assert seen["joins"] >= RUNS // 2, seen
    assert seen["stale retries"] == seen["joins"], seen
    assert seen["proposals after a join in the step"] >= RUNS // 2, seen
    assert engine.memory.stats()["answers"] >= before + seen["joins"], engine.memory.stats()
    check_law(counts, exact_law(target, LOOKUP_PROMPT, sp, N_TOKENS), f"memory join/{case}")


def test_without_the_retry_a_mid_step_join_is_an_error(joins, monkeypatch):
    """The joins above do reach the retry: with ``propose`` made to skip it, the first
    join mid-proposal raises ``StaleCursor`` out of the request."""
    monkeypatch.setattr(ContextSource, "propose", lambda self, path=(), run=0: self._propose(tuple(path), run))
    kind, dp = CASES["memory alone"]
    target, engine = _engine(kind)
    joins.install(engine.memory)
    with pytest.raises(StaleCursor):
        sample(engine, TEMPERATURES["T1"], dp, 50)
