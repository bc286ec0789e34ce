"""``stepplan.StepPlan``: the growth rule ``tree.grow`` consults, on cost tables alone (the
tuner that builds plans, and ``Background`` within a shared step, are tested with
``autotune``)."""

import pytest

from resispec_gguf.config import DraftParams
from resispec_gguf.spec import costs
from resispec_gguf.spec.stepplan import TABLE_ROWS, StepPlan

ROWS = costs.ROW_COUNTS
GPU = costs.CostCurve(ROWS, tuple(0.020 + 0.0002 * n for n in ROWS))  # rows nearly free
LINEAR = costs.CostCurve(ROWS, tuple(0.020 * n for n in ROWS))  # n rows cost n times one
DRAFT = costs.CostCurve(ROWS, tuple(0.002 + 0.0001 * n for n in ROWS))
PARAMS = DraftParams(method="chain", draws=1, depth=8, budget=16)


def _plan(target, accept=0.9, params=PARAMS):
    return StepPlan("chain", params, costs.cost_table(target, TABLE_ROWS), costs.cost_table(DRAFT, TABLE_ROWS),
                    accept=accept, overhead_s=0.0)


def _depth(plan, factor=0.9):
    score, depth = 1.0, 0
    while depth < 20 and plan.width(depth, [score * factor]):
        score *= factor
        depth += 1
    return depth


def test_a_chain_grows_where_rows_are_cheap_and_stops_where_they_cost_their_weight():
    deep, none = _depth(_plan(GPU)), _depth(_plan(LINEAR))
    assert deep >= 4 and none < deep
    assert deep <= PARAMS.depth


def test_a_plan_keeps_to_its_node_budget_and_counts_what_it_took():
    plan = _plan(GPU)
    k = plan.width(0, [0.9] * 12)
    assert 0 < k <= PARAMS.budget // 2  # each expanded child needs a row below it
    assert plan.n_nodes == k and plan.value == pytest.approx(1.0 + 0.9 * k)


def test_nothing_to_grow_or_keep_is_zero():
    plan = _plan(GPU)
    assert plan.width(0, []) == 0 and plan.leaves([0.9], []) == 0


def test_leaves_are_kept_while_they_pay():
    assert _plan(GPU).leaves([0.9], [0.8, 0.7, 0.6]) == 3
    assert _plan(LINEAR, accept=0.1).leaves([0.9], [0.05, 0.01]) == 0
