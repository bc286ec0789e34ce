"""``decoding.batch``: several requests in the same steps, on Markov fakes with slots.

Exactness: 2-4 requests with different methods, temperatures, constraints and lookup run in
the same steps; each request's joint law of its first tokens is checked against its exact
law, and two requests' outputs against the product of their laws (independence, on their
pair counts).  Then a request alone runs as ``loop.run`` runs it, and how the rows are
shared; the mechanics (admission and slot reuse, chunked prefill, cancellation, one
request's failure mid-step, the RAM prompt cache) are in test_batch_slots.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fake_models import MarkovModel, random_rows
from law_harness import (CPU_D, CPU_T, FLAT, LOOKUP_PROMPT, N_TOKENS, PROMPT, RUNS, check_law, constrained_law,
                         exact_law, sample_batch, slotted_pair)
from resispec_gguf.config import DraftParams
from resispec_gguf.engine import Engine
from resispec_gguf.decoding.batch import Request, background_of, share_rows
from resispec_gguf.decoding import costs
from resispec_gguf.decoding.costs import cost_table
from batch_cases import COLD, CONSTRAINT, FILTERS, MIXES, T1, _dp, _engine, _run


def _law(target, prompt, sp, constraint):
    if constraint is None:
        return exact_law(target, prompt, sp, N_TOKENS)
    return constrained_law(target, prompt, sp, N_TOKENS, constraint)


@pytest.mark.parametrize("mix", list(MIXES))
def test_each_request_keeps_its_law_and_two_requests_are_independent(mix):
    engine, target = _engine(mix)
    requests = MIXES[mix][1]
    runs = sample_batch(engine, requests, RUNS)
    laws = [_law(target, p, sp, c) for p, sp, _, c in requests]
    for i, law in enumerate(laws):
        counts = {}
        for run in runs:
            counts[run[i]] = counts.get(run[i], 0) + 1
        check_law(counts, law, f"{mix}: request {i}")
    # the pair (request 0, request 1) against the product of their laws: the conditional
    # law of request 1's tokens given request 0's output is request 1's own law
    pairs = {}
    for run in runs:
        key = (run[0],) + run[1]
        pairs[key] = pairs.get(key, 0) + 1
    product = {(a,) + b: pa * pb for a, pa in laws[0].items() for b, pb in laws[1].items()}
    check_law(pairs, product, f"{mix}: pair independence")


def test_two_requests_with_the_same_seed_in_one_pass_draw_apart():
    """Requests beside each other in a pass read each other's steps (rows, tree room), so a
    seed used again on a several-slot engine draws under a ledger key of its own
    (``seeding``): three requests with one seed and config give different replies, and the
    first is the seed's alone (what a one-slot engine gives)."""
    engine, _ = _engine("gpu")
    batch = engine.batch()
    dp = _dp("resispec")
    sp = T1.replace(seed=7, max_tokens=12)
    reqs = [batch.admit(engine.generation(PROMPT, sp, dp)) for _ in range(3)]
    while batch.busy:
        batch.step()
    outs = [tuple(r.gen.out) for r in reqs]
    assert len(set(outs)) > 1
    single = Engine(*slotted_pair(1), cost_curves=MIXES["gpu"][0], memory=None)
    assert outs[0] == tuple(single.generate(PROMPT, sp, dp).tokens)


CASES_ALONE = [
    (PROMPT, T1, _dp("resispec"), None),
    (LOOKUP_PROMPT, FILTERS, _dp("chain", lookup=True), None),
    (LOOKUP_PROMPT, T1, _dp("auto"), None),
    (LOOKUP_PROMPT, FILTERS, _dp("auto"), CONSTRAINT),
    (PROMPT, COLD, _dp("none"), CONSTRAINT),
]


@pytest.mark.parametrize("case", range(len(CASES_ALONE)))
def test_a_request_alone_in_a_batch_runs_as_the_single_request_loop(case):
    prompt, sp, dp, constraint = CASES_ALONE[case]
    sp = sp.replace(max_tokens=20)
    single = Engine(*slotted_pair(1), cost_curves=(CPU_T, CPU_D), memory=None)
    for seed in range(6):
        want = single.generate(prompt, sp.replace(seed=seed), dp, constraint=constraint)
        engine = Engine(*slotted_pair(4), cost_curves=(CPU_T, CPU_D), memory=None)
        batch = engine.batch(chunk=3)
        req = batch.admit(engine.generation(prompt, sp.replace(seed=seed), dp, constraint=constraint), slot=2)
        while batch.busy:
            batch.step()
        got = req.gen.result()
        assert (got.tokens, got.finish_reason, got.text) == (want.tokens, want.finish_reason, want.text)


# --------------------------------------------------------------------------- rows


def test_share_rows_takes_every_row_when_rows_are_free():
    flat = cost_table(FLAT, 64)
    assert share_rows([0.9, 0.5], [True, True], 2, 6, flat, np.zeros(64)) == [6, 6]


def test_share_rows_ranks_rows_across_requests_by_value_per_cost():
    cpu_t, cheap_d = cost_table(CPU_T, 64), cost_table(FLAT, 64) * 0.05
    strong, weak = share_rows([0.95, 0.3], [True, True], 2, 8, cpu_t, cheap_d)
    assert strong > weak
    # the CPU draft costs 0.44 of a target row: beside another request's root, no tree pays
    assert share_rows([0.9, 0.2], [True, True], 2, 8, cpu_t, cost_table(CPU_D, 64)) == [0, 0]
    # a dear target row buys nothing: plain decoding for both
    dear = np.arange(64) * 10.0
    assert share_rows([0.9, 0.9], [True, True], 2, 8, dear, cheap_d) == [0, 0]


def test_share_rows_counts_the_draft_calls_of_the_deepest_chain():
    flat_t = cost_table(FLAT, 64)
    # a draft call costs as much as the target decode: deep chains do not pay at a = 0.5
    shallow = share_rows([0.5], [True], 1, 8, flat_t, flat_t)
    free = share_rows([0.5], [False], 1, 8, flat_t, flat_t)
    assert shallow[0] < free[0] == 8


def _share_rows_by_recount(accepts, drafts, base_rows, cap, target_s, draft_s, row_s=0.0, overhead_s=0.0,
                           base_tokens=None):
    """``share_rows`` the slow way: after each row added, every level's count is taken again
    from the requests' row counts (the definition ``share_rows`` keeps up incrementally)."""
    n = len(accepts)
    if n == 0 or cap <= 0:
        return [0] * n
    a = np.clip(np.asarray(accepts, np.float64), 0.0, 1.0)
    values = a[:, None] ** np.arange(1, cap + 1)[None, :]
    owner = np.repeat(np.arange(n), cap)
    order = np.argsort(-values.ravel(), kind="stable")
    nt, nd = len(target_s) - 1, len(draft_s) - 1
    counts = np.zeros(n, np.int64)
    best_k, best_ratio = 0, -1.0
    value = float(base_rows if base_tokens is None else base_tokens)
    for k in range(len(order) + 1):
        if k:
            counts[owner[order[k - 1]]] += 1
            value += float(values.ravel()[order[k - 1]])
        rows = base_rows + k
        t = target_s[min(rows, nt)] + row_s * rows + overhead_s
        levels = counts[np.asarray(drafts, bool)]
        for lvl in range(1, int(levels.max()) + 1 if levels.size else 1):
            t += draft_s[min(int(np.sum(levels >= lvl)), nd)]
        ratio = value / t if t > 0 else value
        if ratio > best_ratio * (1.0 + 1e-9):
            best_k, best_ratio = k, ratio
    out = np.zeros(n, np.int64)
    for j in order[:best_k]:
        out[owner[j]] += 1
    return out.tolist()


@pytest.mark.parametrize("seed", range(40))
def test_share_rows_keeps_each_level_count_as_a_recount_would(seed):
    """Random acceptances (ties, 0 and 1 included), drafting mixes and cost curves (concave,
    convex, stepped, with host work per row): the same rows as counting every level again."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    accepts = rng.choice([0.0, 1.0, 0.5, *rng.uniform(0, 1, 4)], n).tolist()
    drafts = (rng.uniform(size=n) < 0.7).tolist()
    size = int(rng.integers(8, 80))
    grow = rng.choice([0.3, 1.0, 1.7])
    target_s = 0.02 + 0.004 * np.arange(size) ** grow * rng.uniform(0.2, 3)
    target_s[0] = 0.0
    draft_s = np.maximum.accumulate(0.002 + rng.uniform(0, 0.003, size) * np.arange(size) ** 0.5)
    draft_s[0] = 0.0
    args = (accepts, drafts, int(rng.integers(1, 9)), int(rng.integers(0, 20)), target_s, draft_s,
            float(rng.choice([0.0, 2e-4])), float(rng.choice([0.0, 1e-3])))
    assert share_rows(*args) == _share_rows_by_recount(*args)


def test_the_background_holds_the_levels_the_step_pays_for():
    """The step's joint levels stand for the auto requests' past draft calls (a level paid
    once for all, priced at a plan's rows even where none of them drafted yet); a request
    of a fixed shape makes its own calls whatever the levels; without joint levels the past
    steps stand."""
    def req(slot, auto, calls, draft_rows):
        gen = SimpleNamespace(auto=object() if auto else None)
        return Request(gen, slot, rows=2.0, tokens=1.5, draft_rows=draft_rows, draft_calls=calls)

    others = [req(0, True, 5.0, 0.4), req(1, True, 4.6, 0.4), req(2, False, 3.0, 0.4)]
    past = background_of(others)
    assert (past.rows, past.value, past.draft_rows, past.draft_levels) == (6, 4.5, 1, 5)
    assert background_of(others, levels=2).draft_levels == 3  # the fixed tree's own calls
    assert background_of(others, levels=4).draft_levels == 4
    none_drafted = [req(s, True, 0.0, 0.0) for s in range(2)]
    assert background_of(none_drafted).draft_levels == 0
    joint = background_of(none_drafted, levels=3)
    assert (joint.draft_rows, joint.draft_levels) == (1, 3)


def test_beside_others_auto_requests_deepen_together():
    """Four auto requests on GPU-like costs (a draft call worth ten target rows): a level
    is worth its call only when every request deepens, so the step's levels are chosen
    jointly and each request's steps reach them, none falling back to plain steps."""
    rows = costs.ROW_COUNTS
    gpu_t = costs.CostCurve(rows, tuple(0.020 + 0.0002 * n for n in rows))
    gpu_d = costs.CostCurve(rows, tuple(0.002 + 0.0001 * n for n in rows))
    rows_t = random_rows(6, 1, 11, scale=2.5)  # no end token: every request runs its 60 tokens
    noise = np.random.default_rng(5)
    rows_d = {c: (r + 0.5 * noise.standard_normal(6)).astype(np.float32) for c, r in rows_t.items()}
    pair = [MarkovModel(r, 6, name=n, n_ctx=1024, n_slots=4, n_seq_max=256) for r, n in ((rows_t, "t"), (rows_d, "d"))]
    engine = Engine(*pair, cost_curves=(gpu_t, gpu_d))
    batch = engine.batch()
    dp = DraftParams(method="auto", depth=6, budget=32)
    reqs = [batch.admit(engine.generation([1, 2], T1.replace(seed=s, max_tokens=60), dp)) for s in range(4)]
    _run(batch)
    for r in reqs:
        kinds = r.gen.stats.steps_by_kind
        assert kinds.get("none", 0) == 0, kinds
        assert r.gen.stats.draft_calls / kinds["draft"] >= 4.5  # each request alone in its levels: about 3.5
