"""``decoding.generation.Generation`` and ``decoding.loop.run``: a generation plans the rows it wants
and absorbs the rows it gets; the loop owns every model call.  Driven here by hand, step by
step, against Markov fakes."""

import pytest

from fake_models import noisy_markov_pair
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.decoding.generation import Commit, Decode, DraftSync, Generation, Room

V = 8


def _generation(target, dp, seed=5, max_tokens=12, has_draft=True):
    return Generation([1, 2, 3], SamplingParams(temperature=0.9, max_tokens=max_tokens, seed=seed), dp,
                      vocab=target, has_draft=has_draft, seed=seed)


def _drive_by_hand(gen, target, draft):
    """The loop's contract written out: every draft call the plan yields, then the target
    decode it returns, then the commits ``absorb`` asks for."""
    target.sync_prefix(gen.prompt)
    if gen.uses_draft:
        draft.sync_prefix(gen.prompt)
    gen.started(0, 0.0)
    text = []
    kinds = []
    while gen.finish_reason is None:
        plan = gen.plan(Room(target.n_ctx, target.n_past, draft.n_ctx, draft.n_past, draft.n_seq_max - 1))
        try:
            call = next(plan)
            while True:
                kinds.append(type(call).__name__)
                if isinstance(call, DraftSync):
                    draft.sync_prefix(call.tokens)
                    call = plan.send(None)
                else:
                    call = plan.send(draft.decode(call.tokens, call.parents, call.want))
        except StopIteration as done:
            final = done.value
        if final is None:
            break
        assert isinstance(final, Decode)
        commit = gen.absorb(target.decode(final.tokens, final.parents))
        assert isinstance(commit, Commit) and commit.target[0] == 0
        target.commit(commit.target)
        if commit.draft is not None:
            draft.commit(commit.draft)
        gen.step_done(0.0)
        text += list(gen.emit())
    return gen.out, kinds


@pytest.mark.parametrize("method", ["none", "chain", "resispec", "rrs"])
def test_driving_plan_and_absorb_by_hand_is_the_engine(method):
    dp = DraftParams(method=method, draws=2, depth=3, budget=6)
    target, draft = noisy_markov_pair(8, eog=7)
    by_hand, kinds = _drive_by_hand(_generation(target, dp), target, draft)
    t2, d2 = noisy_markov_pair(8, eog=7)
    engine = Engine(t2, d2, cost_curves=(None, None))
    res = engine.generate([1, 2, 3], SamplingParams(temperature=0.9, max_tokens=12, seed=5), dp)
    assert by_hand == res.tokens
    if method == "none":
        assert kinds == []  # a plain step asks the draft for nothing
    else:
        assert kinds and set(kinds) <= {"Decode", "DraftSync"}


def test_plan_ends_the_reply_when_the_context_is_full():
    target, draft = noisy_markov_pair(8, eog=7)
    gen = _generation(target, DraftParams(method="chain"))
    gen.started(0, 0.0)
    plan = gen.plan(Room(target_ctx=10, target_past=9))
    with pytest.raises(StopIteration) as done:
        next(plan)
    assert done.value.value is None and gen.finish_reason == "length"


def test_a_plain_step_wants_one_target_row_and_keeps_it():
    target, draft = noisy_markov_pair(8, eog=7)
    gen = _generation(target, DraftParams(method="none"), has_draft=False)
    target.sync_prefix(gen.prompt)
    gen.started(0, 0.0)
    with pytest.raises(StopIteration) as done:
        next(gen.plan(Room(target.n_ctx, target.n_past)))
    assert done.value.value == Decode([3], [-1])
    commit = gen.absorb(target.decode([3], [-1]))
    assert commit == Commit([0])
