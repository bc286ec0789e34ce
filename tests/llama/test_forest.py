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
    assert f.seq == [1, 2, 3, 4] and f.parent == [-1, 0, 0, 1] and f.pos == [10, 11, 11, 12]
    assert f.tok == [50, 60, 70, 80]
    # a second call continues the indices and hangs off the first call's nodes
    assert f.add([90], [3], 10, **ROOM) == 14
    assert f.seq[-1] == 5 and f.pos[-1] == 13


def test_a_cell_carries_its_own_id_then_its_descendants_in_the_batch():
    f = _forest([50, 60, 70, 80], [-1, 0, 0, 1])
    ids, counts, anchors = f.cells(0)
    assert counts == [4, 2, 1, 1]
    assert ids.dtype == np.int32 and ids.shape == (4, 4)
    assert ids[0].tolist() == [1, 2, 3, 4]  # r: itself, a, b, c (a's child)
    assert ids[1].tolist() == [2, 4, 0, 0]  # a: itself and c
    assert ids[2].tolist() == [3, 0, 0, 0] and ids[3].tolist() == [4, 0, 0, 0]
    assert anchors == [0, 0, 0, 0]  # every node's nearest cached ancestor is the committed sequence


def test_a_later_batch_is_anchored_on_the_nodes_already_decoded():
    f = _forest([50, 60, 70], [-1, 0, 0])
    f.add([80, 90, 100], [1, 3, 2], 10, **ROOM)
    ids, counts, anchors = f.cells(3)
    assert counts == [2, 1, 1]
    assert ids.tolist() == [[4, 5], [5, 0], [6, 0]]
    assert anchors == [2, 2, 3]  # d under a (seq 2); e under d, so a too; f under b (seq 3)


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
    assert f.seq == [1]  # the nodes before it stay added (the backend forgets them on its next drop)
    with pytest.raises(ValueError, match="node 1 has parent -2"):
        Forest().add([1, 2], [-1, -2], 0, **ROOM)


def test_forget_drops_the_latest_nodes_and_names_their_sequences():
    f = _forest([50, 60, 70, 80], [-1, 0, 0, 1])
    assert f.forget(2) == [3, 4]
    assert f.seq == [1, 2] and f.parent == [-1, 0] and f.pos == [10, 11] and f.tok == [50, 60]
    assert f.forget(2) == []
    f.clear()
    assert len(f) == 0 and f.tok == []


def test_a_commit_path_must_be_a_chain_from_the_committed_sequence():
    f = _forest([50, 60, 70, 80], [-1, 0, 0, 1])
    assert f.chain(np.array([0, 1, 3])) == [0, 1, 3]
    assert f.chain([]) == []
    with pytest.raises(ValueError, match=r"commit path is not a chain from the committed sequence: \[0, 3\]"):
        f.chain([0, 3])
    with pytest.raises(ValueError, match="not a chain"):
        f.chain([1])
