"""Predicted against measured step times: ``CurveCheck`` corrects the cost curves ``auto``
plans with when the steps it runs contradict them, and ``outlook`` says before the first
request what ``auto`` expects of this machine.

A curve measured while other work loaded the machine (or on a quieter day, or before a
driver update) steers every step by figures that no longer hold: ``/stats`` once showed a
plain step predicted at 190.8 ms that took 69.2.  Each step a request runs alone is timed
(``AutoTuner.record_time``); over a window of such steps, when the median of measured over
predicted leaves ``[1 / bound, bound]``, both curves are scaled by it for the requests that
start afterwards (never for the request under way: within a request no wall-clock reading
steers a choice) and saved as the figures of the next starts.  The corrected curve is state
that spans requests, shaped by which steps earlier requests ran: a seeded ``auto`` request
takes part in the seed ledger while correction is on (``Engine.seed_key``).

``$RESISPEC_COST_CHECK=0`` turns correction off (the test suite does, so that every engine
plans with the curve it started with).  May import ``costs`` and ``autotune``.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from ..config import DraftParams
from . import costs
from .autotune import AutoTuner
from .stepplan import TABLE_ROWS
from .costs import CostCurve

__all__ = ["BOUND", "WINDOW", "AutoCosts", "CurveCheck", "enabled", "outlook"]

# steps alone judged together: enough that one slow step (a page fault, a GC pause) does not
# move the median, few enough that a wrong curve is corrected within a short reply
WINDOW = 12
# measured over predicted beyond which (or below its inverse) the curves are corrected: the
# host work a step does beside its decodes is not in the curves and is allowed for
BOUND = 1.5


# the one line a start prints when preparing the kernels takes longer than ``SLOW_S``
COMPILING = ("preparing the decoding kernels (compiled with Numba on the first start after an install, about a "
             "minute; later starts read Numba's cache)")
# seconds of kernel preparation after which a start says so: reading Numba's cache takes about
# one on a loaded 2-core machine, compiling a minute
SLOW_S = 3.0


def enabled() -> bool:
    """Whether engines correct their curves (``$RESISPEC_COST_CHECK``, on unless "0" or "off")."""
    return os.environ.get("RESISPEC_COST_CHECK", "1").strip().lower() not in ("0", "off", "no", "false")


def _scaled(curve: CostCurve | None, factor: float) -> CostCurve | None:
    return None if curve is None else CostCurve(curve.rows, tuple(s * factor for s in curve.seconds))


class CurveCheck:
    """The curves an engine plans with, corrected from the steps its requests ran alone.

    ``curves``: the ``(target, draft)`` pair the next request plans with.  ``identities``:
    the cache identities (``costs.curve_identity``) a corrected curve is saved under (None:
    not saved).  Thread-safe: requests on several threads report their steps."""

    def __init__(self, target: CostCurve, draft: CostCurve | None, identities=(None, None), *,
                 window: int = WINDOW, bound: float = BOUND):
        self.curves = (target, draft)
        self.identities = identities
        self.window, self.bound = int(window), float(bound)
        self.scale = 1.0  # the product of the corrections made
        self.corrections = 0
        self.last_ratio = 1.0  # measured over predicted in the last full window
        # seconds a target row pays per token of context (``context_curve``), fitted from the
        # steps: the curves are measured after a short context, and every row of a decode
        # attends to all of it (on the 2-core AMD, 1.5B: 16 rows at 1,300 tokens took 1.35x
        # their curve's figure, one row 1.2x)
        self.alpha = 0.0
        self._fit = [0.0, 0.0, 0]  # sums of x*x and x*r over steps (x = rows * context), and their count
        self._ratios: list[float] = []
        self._lock = threading.Lock()

    def record(self, predicted_s: float, measured_s: float, scale: float | None = None, *, rows: int = 1,
               context: int = 0, extra_s: float = 0.0) -> bool:
        """One step alone was predicted to take ``predicted_s`` and took ``measured_s``;
        True when this step completed a window that corrected the curves.  ``scale``: the
        ``scale`` the prediction's curves had (a request plans all through with the curves
        it started with; without this a long request would correct again what was already
        corrected, compounding).  ``rows``: the target rows it decoded after ``context``
        tokens; ``extra_s``: the part of ``predicted_s`` its curve owed to ``alpha``."""
        if not (predicted_s > 0.0 and measured_s > 0.0):
            return False
        with self._lock:
            base = predicted_s - extra_s
            if scale is not None and scale > 0.0:  # the prediction on the curves as they are now
                base *= self.scale / scale
            self._learn_context(base, measured_s, rows * context)
            predicted_s = base + extra_s
            self._ratios.append(measured_s / predicted_s)
            if len(self._ratios) < self.window:
                return False
            ratio = self.last_ratio = float(np.median(self._ratios))
            self._ratios.clear()
            if 1.0 / self.bound <= ratio <= self.bound:
                return False
            self.curves = (_scaled(self.curves[0], ratio), _scaled(self.curves[1], ratio))
            self.scale *= ratio
            self.corrections += 1
            saved = list(zip(self.identities, self.curves))
        for identity, curve in saved:
            if identity is not None and curve is not None:
                costs.store_corrected(identity, curve)
        return True

    def _learn_context(self, base_s: float, measured_s: float, x: int) -> None:
        """One step's time beyond its curve's figure against its rows times context: the
        least-squares slope through the origin, once a window of steps with a context."""
        if x <= 0:
            return
        fit = self._fit
        fit[0] += float(x) * x
        fit[1] += float(x) * min(max(measured_s - base_s, -base_s), 2.0 * base_s)  # one stalled step is not a trend
        fit[2] += 1
        if fit[2] >= self.window:
            self.alpha = max(0.0, fit[1] / fit[0])

    def context_curve(self, curve: CostCurve | None, context: int) -> CostCurve | None:
        """``curve`` after ``context`` tokens: each row ``alpha`` seconds dearer per token."""
        if curve is None or self.alpha <= 0.0 or context <= 0:
            return curve
        return CostCurve(curve.rows, tuple(s + self.alpha * context * n for n, s in zip(curve.rows, curve.seconds)))

    def describe(self) -> str:
        """One line for ``/stats`` and ``bench``: whether the curves were corrected."""
        context = (f"; a target row {self.alpha * 1e9:.0f} ns dearer per token of context" if self.alpha > 0.0
                   else "")
        if not self.corrections:
            return (f"cost curves as cached (measured/predicted {self.last_ratio:.2f} over the last {self.window} "
                    f"steps){context}")
        return (f"cost curves corrected {self.corrections}x from measured steps (now {self.scale:.2f}x the cached "
                f"figures){context}")


def outlook(tuner, target: CostCurve, info: dict) -> str:
    """What ``auto`` expects here, in one sentence, from the curves and a fresh request's
    ``tuner`` (``AutoTuner``; its acceptance still the prior): whether a chain at that
    acceptance beats plain decoding, and the figure that decides it, a 4-row decode's cost
    against one row's.  ``info``: ``Engine.info()`` (a model with GPU layers or RPC
    workers is not "on this CPU")."""
    gpu = any(int(m.get("n_gpu_layers") or 0) > 0 or m.get("rpc") for m in info.values() if m)
    ratio = target(4) / target(1) if target(1) > 0 else 1.0
    where = "here" if gpu else "on this CPU"
    chain = tuner.expected_case("chain") if "chain" in tuner.arms else 0.0
    if chain > tuner.plain_rate * 1.05:
        return (f"speculation likely: a 4-row decode costs {ratio:.1f}x one row {where}, so a draft's accepted "
                f"tokens come cheap")
    draft = tuner.draft(1) / target(1) if tuner.draft is not None and target(1) > 0 else 0.0
    if tuner.arms and ratio < 1.5 and draft > 0.0:  # rows come cheap: the draft's own calls are what costs
        return (f"plain decoding likely: a draft call costs {draft:.1f}x a 1-row target decode {where}, too dear "
                f"for its tokens; copy-heavy work may still pay (lookup candidates need no draft call)")
    if tuner.arms:
        return (f"plain decoding likely: a 4-row decode costs {ratio:.1f}x one row {where}; drafts pay on a GPU "
                f"or with copy-heavy work (edits, quoting the prompt)")
    return (f"plain decoding: a 4-row decode costs {ratio:.1f}x one row {where}, so no draft could pay even if "
            f"every candidate were accepted")


class AutoCosts:
    """What ``auto``'s plans cost on one engine's ``target`` and ``draft`` (``ModelBackend``
    s): the ``(target, draft)`` curves, measured or read from the disk cache on first use
    (``curves``; ``given``: the pair to use instead, as tests inject), then as ``check``
    corrects them when ``correct`` (None: ``enabled()``); the host time per logits row
    (``row_seconds``; 0 with given curves).  ``note(line)``: told before a measurement.
    ``text``: a draft of another vocabulary (``textdraft.TextDraft``) instead of ``draft``:
    the pair's second curve is its model's, priced as the "text" arm's chains."""

    def __init__(self, target, draft, given=None, correct: bool | None = None, text=None):
        self.text = text is not None
        self.target, self.draft = target, (text.model if text is not None else draft)
        self.measured = given  # the curves as measured or cached (never corrected)
        self.row_s = 0.0 if given is not None else None
        self.correct = enabled() if correct is None else bool(correct)
        self.check: CurveCheck | None = None  # made with the curves, when correcting
        self.note = None

    def curves(self) -> tuple:
        """The ``(target, draft)`` curves the next request plans with."""
        if self.measured is None:
            self.measured = (costs.backend_curve(self.target, self.note, "target"),
                             costs.backend_curve(self.draft, self.note, "draft") if self.draft is not None else None)
        if self.correct and self.check is None:
            ids = tuple(costs.curve_identity(m) if m is not None else None for m in (self.target, self.draft))
            self.check = CurveCheck(*self.measured, ids)
        return self.check.curves if self.check is not None else self.measured

    def tables(self) -> tuple:
        """The current curves as ``(target, draft)`` cost tables (``costs.cost_table``), as a
        ``Batch`` shares a step's rows by them."""
        t, d = self.curves()
        return costs.cost_table(t, TABLE_ROWS), costs.cost_table(None if self.text else d, TABLE_ROWS)

    def row_seconds(self) -> float:
        if self.row_s is None:
            self.row_s = costs.host_row_seconds(self.target.n_vocab)
        return self.row_s

    def tuner(self, dp: DraftParams, has_draft: bool, context: int = 0) -> AutoTuner:
        """A fresh ``AutoTuner`` for one request on the current curves, telling ``check`` of
        its steps.  Fresh, so that its choices, and with them the output, depend only on the
        request, its seed, the curves it starts with and what it carries over (``Engine``'s
        memory); ``dp``'s draws, depth and budget bound what it may choose.  ``context``: the
        prompt's tokens, which every target row of the request attends to (``context_curve``)."""
        t, d = self.curves()
        alpha = self.check.alpha if self.check is not None else 0.0
        t = self.check.context_curve(t, context) if self.check is not None else t
        chain = getattr(self.target, "max_chain", None)
        if self.text:  # the draft is read through text: its curve prices the "text" arm
            text = d if dp.use_draft else None
            tuner = AutoTuner(t, None, dp, has_draft=False, row_s=self.row_seconds(), text=text, max_chain=chain)
        else:
            tuner = AutoTuner(t, d, dp, has_draft=has_draft, row_s=self.row_seconds(), max_chain=chain)
        tuner.check = self.check
        if self.check is not None:
            tuner.check_scale = self.check.scale  # the scale its curves have, for ``CurveCheck.record``
            tuner.check_context = (alpha, context)  # what its target curve owes to the context
        return tuner

    def outlook(self, info: dict) -> str:
        """``outlook`` for a fresh request with a draft if there is one (``info``: ``Engine.info()``)."""
        return outlook(self.tuner(DraftParams(), self.draft is not None), self.curves()[0], info)
