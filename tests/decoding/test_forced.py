"""candidates/forced.py: the tokens a constraint forces, as free draft candidates, and certain positions.

Units: ``only_token`` reads a packed mask; ``ForcedTokens`` asks the constraint once per path
and step.  Exactness through the engine, on the law harness: ``fake_models.SpelledConstraint``
spells text with tokens that overlap ("ab" is one token or "a" + "b"), forces most letters
and leaves one position in four free, so its forced candidates ("ab" as one token) are
often rejected by a target that prefers the other tokenisation, and one position in four
allows a single token (certain: no draw).  The joint law of the first 4 tokens must be plain
constrained sampling's for every method with and without lookup, lookup alone, and auto in
each cost regime; the same behind a lazy trigger.  Greedy stays plain constrained greedy,
and a reply whose every position is certain draws no uniform at all.

Certain runs: ``fake_models.RunsConstraint`` has two certain positions after every free
one, so a tree expands them without draft rows and grows past its ``depth``
(``tree.growing``); the law must hold there too, with the run at the root or below it, and
the draft must stay in step with the reply.
"""

from __future__ import annotations

import numpy as np
import pytest

from fake_models import LazyConstraint, PathConstraint, RunsConstraint, SpelledConstraint
from law_harness import (COST_REGIMES, EOG, LOOKUP_PROMPT, METHODS, N_TOKENS, PROMPT, RUNS, TEMPERATURES, V, _pair,
                         check_law, constrained_law, sample_constrained)
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.kernels.sampling import bitmask_from_ids
from resispec_gguf.decoding import loop
from resispec_gguf.decoding.candidates.forced import ForcedTokens, only_token

SPELLED = SpelledConstraint(V, EOG)
# free text until 4, 3, then the spelled grammar
LAZY_SPELLED = LazyConstraint(V, EOG, trigger=(4, 3), inner=SPELLED)


# --------------------------------------------------------------------------- units


@pytest.mark.parametrize("ids,want", [([], -1), ([0], 0), ([31], 31), ([32], 32), ([100], 100), ([3, 4], -1),
                                      ([3, 40], -1), ([63, 64], -1)])
def test_only_token_reads_a_packed_mask(ids, want):
    assert only_token(bitmask_from_ids(ids, 130)) == want


def test_forced_tokens_ask_once_per_path_and_step():
    state = SPELLED.start()
    forced = ForcedTokens.of(state)
    assert forced.tokens(()) == [2] and forced.first(()) == 2  # "ab" as one token
    assert forced.tokens((0,)) == [1]  # after "a": "b"
    assert forced.tokens((2,)) == [] and forced.first((2,)) == -1  # the free letter
    assert forced.tokens((2, 4)) == [4, 2]  # "c", then "ab"
    forced.tokens(())
    assert state.forced_calls == 4
    state.advance([2])
    forced.new_step()
    assert forced.tokens(()) == [] and state.forced_calls == 5


def test_a_state_without_forced_tokens_gives_no_source():
    class Plain:
        def mask(self, path):
            return bitmask_from_ids([0], 4)

        def advance(self, tokens):
            pass

        def is_stopped(self):
            return False

    assert ForcedTokens.of(Plain()) is None and ForcedTokens.of(None) is None
    assert ForcedTokens.of(PathConstraint(V, EOG).start()) is not None


def test_the_spelled_constraint_has_rejectable_candidates_and_certain_positions():
    """What the law tests below rest on: at the first position the target gives real mass
    to "a" (the tokenisation the forced candidate "ab" is not), one position in four allows
    a single token, and the law reaches it within 4 tokens."""
    target, _ = _pair()
    sp = TEMPERATURES["T1"]
    for prompt in (PROMPT, LOOKUP_PROMPT):
        law = constrained_law(target, prompt, sp, N_TOKENS, SPELLED)
        assert abs(sum(law.values()) - 1.0) < 1e-9
        first_a = sum(p for s, p in law.items() if s[0] == 0)
        assert 0.1 <= first_a <= 0.9, first_a
        certain = sum(p for s, p in law.items()
                      if any(len(SPELLED.allowed(s[:i])) == 1 for i in range(1, len(s))))
        assert certain >= 0.3, certain


# --------------------------------------------------------------------------- the law


def _case(method, lookup, costs="gpu"):
    """``(target, engine, prompt, draft params)``: auto in a cost regime, lookup alone (no
    draft model), or a fixed method's tree."""
    target, draft = _pair()
    prompt = LOOKUP_PROMPT if lookup or method == "auto" else PROMPT
    if method == "auto":
        curves = COST_REGIMES[costs]
        engine = Engine(target, None if curves[1] is None else draft, cost_curves=curves)
        return target, engine, prompt, DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4)
    if method == "lookup only":
        return target, Engine(target, None), prompt, DraftParams(method="chain", depth=3, budget=6, lookup=True)
    dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4, lookup=lookup)
    return target, Engine(target, draft), prompt, dp


CASES = ([(m, lookup, "gpu") for m in METHODS for lookup in (False, True)]
         + [("lookup only", True, "gpu")] + [("auto", True, c) for c in COST_REGIMES])


@pytest.mark.parametrize("method,lookup,costs", CASES)
def test_forced_candidates_keep_the_constrained_law(method, lookup, costs):
    target, engine, prompt, dp = _case(method, lookup, costs)
    sp = TEMPERATURES["T1"]
    counts = sample_constrained(engine, prompt, sp, dp, RUNS, SPELLED)
    check_law(counts, constrained_law(target, prompt, sp, N_TOKENS, SPELLED), f"forced/{method}/{lookup}/{costs}")


@pytest.mark.parametrize("method", ["resispec", "rrs", "auto"])
def test_forced_candidates_keep_the_law_under_filters(method):
    target, engine, prompt, dp = _case(method, True)
    sp = TEMPERATURES["T0.6-filters"]
    counts = sample_constrained(engine, prompt, sp, dp, RUNS, SPELLED)
    check_law(counts, constrained_law(target, prompt, sp, N_TOKENS, SPELLED), f"forced/{method}/filters")


def _crosses(seq) -> bool:
    at = LAZY_SPELLED.triggered_at(seq)
    return at is not None and at < len(seq)


@pytest.mark.parametrize("method,lookup", [(m, False) for m in METHODS] + [("resispec", True), ("auto", True)])
def test_forced_candidates_behind_a_lazy_trigger_keep_the_law(method, lookup):
    """The spelled grammar starts after the tokens 4, 3 (matched on committed + path): its
    forced candidates and certain positions appear only past the trigger, and the joint
    law of the tokens around it is plain lazy constrained sampling's."""
    target, engine, prompt, dp = _case(method, lookup)
    sp = TEMPERATURES["T1"]
    counts = sample_constrained(engine, prompt, sp, dp, RUNS, LAZY_SPELLED)
    assert sum(c for s, c in counts.items() if _crosses(s)) >= 0.15 * RUNS
    check_law(counts, constrained_law(target, prompt, sp, N_TOKENS, LAZY_SPELLED), f"lazy-forced/{method}/{lookup}")


@pytest.mark.parametrize("method", ("none",) + METHODS + ("auto",))
def test_forced_candidates_under_greedy_are_plain_constrained_greedy(method):
    sp = SamplingParams(temperature=0.0)
    n = 8
    for constraint in (SPELLED, LAZY_SPELLED):
        for lookup, prompt in ((False, PROMPT), (True, LOOKUP_PROMPT)):
            target, draft = _pair()
            law = constrained_law(target, prompt, sp, n, constraint)
            dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4,
                             lookup=lookup and method not in ("none", "auto"))
            engine = Engine(target, draft, cost_curves=COST_REGIMES["gpu"])
            res = engine.generate(prompt, sp.replace(max_tokens=n), dp, constraint=constraint)
            seq = tuple(res.tokens) + ((EOG,) if res.finish_reason == "eos" else ())
            assert [seq] == list(law), (method, seq, law)


class _Script:
    """A constraint that allows exactly one token at every position (a fixed script), and
    forces what follows: every position is certain."""

    def __init__(self, script):
        self.script = list(script)

    def start(self):
        script = self.script

        class State:
            committed: list[int] = []

            def mask(self, path):
                i = len(self.committed) + len(path)
                return bitmask_from_ids([script[i] if i < len(script) else EOG], V)

            def forced(self, path):
                return script[len(self.committed) + len(path):]

            def advance(self, tokens):
                self.committed = self.committed + list(tokens)

            def is_stopped(self):
                return len(self.committed) >= len(script)

        return State()


@pytest.mark.parametrize("method", ("none",) + METHODS + ("auto",))
def test_certain_positions_draw_no_uniform(method):
    """Where the mask allows one token, p is a point mass: the token is emitted without a
    draw or a uniform, so a fully scripted reply leaves the request's generator where its
    seed put it, whatever the method, and the reply is the script."""
    target, draft = _pair()
    engine = Engine(target, draft, cost_curves=COST_REGIMES["gpu"])
    dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4)
    script = [2, 4, 0, 1, 3, 3, 2]
    sp = SamplingParams(temperature=1.0, seed=3, max_tokens=20)
    gen = engine._generation(PROMPT, sp, dp, _Script(script), None, None, None)
    "".join(loop.run(gen, engine.target, engine.draft))
    assert gen.out == script and gen.finish_reason == "eos"
    assert gen.rng.bit_generator.state == np.random.default_rng(3).bit_generator.state


def test_a_certain_stretch_spends_no_uniform_of_the_reply_after_it():
    """Plain decoding after a scripted opening samples the free tokens with the uniforms an
    unconstrained reply from the prompt + the opening would use: the same tokens, seed for
    seed."""
    opening = [2, 4, 0]

    class Opening(_Script):
        def start(self):
            state = super().start()
            free = bitmask_from_ids(range(V), V)
            mask = state.mask

            def opened(path):
                return mask(path) if len(state.committed) + len(path) < len(opening) else free

            state.mask = opened
            state.is_stopped = lambda: False
            return state

    target, _ = _pair()
    engine = Engine(target, None)
    for seed in range(5):
        sp = SamplingParams(temperature=1.0, seed=seed, max_tokens=6)
        scripted = engine.generate(PROMPT, sp, DraftParams(method="none"), constraint=Opening(opening))
        free = engine.generate(PROMPT + opening, sp.replace(max_tokens=3), DraftParams(method="none"))
        assert scripted.tokens[:3] == opening
        assert scripted.tokens[3:] == free.tokens


# --------------------------------------------------------------------------- certain runs


@pytest.mark.parametrize("phase", [0, 1])
@pytest.mark.parametrize("method,costs", [(m, "gpu") for m in METHODS] + [("lookup only", "gpu")]
                         + [("auto", c) for c in COST_REGIMES])
def test_certain_runs_past_the_depth_keep_the_law(method, costs, phase):
    target, engine, prompt, dp = _case(method, method in ("auto", "lookup only"), costs)
    dp = dp.replace(depth=2) if method != "auto" else dp
    constraint = RunsConstraint(V, EOG, phase=phase)
    sp = TEMPERATURES["T1"]
    counts = sample_constrained(engine, prompt, sp, dp, RUNS, constraint)
    check_law(counts, constrained_law(target, prompt, sp, N_TOKENS, constraint), f"runs/{method}/{costs}/{phase}")


@pytest.mark.parametrize("phase", [0, 1])
@pytest.mark.parametrize("method", METHODS)
def test_a_certain_run_costs_no_draft_call_and_no_level(method, phase):
    """At depth 2 a step whose path meets a run verifies nodes below depth 2 (the run's
    nodes took no level), the draft evaluates the run's tokens only with the node after it,
    and the draft holds the reply (its pending tokens aside)."""
    target, draft = _pair()
    engine = Engine(target, draft)
    dp = DraftParams(method=method, draws=3, depth=2, budget=12, draft_support=4)
    constraint = RunsConstraint(V, EOG, phase=phase)
    calls = []
    decode = draft.decode

    def recorded(tokens, parents, want=None):
        calls.append((list(tokens), None if want is None else list(want)))
        return decode(tokens, parents, want)

    draft.decode = recorded
    deep = 0
    for seed in range(20):
        sp = SamplingParams(temperature=1.0, seed=seed, max_tokens=12)
        gen = engine._generation(PROMPT, sp, dp, constraint, None, None, None)
        "".join(loop.run(gen, engine.target, engine.draft))
        held = PROMPT + gen.out  # the last step's tokens past the reply's end may follow
        assert (draft.cached + gen.draft_pending)[:len(held)] == held
        deep += len(gen.stats.reached_by_depth) > 2
    assert deep >= 10
    # a call with rows for some nodes only: the run's tokens ride along, unasked
    assert any(want is not None and not all(want) and want[-1] for _, want in calls[1:])
    if phase == 1:  # the first call: the root (the prompt's last token), then the run's two
        # tokens, a row wanted only for the last (the first uncertain position's node)
        assert calls[0] == ([PROMPT[-1], 1, 2], [False, False, True])
