"""auto on a target that evaluates one chain (recurrent memory: ``max_chain``), on Markov
fakes that refuse anything else: chains only, within the chain, and each step's plan prices
the rows the target then evaluates."""

import numpy as np
import pytest

from fake_models import MarkovModel, random_rows
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.decoding import autorequest, autotune, costs
from resispec_gguf.engine import Engine

ROWS = costs.ROW_COUNTS
GPU_T = costs.CostCurve(ROWS, tuple(0.020 + 0.0002 * n for n in ROWS))  # a batch costs about one row
GPU_D = costs.CostCurve(ROWS, tuple(0.002 + 0.0001 * n for n in ROWS))


def test_a_chain_only_target_gets_chain_arms_within_its_chain():
    limits = DraftParams(method="auto", draws=4)
    tuner = autotune.AutoTuner(GPU_T, GPU_D, limits, max_chain=3)
    assert list(tuner.arms) == ["chain", "lookup"]
    plan = tuner.choose()
    assert plan.chain and plan.children == 1.0
    assert (plan.params.draws, plan.params.max_depth, plan.params.max_budget) == (1, 3, 3)
    assert plan.width(0, [0.9, 0.8, 0.7]) == 1  # one node a level, however many children pay
    assert list(autotune.AutoTuner(GPU_T, GPU_D, limits).arms) == ["chain", "tree2", "tree4", "lookup"]
    assert autotune.AutoTuner(GPU_T, GPU_D, limits, max_chain=0).arms == {}  # nothing undone: plain


def _pair(max_chain, noise):
    V = 6
    rows_t = random_rows(V, 1, 11, scale=2.5)
    rng = np.random.default_rng(5)
    rows_d = {c: (r + rng.standard_normal(V).astype(np.float32) * noise).astype(np.float32)
              for c, r in rows_t.items()}
    return (MarkovModel(rows_t, V, name="t", max_chain=max_chain),
            MarkovModel(rows_d, V, name="d"))


@pytest.mark.parametrize("noise", [0.0, 0.8])
@pytest.mark.parametrize("lookup", [False, True])
def test_each_plan_prices_the_chain_the_target_evaluates(monkeypatch, noise, lookup):
    """The fake target refuses a decode that is not one chain of at most 4 nodes below the
    root; each step's plan counted as many nodes as the target's decode held."""
    plans = []
    choose = autorequest.Auto.choose

    def recording(self, *args, **kwargs):
        plans.append(choose(self, *args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(autorequest.Auto, "choose", recording)
    target, draft = _pair(4, noise)
    engine = Engine(target, draft if not lookup else None, cost_curves=(GPU_T, GPU_D if not lookup else None),
                    memory=None)
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=120, seed=3)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]
    res = engine.generate(prompt, sp, DraftParams(method="auto"))
    assert len(plans) == len(target.node_counts)
    speculated = [(p, n) for p, n in zip(plans, target.node_counts) if p is not None]
    assert speculated, "auto never speculated"
    assert {p.arm for p, _ in speculated} <= {"chain", "lookup", "grammar"}
    for p, n in zip(plans, target.node_counts):
        assert n == 1 + (p.n_nodes if p is not None else 0)
    assert max(target.node_counts) <= 5
    assert res.stats.steps == len(plans)
