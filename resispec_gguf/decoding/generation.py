"""One request's speculative decoding, apart from the model calls: it plans and it absorbs.

Each step:

1. ``plan(room)`` — a generator.  It grows the step's ``DraftTree`` from the root (the last
   emitted token) level by level: it yields each level's draft call (a ``DraftSync`` or a
   ``Decode`` of the frontier) and is sent back the draft's logits rows, from which every
   expanded node draws K candidates (iid; without replacement for rrs; the top-K tokens when
   greedy) plus, with lookup, a context candidate, or under a constraint the token its
   grammar forces there (``forced``); a position the mask leaves one token is certain and
   draws nothing, nor needs a draft row (``tree.growing``: the draft evaluates it with the
   first uncertain node below it).  It returns the ``Decode`` the target must make: the
   root plus every node (just the root for a plain step), or None when the reply is over.
2. ``absorb(rows)`` — walks the target rows from the root: at each expanded node the
   verifier picks a candidate or a fallback token; it descends while the accepted candidate
   has a node, and at a node never expanded it samples a bonus token from p.  Returns the
   ``Commit`` (which nodes each model keeps).
3. ``emit()`` — turns the step's tokens into text (stop strings, end tokens, max_tokens).

``loop.run`` drives one generation; nothing here calls a model, so a loop may drive several
generations with one target decode per step.  ``auto`` is one object (``autotune.Auto``):
the generation asks it for a plan and for candidate scores, and tells it what each verified
node showed; what it learns is its own business.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Generator, Iterator, Sequence

import numpy as np

from ..config import MAX_TREE_NODES, DraftParams, SamplingParams
from ..errors import ConstraintFault, ContextFullError
from ..kernels import sampling
from ..kernels.verify import verify, verify_greedy
from .autotune import DRAFT_CATCH_UP, Auto
from .calibration import FORCED_BIN
from .forced import ForcedTokens, only_token
from .candidates import FixedScores, without
from .memory import Memory, MemoryDrafts
from .protocol import ConstraintState
from .stats import Result, Stats, TokenLogprob
from .textstream import TextAssembler
from .uniforms import Uniforms
from .tree import DraftTree, Draw, GrowthLimits, grow, grow_free, growing

__all__ = ["Commit", "Decode", "DraftSync", "Generation", "Room"]

_PLAIN = DraftParams(method="none")
_NO_DRAWS = np.empty(0, np.int64)
# a target p with more tokens than this is verified densely
_SPARSE_P_MAX = 4096


@dataclass(frozen=True)
class Room:
    """What the models hold when a step is planned (``ModelBackend``'s ``n_ctx``,
    ``n_past`` and ``n_seq_max - 1``); the draft's fields are 0 without a draft.
    ``tree_nodes``: the most non-root nodes the target may evaluate for this request (a
    share of a step that serves several, ``batch``)."""

    target_ctx: int
    target_past: int
    draft_ctx: int = 0
    draft_past: int = 0
    draft_nodes: int = 0
    tree_nodes: int = MAX_TREE_NODES


@dataclass(frozen=True)
class Decode:
    """One decode of uncommitted nodes, as ``ModelBackend.decode`` takes it."""

    tokens: Sequence[int]
    parents: Sequence[int]
    want: np.ndarray | None = None


@dataclass(frozen=True)
class DraftSync:
    """Re-sync the draft's committed sequence to ``tokens`` (``ModelBackend.sync_prefix``)."""

    tokens: list[int]


@dataclass(frozen=True)
class Commit:
    """Which of the step's nodes each model keeps (``ModelBackend.commit``); ``draft`` None:
    the draft evaluated nothing this step and keeps its state."""

    target: list[int]
    draft: list[int] | None = None


class Generation:
    """One request: its RNG, constraint, text assembly and stats; plans and absorbs steps.

    ``vocab``: the target's ``n_vocab``, ``is_eog`` and ``token_piece`` (any
    ``ModelBackend``).  ``has_draft``: a draft model is there to use.  ``auto``: the request's
    ``autotune.Auto`` when ``dp.method`` is "auto" (else None).  ``logprobs``: None (off), or
    the number of alternatives to report per token.
    """

    def __init__(self, prompt_tokens: list[int], sp: SamplingParams, dp: DraftParams, *, vocab, has_draft: bool,
                 seed: int, auto: Auto | None = None, constraint: ConstraintState | None = None,
                 logprobs: int | None = None, memory: Memory | None = None):
        self.vocab = vocab
        self.sp = sp
        self.dp = dp  # the configuration of the current step (auto changes it per step)
        self.auto = auto
        self.scores = auto if auto is not None else FixedScores()
        self.plan_ = None  # auto's StepPlan for the current step
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.uniforms = Uniforms(self.rng)  # every uniform the request draws, in the generator's order
        self.stats = Stats(method=dp.method)
        self.prompt = list(prompt_tokens)
        self.out: list[int] = []
        self.text = TextAssembler(sp.stop)
        self.finish_reason: str | None = None
        self.error: str | None = None  # why the constraint failed (finish_reason "error")
        self.fault = False  # the failure was ours (``errors.ConstraintFault``)
        # the draft model follows this request (its prompt, then every emitted token): never
        # under auto when no step of its could call the draft (``Auto.drafts``)
        self.uses_draft = dp.method != "none" and dp.use_draft and has_draft and (auto is None or auto.drafts)
        self.has_draft = has_draft
        self.draft_pending: list[int] = []  # emitted tokens the draft has not seen yet
        # the draft's sequence is not this request's (a lazy start): its first step re-syncs it
        self.draft_stale = False
        use_lookup = dp.method == "auto" or (dp.lookup and dp.method != "none")
        # free candidates from the context and the engine's memory of past answers (``memory``)
        self.memory = memory if dp.use_memory else None  # the answer joins it at the end
        self.lookup = MemoryDrafts(self.prompt, self.memory, dp.lookup_k) if use_lookup else None
        self.copy_run = 0  # emitted tokens in a row that the context's leading candidate had predicted
        self.constraint = constraint
        self._masks: dict[tuple, np.ndarray] = {}  # this step's masks by path from the root
        self._bias = sampling.bias_arrays(sp.logit_bias)  # (ids, biases) or None, added to every row
        # the tokens the constraint forces, proposed as free candidates (when it can tell them)
        self.forced = ForcedTokens.of(constraint) if dp.method != "none" else None
        self.n_logprobs = logprobs
        self.logprobs: list[TokenLogprob] | None = None if logprobs is None else []
        self._step_logprobs: list[TokenLogprob] = []  # this step's emitted tokens', in order
        # the step in flight: its kind, tree (None for a plain step), draft node per tree node
        self._kind = "none"
        self._tree: DraftTree | None = None
        self._draft_index: dict[int, int] | None = None
        self._emitted: list[int] = []

    def result(self) -> Result:
        return Result(tokens=list(self.out), text=self.text.text, finish_reason=self.finish_reason or "interrupted",
                      stats=self.stats, seed=self.seed, logprobs=None if self.logprobs is None else list(self.logprobs),
                      error=self.error, fault=self.fault)

    def failed(self, error: Exception) -> None:
        """The constraint failed (``errors.ConstraintError``; ``ConstraintFault``: by our
        fault): the reply ends here."""
        self.finish_reason, self.error = "error", str(error)
        self.fault = isinstance(error, ConstraintFault)

    # ------------------------------------------------------------------ start and steps

    def check_fits(self, n_ctx: int) -> None:
        if len(self.prompt) + 1 > n_ctx:
            raise ContextFullError(f"the prompt ({len(self.prompt)} tokens) does not fit the context ({n_ctx} tokens)")

    @property
    def lazy_draft(self) -> bool:
        """Whether the draft may be left without the prompt at the start (``auto`` brings it
        up to date when a step first calls it, and only where that pays: ``AutoTuner.choose``);
        a loop that does so says ``started(..., draft_synced=False)``."""
        return self.auto is not None and self.uses_draft and self.auto.lazy_start

    def started(self, reused: int, seconds: float, draft_synced: bool = True) -> None:
        """The prompt is in the target's cache (``reused`` of its tokens were already), and in
        the draft's unless ``draft_synced`` is False (``lazy_draft``)."""
        self.stats.prompt_reused = reused
        self.stats.prompt_tokens = len(self.prompt)
        self.stats.prompt_time = seconds
        if self.uses_draft:
            self.draft_pending = [self.prompt[-1]] if draft_synced else list(self.prompt)
            self.draft_stale = not draft_synced

    def plan(self, room: Room) -> Generator[DraftSync | Decode, Sequence, Decode | None]:
        """This step's draft calls (yielded; send back each ``Decode``'s rows, None after a
        ``DraftSync``), then the target's ``Decode``; None when the reply is over."""
        if room.target_past + 2 > room.target_ctx:
            self.finish_reason = "length"
            return None
        if self.constraint is not None:
            if self.constraint.is_stopped():  # only an end token may follow: p is one-hot on it
                self.finish_reason = "eos"
                return None
            self._masks.clear()
            if self.forced is not None:
                self.forced.new_step()
        if self.auto is not None:
            forced = len(self.forced.tokens(())) if self.forced is not None else 0
            self.plan_ = self.auto.choose(len(self.draft_pending), forced, self.sp.max_tokens - len(self.out),
                                          stale=self.draft_stale)
            self.dp = self.plan_.params if self.plan_ is not None else _PLAIN
        self._tree, self._draft_index = None, None
        if self.dp.method == "none":
            self._kind = "none"
            return Decode([self._root()], [-1])
        if self.plan_ is not None:
            kind = self.plan_.kind
        else:
            kind = "draft" if self.has_draft and self.dp.use_draft else "lookup"
        self._kind = kind
        draft_past = room.draft_past
        if kind == "draft" and (self.draft_stale or len(self.draft_pending) > DRAFT_CATCH_UP):
            # after plain steps, or at a lazy start
            seq = self.prompt + self.out
            yield DraftSync(seq)
            draft_past = len(seq) - 1
            self.draft_pending = [seq[-1]]
            self.draft_stale = False
        max_nodes = min(MAX_TREE_NODES, room.tree_nodes, room.target_ctx - room.target_past - 1)
        max_expanded = min(room.draft_nodes, room.draft_ctx - draft_past) - len(self.draft_pending)
        self._tree, self._draft_index = yield from self._grow_tree(kind, max_nodes, max_expanded)
        return Decode(self._tree.tokens, self._tree.parent)

    def absorb(self, rows: Sequence) -> Commit:
        """Verify the step against the target rows of ``plan``'s ``Decode``; returns what the
        models keep.  ``emit`` then yields the step's text."""
        self.stats.target_calls += 1
        if self._tree is None:
            self._emitted = [self._plain_token(rows[0])]
            if self.uses_draft:
                self.draft_pending += self._emitted
            return Commit([0])
        tree = self._tree
        self.stats.tree_nodes += len(tree) - 1
        self._emitted, path = self._verify_tree(tree, rows)
        commit = self._commit(self._draft_index, self._emitted, path)
        if self.auto is not None:
            self.auto.step_observed(self.plan_, tree, len(self._emitted))
        return commit

    def step_done(self, seconds: float) -> None:
        if self.auto is not None:
            self.auto.record_time(self.plan_, seconds)
        self.stats.steps += 1
        self.stats.steps_by_kind[self._kind] = self.stats.steps_by_kind.get(self._kind, 0) + 1

    def emit(self) -> Iterator[str]:
        """The text of the step's tokens, as it becomes final; then the lookup index and the
        constraint move past them."""
        n_out = len(self.out)
        try:
            yield from self._emit(self._emitted)
        finally:  # counted even when the stream closes mid-step: what the step's source paid
            kinds = self.stats.tokens_by_kind
            kinds[self._kind] = kinds.get(self._kind, 0) + len(self.out) - n_out
        if self.lookup is not None:
            self.lookup.extend(self.out[n_out:])
        if self.constraint is not None and self.finish_reason is None:
            self.constraint.advance(self.out[n_out:])

    def flush(self) -> str:
        return self.text.flush()

    def closed(self, seconds: float) -> None:
        self.stats.total_time += seconds
        self.stats.tokens = len(self.out)
        if self.auto is not None:
            self.stats.auto = f"{self.auto.summary()}; measured {self.stats.tokens_per_s:.2f} tokens/s"
        if self.memory is not None:
            self.memory.remember(self.out)  # the answer joins the engine's memory
            if self.auto is not None:  # and what auto learnt of the candidates, for the next request
                self.memory.learn(self.auto.tuner.calibration.lookup_state())

    # ------------------------------------------------------------------ distributions

    def _p(self, logits):
        """The target's p: ``(ids, probs)`` when the filters leave a small support (no work
        then grows with the vocabulary), else dense ``[V]``."""
        sp = self.sp
        if sp.top_k <= 0 and sp.top_p >= 1.0 and sp.min_p <= 0.0:  # the whole vocabulary
            return sampling.probs_dense(logits, sp.temperature)
        ids, probs = sampling.probs_sparse(logits, sp.temperature, sp.top_k, sp.top_p, sp.min_p)
        if ids.shape[0] > _SPARSE_P_MAX:
            out = np.zeros(np.shape(logits)[0], np.float64)
            out[ids] = probs
            return out
        return ids, probs

    def _q(self, logits):
        sp = self.sp
        return sampling.probs_sparse(logits, sp.temperature, sp.top_k, sp.top_p, sp.min_p, self.dp.draft_support)

    def _target_dist(self, logits) -> tuple[object, int, object]:
        """The target's distribution at a row: ``(p, argmax, p_of)`` with ``p`` None and
        ``p_of`` one-hot on the argmax when greedy, else ``p`` as ``_p`` gives it;
        ``p_of(x)`` is the probability of x."""
        if self.sp.greedy:
            top = int(np.argmax(logits))
            return None, top, (lambda x: float(x == top))
        p = self._p(logits)
        if isinstance(p, tuple):
            ids, probs = p

            def p_of(x):
                hit = np.flatnonzero(ids == x)
                return float(probs[hit[0]]) if hit.size else 0.0

            return p, -1, p_of
        return p, -1, p.__getitem__

    def _sample(self, p, top: int) -> int:
        """A token from ``_target_dist``'s ``(p, argmax)``."""
        if p is None:
            return top
        if isinstance(p, tuple):
            return sampling.sample_sparse(p[0], p[1], self.uniforms.one())
        return sampling.sample_dense(p, self.uniforms.one())

    def _note(self, logits, token: int) -> None:
        """Record ``token``'s logprobs at the target row ``logits`` it was drawn against, as
        the model gave it (before a constraint's mask; a no-op unless asked for: it costs a
        pass over the row)."""
        if self.logprobs is not None:
            lp, ids, lps = sampling.token_logprob(logits, token, self.n_logprobs)
            self._step_logprobs.append(TokenLogprob(int(token), lp, tuple(zip(ids.tolist(), lps.tolist()))))

    # ------------------------------------------------------------------ the constraint

    def _mask(self, path: tuple) -> np.ndarray | None:
        """The constraint's mask after the committed tokens + ``path`` (tree tokens below
        the root), computed once per step and shared by the draft and the target."""
        if self.constraint is None:
            return None
        m = self._masks.get(path)
        if m is None:
            t = time.perf_counter()
            m = self._masks[path] = self.constraint.mask(path)
            self.stats.mask_seconds.append(time.perf_counter() - t)
        return m

    def _node_mask(self, tree: DraftTree, node: int) -> np.ndarray | None:
        if self.constraint is None:
            return None
        return self._mask(tree.path_tokens(node))

    @staticmethod
    def _only(mask) -> int:
        """The token ``mask`` allows when it allows one (p is then a point mass on it,
        whatever the row), else -1."""
        return -1 if mask is None else only_token(mask)

    def _certain_draw(self, tree: DraftTree, node: int) -> Draw | None:
        """A node whose mask allows one token: that token, certain, with no draws (so no
        uniform is spent on it); None elsewhere."""
        sure = self._only(self._node_mask(tree, node))
        if sure < 0:
            return None
        return Draw(_NO_DRAWS, None, {sure: 1.0}, (sure,), ({}, [(sure, FORCED_BIN)], []))

    def _masked(self, logits, mask):
        """The logit bias, then the mask, then (the caller) every sampling transform: plain
        sampling's law.  Where the bias leaves no token the mask allows, the row goes
        unbiased: still a function of the row and the path alone (docs/verification.md)."""
        out = logits if self._bias is None else sampling.bias_logits(logits, *self._bias)
        if mask is not None:
            out = sampling.mask_logits(out, mask)
        if self._bias is not None and out.max() == -np.inf:  # the bias banned every allowed token
            return logits if mask is None else sampling.mask_logits(logits, mask)
        return out

    # ------------------------------------------------------------------ plain and emitted tokens

    def _root(self) -> int:
        return self.out[-1] if self.out else self.prompt[-1]

    def _plain_token(self, row) -> int:
        mask = self._mask(())
        p, top, p_of = self._target_dist(self._masked(row, mask))
        sure = self._only(mask)
        tok = sure if sure >= 0 else self._sample(p, top)  # a point mass draws no uniform
        self._note(row, tok)
        if self.forced is not None and self.auto is not None and sure < 0:
            f = self.forced.first(())  # what the grammar's candidate would have been accepted with
            if f >= 0:
                self.auto.observe_lookup(FORCED_BIN, p_of(f))
        if self.lookup is not None:
            # what the context's and memory's candidates would have been accepted with, learnt for free
            fixed = self.lookup.propose((), self.copy_run)
            if mask is not None:
                fixed = [(x, b) for x, b in fixed if sampling.mask_allows(mask, x)]
            if fixed and self.auto is not None:
                self.auto.observe_fixed(fixed, p_of)
            self.copy_run = self.copy_run + 1 if fixed and tok == fixed[0][0] else 0
        return tok

    def _copy_run_after(self, path, mask, tok: int) -> int:
        """The copy run once ``tok`` follows ``path`` at a node that proposed nothing (a
        leaf): one longer where the context's leading candidate there (as ``_propose`` would
        give it) is ``tok``.  A chain accepted to its end is still copying; counting its
        bonus token keeps the next step's candidates in the long-run bins, so its chain can
        grow as deep as the copy goes."""
        if self.lookup is None:
            return 0
        fixed = self.lookup.propose(path, self.copy_run)
        if mask is not None:
            fixed = [(x, b) for x, b in fixed if sampling.mask_allows(mask, x)]
        return self.copy_run + 1 if fixed and fixed[0][0] == tok else 0

    def _emit(self, tokens: list[int]) -> Iterator[str]:
        notes, self._step_logprobs = self._step_logprobs, []
        for i, tok in enumerate(tokens):
            self.out.append(tok)
            if self.logprobs is not None:
                self.logprobs.append(notes[i])
            if self.vocab.is_eog(tok):
                self.out.pop()
                self.stats.eos_tokens += 1
                if self.logprobs is not None:
                    self.logprobs.pop()
                self.finish_reason = "eos"
                return
            piece = self.text.push(self.vocab.token_piece(tok))
            if piece:
                yield piece
            if self.text.stopped:
                self.finish_reason = "stop"
                return
            if len(self.out) >= self.sp.max_tokens:
                self.finish_reason = "length"
                return

    # ------------------------------------------------------------------ the tree

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
        if kind == "lookup":
            if max_nodes < 0:
                return tree, None
            limits = GrowthLimits(depth=dp.max_depth, max_expanded=max_nodes, max_nodes=budget, beam=beam)
            if self.plan_ is not None:  # auto: weighed whole (``tree.grow_free``)
                return grow_free(tree, limits, lambda node, _row: self._lookup_draw(tree, node), self.plan_), None
            return grow(tree, limits, lambda frontier: [None] * len(frontier),
                        lambda node, _row: self._lookup_draw(tree, node), self.plan_, self._certain(tree))[0], None
        if max_expanded < 0 or max_nodes < 0:
            return tree, None
        limits = GrowthLimits(depth=dp.max_depth, max_expanded=max_expanded, max_nodes=budget, beam=beam)
        draft_index: dict[int, int] = {}
        # under auto, the cut tree's best leaves go on along lookup and forced candidates
        tails = self.plan_ is not None and (self.lookup is not None or self.forced is not None)
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
        ``[(token, bin)]``, the context's and memory's (``memory.MemoryDrafts.propose``)
        where the constraint allows them, then the token the constraint forces there
        (``FORCED_BIN``) unless it is among them; empty when there is none.  Context first:
        where the grammar forces bytes, the target's own earlier tokens after the same
        context are a better guess at how it spells them than the grammar's tokenisation
        (on the spelled grammar of the tests, 1.10 times auto's speed)."""
        if self.lookup is None and self.forced is None:
            return []
        path = []
        run, counting = 0, True
        while node > 0:
            par = tree.parent[node]
            led = tree.info[par][1] if tree.info[par] is not None else ()
            counting = counting and bool(led) and tree.tokens[node] == led[0][0] and led[0][1] != FORCED_BIN
            run += counting
            path.append(tree.tokens[node])
            node = par
        path.reverse()
        out: list[tuple[int, int]] = []
        mask = None
        if self.lookup is not None:
            if counting:
                run += self.copy_run
            out = self.lookup.propose(path, run)
            if out and self.constraint is not None:  # unless the constraint forbids them here (a function of the path)
                mask = self._mask(tuple(path))
                out = [(x, b) for x, b in out if sampling.mask_allows(mask, x)]
        if self.forced is not None:
            f = self.forced.first(path)
            if f >= 0 and all(x != f for x, _ in out):
                mask = self._mask(tuple(path)) if mask is None else mask
                if sampling.mask_allows(mask, f):
                    out.append((f, FORCED_BIN))
        return out

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

    def _verify_tree(self, tree: DraftTree, rows) -> tuple[list[int], list[int]]:
        """Target phase.  Returns the emitted tokens and the tree nodes on the accepted path
        (root first); the last emitted token is never a node on that path."""
        st = self.stats
        constrained = self.constraint is not None
        mask, sure = None, -1
        node, emitted, path = 0, [], [0]
        while True:
            if constrained:
                mask = self._node_mask(tree, node)
                sure = self._only(mask)
            draws, fixed = tree.draws[node], tree.lookup[node]
            if sure >= 0:  # p is a point mass: the token is certain, no uniform is drawn
                emitted.append(sure)
                self._note(rows[node], sure)
                self.copy_run = 0
                child = tree.children[node].get(sure)
                if draws is not None:
                    st.count_node(tree.depth[node] + 1, sure in fixed)
                if draws is None or child is None:
                    return emitted, path
                node = child
                path.append(node)
                continue
            row = rows[node]
            p, top, p_of = self._target_dist(self._masked(row, mask))
            if draws is None or (len(draws) == 0 and not fixed):  # a leaf: bonus token from p
                emitted.append(self._sample(p, top))
                self._note(row, emitted[-1])
                self.copy_run = self._copy_run_after(tree.path_tokens(node), mask, emitted[-1])
                return emitted, path
            if p is None:
                tok, idx = verify_greedy(top, tree.candidates(node))
            else:
                u = self.uniforms.take(len(draws) + len(fixed) + 1)
                tok, idx = verify(self.dp.method, p, tree.q[node], draws, u, fixed)
            is_lookup = 0 <= idx < len(fixed)  # greedy: the candidates come first there too
            st.count_node(tree.depth[node] + 1, idx >= 0)
            if self.auto is not None:
                self.auto.observe_node(tree, node, tok, idx >= 0, is_lookup, p, p_of, self.dp.method, self.sp.greedy)
            self.copy_run = self.copy_run + 1 if fixed and tok == fixed[0] else 0
            emitted.append(tok)
            self._note(row, tok)
            child = tree.children[node].get(tok) if idx >= 0 else None
            if child is None:
                return emitted, path
            node = child
            path.append(node)

    def _commit(self, draft_index: dict[int, int] | None, emitted: list[int], path: list[int]) -> Commit:
        if draft_index is None:  # the draft evaluated nothing this step
            if self.has_draft and self.draft_pending:
                self.draft_pending += emitted
            return Commit(path)
        # draft: the pending chain plus the accepted nodes it expanded
        chain = list(range(len(self.draft_pending)))
        kept = [draft_index[n] for n in path[1:] if n in draft_index]
        # tokens the draft has not seen yet: accepted nodes it never expanded + the last token
        self.draft_pending = emitted[len(kept):]
        return Commit(path, chain + kept)
