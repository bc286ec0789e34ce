"""The draft tree's bookkeeping and best-first pruning (pure Python)."""

import numpy as np
import pytest

from resispec_gguf.decoding.tree import DraftTree, Draw, GrowthLimits, grow, grow_free


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


def test_prune_leaves_keeps_every_expanded_node_and_the_best_leaves():
    t = _tree()  # expanded: 0, 1 (a), 4 (d); leaves: 2 (0.3), 3 (0.1), 5 (0.03), 6 (0.27)
    kept, old_to_new = t.prune_leaves(3)
    # expanded 1 and 4 stay whatever their scores; one slot left: the best leaf, 2 (0.3)
    assert kept.tokens == [7, 1, 2, 4]
    assert kept.parent == [-1, 0, 0, 1]
    assert old_to_new == {0: 0, 1: 1, 2: 2, 4: 3}
    # expanded nodes keep their draws: a drawn candidate without a node can still be accepted
    assert list(kept.draws[0]) == [1, 2, 1, 3] and 3 not in kept.children[0]
    assert list(kept.draws[3]) == [6] and kept.children[3] == {}
    with pytest.raises(ValueError, match="expanded nodes do not fit"):
        t.prune_leaves(1)


class _Scripted:
    """Callbacks for ``grow`` that draw from a seeded generator and record every call."""

    def __init__(self, seed, k, vocab=5):
        self.rng = np.random.default_rng(seed)
        self.k, self.vocab = k, vocab
        self.drafted: list[list[int]] = []
        self.drawn: list[int] = []

    def draft(self, frontier):
        self.drafted.append(list(frontier))
        return [None] * len(frontier)

    def draw(self, node, row):
        self.drawn.append(node)
        q = self.rng.dirichlet(np.ones(self.vocab))
        draws = self.rng.choice(self.vocab, size=self.k, p=q)
        return Draw(draws, None, {t: float(q[t]) for t in range(self.vocab)})


@pytest.mark.parametrize("seed", range(40))
def test_grow_never_drops_an_expanded_node_and_respects_every_limit(seed):
    rng = np.random.default_rng(1000 + seed)
    limits = GrowthLimits(
        depth=int(rng.integers(1, 6)),
        max_expanded=int(rng.integers(0, 12)),
        max_nodes=int(rng.integers(0, 14)),
        beam=None if rng.random() < 0.3 else int(rng.integers(1, 4)),
    )
    cb = _Scripted(seed, k=int(rng.integers(1, 5)))
    tree, old_to_new = grow(DraftTree.with_root(0), limits, cb.draft, cb.draw)
    # every node that drew is in the final tree, with its draws; nothing else is expanded
    assert sorted(old_to_new[n] for n in cb.drawn) == [i for i in range(len(tree)) if tree.expanded(i)]
    assert len(tree) - 1 <= limits.max_nodes
    assert len(cb.drawn) - 1 <= min(limits.max_expanded, limits.max_nodes) or len(cb.drawn) == 1
    assert max(tree.depth) <= limits.depth
    for level in cb.drafted[1:]:
        assert limits.beam is None or len(level) <= limits.beam
    for i in range(1, len(tree)):  # a tree: each node's parent is kept and expanded
        assert tree.expanded(tree.parent[i]) and tree.children[tree.parent[i]][tree.tokens[i]] == i


def test_grow_decides_each_level_before_it_draws():
    """Which nodes a level expands depends only on what was drawn above it: replaying the
    same draws up to level L gives the same frontier at L+1, whatever is drawn later."""
    limits = GrowthLimits(depth=4, max_expanded=6, max_nodes=8, beam=2)
    a = _Scripted(5, k=3)
    grow(DraftTree.with_root(0), limits, a.draft, a.draw)
    for cut in range(1, len(a.drafted)):
        n_draws = sum(len(f) for f in a.drafted[:cut])
        b = _Scripted(5, k=3)
        real_draw = b.draw

        def draw(node, row, _n=[0]):
            _n[0] += 1
            if _n[0] > n_draws:  # change everything drawn from level `cut` on
                b.rng = np.random.default_rng(999 + _n[0])
            return real_draw(node, row)

        grow(DraftTree.with_root(0), limits, b.draft, draw)
        assert b.drafted[: cut + 1] == a.drafted[: cut + 1]


def _certain_01(tree):
    """``grow``'s ``certain``: a node whose token is 0 or 1 is certain, its one candidate
    the next token."""
    def certain(node):
        tok = tree.tokens[node]
        return Draw(np.empty(0, np.int64), None, {tok + 1: 1.0}, (tok + 1,)) if tok in (0, 1) else None
    return certain


@pytest.mark.parametrize("seed", range(30))
def test_certain_nodes_take_no_draft_row_and_no_level(seed):
    """With ``certain``, a certain node has one child and no draws, the tree may grow past
    ``depth`` by the certain nodes on a path (never more), the node limits hold with them
    counted, and with room to spare no node the draft evaluates is certain."""
    rng = np.random.default_rng(2000 + seed)
    ample = rng.random() < 0.5
    limits = GrowthLimits(depth=int(rng.integers(1, 4)), max_expanded=40 if ample else int(rng.integers(1, 12)),
                          max_nodes=40 if ample else int(rng.integers(1, 14)), beam=None if rng.random() < 0.5 else 2)
    cb = _Scripted(seed, k=int(rng.integers(1, 4)))
    tree = DraftTree.with_root(int(rng.integers(0, 3)))
    tokens = tree.tokens  # grown in place until the final cut
    tree, old_to_new = grow(tree, limits, cb.draft, cb.draw, certain=_certain_01(tree))
    if ample:
        assert all(tokens[n] not in (0, 1) for level in cb.drafted for n in level)
    expanded = [i for i in range(1, len(tree)) if tree.expanded(i)]
    assert len(tree) - 1 <= limits.max_nodes and len(expanded) <= min(limits.max_expanded, limits.max_nodes)
    for i in range(len(tree)):
        if tree.expanded(i) and len(tree.draws[i]) == 0:  # a certain node: its one candidate
            assert tree.tokens[i] in (0, 1) and tree.candidates(i) == [tree.tokens[i] + 1]
        n_certain, j = 0, tree.parent[i]
        while j >= 0:
            n_certain += tree.expanded(j) and len(tree.draws[j]) == 0
            j = tree.parent[j]
        assert tree.depth[i] <= limits.depth + n_certain


def test_a_certain_run_at_the_root_rides_into_the_first_draft_call():
    """Root 0 and its child 1 are certain: the first frontier is the node of 2, at depth 2,
    and with depth 1 its draws are the tree's leaves, at depth 3."""
    cb = _Scripted(0, k=2, vocab=3)
    tree = DraftTree.with_root(0)
    tree, _ = grow(tree, GrowthLimits(depth=1, max_expanded=8, max_nodes=8), cb.draft, cb.draw,
                   certain=_certain_01(tree))
    assert cb.drafted == [[2]] and tree.tokens[:3] == [0, 1, 2] and max(tree.depth) == 3


class _LookupPlan:
    """A plan that expands every child, keeps every leaf and takes ``tails`` tail nodes."""

    def __init__(self, tails=0):
        self.tails = tails

    def width(self, level, scores):
        return len(scores)

    def leaves(self, expanded_scores, leaf_scores):
        return len(leaf_scores)

    def tail_pays(self, score):
        return self.tails > 0

    def tail(self, score):
        self.tails -= 1
        return self.tails >= 0


def _copy(tree, node):
    """A lookup candidate after every node: its token + 1 (mod 5), chance 0.8."""
    x = (tree.tokens[node] + 1) % 5
    return Draw(np.zeros(0, np.int64), None, {x: 0.8}, (x,))


def test_tails_continue_the_best_leaves_within_the_room_and_the_depth():
    s = _Scripted(4, k=2)
    limits = GrowthLimits(depth=3, max_expanded=2, max_nodes=30)  # leaves above the depth bound
    plain, _ = grow(DraftTree.with_root(0), limits, s.draft, s.draw, _LookupPlan())
    s = _Scripted(4, k=2)
    tree, _ = grow(DraftTree.with_root(0), limits, s.draft, s.draw, _LookupPlan(tails=100), tail=_copy)
    assert tree.tokens[: len(plain)] == plain.tokens  # the draft's tree as before, then the tails
    added = range(len(plain), len(tree))
    assert added and all(tree.depth[i] <= limits.depth for i in added)
    best_leaf = max((i for i in range(len(plain)) if plain.draws[i] is None), key=lambda i: plain.score[i])
    if plain.depth[best_leaf] < limits.depth:
        assert tree.lookup[best_leaf]  # the best leaf goes on first
    s = _Scripted(4, k=2)
    few, _ = grow(DraftTree.with_root(0), limits, s.draft, s.draw, _LookupPlan(tails=2), tail=_copy)
    assert len(few) == len(plain) + 2  # the plan's word
    s = _Scripted(4, k=2)
    tight, _ = grow(DraftTree.with_root(0), GrowthLimits(depth=3, max_expanded=2, max_nodes=len(plain) - 1),
                    s.draft, s.draw, _LookupPlan(tails=100), tail=_copy)
    assert len(tight) == len(plain)  # no room left
    s = _Scripted(4, k=2)
    none, _ = grow(DraftTree.with_root(0), limits, s.draft, s.draw, None, tail=_copy)
    assert none.tokens == plain.tokens  # no plan, no tails


def test_a_leaf_whose_tail_could_not_pay_is_never_asked_for_its_candidate():
    limits = GrowthLimits(depth=3, max_expanded=2, max_nodes=30)
    s = _Scripted(4, k=2)
    plain, _ = grow(DraftTree.with_root(0), limits, s.draft, s.draw, _LookupPlan())
    leaf_scores = sorted((plain.score[i] for i in range(1, len(plain)) if plain.draws[i] is None), reverse=True)
    bar = (leaf_scores[1] + leaf_scores[2]) / 2  # the best two leaves may pay, the rest cannot

    class Above(_LookupPlan):
        def tail_pays(self, score):
            return score > bar

        def tail(self, score):
            return self.tail_pays(score)

    asked = []

    def copy(tree, node):
        asked.append(node)
        return _copy(tree, node)

    s = _Scripted(4, k=2)
    tree, _ = grow(DraftTree.with_root(0), limits, s.draft, s.draw, Above(), tail=copy)
    assert asked and all(tree.score[i] > bar for i in asked)  # a child scores at most its parent
    assert len([i for i in asked if i < len(plain)]) <= 2


def _free(limits, plan=None, draw=None):
    """``grow_free`` from a root 0 with ``draw`` (default: K = 0 candidates after every node,
    token + 1 at chance 0.9 and token + 2 at 0.05, mod 7)."""
    tree = DraftTree.with_root(0)

    def two(node, _row):
        x = tree.tokens[node]
        return Draw(np.zeros(0, np.int64), None, {(x + 1) % 7: 0.9, (x + 2) % 7: 0.05}, ((x + 1) % 7, (x + 2) % 7))

    return grow_free(tree, limits, draw or two, plan)


class _KeepN:
    """A plan that keeps the best ``n`` nodes of those offered (``leaves`` with no expanded node)."""

    def __init__(self, n):
        self.n, self.offered = n, None

    def leaves(self, expanded_scores, leaf_scores):
        assert expanded_scores == []
        self.offered = list(leaf_scores)
        return min(self.n, len(leaf_scores))

    def free_grows(self, scores, bound, room):
        return True


def test_grow_free_expands_best_first_and_keeps_the_best_scored_subtree():
    limits = GrowthLimits(depth=16, max_expanded=20, max_nodes=20)
    tree = _free(limits)
    assert len(tree) - 1 == 20
    # best first: the 0.9 chain runs deep before any 0.05 branch grows
    chain, node = [], 0
    while (child := tree.children[node].get((tree.tokens[node] + 1) % 7)) is not None:
        chain.append(child)
        node = child
    assert len(chain) == 10 and max(tree.depth) == 10
    plan = _KeepN(5)
    cut = _free(limits, plan)
    assert plan.offered == sorted(plan.offered, reverse=True) and len(plan.offered) == 20
    assert len(cut) == 6 and cut.depth[1:] == [1, 2, 3, 4, 5]  # the chain: 0.9^5 > 0.05
    assert all(cut.parent[i] < i for i in range(1, len(cut)))
    assert cut.lookup[5]  # its last node still checks its candidates, without their nodes
    assert cut.children[5] == {}


def test_grow_free_respects_the_depth_and_a_node_without_candidates():
    tree = _free(GrowthLimits(depth=3, max_expanded=50, max_nodes=50))
    assert max(tree.depth) == 3 and len(tree) - 1 == 2 + 4 + 8
    nothing = _free(GrowthLimits(depth=3, max_expanded=50, max_nodes=50),
                    draw=lambda node, _row: Draw(np.zeros(0, np.int64), None, {}, ()))
    assert len(nothing) == 1 and nothing.draws[0] is None


def test_grow_free_stops_where_nothing_below_could_pay():
    class Stop(_KeepN):
        def free_grows(self, scores, bound, room):
            self.asked = getattr(self, "asked", 0) + 1
            return len(scores) < 6

    plan = Stop(50)
    tree = _free(GrowthLimits(depth=16, max_expanded=20, max_nodes=20), plan)
    assert len(tree) - 1 == 6 and plan.asked == 3  # three expansions, each adding two nodes


def test_keep_is_the_subtree_with_its_candidates():
    tree = _tree()
    kept = tree.keep([0, 1])
    assert kept.tokens == tree.tokens[:2] and kept.parent == [-1, 0]
    assert kept.lookup[0] == tree.lookup[0] and kept.children[0] == {tree.tokens[1]: 1}


def test_chain_cut_keeps_one_path_through_the_expanded_children_and_their_candidates():
    from resispec_gguf.decoding.tree import DraftTree

    t = DraftTree.with_root(0)
    t.set_draws(0, np.array([5, 6]), None)
    a, b = t.add_children(0, {5: 0.3, 6: 0.6})
    t.set_draws(a, np.array([7, 8]), None)
    t.add_children(a, {7: 0.9, 8: 0.1})
    cut, old_to_new = t.chain_cut(5)
    assert cut.tokens == [0, 5, 7] and cut.parent == [-1, 0, 1]  # the expanded child first, then the best
    assert cut.candidates(0) == [5, 6]  # the dropped sibling stays a candidate
    assert old_to_new == {0: 0, a: 1, a + 2: 2}
    assert t.chain_cut(1)[0].tokens == [0, 5]
