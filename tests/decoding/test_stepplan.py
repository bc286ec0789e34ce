"""``stepplan.StepPlan``: the growth rule ``tree.grow`` consults, on cost tables alone (the
tuner that builds plans, and ``Background`` within a shared step, are tested with
``autotune``)."""

import pytest

from resispec_gguf.config import DraftParams
from resispec_gguf.decoding import costs
from resispec_gguf.decoding.stepplan import TABLE_ROWS, Background, StepPlan, in_step_rate, in_step_seconds

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


# --------------------------------------------------------------------------- within a shared step

T_S, D_S = costs.cost_table(GPU, TABLE_ROWS), costs.cost_table(DRAFT, TABLE_ROWS)
BUSY = dict(rows=56, value=24.0, draft_rows=7)  # the others: 56 rows, 24 tokens, 7 draft rows per call


def test_a_level_the_others_call_anyway_costs_its_rows_and_a_deeper_one_a_call():
    bg = Background(draft_levels=2, **BUSY)
    base = in_step_seconds(bg, T_S, D_S, 1)
    assert base == pytest.approx(2 * D_S[7] + T_S[57])  # the others' calls and the shared target decode
    two = in_step_seconds(bg, T_S, D_S, 3, [1, 1])
    assert two - base == pytest.approx(2 * (D_S[8] - D_S[7]) + T_S[59] - T_S[57])
    three = in_step_seconds(bg, T_S, D_S, 4, [1, 1, 1])
    assert three - two == pytest.approx(D_S[1] + T_S[60] - T_S[59])


def test_a_request_speculates_beside_others_only_where_the_levels_are_shared():
    """Beside a busy step a chain at acceptance 0.9 pays when its levels join the others'
    calls; when each level is a call of its own, what it adds is worth less than the step's
    rate and plain decoding is the better step.  A draft that never agrees never pays."""
    def rates(levels, a=0.9):
        bg = Background(draft_levels=levels, **BUSY)
        plain = in_step_rate(bg, T_S, D_S, first=0.0, then=0.0, rows=1.0, depth=0)
        chain = in_step_rate(bg, T_S, D_S, first=a, then=a, rows=1.0, depth=6)
        return plain, chain

    plain, chain = rates(6)
    assert chain > 1.1 * plain  # one request of four lifts the whole step by a tenth
    plain, chain = rates(0)
    assert chain < plain
    plain, chain = rates(6, a=0.0)
    assert chain < plain
    # plain: the others' tokens and one more, for their step and one more row
    bg = Background(draft_levels=6, **BUSY)
    assert plain == pytest.approx((BUSY["value"] + 1.0) / in_step_seconds(bg, T_S, D_S, 1))


def test_wider_levels_cost_more_rows_for_the_same_worth():
    bg = Background(draft_levels=4, **BUSY)
    narrow = in_step_rate(bg, T_S, D_S, first=0.9, then=0.8, rows=1.0, depth=4)
    wide = in_step_rate(bg, T_S, D_S, first=0.9, then=0.8, rows=6.0, depth=4)
    assert wide < narrow


def test_a_lookup_tail_row_is_taken_where_rows_are_cheap_and_never_beside_others():
    gpu, linear = _plan(GPU), _plan(LINEAR)
    for plan in (gpu, linear):
        plan.width(0, [0.9])
        plan.leaves([0.9], [0.8])
    value, nodes = gpu.value, gpu.n_nodes
    assert gpu.tail(0.7) and gpu.value == pytest.approx(value + 0.7) and gpu.n_nodes == nodes + 1
    assert not gpu.tail(1e-4)  # worth less than its row at the step's rate
    assert not linear.tail(0.7)  # a row costs what a whole step does
    shared = StepPlan("chain", PARAMS, costs.cost_table(GPU, TABLE_ROWS), costs.cost_table(DRAFT, TABLE_ROWS),
                      accept=0.9, overhead_s=0.0, background=Background(rows=4, value=4.0, draft_rows=4,
                                                                              draft_levels=2))
    shared.width(0, [0.9])
    shared.leaves([0.9], [0.8])
    assert not shared.tail(0.9)



# a CPU's curve (measured on the 2-core development machine): 8 rows cost 4.9 times one, 16 rows 5.9
CPU = costs.CostCurve(ROWS, tuple(0.085 * r for r in (1.0, 1.56, 1.94, 2.21, 2.32, 2.91, 3.42, 4.94, 5.79, 5.89,
                                                      9.88, 10.09)))


def _free_plan(target):
    return StepPlan("lookup", PARAMS.replace(budget=32, depth=16), costs.cost_table(target, TABLE_ROWS),
                    costs.cost_table(DRAFT, TABLE_ROWS), accept=0.9, overhead_s=0.0)


def test_a_free_step_grows_while_some_number_of_nodes_below_could_pay():
    chain = [0.97 ** (i + 1) for i in range(4)]
    # on the CPU curve a copy run's 16-node chain beats its 4 nodes, which beat 7
    assert _free_plan(CPU).free_grows(chain, chain[-1] * 0.97, 28)
    assert not _free_plan(LINEAR).free_grows(chain, chain[-1] * 0.97, 28)  # rows cost what a step does
    assert not _free_plan(CPU).free_grows(chain, 0.0, 28) and not _free_plan(CPU).free_grows(chain, 0.9, 0)
    # weak candidates below a strong chain: nothing could pay for their rows
    assert not _free_plan(CPU).free_grows(chain, 0.01, 28)
    # a good open node ranks above weak nodes already there: the bound counts it in their place
    assert _free_plan(GPU).free_grows([0.9, 0.01, 0.01], 0.85, 1)
    # the cut agrees: 15 nodes and the root fill the cheap 16-row decode; a 17th row costs too much
    long = [0.97 ** (i + 1) for i in range(20)]
    assert _free_plan(CPU).leaves([], long) == 15


def test_the_search_has_one_compiled_type_alone_beside_others_and_on_any_tables():
    """A batched step's plan slices its tables (writable or read-only as the caller's were):
    the search must not compile again inside a server's first shared step."""
    from resispec_gguf.decoding import stepplan

    writable = costs.cost_table(GPU, TABLE_ROWS).copy()
    read_only = writable.copy()
    read_only.flags.writeable = False
    for table in (writable, read_only):
        for bg in (None, Background(draft_levels=2, **BUSY)):
            plan = StepPlan("chain", PARAMS, table, table, accept=0.9, overhead_s=0.0, background=bg)
            plan.width(0, [0.9, 0.5])
            plan.width(1, [0.8])
    assert len(stepplan._width.signatures) == 1, stepplan._width.signatures
