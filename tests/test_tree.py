"""The draft tree's bookkeeping and best-first pruning (pure Python)."""

import numpy as np

from resispec_gguf.tree import DraftTree


def _tree():
    t = DraftTree.with_root(7)
    t.set_draws(0, np.array([1, 2, 1, 3]), None)
    a, b, c = t.add_children(0, {1: 0.6, 2: 0.3, 3: 0.1})
    t.set_draws(a, np.array([4, 5]), None)
    d, e = t.add_children(a, {4: 0.9, 5: 0.05})
    t.set_draws(d, np.array([6]), None)
    (f,) = t.add_children(d, {6: 0.5})
    return t


def test_children_are_distinct_draws_in_first_draw_order():
    t = _tree()
    assert t.tokens == [7, 1, 2, 3, 4, 5, 6]
    assert t.children[0] == {1: 1, 2: 2, 3: 3}
    assert t.depth == [0, 1, 1, 1, 2, 2, 3]
    assert np.allclose(t.score, [1, 0.6, 0.3, 0.1, 0.54, 0.03, 0.27])


def test_keep_best_keeps_a_subtree_of_the_best_nodes():
    t = _tree()
    kept, old_to_new = t.keep_best(3)
    # best three: 1 (0.6), 4 (0.54), 2 (0.3) — then 6 (0.27) is dropped
    assert kept.tokens == [7, 1, 2, 4]
    assert kept.parent == [-1, 0, 0, 1]
    assert kept.children[0] == {1: 1, 2: 2} and kept.children[1] == {4: 3}
    assert old_to_new == {0: 0, 1: 1, 2: 2, 4: 3}
    # expanded nodes keep their draws: a drawn candidate without a node can still be accepted
    assert list(kept.draws[0]) == [1, 2, 1, 3] and 3 not in kept.children[0]
    assert kept.draws[2] is None and list(kept.draws[3]) == [6]
