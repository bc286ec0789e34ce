"""One request's speculative decoding, apart from the model calls: it plans and it absorbs.

Each step:

1. ``plan(room)`` — a generator.  It grows the step's ``DraftTree`` from the root (the last
   emitted token) level by level: it yields each level's draft call (a ``DraftSync`` or a
   ``Decode`` of the frontier) and is sent back the draft's logits rows, from which every
   expanded node draws K candidates (iid; without replacement for rrs; the top-K tokens when
   greedy) after the candidates of the request's sources (``candidates``: the context and
   memory, the prompt's views, the token a grammar forces there); a position the mask
   leaves one token is certain and draws nothing, nor needs a draft row (``tree.growing``:
   the draft evaluates it with the first uncertain node below it).  It returns the ``Decode`` the target must make: the
   root plus every node (just the root for a plain step), or None when the reply is over.
2. ``absorb(rows)`` — walks the target rows from the root: at each expanded node the
   verifier picks a candidate or a fallback token; it descends while the accepted candidate
   has a node, and at a node never expanded it samples a bonus token from p.  Returns the
   ``Commit`` (which nodes each model keeps).
3. ``emit()`` — turns the step's tokens into text (stop strings, end tokens, max_tokens).

``loop.run`` drives one generation; nothing here calls a model, so a loop may drive several
generations with one target decode per step.  ``auto`` is one object (``autorequest.Auto``):
the generation asks it for a plan and for candidate scores, and tells it what each verified
node showed; what it learns is its own business.

The draft phase of step 1 (growing the tree: draws, candidates, draft calls) is
``drafting.DraftPhase``, which ``Generation`` inherits; the messages of the steps (``Room``,
``Decode``, ``DraftSync``, ``Commit``) are in ``steps`` (and importable from here).  This
module holds the rest: the request's state, the target's distributions and masks, the
verification walk and what each model keeps, and the emitted text.
"""

from __future__ import annotations

import time
from typing import Generator, Iterator, Sequence

import numpy as np

from ..config import MAX_TREE_NODES, DraftParams, SamplingParams
from ..errors import ConstraintFault, ContextFullError
from ..kernels import sampling
from ..kernels.verify import verify, verify_greedy
from .autorequest import Auto
from .autotune import COPY_SURE, DRAFT_CATCH_UP
from .candidates import FixedScores, Request, Sources
from .candidates.base import TextCodec
from .candidates.forced import only_token
from .drafting import DraftPhase
from .memory import Memory
from .protocol import ConstraintState
from .seeding import stream
from .stats import Result, Stats, TokenLogprob
from .steps import Commit, Decode, DraftSync, Room  # the step's messages, importable from here too
from .textstream import TextAssembler
from .uniforms import Uniforms
from .tree import DraftTree

__all__ = ["Commit", "Decode", "DraftSync", "Generation", "Room"]

_PLAIN = DraftParams(method="none")
# a target p with more tokens than this is verified densely
_SPARSE_P_MAX = 4096


class Generation(DraftPhase):
    """One request: its RNG, constraint, text assembly and stats; plans and absorbs steps.

    ``vocab``: the target's ``n_vocab``, ``is_eog`` and ``token_piece`` (any
    ``ModelBackend``).  ``has_draft``: a draft model is there to use.  ``auto``: the request's
    ``autorequest.Auto`` when ``dp.method`` is "auto" (else None).  ``logprobs``: None (off), or
    the number of alternatives to report per token.  ``seed``, ``key``: where its uniforms come
    from (``seeding.stream``; ``key`` None: the seed alone).  ``memory``: the engine's memory
    of past answers (read and filled unless ``dp.use_memory`` is off).  ``text``: the target's
    tokenizer, for sources that read the prompt's text (the views); None without one.
    ``text_draft``: a draft of another vocabulary (``textdraft.TextDraft``), the store its
    source reads; None without one.  Its
    candidate sources (``sources``) are built through the registry (``candidates``).
    """

    def __init__(self, prompt_tokens: list[int], sp: SamplingParams, dp: DraftParams, *, vocab, has_draft: bool,
                 seed: int, auto: Auto | None = None, constraint: ConstraintState | None = None,
                 logprobs: int | None = None, memory: Memory | None = None, key: tuple[int, ...] | None = None,
                 text: TextCodec | None = None, text_draft=None):
        self.vocab = vocab
        self.sp = sp
        self.dp = dp  # the configuration of the current step (auto changes it per step)
        self.auto = auto
        self.scores = auto if auto is not None else FixedScores()
        self.plan_ = None  # auto's StepPlan for the current step
        self.seed = seed
        self.key = key  # the ledger's key when the request reads cross-request state (``seeding``)
        self.rng = stream(seed, key)
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
        self.memory = memory if dp.use_memory else None  # the answer joins it at the end
        self.constraint = constraint
        # free candidates: the context and the memory, the prompt's views, the grammar's forced tokens
        stores = {"memory": self.memory} if self.memory is not None else {}
        if text_draft is not None:  # a draft of another vocabulary (``candidates.textdraft``)
            stores["text_draft"] = text_draft
        self.sources = Sources.build(Request(self.prompt, dp, constraint, stores, text), self.stats.candidates)
        self.copy_run = 0  # emitted tokens in a row that a lookup source's leading candidate had predicted
        self._masks: dict[tuple, np.ndarray] = {}  # this step's masks by path from the root
        self._bias = sampling.bias_arrays(sp.logit_bias)  # (ids, biases) or None, added to every row
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
        self.sources.new_step()
        if self.auto is not None:
            forced = self.sources.ahead()
            depth = self.auto.tuner.copy_depth(self.copy_run)
            copy = self.sources.leading_chain(self.copy_run, self._mask if self.constraint is not None else None,
                                              depth, self.auto.tuner.calibration.lookup, COPY_SURE)
            self.plan_ = self.auto.choose(len(self.draft_pending), forced, self.sp.max_tokens - len(self.out),
                                          stale=self.draft_stale, copy=copy)
            self.dp = self.plan_.params if self.plan_ is not None else _PLAIN
            self.sources.ask(self.plan_.ask if self.plan_ is not None else 0)  # the text draft's chain
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
        if room.target_chain is not None:  # recurrent memory: one chain it can undo
            max_nodes = min(max_nodes, room.target_chain)
        max_expanded = min(room.draft_nodes, room.draft_ctx - draft_past) - len(self.draft_pending)
        self._draft_beam = 1 if room.draft_chain is not None else None
        self._target_chain = room.target_chain is not None
        tree, index = yield from self._grow_tree(kind, max_nodes, max_expanded)
        if room.target_chain is not None and len(tree) > 1:
            tree, old_to_new = tree.chain_cut(max_nodes)
            index = index and {old_to_new[n]: d for n, d in index.items() if n in old_to_new}
        self._tree, self._draft_index = tree, index
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
            self.auto.record_time(self.plan_, seconds, len(self.prompt) + len(self.out))
        self.stats.steps += 1
        self.stats.steps_by_kind[self._kind] = self.stats.steps_by_kind.get(self._kind, 0) + 1

    def emit(self) -> Iterator[str]:
        """The text of the step's tokens, as it becomes final; then the candidate sources and
        the constraint move past them."""
        n_out = len(self.out)
        try:
            yield from self._emit(self._emitted)
        finally:  # counted even when the stream closes mid-step: what the step's source paid
            kinds = self.stats.tokens_by_kind
            kinds[self._kind] = kinds.get(self._kind, 0) + len(self.out) - n_out
        self.sources.commit(self.out[n_out:])
        if self.constraint is not None and self.finish_reason is None:
            self.constraint.advance(self.out[n_out:])

    def flush(self) -> str:
        return self.text.flush()

    def closed(self, seconds: float) -> None:
        self.stats.total_time += seconds
        self.stats.tokens = len(self.out)
        if self.auto is not None:
            self.stats.auto = f"{self.auto.summary()}; measured {self.stats.tokens_per_s:.2f} tokens/s"
        # the answer joins the engine's memory, with what auto learnt of the candidates
        self.sources.finish(self.out, self.auto.tuner.calibration.lookup_state() if self.auto is not None else None)

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
        # what the candidates would have been accepted with, learnt for free; the copy run
        self.copy_run = self.sources.plain_step(mask, sure, p_of, tok, self.copy_run, self.auto)
        return tok

    def _copy_run_after(self, path, mask, tok: int) -> int:
        """The copy run once ``tok`` follows ``path`` at a node that proposed nothing (a
        leaf): one longer where the lookup sources' leading candidate there (as ``_propose``
        would give it) is ``tok``.  A chain accepted to its end is still copying; counting its
        bonus token keeps the next step's candidates in the long-run bins, so its chain can
        grow as deep as the copy goes."""
        if not self.sources:
            return 0
        fixed = self.sources.leader(tuple(path), self.copy_run, mask)
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

    # ------------------------------------------------------------------ the tree's verification

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
            if fixed:  # which source's candidate was accepted, if any
                self.sources.count(tree.info[node][1], idx)
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
