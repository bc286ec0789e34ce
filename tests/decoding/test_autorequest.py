"""``decoding.autorequest.Auto``: ``auto`` as one request's generation sees it: plans from its
tuner, candidate scores from what it learnt, and what verified nodes teach it."""

import numpy as np
import pytest

from resispec_gguf.config import DraftParams
from resispec_gguf.decoding import autorequest, autotune, costs
from resispec_gguf.decoding.calibration import FORCED_BIN, lookup_bin
from resispec_gguf.decoding.candidates import layout

MEMORY_BINS = layout().bin("context", 7)  # the memory's first bin (``candidates.context``)
from resispec_gguf.kernels.verify import draw_chances

ROWS = costs.ROW_COUNTS
GPU_T = costs.CostCurve(ROWS, tuple(0.020 + 0.0002 * n for n in ROWS))
GPU_D = costs.CostCurve(ROWS, tuple(0.002 + 0.0001 * n for n in ROWS))
LIMITS = DraftParams(method="auto", draws=4, depth=6, budget=16)


def _auto(seed=0):
    return autorequest.Auto(autotune.AutoTuner(GPU_T, GPU_D, LIMITS), seed)


def test_it_asks_its_tuner_for_every_plan():
    auto, tuner = _auto(), autotune.AutoTuner(GPU_T, GPU_D, LIMITS)
    for _ in range(5):
        mine, theirs = auto.choose(1), tuner.choose(1)
        assert (mine and mine.arm) == (theirs and theirs.arm)
    assert auto.drafts == tuner.drafts and auto.lazy_start == tuner.lazy_start
    assert auto.summary() == auto.tuner.summary()


def test_draws_share_the_arms_acceptance_in_proportion_to_q_less_the_fixed_candidates():
    auto = _auto()
    accept, cal = auto.tuner.accept, auto.tuner.calibration
    w, guess = auto.weights({1: 0.6, 2: 0.2}, [], k=4)
    assert guess[1] == pytest.approx(3 * guess[2]) and sum(guess.values()) == pytest.approx(accept)
    assert w == {x: cal.draft(g, 4) for x, g in guess.items()}
    fixed = [(3, FORCED_BIN)]
    w, guess = auto.weights({1: 0.6, 2: 0.2}, fixed, k=4)
    assert sum(guess.values()) == pytest.approx(accept * (1.0 - cal.lookup(FORCED_BIN)))
    assert w[3] == pytest.approx(cal.lookup(FORCED_BIN))
    assert auto.weights({}, fixed, k=4)[0] == {3: pytest.approx(cal.lookup(FORCED_BIN))}


def test_beside_draws_only_the_candidates_that_beat_the_draws_are_kept():
    auto = _auto()
    probs = np.array([0.5, 0.5])
    good, poor = FORCED_BIN, layout().bin("context", 6)  # priors 0.9 and 0.08 against an acceptance of 0.6
    assert auto.lookup_worth([(1, good), (2, poor), (3, MEMORY_BINS)], probs) == [(1, good)]
    # a node without draws keeps them all
    assert auto.lookup_worth([(2, poor), (3, MEMORY_BINS)], np.empty(0)) == [(2, poor), (3, MEMORY_BINS)]


def test_a_nodes_fixed_candidates_teach_their_bins_and_the_nodes_lookup_chance():
    auto = _auto()
    cal = auto.tuner.calibration
    b = lookup_bin(4, 3)
    before, node_before = cal.lookup(b), cal.node_lookup()
    for _ in range(20):
        auto.observe_fixed([(5, b)], lambda x: 1.0 if x == 5 else 0.0)
    assert cal.lookup(b) > max(before, 0.9) and cal.node_lookup() > node_before
    auto.observe_lookup(FORCED_BIN, 0.0)
    assert cal.lookup(FORCED_BIN) < autotune.Calibration().lookup(FORCED_BIN)


@pytest.mark.parametrize("method", ["chain", "resispec"])
def test_a_draws_chance_sums_its_repeats(method):
    pq = np.array([0.5, 0.3, 0.2])
    qx = (np.array([0, 1, 2]), np.array([0.2, 0.5, 0.3]))
    draws = np.array([1, 1, 2] if method == "resispec" else [1])
    chance = autorequest._chance_by_token(method, pq, qx, draws)
    each = draw_chances(method, pq, qx[0], qx[1], draws)
    assert set(chance) == set(draws.tolist())
    assert chance[1] == pytest.approx(float(each[draws == 1].sum()))
    assert sum(chance.values()) <= 1.0 + 1e-9


def test_the_width_of_a_step_is_learnt_beside_others_only():
    auto = _auto()
    tuner = auto.tuner
    tuner.background = autotune.Background(rows=24, value=9.0, draft_rows=3, draft_levels=6)
    beside = tuner.choose()
    tuner.background = None
    alone = autotune.AutoTuner(GPU_T, GPU_D, LIMITS).choose()
    auto.observe_in_step(alone, 13, 4)
    assert all(a.width == 0.0 for a in tuner.arms.values())
    auto.observe_in_step(beside, 13, 4)
    assert tuner.arms[beside.arm].width == pytest.approx(3.0)


def test_its_shadow_draws_come_from_its_own_seeded_generator():
    """The other arms' K draws at a node (``_shadow_draws``) are a function of the request's
    seed alone: the same seed teaches the same calibration, another seed another one."""
    pq = np.array([0.4, 0.3, 0.2, 0.1])
    qx = (np.arange(4), np.array([0.1, 0.2, 0.3, 0.4]))

    def learnt(seed):
        auto = _auto(seed)
        for _ in range(30):
            auto._shadow_draws(1, [], pq, qx)
        cal = auto.tuner.calibration
        return [cal.draft(g, k) for k in (2, 4) for g in (0.05, 0.2, 0.4, 0.6)]

    assert learnt(3) == learnt(3)
    assert learnt(3) != learnt(4)
