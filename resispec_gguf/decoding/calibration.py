"""What ``auto`` believes about its candidates: ``Calibration``, the learnt chance that the
verifier accepts a draft candidate (by its first guess, per K) or a candidate of a source (by
the source's bin), as decayed counts with a prior.

The sources' bins are not packed here: each registered source (``candidates.base``) says how
many it needs and their priors, and ``candidates.layout()`` gives each its range, in
registration order.  ``FORCED_BIN`` (the grammar's one bin), ``lookup_bin`` (the context's
leading candidate's) and ``is_memory_bin`` name bins of that layout for the modules that ask
about those sources by bin.

Plain NumPy over the layout.
"""

from __future__ import annotations

import bisect

import numpy as np

from .candidates import context, layout

__all__ = ["Calibration", "FORCED_BIN", "is_memory_bin", "lookup_bin"]

# bins of a draft candidate's probability q
_Q_EDGES = np.array([0.0, 0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95, 1.0 + 1e-9])
_Q_EDGE_LIST = _Q_EDGES.tolist()  # for bisect: a scalar look-up without NumPy's call overhead
FORCED_BIN = layout().bin("forced", 0)
_CONTEXT = layout().offset["context"]
_MEMORY_BINS = frozenset(_CONTEXT + b for b in context.ContextSource.apart)
_TEXT_BINS = np.array(layout().ranges["text draft"])  # the bins of a draft of another vocabulary


# observations a bin carried over from earlier requests is worth at most (``carry_lookup``)
CARRIED_WEIGHT = 16.0


def is_memory_bin(b: int) -> bool:
    """Whether bin ``b`` holds candidates from the memory of past answers."""
    return b in _MEMORY_BINS


def lookup_bin(match: int, run: int) -> int:
    """The bin of a context candidate that leads its node (``context.leading_bin``)."""
    return _CONTEXT + context.leading_bin(match, run)


class Calibration:
    """Decayed acceptance counts per bin, with a prior worth ``prior_weight`` observations.

    A draft candidate is binned by the chance of acceptance the model first gives it (its
    node's acceptance shared in proportion to q, see ``autorequest.Auto.weights``), separately per K
    (draws at its node): the learnt rate per bin corrects that guess where the draft's q
    misleads (an over-confident draft, the best-first choice of which nodes grow, ResiSpec
    deferring a first draw to later ones).  Prior: the guess itself.  A lookup candidate is
    binned by its source (``candidates.layout``: the context's leading candidate by match and
    copy run, prior 0.15 to 0.85; the grammar's forced candidates in ``FORCED_BIN``, prior
    0.9).  The request's own counts take over quickly.  An observation may be a 0/1 outcome
    or, where it is known, the exact chance of acceptance."""

    def __init__(self, decay: float = 0.98, prior_weight: float = 2.0):
        lay = layout()
        self._leading = np.array(lay.leading)  # ``mean_lookup``'s bins
        self._below = lay.below  # each bin's lower neighbour on its source's ladder (``lookup``)
        self.decay = decay
        self.prior_weight = prior_weight
        self._draft: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # K -> (accepted, seen) per bin
        self.look_acc = np.array(lay.priors) * prior_weight
        self.look_seen = np.full(len(lay.priors), prior_weight)
        self.node_acc, self.node_seen = 0.0, 0.0

    def _counts(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        c = self._draft.get(k)
        if c is None:
            mids = 0.5 * (_Q_EDGES[:-1] + _Q_EDGES[1:])
            c = self._draft[k] = (mids * self.prior_weight, np.full(len(mids), self.prior_weight))
        return c

    @staticmethod
    def _bin(guess: float) -> int:
        return bisect.bisect_right(_Q_EDGE_LIST, guess) - 1

    def draft(self, guess: float, k: int = 1) -> float:
        acc, seen = self._counts(k)
        b = self._bin(guess)
        return float(acc[b] / seen[b])

    def observe_draft(self, guess: float, accepted: float, k: int = 1) -> None:
        acc, seen = self._counts(k)
        b = self._bin(guess)
        acc[b] = acc[b] * self.decay + float(accepted)
        seen[b] = seen[b] * self.decay + 1.0

    def lookup(self, b: int) -> float:
        """The acceptance chance of a candidate in bin ``b``: its learnt rate, and on a ladder
        of copy runs (``candidates.base``) at least that of every bin below it: a copy that
        has gone on longer is believed at least as much as a shorter one.  Without this a
        chain's deeper nodes (longer runs, seldom seen at the start of a request) would be
        scored on their priors until a long run had been decoded plainly."""
        acc, seen = self.look_acc, self.look_seen
        rate = acc[b] / seen[b]
        b = self._below[b]
        while b >= 0:
            rate = max(rate, acc[b] / seen[b])
            b = self._below[b]
        return float(rate)

    def mean_lookup(self) -> float:
        """The acceptance chance of a context candidate that leads its node, over its bins as
        they were seen (the forced bin is the grammar's, not the context's).  The long
        runs' bins are left out: they are where a copy has already gone on for a while, and
        their priors would lift the mean of a request that never copies."""
        return float(self.look_acc[self._leading].sum() / self.look_seen[self._leading].sum())

    def text_draft(self) -> float:
        """The acceptance chance of a candidate of the draft of another vocabulary
        (``candidates.textdraft``), over its bins as they were seen: what one level of its
        chain is worth."""
        return float(self.look_acc[_TEXT_BINS].sum() / self.look_seen[_TEXT_BINS].sum())

    def node_lookup(self) -> float:
        """The chance that a node's context and memory candidates, all of them, hold the
        token the target emits there (decayed over the nodes seen; the prior, worth
        ``prior_weight`` nodes, is the leading candidate's chance ``mean_lookup``): what one
        level of a tree without draft rows is worth."""
        w = self.prior_weight
        return float((self.node_acc + w * self.mean_lookup()) / (self.node_seen + w))

    def observe_node_lookup(self, chance: float) -> None:
        self.node_acc = self.node_acc * self.decay + float(chance)
        self.node_seen = self.node_seen * self.decay + 1.0

    def lookup_state(self) -> tuple:
        """The lookup bins' and the node estimate's counts, for ``carry_lookup``."""
        return self.look_acc.copy(), self.look_seen.copy(), self.node_acc, self.node_seen

    def carry_lookup(self, state: tuple, weight: float = CARRIED_WEIGHT) -> None:
        """Start from another request's ``lookup_state``, each bin (and the node estimate)
        worth ``weight`` observations at most, so that this request's own still move it.  A
        request of 64 tokens sees a few candidates per bin: without this its choices would
        rest on the priors alone."""
        acc, seen, node_acc, node_seen = state
        if acc.shape != self.look_acc.shape:  # learnt under another layout (a source registered since)
            return
        scale = np.minimum(1.0, weight / np.maximum(seen, 1e-12))
        self.look_acc, self.look_seen = acc * scale, seen * scale
        f = min(1.0, weight / max(node_seen, 1e-12))
        self.node_acc, self.node_seen = node_acc * f, node_seen * f

    def observe_lookup(self, b: int, accepted: float) -> None:
        self.look_acc[b] = self.look_acc[b] * self.decay + float(accepted)
        self.look_seen[b] = self.look_seen[b] * self.decay + 1.0
