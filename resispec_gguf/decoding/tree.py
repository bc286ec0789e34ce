"""The draft tree of one speculative step, and the policy that grows it.

Node 0 is the root: the last emitted token, not yet in the target's cache.  Every other node
is a distinct token drawn at its parent.  An *expanded* node has been through the draft model:
it carries the distribution ``q`` its candidates were drawn from and the ``draws`` in draw
order (duplicates included: the verifier walks all of them).  A drawn candidate that the
budget left without a node can still be accepted; it then ends the step.

The pruning rule (what keeps every iid verifier exact)
------------------------------------------------------
Given that a node is expanded and verified with its draws, those draws must still be K iid
samples from its ``q``.  So whether an expanded node stays in the tree may depend on nothing
made from its own draws: not on its children, not on what they drew, not on how many of its
draws were distinct.  ``grow`` guarantees it by construction:

* an expanded node is never removed afterwards;
* which nodes a level expands, and how many, is decided *before* they draw, from what is
  known then (scores and counts of the levels above, the room left);
* only never-expanded leaves are dropped at the end to fit the node budget, best-scored
  first.  Dropping a leaf changes whether an accepted candidate has a node to descend into,
  never the law of the candidate itself.

Choosing *which* children to expand best-first by score (EAGLE-2) is safe for the same
reason: the choice is made before those children draw.

Certain nodes
-------------
Under a constraint, a node whose mask allows one token is certain: its only candidate is
that token, accepted with probability 1, and it draws nothing (so needs no draft row).  A
node chosen for the frontier that is certain is expanded at once (``certain``), and so is
its child while certain, and the first uncertain descendant takes its place in the
frontier: a run of certain positions costs a target row each, never a draft call, nor one
of the ``depth`` levels, which count draft calls.  Whether a node is certain is a function
of its path, known before anything below it draws, so the rule above holds.

Lookup tails
------------
A context-lookup candidate is a function of its path: it needs no draft row.  Once the
draft levels are done and the leaves cut, ``growing`` may continue the best leaves with
``tail``'s candidates (a node's lookup or forced candidate as a no-draw ``Draw``): a leaf
becomes an expanded node with K = 0 draws whose one candidate is the next tail node, and so
on down a copy run, a target row each and no draft call, while ``plan.tail`` finds the row
pays and the ``depth`` bound allows.  The choice is made before those nodes draw (they draw
nothing), and nothing is dropped after it: the rule above holds.

Steps without a draft call
--------------------------
Where every node's candidates are functions of its path (lookup, memory and forced
candidates: K = 0 draws everywhere), nothing in the tree is random, so the rule above does
not bind: ``grow_free`` expands best-first as far as the bounds allow, then keeps the
best-scored nodes, as many as give the best projected E / T on the target's curve
(``plan.leaves`` over all of them).  A kept node whose children were dropped still checks
its candidates; one accepted there ends the step.  On a CPU whose curve is flat from 8 to
16 rows, the whole of a long copy run is weighed at once, where a level-by-level rule
stops at the first expensive row.

Pure Python/NumPy: no model, no randomness of its own.  ``grow`` reaches the models only
through the two callbacks it is given.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Generator, NamedTuple, Protocol, Sequence

import numpy as np

__all__ = ["DraftTree", "Draw", "GrowthLimits", "GrowthPlan", "grow", "grow_free", "growing"]


@dataclass
class DraftTree:
    tokens: list[int] = field(default_factory=list)  # [n] token per node
    parent: list[int] = field(default_factory=list)  # [n] parent node, -1 for the root
    depth: list[int] = field(default_factory=list)  # [n] root = 0
    score: list[float] = field(default_factory=list)  # [n] estimated chance of being reached
    children: list[dict] = field(default_factory=list)  # [n] token -> child node
    draws: list = field(default_factory=list)  # [n] int64 [K] candidates, None if not expanded
    q: list = field(default_factory=list)  # [n] (ids, probs) draws came from, None if greedy/not expanded
    lookup: list = field(default_factory=list)  # [n] deterministic candidates checked first, in order (a tuple)
    info: list = field(default_factory=list)  # [n] the drawer's notes on an expanded node (opaque here)

    @classmethod
    def with_root(cls, token: int) -> "DraftTree":
        t = cls()
        t._add(token, -1, 1.0)
        return t

    def _add(self, token: int, parent: int, score: float) -> int:
        i = len(self.tokens)
        self.tokens.append(int(token))
        self.parent.append(parent)
        self.depth.append(0 if parent < 0 else self.depth[parent] + 1)
        self.score.append(score)
        self.children.append({})
        self.draws.append(None)
        self.q.append(None)
        self.lookup.append(())
        self.info.append(None)
        if parent >= 0:
            self.children[parent][int(token)] = i
        return i

    def __len__(self) -> int:
        return len(self.tokens)

    def set_draws(self, node: int, draws: np.ndarray, q, lookup: tuple = (), info=None) -> None:
        self.draws[node] = draws
        self.q[node] = q
        self.lookup[node] = tuple(lookup)
        self.info[node] = info

    def path_tokens(self, node: int) -> tuple[int, ...]:
        """The tokens from the root's child down to ``node`` (empty for the root)."""
        out = []
        while node > 0:
            out.append(self.tokens[node])
            node = self.parent[node]
        return tuple(reversed(out))

    def candidates(self, node: int) -> list[int]:
        """The node's distinct candidates: the deterministic ones first, in order, then the
        draws in first-draw order."""
        return list(dict.fromkeys(list(self.lookup[node]) + self.draws[node].tolist()))

    def add_children(self, node: int, weight: dict) -> list[int]:
        """One child per distinct candidate of an expanded node (``candidates``), scored
        ``score(node) * weight[token]``; returns the new node indices."""
        cand = list(self.lookup[node]) + self.draws[node].tolist()
        if len(cand) > 1:
            cand = list(dict.fromkeys(cand))  # ``candidates``
        n, first = len(cand), len(self.tokens)
        s = self.score[node]
        # what _add does per child, a list at a time
        self.tokens += cand
        self.parent += [node] * n
        self.depth += [self.depth[node] + 1] * n
        self.score += [s * weight[t] for t in cand]
        self.children += [{} for _ in cand]
        none = [None] * n
        self.draws += none
        self.q += none
        self.lookup += [()] * n
        self.info += none
        new = list(range(first, first + n))
        self.children[node].update(zip(cand, new))
        return new

    def expanded(self, node: int) -> bool:
        return self.draws[node] is not None

    def keep(self, nodes: list[int]) -> "DraftTree":
        """The tree of ``nodes`` (ascending, the root and every kept node's parent among
        them); a kept node keeps its candidates, whether or not their nodes are kept."""
        old_to_new = {i: j for j, i in enumerate(nodes)}
        parent = [-1] + [old_to_new[self.parent[i]] for i in nodes[1:]]
        out = DraftTree([self.tokens[i] for i in nodes], parent, [self.depth[i] for i in nodes],
                        [self.score[i] for i in nodes], [{} for _ in nodes], [self.draws[i] for i in nodes],
                        [self.q[i] for i in nodes], [self.lookup[i] for i in nodes], [self.info[i] for i in nodes])
        for j in range(1, len(nodes)):
            out.children[parent[j]][out.tokens[j]] = j
        return out

    def chain_cut(self, max_nodes: int) -> tuple["DraftTree", dict[int, int]]:
        """The chain from the root through each node's best child (an expanded one first,
        then the best-scored, then the earliest), of at most ``max_nodes`` non-root nodes, as a
        new tree; returns it and the old -> new index map.  Every kept node keeps its
        candidates: one without a node is verified all the same (accepted, it ends the walk),
        so the cut keeps the law and only loses the rows of the nodes it drops."""
        keep, node = [0], 0
        while len(keep) <= max_nodes and self.children[node]:
            node = max(self.children[node].values(), key=lambda i: (self.expanded(i), self.score[i], -i))
            keep.append(node)
        return self.keep(keep), {i: j for j, i in enumerate(keep)}

    def prune_leaves(self, n: int) -> tuple["DraftTree", dict[int, int]]:
        """Keep the root, every expanded node and the ``n`` minus (expanded non-root nodes)
        best-scored leaves (ties: shallower, then earlier), as a new tree; returns it and
        the old -> new index map.  Expanded nodes are never dropped (see the module
        docstring), so ``n`` must be at least their number."""
        draws, score, depth = self.draws, self.score, self.depth
        inner = [i for i in range(1, len(self)) if draws[i] is not None]
        if len(inner) > n:
            raise ValueError(f"{len(inner)} expanded nodes do not fit a budget of {n}")
        leaves = sorted((i for i in range(1, len(self)) if draws[i] is None), key=lambda i: (-score[i], depth[i], i))
        keep = sorted([0] + inner + leaves[: n - len(inner)])
        # parents come before children (every kept node's parent is expanded, so kept)
        return self.keep(keep), {i: j for j, i in enumerate(keep)}


@dataclass(frozen=True)
class GrowthLimits:
    """How far one step's tree may grow, all fixed before anything is drawn.

    ``depth``: levels of draws (the root draws at level 0).  ``max_expanded``: non-root nodes
    the draft may evaluate this step.  ``max_nodes``: non-root nodes the target may
    evaluate.  ``beam``: nodes expanded per level at most (None: every child, room
    permitting).  ``chain``: the target evaluates one chain (recurrent memory,
    ``Room.target_chain``): one node expanded per level, and the tree is cut to the chain of
    ``DraftTree.chain_cut`` before the plan weighs its leaf, so that the plan prices the rows
    the target evaluates.
    """

    depth: int
    max_expanded: int
    max_nodes: int
    beam: int | None = None
    chain: bool = False


class Draw(NamedTuple):
    """What ``draw`` returns for one expanded node."""

    draws: np.ndarray  # [K] int64 candidates in draw order (K may be 0 for a lookup-only node)
    q: object  # (ids, probs) the draws came from; None when greedy or K = 0
    weight: dict  # token -> score factor, for every candidate
    lookup: tuple = ()  # deterministic candidates checked before the draws, in order
    info: object = None  # kept with the node for the caller (e.g. what to learn from it)


class GrowthPlan(Protocol):
    """Optional cost-aware limits (``stepplan.StepPlan``): each is called before the nodes
    it decides about draw, or only about never-expanded leaves, or (``tail``) about nodes
    with no draws."""

    def width(self, level: int, scores: list[float]) -> int: ...

    def leaves(self, expanded_scores: list[float], leaf_scores: list[float]) -> int: ...

    def tail_pays(self, score: float) -> bool: ...

    def tail(self, score: float) -> bool: ...

    def free_grows(self, scores: list[float], bound: float, room: int) -> bool: ...


# draft(nodes) -> one draft logits row per node (the nodes are evaluated by the draft model)
DraftFn = Callable[[list[int]], Sequence]
# draw(node, row) -> Draw
DrawFn = Callable[[int, object], Draw]
# certain(node) -> the Draw of a certain node (its one token, no draws), None when it is not
CertainFn = Callable[[int], "Draw | None"]
# tail(tree, node) -> a no-draw Draw whose one deterministic candidate continues ``node`` (None: none)
TailFn = Callable[["DraftTree", int], "Draw | None"]

# leaves a tail may start from (best-scored first), and tail nodes below a leaf at most
TAIL_LEAVES = 8
TAIL_LENGTH = 16


def _through_certain(tree: DraftTree, frontier: list[int], certain: CertainFn | None, n_expanded: int,
                     room: int) -> tuple[list[int], int]:
    """Expand every certain node of ``frontier`` (and its child, while certain) without a
    draft row; each is replaced by its first uncertain descendant, while the ``room`` for
    non-root expanded nodes lasts.  Returns the new frontier and expanded count."""
    if certain is None:
        return frontier, n_expanded
    out = []
    for node in frontier:
        while n_expanded < room:
            d = certain(node)
            if d is None:
                break
            tree.set_draws(node, d.draws, d.q, d.lookup, d.info)
            (node,) = tree.add_children(node, d.weight)
            n_expanded += 1
        out.append(node)
    return out, n_expanded


def _tails(tree: DraftTree, tail: TailFn, plan, room: int, depth: int) -> None:
    """Continue ``tree``'s best leaves with ``tail``'s candidates, best-scored node first,
    while ``plan.tail`` takes the row, ``room`` (non-root nodes) lasts and no node passes
    ``depth`` (module docstring: lookup tails).  A node not yet asked for its candidate is
    keyed by its own score, which bounds its child's (a chance is at most 1): ``tail`` (a
    lookup, and under a constraint a mask) is asked only of nodes whose child could pay."""
    if room <= 0:
        return
    leaves = heapq.nsmallest(TAIL_LEAVES, ((-tree.score[i], i) for i in range(1, len(tree)) if tree.draws[i] is None))
    open_: list[tuple[float, int, int, Draw | None]] = [(neg, i, 0, None) for neg, i in leaves]
    heapq.heapify(open_)  # (-child score or its bound, node, tail length, its draw once asked)
    while open_ and room > 0:
        neg, node, length, d = heapq.heappop(open_)
        if not plan.tail_pays(-neg):  # nor does anything after it
            break
        if d is None:  # a bound: ask for the candidate, and queue it at its own score
            if length < TAIL_LENGTH and tree.depth[node] < depth:
                d = tail(tree, node)
                if d is not None and len(d.lookup) == 1:
                    heapq.heappush(open_, (neg * d.weight[d.lookup[0]], node, length, d))
            continue
        plan.tail(-neg)
        tree.set_draws(node, d.draws, d.q, d.lookup, d.info)
        (child,) = tree.add_children(node, d.weight)
        room -= 1
        heapq.heappush(open_, (-tree.score[child], child, length + 1, None))


def growing(tree: DraftTree, limits: GrowthLimits, draw: DrawFn, plan: GrowthPlan | None = None,
            certain: CertainFn | None = None,
            tail: TailFn | None = None) -> Generator[list[int], Sequence, tuple[DraftTree, dict[int, int]]]:
    """Grow ``tree`` (a root alone) level by level and cut it to ``limits.max_nodes``; a
    generator, so that the caller makes the draft calls (``grow`` is the same with a
    ``draft`` callback).

    Each level yields the frontier, to be evaluated by the draft in one call, and is sent
    back one draft row per frontier node; ``draw`` draws each frontier node's candidates,
    and every distinct candidate becomes a child scored by the parent's score times
    ``weight[token]``.  The next frontier is the best-scored new children, as many as
    ``beam``, the room left and ``plan.width`` allow — a number fixed before they draw.  At
    the end only never-expanded leaves are cut, best-scored kept, to ``max_nodes`` (and to
    ``plan.leaves``).  Returns the final tree and the old -> new index map of the cut
    (identity when nothing was cut).  With ``certain``, a frontier's certain nodes are
    expanded before it is yielded (module docstring): a yielded node's nearest ancestors
    may then be nodes the draft has not evaluated.  With ``tail`` and ``plan``, the cut
    tree's best leaves are then continued by lookup tails (module docstring), nodes the
    draft does not evaluate either.
    """
    room = min(limits.max_expanded, limits.max_nodes)
    frontier, n_expanded = _through_certain(tree, [0], certain, 0, room)  # non-root expanded nodes; never dropped
    for level in range(limits.depth):
        rows = yield frontier
        new: list[int] = []
        for node, row in zip(frontier, rows):
            d = draw(node, row)
            tree.set_draws(node, d.draws, d.q, d.lookup, d.info)
            new += tree.add_children(node, d.weight)
        if level + 1 >= limits.depth:
            break
        width = min(len(new), limits.max_expanded - n_expanded, limits.max_nodes - n_expanded)
        if limits.beam is not None:
            width = min(width, limits.beam)
        best = sorted(new, key=lambda i: -tree.score[i])[: max(width, 0)]  # stable: ties keep draw order
        if plan is not None and width > 0:
            width = min(width, plan.width(level, [tree.score[i] for i in best]))
        if width <= 0:
            break
        frontier = sorted(best[:width])  # tree order: parents before children across calls
        frontier, n_expanded = _through_certain(tree, frontier, certain, n_expanded + width, room)
    if limits.chain:
        return _chain_end(tree, limits, plan, tail)
    keep = limits.max_nodes
    if plan is not None:
        inner = [i for i in range(1, len(tree)) if tree.expanded(i)]
        leaves = sorted((tree.score[i] for i in range(1, len(tree)) if not tree.expanded(i)), reverse=True)
        keep = len(inner) + plan.leaves([tree.score[i] for i in inner], leaves[: max(0, keep - len(inner))])
    cut = tree.prune_leaves(keep) if len(tree) - 1 > keep else (tree, {i: i for i in range(len(tree))})
    if tail is not None and plan is not None:
        _tails(cut[0], tail, plan, limits.max_nodes - (len(cut[0]) - 1), limits.depth)
    return cut


def _chain_end(tree: DraftTree, limits: GrowthLimits, plan: GrowthPlan | None,
               tail: TailFn | None) -> tuple[DraftTree, dict[int, int]]:
    """``growing``'s end under ``limits.chain``: the chain of ``DraftTree.chain_cut``, its
    last node, where that is a leaf, kept if ``plan.leaves`` takes it; then the lookup tail
    below that leaf (the chain's only one)."""
    cut, old_to_new = tree.chain_cut(limits.max_nodes)
    if plan is not None:
        inner = [cut.score[i] for i in range(1, len(cut)) if cut.expanded(i)]
        leaf = [cut.score[i] for i in range(1, len(cut)) if not cut.expanded(i)]  # the last node or none
        if not plan.leaves(inner, leaf) and leaf:
            cut = cut.keep(list(range(len(cut) - 1)))
            old_to_new = {i: j for i, j in old_to_new.items() if j < len(cut)}
        if tail is not None:
            _tails(cut, tail, plan, limits.max_nodes - (len(cut) - 1), limits.depth)
    return cut, old_to_new


def grow(tree: DraftTree, limits: GrowthLimits, draft: DraftFn, draw: DrawFn,
         plan: GrowthPlan | None = None, certain: CertainFn | None = None,
         tail: TailFn | None = None) -> tuple[DraftTree, dict[int, int]]:
    """``growing`` driven to the end with ``draft(frontier)`` making each level's draft call."""
    steps = growing(tree, limits, draw, plan, certain, tail)
    try:
        frontier = next(steps)
        while True:
            frontier = steps.send(draft(frontier))
    except StopIteration as done:
        return done.value


def grow_free(tree: DraftTree, limits: GrowthLimits, draw: DrawFn, plan: GrowthPlan | None = None) -> DraftTree:
    """A step with no draft call (module docstring): ``draw(node, None)`` gives each node's
    K = 0 candidates.  Nodes are expanded best-scored first (ties: shallower, earlier) while
    fewer than ``limits.max_nodes`` non-root nodes exist and none passes ``limits.depth``;
    then the best-scored non-root nodes are kept, ``plan.leaves`` choosing how many (all
    within ``max_nodes`` without a plan), each with its ancestors.  With a plan, growth
    stops once ``plan.free_grows`` finds that no node below the open ones could pay: a
    constraint's mask per expanded node is host work a GPU's step would wait for.  Under
    ``limits.chain`` only a node's best-scored child (ties: the first) is grown and weighed:
    the nodes kept are a chain."""
    open_ = [(-tree.score[0], 0, 0)]
    live: list[int] = []  # the non-root nodes that may be kept
    while open_ and len(live) < limits.max_nodes:
        if plan is not None and live and \
                not plan.free_grows([tree.score[i] for i in live], -open_[0][0], limits.max_nodes - len(live)):
            break  # nothing below the open nodes could pay (their scores bound their children's)
        _, _, node = heapq.heappop(open_)
        if tree.depth[node] >= limits.depth:
            continue
        d = draw(node, None)
        if not d.lookup:
            continue
        tree.set_draws(node, d.draws, d.q, d.lookup, d.info)
        children = tree.add_children(node, d.weight)
        if limits.chain and children:
            children = [max(children, key=lambda i: (tree.score[i], -i))]
        live += children
        for child in children:
            heapq.heappush(open_, (-tree.score[child], tree.depth[child], child))
    order = sorted(live, key=lambda i: (-tree.score[i], tree.depth[i], i))[: limits.max_nodes]
    n = len(order) if plan is None else plan.leaves([], [tree.score[i] for i in order])
    keep = {0}
    for i in order[:n]:
        while i not in keep:  # with its ancestors (a chance below 1 keeps them ahead anyway)
            keep.add(i)
            i = tree.parent[i]
    return tree.keep(sorted(keep))
