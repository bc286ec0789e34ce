"""Tests for resispec_gguf.llama.forest: a step's uncommitted nodes, their positions and the KV
sequences each one's cell joins (pure Python; the backend's tree decodes exercise it on a model)."""

from __future__ import annotations

import numpy as np
import pytest

from resispec_gguf.llama.forest import Forest

ROOM = dict(n_batch=16, n_seq_max=16)


def _forest(tokens, parents, n_past=10):
    f = Forest()
    f.add(tokens, parents, n_past, **ROOM)
    return f


def test_nodes_get_sequence_ids_and_positions_below_their_parents():
    f = Forest()
    # r -> a -> c, r -> b, after 10 committed tokens
    assert f.add([50, 60, 70, 80], [-1, 0, 0, 1], 10, **ROOM) == 13  # c sits at position 12
    assert len(f) == 4
    # r takes the slot's id and a first child takes over its parent's (r, a, c are the root
    # chain, sequence 0); b opens its own
    assert f.seq == [0, 0, 1, 0] and f.parent == [-1, 0, 0, 1] and f.pos == [10, 11, 11, 12]
    assert f.tok == [50, 60, 70, 80]
    # a second call continues the indices and hangs off the first call's nodes
    assert f.add([90, 95], [3, 3], 10, **ROOM) == 14
    assert f.seq[-2:] == [0, 2] and f.pos[-2:] == [13, 13]


def test_a_cell_carries_its_own_id_then_the_ids_its_descendants_in_the_batch_open():
    # r -> a -> c, r -> b -> d, b -> e
    f = _forest([50, 60, 70, 80, 90, 100], [-1, 0, 0, 1, 2, 2])
    assert f.seq == [0, 0, 1, 0, 1, 2]
    ids, counts, copies = f.cells(0)
    assert counts == [3, 1, 2, 1, 1, 1]
    assert ids.dtype == np.int32 and ids.shape == (6, 3)
    assert ids[0].tolist() == [0, 1, 2]  # r: the slot's id (a and c share it), b's and e's
    assert ids[2].tolist() == [1, 2, 0]  # b: itself (d shares it) and e's
    assert [ids[j, 0] for j in (1, 3, 4, 5)] == [0, 0, 1, 2]
    # one copy of the committed sequence (its 10 committed positions) per opened id, not one
    # per node, and none for the root chain
    assert copies == [(0, 1, 10), (0, 2, 10)]


def test_a_chain_off_the_committed_sequence_is_the_root_chain_and_needs_no_copy():
    f = _forest([5, 6, 7, 8], [-1, 0, 1, 2])
    ids, counts, copies = f.cells(0)
    assert f.seq == [0, 0, 0, 0] and counts == [1, 1, 1, 1] and copies == []
    # a second node off the committed sequence opens an id: a copy of the committed positions
    f.add([9], [-1], 10, **ROOM)
    assert f.seq[-1] == 1 and f.cells(4)[2] == [(0, 1, 10)]


def test_a_later_batch_is_anchored_on_the_nodes_already_decoded():
    f = _forest([50, 60, 70], [-1, 0, 0])  # r, a (the slot's id 0), b (id 1)
    f.add([80, 85, 90, 100], [1, 1, 4, 2], 10, **ROOM)  # d, e under a; g under e; h under b
    ids, counts, copies = f.cells(3)
    assert f.seq[3:] == [0, 2, 2, 1]  # d takes over a's id, e opens 2 (g takes it over), h takes b's
    assert counts == [1, 1, 1, 1] and ids[:, 0].tolist() == [0, 2, 2, 1]
    # e's new id copies a's sequence up to a's position (11): the committed prefix, r and a,
    # not d, which shares a's id
    assert copies == [(0, 2, 12)]


@pytest.mark.parametrize("tokens, parents, room, message", [
    ([], [], ROOM, "nothing to decode"),
    ([1, 2, 3], [-1, 0, 1], dict(n_batch=2, n_seq_max=16), "3 nodes exceed the batch size 2"),
    ([1, 2, 3], [-1, 0, 1], dict(n_batch=16, n_seq_max=3), r"3 uncommitted nodes exceed n_seq_max - 1 = 2"),
])
def test_too_few_or_too_many_nodes_are_refused_before_any_is_added(tokens, parents, room, message):
    f = Forest()
    with pytest.raises(ValueError, match=message):
        f.add(tokens, parents, 0, **room)
    assert len(f) == 0


def test_a_parent_that_is_not_an_earlier_node_is_refused():
    f = Forest()
    with pytest.raises(ValueError, match="node 1 has parent 1, which is not an earlier node"):
        f.add([1, 2], [-1, 1], 0, **ROOM)
    assert f.seq == [0]  # the nodes before it stay added (the backend forgets them on its next drop)
    with pytest.raises(ValueError, match="node 1 has parent -2"):
        Forest().add([1, 2], [-1, -2], 0, **ROOM)


def test_forget_drops_the_latest_nodes_and_names_their_sequences():
    f = _forest([50, 60, 70, 80], [-1, 0, 0, 1])  # ids 0, 0, 1, 0
    # b's id goes whole; c's (the root chain's, a kept) from c's position on
    assert f.forget(2) == [(1, -1), (0, 12)]
    assert f.seq == [0, 0] and f.parent == [-1, 0] and f.pos == [10, 11] and f.tok == [50, 60]
    assert f.forget(2) == []
    f.add([90, 95], [1, 0], 10, **ROOM)  # a's id is free for a child again; ids count on from 1
    assert f.seq == [0, 0, 0, 1]
    assert f.forget(0) == [(0, 10), (1, -1)]  # the root chain from the root's position on
    f.add([5], [-1], 10, **ROOM)  # the slot's id is free for a root again
    assert f.seq == [0]
    f.add([6], [-1], 10, **ROOM)
    f.clear()
    assert len(f) == 0 and f.tok == []
    f.add([5], [-1], 10, **ROOM)
    assert f.seq == [0]


def test_a_commit_path_must_be_a_chain_from_the_committed_sequence():
    f = _forest([50, 60, 70, 80], [-1, 0, 0, 1])
    assert f.chain(np.array([0, 1, 3])) == [0, 1, 3]
    assert f.chain([]) == []
    with pytest.raises(ValueError, match=r"commit path is not a chain from the committed sequence: \[0, 3\]"):
        f.chain([0, 3])
    with pytest.raises(ValueError, match="not a chain"):
        f.chain([1])


def test_ids_start_above_the_slots_and_a_slots_first_node_takes_the_slots_id():
    f = Forest(n_slots=2)
    f.add([5, 6, 7, 8, 9], [-1, 0, -1, 2, 2], [10, 20], n_batch=16, n_seq_max=16, slots=[0, 0, 1, 1, 1])
    assert f.seq == [0, 0, 1, 1, 2] and f.pos == [10, 11, 20, 21, 21]
    ids, counts, copies = f.cells(0)
    assert copies == [(1, 2, 20)]  # slot 1's committed 20 positions, not its root chain
    assert f.forget(2) == [(1, 20), (2, -1)]
    f.clear()
    f.add([9, 10], [-1, -1], [10, 20], n_batch=16, n_seq_max=16, slots=[1, 1])
    assert f.seq == [1, 2]
