"""auto's cost model and choices, without a model (autotune.py), and through the engine on
Markov fakes with injected cost curves."""

import numpy as np
import pytest

from fake_models import Clocked, MarkovModel, random_rows
from resispec_gguf.decoding import autorequest, autotune
from resispec_gguf.decoding import costs, stepplan
from resispec_gguf.decoding.candidates import layout
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine

ROWS = costs.ROW_COUNTS


def _curve(per_row, fixed):
    return costs.CostCurve(ROWS, tuple(fixed + per_row * n for n in ROWS))


GPU_T = _curve(0.0002, 0.020)  # a batch costs about what one row costs
GPU_D = _curve(0.0001, 0.002)  # and the draft is cheap
CPU_T = costs.CostCurve((1, 2, 3, 4, 6, 8, 12, 16, 24, 32),
                           (1.0, 1.3, 1.5, 1.7, 2.3, 3.0, 3.4, 3.8, 5.5, 7.0))  # the 2-core CPU
CPU_D = costs.CostCurve(CPU_T.rows, tuple(0.44 * s for s in CPU_T.seconds))
LIMITS = DraftParams(method="auto", draws=4, depth=6, budget=16)


def test_hopeless_machine_never_speculates_not_even_a_probe():
    # the draft costs what the target costs and a batch costs n rows: nothing can pay
    linear = _curve(0.010, 0.0)
    tuner = autotune.AutoTuner(linear, linear, LIMITS)
    assert tuner.arms == {}
    assert all(tuner.choose() is None for _ in range(500))
    assert "plain" in tuner.summary()


def test_every_request_starts_with_a_probe_of_each_arm_and_backs_off_when_they_lose():
    tuner = autotune.AutoTuner(CPU_T, CPU_D, LIMITS)
    assert list(tuner.arms) == ["chain", "tree2", "tree4", "lookup"]
    # the chain is probed first; the others if what is learnt promises a win: shown high
    # acceptances, every arm is probed
    for _ in range(30):
        tuner.observe_chain(1.0)
        tuner.calibration.observe_lookup(0, 1.0)
    probes = []
    for _ in tuner.arms:
        plan = tuner.choose()
        assert plan is not None
        probes.append(plan.arm)
        assert plan.params.depth == LIMITS.depth and plan.params.budget == LIMITS.budget
        assert plan.params.k == {"chain": 1, "tree2": 2, "tree4": 4, "lookup": 1}[plan.arm]
        assert plan.kind == ("lookup" if plan.arm == "lookup" else "draft")
        tuner.observe_step(plan, 1, 10.0)  # each loses: 1 token for a big predicted cost
    assert probes == list(tuner.arms)
    # the candidates were accepted, so speculation could still win: plain for the back-off
    # stretch, then a re-probe; a second loss doubles that arm's stretch
    choices = [tuner.choose() for _ in range(4)]
    assert choices[:3] == [None] * 3 and choices[3] is not None
    again = choices[3].arm
    tuner.observe_step(choices[3], 1, 10.0)
    stretch = 0
    while (p := tuner.choose()) is None or p.arm != again:
        stretch += 1
        if p is not None:  # another arm's re-probe: it loses as well
            tuner.observe_step(p, 1, 10.0)
    assert stretch >= 7
    # a winning probe keeps it speculating
    p.value = 40.0  # what its plan expected
    tuner.observe_step(p, 40, 1.0)
    assert all(tuner.choose() is not None for _ in range(5))


def test_the_losing_arm_is_tried_again_while_another_wins():
    tuner = autotune.AutoTuner(GPU_T, GPU_D, LIMITS.replace(draws=2))
    assert list(tuner.arms) == ["chain", "tree2", "lookup"]
    rates = {"chain": (4, 0.04), "tree2": (2, 0.04), "lookup": (1, 0.04)}
    seen = []
    for _ in range(200):
        plan = tuner.choose()
        seen.append(plan.arm)
        plan.value = rates[plan.arm][0]  # a plan that expects what it yields
        tuner.observe_step(plan, *rates[plan.arm])
    assert seen.count("chain") > 150
    tries = [i for i, a in enumerate(seen) if a == "tree2"]
    assert len(tries) >= 4 and tries[-1] > 40  # tried again, ever more rarely


def test_no_re_probe_where_the_learnt_acceptance_cannot_win():
    """On the CPU's costs, candidates accepted at the prior's rate cannot beat plain decoding:
    after the start's probes lose, auto stays plain (each stretch is waited out again)."""
    tuner = autotune.AutoTuner(CPU_T, CPU_D, LIMITS)
    assert tuner.expected_case("chain") < tuner.plain_rate < tuner.best_case("chain")
    plan = tuner.choose()  # the start's one probe: the chain, which learns the acceptance
    assert plan.arm == "chain"
    tuner.observe_step(plan, 1, 10.0)
    plans = [tuner.choose() for _ in range(300)]
    assert not any(p is not None and p.kind == "draft" for p in plans)
    # lookup's prior (long copy runs accepted at 0.7) may still win on these costs: it is re-probed
    assert any(p is not None and p.kind == "lookup" for p in plans)
    # a GPU-like machine: the same acceptance wins, and re-probes happen
    gpu = autotune.AutoTuner(GPU_T, GPU_D, LIMITS)
    assert gpu.expected_case("chain") > gpu.plain_rate
    for _ in range(3):
        gpu.observe_step(gpu.choose(), 1, 10.0)
    assert any(gpu.choose() is not None for _ in range(30))


def test_the_chain_arm_learns_from_every_drafted_node():
    tuner = autotune.AutoTuner(GPU_T, GPU_D, LIMITS)
    before = tuner.arms["chain"].accept
    tuner.current = "tree4"  # whatever runs
    for _ in range(20):
        tuner.observe_chain(0.97)
    assert tuner.arms["chain"].accept > 0.9 > before
    assert tuner.arms["tree4"].accept == before  # a tree's acceptance is its own


def test_every_draft_arm_learns_at_every_drafted_node_and_a_lost_tree_waits_for_news():
    """Told each K's exact acceptance and width at drafted nodes (``observe_draft_node``),
    every draft arm learns, whatever runs.  A tree that ran and lost is tried again only once
    its acceptance has risen enough to promise a win: not at every end of its back-off."""
    tuner = autotune.AutoTuner(GPU_T, GPU_D, LIMITS.replace(draws=2))
    assert list(tuner.exact_ks) == [1, 2]
    for _ in range(40):
        tuner.observe_draft_node(np.array([0.6, 0.7]), np.array([1.0, 1.4]))
    assert abs(tuner.arms["chain"].accept - 0.6) < 0.02 and abs(tuner.arms["tree2"].accept - 0.7) < 0.02
    assert abs(tuner.arms["tree2"].children - 1.4) < 0.02 and tuner.arms["tree2"].exact
    yields = {"chain": (3, 0.04), "tree2": (3, 0.05), "lookup": (1, 0.04)}  # tokens, seconds: the chain wins

    def run(steps):
        seen = []
        for _ in range(steps):
            plan = tuner.choose()
            seen.append(plan.arm if plan is not None else None)
            if plan is not None:
                plan.value = yields[plan.arm][0]  # a plan that expects what it yields
                tuner.observe_step(plan, *yields[plan.arm])
        return seen

    assert run(300).count("tree2") <= 1  # its one probe, never again while nothing changed
    for _ in range(60):  # the draws now agree with the target far more often
        tuner.observe_draft_node(np.array([0.6, 0.99]), np.array([1.0, 1.4]))
    assert "tree2" in run(600)


def test_growth_rule_expands_confident_children_and_stops_at_unlikely_ones():
    tuner = autotune.AutoTuner(CPU_T, CPU_D, LIMITS)
    tuner.arms["chain"].accept = 0.9  # nodes mostly have a candidate accepted
    plan = tuner.choose()
    assert plan.arm == "chain"
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


def test_growth_looks_past_a_costly_stretch_of_the_curve():
    """This machine's curve with one thread per model: 4 -> 8 rows cost more per row than
    8 -> 16.  A lookup chain of confident copy candidates judged one row at a time stops
    where the curve is steep; judged with what lies beyond, it grows to where it pays."""
    rows = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
    steep = costs.CostCurve(rows, (1.0, 1.68, 2.2, 2.75, 4.9, 7.0, 7.7, 8.4, 10.9, 13.4))
    limits = DraftParams(method="auto", depth=16, budget=32)

    def lookup_plan(rate):
        tuner = autotune.AutoTuner(steep, None, limits, has_draft=False, overhead_s=0.0)
        for b in range(5):
            for _ in range(40):
                tuner.calibration.observe_lookup(b, rate)
        tuner.arms["lookup"].accept = rate
        return tuner.choose()

    def chain_depth(plan, factor):
        """Levels grown when each lookup child's score falls by ``factor``."""
        score, depth = 1.0, 0
        while depth < 15:
            score *= factor
            if plan.width(depth, [score]) == 0:
                break
            depth += 1
        return depth

    plan = lookup_plan(0.97)
    assert plan is not None and plan.arm == "lookup"
    depth = chain_depth(plan, 0.97)
    assert depth >= 12
    assert plan.leaves([0.97 ** (i + 1) for i in range(depth)], [0.97 ** (depth + 1)]) == 1
    # where copies are right one time in two, the same curve keeps the chain short
    plan = lookup_plan(0.97)
    plan.accept = 0.5
    assert chain_depth(plan, 0.5) <= 2


def _chain_depth(plan, factor, most=15):
    """Levels grown when each child's score falls by ``factor``; the widths taken."""
    score, depth = 1.0, 0
    while depth < most:
        score *= factor
        if plan.width(depth, [score]) == 0:
            break
        depth += 1
    return depth


def test_a_plan_within_a_shared_step_prices_its_rows_at_what_they_add_to_the_step():
    """Beside other requests a draft level they make anyway costs only its rows, a level
    they do not make costs a whole call, and a row must beat the whole step's tokens per
    second.  The plan's own figures stay those of its tree alone (the arm's rate)."""
    limits = DraftParams(method="auto", depth=16, budget=32)

    def plan(background, accept=0.9):
        tuner = autotune.AutoTuner(GPU_T, GPU_D, limits, row_s=0.0, overhead_s=0.0)
        tuner.arms["chain"].accept = accept
        tuner.background = background
        return tuner._plan("chain", 1, "the arm under test")  # in a shared step the arm is chosen apart

    alone = _chain_depth(plan(None), 0.9)
    busy = dict(rows=56, value=24.0, draft_rows=7)
    shared = _chain_depth(plan(autotune.Background(draft_levels=6, **busy)), 0.9)
    unshared = _chain_depth(plan(autotune.Background(draft_levels=0, **busy)), 0.9)
    assert unshared < shared <= alone
    # its own figures: the chain it grew, priced alone
    p = plan(autotune.Background(draft_levels=6, **busy))
    depth = _chain_depth(p, 0.9)
    assert depth == shared
    t, d = p.target_s, p.draft_s
    assert p.value == pytest.approx(1.0 + sum(0.9 ** (i + 1) for i in range(depth)))
    assert p.cost == pytest.approx(d[1] + depth * d[1] + t[1 + depth])
    # a step of few tokens per second lets a plan grow as it would alone
    idle = _chain_depth(plan(autotune.Background(rows=1, value=0.0, draft_rows=1, draft_levels=16)), 0.9)
    assert idle >= alone


def test_in_a_shared_step_the_arm_is_chosen_by_what_it_adds_to_the_step():
    """Alone, a request whose arms lost their probes decodes plain for a stretch; beside
    others whose draft levels it can join, it speculates at once, and where no level is
    shared in a busy step a plain step is the better share.  A tree whose past steps beside
    others held many rows per level gives way to the chain."""
    busy = dict(rows=56, value=24.0, draft_rows=7)
    tuner = autotune.AutoTuner(GPU_T, GPU_D, LIMITS.replace(draws=2), row_s=0.0, overhead_s=0.0)
    for _ in range(30):
        tuner.observe_chain(0.85)
        tuner.calibration.observe_lookup(0, 0.0)  # the context's guesses fail
    for _ in tuner.arms:
        tuner.observe_step(tuner.choose(), 1, 10.0)  # every probe loses
    assert tuner.choose() is None
    tuner.background = autotune.Background(draft_levels=6, **busy)
    assert tuner.choose().kind == "draft"
    tuner.background = autotune.Background(draft_levels=0, **busy)
    assert tuner.choose() is None

    tuner = autotune.AutoTuner(GPU_T, GPU_D, LIMITS.replace(draws=2), row_s=0.0, overhead_s=0.0)
    tuner.arms["chain"].accept, tuner.arms["tree2"].accept = 0.6, 0.9
    tuner.background = autotune.Background(draft_levels=6, **busy)
    tree = tuner.choose()
    assert tree.arm == "tree2"
    auto = autorequest.Auto(tuner, seed=0)
    for _ in range(3):
        auto.observe_in_step(tree, 1 + 6 * 4, 4)  # six rows per level
    assert tuner.arms["tree2"].width == pytest.approx(6.0)
    assert tuner.choose().arm == "chain"
    # what it learnt beside others leaves a request alone as it was
    tuner.background = None
    assert tuner.choose().arm == "chain"  # alone, the first probe


def test_in_a_shared_step_a_tree_is_projected_on_k_rows_per_level_until_it_has_shown_its_own():
    """Before any step beside others, a K-draw tree's level is taken to hold K rows (not
    its distinct children per node, about half of what its levels held there); the rows it
    then shows replace the prior."""
    tuner = autotune.AutoTuner(GPU_T, GPU_D, LIMITS, row_s=0.0, overhead_s=0.0)
    tuner.background = autotune.Background(rows=24, value=9.0, draft_rows=3, draft_levels=6)
    tree4 = tuner.arms["tree4"]
    tree4.accept, tree4.children = 0.9, 1.5

    def rate(rows):
        return stepplan.in_step_rate(tuner.background, tuner.target_s, tuner.draft_s, first=0.9,
                                     then=tuner.arms["chain"].accept, rows=rows, depth=LIMITS.max_depth)

    assert tuner.in_step_case("tree4") == pytest.approx(rate(4.0))
    assert rate(4.0) < rate(1.5)
    tree4.observe_width(2.5)
    assert tuner.in_step_case("tree4") == pytest.approx(rate(2.5))


def test_in_a_shared_step_the_choice_ignores_the_arms_realised_over_expected_tokens():
    """Beside others an arm is projected from its exact acceptances alone: its realised /
    expected tokens over the request (noisy, and of another model) leave the choice as it
    was."""
    tuner = autotune.AutoTuner(GPU_T, GPU_D, LIMITS.replace(draws=2), row_s=0.0, overhead_s=0.0)
    tuner.arms["chain"].accept, tuner.arms["tree2"].accept = 0.7, 0.8
    tuner.background = autotune.Background(rows=24, value=9.0, draft_rows=3, draft_levels=6)
    before = {n: tuner.in_step_case(n) for n in ("chain", "tree2")}
    chain = tuner.arms["chain"]
    chain.observe(2, 4.0, 0.05, tuner.decay)  # half the tokens it expected
    assert chain.ratio < 0.9
    assert {n: tuner.in_step_case(n) for n in ("chain", "tree2")} == before


def test_the_step_keeps_to_its_node_budget():
    gpu = autotune.AutoTuner(GPU_T, GPU_D, LIMITS.replace(budget=6)).choose()
    assert gpu.width(0, [0.3] * 8) <= 3  # each expanded child needs a row below it


def test_calibration_learns_from_the_request():
    cal = autotune.Calibration()
    assert cal.draft(0.9) == pytest.approx(0.9, abs=0.05)  # the prior: the guess itself
    for _ in range(30):
        cal.observe_draft(0.9, False)
    assert cal.draft(0.9) < 0.1
    assert cal.draft(0.9, k=4) == pytest.approx(autotune.Calibration().draft(0.9, k=4))  # learnt per K
    assert cal.draft(0.2) == pytest.approx(autotune.Calibration().draft(0.2))
    for _ in range(30):
        cal.observe_lookup(autotune.lookup_bin(4, 3), 0.97)  # known chances count too
    assert cal.lookup(autotune.lookup_bin(4, 5)) > 0.9 and cal.lookup(autotune.lookup_bin(1, 5)) < 0.5
    assert autotune.lookup_bin(1, 9) != autotune.lookup_bin(2, 0)


def _fake_pair(draft_noise, n_ctx=256):
    V = 6
    rows_t = random_rows(V, 1, 11, scale=2.5)
    rng = np.random.default_rng(5)
    rows_d = {c: (r + rng.standard_normal(V).astype(np.float32) * draft_noise).astype(np.float32) for c, r in rows_t.items()}
    return MarkovModel(rows_t, V, name="t", n_ctx=n_ctx), MarkovModel(rows_d, V, name="d", n_ctx=n_ctx)


def test_auto_through_the_engine_speculates_where_it_pays_and_not_where_it_cannot():
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=200, seed=4)
    target, draft = _fake_pair(0.0)  # a perfect draft
    res = Engine(target, draft, cost_curves=(GPU_T, GPU_D)).generate([1, 2], sp, LIMITS)
    assert res.stats.steps_by_kind.get("draft", 0) >= 0.8 * res.stats.steps
    assert res.stats.tau > 3.0
    assert "chain" in res.stats.auto
    # the same pair where a batch costs n rows and the draft what the target costs: plain only
    linear = _curve(0.010, 0.0)
    res = Engine(target, draft, cost_curves=(linear, linear)).generate([1, 2], sp, LIMITS)
    assert res.stats.steps_by_kind == {"none": res.stats.steps}
    # the user's bounds hold: depth 2 means at most 3 tokens per step
    res = Engine(target, draft, cost_curves=(GPU_T, GPU_D)).generate([1, 2], sp, LIMITS.replace(depth=2, draws=1))
    assert res.stats.tau <= 3.0 and len(res.stats.reached_by_depth) <= 2


def test_auto_never_gives_the_draft_the_prompt_where_no_draft_step_could_pay():
    """Where a batch costs n rows and the draft what the target costs, no draft arm can beat
    plain decoding even with every candidate accepted: auto never calls the draft, so it
    does not prefill it either, alone or beside other requests (the prompt's prefill would
    be pure loss); where drafting can pay, the draft follows the request from its prompt."""
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=40, seed=4)
    linear = _curve(0.010, 0.0)
    target, draft = _fake_pair(0.0)
    engine = Engine(target, draft, cost_curves=(linear, linear))
    res = engine.generate([1, 2, 3], sp, LIMITS)
    assert res.stats.tokens > 0 and draft.calls == 0 and draft._seqs[0] == []
    assert not engine.generation([1, 2, 3], sp, LIMITS).uses_draft
    assert engine.generation([1, 2, 3], sp, LIMITS.replace(method="chain")).uses_draft  # a fixed method: as asked
    target, draft = _fake_pair(0.0)
    engine = Engine(target, draft, cost_curves=(GPU_T, GPU_D))
    engine.generate([1, 2, 3], sp, LIMITS)
    assert draft.calls > 0 and engine.generation([1, 2, 3], sp, LIMITS).uses_draft


def test_auto_backs_off_with_a_useless_draft_on_cpu_costs():
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=300, seed=4)
    target, draft = _fake_pair(8.0)  # the draft is nearly random
    res = Engine(target, draft, cost_curves=(CPU_T, CPU_D)).generate([1, 2], sp, LIMITS)
    # the draft's arms are probed and dropped (lookup candidates on this 6-token Markov text
    # are right about half the time, which a 2-row step at 1.3 x one row may use)
    assert res.stats.steps_by_kind.get("draft", 0) <= 0.05 * res.stats.steps


def test_cost_curve_cache_roundtrip(tmp_path):
    curve = costs.measure_curve(lambda n: None, rows=(1, 2, 4), repeats=1)
    assert list(curve.rows) == [1, 2, 4] and all(t >= 0.0 for t in curve.seconds)
    cache = str(tmp_path / "c.json")
    key = costs.curve_cache_key('["m.gguf", 1, 2]')
    assert key != costs.curve_cache_key('["m.gguf", 1, 3]')
    assert costs.load_cached_curve(cache, key) is None
    costs.store_cached_curve(cache, key, curve)
    assert costs.load_cached_curve(cache, key) == curve
    assert curve(3) == pytest.approx((curve.seconds[1] + curve.seconds[2]) / 2)
    # a curve whose measured cost dips (a batch size with a faster kernel) keeps the dip
    dip = costs.CostCurve((1, 2, 3, 4), (1.0, 1.7, 2.2, 1.6))
    assert dip(4) < dip(2) and dip(6) == pytest.approx(1.6)  # beyond the last count: never falling


def test_summary_shows_predicted_and_measured_step_times():
    from resispec_gguf.decoding.autotune import AutoTuner, CostCurve
    from resispec_gguf.config import DraftParams

    curve = CostCurve((1, 2, 4), (0.010, 0.011, 0.012))
    tuner = AutoTuner(curve, curve, DraftParams(), overhead_s=0.0)
    plan = tuner.choose()
    tuner.record_time(plan, 0.030)
    tuner.record_time(None, 0.012)
    tuner.record_time(None, 0.014)
    text = tuner.summary()
    assert f"{plan.arm} {1000 * plan.cost:.1f}/30.0 ms over 1 step," in text and "plain 10.0/13.0 ms over 2 steps" in text
    assert text.startswith(f"auto: {autotune._words(plan.arm)} (probe {plan.arm}); 1 of 3 steps speculated"), text
    assert "\n  tokens/s predicted: plain " in text and f"not run: {plan.arm}" in text  # its step was not observed


@pytest.mark.parametrize("noise", [0.0, 0.5, 1.5])
def test_auto_keeps_up_with_the_best_fixed_setting_on_gpu_like_costs(noise):
    """Where a batch of rows costs about one row (a GPU), auto against every fixed setting of
    ``bench --sweep full``, in modelled seconds (host work aside), on the Markov pair with a
    perfect, a good and a poor draft: the best setting differs (a deep chain, a K=2 tree, a
    wide K=4 tree) and auto, which starts knowing nothing, must come close to each (measured
    0.93 to 0.98 of the best, and 1.35 with a perfect draft, where its deeper chains beat the
    grid's depth 5)."""
    from resispec_gguf.bench import measure as bench

    target, draft = _fake_pair(noise, n_ctx=4096)
    clock = [0.0]
    # no memory of past answers: every setting runs the same seeds, each from its seed alone
    # (a memory filled by the others' replies would key auto's repeated seeds apart)
    engine = Engine(Clocked(target, GPU_T, clock), Clocked(draft, GPU_D, clock), cost_curves=(GPU_T, GPU_D),
                    memory=None)
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=300)

    def rate(dp):
        tokens = seconds = 0.0
        for seed in range(8):
            clock[0] = 0.0
            res = engine.generate([1, 2], sp.replace(seed=seed), dp)
            tokens += len(res.tokens) + res.stats.eos_tokens
            seconds += clock[0]
        return tokens / seconds

    fixed = {name: rate(dp) for name, dp in bench.sweep_grid("full", DraftParams()) if name != "auto"}
    best = max(fixed, key=fixed.get)
    assert best != "none"
    assert rate(DraftParams(method="auto")) >= 0.95 * fixed[best], (best, fixed[best])


def test_an_arm_not_yet_run_is_projected_on_the_footing_of_what_ran():
    """Under a constraint the chain probe's rate counts the forced and certain tokens its
    step took without a draft call, which ``expected_case`` leaves out: a tree whose learnt
    acceptance beats the chain's is still probed (its projection scaled by the chain's rate
    over its own projection), and one that learnt no better is not."""

    def after_an_inflated_chain_probe(tree_accept):
        tuner = autotune.AutoTuner(GPU_T, GPU_D, LIMITS)
        assert list(tuner.exact_ks) == [1, 2, 4]
        for _ in range(40):
            tuner.observe_draft_node(np.array([0.5, tree_accept, tree_accept]), np.array([1.0, 1.5, 2.5]))
        probe = tuner.choose()
        assert probe.arm == "chain"
        inflated = 1.5 * tuner.expected_case("tree4")  # far above what the chain model projects
        probe.value = 12.0  # a plan that expected what it yielded
        tuner.observe_step(probe, 12, 12.0 / inflated)
        assert tuner.arms["chain"].rate == pytest.approx(inflated)
        return tuner, [p.arm if p is not None else None for p in (tuner.choose() for _ in range(3))]

    tuner, seen = after_an_inflated_chain_probe(0.8)
    assert tuner.expected_case("tree4") < tuner.arms["chain"].rate  # the old rule's comparison
    assert seen[0] in ("tree2", "tree4")
    tuner, seen = after_an_inflated_chain_probe(0.5)
    assert not any(arm in ("tree2", "tree4") for arm in seen)


def test_a_root_where_the_grammar_forces_tokens_runs_a_grammar_step_where_it_pays():
    """A forced run at the step's root makes a grammar step (no draft call: lookup-kind)
    once the first probe has run, when its projection beats plain decoding and the rates the
    draft arms have shown; never where lookup-kind steps cannot pay, nor where forced
    candidates have been learnt to fail."""
    from resispec_gguf.decoding.calibration import FORCED_BIN

    tuner = autotune.AutoTuner(CPU_T, CPU_D, LIMITS)
    assert tuner.grammar is not None
    assert tuner.forced_case(1) < tuner.forced_case(3) <= tuner.forced_case(20)
    probe = tuner.choose(1, forced=3)
    assert probe.arm == "chain"  # the first probe goes first: nothing has shown a draft arm's rate
    tuner.observe_step(probe, 1, probe.cost)  # a poor chain step
    plan = tuner.choose(1, forced=3)
    assert plan.arm == "grammar" and plan.kind == "lookup" and "grammar forces 3" in tuner.reason
    assert plan.accept == pytest.approx(tuner.calibration.lookup(FORCED_BIN))
    tuner.observe_step(plan, 4, plan.cost)
    assert tuner.grammar.steps == 1 and tuner.arms["chain"].steps == 1
    assert tuner.choose(1) is None or tuner.current != "grammar"  # nothing forced: the arms as before
    for _ in range(200):  # forced candidates that the target never takes
        tuner.calibration.observe_lookup(FORCED_BIN, 0.0)
    assert tuner.forced_case(3) < tuner.plain_rate
    assert tuner.choose(1, forced=3) is None or tuner.current != "grammar"
    linear = _curve(0.010, 0.0)
    hopeless = autotune.AutoTuner(linear, linear, LIMITS)
    assert hopeless.grammar is None and hopeless.choose(1, forced=5) is None


def test_forced_candidates_speed_auto_up_under_a_grammar_where_draft_calls_cost():
    """Through the engine, in modelled seconds, the spelled grammar (its forced candidate is
    the tokenisation the target takes about 70% of the time; one position in four is
    certain) against the same masks without forced tokens: on the CPU's costs, where a
    draft call is dear, lookup-kind chains of forced candidates and grammar steps make auto
    much faster (measured 1.34 times) and grammar steps run; on GPU-like costs, where the
    draft already predicts what the mask leaves, it is no slower (measured 1.05 times)."""
    from fake_models import SpelledConstraint

    class MasksOnly:
        def __init__(self, inner):
            self.inner = inner

        def start(self):
            s = self.inner.start()

            class State:
                mask, advance, is_stopped = s.mask, s.advance, s.is_stopped

            return State()

    rows = random_rows(6, 2, 3, scale=1.3)
    rng = np.random.default_rng(4)
    noisy = {c: (r + rng.standard_normal(6).astype(np.float32)).astype(np.float32) for c, r in rows.items()}
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=120)

    def speed(constraint, curves, runs):
        clock, toks, summaries = [0.0], 0, []
        target = Clocked(MarkovModel(rows, 6, order=2, name="t", n_ctx=4096, eog=(5,)), curves[0], clock)
        draft = Clocked(MarkovModel(noisy, 6, order=2, name="d", n_ctx=4096, eog=(5,)), curves[1], clock)
        engine = Engine(target, draft, cost_curves=curves)
        for seed in range(runs):
            res = engine.generate([1, 2, 3, 1], sp.replace(seed=seed), LIMITS, constraint=constraint)
            toks += len(res.tokens)
            summaries.append(res.stats.auto)
        return toks / clock[0], summaries

    cpu, grammar_steps = speed(SpelledConstraint(), (CPU_T, CPU_D), 40)
    cpu_masks, plain_summaries = speed(MasksOnly(SpelledConstraint()), (CPU_T, CPU_D), 40)
    assert cpu > 1.15 * cpu_masks
    assert any("grammar" in x for x in grammar_steps) and not any("grammar" in x for x in plain_summaries)
    gpu, _ = speed(SpelledConstraint(), (GPU_T, GPU_D), 20)
    gpu_masks, _ = speed(MasksOnly(SpelledConstraint()), (GPU_T, GPU_D), 20)
    assert gpu >= 0.95 * gpu_masks


def test_the_text_draft_is_an_arm_priced_by_its_curve():
    """A draft of another vocabulary (the "text" arm): never made where its chain could not
    pay even if all accepted; else probed first, asked for the chain length that its bins'
    acceptance pays for, its seconds in the plan's cost; no other step asks it."""
    dear = costs.CostCurve(ROWS, (2.0 * GPU_T(1),) * len(ROWS))
    assert "text" not in autotune.AutoTuner(GPU_T, None, LIMITS, has_draft=False, text=dear).arms
    cheap = _curve(0.0, 0.002)
    tuner = autotune.AutoTuner(GPU_T, None, LIMITS, has_draft=False, text=cheap)
    assert list(tuner.arms) == ["text", "lookup"] and not tuner.drafts
    plan = tuner.choose()
    assert plan.arm == "text" and plan.kind == "lookup" and 1 <= plan.ask <= LIMITS.depth
    assert plan.text_s == pytest.approx(cheap(autotune.TEXT_SYNC_ROWS) + plan.ask * cheap(1))
    assert plan.cost == pytest.approx(plan.text_s + GPU_T(1) + tuner.overhead_s)
    cal, bins = tuner.calibration, layout().ranges["text draft"]
    for _ in range(40):  # its candidates come true: a longer chain pays
        for b in bins:
            cal.observe_lookup(b, 1.0)
    long_ask = tuner.text_ask()
    for _ in range(80):  # they fail: a short one, and the arm loses to plain decoding
        for b in bins:
            cal.observe_lookup(b, 0.0)
    assert long_ask == LIMITS.depth and tuner.text_ask() < long_ask
    tuner.observe_step(plan, 1, plan.cost)
    later = [tuner.choose() for _ in range(40)]
    assert all(p is None or p.ask == 0 for p in later[:3])  # plain (or lookup) steps ask nothing
    assert sum(p is not None and p.arm == "text" for p in later) <= 3  # re-probes only, backing off


def test_a_copy_under_way_runs_a_lookup_step_where_its_chain_pays():
    """``choose``'s ``copy`` (the leading candidates' chances along their chain, the first
    sure): a lookup step once the first probe has run, where the chain's projection beats
    plain decoding and the draft arms' rates; plain where the chain is short or unsure; never
    on a machine where lookup steps cannot pay."""
    tuner = autotune.AutoTuner(CPU_T, CPU_D, LIMITS)
    sure = [0.97] * LIMITS.max_depth
    assert tuner.copy_case(sure) > tuner.copy_case(sure[:2]) and tuner.copy_case(sure) > tuner.plain_rate
    short = [0.2, 0.1]  # 2 rows cost 1.3 of one here: a root of chance 0.2 does not pay
    assert tuner.copy_case(short) < tuner.plain_rate
    probe = tuner.choose(1, copy=sure)
    assert probe.arm == "chain"  # the first probe goes first
    tuner.observe_step(probe, 1, probe.cost)  # a poor chain step
    plan = tuner.choose(1, copy=sure)
    assert plan.arm == "lookup" and "a copy under way" in tuner.reason
    assert tuner.choose(1, copy=short) is None or "a copy under way" not in tuner.reason
    linear = _curve(0.010, 0.0)
    hopeless = autotune.AutoTuner(linear, linear, LIMITS)
    assert hopeless.choose(1, copy=sure) is None
