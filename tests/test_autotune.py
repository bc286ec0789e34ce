"""auto's cost model and choices, without a model (autotune.py), and through the engine on
Markov fakes with injected cost curves."""

import numpy as np
import pytest

from fake_models import MarkovModel, random_rows
from resispec_gguf import autotune
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine

ROWS = autotune.ROW_COUNTS


def _curve(per_row, fixed):
    return autotune.CostCurve(ROWS, tuple(fixed + per_row * n for n in ROWS))


GPU_T = _curve(0.0002, 0.020)  # a batch costs about what one row costs
GPU_D = _curve(0.0001, 0.002)  # and the draft is cheap
CPU_T = autotune.CostCurve(ROWS, (1.0, 1.3, 1.5, 1.7, 2.3, 3.0, 3.4, 3.8, 5.5, 7.0))  # the 2-core CPU
CPU_D = autotune.CostCurve(ROWS, tuple(0.44 * s for s in CPU_T.seconds))
LIMITS = DraftParams(method="auto", draws=4, depth=6, budget=16)


def test_hopeless_machine_never_speculates_not_even_a_probe():
    # the draft costs what the target costs and a batch costs n rows: nothing can pay
    linear = _curve(0.010, 0.0)
    tuner = autotune.AutoTuner(linear, linear, LIMITS)
    assert tuner.arms == {}
    assert all(tuner.choose() is None for _ in range(500))
    assert "plain" in tuner.summary()


def test_every_request_starts_with_a_probe_and_backs_off_when_it_loses():
    tuner = autotune.AutoTuner(CPU_T, CPU_D, LIMITS)
    plan = tuner.choose()
    assert plan is not None and plan.kind == "draft"
    assert plan.params.draws <= LIMITS.draws and plan.params.depth == LIMITS.depth and plan.params.budget == LIMITS.budget
    # a losing draft step (1 token for a big predicted cost), then the lookup probe loses too
    tuner.observe_step(plan, 1, 10.0)
    plan = tuner.choose()
    assert plan.kind == "lookup"
    tuner.observe_step(plan, 1, 10.0)
    # the draft's candidates were accepted, so a chain could still win here: plain for the
    # back-off stretch, then a re-probe; a second loss doubles the stretch
    for _ in range(30):
        tuner.observe_node(True)
    choices = [tuner.choose() for _ in range(4)]
    assert choices[:3] == [None] * 3 and choices[3] is not None
    tuner.observe_step(choices[3], 1, 10.0)
    stretch = 0
    while (p := tuner.choose()) is None or p.kind != choices[3].kind:
        stretch += 1
        if p is not None:  # the other kind's re-probe, due too: it loses as well
            tuner.observe_step(p, 1, 10.0)
    assert stretch >= 7
    # a winning probe keeps it speculating
    tuner.observe_step(p, 40, 1.0)
    assert all(tuner.choose() is not None for _ in range(5))


def test_no_re_probe_where_the_learnt_acceptance_cannot_win():
    """On the CPU's costs, candidates accepted at the prior's rate cannot beat plain decoding:
    after the start's probes lose, auto stays plain (each stretch is waited out again)."""
    tuner = autotune.AutoTuner(CPU_T, CPU_D, LIMITS)
    assert tuner.expected_case("draft") < tuner.plain_rate < tuner.best_case("draft")
    for _ in range(2):
        tuner.observe_step(tuner.choose(), 1, 10.0)
    plans = [tuner.choose() for _ in range(300)]
    assert not any(p is not None and p.kind == "draft" for p in plans)
    # lookup's prior (long copy runs accepted at 0.7) may still win on these costs: it is re-probed
    assert any(p is not None and p.kind == "lookup" for p in plans)
    # a GPU-like machine: the same acceptance wins, and re-probes happen
    gpu = autotune.AutoTuner(GPU_T, GPU_D, LIMITS)
    assert gpu.expected_case("draft") > gpu.plain_rate
    for _ in range(2):
        gpu.observe_step(gpu.choose(), 1, 10.0)
    assert any(gpu.choose() is not None for _ in range(30))


def test_growth_rule_expands_confident_children_and_stops_at_unlikely_ones():
    tuner = autotune.AutoTuner(CPU_T, CPU_D, LIMITS)
    plan = tuner.choose()
    assert plan.width(0, [0.95]) == 1
    assert plan.width(1, [0.9]) == 1
    assert plan.width(2, [0.02]) == 0  # a 2% path is not worth a draft row and a target row
    # on a GPU-like machine rows are nearly free: more children pay
    gpu = autotune.AutoTuner(GPU_T, GPU_D, LIMITS).choose()
    assert gpu.width(0, [0.6, 0.3, 0.1]) >= 2
    # leaves: keep the likely ones only on the CPU
    plan = autotune.AutoTuner(CPU_T, CPU_D, LIMITS).choose()
    assert plan.leaves([0.9, 0.8], [0.7, 0.05, 0.01]) == 1
    assert gpu.leaves([0.9], [0.3, 0.2, 0.1]) == 3


def test_calibration_learns_from_the_request():
    cal = autotune.Calibration()
    before = cal.draft(0.9)
    for _ in range(30):
        cal.observe_draft(0.9, False)
    assert cal.draft(0.9) < 0.1 < before
    assert cal.draft(0.2) == pytest.approx(autotune.Calibration().draft(0.2))
    for _ in range(30):
        cal.observe_lookup(autotune.lookup_bin(4, 3), 0.97)  # known chances count too
    assert cal.lookup(autotune.lookup_bin(4, 5)) > 0.9 and cal.lookup(autotune.lookup_bin(1, 5)) < 0.5
    assert autotune.lookup_bin(1, 9) != autotune.lookup_bin(2, 0)


def _fake_pair(draft_noise):
    V = 6
    rows_t = random_rows(V, 1, 11, scale=2.5)
    rng = np.random.default_rng(5)
    rows_d = {c: (r + rng.standard_normal(V).astype(np.float32) * draft_noise).astype(np.float32) for c, r in rows_t.items()}
    return MarkovModel(rows_t, V, name="t"), MarkovModel(rows_d, V, name="d")


def test_auto_through_the_engine_speculates_where_it_pays_and_not_where_it_cannot():
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=200, seed=4)
    target, draft = _fake_pair(0.0)  # a perfect draft
    res = Engine(target, draft, cost_curves=(GPU_T, GPU_D)).generate([1, 2], sp, LIMITS)
    assert res.stats.steps_by_kind.get("draft", 0) >= 0.8 * res.stats.steps
    assert res.stats.tau > 3.0
    assert "draft" in res.stats.auto
    # the same pair where a batch costs n rows and the draft what the target costs: plain only
    linear = _curve(0.010, 0.0)
    res = Engine(target, draft, cost_curves=(linear, linear)).generate([1, 2], sp, LIMITS)
    assert res.stats.steps_by_kind == {"none": res.stats.steps}
    # the user's bounds hold: depth 2 means at most 3 tokens per step
    res = Engine(target, draft, cost_curves=(GPU_T, GPU_D)).generate([1, 2], sp, LIMITS.replace(depth=2, draws=1))
    assert res.stats.tau <= 3.0 and len(res.stats.reached_by_depth) <= 2


def test_auto_backs_off_with_a_useless_draft_on_cpu_costs():
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=300, seed=4)
    target, draft = _fake_pair(8.0)  # the draft is nearly random
    res = Engine(target, draft, cost_curves=(CPU_T, CPU_D)).generate([1, 2], sp, LIMITS)
    assert res.stats.steps_by_kind.get("none", 0) >= 0.7 * res.stats.steps


def test_cost_curve_cache_roundtrip(tmp_path):
    curve = autotune.measure_curve(lambda n: None, rows=(1, 2, 4), repeats=1)
    assert list(curve.rows) == [1, 2, 4] and all(b >= a for a, b in zip(curve.seconds, curve.seconds[1:]))
    cache = str(tmp_path / "c.json")
    key = autotune.curve_cache_key('["m.gguf", 1, 2]')
    assert key != autotune.curve_cache_key('["m.gguf", 1, 3]')
    assert autotune.load_cached_curve(cache, key) is None
    autotune.store_cached_curve(cache, key, curve)
    assert autotune.load_cached_curve(cache, key) == curve
    assert curve(3) == pytest.approx((curve.seconds[1] + curve.seconds[2]) / 2)


def test_summary_shows_predicted_and_measured_step_times():
    from resispec_gguf.autotune import AutoTuner, CostCurve
    from resispec_gguf.config import DraftParams

    curve = CostCurve((1, 2, 4), (0.010, 0.011, 0.012))
    tuner = AutoTuner(curve, curve, DraftParams(), overhead_s=0.0)
    plan = tuner.choose()
    tuner.record_time(plan, 0.030)
    tuner.record_time(None, 0.012)
    tuner.record_time(None, 0.014)
    text = tuner.summary()
    assert f"{plan.kind} {1000 * plan.cost:.1f}/30.0 ms over 1" in text and "none 10.0/13.0 ms over 2" in text
