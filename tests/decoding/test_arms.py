"""auto's arms and their prices (decoding/arms.py): an arm's decayed figures, the text draft's
chain seconds, and the projections read from a pricer's fields alone (``ArmPrices``), as the
tuner that inherits them reads them."""

import numpy as np
import pytest

from resispec_gguf.config import DraftParams
from resispec_gguf.decoding import arms, autotune, costs
from resispec_gguf.decoding.calibration import Calibration
from resispec_gguf.decoding.stepplan import TABLE_ROWS

ROWS = costs.ROW_COUNTS
TARGET = costs.CostCurve(ROWS, tuple(0.020 + 0.0002 * n for n in ROWS))
DRAFT = costs.CostCurve(ROWS, tuple(0.002 + 0.0001 * n for n in ROWS))
TEXT = costs.CostCurve(ROWS, tuple(0.001 + 0.0001 * n for n in ROWS))
LIMITS = DraftParams(method="auto", draws=4, depth=6)


def _pricer(text=None, **fields) -> arms.ArmPrices:
    """An ``ArmPrices`` given only the fields its docstring names."""
    p = arms.ArmPrices()
    p.limits, p.target, p.draft = LIMITS, TARGET, DRAFT
    p.target_s, p.draft_s = costs.cost_table(TARGET, TABLE_ROWS), costs.cost_table(DRAFT, TABLE_ROWS)
    p.text_s = arms.text_seconds(text, LIMITS.max_depth)
    p.overhead_s, p.row_s, p.calibration, p.background = 0.0005, 0.0, Calibration(), None
    p.arms = {"chain": arms.Arm(k=1), "tree4": arms.Arm(k=4), "lookup": arms.Arm()}
    for k, v in fields.items():
        setattr(p, k, v)
    return p


def test_an_arms_rate_is_its_expected_tokens_per_second_corrected_by_what_it_realised():
    arm = arms.Arm()
    assert arm.rate == 0.0 and arm.ratio == 1.0
    arm.observe(tokens=6, expected=3.0, seconds=0.5, decay=0.9)
    assert arm.steps == 1 and arm.ratio == pytest.approx(18 / 15)
    assert arm.rate == pytest.approx(arm.ratio * 3.0 / 0.5)
    before = arm.accept
    arm.learn(1.0, 0.95, children=3.0)
    assert before < arm.accept < 1.0 and arm.children > 1.0
    arm.observe_width(4.0)
    arm.observe_width(2.0)
    assert arm.width == pytest.approx(0.7 * 4.0 + 0.3 * 2.0)


def test_an_arms_draws_come_from_its_name():
    assert [arms.draws_of(n) for n in ("chain", "tree2", "tree4", "lookup", "text", "grammar")] == [1, 2, 4, 0, 0, 0]


def test_the_text_drafts_chain_costs_one_resync_call_then_a_row_per_token():
    s = arms.text_seconds(TEXT, 4)
    assert s[0] == 0.0
    assert s[1:] == pytest.approx([TEXT(arms.TEXT_SYNC_ROWS) + n * TEXT(1) for n in range(1, 5)])
    assert not arms.text_seconds(None, 4).any() and len(arms.text_seconds(None, 4)) == 5
    assert autotune.TEXT_SYNC_ROWS == arms.TEXT_SYNC_ROWS  # still importable where tests read it


def test_prices_read_only_the_pricers_fields():
    p = _pricer()
    for kind in ("chain", "tree4", "lookup"):
        assert p.expected_case(kind) <= p.best_case(kind)
    assert p.best_case("lookup") > p.best_case("chain")  # the same chain without draft calls
    assert p.footing() == 1.0  # nothing ran
    p.arms["chain"].observe(tokens=8, expected=4.0, seconds=0.1, decay=0.95)
    p.arms["chain"].promise = p.arms["chain"].rate / 2
    assert p.footing() == pytest.approx(2.0)
    assert p.forced_case(1) < p.forced_case(4)


def test_the_text_ask_is_the_chain_length_its_acceptance_pays_for():
    p = _pricer(TEXT)
    rates = p._chain_rates("text")
    assert p.text_ask() == int(np.argmax(rates)) + 1 and 1 <= p.text_ask() <= LIMITS.max_depth
    assert p.expected_case("text") == pytest.approx(float(np.max(rates)))


def test_the_tuner_prices_with_the_same_methods():
    tuner = autotune.AutoTuner(TARGET, DRAFT, LIMITS, text=None)
    assert isinstance(tuner, arms.ArmPrices)
    for name in ("best_case", "expected_case", "forced_case", "in_step_case", "text_ask", "footing"):
        assert getattr(autotune.AutoTuner, name) is getattr(arms.ArmPrices, name)
    p = _pricer(arms=tuner.arms, calibration=tuner.calibration)
    for kind in tuner.arms:
        assert p.expected_case(kind) == tuner.expected_case(kind)


# the 2-core AMD's measured curve of the default target (seconds), where 16 rows cost less
# than 12 and a step of 8 rows much more than one of 7
AMD = costs.CostCurve((1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32),
                      (0.0338, 0.0599, 0.0780, 0.0949, 0.1153, 0.1353, 0.1565, 0.2165, 0.2645, 0.2502, 0.3807, 0.4169))


def test_a_copy_is_asked_twice_its_run_or_deeper_where_that_costs_no_more():
    deep = DraftParams(method="auto", depth=16)
    linear = _pricer(limits=deep)  # rows cost more one by one: twice the run, at least 4, at most 16
    assert [linear.copy_depth(r) for r in (0, 1, 2, 3, 5, 8, 40)] == [4, 4, 4, 6, 10, 16, 16]
    amd = _pricer(limits=deep, target=AMD, target_s=costs.cost_table(AMD, TABLE_ROWS))
    # 4 candidates: 5 rows; 6: 7 rows; 8: 9 rows, below the 16 rows' price; from 10 (11 rows,
    # dearer than 16 rows) the chain may go to 15 candidates, not 16 (17 rows cost more)
    assert [amd.copy_depth(r) for r in (0, 3, 4, 5, 6, 7, 8)] == [4, 6, 8, 15, 15, 15, 16]
    assert _pricer(limits=DraftParams(method="auto", depth=3)).copy_depth(9) == 3

