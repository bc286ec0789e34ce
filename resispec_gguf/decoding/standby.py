"""A draft model that ``auto`` has stopped calling, closed until a request needs it:
``DraftStandby``.

On a CPU ``auto`` mostly decodes plainly or along copies from the context, and a draft it
does not call still holds its weights and its KV cache in memory (the default 0.5B draft:
about 400 MiB of weights and its context's cache).  An engine with one slot tells its standby
what each request did: after ``IDLE_REQUESTS`` ``auto`` requests in a row that made no draft
call, the engine closes the draft (its requests then plan without draft arms, as they
effectively did).  It is opened again, once, before the request that needs it: one of a
method that only runs with a draft (chain, specinfer, rrs, resispec with the draft on), an
``auto`` request after ``REPROBE_REQUESTS`` requests without it (so that a workload that
changes can bring it back: ``auto`` probes it again), or a caller that asks for its logits.
Reopening reads the file again (from the page cache: a fraction of a second).

Which candidates and draws a request makes depends on whether the draft is open, which
depends on earlier requests.  A seeded request must not read such state with its seed's
stream (the state may have been shaped by that same stream, ``decoding.seeding``), nor lose
what a seed reproduces (the reply of a fresh engine): a seeded ``auto`` request always runs
with the draft open, as on a fresh engine, opening it if it was closed, and is not counted.
Unseeded requests draw fresh entropy, independent of it all; the law of every request is the
target's either way.

Bookkeeping, and the opening and closing themselves (``open`` calls the engine's opener,
``close`` the model's ``close``); no decode here.
"""

from __future__ import annotations

from typing import Callable

from ..config import SPEC_METHODS, DraftParams

__all__ = ["DraftStandby", "IDLE_REQUESTS", "REPROBE_REQUESTS"]

IDLE_REQUESTS = 4  # auto requests in a row without a draft call before the draft is closed
REPROBE_REQUESTS = 32  # requests served with the draft closed before auto may probe it again


class DraftStandby:
    """The bookkeeping of one engine's draft (module docstring).  ``opener()`` opens the
    draft again (the same file and settings)."""

    def __init__(self, opener: Callable, idle: int = IDLE_REQUESTS, reprobe: int = REPROBE_REQUESTS):
        self.opener = opener
        self.idle, self.reprobe = int(idle), int(reprobe)
        self.released = False
        self.quiet = 0  # auto requests in a row that made no draft call
        self.closed_for = 0  # requests served since the draft was closed
        self.releases = 0  # times it was closed (for ``/stats`` and the tests)
        self.described: dict | None = None  # the closed draft's ``describe()``, for ``Engine.info``

    def wanted(self, dp: DraftParams, seeded: bool = False) -> bool:
        """Whether the closed draft must be opened before a request under ``dp`` (``seeded``:
        the request has a seed of its own)."""
        if not self.released or not dp.use_draft:
            return False
        if dp.method == "auto":
            return seeded or self.closed_for >= self.reprobe
        return dp.method in SPEC_METHODS

    def open(self):
        """The draft, opened again (``opener``)."""
        model = self.opener()
        self.released, self.quiet, self.closed_for = False, 0, 0
        return model

    def close(self, model) -> None:  # the engine assigns its None: ``self.draft = standby.close(...)``
        """Close ``model`` (the engine's draft, which ``finished`` said to close); None, the
        engine's draft from now on."""
        self.described = model.describe() if hasattr(model, "describe") else None
        model.close()
        return None

    def finished(self, method: str, draft_calls: int, seeded: bool = False) -> bool:
        """A request of ``method`` ended after ``draft_calls`` draft calls: True when the
        engine should close the draft now (it is then ``released``).  A ``seeded`` request
        is not counted."""
        if seeded:
            return False
        if self.released:
            self.closed_for += 1
            return False
        if method != "auto" or draft_calls:
            self.quiet = 0
            return False
        self.quiet += 1
        if self.quiet < self.idle:
            return False
        self.released, self.closed_for = True, 0
        self.releases += 1
        return True
