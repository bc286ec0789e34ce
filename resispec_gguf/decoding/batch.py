"""Several requests in the same steps: every active request's tree in one target decode.

A ``Batch`` holds up to ``n_slots`` requests, each a ``Generation`` in a slot of a
``protocol.SlotBackend`` (its committed tokens live in the slot's own sequence).  One call
of ``step`` does two things:

1. **Prefill** — the waiting prompts get ``chunk`` tokens per model in all, in the order
   they were admitted, and those tokens ride in the same decode as the running requests'
   step (the target's, and the draft's first level): a long prompt delays the running
   requests by one chunk per step, never by its whole length (nor does a draft slot that
   holds less of the prompt than the target's), and several short prompts that arrive
   together are prefilled by one decode.  With nothing running, the chunk is a decode of
   its own and the prompts it completes start in the same step.  A waiting prompt that its
   slots already hold whole (its slot's own prefix, or a state restored from the RAM prompt
   cache at admission, ``promptcache``) needs no decode and starts at once.
2. **One step of every running request** — each generation plans its step (``plan``); the
   draft calls they yield are made level by level, *one* draft decode per level holding
   every request's frontier; then *one* target decode holds every request's rows; each
   generation verifies its own rows with its own random stream (``absorb``); one commit per
   model keeps each slot's accepted path.

The row budget.  Before anything is drawn, the step's draft levels are chosen across
requests (``share_rows``): a request under ``auto`` offers its rows, the k-th worth about
``a^k`` expected tokens (``a``: its chain's learnt acceptance per node); the rows are taken
best-first across requests while the step's expected tokens per predicted second (the
measured cost curves: one target decode of all rows, one draft decode per level) keep
rising, and the deepest chain taken sets the levels the step pays for.  A level that pays
only when every request deepens is so paid once for all, where each request alone would
find its call too dear.  Each ``auto`` request then chooses its arm (chain, K-draw tree,
lookup or plain) by what it adds to the whole step (``AutoTuner.in_step_case``) and grows
its tree priced within the step (``stepplan.Background``: the other requests' rows and
tokens as in their past steps, and those levels, where a draft level costs its rows only);
a row must beat the whole step's expected tokens per second.  A request with a fixed
method keeps its own shape; every request is bounded by an equal share of the models'
sequences.

Exactness.  What a request's tree may hold is fixed before its nodes draw and depends only
on what other requests and earlier steps showed, never on its own draws (``tree``'s pruning
rule); each request draws and verifies with its own generator, so its output law is the
target's whatever the others do, and independent of theirs.  The output of a seeded request
can still differ between a run alone and one beside others: its tree's bounds differ (and on
a real model, row values in floating point depend on the batch).  Alone, a request runs
exactly as ``loop.run`` runs it.

No model calls but through the ``SlotBackend`` seam; no threads here (a caller drives
``step``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..config import MAX_TREE_NODES
from ..errors import ConstraintError
from .stepplan import Background
from .generation import Commit, Decode, DraftSync, Generation, Room
from .steps import room_of
from .promptcache import PromptCache, common_prefix, reuse_slot
from .protocol import SlotBackend

__all__ = ["Batch", "Request", "background_of", "share_rows"]

# prompt tokens prefilled per step
DEFAULT_CHUNK = 256


@dataclass(eq=False)
class Request:
    """One generation in a slot.  ``pieces``: text not yet taken by the caller (``take``),
    each with the count of ``gen.logprobs`` entries final when it was; ``done``: the reply is
    over (``gen.result()`` holds it)."""

    gen: Generation
    slot: int
    filled: int = 0  # prompt tokens (of prompt[:-1]) in the target's slot so far
    d_filled: int = 0  # ... in the draft's (it may hold less of the prompt than the target)
    reused: int = 0
    order: int = 0  # admission count: the waiting prompts are prefilled in this order
    prefill_s: float = 0.0  # seconds of the decodes that carried a chunk of its prompt
    prefill_target_s: float = 0.0  # ... of those decodes, the target's
    prefill_draft_s: float = 0.0  # ... the draft's
    fed: bool = False  # the step's decodes carried a chunk of its prompt
    started: bool = False
    done: bool = False
    pieces: list[tuple[str, int]] = field(default_factory=list)
    t_start: float = 0.0
    # what its steps held and yielded (decayed means over its past steps): the background
    # the other requests' plans price their rows against (``background_of``)
    rows: float = 1.0
    tokens: float = 1.0
    draft_rows: float = 0.0  # per draft call
    draft_calls: float = 0.0

    def take(self) -> list[str]:
        """The text pieces since the last take."""
        return [text for text, _ in self.take_marked()]

    def take_marked(self) -> list[tuple[str, int]]:
        """``(text, n_logprobs)`` since the last take."""
        out, self.pieces = self.pieces, []
        return out

    def _put(self, text: str) -> None:
        self.pieces.append((text, len(self.gen.logprobs) if self.gen.logprobs is not None else 0))


class _Part:
    """Rows ``start .. start + n`` of one decode's rows, indexed from 0."""

    def __init__(self, rows, start: int, n: int):
        self._rows, self._start, self._n = rows, start, n

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._rows[self._start + i]


def share_rows(accepts: Sequence[float], drafts: Sequence[bool], base_rows: int, cap: int, target_s: np.ndarray,
               draft_s: np.ndarray, row_s: float = 0.0, overhead_s: float = 0.0,
               base_tokens: float | None = None) -> list[int]:
    """Tree rows for each offering request: ``accepts[i]`` its acceptance per node (its
    k-th row worth ``accepts[i] ** k`` tokens), ``drafts[i]`` whether its rows need draft
    calls, at most ``cap`` each, beside ``base_rows`` rows the step holds anyway (every
    request's root, the fixed-shape trees) worth ``base_tokens`` (default ``base_rows``: a
    token per request; more for a fixed tree).  The rows are ranked best first across requests
    and the count with the best expected tokens per predicted second is kept (every count is
    tried: a cost curve need not be concave); ties keep fewer rows.

    Predicted seconds: one target decode of every row (``target_s[n]``), one draft decode per
    level holding every chain that reaches it (``draft_s[n]``), ``row_s`` per row of host
    work.  Returns the rows per request."""
    n = len(accepts)
    if n == 0 or cap <= 0:
        return [0] * n
    a = np.clip(np.asarray(accepts, np.float64), 0.0, 1.0)
    ks = np.arange(1, cap + 1)
    values = a[:, None] ** ks[None, :]  # [n, cap] the k-th row's worth per request
    flat = values.ravel()
    order = np.argsort(-flat, kind="stable")  # best first; ties: the earlier request
    # Adding a row lifts its request's count by one, so ``reach[lvl]`` (the drafting
    # requests with ``lvl`` rows or more) changes at one level and the draft calls' cost by
    # one term: the loop is O(n * cap) scalars (recounting every level for every count
    # cost ~40 ms a step at 4 requests and 256 sequences).
    owners = (order // cap).tolist()
    worths = flat[order].tolist()
    drafting = [bool(d) for d in drafts]
    target_l, draft_l = [float(x) for x in target_s], [float(x) for x in draft_s]
    nt, nd = len(target_l) - 1, len(draft_l) - 1
    counts = [0] * n
    reach = [0] * (cap + 1)  # reach[lvl] for lvl >= 1
    draft_t = 0.0  # sum over the levels reached of draft_s[reach[lvl]]
    best_k, best_ratio = 0, -1.0
    value = float(base_rows if base_tokens is None else base_tokens)
    for k in range(0, len(order) + 1):
        if k:
            i = owners[k - 1]
            counts[i] += 1
            value += worths[k - 1]
            if drafting[i]:
                had = reach[counts[i]]
                reach[counts[i]] = had + 1
                draft_t += draft_l[min(had + 1, nd)] - (draft_l[min(had, nd)] if had else 0.0)
        rows = base_rows + k
        t = target_l[min(rows, nt)] + row_s * rows + overhead_s + draft_t
        ratio = value / t if t > 0 else value
        if ratio > best_ratio * (1.0 + 1e-9):
            best_k, best_ratio = k, ratio
    out = [0] * n
    for i in owners[:best_k]:
        out[i] += 1
    return out


class Batch:
    """Requests in the slots of a target (and draft) ``SlotBackend`` pair, stepped together
    (module docstring).  ``tables``: the ``(target, draft)`` cost tables by rows
    (``costs.cost_table``) that share the rows out; None: equal shares only."""

    def __init__(self, target: SlotBackend, draft: SlotBackend | None, *, chunk: int = DEFAULT_CHUNK,
                 tables=None, row_s: float = 0.0, ram: PromptCache | None = None):
        if draft is not None and draft.n_slots != target.n_slots:
            raise ValueError(f"the draft has {draft.n_slots} slots, the target {target.n_slots}")
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, got {chunk}")
        self.target, self.draft = target, draft
        self.chunk = int(chunk)
        self.tables = tables
        self.row_s = row_s
        self.ram = ram
        self.slots: list[Request | None] = [None] * target.n_slots
        self._admitted = [-1] * target.n_slots  # per slot, the admission count when last given a request
        self._admissions = 0

    # ------------------------------------------------------------------ admission

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    @property
    def busy(self) -> int:
        return sum(r is not None for r in self.slots)

    @property
    def requests(self) -> list[Request]:
        return [r for r in self.slots if r is not None]

    def free_slot(self, prompt: Sequence[int]) -> int | None:
        """The free slot whose cached tokens share the longest prefix with ``prompt``; on ties
        the one admitted to least recently (so that what was used last stays in place, and
        the slots take turns rather than one of them being overwritten each time); None when
        every slot is busy."""
        best, best_key = None, None
        for s, r in enumerate(self.slots):
            if r is not None:
                continue
            key = (common_prefix(self.target.slot_tokens(s), prompt), -self._admitted[s])
            if best_key is None or key > best_key:
                best, best_key = s, key
        return best

    def admit(self, gen: Generation, slot: int | None = None) -> Request:
        """Put ``gen`` in a free slot (``free_slot`` unless given); its prompt is prefilled
        by the next steps.  ``ContextFullError`` when the prompt cannot fit a slot,
        ``RuntimeError`` when no slot is free."""
        gen.check_fits(self.target.n_ctx)
        slot = self.free_slot(gen.prompt) if slot is None else slot
        if slot is None or self.slots[slot] is not None:
            raise RuntimeError("no free slot")
        req = Request(gen, slot, order=self._admissions)
        req.reused = req.filled = reuse_slot(self.ram, self.target, "target", slot, gen.prompt[:-1])
        self.target.sync_slot(slot, gen.prompt[: req.filled + 1])  # nothing after the reused prefix
        if gen.uses_draft and not gen.lazy_draft:  # under auto the draft catches up when a step calls it
            req.d_filled = reuse_slot(self.ram, self.draft, "draft", slot, gen.prompt[:-1])
            self.draft.sync_slot(slot, gen.prompt[: req.d_filled + 1])
        self.slots[slot] = req
        self._admitted[slot], self._admissions = self._admissions, self._admissions + 1
        return req

    def cancel(self, req: Request) -> None:
        """End ``req`` now (its finish reason stays None: "interrupted") and free its slot.
        Between steps no node is uncommitted, so nothing else is touched."""
        if not req.done:
            self._close(req)

    # ------------------------------------------------------------------ steps

    def step(self) -> list[Request]:
        """Prefill and one step of every running request (module docstring); returns the
        requests that got text or ended (their slots are free again once ``done``)."""
        for r in self.requests:
            if not r.started and self._held(r):
                self._start(r)
        waiting = sorted((r for r in self.requests if not r.started), key=lambda r: r.order)
        if waiting and not any(r.started for r in self.requests):
            t0 = time.perf_counter()
            self._prefill_alone(self.target, waiting, "filled")
            if self.draft is not None:
                self._prefill_alone(self.draft, waiting, "d_filled")
            self._prefilled(waiting, time.perf_counter() - t0)
            waiting = []
        running = [r for r in self.requests if r.started]
        return self._step(running, waiting) if running else []

    def _start(self, r: Request) -> None:
        r.gen.started(r.reused, r.prefill_s, draft_synced=not r.gen.lazy_draft)
        r.gen.stats.prompt_target_time, r.gen.stats.prompt_draft_time = r.prefill_target_s, r.prefill_draft_s
        r.started, r.t_start = True, time.perf_counter()

    def _held(self, r: Request) -> bool:
        """Whether ``r``'s slots hold all of its prompt before its root (its prefill decodes
        nothing)."""
        last = len(r.gen.prompt) - 1
        return r.filled == last and (r.d_filled == last or not _prefills_draft(r.gen))

    def _chunks(self, model: SlotBackend, waiting: list[Request], fill: str, room: int) -> dict[int, list[int]]:
        """The prompt tokens ``model`` takes this step, ``{slot: tokens}``: ``chunk`` at most in
        all (and ``room``), from the waiting requests in order; each request's ``fill``
        attribute (``filled`` or ``d_filled``) counts what its slot holds."""
        out, budget = {}, min(self.chunk, room)
        for r in waiting:
            if budget <= 0:
                break
            if fill == "d_filled" and not _prefills_draft(r.gen):
                continue
            have, last = getattr(r, fill), len(r.gen.prompt) - 1
            take = min(last - have, budget)
            if take > 0:
                out[r.slot] = list(r.gen.prompt[have: have + take])
                budget -= take
        return out

    def _prefill_alone(self, model: SlotBackend, waiting: list[Request], fill: str) -> None:
        """A decode of ``model`` holding nothing but the waiting prompts' chunks."""
        chunks = self._chunks(model, waiting, fill, model.n_batch)
        if chunks:
            t = time.perf_counter()
            model.decode_slots([], [], [], prefill=chunks)
            _took(waiting, chunks, fill, time.perf_counter() - t)

    def _prefilled(self, waiting: list[Request], seconds: float) -> None:
        """After a decode that carried the waiting prompts' chunks: its time to the prompts it
        fed, and those now held whole start."""
        for r in waiting:
            if r.fed:  # a prompt that only waited for its turn counts none of it
                r.prefill_s += seconds
                r.fed = False
            if self._held(r):
                self._start(r)

    def _rooms(self, reqs: list[Request]) -> dict[Request, Room]:
        t, d = self.target, self.draft
        share = (t.n_seq_max - t.n_slots) // len(reqs) - 1  # non-root target nodes each
        drafting = sum(r.gen.uses_draft for r in reqs)
        d_share = (d.n_seq_max - d.n_slots) // max(1, drafting) if d is not None else 0
        levels = self._levels(reqs, share) if len(reqs) > 1 else 0
        for r in reqs:
            if r.gen.auto is not None:
                others = [o for o in reqs if o is not r]
                r.gen.auto.share_step(background_of(others, levels) if others else None)
        rooms, nodes = {}, min(MAX_TREE_NODES, share)
        for r in reqs:
            if d is None:
                rooms[r] = room_of(t, d, target_ctx=t.n_ctx, target_past=t.slot_past(r.slot), tree_nodes=nodes)
            else:
                rooms[r] = room_of(t, d, target_ctx=t.n_ctx, target_past=t.slot_past(r.slot), draft_ctx=d.n_ctx,
                                   draft_past=d.slot_past(r.slot), draft_nodes=d_share, tree_nodes=nodes)
        return rooms

    def _levels(self, reqs: list[Request], cap: int) -> int:
        """The draft levels the step's rows pay for across requests: the deepest chain of an
        ``auto`` request drafting from the draft model when the rows are shared out
        (``share_rows``); the others keep their own shapes.  0 without cost tables."""
        if self.tables is None:
            return 0
        offers, base = [], 0
        for r in reqs:
            gen = r.gen
            base += 1
            if gen.auto is not None:
                offers.append(r)
            elif gen.dp.method != "none":
                base += min(cap, gen.dp.max_budget)
        if not offers:
            return 0
        accepts = [_chain_accept(r.gen.auto.tuner) for r in offers]
        drafts = [r.gen.uses_draft for r in offers]
        counts = share_rows(accepts, drafts, base, min(cap, MAX_TREE_NODES), self.tables[0], self.tables[1],
                            self.row_s, base_tokens=len(reqs))
        return max((n for n, d in zip(counts, drafts) if d), default=0)

    def _step(self, reqs: list[Request], waiting: list[Request]) -> list[Request]:
        """One step of the running ``reqs``, carrying the ``waiting`` prompts' chunks."""
        t_step = time.perf_counter()
        rooms = self._rooms(reqs)
        plans = {r: r.gen.plan(rooms[r]) for r in reqs}
        calls: dict[Request, Decode] = {}  # draft calls waiting for this level's decode
        finals: dict[Request, Decode | None] = {}  # target decodes
        failed: set[Request] = set()
        for r in reqs:
            self._advance(r, plans[r], None, calls, finals, failed, first=True)
        dmap, drafted, levels = self._draft_levels(plans, calls, finals, failed, waiting)
        tmap, commits = self._target_decode(finals, failed, waiting)
        self.target.commit_slots({r.slot: [tmap[r] + i for i in c.target] for r, c in commits.items()})
        if self.draft is not None:
            self.draft.commit_slots({r.slot: [dmap[r][i] for i in c.draft] for r, c in commits.items()
                                     if c.draft is not None})
        seconds = time.perf_counter() - t_step
        self._prefilled(waiting, seconds)
        for r in commits:
            r.gen.step_done(seconds)
            n_out = len(r.gen.out)
            try:
                for piece in r.gen.emit():
                    r._put(piece)
            except ConstraintError as e:  # committing the tokens to it failed: this request's own end
                r.gen.failed(e)
            _learn(r, len(finals[r].tokens), len(r.gen.out) - n_out, drafted.get(r, 0), levels.get(r, 0))
            if r.gen.auto is not None:
                r.gen.auto.observe_in_step(r.gen.plan_, len(finals[r].tokens), levels.get(r, 0))
        for r in reqs:
            if r.gen.finish_reason is not None:
                self._close(r)
        return [r for r in reqs if r.pieces or r.done]

    def _draft_levels(self, plans, calls, finals, failed, waiting):
        """The draft decodes of a step: one per level, holding every request's call of that
        level, until every plan has reached its target decode (into ``finals``); the first
        also holds the ``waiting`` prompts' chunks (a decode of their own when the step makes
        no draft call).  Returns ``(dmap, drafted, levels)``: per request, its draft nodes'
        indices among the step's, and its draft rows and calls this step."""
        dmap: dict[Request, list[int]] = {r: [] for r in plans}  # draft node -> index in the step
        n_draft = 0
        drafted: dict[Request, int] = {}
        levels: dict[Request, int] = {}
        pending = waiting if self.draft is not None else []
        while calls:
            order = list(calls)
            tokens, parents, slots, want, spans = [], [], [], [], []
            for r in order:
                c, m = calls[r], dmap[r]
                w = np.ones(len(c.tokens), bool) if c.want is None else np.asarray(c.want, bool)
                start = sum(want)
                for tok, par in zip(c.tokens, c.parents):
                    tokens.append(int(tok))
                    parents.append(-1 if par < 0 else m[par])
                    slots.append(r.slot)
                    m.append(n_draft + len(tokens) - 1)
                want += w.tolist()
                spans.append((start, int(w.sum())))
            chunks = self._chunks(self.draft, pending, "d_filled", self.draft.n_batch - len(tokens))
            t = time.perf_counter()
            rows = self.draft.decode_slots(tokens, parents, slots, want, prefill=chunks)
            dt = time.perf_counter() - t
            _took(pending, chunks, "d_filled", dt)
            pending = []
            n_draft += len(tokens)
            for r in order:
                drafted[r] = drafted.get(r, 0) + len(calls[r].tokens)
                levels[r] = levels.get(r, 0) + 1
            calls = {}
            for r, (start, n) in zip(order, spans):
                r.gen.stats.draft_time += dt
                r.gen.stats.draft_calls += 1
                self._advance(r, plans[r], _Part(rows, start, n), calls, finals, failed)
        if pending:
            self._prefill_alone(self.draft, pending, "d_filled")
        return dmap, drafted, levels

    def _target_decode(self, finals, failed, waiting):
        """One target decode of every request's rows and the ``waiting`` prompts' chunks, each
        request absorbing its own rows.  Returns
        ``(tmap, commits)``: where each request's rows start, and the commits of those whose
        verification did not fail (a failed one ends alone, into ``failed``)."""
        tmap: dict[Request, int] = {}
        tokens, parents, slots = [], [], []
        for r, call in finals.items():
            if call is None:
                continue
            tmap[r] = len(tokens)
            for tok, par in zip(call.tokens, call.parents):
                tokens.append(int(tok))
                parents.append(-1 if par < 0 else tmap[r] + par)
                slots.append(r.slot)
        commits: dict[Request, Commit] = {}
        chunks = self._chunks(self.target, waiting, "filled", self.target.n_batch - len(tokens))
        if tokens or chunks:
            t = time.perf_counter()
            rows = self.target.decode_slots(tokens, parents, slots, prefill=chunks)
            dt = time.perf_counter() - t
            _took(waiting, chunks, "filled", dt)
            for r, start in tmap.items():
                r.gen.stats.target_time += dt
                try:
                    commits[r] = r.gen.absorb(_Part(rows, start, len(finals[r].tokens)))
                except ConstraintError as e:
                    r.gen.failed(e)
                    failed.add(r)
        return tmap, commits

    def _advance(self, r: Request, plan, sent, calls, finals, failed, first: bool = False) -> None:
        """Run ``r``'s plan to its next draft ``Decode`` (into ``calls``) or its target
        ``Decode`` (into ``finals``; None: the reply is over), making its ``DraftSync``s."""
        try:
            call = next(plan) if first else plan.send(sent)
            while isinstance(call, DraftSync):
                if not first:
                    raise RuntimeError("a draft re-sync after the step's first draft call")
                self.draft.sync_slot(r.slot, call.tokens)
                call = plan.send(None)
            calls[r] = call
        except StopIteration as done:
            finals[r] = done.value
        except ConstraintError as e:  # a grammar limit met late, or the mask budget spent
            r.gen.failed(e)
            failed.add(r)

    def _close(self, r: Request) -> None:
        gen = r.gen
        if r.started:
            tail = gen.flush()
            if tail:
                r._put(tail)
            gen.closed(time.perf_counter() - r.t_start)
        r.done = True
        self.slots[r.slot] = None


def _took(waiting: list[Request], chunks: dict[int, list[int]], fill: str, seconds: float) -> None:
    """After a decode of ``seconds`` that held ``chunks`` (``Batch._chunks``): each request's
    ``fill`` grows by its chunk, and its model's prefill time by the decode's."""
    spent = "prefill_target_s" if fill == "filled" else "prefill_draft_s"
    for r in waiting:
        if r.slot in chunks:
            setattr(r, fill, getattr(r, fill) + len(chunks[r.slot]))
            setattr(r, spent, getattr(r, spent) + seconds)
            r.fed = True


def _chain_accept(tuner) -> float:
    """The chance that a request's best path goes one node deeper: its chain arm's learnt
    acceptance (learnt at every drafted node whatever ran), else its arm's.  A K-draw
    tree accepts a candidate at a node more often, but its path goes on only through the
    child it expanded, which is the draft's best guess: about a chain's draw."""
    chain = tuner.arms.get("chain")
    return chain.accept if chain is not None else tuner.accept


def _learn(r: Request, rows: int, tokens: int, drafted: int, calls: int, keep: float = 0.5) -> None:
    """One more step of ``r`` into its decayed means (``Request.rows`` ...)."""
    r.rows = keep * r.rows + (1 - keep) * rows
    r.tokens = keep * r.tokens + (1 - keep) * max(1, tokens)
    r.draft_rows = keep * r.draft_rows + (1 - keep) * (drafted / calls if calls else 0.0)
    r.draft_calls = keep * r.draft_calls + (1 - keep) * calls


def background_of(others: list[Request], levels: int = 0) -> Background:
    """What ``others`` are expected to hold in the next step: their rows, tokens, draft rows
    per call and draft calls as in their past steps (decayed means).  ``levels``: the draft
    levels the step pays for (``Batch._levels``; 0: none chosen), which stand for the past
    calls of the ``auto`` requests among them: made for whoever deepens, so a plan prices
    them at its rows (a call of a row at least), however deep the others went before."""
    draft_rows = int(round(sum(o.draft_rows for o in others)))
    calls = [o.draft_calls for o in others if not levels or o.gen.auto is None]
    return Background(rows=int(round(sum(o.rows for o in others))), value=float(sum(o.tokens for o in others)),
                      draft_rows=max(draft_rows, 1 if levels else 0),
                      draft_levels=max([levels] + [int(round(c)) for c in calls]))


def _prefills_draft(gen: Generation) -> bool:
    """Whether the draft's slot is given the prompt before the request starts (not under
    ``auto``, whose steps bring the draft up to date when they call it: ``lazy_draft``)."""
    return gen.uses_draft and not gen.lazy_draft
