"""The shape of one speculative step and its growth rule: ``StepPlan``, which ``tree.grow``
consults before a level draws (how many children to expand, how many leaves to keep), each
decision the best projected tokens per predicted second on the cost curves; and
``Background``, the other requests of a shared step (``batch``) its rows are priced against.
``autotune`` builds the plans; the rule is explained there.  Beside those requests,
``in_step_seconds`` prices a step and ``in_step_rate`` projects the whole step's rate with
one request's path in it (``autotune`` chooses a request's arm by it).

NumPy and Numba on the cost tables; no model calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..config import DraftParams
from ..kernels.arrays import frozen

__all__ = ["TABLE_ROWS", "Background", "StepPlan", "in_step_rate", "in_step_seconds"]

# --------------------------------------------------------------------------- one step


# rows a step may ever hold (root + MAX_TREE_NODES), with room for the look-ahead's projections
_TABLE_ROWS = TABLE_ROWS = 512


@njit(cache=True)
def _width(s, value, cost, n_nodes, accept, a, children, n_m, budget, target_s, draft_s, row_s, is_draft,
           draft_in, shared):
    """``StepPlan.width``'s search: expanding the best w children (``s``: their cumulative
    scores) with m levels below them, for every w and m within the budget; returns the best
    w, or 0 where growing no further (the children kept as leaves) does as well, and the
    draft seconds of that w's call.  The first ``shared`` of those draft calls are priced
    by ``draft_in`` (calls other requests make anyway), the rest by ``draft_s``."""
    nt, nd, ni = target_s.shape[0] - 1, draft_s.shape[0] - 1, draft_in.shape[0] - 1
    n = 1 + n_nodes
    t_n = target_s[min(n, nt)]
    best, best_w, best_draft = -np.inf, 0, 0.0
    below = 0.0  # accept * (1 + a + ... + a^(m-1))
    am = 1.0
    for m in range(1, n_m + 1):
        below += accept * am
        am *= a
        for i in range(s.shape[0]):
            w = i + 1
            d_full = draft_s[min(w, nd)] + w * row_s if is_draft else 0.0
            d_in = draft_in[min(w, ni)] + w * row_s if is_draft else 0.0
            m_in = min(m, shared)
            d_draft = d_in if shared > 0 else d_full  # the first call's
            rows = w * (children + m - 1)
            r = 0.0
            if n_nodes + w + rows <= budget:
                c = (cost + m_in * d_in + (m - m_in) * d_full + target_s[min(n + w + int(np.ceil(rows)), nt)] - t_n
                     + row_s * s[i] * (1.0 + below))
                r = (value + s[i] * (1.0 + below)) / c
            if r > best:
                best, best_w, best_draft = r, w, d_draft
    keep = value / cost  # the alternative: grow no further, the best children kept as leaves
    for i in range(s.shape[0]):
        leaves = (value + s[i]) / (cost + target_s[min(n + i + 1, nt)] - t_n + row_s * s[i])
        keep = max(keep, leaves)
    if best <= keep * (1.0 + 1e-9):
        return 0, 0.0
    return best_w, best_draft


@dataclass(frozen=True)
class Background:
    """The other requests of a step that serves several (``batch``), as one request's plan
    prices its own rows against them: the rows they are expected to hold and the tokens
    they are expected to yield, learnt from their past steps (fixed before this step draws).

    With one, a row of this request costs what it adds to the step (one target decode of
    every request's rows; its draft rows join the others' draft calls, so a level costs
    its rows, not a call), and the bar it must clear is the whole step's expected tokens
    per second, not this request's alone."""

    rows: int  # the others' target rows
    value: float  # their expected tokens
    draft_rows: int  # their draft rows per draft call
    draft_levels: int  # the draft calls they make


def in_step_seconds(bg: Background, target_s: np.ndarray, draft_s: np.ndarray, rows: int,
                    draft_rows: tuple[int, ...] | list[int] = (), overhead_s: float = 0.0, row_s: float = 0.0) -> float:
    """The predicted seconds of a step holding ``bg`` and one request's ``rows`` target rows
    (its root included) and draft calls of ``draft_rows[l]`` rows at level l: a level the
    others call anyway (the first ``bg.draft_levels``) costs only the rows it adds to their
    call, a deeper one a call of its own.  Priced as ``StepPlan`` prices a plan within the
    step."""
    nt, nd = len(target_s) - 1, len(draft_s) - 1
    d0 = min(bg.draft_rows, nd - 1) if bg.draft_levels else 0
    t = bg.draft_levels * draft_s[d0] if d0 else 0.0  # the others' draft calls
    t += target_s[min(bg.rows + rows, nt)] + overhead_s + row_s * rows
    for level, w in enumerate(draft_rows):
        t += draft_s[min(d0 + w, nd)] - draft_s[d0] if d0 and level < bg.draft_levels else draft_s[min(w, nd)]
        t += w * row_s
    return float(t)


def in_step_rate(bg: Background, target_s: np.ndarray, draft_s: np.ndarray, *, first: float, then: float,
                 rows: float, depth: int, pending: int = 1, is_draft: bool = True, overhead_s: float = 0.0,
                 row_s: float = 0.0) -> float:
    """The whole step's projected tokens per second when one request beside ``bg`` grows a
    path of the best depth from 1 to ``depth`` levels (0: a plain step): its j-th level
    holds ``rows`` target rows and is worth ``first * then ** (j - 1)`` tokens, and (when
    ``is_draft``) one draft row (``pending`` at level 0), priced by ``in_step_seconds``."""
    best, value = 0.0, bg.value + 1.0
    for j in range(depth + 1):
        value += first * then ** (j - 1) if j else 0.0
        draft = ([pending] + [1] * (j - 1) if j else []) if is_draft else []
        t = in_step_seconds(bg, target_s, draft_s, 1 + int(np.ceil(rows * j)), draft, overhead_s, row_s)
        if j or not depth:
            best = max(best, value / t)
    return float(best)


@dataclass
class StepPlan:
    """The shape of one speculative step and the growth rule ``tree.grow`` consults.

    ``arm``: "chain" (the draft model expands nodes with one draw each), "tree2"/"tree4"
    (K = 2 or 4 draws each, ``resispec``), "lookup" (no draft model calls: chains of lookup
    candidates), "text" (the same, with a draft of another vocabulary asked for a chain of
    ``ask`` of its tokens first, at ``text_s`` seconds: ``candidates.textdraft``) or
    "grammar" (a lookup tree from a root where the constraint forces tokens); ``kind`` is
    "draft" for the first two.  ``params``: the method, K and the user's upper
    bounds.  ``accept``: the chance that a reached, expanded node has a candidate accepted
    (learnt per arm).  ``value``/``cost`` track the step's expected tokens E and predicted
    seconds T as the tree grows.  ``target_s``/``draft_s``: the curves as tables by rows.
    """

    arm: str
    params: DraftParams
    target_s: np.ndarray
    draft_s: np.ndarray
    accept: float
    overhead_s: float
    pending: int = 1  # draft rows of the level-0 call
    row_s: float = 0.0  # host seconds to process one logits row (measured once per vocabulary)
    children: float = 1.0  # distinct candidates per expanded node (learnt per arm over past steps)
    value: float = 1.0
    cost: float = 0.0
    n_nodes: int = 0
    draft_cost: float = 0.0
    best_score: float = 1.0  # the best expanded score of the last level (the root's: 1)
    promise: float = 0.0  # the tuner's ``expected_case`` for the arm at the acceptance this plan was built on
    background: Background | None = None  # the step's other requests (``batch``); None: alone
    chain: bool = False  # the target evaluates one chain (``tree.GrowthLimits.chain``): one child a level
    ask: int = 0  # draft tokens the text draft is asked for before the tree grows (0: it is not called)
    text_s: float = 0.0  # the predicted seconds of that chain, a cost the step pays whatever grows

    @property
    def kind(self) -> str:
        return "lookup" if self.arm in ("lookup", "grammar", "text") else "draft"

    def __post_init__(self):
        # the tables as the width search takes them (one compiled signature, ``frozen``);
        # the slices below stay read-only
        self.target_s, self.draft_s = frozen(self.target_s, np.float64), frozen(self.draft_s, np.float64)
        if self.chain:  # one child of each expanded node is kept: the next one of the chain
            self.children = 1.0
        self.draft_cost = (self._draft(self.pending) + self.row_s if self.kind == "draft" else 0.0) + self.text_s
        self.cost = self.draft_cost + self.target_s[1] + self.overhead_s + self.row_s
        bg = self.background
        if bg is not None:
            # the growth rule's prices within the step: the target's curve past the others'
            # rows, a draft level's past the others' rows in the calls they make anyway
            self._t_in = self.target_s[min(bg.rows, len(self.target_s) - 2):]
            d0 = min(bg.draft_rows, len(self.draft_s) - 2) if bg.draft_levels else 0
            self._d_in = frozen(self.draft_s[d0:] - self.draft_s[d0], np.float64) if d0 else self.draft_s
            self._bg_cost = bg.draft_levels * self.draft_s[d0] if d0 else 0.0
            d = self._d_in[min(self.pending, len(self._d_in) - 1)] + self.row_s if self.kind == "draft" else 0.0
            self._draft_in = d + self.text_s  # the text draft's chain is this request's own call
            self._cost_in = self._bg_cost + self._draft_in + self._t_in[1] + self.overhead_s + self.row_s

    def _draft(self, n):
        return self.draft_s[np.minimum(n, len(self.draft_s) - 1)] if self.kind == "draft" else 0.0 * n

    def _target(self, n):
        return self.target_s[np.minimum(n, len(self.target_s) - 1)]

    def width(self, level: int, scores: list[float]) -> int:
        """How many of the new children (scores best first) to expand next.

        Expanding the best w children costs one draft call of w rows and buys, for each
        child of score s, what grows below it: its own children (``children`` rows, worth
        ``s * accept`` together) and, deeper, a path continuing by the factor a by which the
        best path's score fell at this level (worth ``s * accept * a^j`` for one more row
        and draft call per level).  Cost curves need not be concave (on a CPU 16 rows may
        cost barely more than 8), so every w is tried with every depth m the bounds allow
        below the children, within the node budget, and the best projected E / T is taken
        if it beats growing no further (the children kept as leaves, as many as pay).  Only
        the first level is committed here; the next is judged again on its real scores."""
        if not scores:
            return 0
        if self.chain:  # one node a level (``tree.growing`` asks about no more)
            scores = scores[:1]
        s = frozen(np.cumsum(np.asarray(scores, np.float64)), np.float64)  # value of the best w children
        n_m = max(1, int(self.params.depth) - level - 1)
        a = min(1.0, scores[0] / self.best_score) if self.best_score > 0 else 0.0
        bg = self.background
        if bg is None:
            k, d_draft = _width(s, float(self.value), float(self.cost), int(self.n_nodes), float(self.accept), a,
                                float(self.children), n_m, int(self.params.budget), self.target_s, self.draft_s,
                                float(self.row_s), self.kind == "draft", self.draft_s, 0)
        else:  # priced within the step (``Background``); this plan's own figures follow below
            # the draft calls this width and the levels below it make: call level + 1 onwards
            shared = max(0, bg.draft_levels - level - 1)
            k, d_in = _width(s, float(self.value + bg.value), float(self._cost_in), int(self.n_nodes),
                             float(self.accept), a, float(self.children), n_m, int(self.params.budget), self._t_in,
                             self.draft_s, float(self.row_s), self.kind == "draft", self._d_in, shared)
            if k:
                n = 1 + self.n_nodes
                self._cost_in += float(d_in + self._t_in[min(n + k, len(self._t_in) - 1)]
                                       - self._t_in[min(n, len(self._t_in) - 1)] + self.row_s * s[k - 1])
                self._draft_in += float(d_in)
                d_draft = float(self._draft(k) + k * self.row_s) if self.kind == "draft" else 0.0
        if k == 0:
            return 0
        n = 1 + self.n_nodes
        self.value += float(s[k - 1])
        self.cost += float(d_draft + self._target(n + k) - self._target(n) + self.row_s * s[k - 1])
        self.n_nodes += k
        self.draft_cost += float(d_draft)
        self.best_score = float(scores[0])
        return k

    def leaves(self, expanded_scores: list[float], leaf_scores: list[float]) -> int:
        """How many leaves (scores best first) to keep beside the expanded nodes: a leaf is
        worth its score (the bonus token after it) for one target row; the number with the
        best E / T is kept (every number is tried: the curve need not be concave)."""
        self.n_nodes = len(expanded_scores)
        self.value = 1.0 + sum(expanded_scores)
        n = 1 + self.n_nodes
        self.cost = (self.draft_cost + self._target(n) + self.overhead_s
                     + self.row_s * (1.0 + sum(expanded_scores)))
        if not leaf_scores:
            return 0
        s = np.concatenate([[0.0], np.cumsum(np.asarray(leaf_scores, float))])
        best = int(np.argmax(self._ratios(expanded_scores, s)))  # the first maximum: ties keep fewer rows
        self.value += float(s[best])
        self.cost += float(self._target(n + best) - self._target(n) + self.row_s * s[best])
        self.n_nodes += best
        return best

    def _ratios(self, expanded_scores: list[float], s: np.ndarray) -> np.ndarray:
        """The projected E / T with leaves worth ``s`` (cumulative, 0 first) beside the
        expanded nodes: one entry per number of leaves."""
        n = 1 + len(expanded_scores)
        value = 1.0 + sum(expanded_scores)
        k = np.arange(len(s))
        bg = self.background
        if bg is None:
            cost = self.draft_cost + self._target(n) + self.overhead_s + self.row_s * value
            return (value + s) / (cost + self._target(n + k) - self._target(n) + self.row_s * s)
        t_in = self._t_in[np.minimum(n + k, len(self._t_in) - 1)]  # priced within the step (``Background``)
        cost = self._bg_cost + self._draft_in + self.overhead_s + self.row_s * value
        return (value + bg.value + s) / (cost + t_in + self.row_s * s)

    def free_grows(self, scores: list[float], bound: float, room: int) -> bool:
        """For a step without draft calls (``tree.grow_free``): whether up to ``room`` more
        nodes, each worth at most ``bound`` (the best open node's score, which bounds its
        descendants'), could raise the best E / T of the nodes so far (``scores``), all
        weighed as ``leaves`` weighs them.  False: growing on cannot pay.  The bound for k
        nodes is the sum of the best k of the scores and ``room`` copies of ``bound``."""
        if room <= 0 or bound <= 0.0:
            return False
        now = np.concatenate([[0.0], np.cumsum(np.sort(np.asarray(scores, float))[::-1])])
        best = np.concatenate([[0.0], np.cumsum(np.sort(np.concatenate([scores, np.full(room, bound)]))[::-1])])
        return float(self._ratios([], best).max()) > float(self._ratios([], now).max()) * (1.0 + 1e-9)

    def tail_pays(self, score: float) -> bool:
        """Whether one more target row worth ``score`` tokens (a lookup tail's node, no
        draft call: ``tree``'s lookup tails) would raise the step's projected E / T (a
        higher ``score`` pays whenever a lower one does).  Never beside other requests:
        there the Markov benchmark (``scripts/batch_gpu_like.py``) lost 2-6% with them,
        where alone the real pair under a schema gained 4%."""
        return self._tail_row(score) is not None

    def tail(self, score: float) -> bool:
        """``tail_pays``, and if so the row is counted in.  Called after ``leaves``,
        best-scored node first."""
        more = self._tail_row(score)
        if more is None:
            return False
        self.value += score
        self.cost += more
        self.n_nodes += 1
        return True

    def _tail_row(self, score: float) -> float | None:
        """The seconds a tail row worth ``score`` adds, None where it does not pay."""
        if self.background is not None:
            return None
        n = 1 + self.n_nodes
        more = float(self._target(n + 1) - self._target(n)) + self.row_s * score
        return None if (self.value + score) * self.cost <= self.value * (self.cost + more) else more
