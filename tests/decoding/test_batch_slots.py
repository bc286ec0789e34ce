"""``decoding.batch``'s mechanics, on Markov fakes with slots (continued from test_batch.py):
admission and slot reuse, chunked prefill, cancellation and one request's failure mid-step,
and the RAM prompt cache behind the slots.
"""

from __future__ import annotations

import numpy as np
import pytest

from law_harness import EOG, LOOKUP_PROMPT, PROMPT, slotted_pair
from resispec_gguf.engine import Engine
from resispec_gguf.errors import ConstraintError
from batch_cases import CONSTRAINT, FILTERS, MIXES, T1, _dp, _engine, _run


# --------------------------------------------------------------------------- mechanics


def test_admission_fills_free_slots_then_refuses():
    engine, _ = _engine("gpu", n_slots=2)
    batch = engine.batch()
    a = batch.admit(engine.generation(PROMPT, T1.replace(seed=1, max_tokens=4), _dp("chain")))
    b = batch.admit(engine.generation(PROMPT, T1.replace(seed=2, max_tokens=4), _dp("chain")))
    assert {a.slot, b.slot} == {0, 1} and batch.busy == 2
    assert batch.free_slot(PROMPT) is None
    with pytest.raises(RuntimeError, match="no free slot"):
        batch.admit(engine.generation(PROMPT, T1.replace(seed=3), _dp("chain")))
    _run(batch)
    assert a.done and b.done and batch.busy == 0


def test_a_new_request_goes_to_the_free_slot_sharing_its_longest_prefix():
    engine, target = _engine("gpu", n_slots=3)
    batch = engine.batch()
    first = [1, 2, 3, 1, 2, 0, 4]
    second = [4, 4, 3, 2, 1, 0, 1]
    r1 = batch.admit(engine.generation(first, T1.replace(seed=1, max_tokens=5), _dp("resispec")), slot=0)
    r2 = batch.admit(engine.generation(second, T1.replace(seed=2, max_tokens=5), _dp("resispec")), slot=2)
    _run(batch)
    again = second + r2.gen.out + [3]  # an editor resending the same text, a little longer
    held = target.slot_tokens(2)
    assert batch.free_slot(again) == 2 and batch.free_slot(first + r1.gen.out) == 0
    r3 = batch.admit(engine.generation(again, T1.replace(seed=3, max_tokens=5), _dp("resispec")))
    assert r3.slot == 2
    _run(batch)
    assert r3.gen.stats.prompt_reused == len(held) >= len(second) + len(r2.gen.out) - 1


def test_a_long_prompt_is_prefilled_a_chunk_per_step_beside_the_running_requests():
    """Each chunk rides in the running request's target decode (one decode a step), and the
    prompt's first step is the one after its last chunk."""
    engine, target = _engine("gpu", n_slots=2)
    alone = Engine(*slotted_pair(1))
    seed = next(s for s in range(200)  # a reply that runs past the prefill below
                if len(alone.generate(PROMPT, T1.replace(seed=s, max_tokens=40), _dp("none")).tokens) >= 10)
    batch = engine.batch(chunk=4)
    short = batch.admit(engine.generation(PROMPT, T1.replace(seed=seed, max_tokens=40), _dp("none")))
    batch.step()  # prefilled (3 tokens) by a decode of its own, then its first step in the same call
    assert short.gen.stats.steps == 1 and target.merged == 0
    long_prompt = [int(x) for x in np.random.default_rng(0).integers(0, EOG, 21)]
    late = batch.admit(engine.generation(long_prompt, T1.replace(seed=2, max_tokens=4), _dp("resispec")))
    filled, calls = [], []
    for i in range(5):  # 20 tokens before the root, 4 a step
        before = target.calls
        batch.step()
        calls.append(target.calls - before)
        filled.append(target.slot_past(late.slot))
        assert short.gen.stats.steps == i + 2  # the running request moved every step
    assert filled == [4, 8, 12, 16, 20] and calls == [1] * 5 and target.merged == 5
    assert late.started and late.gen.stats.steps == 0
    batch.step()
    assert late.gen.stats.steps == 1 and late.gen.stats.prompt_tokens == 21


def test_prompts_arriving_together_share_the_chunk_of_one_decode():
    """Three prompts admitted at once, with nothing running: one decode per model holds the
    first chunk, taken in admission order (the first prompt whole, then as much of the next
    as fits), and every prompt it completes starts in that step."""
    engine, target = _engine("gpu", n_slots=3)
    batch = engine.batch(chunk=16)
    rng = np.random.default_rng(5)
    prompts = [[int(x) for x in rng.integers(0, EOG, n)] for n in (6, 9, 12)]  # 5, 8, 11 before their roots
    reqs = [batch.admit(engine.generation(p, T1.replace(seed=k, max_tokens=30), _dp("resispec")))
            for k, p in enumerate(prompts)]
    t0 = target.calls
    batch.step()
    assert [r.filled for r in reqs] == [5, 8, 3] and [r.d_filled for r in reqs] == [5, 8, 3]
    assert [r.started for r in reqs] == [True, True, False]
    assert reqs[0].gen.stats.steps == reqs[1].gen.stats.steps == 1
    t1 = target.calls
    assert t1 - t0 == 2  # the prefill, then the two started requests' step
    batch.step()  # the rest of the third rides in their second step
    assert target.calls - t1 == 1 and reqs[2].filled == 11 and reqs[2].started
    _run(batch)
    assert all(r.done for r in reqs)


def test_a_prompts_time_counts_the_steps_that_fed_it_not_those_it_waited_through(monkeypatch):
    """Four prompts of 8 tokens before their roots, chunks of 4: the last waits through six
    steps that feed the others, then two feed it; its prompt time is those two steps."""
    from resispec_gguf.decoding import batch as batch_module

    engine, target = _engine("gpu")
    clock = [0.0]
    monkeypatch.setattr(batch_module.time, "perf_counter", lambda: clock[0])
    decode = target.decode_slots

    def ticking(*args, **kwargs):  # every target decode takes one second
        clock[0] += 1.0
        return decode(*args, **kwargs)

    monkeypatch.setattr(target, "decode_slots", ticking)
    batch = engine.batch(chunk=4)
    rng = np.random.default_rng(6)
    reqs = [batch.admit(engine.generation([int(x) for x in rng.integers(0, EOG, 9)],
                                          T1.replace(seed=k, max_tokens=40), _dp("none")))
            for k in range(4)]
    _run(batch)
    assert [r.gen.stats.prompt_time for r in reqs] == [2.0, 2.0, 2.0, 2.0]


def test_a_draft_slot_holding_less_of_the_prompt_is_prefilled_a_chunk_per_step_too():
    """A plain request leaves the draft's slot empty: the next request in that slot finds
    its prompt in the target's cache but not in the draft's, and the draft gets it a chunk
    per step, as the target would."""
    engine, target = _engine("gpu", n_slots=1)
    draft = engine.draft
    long_prompt = [int(x) for x in np.random.default_rng(1).integers(0, EOG, 21)]
    batch = engine.batch(chunk=4)
    plain = batch.admit(engine.generation(long_prompt, T1.replace(seed=3, max_tokens=3), _dp("none")))
    _run(batch)
    assert draft.slot_past(0) == 0 and target.slot_past(0) >= 20
    again = long_prompt + plain.gen.out
    fed = []  # tokens the draft's slot gains per sync
    sync = draft.sync_slot

    def counting(slot, tokens):
        before = draft.slot_past(slot)
        common = sync(slot, tokens)
        fed.append(len(tokens) - 1 - min(common, before))
        return common

    draft.sync_slot = counting
    try:
        req = batch.admit(engine.generation(again, T1.replace(seed=4, max_tokens=4), _dp("resispec")))
        assert req.filled == len(again) - 1 and req.d_filled == 0
        steps = 0
        while not req.started:
            before = draft.prefilled
            batch.step()
            fed.append(draft.prefilled - before)
            steps += 1
    finally:
        del draft.sync_slot
    assert max(fed) <= 4 and sum(fed) >= len(again) - 1
    assert steps == -(-(len(again) - 1) // 4)
    _run(batch)
    assert req.gen.finish_reason is not None


def _outputs(engine, requests, cancel_at=None, seed=0):
    batch = engine.batch()
    reqs = [batch.admit(engine.generation(p, sp.replace(seed=seed + i, max_tokens=10), dp, constraint=c))
            for i, (p, sp, dp, c) in enumerate(requests)]
    steps = 0
    while batch.busy:
        batch.step()
        steps += 1
        if steps == cancel_at:
            batch.cancel(reqs[0])
    return reqs


FIXED = [
    (PROMPT, T1, _dp("resispec"), None),
    (LOOKUP_PROMPT, FILTERS, _dp("chain", lookup=True), CONSTRAINT),
    (PROMPT, T1, _dp("specinfer"), None),
]


def test_a_cancelled_request_frees_its_slot_and_the_others_go_on_unchanged():
    """Fixed-shape requests do not depend on their neighbours' trees: with one cancelled
    after its second step, the others' outputs are those of a batch where it ran on."""
    for seed in range(4):
        # each run on a fresh engine: a seed repeated on one draws anew (``seeding``)
        full = _outputs(_engine("gpu", n_slots=3)[0], FIXED, seed=seed)
        engine, target = _engine("gpu", n_slots=3)
        draft = engine.draft
        cut = _outputs(engine, FIXED, cancel_at=2, seed=seed)
        assert cut[0].done and cut[0].gen.result().finish_reason == "interrupted"
        assert len(cut[0].gen.out) <= len(full[0].gen.out)
        for a, b in zip(full[1:], cut[1:]):
            assert a.gen.out == b.gen.out and a.gen.finish_reason == b.gen.finish_reason
        assert not target._nodes and not draft._nodes  # nothing left uncommitted


class _Failing:
    """A constraint whose third mask fails, as a grammar past its limits does."""

    def start(self):
        return _FailingState()


class _FailingState:
    def __init__(self):
        self.inner = CONSTRAINT.start()
        self.calls = 0

    def mask(self, path):
        self.calls += 1
        if self.calls == 3:
            raise ConstraintError("the grammar gave up")
        return self.inner.mask(path)

    def advance(self, tokens):
        self.inner.advance(tokens)

    def is_stopped(self):
        return self.inner.is_stopped()


def test_one_requests_failing_constraint_mid_step_leaves_the_others_alone():
    for seed in range(4):  # each run on a fresh engine: a seed repeated on one draws anew
        calm = _outputs(_engine("gpu", n_slots=3)[0], FIXED, seed=seed)
        bad = [(PROMPT, T1, _dp("resispec"), _Failing())] + FIXED[1:]
        hit = _outputs(_engine("gpu", n_slots=3)[0], bad, seed=seed)
        res = hit[0].gen.result()
        assert res.finish_reason == "error" and "gave up" in res.error
        for a, b in zip(calm[1:], hit[1:]):
            assert a.gen.out == b.gen.out and a.gen.finish_reason == b.gen.finish_reason


class _FailingAdvance:
    """A constraint that fails when its first step's tokens are committed, as a grammar
    does when it cannot consume a generated token (``GrammarState.advance``)."""

    def __init__(self):
        self.states = []

    def start(self):
        state = CONSTRAINT.start()
        advance, state.steps = state.advance, 0
        self.states.append(state)

        def failing(tokens):
            state.steps += 1
            if state.steps == 1:
                raise ConstraintError("the grammar gave up at a generated token")
            advance(tokens)

        state.advance = failing
        return state


def test_a_constraint_failing_as_it_commits_ends_its_own_request_only():
    """``emit`` commits a step's tokens to the constraint; a failure there is the request's
    own, as in ``loop.run``: it ends with "error" and the others go on unchanged."""
    failed = 0
    for seed in range(6):  # each run on a fresh engine: a seed repeated on one draws anew
        calm = _outputs(_engine("gpu", n_slots=3)[0], FIXED, seed=seed)
        failing = _FailingAdvance()
        hit = _outputs(_engine("gpu", n_slots=3)[0], [(PROMPT, T1, _dp("resispec"), failing)] + FIXED[1:], seed=seed)
        res = hit[0].gen.result()
        if failing.states[0].steps:  # (a reply may end at its first token)
            failed += 1
            assert res.finish_reason == "error" and "gave up" in res.error and hit[0].done
        for a, b in zip(calm[1:], hit[1:]):
            assert a.gen.out == b.gen.out and a.gen.finish_reason == b.gen.finish_reason
    assert failed >= 3


def test_a_prompt_that_cannot_fit_a_slot_is_refused_at_admission():
    from resispec_gguf.errors import ContextFullError

    engine, _ = _engine("gpu", n_slots=2, target_ctx=8)
    batch = engine.batch()
    with pytest.raises(ContextFullError):
        batch.admit(engine.generation(list(range(5)) * 2, T1, _dp("chain")))
    assert batch.busy == 0


# --------------------------------------------------------------------------- RAM prompt cache


def _rotate(cache_ram_mib, fail_loads=False):
    """Three 40-token prompts through two slots, then the first again with its reply and one
    more token: it lands in a slot that held another prompt.  Returns the last request and
    the models."""
    curves, _ = MIXES["gpu"]
    target, draft = slotted_pair(2)
    engine = Engine(target, draft, cost_curves=curves, cache_ram_mib=cache_ram_mib)
    target.fail_loads = draft.fail_loads = fail_loads
    batch = engine.batch(chunk=16)
    rng = np.random.default_rng(5)
    prompts = [[int(x) for x in rng.integers(0, EOG, 40)] for _ in range(3)]
    first = [batch.admit(engine.generation(p, T1.replace(seed=k, max_tokens=6), _dp("resispec")))
             for k, p in enumerate(prompts[:2])]
    _run(batch)
    assert [r.slot for r in first] == [0, 1]
    saved = target.slot_tokens(0)
    batch.admit(engine.generation(prompts[2], T1.replace(seed=2, max_tokens=6), _dp("resispec")))
    _run(batch)  # it evicted the first prompt from slot 0
    again = prompts[0] + first[0].gen.out + [3]
    before = target.prefilled
    last = batch.admit(engine.generation(again, T1.replace(seed=9, max_tokens=8), _dp("resispec")))
    _run(batch)
    assert saved == again[:len(saved)] and len(saved) > 40
    return last, target, draft, target.prefilled - before, len(saved)


def test_a_prompt_evicted_from_its_slot_is_restored_from_ram_into_another():
    last, target, draft, prefilled, saved = _rotate(1)
    off, t_off, _, prefilled_off, _ = _rotate(0)
    assert t_off.saves == t_off.loads == 0 and off.reused == 0  # no cache: as before
    assert prefilled_off == len(off.gen.prompt) - 1
    # slot 0 held the third prompt; the first came back from RAM, into both models
    assert target.loads == 1 and draft.loads == 1
    assert last.reused == last.gen.stats.prompt_reused == saved  # reported as reused
    assert prefilled == len(last.gen.prompt) - 1 - saved
    assert last.gen.out == off.gen.out  # the same reply, token for token


def test_a_restore_that_fails_prefills_the_whole_prompt():
    last, target, _, prefilled, _ = _rotate(1, fail_loads=True)
    off, _, _, _, _ = _rotate(0)
    assert target.loads == 1 and last.reused == 0 and prefilled == len(last.gen.prompt) - 1
    assert last.gen.out == off.gen.out


@pytest.mark.parametrize("cache_ram_mib", [0, 1])
def test_prompts_their_slots_already_hold_start_in_the_same_step(cache_ram_mib):
    """Two prompts admitted at once, each held whole (by its slot's own prefix, or restored
    from RAM after another prompt evicted it): both start in the first step; a third that
    needs a prefill gets its chunk in that step too, and starts once prefilled."""
    curves, _ = MIXES["gpu"]
    target, draft = slotted_pair(3)
    engine = Engine(target, draft, cost_curves=curves, cache_ram_mib=cache_ram_mib)
    batch = engine.batch(chunk=8)
    rng = np.random.default_rng(7)
    prompts = [[int(x) for x in rng.integers(0, EOG, 40)] for _ in range(3)]
    first = [batch.admit(engine.generation(p, T1.replace(seed=k, max_tokens=4), _dp("resispec")))
             for k, p in enumerate(prompts)]
    _run(batch)
    if cache_ram_mib:  # slot 0 moves on to another prompt: the first goes to RAM
        batch.admit(engine.generation([1] * 40, T1.replace(seed=5, max_tokens=2), _dp("resispec")), slot=0)
        _run(batch)
    again = [p + r.gen.out for p, r in zip(prompts[:2], first)]
    held = [batch.admit(engine.generation(a, T1.replace(seed=7, max_tokens=4), _dp("resispec"))) for a in again]
    new = batch.admit(engine.generation([2] * 30, T1.replace(seed=8, max_tokens=4), _dp("resispec")))
    assert sorted(r.slot for r in held + [new]) == [0, 1, 2]
    assert all(r.filled == len(r.gen.prompt) - 1 for r in held)
    batch.step()
    assert all(r.started and r.gen.stats.steps == 1 for r in held)
    assert not new.started and new.filled == new.reused + 8
    _run(batch)
    assert new.started and all(r.done for r in held + [new])


def test_free_slots_sharing_nothing_with_a_prompt_take_turns():
    """Unrelated prompts go to the slot given a request least recently, so the slot used
    last keeps its prompt for a client that resends it."""
    engine, _ = _engine("gpu", n_slots=3)
    batch = engine.batch()
    rng = np.random.default_rng(11)
    slots = []
    for k in range(5):
        prompt = [k] + [int(x) for x in rng.integers(0, EOG, 11)]  # no two share a first token
        slots.append(batch.admit(engine.generation(prompt, T1.replace(seed=k, max_tokens=2), _dp("chain"))).slot)
        _run(batch)
    assert slots == [0, 1, 2, 0, 1]


def _two_slots_with_ram(seed):
    """A fake pair with two slots, a 1 MiB RAM prompt cache, a batch and a seeded rng."""
    curves, _ = MIXES["gpu"]
    target, draft = slotted_pair(2)
    engine = Engine(target, draft, cost_curves=curves, cache_ram_mib=1)
    return target, draft, engine, engine.batch(chunk=64), np.random.default_rng(seed)


@pytest.mark.parametrize("dropped, saves", [(2, 0), (7, 0), (8, 1), (40, 1)])
def test_a_slot_is_saved_to_ram_only_when_a_prompt_drops_enough_of_it(dropped, saves):
    """A chat's next turn drops only the few tokens after its last reply: copying the whole
    history to RAM would cost more than their prefill.  A prompt that drops at least the
    cache's minimum saves what the slot held."""
    target, draft, engine, batch, rng = _two_slots_with_ram(13)
    prompt = [int(x) for x in rng.integers(0, EOG, 80)]
    batch.admit(engine.generation(prompt, T1.replace(seed=1, max_tokens=4), _dp("resispec")), slot=0)
    _run(batch)
    held = target.slot_tokens(0)
    following = held[: len(held) - dropped] + [int(x) for x in rng.integers(0, EOG, 10)]
    batch.admit(engine.generation(following, T1.replace(seed=2, max_tokens=2), _dp("resispec")), slot=0)
    _run(batch)
    assert target.saves == draft.saves == saves


def test_a_short_chat_prompt_comes_back_from_ram_when_it_spares_a_few_tokens():
    """Chat prompts share the template's system part and differ in a short question: a saved
    state that spares 11 tokens of prefill is restored (a restore costs far less than that)."""
    target, draft, engine, batch, rng = _two_slots_with_ram(17)
    system = [int(x) for x in rng.integers(0, EOG, 28)]
    first, second = (system + [int(x) for x in rng.integers(0, EOG, 12)] for _ in range(2))
    for prompt in (first, second):
        batch.admit(engine.generation(prompt, T1.replace(seed=1, max_tokens=3), _dp("resispec")), slot=0)
        _run(batch)
    again = batch.admit(engine.generation(first, T1.replace(seed=2, max_tokens=3), _dp("resispec")), slot=0)
    _run(batch)
    assert target.loads == draft.loads == 1 and again.reused == len(first) - 1
