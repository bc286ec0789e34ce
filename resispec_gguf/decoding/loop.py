"""The loop that decodes: it owns every model call of a generation.

A step reads top to bottom: ``plan`` (the draft calls it yields, made here) → one target
decode of the nodes it returns → ``absorb`` (verify) → the commits it asks for → ``emit``.
Times of model calls are added to the generation's ``Stats`` here, the prompt's per model.
"""

from __future__ import annotations

import time
from typing import Iterator

from ..errors import ConstraintError
from .generation import Decode, DraftSync, Generation, Room
from .steps import room_of
from .promptcache import PromptCache, reuse_slot
from .protocol import ModelBackend

__all__ = ["run"]


def run(gen: Generation, target: ModelBackend, draft: ModelBackend | None, cancel=None,
        ram: PromptCache | None = None) -> Iterator[str]:
    """Generate ``gen``'s reply: yield its text pieces as they become final.  ``cancel``: an
    event (``is_set()``) checked before every step; once set, the reply ends there
    ("interrupted"), whether or not its last steps made text.  ``ram``: a RAM prompt cache
    (``promptcache``) for the models' one sequence, as ``batch`` keeps one for its slots:
    what a new prompt evicts is saved there, and a prompt found there is restored."""
    gen.check_fits(target.n_ctx)
    t0 = time.perf_counter()
    reused = _prefill(gen, target, "target", ram)
    t_target = time.perf_counter() - t0
    t_draft = 0.0
    # under auto the draft reads the prompt only when a step first calls it (``lazy_draft``):
    # that catch-up is counted in ``Stats.draft_sync_time``
    eager = gen.uses_draft and not gen.lazy_draft
    if eager:
        t = time.perf_counter()
        _prefill(gen, draft, "draft", ram)
        t_draft = time.perf_counter() - t
    gen.started(reused, time.perf_counter() - t0, draft_synced=eager or not gen.uses_draft)
    gen.stats.prompt_target_time, gen.stats.prompt_draft_time = t_target, t_draft
    t_start = time.perf_counter()
    try:
        try:
            yield from _steps(gen, target, draft, cancel)
        except ConstraintError as e:  # a grammar limit met late, or the mask budget spent
            gen.failed(e)  # the models' uncommitted nodes go at the next sync_prefix
        tail = gen.flush()
        if tail:
            yield tail
    finally:
        gen.closed(time.perf_counter() - t_start)


def _prefill(gen: Generation, model: ModelBackend, role: str, ram: PromptCache | None) -> int:
    """``model``'s cache made to hold ``gen``'s prompt (restored from ``ram`` where that saves
    work); returns the prompt tokens it held already."""
    if ram is not None:
        reuse_slot(ram, model, role, 0, gen.prompt[:-1])
    return model.sync_prefix(gen.prompt)


def _steps(gen: Generation, target: ModelBackend, draft: ModelBackend | None, cancel) -> Iterator[str]:
    while gen.finish_reason is None and not (cancel is not None and cancel.is_set()):
        t_step, synced = time.perf_counter(), gen.stats.draft_sync_time
        call = _draft_calls(gen.plan(_room(target, draft)), draft, gen.stats)
        if call is None:
            break
        t = time.perf_counter()
        rows = target.decode(call.tokens, call.parents)
        gen.stats.target_time += time.perf_counter() - t
        commit = gen.absorb(rows)
        target.commit(commit.target)
        if commit.draft is not None:
            draft.commit(commit.draft)
        # a draft's catch-up on the prompt is prompt work, not the step's decodes
        gen.step_done(time.perf_counter() - t_step - (gen.stats.draft_sync_time - synced))
        yield from gen.emit()


def _room(target: ModelBackend, draft: ModelBackend | None) -> Room:
    if draft is None:
        return room_of(target, None, target_ctx=target.n_ctx, target_past=target.n_past)
    return room_of(target, draft, target_ctx=target.n_ctx, target_past=target.n_past, draft_ctx=draft.n_ctx,
                   draft_past=draft.n_past, draft_nodes=draft.n_seq_max - 1)


def _draft_calls(plan, draft: ModelBackend | None, stats) -> Decode | None:
    """Make the draft calls ``plan`` yields; returns the target decode it ends with."""
    try:
        call = next(plan)
        while True:
            if isinstance(call, DraftSync):  # a catch-up: the draft's share of prompt work
                t = time.perf_counter()
                draft.sync_prefix(call.tokens)
                stats.draft_sync_time += time.perf_counter() - t
                call = plan.send(None)
                continue
            t = time.perf_counter()
            rows = draft.decode(call.tokens, call.parents, call.want)
            stats.draft_time += time.perf_counter() - t
            stats.draft_calls += 1
            call = plan.send(rows)
    except StopIteration as done:
        return done.value
