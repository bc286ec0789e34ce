"""``auto``'s arms and what they are priced at: each arm's learnt figures (``Arm``) and the
projections ``AutoTuner`` compares them by (``ArmPrices``), the text draft's chain included.

* ``Arm`` — speculation of one shape (a draft chain, a K-draw draft tree, lookup, the text
  draft, grammar steps): its decayed rate over its steps, its acceptance, when to try it again.
* ``ArmPrices`` — tokens/s of the best chain of an arm if every candidate were accepted
  (``best_case``), at the acceptance learnt so far (``expected_case``), along a
  constraint's forced run (``forced_case``), and of the whole step beside other requests
  (``in_step_case``); the footing an arm not yet run is projected on (``footing``).
* The text route (a draft of another vocabulary, ``candidates.textdraft``): its chain's
  seconds by length (``text_seconds``: ``TEXT_SYNC_ROWS`` re-read, then a row per token) and
  how long a chain to ask for (``ArmPrices.text_ask``: the best depth at the acceptance its
  bins have shown).

Pricing only: no choice is made and nothing is learnt here (``autotune``), and no model is
called (the cost curves are measured by ``costs``).  Imports only its ``decoding``
neighbours ``calibration``, ``costs`` and ``stepplan``; ``autotune`` imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .calibration import FORCED_BIN, Calibration
from .costs import CostCurve
from .stepplan import Background, in_step_rate

# how deep a copy's step may go: twice the copy run so far, at least COPY_FIRST (a copy that has
# gone on for r tokens is trusted for about r more: a 16-row step on this CPU costs what 7-9
# plain steps do, and the code workload's short copies lost them at full depth), or deeper at
# no more cost (``ArmPrices.copy_depth``)
COPY_FIRST = 4

__all__ = ["COPY_FIRST", "TEXT_SYNC_ROWS", "Arm", "ArmPrices", "copy_depth", "draws_of", "text_seconds"]

# rows of the boundary window a draft of another vocabulary re-reads before its chain (the
# token kept back and the new text's: ``textdraft.resync``), priced as one call of its own
TEXT_SYNC_ROWS = 2


def copy_depth(cost, run: int, top: int) -> int:
    """Candidates a copy's chain may hold after a copy run of ``run`` tokens: twice the run (at
    least ``COPY_FIRST``, at most ``top``), or more where a deeper step costs no more
    (``cost(rows)``: seconds of a decode of that many rows; llama.cpp's batched CPU kernels make
    some row counts cheaper than smaller ones: 16 rows cost less than 12 on the 2-core AMD)."""
    base = min(top, max(COPY_FIRST, 2 * int(run)))
    price = cost(base + 1)
    return max(d for d in range(base, top + 1) if cost(d + 1) <= price)


@dataclass
class Arm:
    """Speculation of one shape: its rate, its acceptance, when to try it again.

    The rate is tokens per predicted second over its steps (decayed).  A step's tokens are
    counted as its plan's expected tokens E times the arm's realised / expected ratio over
    the whole request: that ratio corrects the model's bias, and E varies far less from step
    to step than the tokens a step happens to yield, so arms are compared on fewer steps."""

    tokens: float = 0.0  # decayed sums of expected tokens and predicted seconds over its steps
    seconds: float = 0.0
    real: float = 0.0  # realised and expected tokens over the request (not decayed)
    expected: float = 0.0
    steps: int = 0
    backoff: int = 4  # plain steps to wait after a losing probe (doubles)
    wait: int = 0  # steps left before the next probe
    due: bool = False  # its wait ran out: to be tried again (or, if hopeless, to wait again)
    accept: float = 0.6  # chance a reached, expanded node has a candidate accepted (decayed; prior)
    acc_n: float = 2.0
    children: float = 1.0  # distinct candidates per expanded node (decayed, over past steps)
    k: int = 0  # draws per node of a draft arm (0: lookup)
    exact: bool = False  # its acceptance and children are learnt exactly at every drafted node
    promise: float = 0.0  # ``expected_case`` when its last step was planned (its rate was earned at that)
    width: float = 0.0  # non-root target rows per draft call of its steps beside others (decayed; 0: none yet)

    PRIOR_TOKENS = 12.0  # the realised / expected ratio starts at 1, worth this many tokens

    @property
    def rate(self) -> float:
        if self.seconds <= 0:
            return 0.0
        return self.ratio * self.tokens / self.seconds

    def learn(self, accept: float, decay: float, children: float | None = None) -> None:
        """One more node's acceptance (and width) into the decayed means."""
        w = self.acc_n * decay
        self.accept = (self.accept * w + accept) / (w + 1.0)
        if children is not None:
            self.children = (self.children * w + children) / (w + 1.0)
        self.acc_n = w + 1.0

    @property
    def ratio(self) -> float:
        """Realised over expected tokens over the request (starting at 1)."""
        return (self.real + self.PRIOR_TOKENS) / (self.expected + self.PRIOR_TOKENS)

    def observe_width(self, width: float, keep: float = 0.7) -> None:
        self.width = width if self.width <= 0.0 else keep * self.width + (1.0 - keep) * width

    def observe(self, tokens: int, expected: float, seconds: float, decay: float) -> None:
        self.tokens = self.tokens * decay + expected
        self.seconds = self.seconds * decay + seconds
        self.real += tokens
        self.expected += expected
        self.steps += 1


def draws_of(arm: str) -> int:
    return 1 if arm == "chain" else int(arm[4:]) if arm.startswith("tree") else 0


def text_seconds(text: CostCurve | None, depth: int) -> np.ndarray:
    """``[0, s(1), .., s(depth)]``: the predicted seconds of the text draft's chain of n
    tokens, one call re-reading the boundary window (``TEXT_SYNC_ROWS``) and one row per
    token; zeros without one (its re-tokenizing is host work of a few tokens, left out)."""
    if text is None:
        return np.zeros(depth + 1)
    n = np.arange(depth + 1)
    return np.where(n > 0, text(TEXT_SYNC_ROWS) + n * text(1), 0.0)


class ArmPrices:
    """The projections ``AutoTuner`` chooses by (it inherits them), read from its fields:
    ``limits`` (``config.DraftParams``), the cost tables ``target_s``/``draft_s`` (seconds by
    rows) and the curves ``target``/``draft``, ``text_s`` (``text_seconds``), ``overhead_s``
    and ``row_s`` (host seconds per step and per row), ``arms`` (``Arm`` by name),
    ``calibration`` and ``background`` (the step's other requests, or None)."""

    limits: object
    target: CostCurve
    draft: CostCurve | None
    target_s: np.ndarray
    draft_s: np.ndarray
    text_s: np.ndarray
    overhead_s: float
    row_s: float
    arms: dict
    calibration: Calibration
    background: Background | None

    def best_case(self, kind: str) -> float:
        """Tokens/s of the best chain of ``kind`` if every candidate were accepted."""
        best = 0.0
        for depth in range(1, self.limits.max_depth + 1):
            t = self.target(depth + 1) + self.overhead_s + (depth + 1) * self.row_s
            if kind == "text":
                t += self.text_s[depth]
            elif kind != "lookup":
                t += depth * (self.draft(1) + self.row_s)
            best = max(best, (depth + 1) / t)
        return best

    def expected_case(self, kind: str, pending: int = 1) -> float:
        """Tokens/s of the best chain of ``kind`` at the acceptance learnt so far (a draft
        arm: its acceptance per reached node; lookup: its best bin's rate; text: its bins'),
        with the draft's catch-up on ``pending`` tokens."""
        return float(np.max(self._chain_rates(kind, pending)))

    def _chain_rates(self, kind: str, pending: int = 1) -> np.ndarray:
        """``expected_case``'s tokens/s per depth 1 .. ``max_depth``."""
        if kind == "lookup":
            a = self.lookup_accept()
        elif kind == "text":
            a = self.calibration.text_draft()
        else:  # a ResiSpec node accepts at least as often as a chain's draw: sum(min(p, F q)), F >= 1
            a = max(self.arms[kind].accept, self.arms["chain"].accept if "chain" in self.arms else 0.0)
        depth = np.arange(1, self.limits.max_depth + 1)
        t = self.target_s[depth + 1] + self.overhead_s + (depth + 1) * self.row_s
        if kind == "text":
            t = t + self.text_s[depth]
        elif kind != "lookup":
            t = t + self.draft_s[min(pending, len(self.draft_s) - 1)] + (depth - 1) * self.draft_s[1] + depth * self.row_s
        value = np.cumsum(a ** np.arange(self.limits.max_depth + 1))[1:]  # 1 + a + ... + a^depth
        return value / t

    def text_ask(self) -> int:
        """How many tokens to ask the text draft for at a step of the "text" arm: the chain
        length with the best ``expected_case`` at the acceptance its candidates have shown
        up to the last step (its bins, ``Calibration.text_draft``), each token's seconds
        from its curve.  Fixed before the step draws."""
        return int(np.argmax(self._chain_rates("text"))) + 1

    def lookup_accept(self) -> float:
        """A level of a tree without draft rows: the chance that the context's and memory's
        candidates at a node hold the emitted token (``Calibration.node_lookup``)."""
        return self.calibration.node_lookup()

    def footing(self) -> float:
        """How far the best arm that ran beat its projection (its rate over ``expected_case``
        when its last step was planned; at least 1).  An arm not yet run is projected on
        this footing before it is compared with the rates of those that ran: under a
        constraint their rates count the forced and certain tokens their steps took without
        a draft call, which ``expected_case`` leaves out and any arm's steps would take
        alike.  Never below 1: a rate short of its projection is the chain model's optimism,
        which the projection compared shares, and one probe's shortfall is too noisy to stop
        the others' probes at the start of a request."""
        ran = [a for a in self.arms.values() if a.steps and a.promise > 0.0]
        if not ran:
            return 1.0
        best = max(ran, key=lambda a: a.rate)
        return max(1.0, best.rate / best.promise)

    def copy_case(self, chances) -> float:
        """Tokens/s of a lookup step along a chain whose nodes are accepted with ``chances``
        in turn (each given the ones above it: the leading candidates' learnt chances), at
        its best depth."""
        value = np.cumsum(np.cumprod(np.asarray(chances, np.float64)))
        depth = np.arange(1, value.shape[0] + 1)
        t = self.target_s[np.minimum(depth + 1, len(self.target_s) - 1)] + self.overhead_s + (depth + 1) * self.row_s
        return float(np.max((1.0 + value) / t))

    def copy_depth(self, run: int) -> int:
        """How deep a copy's chain is asked (``Sources.leading_chain``) after a copy run of
        ``run`` tokens: ``copy_depth`` on the target's cost table, at most ``max_depth``."""
        last = len(self.target_s) - 1
        return copy_depth(lambda n: self.target_s[min(n, last)], run, int(self.limits.max_depth))

    def forced_case(self, forced: int) -> float:
        """Tokens/s of a grammar step along ``forced`` forced tokens, each accepted with the
        forced bin's learnt chance (the best depth up to the run and the bounds)."""
        depth = np.arange(1, max(1, min(forced, self.limits.max_depth)) + 1)
        a = self.calibration.lookup(FORCED_BIN)
        t = self.target_s[depth + 1] + self.overhead_s + (depth + 1) * self.row_s
        value = np.cumsum(a ** np.arange(depth.shape[0] + 1))[1:]
        return float(np.max(value / t))

    def in_step_case(self, kind: str | None, pending: int = 1) -> float:
        """Beside the step's other requests (``background``), the whole step's projected
        tokens/s with this request's next step of ``kind`` (None: plain), at the acceptance
        learnt so far (``stepplan.in_step_rate``).  A chain's level is worth its acceptance
        a; a K-draw tree's level its own acceptance a_K (its path going on through the
        expanded child at about a chain's rate), for the rows per level its trees held in
        past shared steps (before any: K, about what a tree's level holds beside others; its
        distinct children per node would count half of it).  The acceptances are exact (learnt
        at every drafted node); the arm's realised / expected tokens are not used here: over
        the request (steps alone included), of the plan's E rather than of this path, and
        several percent of noise, they would outweigh what sets arms apart in a shared step
        (a percent or two).  Lookup: its bins' mean acceptance, no draft row."""
        bg, lim = self.background, self.limits
        price = dict(pending=pending, overhead_s=self.overhead_s, row_s=self.row_s)
        if kind is None:
            return in_step_rate(bg, self.target_s, self.draft_s, first=0.0, then=0.0, rows=1.0, depth=0, **price)
        if kind == "lookup":
            a = self.lookup_accept()
            return in_step_rate(bg, self.target_s, self.draft_s, first=a, then=a, rows=1.0, depth=lim.max_depth,
                                is_draft=False, **price)
        if kind == "text":  # a lookup path behind the text draft's chain, whose seconds the step pays
            a, ask = self.calibration.text_draft(), self.text_ask()
            price["overhead_s"] += float(self.text_s[ask])
            return in_step_rate(bg, self.target_s, self.draft_s, first=a, then=a, rows=1.0, depth=ask,
                                is_draft=False, **price)
        arm, chain = self.arms[kind], self.arms.get("chain", self.arms[kind])
        return in_step_rate(bg, self.target_s, self.draft_s, first=arm.accept, then=chain.accept,
                            rows=max(1.0, arm.width or arm.k), depth=lim.max_depth, **price)
