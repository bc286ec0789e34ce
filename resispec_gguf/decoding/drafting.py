"""A generation's draft phase: how ``Generation.plan`` grows a step's ``DraftTree``.

``DraftPhase`` is a mixin that ``generation.Generation`` inherits: ``_grow_tree`` (the
generator ``plan`` delegates to) drives ``tree.growing`` / ``tree.grow`` / ``tree.grow_free``
with the draws of each expanded node (``_draw``: K candidates from the draft row; without a
draft row ``_lookup_draw``, and ``_tail_draw`` for a lookup tail), the deterministic
candidates of the request's sources (``_propose``: ``candidates.Sources``), the certain tokens
a constraint leaves alone (``_certain_draw``), and the draft decode of each level
(``_draft_call``).

It keeps no state of its own: it reads the generation's (``dp``, ``sp``, ``plan_``,
``scores``, ``uniforms``, ``vocab``, ``sources``, ``constraint``, ``draft_pending``,
``copy_run``) and uses its row helpers (``_root``, ``_q``, ``_masked``,
``_mask``, ``_node_mask``, ``_only``).  The uniforms it takes are the request's, in the
order it takes them: moving a draw here or there would change the output.
"""

from __future__ import annotations

import numpy as np

from ..kernels import sampling
from .calibration import FORCED_BIN
from .candidates import without
from .steps import Decode
from .tree import DraftTree, Draw, GrowthLimits, grow, grow_free, growing

__all__ = ["DraftPhase"]

_NO_DRAWS = np.empty(0, np.int64)


class DraftPhase:
    """The draft phase of ``generation.Generation`` (module docstring): the methods that
    grow a step's tree, before the target sees it."""

    def _grow_tree(self, kind: str, max_nodes: int, max_expanded: int):
        """Draft phase (a generator yielding the draft's ``Decode``s): grow the tree with
        ``tree.growing`` (which owns the pruning rule).

        ``kind`` "draft": the draft model expands nodes (with a lookup candidate each when
        lookup is on); "lookup": chains of lookup candidates, no draft model call.  Returns
        the tree and, per tree node the draft evaluated, its draft node index; None when the
        draft evaluated nothing.
        """
        dp = self.dp
        tree = DraftTree.with_root(self._root())
        static = dp.policy == "static"
        # under auto the plan sets every level's width
        beam = None if static or self.plan_ is not None else max(2, -(-dp.max_budget // dp.max_depth))
        budget = max_nodes if static else min(dp.max_budget, max_nodes)
        chain = getattr(self, "_target_chain", False)  # a target on recurrent memory evaluates one chain
        if chain:
            beam = 1
        if kind == "lookup":
            if max_nodes < 0:
                return tree, None
            limits = GrowthLimits(depth=dp.max_depth, max_expanded=max_nodes, max_nodes=budget, beam=beam, chain=chain)
            if self.plan_ is not None:  # auto: weighed whole (``tree.grow_free``)
                return grow_free(tree, limits, lambda node, _row: self._lookup_draw(tree, node), self.plan_), None
            return grow(tree, limits, lambda frontier: [None] * len(frontier),
                        lambda node, _row: self._lookup_draw(tree, node), self.plan_, self._certain(tree))[0], None
        if max_expanded < 0 or max_nodes < 0:
            return tree, None
        if getattr(self, "_draft_beam", None):  # a draft on recurrent memory decodes one chain
            beam = self._draft_beam
        limits = GrowthLimits(depth=dp.max_depth, max_expanded=max_expanded, max_nodes=budget, beam=beam, chain=chain)
        draft_index: dict[int, int] = {}
        # under auto, the cut tree's best leaves go on along lookup and forced candidates
        tails = self.plan_ is not None and bool(self.sources)
        tail = self._tail_draw if tails else None
        steps = growing(tree, limits, lambda node, row: self._draw(tree, node, row), self.plan_, self._certain(tree),
                        tail)
        try:
            frontier = next(steps)
            while True:
                rows = yield self._draft_call(tree, frontier, draft_index)
                frontier = steps.send(rows)
        except StopIteration as done:
            tree, old_to_new = done.value
        return tree, {old_to_new[n]: d for n, d in draft_index.items() if n in old_to_new}

    def _lookup_draw(self, tree: DraftTree, node: int) -> Draw:
        """A node with no draws: its one candidate is the certain token, else the context's,
        memory's and grammar's candidates (``_propose``; none when there is none)."""
        sure = self._certain_draw(tree, node)
        if sure is not None:
            return sure
        fixed = self._propose(tree, node)
        w = self.scores.weights({}, fixed, self.dp.k)[0]
        return Draw(_NO_DRAWS, None, w, tuple(x for x, _ in fixed), ({}, fixed, fixed))

    def _tail_draw(self, tree: DraftTree, node: int) -> Draw | None:
        """A lookup tail's next node: the best-scored of ``_lookup_draw``'s candidates alone
        (a tail is a chain; a candidate without a node of its own adds nothing, since the
        fallback emits it with the same chance), None when there is none."""
        d = self._lookup_draw(tree, node)
        if not d.lookup:
            return None
        best = max(d.lookup, key=lambda x: d.weight[x])  # ties: the first
        guess, fixed, proposed = d.info
        return Draw(_NO_DRAWS, None, {best: d.weight[best]}, (best,),
                    (guess, [f for f in fixed if f[0] == best], proposed))

    def _certain(self, tree: DraftTree):
        """``tree.growing``'s ``certain`` callback: None without a constraint."""
        return None if self.constraint is None else (lambda node: self._certain_draw(tree, node))

    def _certain_draw(self, tree: DraftTree, node: int) -> Draw | None:
        """A node whose mask allows one token: that token, certain, with no draws (so no
        uniform is spent on it); None elsewhere."""
        sure = self._only(self._node_mask(tree, node))
        if sure < 0:
            return None
        return Draw(_NO_DRAWS, None, {sure: 1.0}, (sure,), ({}, [(sure, FORCED_BIN)], []))

    def _draft_call(self, tree: DraftTree, frontier: list[int], draft_index: dict[int, int]) -> Decode:
        """The draft decode of a level: the pending chain first (the step's first call: its
        last token is the root), then per frontier node the ancestors the draft has not
        evaluated (certain nodes, ``tree.growing``) and the node; rows only for the frontier.
        Records each evaluated node's index among the step's draft nodes in ``draft_index``."""
        tokens: list[int] = []
        parents: list[int] = []
        want: list[bool] = []
        # the step's draft nodes so far: the pending chain, then every evaluated non-root node
        first = len(self.draft_pending) + len(draft_index) - 1 if draft_index else 0
        if not draft_index:  # the pending chain, whose last token is the root
            n = len(self.draft_pending)
            tokens += self.draft_pending
            parents += [-1] + list(range(n - 1))
            want += [False] * (n - 1) + [frontier == [0]]
            draft_index[0] = n - 1
        for node in frontier:
            chain = []
            while node not in draft_index:
                chain.append(node)
                node = tree.parent[node]
            for j, a in enumerate(reversed(chain)):
                parents.append(draft_index[tree.parent[a]])
                draft_index[a] = first + len(tokens)
                tokens.append(tree.tokens[a])
                want.append(j == len(chain) - 1)
        return Decode(tokens, parents, None if all(want) else np.asarray(want, bool))

    def _propose(self, tree: DraftTree, node: int) -> list[tuple[int, int]]:
        """The deterministic candidates after ``node``, each with its calibration bin:
        ``[(token, bin)]`` from the request's sources in their order (``Sources.propose``:
        the context's and memory's, the views', then the token the grammar forces there),
        where the constraint allows them; empty when there is none.  Context first: where
        the grammar forces bytes, the target's own earlier tokens after the same context are
        a better guess at how it spells them than the grammar's tokenisation (on the spelled
        grammar of the tests, 1.10 times auto's speed).  The copy run a node continues counts
        the nodes above it, in a row, that were their parent's leading candidate from a
        lookup source, then the emitted tokens before the root."""
        sources = self.sources
        if not sources:
            return []
        path = []
        run, counting = 0, True
        while node > 0:
            par = tree.parent[node]
            led = tree.info[par][1] if tree.info[par] is not None else ()
            counting = counting and bool(led) and tree.tokens[node] == led[0][0] and sources.copies(led[0][1])
            run += counting
            path.append(tree.tokens[node])
            node = par
        path.reverse()
        if counting:
            run += self.copy_run
        return sources.propose(tuple(path), run, self._mask if self.constraint is not None else None)

    def _draw(self, tree: DraftTree, node: int, logits) -> Draw:
        """Draw one expanded node's K candidates from the draft row, plus its lookup one."""
        uniforms, k = self.uniforms, self.dp.k
        if self.constraint is not None:
            sure = self._certain_draw(tree, node)
            if sure is not None:
                return sure
        if len(logits) > self.vocab.n_vocab:  # a larger draft vocabulary: its extra ids cannot be verified
            logits = logits[: self.vocab.n_vocab]
        logits = self._masked(logits, self._node_mask(tree, node))  # q drawn from the biased, masked row
        proposed = self._propose(tree, node)
        if self.sp.greedy:  # the draft's top-K tokens, scored by its T=1 probabilities
            ids, probs = sampling.probs_sparse(logits, 1.0, 0, 1.0, 0.0, k + len(proposed))
            fixed = self.scores.lookup_worth(proposed, probs)
            keep = ~np.isin(ids, [x for x, _ in fixed]) if fixed else np.ones(ids.shape[0], bool)
            ids, probs = ids[keep][:k], probs[keep][:k]  # the top K besides the candidates
            qx = dict(zip(ids.tolist(), probs.tolist()))
            w, guess = self.scores.weights(qx, fixed, k)
            return Draw(ids, None, w, tuple(x for x, _ in fixed), (guess, fixed, proposed))
        ids, probs = self._q(logits)
        fixed = self.scores.lookup_worth(proposed, probs)
        if fixed:  # draw from q without the candidates (``candidates.without``)
            ids, probs = without(ids, probs, [x for x, _ in fixed])
            if not ids.shape[0]:  # the draft saw nothing but the candidates: they alone are tried
                w, guess = self.scores.weights({}, fixed, k)
                return Draw(_NO_DRAWS, None, w, tuple(x for x, _ in fixed), (guess, fixed, proposed))
        if self.dp.method == "rrs":
            draws = sampling.sample_without_replacement(ids, probs, uniforms.take(min(k, ids.shape[0])))
            qx = {}
            ids_l = ids.tolist()
            for x in draws.tolist():
                if x not in qx:
                    qx[x] = float(probs[ids_l.index(x)])
        else:
            draws, qd = sampling.sample_iid_q(ids, probs, uniforms.take(k))
            qx = dict(zip(draws.tolist(), qd.tolist()))  # first-draw order; a repeat has the same q
        w, guess = self.scores.weights(qx, fixed, k)
        return Draw(draws, (ids, probs), w, tuple(x for x, _ in fixed), (guess, fixed, proposed))
