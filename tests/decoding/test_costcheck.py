"""costcheck.py: a curve that measured steps contradict is corrected between requests
(within a bounded number of steps, saved for the next start), a curve the steps bear out is
left alone, a seeded auto request takes part in the seed ledger while correction is on, and
``outlook`` says what auto expects from the curves."""

import types

import pytest

from fake_models import Clocked, noisy_markov_pair
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.decoding import costcheck, costs, loop
from resispec_gguf.decoding.autotune import AutoTuner
from resispec_gguf.decoding.costs import CostCurve
from resispec_gguf.engine import Engine

ROWS = costs.ROW_COUNTS


def _curve(per_row, fixed):
    return CostCurve(ROWS, tuple(fixed + per_row * n for n in ROWS))


CPU_T, CPU_D = _curve(0.012, 0.010), _curve(0.004, 0.003)  # a row costs about what a decode does


def test_a_window_outside_the_bound_scales_both_curves_and_saves_them(tmp_path, monkeypatch):
    monkeypatch.setenv("RESISPEC_COSTS", str(tmp_path / "costs.json"))
    check = costcheck.CurveCheck(CPU_T, CPU_D, ("t-id", "d-id"), window=4)
    assert not any(check.record(0.020, 0.0101) for _ in range(3))
    assert check.record(0.020, 0.0099)  # the fourth step completes the window: half as dear
    t, d = check.curves
    assert t.seconds == pytest.approx([s * 0.5 for s in CPU_T.seconds], rel=0.02)
    assert d.seconds == pytest.approx([s * 0.5 for s in CPU_D.seconds], rel=0.02)
    assert costs.load_cached_curve(str(tmp_path / "costs.json"), costs.curve_cache_key("t-id")) == t
    assert "corrected 1x" in check.describe()


def test_steps_within_the_bound_leave_the_curves_alone():
    check = costcheck.CurveCheck(CPU_T, None, window=4)
    for measured in (0.021, 0.025, 0.016, 0.030, 0.0001):  # the median 1.05x; nothing saved without ids
        check.record(0.020, measured)
    assert check.curves == (CPU_T, None) and check.corrections == 0
    assert not check.record(0.0, 0.01) and not check.record(0.01, 0.0)  # no figure: ignored


def _twice_too_dear(monkeypatch, tmp_path, n_ctx: int) -> Engine:
    """Fake models whose decodes take CPU_T/CPU_D's seconds on a fake clock (the loop's wall
    clock), in an engine given curves twice as dear and correcting them."""
    monkeypatch.setenv("RESISPEC_COSTS", str(tmp_path / "costs.json"))
    clock = [0.0]
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    target, draft = noisy_markov_pair(8, eog=7, n_ctx=n_ctx)
    wrong = (_curve(0.024, 0.020), _curve(0.008, 0.006))
    return Engine(Clocked(target, CPU_T, clock), Clocked(draft, CPU_D, clock), cost_curves=wrong, memory=None,
                  correct_costs=True)


def test_a_curve_made_twice_too_dear_is_corrected_within_a_bounded_number_of_steps(monkeypatch, tmp_path):
    """Fake models whose decodes take the true curve's seconds on a fake clock (which the
    loop reads as its wall clock); the engine is given curves twice as dear.  After at most
    two windows of steps alone, the curves it plans with are within the bound of the truth."""
    engine = _twice_too_dear(monkeypatch, tmp_path, n_ctx=1024)
    sp = SamplingParams(temperature=1.0, max_tokens=12, seed=1)
    steps = 0
    engine._auto_curves()
    while engine.costs.check.corrections == 0:
        steps += engine.generate([1, 2], sp, DraftParams(method="auto")).stats.steps
        assert steps <= 2 * costcheck.WINDOW + 12, "not corrected within two windows"
    t, _ = engine._auto_curves()
    assert 1 / costcheck.BOUND < t(1) / CPU_T(1) < costcheck.BOUND
    assert engine._tuner(DraftParams(method="auto")).target(1) == t(1)  # the next request plans with it


def test_a_long_request_does_not_correct_again_what_was_corrected(monkeypatch, tmp_path):
    """One request of many windows plans all through with the curve it started with (2x too
    dear): the first window corrects the engine's curve; the later ones, judged on the
    corrected curve, leave it alone (not 2^n too cheap)."""
    engine = _twice_too_dear(monkeypatch, tmp_path, n_ctx=2048)
    sp = SamplingParams(temperature=1.0, max_tokens=400, seed=2)
    res = engine.generate([1, 2], sp, DraftParams(method="auto"))
    assert res.stats.steps >= 3 * costcheck.WINDOW, res.stats.steps
    assert engine.costs.check.corrections == 1
    assert 1 / costcheck.BOUND < engine._auto_curves()[0](1) / CPU_T(1) < costcheck.BOUND


def test_a_seeded_auto_request_takes_part_in_the_ledger_while_correction_is_on():
    target, draft = noisy_markov_pair(8, eog=7)
    on = Engine(target, draft, cost_curves=(CPU_T, CPU_D), memory=None, correct_costs=True)
    off = Engine(target, draft, cost_curves=(CPU_T, CPU_D), memory=None, correct_costs=False)
    auto, plain = DraftParams(method="auto"), DraftParams(method="none")
    first, again = on.seed_key(5, auto), on.seed_key(5, auto)
    assert first is None and again is not None  # the first use draws from the seed alone, a repeat keyed apart
    assert off.seed_key(5, auto) is None and off.seed_key(5, auto) is None and on.seed_key(6, plain) is None


def test_outlook_says_plain_on_cpu_like_costs_and_speculation_on_gpu_like_ones():
    cpu = AutoTuner(CPU_T, CPU_D, DraftParams())
    text = costcheck.outlook(cpu, CPU_T, {"target": {"n_gpu_layers": 0}, "draft": None})
    assert text.startswith("plain decoding") and "on this CPU" in text and f"{CPU_T(4) / CPU_T(1):.1f}x" in text
    gpu_t, gpu_d = _curve(0.0002, 0.020), _curve(0.0001, 0.004)
    gpu = AutoTuner(gpu_t, gpu_d, DraftParams())
    text = costcheck.outlook(gpu, gpu_t, {"target": {"n_gpu_layers": 99}})
    assert text.startswith("speculation likely") and "here" in text
    slow_draft = _curve(0.001, 0.09)  # rows nearly free, but a draft call 0.9x a target decode
    flat = _curve(0.001, 0.1)
    text = costcheck.outlook(AutoTuner(flat, slow_draft, DraftParams()), flat, {"target": {"n_gpu_layers": 0}})
    assert text.startswith("plain decoding likely: a draft call costs 0.9x a 1-row target decode on this CPU"), text


def test_the_environment_turns_correction_off(monkeypatch):
    monkeypatch.setenv("RESISPEC_COST_CHECK", "0")
    assert not costcheck.enabled()
    monkeypatch.setenv("RESISPEC_COST_CHECK", "1")
    assert costcheck.enabled()


def test_a_runner_shares_rows_by_the_curves_as_corrected(monkeypatch, tmp_path):
    """An engine with slots: once a correction is made, the next submitted request brings
    the runner's batch the corrected tables."""
    monkeypatch.setenv("RESISPEC_COSTS", str(tmp_path / "costs.json"))
    target, draft = noisy_markov_pair(8, eog=7)
    engine = Engine(target, draft, cost_curves=(CPU_T, CPU_D), memory=None, correct_costs=True)
    engine._submit(engine.generation([1, 2], SamplingParams(max_tokens=2, seed=0))).result()
    before = engine._runner.batch.tables
    for _ in range(costcheck.WINDOW):
        engine.costs.check.record(0.010, 0.005)
    engine._submit(engine.generation([1, 2], SamplingParams(max_tokens=2, seed=0))).result()
    after = engine._runner.batch.tables
    assert after[0][1] == pytest.approx(0.5 * before[0][1]) and engine._runner.batch.tables == engine.costs.tables()


def test_steps_dearer_with_their_context_teach_a_per_row_context_price():
    check = costcheck.CurveCheck(CPU_T, None, window=4)
    alpha = 2e-6  # seconds per row per token of context
    for rows, context in ((1, 1000), (16, 1200), (4, 300), (1, 50), (8, 900)):
        base = CPU_T(rows)
        check.record(base, base + alpha * rows * context, rows=rows, context=context)
    assert check.alpha == pytest.approx(alpha, rel=1e-6)
    assert check.corrections == 0  # within the bound: the curve itself is kept
    at = check.context_curve(CPU_T, 1000)
    assert [at(n) - CPU_T(n) for n in (1, 4, 16)] == pytest.approx([alpha * 1000 * n for n in (1, 4, 16)])
    assert check.context_curve(CPU_T, 0) is CPU_T and "ns dearer per token of context" in check.describe()
    # a prediction that already carried the context's price is judged on the rest of it
    check.record(CPU_T(4) + alpha * 4 * 500, CPU_T(4) + alpha * 4 * 500, rows=4, context=500,
                 extra_s=alpha * 4 * 500)
    assert check.alpha == pytest.approx(alpha, rel=1e-6)
    stalled = costcheck.CurveCheck(CPU_T, None, window=2)
    stalled.record(CPU_T(1), 3.0, rows=1, context=100)  # one stalled step: at most twice its figure
    stalled.record(CPU_T(1), CPU_T(1), rows=1, context=100)
    assert stalled.alpha <= CPU_T(1) / 100


def test_a_request_plans_on_the_curve_its_prompt_s_length_makes(monkeypatch, tmp_path):
    """Decodes whose price grows with the context: after the first request the engine knows
    what a row costs per token of context, and a later request's predictions at its prompt
    length match what its steps take far better than the bare curve."""
    engine = _twice_too_dear(monkeypatch, tmp_path, n_ctx=4096)
    clock = engine.target.clock
    engine.costs.curves()
    engine.costs.check.curves = (CPU_T, CPU_D)  # the curve right at no context; its rows pay 20 us per token
    engine.costs.check.window = 4
    alpha = 2e-5
    for model in (engine.target, engine.draft):
        model.curve = _with_context(model.curve, model, alpha)
    sp = SamplingParams(temperature=1.0, max_tokens=12, seed=1)
    engine.generate(list(range(1, 7)) * 40, sp, DraftParams(method="auto"))
    assert engine.costs.check.alpha == pytest.approx(alpha, rel=0.25)
    tuner = engine._tuner(DraftParams(method="auto"), 240)
    assert tuner.target(8) == pytest.approx(CPU_T(8) + alpha * 240 * 8, rel=0.25)
    assert clock[0] > 0


class _with_context:
    """A cost curve whose every row pays ``alpha`` seconds per token the model holds."""

    def __init__(self, curve, model, alpha):
        self.curve, self.model, self.alpha = curve, model, alpha

    def __call__(self, rows):
        return self.curve(rows) + self.alpha * rows * self.model.n_past
