"""``decoding.steps``: the messages a generation's ``plan`` and ``absorb`` exchange with the
loop (``Room``, ``DraftSync``, ``Decode``, ``Commit``), as the loop sees them."""

import dataclasses

import pytest

from fake_models import noisy_markov_pair
from resispec_gguf.config import MAX_TREE_NODES, DraftParams, SamplingParams
from resispec_gguf.decoding import batch, generation, loop, steps
from resispec_gguf.decoding.steps import Commit, Decode, DraftSync, Room


def test_a_room_without_a_draft_holds_none_and_the_whole_tree_budget():
    room = Room(target_ctx=64, target_past=10)
    assert (room.draft_ctx, room.draft_past, room.draft_nodes) == (0, 0, 0)
    assert room.tree_nodes == MAX_TREE_NODES


def test_the_messages_are_frozen_values():
    for msg in (Room(8, 1), Decode([1], [-1]), DraftSync([1, 2]), Commit([0])):
        field = dataclasses.fields(msg)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(msg, field, None)
    assert Decode([3], [-1]) == Decode([3], [-1]) and Decode([3], [-1]).want is None
    assert Commit([0, 2]) == Commit([0, 2], None) != Commit([0, 2], [0])


def test_the_generation_and_its_drivers_pass_these_very_classes():
    # ``from resispec_gguf.decoding.generation import Room, ...`` still gives them
    for name in ("Room", "Decode", "DraftSync", "Commit"):
        assert getattr(generation, name) is getattr(steps, name)
        assert name in generation.__all__
    assert loop.Decode is batch.Decode is Decode and loop.Room is batch.Room is Room


def test_a_draft_step_yields_draft_decodes_and_returns_the_target_decode_and_commit():
    target, draft = noisy_markov_pair(8, eog=7)
    gen = generation.Generation([1, 2, 3], SamplingParams(temperature=0.9, max_tokens=8, seed=2),
                                DraftParams(method="chain", depth=3, budget=6), vocab=target, has_draft=True, seed=2)
    target.sync_prefix(gen.prompt)
    draft.sync_prefix(gen.prompt)
    gen.started(0, 0.0)
    plan = gen.plan(Room(target.n_ctx, target.n_past, draft.n_ctx, draft.n_past, draft.n_seq_max - 1))
    calls = []
    try:
        call = next(plan)
        while True:
            assert type(call) is Decode  # an up-to-date draft needs no re-sync
            calls.append(call)
            call = plan.send(draft.decode(call.tokens, call.parents, call.want))
    except StopIteration as done:
        final = done.value
    assert calls and calls[0].tokens == [3] and calls[0].parents == [-1]  # the pending chain: the root
    assert type(final) is Decode and final.tokens[0] == 3 and final.parents[0] == -1
    assert len(final.tokens) == len(calls) + 1  # a chain: one node per draft level
    commit = gen.absorb(target.decode(final.tokens, final.parents))
    assert type(commit) is Commit and commit.target[0] == 0 and commit.draft[0] == 0
