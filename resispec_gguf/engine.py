"""The speculative decoding engine: draft a tree, verify it in one target pass, commit.

One step (``_Generation._spec_step``):

1. **Draft** — grow a ``DraftTree`` from the root (the last emitted token) level by level,
   one batched draft decode per level.  Each expanded node draws K candidates from the
   draft's processed distribution q (iid; without replacement for rrs; the top-K tokens when
   greedy); distinct draws become children, kept best-first within the node budget.
2. **Verify** — one target decode of the root plus every node.  Walk from the root: at each
   expanded node the verifier picks a draw or a fallback token; descend while the accepted
   draw has a node; at a node the draft never expanded, sample a bonus token from p.
3. **Commit** — keep the walked path in both caches, drop the rest.  The last emitted token
   becomes the next root.

``method="none"`` is plain target decoding through the same sampling code.  The engine never
prints; it returns tokens, text and a ``Stats`` object.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

import numpy as np

from . import fim, sampling
from .config import MAX_TREE_NODES, DraftParams, ModelParams, SamplingParams
from .errors import ContextFullError, UserError
from .protocol import Constraint, ConstraintState, ModelBackend
from .textstream import TextAssembler
from .autotune import lookup_bin
from .lookup import NgramIndex
from .tree import DraftTree, Draw, GrowthLimits, grow
from .verify import (acceptance_profile, draw_chances, verify_greedy, verify_prepared, verify_prepared_sparse,
                     verify_prepared_with_candidate)

__all__ = ["Engine", "Result", "Stats", "TokenLogprob"]


@dataclass
class Stats:
    """What a generation cost and how well the draft did.

    ``tokens`` counts the output tokens; ``eos_tokens`` the end-of-generation token that
    ended the reply (0 or 1 per reply): not output, but a target call produced it.
    ``accepted_by_depth[d]`` counts draws accepted at depth d+1 of the tree and
    ``reached_by_depth[d]`` the verifications done there, so their ratio is the acceptance
    rate per depth.  Times are seconds; ``overhead_time`` is everything outside model calls.
    Kernels are compiled and ``auto``'s costs measured at load (``Engine.prepare``), so no
    time here is start-up.
    """

    method: str = "none"
    prompt_tokens: int = 0
    prompt_reused: int = 0  # prompt tokens whose KV cache was reused from the previous call
    prompt_time: float = 0.0
    tokens: int = 0
    eos_tokens: int = 0
    steps: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    tree_nodes: int = 0
    accepted_by_depth: list[int] = field(default_factory=list)
    reached_by_depth: list[int] = field(default_factory=list)
    draft_time: float = 0.0
    target_time: float = 0.0
    total_time: float = 0.0
    steps_by_kind: dict = field(default_factory=dict)  # "none" / "draft" / "lookup" -> steps
    mask_seconds: list = field(default_factory=list)  # under a constraint: time of each mask computed
    auto: str = ""  # what auto chose last and why

    @property
    def overhead_time(self) -> float:
        return max(0.0, self.total_time - self.draft_time - self.target_time)

    @property
    def tau(self) -> float | None:
        """Tokens per target call, counting the end-of-generation token a call produced: 1.0
        for plain decoding, more when speculation paid.  None before any target call."""
        return (self.tokens + self.eos_tokens) / self.target_calls if self.target_calls else None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.total_time if self.total_time > 0 else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draws per verified draw, over all depths; None when nothing was
        speculated (plain steps only)."""
        reached = sum(self.reached_by_depth)
        return sum(self.accepted_by_depth) / reached if reached else None

    @property
    def acceptance_by_depth(self) -> list[float | None]:
        """Acceptance rate per tree depth (None where no draw was verified)."""
        return [a / r if r else None for a, r in zip(self.accepted_by_depth, self.reached_by_depth)]

    @property
    def nodes_per_step(self) -> float:
        return self.tree_nodes / self.steps if self.steps else 0.0

    def _grow(self, depth: int) -> None:
        while len(self.reached_by_depth) < depth:
            self.reached_by_depth.append(0)
            self.accepted_by_depth.append(0)

    def _count(self, depth: int, accepted: bool) -> None:
        self._grow(depth)
        self.reached_by_depth[depth - 1] += 1
        self.accepted_by_depth[depth - 1] += int(accepted)

    def merge(self, other: "Stats") -> None:
        for name in ("prompt_tokens", "prompt_reused", "prompt_time", "tokens", "eos_tokens", "steps", "target_calls",
                     "draft_calls", "tree_nodes", "draft_time", "target_time", "total_time"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.mask_seconds += other.mask_seconds
        for kind, n in other.steps_by_kind.items():
            self.steps_by_kind[kind] = self.steps_by_kind.get(kind, 0) + n
        self.auto = other.auto or self.auto
        self._grow(len(other.reached_by_depth))
        for d, (a, r) in enumerate(zip(other.accepted_by_depth, other.reached_by_depth)):
            self.accepted_by_depth[d] += a
            self.reached_by_depth[d] += r
        self.method = other.method

    def as_dict(self) -> dict:
        return {
            "method": self.method,
            "prompt_tokens": self.prompt_tokens,
            "prompt_reused": self.prompt_reused,
            "tokens": self.tokens,
            "eos_tokens": self.eos_tokens,
            "steps": self.steps,
            "target_calls": self.target_calls,
            "draft_calls": self.draft_calls,
            "tau": self.tau,
            "tokens_per_s": self.tokens_per_s,
            "acceptance_rate": self.acceptance_rate,
            "accepted_by_depth": list(self.accepted_by_depth),
            "reached_by_depth": list(self.reached_by_depth),
            "nodes_per_step": self.nodes_per_step,
            "draft_time_s": self.draft_time,
            "target_time_s": self.target_time,
            "overhead_time_s": self.overhead_time,
            "total_time_s": self.total_time,
            "prompt_time_s": self.prompt_time,
            "steps_by_kind": dict(self.steps_by_kind),
            "masks": len(self.mask_seconds),
            "mask_ms_median": 1000 * float(np.median(self.mask_seconds)) if self.mask_seconds else None,
            "auto": self.auto,
        }


class TokenLogprob(NamedTuple):
    """One emitted token's log-probability under the target at temperature 1 before any
    filter (the model's own distribution, as OpenAI and vLLM report it), read from the row the
    token was verified or sampled against, and the ``top`` most likely tokens there as
    ``(token, logprob)`` pairs, descending."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass
class Result:
    tokens: list[int]
    text: str
    # "stop" (a stop string), "eos" (an end-of-generation token), "length" (max_tokens or the
    # context), "interrupted" (the stream was closed or raised before the end)
    finish_reason: str
    stats: Stats
    seed: int
    # one entry per token of ``tokens`` when the request asked for logprobs, else None
    logprobs: list[TokenLogprob] | None = None


_PLAIN = DraftParams(method="none")
_NO_DRAWS = np.empty(0, np.int64)
# score factor of a lookup candidate under the fixed methods (auto learns its own)
_LOOKUP_WEIGHT = 0.5
# committed tokens before a cost curve is measured
_CURVE_CONTEXT = 128
# a target p with more tokens than this is verified densely
_SPARSE_P_MAX = 4096
# auto learns every draft arm's acceptance exactly at a drafted node whose q has at most this
# many tokens (a sort of q's support); past it, from the outcomes of the arm that ran
_PROFILE_SUPPORT = 4096


class _Generation:
    """One request: owns its RNG, text assembly and stats; drives the models step by step."""

    def __init__(self, engine: "Engine", prompt_tokens: list[int], sp: SamplingParams, dp: DraftParams,
                 constraint: ConstraintState | None = None, logprobs: int | None = None):
        self.e = engine
        self.sp = sp
        self.dp = dp  # the configuration of the current step (auto changes it per step)
        self.tuner = engine._tuner(dp) if dp.method == "auto" else None
        self.plan = None  # auto's StepPlan for the current step
        self.seed = int(sp.seed) if sp.seed is not None else int(np.random.SeedSequence().entropy % (2**63))
        self.rng = np.random.default_rng(self.seed)
        self._side_rng = None  # auto's own draws for learning (never the output's stream)
        self.stats = Stats(method=dp.method)
        self.prompt = list(prompt_tokens)
        self.out: list[int] = []
        self.text = TextAssembler(sp.stop)
        self.finish_reason: str | None = None
        self.draft_pending: list[int] = []
        use_lookup = dp.method == "auto" or (dp.lookup and dp.method != "none")
        self.lookup = NgramIndex(self.prompt) if use_lookup else None
        self.copy_run = 0  # emitted tokens in a row that lookup had predicted
        # the request's constraint, if any, and this step's masks by path from the root
        self.constraint = constraint
        self._masks: dict[tuple, np.ndarray] = {}
        # logprobs: None (off: nothing is computed), else the number of alternatives per token
        self.n_logprobs = logprobs
        self.logprobs: list[TokenLogprob] | None = None if logprobs is None else []
        self._step_logprobs: list[TokenLogprob] = []  # this step's emitted tokens', in order

    def result(self) -> Result:
        return Result(tokens=list(self.out), text=self.text.text, finish_reason=self.finish_reason or "interrupted",
                      stats=self.stats, seed=self.seed, logprobs=None if self.logprobs is None else list(self.logprobs))

    def _note(self, logits, token: int) -> None:
        """Record ``token``'s logprobs at the target row ``logits`` it was drawn against, as
        the model gave it (before a constraint's mask; a no-op unless asked for: it costs a
        pass over the row)."""
        if self.logprobs is not None:
            lp, ids, lps = sampling.token_logprob(logits, token, self.n_logprobs)
            self._step_logprobs.append(TokenLogprob(int(token), lp, tuple(zip(ids.tolist(), lps.tolist()))))

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
    def _masked(logits, mask):
        """Mask first, then every sampling transform: plain constrained sampling's law."""
        return logits if mask is None else sampling.mask_logits(logits, mask)

    # ------------------------------------------------------------------ driver

    def run(self) -> Iterator[str]:
        e = self.e
        t0 = time.perf_counter()
        if len(self.prompt) + 1 > e.target.n_ctx:
            raise ContextFullError(
                f"the prompt ({len(self.prompt)} tokens) does not fit the context ({e.target.n_ctx} tokens)"
            )
        self.stats.prompt_reused = e.target.sync_prefix(self.prompt)
        uses_draft = self.dp.method != "none" and self.dp.use_draft and e.draft is not None
        if uses_draft:
            e.draft.sync_prefix(self.prompt)
            self.draft_pending = [self.prompt[-1]]
        self.stats.prompt_tokens = len(self.prompt)
        self.stats.prompt_time = time.perf_counter() - t0
        t_start = time.perf_counter()
        try:
            while self.finish_reason is None:
                if e.target.n_past + 2 > e.target.n_ctx:
                    self.finish_reason = "length"
                    break
                if self.constraint is not None:
                    if self.constraint.is_stopped():  # only an end token may follow: p is one-hot on it
                        self.finish_reason = "eos"
                        break
                    self._masks.clear()
                if self.tuner is not None:
                    self.plan = self.tuner.choose(len(self.draft_pending))
                    self.dp = self.plan.params if self.plan is not None else _PLAIN
                t_step = time.perf_counter()
                if self.dp.method == "none":
                    emitted = self._plain_step()
                    if uses_draft:
                        self.draft_pending += emitted
                    kind = "none"
                else:
                    kind, emitted = self._spec_step()
                if self.tuner is not None:
                    self.tuner.record_time(self.plan, time.perf_counter() - t_step)
                self.stats.steps += 1
                self.stats.steps_by_kind[kind] = self.stats.steps_by_kind.get(kind, 0) + 1
                n_out = len(self.out)
                yield from self._emit(emitted)
                if self.lookup is not None:
                    self.lookup.extend(self.out[n_out:])
                if self.constraint is not None and self.finish_reason is None:
                    self.constraint.advance(self.out[n_out:])
            tail = self.text.flush()
            if tail:
                yield tail
        finally:
            self.stats.total_time += time.perf_counter() - t_start
            self.stats.tokens = len(self.out)
            if self.tuner is not None:
                self.stats.auto = f"{self.tuner.summary()}; measured {self.stats.tokens_per_s:.2f} tokens/s"

    def _emit(self, tokens: list[int]) -> Iterator[str]:
        e = self.e
        notes, self._step_logprobs = self._step_logprobs, []
        for i, tok in enumerate(tokens):
            self.out.append(tok)
            if self.logprobs is not None:
                self.logprobs.append(notes[i])
            if e.target.is_eog(tok):
                self.out.pop()
                self.stats.eos_tokens += 1
                if self.logprobs is not None:
                    self.logprobs.pop()
                self.finish_reason = "eos"
                return
            piece = self.text.push(e.target.token_piece(tok))
            if piece:
                yield piece
            if self.text.stopped:
                self.finish_reason = "stop"
                return
            if len(self.out) >= self.sp.max_tokens:
                self.finish_reason = "length"
                return

    def _root(self) -> int:
        return self.out[-1] if self.out else self.prompt[-1]

    # ------------------------------------------------------------------ plain decoding

    def _plain_step(self) -> list[int]:
        e = self.e
        t = time.perf_counter()
        rows = e.target.decode([self._root()], [-1])
        mask = self._mask(())
        logits = self._masked(rows[0], mask)
        self.stats.target_time += time.perf_counter() - t
        self.stats.target_calls += 1
        p, top, p_of = self._target_dist(logits)
        tok = self._sample(p, top)
        self._note(rows[0], tok)
        if self.lookup is not None:
            # what a lookup candidate would have been accepted with, learnt for free
            x0, match = self.lookup.propose(self.lookup.tokens[-self.lookup.max_n:])
            if x0 >= 0 and mask is not None and not sampling.mask_allows(mask, x0):
                x0 = -1
            if x0 >= 0 and self.tuner is not None:
                self.tuner.calibration.observe_lookup(lookup_bin(match, self.copy_run), p_of(x0))
            self.copy_run = self.copy_run + 1 if x0 >= 0 and tok == x0 else 0
        e.target.commit([0])
        return [tok]

    # ------------------------------------------------------------------ speculative step

    def _spec_step(self) -> tuple[str, list[int]]:
        e = self.e
        if self.plan is not None:
            kind = self.plan.kind
        else:
            kind = "draft" if e.draft is not None and self.dp.use_draft else "lookup"
        if kind == "draft" and len(self.draft_pending) > 32:  # after plain steps: catch the draft up
            seq = self.prompt + self.out
            e.draft.sync_prefix(seq)
            self.draft_pending = [seq[-1]]
        tree, draft_index = self._grow_tree(kind)
        emitted, path = self._verify_tree(tree)
        self._commit(tree, draft_index, emitted, path)
        if self.tuner is not None:
            self.tuner.observe_step(self.plan, len(emitted), self.plan.cost)
            inner = [len(tree.candidates(i)) for i in range(len(tree)) if tree.expanded(i)]
            if inner:  # for the next steps' plans (never this step's: see tree.py's pruning rule)
                self.tuner.observe_children(self.plan, sum(inner) / len(inner))
        return kind, emitted

    def _grow_tree(self, kind: str) -> tuple[DraftTree, dict[int, int] | None]:
        """Draft phase: grow the tree with ``tree.grow`` (which owns the pruning rule).

        ``kind`` "draft": the draft model expands nodes (with a lookup candidate each when
        lookup is on); "lookup": chains of lookup candidates, no draft model call.  Returns
        the tree and, per tree node the draft evaluated, its draft node index; None when the
        draft evaluated nothing.
        """
        e, dp, st = self.e, self.dp, self.stats
        pending = self.draft_pending
        # target rows for non-root nodes, draft rows for expanded non-root nodes
        max_nodes = min(MAX_TREE_NODES, e.target.n_ctx - e.target.n_past - 1)
        tree = DraftTree.with_root(self._root())
        static = dp.policy == "static"
        # under auto the plan sets every level's width
        beam = None if static or self.plan is not None else max(2, -(-dp.max_budget // dp.max_depth))
        budget = max_nodes if static else min(dp.max_budget, max_nodes)
        if kind == "lookup":
            if max_nodes < 0:
                return tree, None
            limits = GrowthLimits(depth=dp.max_depth, max_expanded=max_nodes, max_nodes=budget, beam=beam)

            def draw_lookup(node: int, _row) -> Draw:  # no draws: the lookup candidate, if any
                x0, n = self._propose(tree, node)
                return Draw(_NO_DRAWS, None, self._weights({}, x0, n)[0], x0, ({}, n, x0))

            tree, _ = grow(tree, limits, lambda frontier: [None] * len(frontier), draw_lookup, self.plan)
            return tree, None
        max_expanded = min(e.draft.n_seq_max - 1, e.draft.n_ctx - e.draft.n_past) - len(pending)
        if max_expanded < 0 or max_nodes < 0:
            return tree, None
        limits = GrowthLimits(depth=dp.max_depth, max_expanded=max_expanded, max_nodes=budget, beam=beam)
        draft_index: dict[int, int] = {}
        decoded = [0]  # draft nodes evaluated so far this step

        def draft(frontier: list[int]):
            if frontier == [0]:  # the pending chain, whose last token is the root
                tokens, parents = pending, [-1] + list(range(len(pending) - 1))
                want = np.zeros(len(tokens), bool)
                want[-1] = True
            else:
                tokens = [tree.tokens[n] for n in frontier]
                parents = [draft_index[tree.parent[n]] for n in frontier]
                want = None
            t = time.perf_counter()
            rows = e.draft.decode(tokens, parents, want)
            st.draft_time += time.perf_counter() - t
            st.draft_calls += 1
            first = decoded[0] + len(tokens) - len(frontier)  # the root ends the pending chain
            for j, n in enumerate(frontier):
                draft_index[n] = first + j
            decoded[0] += len(tokens)
            return rows

        def draw(node: int, logits) -> Draw:
            return self._draw(tree, node, logits)

        tree, old_to_new = grow(tree, limits, draft, draw, self.plan)
        return tree, {old_to_new[n]: d for n, d in draft_index.items() if n in old_to_new}

    # -------------------------------------------------------------- candidates

    def _propose(self, tree: DraftTree, node: int) -> tuple[int, int]:
        """The context-lookup candidate after ``node`` and its calibration bin:
        ``(token, bin)``, token -1 when the context has no match."""
        if self.lookup is None:
            return -1, 0
        path = []
        run, counting = 0, True
        while node > 0:
            par = tree.parent[node]
            counting = counting and tree.tokens[node] == tree.lookup[par]
            run += counting
            path.append(tree.tokens[node])
            node = par
        path.reverse()
        if counting:
            run += self.copy_run
        n = self.lookup.max_n
        # the index holds the prompt and the output so far, which ends with the root
        x0, match = self.lookup.propose((self.lookup.tokens[-n:] + path)[-n:])
        if x0 >= 0 and self.constraint is not None and not sampling.mask_allows(self._mask(tuple(path)), x0):
            return -1, 0  # the constraint forbids it here: a function of the path, not of a draw
        return x0, lookup_bin(match, run)

    def _weights(self, qx: dict, x0: int, n: int) -> tuple[dict, dict | None]:
        """Score factors of a node's candidates: estimated chances of acceptance under auto,
        draft probabilities (EAGLE-2) under a fixed method; and, under auto, the first guess
        of each draw's chance (for ``_learn``), else None.

        Under auto a reached node has a candidate accepted with the chance its arm learnt
        (``AutoTuner.accept``): the first guess shares it among the distinct draws in
        proportion to q (the draft's guess at p), less what a lookup candidate, tried first,
        takes (its bin's learnt chance); the calibration then corrects each guess by what
        guesses like it came to."""
        if self.tuner is None:
            w = dict(qx)
            if x0 >= 0:
                w[x0] = 1.0 - (1.0 - _LOOKUP_WEIGHT) * (1.0 - w.get(x0, 0.0))
            return w, None
        cal = self.tuner.calibration
        total = sum(qx.values())
        look = cal.lookup(n) if x0 >= 0 else 0.0
        share = self.tuner.accept * (1.0 - look) / total if total > 0.0 else 0.0
        k = self.dp.k
        guess = {x: q * share for x, q in qx.items()}
        w = {x: cal.draft(g, k) for x, g in guess.items()}
        if x0 >= 0:
            w[x0] = look + w.get(x0, 0.0)
        return w, guess

    def _draw(self, tree: DraftTree, node: int, logits) -> Draw:
        """Draw one expanded node's K candidates from the draft row, plus its lookup one."""
        rng, k = self.rng, self.dp.k
        if len(logits) > self.e.n_vocab:  # a larger draft vocabulary: its extra ids cannot be verified
            logits = logits[: self.e.n_vocab]
        if self.constraint is not None:  # q drawn from the masked row
            logits = self._masked(logits, self._node_mask(tree, node))
        x0, n = self._propose(tree, node)
        if self.sp.greedy:  # the draft's top-K tokens, scored by its T=1 probabilities
            ids, probs = sampling.probs_sparse(logits, 1.0, 0, 1.0, 0.0, k)
            qx = dict(zip(ids.tolist(), probs.tolist()))
            x0, proposed = self._lookup_worth(x0, n, probs), x0
            w, guess = self._weights(qx, x0, n)
            return Draw(ids, None, w, x0, (guess, n, proposed))
        ids, probs = self._q(logits)
        x0, proposed = self._lookup_worth(x0, n, probs), x0
        if self.dp.method == "rrs":
            draws = sampling.sample_without_replacement(ids, probs, rng.random(k))
            qx = {}
            ids_l = ids.tolist()
            for x in draws.tolist():
                if x not in qx:
                    qx[x] = float(probs[ids_l.index(x)])
        else:
            draws, qd = sampling.sample_iid_q(ids, probs, rng.random(k))
            qx = dict(zip(draws.tolist(), qd.tolist()))  # first-draw order; a repeat has the same q
        w, guess = self._weights(qx, x0, n)
        return Draw(draws, (ids, probs), w, x0, (guess, n, proposed))

    def _lookup_worth(self, x0: int, n: int, probs) -> int:
        """Under auto, a draft node's lookup candidate (checked before the draws) is kept only
        while its bin is accepted at least as often as the draws would have one accepted (the
        arm's acceptance; known before anything is drawn): a poor lookup guess would only
        split the accepted path between two branches.  Fixed methods keep it."""
        if x0 < 0 or self.tuner is None or probs.shape[0] == 0:
            return x0
        return x0 if self.tuner.calibration.lookup(n) >= self.tuner.accept else -1

    # -------------------------------------------------------------- verification

    def _verify_tree(self, tree: DraftTree) -> tuple[list[int], list[int]]:
        """Target phase.  Returns the emitted tokens and the tree nodes on the accepted path
        (root first); the last emitted token is never a node on that path."""
        e, st = self.e, self.stats
        t = time.perf_counter()
        rows = e.target.decode(tree.tokens, tree.parent)
        st.target_time += time.perf_counter() - t
        st.target_calls += 1
        st.tree_nodes += len(tree) - 1
        node, emitted, path = 0, [], [0]
        while True:
            logits = self._masked(rows[node], self._node_mask(tree, node))
            draws, x0 = tree.draws[node], tree.lookup[node]
            if draws is None or (len(draws) == 0 and x0 < 0):  # a leaf: bonus token from p
                emitted.append(self._sample_p(logits))
                self._note(rows[node], emitted[-1])
                self.copy_run = 0
                return emitted, path
            p, top, p_of = self._target_dist(logits)
            if p is None:
                tok, idx = verify_greedy(top, tree.candidates(node))
                is_lookup = x0 >= 0 and idx == 0
            elif isinstance(p, tuple):  # a sparse p
                qids, qprobs = tree.q[node] if tree.q[node] is not None else (None, None)
                u = self.rng.random(len(draws) + (2 if x0 >= 0 else 1))
                tok, idx = verify_prepared_sparse(self.dp.method, p[0], p[1], x0, qids, qprobs, draws, u)
                is_lookup = x0 >= 0 and idx == 0
            else:
                if x0 >= 0:
                    qids, qprobs = tree.q[node] if tree.q[node] is not None else (None, None)
                    u = self.rng.random(len(draws) + 2)
                    tok, idx = verify_prepared_with_candidate(self.dp.method, p, x0, qids, qprobs, draws, u)
                    is_lookup = idx == 0
                else:
                    qids, qprobs = tree.q[node]
                    u = self.rng.random(len(draws) + 1)
                    tok, idx = verify_prepared(self.dp.method, p, qids, qprobs, draws, u)
                    is_lookup = False
            st._count(tree.depth[node] + 1, idx >= 0)
            if self.tuner is not None:
                self._learn(tree, node, tok, idx >= 0, is_lookup, p, p_of)
            self.copy_run = self.copy_run + 1 if x0 >= 0 and tok == x0 else 0
            emitted.append(tok)
            self._note(rows[node], tok)
            child = tree.children[node].get(tok) if idx >= 0 else None
            if child is None:
                return emitted, path
            node = child
            path.append(node)

    def _learn(self, tree: DraftTree, node: int, tok: int, accepted: bool, is_lookup: bool, p, p_of) -> None:
        """Tell auto how the node fared: whether a candidate was accepted (the arm's
        acceptance) and, when the draws were reached, how each draw's first guess
        (``_weights``) came out.  Where a chance is known exactly it is learnt instead of a
        0/1 outcome (less noise), whatever the step's shape: p(x0) for the node's lookup
        proposal (kept or not), min(1, p'/q) for a chain's single draw, and at a drafted
        node sum(min(p, q)), the chance a chain's draw would have passed there (greedy:
        whether the draft's top token is the target's)."""
        tuner = self.tuner
        cal = tuner.calibration
        guess, n, proposed = tree.info[node]
        if proposed >= 0:  # learnt whether or not the candidate was kept (``_lookup_worth``)
            cal.observe_lookup(n, p_of(proposed))
        x0 = tree.lookup[node]
        qx = tree.q[node]
        pv = sampling.values_at(p, qx[0]) if qx is not None and p is not None and len(qx[0]) <= _PROFILE_SUPPORT else None
        if guess and not is_lookup:  # the draws were reached, against p without x0
            draws = tree.draws[node]
            if pv is not None and self.dp.method in ("chain", "resispec"):
                # each distinct draw's chance of being the one accepted, given the draws as drawn
                pq = pv
                if x0 >= 0:
                    p0 = p_of(x0)
                    pq = np.where(qx[0] == x0, 0.0, pv / (1.0 - p0)) if p0 < 1.0 else np.zeros_like(pv)
                chance = _chance_by_token(self.dp.method, pq, qx, draws)
                for x, g in guess.items():
                    if x != x0:
                        cal.observe_draft(g, chance.get(x, 0.0), len(draws))
                self._shadow_draws(len(draws), x0, n, pq, qx)
            else:
                for x, g in guess.items():
                    if x != x0:
                        cal.observe_draft(g, float(accepted and tok == x), len(draws))
        if pv is not None and tuner.exact_ks.size:
            # every draft arm's acceptance and width here, exactly (the chain's included)
            tuner.observe_draft_node(*acceptance_profile(pv, qx[1], tuner.exact_ks))
            return
        if qx is not None and p is not None:
            tuner.observe_chain(sampling.overlap(p, *qx))
        elif self.sp.greedy and len(tree.draws[node]):
            tuner.observe_chain(p_of(int(tree.draws[node][0])))
        tuner.observe_node(accepted)

    def _shadow_draws(self, k_drawn: int, x0: int, n: int, pq, qx) -> None:
        """At a reached drafted node, what each other draft arm's K draws would have made of
        it: K draws from q on a side RNG (the request's own stream is untouched, so the
        output law is not), guessed as ``_weights`` guesses and scored by their exact
        chances, so that every K's calibration learns at every node, not only the K that ran."""
        tuner, cal = self.tuner, self.tuner.calibration
        if self._side_rng is None:
            self._side_rng = np.random.default_rng([self.seed, 1])
        look = cal.lookup(n) if x0 >= 0 else 0.0
        for k, accept in tuner.draft_accepts():
            if k == k_drawn:
                continue
            draws, qd = sampling.sample_iid_q(qx[0], qx[1], self._side_rng.random(k))
            qs = dict(zip(draws.tolist(), qd.tolist()))
            total = sum(qs.values())
            if total <= 0.0:
                continue
            chance = _chance_by_token("chain" if k == 1 else "resispec", pq, qx, draws)
            share = accept * (1.0 - look) / total
            for x, q in qs.items():
                if x != x0:
                    cal.observe_draft(q * share, chance.get(x, 0.0), k)

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

    def _sample_p(self, logits) -> int:
        p, top, _ = self._target_dist(logits)
        return self._sample(p, top)

    def _sample(self, p, top: int) -> int:
        """A token from ``_target_dist``'s ``(p, argmax)``."""
        if p is None:
            return top
        if isinstance(p, tuple):
            return sampling.sample_sparse(p[0], p[1], self.rng.random())
        return sampling.sample_dense(p, self.rng.random())

    def _commit(self, tree: DraftTree, draft_index: dict[int, int] | None, emitted: list[int], path: list[int]) -> None:
        e = self.e
        e.target.commit(path)
        if draft_index is None:  # the draft evaluated nothing this step
            if e.draft is not None and self.draft_pending:
                self.draft_pending += emitted
            return
        # draft: the pending chain plus the accepted nodes it expanded
        chain = list(range(len(self.draft_pending)))
        kept = [draft_index[n] for n in path[1:] if n in draft_index]
        e.draft.commit(chain + kept)
        # tokens the draft has not seen yet: accepted nodes it never expanded + the last token
        self.draft_pending = emitted[len(kept):]


def _chance_by_token(method: str, pq, qx, draws) -> dict[int, float]:
    """Each distinct draw's chance of being the one the verifier accepts (``draw_chances``
    summed over its repeats), given the draws as drawn."""
    chance: dict[int, float] = {}
    for x, c in zip(draws.tolist(), draw_chances(method, pq, qx[0], qx[1], draws).tolist()):
        chance[x] = chance.get(x, 0.0) + c
    return chance


def _kernel_warm_ups() -> list:
    """One step per group of kernel entries a generation makes, each calling the same
    functions the loop above calls, with the same argument types.

    Numba compiles (or loads from its cache) one version of a kernel per argument types, at
    the first call with them; a type first seen in a reply costs seconds there.  The public
    wrappers fix every type (logits: float32 read-only, as the backend's rows; ids and draws:
    int64; probabilities and uniforms: float64; scalars: Python int/float), so calling each
    entry once covers every reply.  The tests check it: after ``Engine.prepare`` no kernel
    gains a signature during a generation of any method.
    """
    row = np.array([2.0, 1.0, 0.0, -np.inf, -1.0], np.float32)
    row.flags.writeable = False  # as backend.LogitsRows gives it
    wide = np.linspace(-3.0, 3.0, 8192).astype(np.float32)  # a vocabulary of many blocks (sampling._scan_top)
    wide.flags.writeable = False

    def distributions():
        sampling.probs_dense(row, 0.7, 2, 0.9, 0.05)  # the target's p (a plain softmax needs no kernel)
        sampling.probs_sparse(row, 0.7, 2, 0.9, 0.05)  # ... and sparse
        sampling.probs_sparse(wide, 0.7, 2, 0.9, 0.05, 3)
        sampling.probs_sparse(row, 0.7, 0, 0.9, 0.05, 3)  # the draft's q
        sampling.probs_sparse(row, 1.0, 0, 1.0, 0.0, 2)  # greedy: the draft's top-K

    def draws():
        ids, probs = sampling.probs_sparse(row, 1.0)
        sampling.sample_dense(sampling.probs_dense(row, 1.0, 3), 0.5)
        sampling.sample_sparse(ids, probs, 0.5)
        sampling.sample_iid(ids, probs, np.full(2, 0.5))
        sampling.sample_iid_q(ids, probs, np.full(2, 0.5))
        sampling.overlap((ids, probs), ids, probs)  # auto learns a chain's acceptance on a sparse p
        acceptance_profile(sampling.values_at((ids, probs), ids), probs, np.array([1, 2], np.int64))  # ... every arm's
        acceptance_profile(sampling.values_at(sampling.probs_dense(row, 1.0), ids), probs, np.array([1], np.int64))
        draw_chances("resispec", sampling.values_at((ids, probs), ids), ids, probs, np.array([0, 0], np.int64))
        sampling.sample_without_replacement(ids, probs, np.full(2, 0.5))

    def verification():
        p = sampling.probs_dense(row, 1.0, 3)
        ids, probs = sampling.probs_sparse(row, 1.0)
        for method in ("chain", "specinfer", "rrs", "resispec"):
            sample = sampling.sample_without_replacement if method == "rrs" else sampling.sample_iid
            draws = sample(ids, probs, np.full(1 if method == "chain" else 2, 0.5))
            verify_prepared(method, p, ids, probs, draws, np.full(len(draws) + 1, 0.5))
            verify_prepared_with_candidate(method, p, 4, ids, probs, draws, np.full(len(draws) + 2, 0.5))
            verify_prepared_with_candidate(method, p, 4, None, None, _NO_DRAWS, np.full(2, 0.5))  # lookup only
            pids, pprobs = sampling.probs_sparse(row, 1.0, 3)
            verify_prepared_sparse(method, pids, pprobs, -1, ids, probs, draws, np.full(len(draws) + 1, 0.5))
            verify_prepared_sparse(method, pids, pprobs, 4, ids, probs, draws, np.full(len(draws) + 2, 0.5))
            verify_prepared_sparse(method, pids, pprobs, 4, None, None, _NO_DRAWS, np.full(2, 0.5))

    def auto():  # StepPlan.width's search, on read-only cost tables as the tuner holds them
        from . import autotune

        table = autotune._cost_table(autotune.CostCurve((1, 2), (1.0, 1.5)), 4)
        autotune.StepPlan("chain", DraftParams(depth=4, budget=8), table, table, accept=0.5, overhead_s=0.0).width(0, [0.5, 0.2])

    return [distributions, draws, verification, auto]


class Engine:
    """A target model, optionally a draft model, and the speculative loop between them.

    Use ``Engine.load(...)``; it is a context manager that frees both models.  Generation
    needs only the ``protocol.ModelBackend`` seam; the text methods (``text_tokens``,
    ``chat_tokens``) also use the target's vocabulary (``tokenize``, ``token_text``,
    ``special_tokens``, ``bos``/``eos``), and ``info``/``reference_logits`` its
    ``describe`` and ``logits_of_sequence`` (``backend.LlamaModel`` has them all).  Surfaces
    use this class only, never the models behind it.
    """

    def __init__(self, target: ModelBackend, draft: ModelBackend | None = None, *,
                 chat_template: str | None = None, cost_curves=None):
        """``target``/``draft``: any ``protocol.ModelBackend``.  ``cost_curves``: the
        ``(target, draft)`` ``autotune.CostCurve`` pair for ``auto``; when not given,
        measured (and cached on disk) by ``prepare``, which ``load`` calls, or else on the
        first auto request."""
        self.target = target
        self.draft = draft
        self.n_vocab = target.n_vocab
        self._chat_template = chat_template
        self.last_result: Result | None = None
        self._auto = cost_curves
        self._row_s = 0.0 if cost_curves is not None else None  # host seconds per row, for auto
        self.n_threads = target.n_threads
        # built on the first constrained request: the grammar engine's vocabulary, compiled
        # constraints (most recent last), the tool-call format
        self._grammar_tokenizer = None
        self._compiled: dict = {}
        self._tool_format = None

    @classmethod
    def load(cls, target: ModelParams | str | None = None, draft: str | None = None, *, progress: bool = True,
             **settings) -> "Engine":
        """Load a target and a draft as a ``config.ModelParams`` says: pass one, or its fields
        as arguments, e.g. ``Engine.load("default", n_ctx=8192)`` or
        ``Engine.load("t.gguf", "d.gguf", n_threads=4, flash_attn=False)``.

        ``target``/``draft`` are paths, ``hf:`` specs or preset names; a preset target with no
        draft brings its own draft, any other target loads none unless ``draft`` names one;
        ``draft=""`` loads none (then ``auto`` and ``lookup=True`` draft from the context
        only).  ``progress``: report model downloads on stderr, and ``prepare``'s work on a
        terminal.  A bad setting raises
        ``config.ConfigError``, a model that cannot be found, read or paired ``UserError``."""
        if isinstance(target, ModelParams):
            if draft is not None or settings:
                raise TypeError("Engine.load takes a ModelParams or its fields as arguments, not both")
            params = target
        else:
            named = {"target": target, "draft": draft}
            params = ModelParams(**{k: v for k, v in named.items() if v is not None}, **settings)
        from . import backend, models

        backend.set_verbose(params.verbose)
        draft_spec = models.draft_spec(params.target, params.draft)
        target_path = models.resolve_model(params.target, role="target", progress=progress)
        draft_path = models.resolve_model(draft_spec, role="draft", progress=progress) if draft_spec else None
        t, d = backend.open_models(target_path, draft_path, params, n_seq_max=MAX_TREE_NODES + 2)
        engine = cls(t, d, chat_template=t.chat_template())
        try:
            engine.prepare(progress=progress)
        except BaseException:
            engine.close()
            raise
        return engine

    def prepare(self, progress: bool = False) -> None:
        """Make the first reply as fast as the next: compile every kernel a generation runs
        (or load it from Numba's cache) and measure what ``auto`` needs (the cost curves and
        the host time per logits row; measured once per model file and settings, cached on
        disk).  ``Engine.load`` calls it; an engine built from backends directly measures
        on its first ``auto`` request unless this is called.  ``progress``: a "preparing
        kernels" bar while it works, erased when done, when stderr is a terminal (a script's
        or a server's log gets no bar)."""
        from . import models

        steps = [*_kernel_warm_ups(), self._auto_curves, self._auto_row_seconds]
        show = progress and sys.stderr.isatty()
        bar = models._make_bar(len(steps), "preparing kernels", show, unit="step", leave=False)
        try:
            for step in steps:
                step()
                bar.update(1)
        finally:
            bar.close()

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        for m in (self.target, self.draft):
            if m is not None:
                m.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ what is loaded

    @property
    def has_draft(self) -> bool:
        return self.draft is not None

    @property
    def n_ctx(self) -> int:
        """The target's context in tokens: prompt plus output never exceed it."""
        return self.target.n_ctx

    def info(self) -> dict:
        """What is loaded, for reports: per model (``"target"``, ``"draft"`` or None) the
        backend's ``describe()``: file path, context, batch, threads, GPU layers, flash
        attention, RPC workers, the backend library's version and whether it can offload to a
        GPU."""
        return {"target": self.target.describe(), "draft": self.draft.describe() if self.draft is not None else None}

    def check_draft_params(self, dp: DraftParams) -> None:
        """``UserError`` when ``dp`` cannot run on these models (a method that needs a draft
        model, without one)."""
        if dp.needs_draft and not self.has_draft:
            raise UserError(f"method {dp.method!r} needs a draft model or lookup=True; load one or use method "
                            "'auto' or 'none'")

    def reference_logits(self, tokens: list[int], *, draft: bool = False) -> np.ndarray:
        """The target's (or the draft's) logits after each of ``tokens``, ``[n, V]`` float32,
        decoded one sequence from an empty cache: the reference the tree decodes are
        checked against.  Leaves that model's cache holding ``tokens``."""
        model = self.draft if draft else self.target
        if model is None:
            raise UserError("no draft model is loaded")
        return model.logits_of_sequence(tokens)

    # ------------------------------------------------------------------ auto

    def _tuner(self, dp: DraftParams):
        """A fresh AutoTuner per request on the engine's cost curves (measured once per model
        file and settings, cached on disk).  Fresh, so that its choices — and with them the
        output — depend only on the request, its seed and this machine.  ``dp``'s draws,
        depth and budget bound what it may choose."""
        from . import autotune

        return autotune.AutoTuner(*self._auto_curves(), dp, has_draft=self.draft is not None and dp.use_draft,
                                  row_s=self._auto_row_seconds())

    def _auto_curves(self):
        """The ``(target, draft)`` cost curves, measured (or read from the disk cache) once."""
        if self._auto is None:
            self._auto = (self._cost_curve(self.target), self._cost_curve(self.draft) if self.draft is not None else None)
        return self._auto

    def _auto_row_seconds(self) -> float:
        if self._row_s is None:
            self._row_s = self._host_row_seconds()
        return self._row_s

    @staticmethod
    def _measured(identity: str, measure):
        """``measure()``'s CostCurve for ``identity``, measured once and cached on disk (so
        auto's choices stay deterministic); a cache that cannot be written is skipped."""
        from . import autotune, models

        cache = os.environ.get("RESISPEC_COSTS") or str(models.cache_dir() / "costs.json")
        key = autotune.curve_cache_key(identity)
        curve = autotune.load_cached_curve(cache, key)
        if curve is None:
            curve = measure()
            try:
                autotune.store_cached_curve(cache, key, curve)
            except OSError:
                pass
        return curve

    def _host_row_seconds(self) -> float:
        """Host time to turn one logits row of this vocabulary into a distribution and verify
        on it."""
        from . import autotune

        def measure():
            row = np.random.default_rng(0).normal(0.0, 3.0, self.n_vocab).astype(np.float32)
            best = float("inf")
            row.flags.writeable = False  # as the backend's rows
            for _ in range(5):
                t = time.perf_counter()
                ids, probs = sampling.probs_sparse(row, 0.8, 40, 0.95, 0.05)  # as _Generation._p
                sampling.sample_sparse(ids, probs, 0.5)
                sampling.probs_sparse(row, 0.8, 40, 0.95, 0.05, 64)
                best = min(best, time.perf_counter() - t)
            return autotune.CostCurve((1,), (best,))

        # v2: since the target's p is sparse (rows read once, no dense [V] vector)
        return self._measured(f"host-row-v2:{self.n_vocab}", measure).seconds[0]

    def _cost_curve(self, model):
        """Seconds of one decode of n rows of ``model``, measured with a chain of n nodes
        after ``_CURVE_CONTEXT`` committed tokens (a reply's context rather than an empty
        one: attention over it is part of every row's cost)."""
        from . import autotune

        def measure():
            context = max(0, min(_CURVE_CONTEXT, model.n_ctx - max(autotune.ROW_COUNTS) - 2))
            model.reset()
            if context:
                model.sync_prefix([min(100 + i % 50, model.n_vocab - 1) for i in range(context + 1)])

            def rows(n):
                model.decode([min(100 + i, model.n_vocab - 1) for i in range(n)], [-1] + list(range(n - 1)))
                model.drop_uncommitted()

            curve = autotune.measure_curve(rows)
            model.reset()
            return curve

        # v4: measured after a context, every count to 8, the fastest of interleaved rounds
        return self._measured("v4:" + model.cost_key(), measure)

    # ------------------------------------------------------------------ text

    @property
    def chat_template(self) -> str | None:
        return self._chat_template

    @functools.cached_property
    def fim_tokens(self) -> fim.FimTokens | None:
        """The target's fill-in-the-middle tokens (``fim.find_fim_tokens`` among its special
        tokens), None when it has none."""
        return fim.find_fim_tokens((text, i) for text, i, *_ in self.target.special_tokens())

    def infill_tokens(self, prefix: str, suffix: str, *, middle: str = "", extra=(), repo_level: bool = False,
                      reserve: int = 0) -> tuple[list[int], bool]:
        """The prompt for filling in between ``prefix`` and ``suffix`` with the target's FIM
        tokens, laid out by ``fim.infill_prompt`` (``middle``, ``extra`` ``(filename, text)``
        pairs and ``repo_level`` as there), and whether anything was cut so that the prompt
        leaves ``reserve`` tokens of the context for the answer.  Texts stay text (special
        tokens are not parsed); BOS comes first when the model wants it.  ``UserError`` when
        the model has no FIM tokens, or a text is longer than ``max_prompt_bytes``."""
        tokens = self.fim_tokens
        if tokens is None:
            raise UserError("this model has no fill-in-the-middle tokens (such as <|fim_prefix|>, <|fim_suffix|>, "
                            "<|fim_middle|>)")
        for text in (prefix, suffix, middle, *(t for pair in extra for t in pair)):
            self._check_prompt_size(text)
        bos = [self.target.bos] if self.target.add_bos else []
        budget = max(0, self.n_ctx - 1 - len(bos) - max(0, int(reserve)))
        try:
            body, truncated = fim.infill_prompt(
                tokens, lambda s: self.target.tokenize(s, add_special=False, parse_special=False) if s else [],
                prefix, suffix, middle=middle, extra=extra, repo_level=repo_level, budget=budget)
        except ValueError as e:
            raise ContextFullError(str(e)) from None
        return bos + body, truncated

    def token_piece(self, token: int) -> bytes:
        """The bytes ``token`` adds to the text (possibly part of a UTF-8 character)."""
        return self.target.token_piece(int(token))

    def _special_text(self, token: int) -> str:
        if token is None or not 0 <= token < self.n_vocab:
            return ""
        return self.target.token_text(token).decode("utf-8", "replace")

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True, tools=None) -> str:
        """The chat template applied to ``messages`` (and ``tools``, OpenAI's tool objects,
        for templates that render them)."""
        from .chat_format import render

        return render(
            self._chat_template,
            messages,
            bos_token=self._special_text(self.target.bos),
            eos_token=self._special_text(self.target.eos),
            add_generation_prompt=add_generation_prompt,
            tools=tools,
        )

    @property
    def max_prompt_bytes(self) -> int:
        """No prompt of more UTF-8 bytes can fit the context: a token stands for at most
        ``target.max_piece_bytes()`` bytes of text (128 for Qwen2.5's vocabulary, 12 for the
        test models'), so such a prompt is more than ``n_ctx`` tokens.  (Vocabularies that
        normalise text, BERT/T5-style, may drop characters; none is a generative model here.)"""
        return self.target.n_ctx * self.target.max_piece_bytes()

    def _check_prompt_size(self, text: str) -> None:
        """Refuse a prompt that cannot fit before paying for its tokenization."""
        limit = self.max_prompt_bytes
        size = len(text)  # characters: a lower bound on the bytes, free to get
        if size <= limit:
            try:
                size = len(text.encode("utf-8"))
            except UnicodeEncodeError as e:
                raise UserError(f"the text is not valid Unicode (a lone surrogate at character {e.start})") from None
        if size > limit:
            raise ContextFullError(
                f"the prompt ({size} bytes or more) cannot fit the context ({self.target.n_ctx} tokens of at most "
                f"{self.target.max_piece_bytes()} bytes each)")

    def text_tokens(self, text: str) -> list[int]:
        """Tokenize a prompt, adding BOS (when the model wants it) unless the text already
        starts with it, as a rendered chat template often does.  A text longer than
        ``max_prompt_bytes`` raises ``ContextFullError`` without being tokenized."""
        self._check_prompt_size(text)
        bos = self._special_text(self.target.bos)
        return self.target.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)

    def chat_tokens(self, messages: list[dict], add_generation_prompt: bool = True, tools=None) -> list[int]:
        """The prompt for a chat: the template rendered with a generation prompt, tokenized so
        that only the template's own text can become control tokens.

        A message's content is always text: ``<|im_start|>`` typed by a user (or inside a pasted
        document) stays those twelve characters and cannot open a turn.  The template is
        rendered a second time with a unique mark in place of each content, which shows where
        the template's text ends and a content begins; control tokens are cut out of the
        template's text only (as llama.cpp's ``parse_special`` would) and every text run
        between them is tokenized with ``parse_special=False``.  For contents without control
        text the tokens are exactly ``text_tokens(render_chat(messages))``.  When the template
        does more with a content than paste it in (or trim it), the contents are placed where
        the marks are, unchanged, if any of them holds control text.  Like ``text_tokens`` it
        refuses a prompt longer than ``max_prompt_bytes`` before tokenizing it.
        """
        from . import chat_format as cf

        msgs = cf.check_messages(messages)
        contents = [m["content"] for m in msgs]
        self._check_prompt_size("".join(contents))
        rendered = self.render_chat(msgs, add_generation_prompt, tools)
        self._check_prompt_size(rendered)  # other fields a template may print are text too
        specials = self.target.special_tokens()
        nonce = cf.new_nonce()
        marked = self.render_chat([{**m, "content": cf.mark(nonce, i)} for i, m in enumerate(msgs)],
                                  add_generation_prompt, tools)
        segments = cf.content_segments(rendered, marked, nonce, contents)
        if segments is None:
            if not any(text in c for c in contents for text, *_ in specials):
                return self.text_tokens(rendered)  # nothing to protect: keep the template's output
            segments = cf.pasted_segments(marked, nonce, contents)
            rendered = "".join(t for t, _ in segments)
        bos = self._special_text(self.target.bos)
        add_special = not (bos and rendered.startswith(bos))
        tokens = [self.target.bos] if add_special and self.target.add_bos else []
        for run in cf.split_special(segments, specials):
            if isinstance(run, int):
                tokens.append(run)
            else:
                tokens += self.target.tokenize(run, add_special=False, parse_special=False)
        if add_special and self.target.add_eos:
            tokens.append(self.target.eos)
        return tokens

    # ------------------------------------------------------------------ generation

    # ------------------------------------------------------------------ constraints

    def compile_constraint(self, *, json_schema=None, grammar: str | None = None) -> Constraint:
        """A constraint for ``stream``/``generate`` from a JSON schema (a dict, its JSON text,
        or True for any JSON object) or a grammar (Lark as llguidance reads it, or llama.cpp's
        GBNF, converted), compiled against the target's vocabulary.  Compile once, use for
        many requests.  A schema or grammar that cannot be compiled raises
        ``grammar.GrammarError`` (a ``UserError``) saying why."""
        from . import grammar as g

        if (json_schema is None) == (grammar is None):
            raise TypeError("give exactly one of json_schema and grammar")
        text = g.json_schema_grammar(json_schema) if json_schema is not None else g.lark_grammar(grammar)
        cache = self._compiled
        compiled = cache.pop(text, None)
        if compiled is None:
            compiled = g.Grammar(self.grammar_tokenizer(), text, self.n_vocab)
        cache[text] = compiled  # most recent last
        while len(cache) > 32:
            cache.pop(next(iter(cache)))
        return compiled

    def tool_format(self):
        """How this model writes tool calls (``tools.choose_format``): from its chat template,
        and whether the call markers are single special tokens of its vocabulary."""
        from . import tools

        fmt = self._tool_format
        if fmt is None:
            def special(text: str) -> bool:
                ids = self.target.tokenize(text, add_special=False, parse_special=True)
                return len(ids) == 1 and bool(self.grammar_tokenizer().is_special_token(ids[0]))

            probe = tools.HermesFormat()
            fmt = self._tool_format = tools.choose_format(self._chat_template, special(probe.open),
                                                          special(probe.close))
        return fmt

    def grammar_tokenizer(self):
        """The target vocabulary as the grammar engine reads it (built once, ~1 s at 152k
        tokens, then cached)."""
        tok = self._grammar_tokenizer
        if tok is None:
            tok = self._grammar_tokenizer = self.target.grammar_tokenizer()
        return tok

    def _constraint(self, constraint, json_schema, grammar) -> Constraint | None:
        given = [x is not None for x in (constraint, json_schema, grammar)]
        if sum(given) > 1:
            raise TypeError("give at most one of constraint, json_schema and grammar")
        if json_schema is not None or grammar is not None:
            return self.compile_constraint(json_schema=json_schema, grammar=grammar)
        return constraint

    # ------------------------------------------------------------------ generation

    def _prepare(self, prompt, sampling_params, draft_params, constraint: Constraint | None = None,
                 logprobs: int | None = None):
        if logprobs is not None and not (isinstance(logprobs, int) and 0 <= logprobs <= self.n_vocab):
            raise UserError(f"logprobs must be None or a number of alternatives from 0 to {self.n_vocab}, "
                            f"got {logprobs!r}")
        sp = sampling_params or SamplingParams()
        dp = draft_params or DraftParams()
        self.check_draft_params(dp)
        if isinstance(prompt, str):
            tokens = self.text_tokens(prompt)
        else:
            tokens = [int(t) for t in prompt]
            bad = [t for t in tokens if not 0 <= t < self.n_vocab]
            if bad:
                raise UserError(f"prompt token {bad[0]} is outside the vocabulary (0..{self.n_vocab - 1})")
        if not tokens:
            raise UserError("the prompt is empty")
        state = constraint.start() if constraint is not None else None  # refuses an impossible start
        return _Generation(self, tokens, sp, dp, state, logprobs)

    def stream(self, prompt, sampling: SamplingParams | None = None, draft: DraftParams | None = None, *,
               constraint: Constraint | None = None, json_schema=None, grammar: str | None = None,
               logprobs: int | None = None) -> Iterator[str]:
        """Yield text pieces as soon as they are complete UTF-8 (and past any stop string).
        When the iterator ends, ``engine.last_result`` holds the full ``Result``; closed or
        interrupted early (Ctrl-C, an error), its ``finish_reason`` is "interrupted".

        ``json_schema`` / ``grammar`` (see ``compile_constraint``) or an already compiled
        ``constraint`` restrict the output: every token is drawn exactly as plain constrained
        sampling would draw it (the mask first, then temperature, top-k, top-p, min-p), with
        speculation on.  When the constraint is complete and only an end token may follow,
        the reply ends with finish_reason "eos"; ``max_tokens`` first gives "length" and the
        partial text.  ``logprobs``: see ``generate``."""
        constraint = self._constraint(constraint, json_schema, grammar)
        gen = self._prepare(prompt, sampling, draft, constraint, logprobs)
        self.last_result = None
        try:
            yield from gen.run()
        finally:
            self.last_result = gen.result()

    def stream_logprobs(self, prompt, sampling: SamplingParams | None = None, draft: DraftParams | None = None,
                        logprobs: int = 0, *, constraint: Constraint | None = None, json_schema=None,
                        grammar: str | None = None) -> Iterator[tuple[str, list[TokenLogprob]]]:
        """``stream`` with logprobs: yields ``(piece, entries)``, ``entries`` the
        ``TokenLogprob`` of the tokens emitted since the previous piece (text and tokens do not
        align one to one: a token may hold part of a character, or text a stop string may
        still swallow).  The yielded lists, concatenated, are a prefix of
        ``last_result.logprobs``; what follows it (tokens whose text never became final, such
        as a stop string's) is only there.  The constraint arguments are ``stream``'s."""
        constraint = self._constraint(constraint, json_schema, grammar)
        gen = self._prepare(prompt, sampling, draft, constraint, logprobs)
        self.last_result = None
        sent = 0
        try:
            for piece in gen.run():
                n = len(gen.logprobs)
                yield piece, gen.logprobs[sent:n]
                sent = n
        finally:
            self.last_result = gen.result()

    def generate(self, prompt, sampling: SamplingParams | None = None, draft: DraftParams | None = None, *,
                 constraint: Constraint | None = None, json_schema=None, grammar: str | None = None,
                 logprobs: int | None = None) -> Result:
        """Generate a completion of ``prompt`` (a string or a list of token ids); the
        constraint arguments are ``stream``'s.

        ``logprobs``: None (the default) computes nothing; an integer n >= 0 fills
        ``Result.logprobs`` with each token's ``TokenLogprob`` and its n most likely
        alternatives, read from the target rows the step already has (no extra model call;
        one pass over the row per token).  They are the model's own, before the constraint's
        mask as before the sampling filters."""
        for _ in self.stream(prompt, sampling, draft, constraint=constraint, json_schema=json_schema,
                             grammar=grammar, logprobs=logprobs):
            pass
        assert self.last_result is not None
        return self.last_result
