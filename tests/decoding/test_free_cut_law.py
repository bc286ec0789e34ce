"""Steps without draft rows are cut anywhere, and the law stays exact.

``tree.grow_free`` grows a lookup-only (or grammar-only) tree best-first, then keeps the
best-scored nodes, as many as ``plan.leaves`` finds pay: nothing in such a tree is random,
so its cut may drop nodes that were expanded (their candidates became children) and keep a
node whose children were dropped (its candidates still checked; one accepted there ends the
step).  test_memory_law.py's "auto, memory alone" runs on a flat cost curve, where keeping
every node pays, so it never cuts an expanded node.  Here the cut is forced, two ways:

* "cpu curve": auto's own ``StepPlan`` on the 2-core CPU's target curve, no draft model:
  ``free_grows`` (optimistic by design) lets the tree grow past what ``leaves`` then keeps,
  so some steps drop expanded nodes;
* "scripted cut": a plan (``_CutPlan``) that grows the tree to its bounds and keeps 1, 2 or
  3 nodes in turn, so that about one step in five (half the runs) drops expanded nodes.

Each test counts, by wrapping ``grow_free`` where the generation calls it, the expanded
nodes dropped and the kept nodes that lost a child, asserts that both happened often, then
checks the joint law of the first tokens against the target's (law_harness.check_law), with
the engine's memory pre-filled and growing as the runs go.
"""

from __future__ import annotations

from collections import Counter

import pytest

from fake_models import PathConstraint
from law_harness import (CPU_T, EOG, FLAT, LOOKUP_PROMPT, N_TOKENS, RUNS, TEMPERATURES, V, _pair, check_law,
                         constrained_law, exact_law, filled_memory, sample, sample_constrained)
from resispec_gguf.config import DraftParams
from resispec_gguf.decoding import drafting, tree as tree_mod
from resispec_gguf.decoding.autotune import AutoTuner
from resispec_gguf.engine import Engine

DP = DraftParams(method="auto", depth=4, budget=8, lookup_k=3)


class _CutPlan:
    """A lookup step's plan that grows as far as the bounds allow and keeps ``keep`` nodes."""

    kind = "lookup"
    arm = "lookup"
    cost = 1.0
    value = 1.0
    ask = 0  # no text draft's chain
    chain = False
    n_nodes = 0
    promise = 0.0
    background = None

    def __init__(self, params, keep):
        self.params, self.keep = params, keep

    def free_grows(self, scores, bound, room):
        return True

    def leaves(self, expanded_scores, leaf_scores):
        return min(self.keep, len(leaf_scores))

    def width(self, level, scores):
        return len(scores)

    def tail_pays(self, score):
        return False

    def tail(self, score):
        return False


class _CutTuner(AutoTuner):
    """auto's tuner with every step a ``_CutPlan``, keeping 1, 2, 3, 1, ... nodes."""

    drafts = False
    lazy_start = False

    def __init__(self, dp):
        super().__init__(FLAT, None, dp, has_draft=False)
        self.steps = 0

    def choose(self, pending=1, forced=0, remaining=0, stale=False, copy=()):
        self.steps += 1
        params = self.limits.replace(method="chain", draws=1, policy="budget", depth=self.limits.max_depth,
                                     budget=self.limits.max_budget)
        return _CutPlan(params, 1 + self.steps % 3)

    def observe_step(self, plan, tokens, seconds):
        pass

    def observe_children(self, plan, mean_children):
        pass


@pytest.fixture
def cuts(monkeypatch):
    """Counts, over every ``grow_free`` call the generations make: the steps, the expanded
    non-root nodes dropped by the cut, the steps that dropped one, and the kept expanded
    non-root nodes whose candidates lost their node (a child dropped)."""
    counts: Counter = Counter()
    grow_free = tree_mod.grow_free

    def counted(tree, limits, draw, plan=None):
        out = grow_free(tree, limits, draw, plan)  # ``tree`` is left as grown, ``out`` is the cut
        grown = sum(1 for i in range(1, len(tree)) if tree.expanded(i))
        kept = sum(1 for i in range(1, len(out)) if out.expanded(i))
        counts["steps"] += 1
        counts["expanded dropped"] += grown - kept
        counts["steps dropping expanded"] += grown > kept
        counts["kept nodes that lost a child"] += sum(
            1 for i in range(1, len(out)) if out.expanded(i) and len(out.children[i]) < len(out.candidates(i)))
        return out

    monkeypatch.setattr(drafting, "grow_free", counted)
    return counts


def _engine(case):
    target, _ = _pair()
    if case == "cpu curve":
        return target, Engine(target, None, cost_curves=(CPU_T, None), memory=filled_memory())
    engine = Engine(target, None, cost_curves=(FLAT, None), memory=filled_memory())
    engine._tuner = lambda dp, _context=0: _CutTuner(dp)
    return target, engine


# the least each count must reach over the runs: at RUNS = 1600, 161 (T1), 73 (T0.6-filters)
# and 75 (constrained) of the cpu curve's 3400-4300 steps dropped expanded nodes, 830, 975 and
# 2218 of the scripted cut's 3400-4000
LEAST = {"cpu curve": RUNS // 40, "scripted cut": RUNS // 4}


def _assert_cut(counts, case):
    assert counts["steps"] >= RUNS, counts
    assert counts["steps dropping expanded"] >= LEAST[case], counts
    assert counts["expanded dropped"] >= counts["steps dropping expanded"], counts
    assert counts["kept nodes that lost a child"] >= LEAST[case], counts


@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("case", ["cpu curve", "scripted cut"])
def test_cutting_expanded_nodes_of_a_free_step_keeps_the_law(case, temp, cuts):
    target, engine = _engine(case)
    sp = TEMPERATURES[temp]
    before = engine.memory.stats()["answers"]
    counts = sample(engine, sp, DP, RUNS)
    _assert_cut(cuts, case)
    check_law(counts, exact_law(target, LOOKUP_PROMPT, sp, N_TOKENS), f"free cut/{case}/{temp}")
    assert engine.memory.stats()["answers"] > before


@pytest.mark.parametrize("case", ["cpu curve", "scripted cut"])
def test_cutting_expanded_nodes_under_a_constraint_keeps_the_constrained_law(case, cuts):
    """The same under a path-dependent constraint (masks per kept node, forced candidates)."""
    target, engine = _engine(case)
    constraint = PathConstraint(V, EOG)
    sp = TEMPERATURES["T1"]
    counts = sample_constrained(engine, LOOKUP_PROMPT, sp, DP, RUNS, constraint)
    _assert_cut(cuts, case)
    check_law(counts, constrained_law(target, LOOKUP_PROMPT, sp, N_TOKENS, constraint), f"free cut/constrained/{case}")
