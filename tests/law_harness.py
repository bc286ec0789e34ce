"""The exactness harness: Markov fake pairs with a known exact output law, the grids of
configurations the law tests run (methods, tree policies, temperatures, room regimes, cost
regimes), the checks (``check_law``) and the law under a constraint (``constrained_law``,
``sample_constrained``).  Used by test_exactness.py, test_constraint.py, test_lazy.py,
test_forced.py and scripts/exactness_report.py; a helper module, not a test file.
Exactness through the engine, at scale, on Markov fake models (see fake_models.py).

With an order-2 Markov target the exact law of the first ``N_TOKENS`` generated tokens is a
product of processed rows, so the real engine — tree growth, pruning, verification, commits,
the pending draft chain — can be checked against it for every method, tree policy, room
regime and temperature.  Each configuration runs the engine ``RUNS`` times (seeds 0..RUNS-1)
and checks:

1. every emitted sequence has positive probability;
2. a chi-square test of the joint law of the first ``N_TOKENS`` tokens (cells expected below
   5 merged), p >= ``ALPHA``;
3. a binomial z-test of every conditional ``P(next | prefix)`` with at least 5 expected
   counts on both sides, Bonferroni-corrected over the cells tested, p >= ``ALPHA``.  Given
   the prefix count ``n``, the count of ``prefix + x`` is Binomial(n, p(x | prefix)) exactly
   when the engine is exact, so the test is valid whatever ``n`` turns out to be.

Sizing.  Test 3 detects (with probability 1/2) a shift ``d`` of a conditional probability
``pi`` once ``d >= z * sqrt(pi (1 - pi) / n)``, ``z = Phi^-1(1 - ALPHA / (2 m))`` for ``m``
cells (m <= 150 here, z <= 5.4).  With ``RUNS = 1600``, at the first token (n = 1600) that is
``d = 0.041`` at pi = 0.1 and 0.068 at pi = 0.5; a conditional whose prefix occurs in a
quarter of the runs detects twice those shifts.  The pruning bias this harness was built
against shifts 0.9 to 0.94.  Detecting a 1% shift of every conditional with pi >= 0.1 needs
about ``(5.4 + 1.3)^2 * 0.25 / 0.01^2 = 112,000`` visits of its prefix; set
``RESISPEC_EXACTNESS_RUNS`` (e.g. 200000) for that full-power run, which takes hours on two
cores, not seconds.  The seeds are fixed, so the suite is deterministic; ``ALPHA = 1e-5``
keeps an unlucky seed set unlikely when a change reorders the engine's random draws.
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
from scipy import stats

from fake_models import MarkovModel, PathConstraint, random_rows
from resispec_gguf.kernels import sampling
from resispec_gguf.decoding.autotune import AutoTuner, CostCurve
from resispec_gguf.decoding.memory import Memory
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine

ALPHA = 1e-5
RUNS = int(os.environ.get("RESISPEC_EXACTNESS_RUNS", "1600"))
N_TOKENS = 4
V = 6
EOG = 5
PROMPT = [1, 2, 3, 1]
# repeats itself, so context lookup finds candidates (the law depends on the last 2 tokens only)
LOOKUP_PROMPT = [0, 2, 4, 1, 3, 2, 1, 0, 4, 3, 1]

TEMPERATURES = {
    "T1": SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    "T0.6-filters": SamplingParams(temperature=0.6, top_k=3, top_p=0.9, min_p=0.05),
    "T0.01": SamplingParams(temperature=0.01, top_k=0, top_p=1.0, min_p=0.0),
}
# room regimes, for a prompt of n tokens: (target n_ctx, draft n_ctx, draft n_seq_max, plain
# steps before speculating)
ROOMS = {
    "ample": lambda n: (256, 256, 98, 0),
    # the tree gets 4 target rows at the first step and fewer after, down to none
    "target-room": lambda n: (n + N_TOKENS, 256, 98, 0),
    # 2 draft rows per step at most, and then none at all once the draft's context is full
    "draft-room": lambda n: (256, n + 2, 4, 0),
    # auto runs two plain steps first: the draft catches up on a 3-token pending chain,
    # which eats into its 5 rows
    "pending-chain": lambda n: (256, 256, 6, 2),
}
METHODS = ("chain", "specinfer", "rrs", "resispec")
ROWS = (1, 2, 4, 8, 16, 32)
FLAT = CostCurve(ROWS, (1.0,) * len(ROWS))  # a batch costs what one row costs (a GPU)
CPU_T = CostCurve(ROWS, (1.0, 1.3, 1.7, 3.0, 3.8, 7.0))  # the 2-core CPU's target
CPU_D = CostCurve(ROWS, (0.44, 0.55, 0.75, 1.3, 1.7, 3.1))
TEXT_CHEAP = CostCurve(ROWS, (0.02,) * len(ROWS))  # a draft of another vocabulary at 2% of a target decode
TEXT_DEAR = CostCurve(ROWS, (2.0,) * len(ROWS))  # one that costs twice a target decode per token


def biased(row, sp: SamplingParams):
    """``row`` with ``sp.logit_bias`` added, the plain sampler's way (no bias: ``row`` itself)."""
    if not sp.logit_bias:
        return row
    out = np.array(row, np.float32)
    for tid, bias in sp.logit_bias:
        out[tid] += np.float32(bias)
    return out


def constrained_law(target, prompt, sp: SamplingParams, n: int, constraint) -> dict[tuple, float]:
    """``{sequence: probability}`` of the first ``n`` tokens under plain constrained sampling
    (``sp.logit_bias`` added before the mask) with ``constraint`` (any object with
    ``allowed(history)``, the fakes' exact rule); a sequence ending in EOG (sampled, or
    forced by a complete constraint) stops."""
    law: dict[tuple, float] = {}

    def rec(prefix, prob):
        if len(prefix) == n:
            law[prefix] = prob
            return
        allowed = constraint.allowed(prefix)
        if allowed == [EOG]:
            law[prefix + (EOG,)] = law.get(prefix + (EOG,), 0.0) + prob
            return
        row = target.row(list(prompt) + list(prefix))
        mask = sampling.bitmask_from_ids(allowed, V)
        masked = sampling.mask_logits(biased(row, sp), mask)
        if masked.max() == -np.inf:  # the bias banned every allowed token: the row goes unbiased
            masked = sampling.mask_logits(row, mask)
        if sp.greedy:
            p = np.zeros(V)
            p[int(np.argmax(masked))] = 1.0
        else:
            p = sampling.probs_dense(masked, sp.temperature, sp.top_k, sp.top_p, sp.min_p)
        assert set(np.flatnonzero(p)) <= set(allowed)
        for x in np.flatnonzero(p):
            if x == EOG:
                law[prefix + (EOG,)] = law.get(prefix + (EOG,), 0.0) + prob * p[x]
            else:
                rec(prefix + (int(x),), prob * p[x])

    rec((), 1.0)
    return law


def sample_constrained(engine: Engine, prompt, sp: SamplingParams, dp: DraftParams, runs: int,
                       constraint) -> Counter:
    """The first ``N_TOKENS`` tokens (EOG appended when the reply ended) of ``runs`` seeded
    replies under ``constraint``."""
    counts: Counter = Counter()
    for seed in range(runs):
        res = engine.generate(prompt, sp.replace(seed=seed, max_tokens=N_TOKENS), dp, constraint=constraint)
        seq = tuple(res.tokens) + ((EOG,) if res.finish_reason == "eos" else ())
        assert len(seq) == N_TOKENS or seq[-1] == EOG, (seq, res.finish_reason)
        counts[seq] += 1
    return counts


def _pair(target_ctx=256, draft_ctx=256, draft_seq=98, seed=3, n_slots=1):
    rows_t = random_rows(V, 2, seed, scale=1.3)
    rng = np.random.default_rng(seed + 100)
    rows_d = {}
    for ctx, r in rows_t.items():
        d = (r + rng.standard_normal(V).astype(np.float32) * 1.2).astype(np.float32)
        if sum(ctx) % 3 == 0:  # far-apart logits: at T = 0.01 their weights underflow to 0
            d[rng.choice(V, 3, replace=False)] -= 20.0
        d.flags.writeable = False
        rows_d[ctx] = d
    # n_seq_max - n_slots uncommitted nodes: a request alone gets the room it has with one slot
    target = MarkovModel(rows_t, V, order=2, n_ctx=target_ctx, n_seq_max=97 + n_slots, eog=(EOG,), name="t",
                         n_slots=n_slots)
    draft = MarkovModel(rows_d, V, order=2, n_ctx=draft_ctx, n_seq_max=draft_seq - 1 + n_slots, eog=(EOG,),
                        name="d", n_slots=n_slots)
    return target, draft


def slotted_pair(n_slots, **room):
    """``_pair`` with ``n_slots`` slots in each model (``protocol.SlotBackend``)."""
    return _pair(n_slots=n_slots, **room)


def exact_law(target: MarkovModel, prompt, sp: SamplingParams, n: int) -> dict[tuple, float]:
    """``{sequence: probability}`` of the first ``n`` tokens (``sp.logit_bias`` added to every
    row first); a sequence ending in EOG stops."""
    law: dict[tuple, float] = {}

    def rec(prefix, prob):
        if len(prefix) == n:
            law[prefix] = prob
            return
        row = biased(target.row(list(prompt) + list(prefix)), sp)
        if sp.greedy:
            p = np.zeros(V)
            p[int(np.argmax(row))] = 1.0
        else:
            p = sampling.probs_dense(row, sp.temperature, sp.top_k, sp.top_p, sp.min_p)
        for x in np.flatnonzero(p):
            if x == EOG:
                law[prefix + (EOG,)] = prob * p[x]
            else:
                rec(prefix + (int(x),), prob * p[x])

    rec((), 1.0)
    return law


class _ScriptedPlan:
    """A fixed tree shape in auto's clothes: no cost-based limits."""

    kind = "draft"
    arm = "scripted"
    cost = 1.0
    value = 1.0
    ask = 0  # no text draft's chain
    chain = False
    n_nodes = 0

    def __init__(self, params):
        self.params = params
        self.tails = 0

    def width(self, level, scores):
        return len(scores)

    def leaves(self, expanded_scores, leaf_scores):
        return len(leaf_scores)

    def tail_pays(self, score):
        """Three lookup-tail nodes per step at most, wherever they are offered."""
        return self.tails < 3

    def tail(self, score):
        self.tails += 1
        return self.tails <= 3


class _ScriptedTuner(AutoTuner):
    """Stands in for auto's tuner: plain decoding for the first steps, then one tree shape."""

    drafts = True  # its trees call the draft, whatever the arms its flat costs would keep
    lazy_start = False  # the draft reads the prompt first: its trees then follow a pending chain

    def __init__(self, plain_steps, dp):
        super().__init__(FLAT, FLAT, dp)
        self.left, self.dp = plain_steps, dp

    def choose(self, pending=1, forced=0, remaining=0, stale=False, copy=()):
        if self.left > 0:
            self.left -= 1
            return None
        return _ScriptedPlan(self.dp)

    def observe_step(self, plan, tokens, seconds):
        pass

    def observe_children(self, plan, mean_children):
        pass


def sample(engine: Engine, sp: SamplingParams, dp: DraftParams, runs: int, plain_steps: int = 0) -> Counter:
    if plain_steps:
        engine._tuner = lambda _auto, _context=0, spec=dp: _ScriptedTuner(plain_steps, spec)
        dp = dp.replace(method="auto")
    prompt = LOOKUP_PROMPT if dp.lookup or dp.method == "auto" else PROMPT
    counts: Counter = Counter()
    for seed in range(runs):
        res = engine.generate(prompt, sp.replace(seed=seed, max_tokens=N_TOKENS), dp)
        seq = tuple(res.tokens) + ((EOG,) if res.finish_reason == "eos" else ())
        assert len(seq) == N_TOKENS or seq[-1] == EOG, (seq, res.finish_reason)
        counts[seq] += 1
    return counts


def check_law(counts: Counter, law: dict[tuple, float], label: str) -> dict:
    """Tests 1-3 of the module docstring; returns the p-values."""
    runs = sum(counts.values())
    impossible = [s for s in counts if law.get(s, 0.0) <= 0.0]
    assert not impossible, f"{label}: emitted sequences of probability 0: {impossible[:3]}"
    # 2. joint law
    cells = sorted(law, key=lambda s: -law[s])
    big = [s for s in cells if law[s] * runs >= 5]
    obs = [counts.get(s, 0) for s in big]
    exp = [law[s] * runs for s in big]
    rest_obs, rest_exp = runs - sum(obs), runs - sum(exp)
    if rest_exp >= 5:
        obs.append(rest_obs)
        exp.append(rest_exp)
    elif obs:
        obs[-1] += rest_obs
        exp[-1] += rest_exp
    p_joint = stats.chisquare(obs, exp).pvalue if len(obs) > 1 else 1.0
    # 3. every conditional with enough data
    prefix_count: Counter = Counter()
    prefix_prob: dict[tuple, float] = {}
    for s, c in counts.items():
        for i in range(len(s) + 1):
            prefix_count[s[:i]] += c
    for s, pr in law.items():
        for i in range(len(s) + 1):
            prefix_prob[s[:i]] = prefix_prob.get(s[:i], 0.0) + pr
    zs = []
    for s, pr in prefix_prob.items():
        if not s:
            continue
        h = s[:-1]
        n = prefix_count.get(h, 0)
        if n == 0 or prefix_prob[h] <= 0.0:
            continue
        pi = pr / prefix_prob[h]
        if n * pi >= 5 and n * (1 - pi) >= 5:
            zs.append((prefix_count.get(s, 0) - n * pi) / np.sqrt(n * pi * (1 - pi)))
    m = max(1, len(zs))
    z_max = max((abs(z) for z in zs), default=0.0)
    p_cond = min(1.0, m * 2 * stats.norm.sf(z_max))
    assert p_joint >= ALPHA and p_cond >= ALPHA, f"{label}: joint p = {p_joint:.2e}, conditional p = {p_cond:.2e} (m = {m})"
    return {"joint": p_joint, "conditional": p_cond, "cells": m}


# --------------------------------------------------------------------------- the grid


# The stochastic grid.  Each case builder returns ``(engine, target, prompt, sp, dp, plain
# steps)``; the tests below and scripts/exactness_report.py both run them.
LOOKUP_ROOMS = ("ample", "target-room")
COST_REGIMES = {"gpu": (FLAT, FLAT), "cpu": (CPU_T, CPU_D), "gpu no draft": (FLAT, None)}
TREE_GRID = (METHODS, ("budget", "static"), tuple(TEMPERATURES), tuple(ROOMS))
LOOKUP_GRID = (METHODS + ("lookup only",), ("T1", "T0.6-filters"), LOOKUP_ROOMS)
AUTO_GRID = (tuple(COST_REGIMES), tuple(TEMPERATURES), LOOKUP_ROOMS)


def tree_case(method, policy, temp, room):
    target_ctx, draft_ctx, draft_seq, plain = ROOMS[room](len(PROMPT))
    target, draft = _pair(target_ctx, draft_ctx, draft_seq)
    dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4, policy=policy)
    return Engine(target, draft), target, PROMPT, TEMPERATURES[temp], dp, plain


def lookup_case(method, temp, room):
    target_ctx, draft_ctx, draft_seq, _ = ROOMS[room](len(LOOKUP_PROMPT))
    target, draft = _pair(target_ctx, draft_ctx, draft_seq)
    if method == "lookup only":
        engine, method = Engine(target, None), "chain"
    else:
        engine = Engine(target, draft)
    dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4, lookup=True)
    return engine, target, LOOKUP_PROMPT, TEMPERATURES[temp], dp, 0


def auto_case(costs, temp, room):
    target_ctx, draft_ctx, draft_seq, _ = ROOMS[room](len(LOOKUP_PROMPT))
    target, draft = _pair(target_ctx, draft_ctx, draft_seq)
    curves = COST_REGIMES[costs]
    engine = Engine(target, None if curves[1] is None else draft, cost_curves=curves)
    dp = DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4)
    return engine, target, LOOKUP_PROMPT, TEMPERATURES[temp], dp, 0


def run_case(case, label: str) -> dict:
    """Sample a case RUNS times and check it against its exact law (``check_law``)."""
    engine, target, prompt, sp, dp, plain = case
    counts = sample(engine, sp, dp, RUNS, plain)
    return check_law(counts, exact_law(target, prompt, sp, N_TOKENS), label)


# --------------------------------------------------------------------------- several requests at once


def sample_batch(engine: Engine, requests, runs: int, chunk: int = 256, observe=None) -> list[tuple]:
    """Run ``requests`` (``(prompt, sp, dp, constraint)`` each) together in one
    ``engine.batch()``, ``runs`` times; returns per run the tuple of each request's first
    ``N_TOKENS`` tokens (EOG appended at "eos").  Request i of run r is seeded ``r + 100003 * i``.
    ``observe``: called after each run with its ``Generation``s in request order (what each
    request's steps did: stats, trees seen)."""
    out = []
    for run in range(runs):
        batch = engine.batch(chunk)
        reqs = []
        for i, (prompt, sp, dp, constraint) in enumerate(requests):
            gen = engine.generation(prompt, sp.replace(seed=run + 100003 * i, max_tokens=N_TOKENS), dp,
                                    constraint=constraint)
            reqs.append(batch.admit(gen))
        while batch.busy:
            batch.step()
        seqs = []
        for r in reqs:
            res = r.gen.result()
            seq = tuple(res.tokens) + ((EOG,) if res.finish_reason == "eos" else ())
            assert len(seq) == N_TOKENS or seq[-1] == EOG, (seq, res.finish_reason)
            seqs.append(seq)
        if observe is not None:
            observe([r.gen for r in reqs])
        out.append(tuple(seqs))
    return out


# --------------------------------------------------------------------------- the memory of past answers


def filled_memory(seed: int = 7) -> Memory:
    """A ``Memory`` of past answers that continue ``LOOKUP_PROMPT`` in many ways, with uneven
    counts (test_memory_law.py's ``_memory``): the prompt's own tail followed by random
    tokens, and random sequences.  Every node of a harness request then carries several
    counted candidates from it."""
    rng = np.random.default_rng(seed)
    memory = Memory(max_tokens=100_000)
    tail = LOOKUP_PROMPT[-3:]
    for i in range(150):
        body = rng.choice(EOG, size=6, p=[0.4, 0.25, 0.15, 0.12, 0.08]).tolist()
        memory.remember((tail + body) if i % 2 else body + tail + body[:3])
    return memory


# a cross-vocabulary fake pair: the target's tokens and the draft's spell the same letters
# in other pieces (EOG spells nothing)
TARGET_TEXTS = (b"a", b"b", b"c", b"ab", b"ca", b"")
DRAFT_TEXTS = (b"a", b"b", b"c", b"bc", b"abca", b"cab", b"ba", b"")


def text_pair(seed=3, p_min=0.0, faithful=False):
    """``(target, TextDraft)``: the harness's target and a ``TextMarkov`` draft of another
    vocabulary (random order-2 rows over its own tokens), read through text
    (``decoding.textdraft``) with a longest-match tokenizer on each side.  ``faithful``: the
    draft is the target itself under other ids (its texts in reverse order), so its greedy
    chains write what the target's greedy output writes."""
    from fake_models import TextCodec, TextMarkov
    from resispec_gguf.decoding.textdraft import TextDraft

    target, _ = _pair(seed=seed)
    if faithful:
        texts = TARGET_TEXTS[::-1]
        n = len(texts)
        back = [n - 1 - d for d in range(n)]  # draft id -> target id
        rows = {(a, b): target.row([back[a], back[b]])[back] for a in range(n) for b in range(n)}
    else:
        texts = DRAFT_TEXTS
        n = len(texts)
        rows = random_rows(n, 2, seed + 7)
    eog = texts.index(b"")
    draft = TextMarkov(rows, texts, order=2, n_ctx=256, n_seq_max=98, eog=(eog,), name="text-d")
    return target, TextDraft(draft, bos=None, target=TextCodec(TARGET_TEXTS), p_min=p_min)


# the engine cases that read candidates from the context: a lookup chain, auto without and with
# a draft (``lookup_source_law``)
LOOKUP_SOURCE_CASES = {
    "lookup": ("none", DraftParams(method="chain", lookup=True, use_draft=False, depth=3, budget=6, lookup_k=3)),
    "auto, no draft": ("none", DraftParams(method="auto", depth=4, budget=8, lookup_k=3)),
    "auto": ("draft", DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4, lookup_k=3)),
}


def lookup_source_law(case: str, temp: str, constrained: bool, label: str) -> None:
    """``RUNS`` seeded requests of ``LOOKUP_SOURCE_CASES[case]`` on ``LOOKUP_PROMPT`` through an
    engine on the Markov pair (no memory), at ``TEMPERATURES[temp]``, under ``PathConstraint``
    when ``constrained``: their first ``N_TOKENS`` tokens against the target's exact law
    (``check_law``).  What the candidate sources read (views, anchors) the caller patches first."""
    kind, dp = LOOKUP_SOURCE_CASES[case]
    target, draft = _pair()
    engine = Engine(target, draft if kind == "draft" else None,
                    cost_curves=COST_REGIMES["gpu" if kind == "draft" else "gpu no draft"], memory=None)
    sp = TEMPERATURES[temp]
    constraint = PathConstraint(V, EOG) if constrained else None
    counts: dict[tuple, int] = {}
    for seed in range(RUNS):
        res = engine.generate(LOOKUP_PROMPT, sp.replace(seed=seed, max_tokens=N_TOKENS), dp, constraint=constraint)
        seq = tuple(res.tokens) + ((EOG,) if res.finish_reason == "eos" else ())
        counts[seq] = counts.get(seq, 0) + 1
    law = (constrained_law(target, LOOKUP_PROMPT, sp, N_TOKENS, constraint) if constrained
           else exact_law(target, LOOKUP_PROMPT, sp, N_TOKENS))
    check_law(counts, law, f"{label}/{case}/{temp}/{'constrained' if constrained else 'free'}")
