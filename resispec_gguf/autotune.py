"""``method="auto"``: per step, plain decoding or a tree grown only as far as it pays.

What steers it, all fixed for a given request, seed and machine (no wall-clock reading
steers a choice, so the same seed gives the same output):

* **Costs** — ``CostCurve``: the measured seconds of one decode of n rows, per model, on this
  machine and settings (measured once, cached on disk by the engine).
* **Values** — ``Calibration``: the chance that the verifier accepts a candidate, learnt
  online (with decay) from this request's verified nodes, by the candidate's draft
  probability q, or by the copy run a context-lookup candidate would continue.  A node's score is
  the product of those chances along its path: the estimated probability that its token is
  emitted as an accepted candidate.  A step yields ``E = 1 + sum of node scores`` tokens on
  average and costs ``T = draft calls + target(1 + nodes) + overhead``, where the overhead
  counts the host work on every logits row it processes (measured once per vocabulary).

Growth (``StepPlan.width`` / ``StepPlan.leaves``, called by ``tree.grow`` before a level
draws): take the new children best-first and expand one while its marginal value per
marginal cost beats the step's current ``E / T``.  Expanding c is worth about
``score(c) * a`` tokens (``a``: the decayed acceptance rate per verified node) and costs one
more draft row plus a target row for its child.  Leaves are kept by the same test.  This is
dynamic depth and width in one rule (SpecDec++ / EAGLE-2 style), bounded by the user's
``draws``/``depth``/``budget``, which act as upper bounds.

Plain or speculate (``AutoTuner.choose``): every request starts with a speculative probe.
After each speculative step the tuner compares the tokens it realised per *predicted*
second (decayed) with plain decoding's predicted speed.  When speculation loses, it decodes
plain for a stretch that doubles after each losing probe (4, 8, 16, ... tokens) and then
probes again, unless a chain at the acceptance learnt so far could not beat plain decoding
(``expected_case``): then it waits the next stretch out as well.  A winning probe resets
the stretch.  Lookup-only trees (no draft model calls)
are tried the same way, so a step uses the draft model, the lookup, both, or neither.

No model calls here: measuring is done by the caller (``measure_curve``) through a callback.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from .config import DraftParams

# every count up to 8: on a CPU llama.cpp's batched kernels make some counts cheaper than
# smaller ones (a decode of 4 rows can cost less than one of 2 or 3), which a coarser grid
# with interpolation would hide
ROW_COUNTS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32)


@dataclass(frozen=True)
class CostCurve:
    """Seconds for one decode of n rows, measured at ``ROW_COUNTS``; linear in between, and
    beyond the last count along the last stretch's slope (never falling)."""

    rows: tuple[int, ...]
    seconds: tuple[float, ...]

    def __call__(self, n: int) -> float:
        rows, secs = self.rows, self.seconds
        if n <= 0:
            return 0.0
        if n <= rows[0]:
            return secs[0] * n / rows[0]
        for (r0, s0), (r1, s1) in zip(zip(rows, secs), zip(rows[1:], secs[1:])):
            if n <= r1:
                return s0 + (s1 - s0) * (n - r0) / (r1 - r0)
        slope = max(0.0, (secs[-1] - secs[-2]) / (rows[-1] - rows[-2]))
        return secs[-1] + slope * (n - rows[-1])

    def describe(self) -> str:
        base = self.seconds[0]
        return " ".join(f"{r}:{s / base:.2f}" for r, s in zip(self.rows, self.seconds) if r in (1, 2, 4, 8, 16))


def measure_curve(decode_rows, rows=ROW_COUNTS, repeats: int = 3) -> CostCurve:
    """Time ``decode_rows(n)`` (one decode of n rows) for each n, in ``repeats`` rounds over
    all n, keeping each n's fastest round: another job on a shared machine can only add time,
    and it adds it unevenly (a busy moment during the 4-row decode of one round would make 4
    rows look dearer than 8), so the fastest round is the machine's own shape."""
    decode_rows(1)  # warm-up
    times = [[] for _ in rows]
    for _ in range(repeats):
        for i, n in enumerate(rows):
            t = time.perf_counter()
            decode_rows(n)
            times[i].append(time.perf_counter() - t)
    # not forced to grow with n: a batch of some sizes may really cost less than a smaller one
    return CostCurve(tuple(rows), tuple(float(np.min(ts)) for ts in times))


def curve_cache_key(identity: str) -> str:
    """The cache key of a model's cost curve, from its ``cost_key()``."""
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


def load_cached_curve(cache_file: str, key: str) -> CostCurve | None:
    try:
        with open(cache_file, encoding="utf-8") as f:
            entry = json.load(f).get(key)
        return CostCurve(tuple(entry["rows"]), tuple(entry["seconds"])) if entry else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store_cached_curve(cache_file: str, key: str, curve: CostCurve) -> None:
    try:
        with open(cache_file, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[key] = {"rows": list(curve.rows), "seconds": list(curve.seconds)}
    os.makedirs(os.path.dirname(cache_file) or ".", exist_ok=True)
    tmp = cache_file + f".{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, cache_file)


# --------------------------------------------------------------------------- values

# bins of a draft candidate's probability q
_Q_EDGES = np.array([0.0, 0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95, 1.0 + 1e-9])
_Q_EDGE_LIST = _Q_EDGES.tolist()  # for bisect: a scalar look-up without NumPy's call overhead
# a lookup candidate is binned by the copy run it continues (tokens in a row that lookup
# predicted, 0..3+) when its context match is at least 2 tokens long; bin 4: a 1-token match
_LOOKUP_PRIOR = (0.3, 0.5, 0.6, 0.7, 0.15)


def lookup_bin(match: int, run: int) -> int:
    """The calibration bin of a lookup candidate: ``match`` tokens of context matched, and
    the ``run`` tokens before it were each what lookup predicted."""
    return min(run, 3) if match >= 2 else 4


class Calibration:
    """Decayed acceptance counts per bin, with a prior worth ``prior_weight`` observations.

    A draft candidate is binned by the chance of acceptance the model first gives it (its
    node's acceptance shared in proportion to q, see ``engine._weights``), separately per K
    (draws at its node): the learnt rate per bin corrects that guess where the draft's q
    misleads (an over-confident draft, the best-first choice of which nodes grow, ResiSpec
    deferring a first draw to later ones).  Prior: the guess itself.  A lookup candidate is
    binned by ``lookup_bin`` (prior 0.15 to 0.7).  The request's own counts take over
    quickly.  An observation may be a 0/1 outcome or, where it is known, the exact chance of
    acceptance."""

    def __init__(self, decay: float = 0.98, prior_weight: float = 2.0):
        self.decay = decay
        self.prior_weight = prior_weight
        self._draft: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # K -> (accepted, seen) per bin
        self.look_acc = np.array(_LOOKUP_PRIOR) * prior_weight
        self.look_seen = np.full(len(_LOOKUP_PRIOR), prior_weight)

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
        return float(self.look_acc[b] / self.look_seen[b])

    def mean_lookup(self) -> float:
        """The acceptance chance of a lookup candidate, over all bins as they were seen."""
        return float(self.look_acc.sum() / self.look_seen.sum())

    def observe_lookup(self, b: int, accepted: float) -> None:
        self.look_acc[b] = self.look_acc[b] * self.decay + float(accepted)
        self.look_seen[b] = self.look_seen[b] * self.decay + 1.0


# --------------------------------------------------------------------------- one step


@functools.lru_cache(maxsize=16)
def _cost_table(curve: CostCurve | None, n: int) -> np.ndarray:
    """``curve(i)`` for i = 0..n-1 (zeros without a curve), for vectorised look-ups; built
    once per curve (read-only: every request's tuner shares it)."""
    table = np.zeros(n) if curve is None else np.array([curve(i) for i in range(n)])
    table.flags.writeable = False
    return table


# rows a step may ever hold (root + MAX_TREE_NODES), with room for the look-ahead's projections
_TABLE_ROWS = 512


@njit(cache=True)
def _width(s, value, cost, n_nodes, accept, a, children, n_m, budget, target_s, draft_s, row_s, is_draft):
    """``StepPlan.width``'s search: expanding the best w children (``s``: their cumulative
    scores) with m levels below them, for every w and m within the budget; returns the best
    w, or 0 where growing no further (the children kept as leaves) does as well, and the
    draft seconds of that w's call."""
    nt, nd = target_s.shape[0] - 1, draft_s.shape[0] - 1
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
            d_draft = draft_s[min(w, nd)] + w * row_s if is_draft else 0.0
            rows = w * (children + m - 1)
            r = 0.0
            if n_nodes + w + rows <= budget:
                c = (cost + m * d_draft + target_s[min(n + w + int(np.ceil(rows)), nt)] - t_n
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


@dataclass
class StepPlan:
    """The shape of one speculative step and the growth rule ``tree.grow`` consults.

    ``arm``: "chain" (the draft model expands nodes with one draw each), "tree2"/"tree4"
    (K = 2 or 4 draws each, ``resispec``) or "lookup" (no draft model calls: chains of lookup candidates);
    ``kind`` is "draft" for the first two.  ``params``: the method, K and the user's upper
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

    @property
    def kind(self) -> str:
        return "lookup" if self.arm == "lookup" else "draft"

    def __post_init__(self):
        self.draft_cost = self._draft(self.pending) + self.row_s if self.kind == "draft" else 0.0
        self.cost = self.draft_cost + self.target_s[1] + self.overhead_s + self.row_s

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
        s = np.cumsum(np.asarray(scores, np.float64))  # value of the best w children
        n_m = max(1, int(self.params.depth) - level - 1)
        a = min(1.0, scores[0] / self.best_score) if self.best_score > 0 else 0.0
        k, d_draft = _width(s, float(self.value), float(self.cost), int(self.n_nodes), float(self.accept), a,
                            float(self.children), n_m, int(self.params.budget), self.target_s, self.draft_s,
                            float(self.row_s), self.kind == "draft")
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
        k = np.arange(len(s))
        ratio = (self.value + s) / (self.cost + self._target(n + k) - self._target(n) + self.row_s * s)
        best = int(np.argmax(ratio))  # the first maximum: ties keep fewer rows
        self.value += float(s[best])
        self.cost += float(self._target(n + best) - self._target(n) + self.row_s * s[best])
        self.n_nodes += best
        return best


@dataclass
class _Arm:
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

    PRIOR_TOKENS = 12.0  # the realised / expected ratio starts at 1, worth this many tokens

    @property
    def rate(self) -> float:
        if self.seconds <= 0:
            return 0.0
        ratio = (self.real + self.PRIOR_TOKENS) / (self.expected + self.PRIOR_TOKENS)
        return ratio * self.tokens / self.seconds

    def learn(self, accept: float, decay: float, children: float | None = None) -> None:
        """One more node's acceptance (and width) into the decayed means."""
        w = self.acc_n * decay
        self.accept = (self.accept * w + accept) / (w + 1.0)
        if children is not None:
            self.children = (self.children * w + children) / (w + 1.0)
        self.acc_n = w + 1.0

    def observe(self, tokens: int, expected: float, seconds: float, decay: float) -> None:
        self.tokens = self.tokens * decay + expected
        self.seconds = self.seconds * decay + seconds
        self.real += tokens
        self.expected += expected
        self.steps += 1


def _draws_of(arm: str) -> int:
    return 1 if arm == "chain" else int(arm[4:]) if arm.startswith("tree") else 0


class AutoTuner:
    """Per request: choose plain decoding or a ``StepPlan`` for each step (module docstring)."""

    def __init__(self, target: CostCurve, draft: CostCurve | None, limits: DraftParams, *,
                 has_draft: bool = True, overhead_s: float = 0.0005, row_s: float = 0.0, decay: float = 0.95,
                 margin: float = 1.0):
        self.target, self.draft = target, draft
        self.target_s, self.draft_s = _cost_table(target, _TABLE_ROWS), _cost_table(draft, _TABLE_ROWS)
        self.row_s = row_s
        self.limits = limits
        self.overhead_s = overhead_s
        self.decay = decay
        self.margin = margin
        self.calibration = Calibration()
        self.plain_rate = 1.0 / (target(1) + overhead_s + row_s)
        # an arm that cannot beat plain decoding even if every candidate were accepted is
        # never tried: on such a machine auto is plain decoding, probes included
        kinds = ["lookup"]
        if has_draft and draft is not None:
            kinds = ["chain"] + [f"tree{k}" for k in sorted({min(int(limits.draws), 2), min(int(limits.draws), 4)})
                                 if k > 1] + ["lookup"]
        self.arms = {k: _Arm(k=_draws_of(k)) for k in kinds
                     if self.best_case(k) > self.plain_rate * max(margin, 1.05)}
        # the draft arms' K, in the order ``observe_draft_node`` takes their figures
        self.exact_ks = np.array([a.k for a in self.arms.values() if a.k], np.int64)
        self.current: str | None = None  # the arm of the step under way
        self.last_choice = "none"
        self.reason = "start: probe"
        # per arm ("none" for plain): [steps, predicted seconds, measured seconds],
        # for the user's eyes only (a measured time never steers a choice)
        self.timing: dict[str, list] = {}

    @property
    def accept(self) -> float:
        """The acceptance per node of the arm under way (or the best arm's)."""
        if self.current in self.arms:
            return self.arms[self.current].accept
        return max((a.accept for a in self.arms.values()), default=0.6)

    def best_case(self, kind: str) -> float:
        """Tokens/s of the best chain of ``kind`` if every candidate were accepted."""
        best = 0.0
        for depth in range(1, self.limits.max_depth + 1):
            t = self.target(depth + 1) + self.overhead_s + (depth + 1) * self.row_s
            if kind != "lookup":
                t += depth * (self.draft(1) + self.row_s)
            best = max(best, (depth + 1) / t)
        return best

    def expected_case(self, kind: str, pending: int = 1) -> float:
        """Tokens/s of the best chain of ``kind`` at the acceptance learnt so far (a draft
        arm: its acceptance per reached node; lookup: its best bin's rate), with the draft's
        catch-up on ``pending`` tokens."""
        if kind == "lookup":
            a = self.calibration.mean_lookup()
        else:  # a ResiSpec node accepts at least as often as a chain's draw: sum(min(p, F q)), F >= 1
            a = max(self.arms[kind].accept, self.arms["chain"].accept if "chain" in self.arms else 0.0)
        depth = np.arange(1, self.limits.max_depth + 1)
        t = self.target_s[depth + 1] + self.overhead_s + (depth + 1) * self.row_s
        if kind != "lookup":
            t = t + self.draft_s[min(pending, len(self.draft_s) - 1)] + (depth - 1) * self.draft_s[1] + depth * self.row_s
        value = np.cumsum(a ** np.arange(self.limits.max_depth + 1))[1:]  # 1 + a + ... + a^depth
        return float(np.max(value / t))

    # -------------------------------------------------------------- choice per step

    def choose(self, pending: int = 1) -> StepPlan | None:
        """The next step's plan, or None for a plain step."""
        # at the start the first arm (the chain: it learns the draft's acceptance exactly at
        # every node) is probed once; every other only if what has been learnt promises that
        # it beats what ran
        ran = max([self.plain_rate * self.margin] + [a.rate for a in self.arms.values() if a.steps])
        first = next(iter(self.arms), None)
        for name, arm in self.arms.items():
            if arm.steps == 0 and not arm.due and arm.wait == 0:
                if name == first or self.expected_case(name, pending) > ran:
                    return self._plan(name, pending, f"probe {name}")
                arm.wait = arm.backoff  # judged again when its wait runs out
        # an arm that lost its last step waits a stretch (doubling after each loss) while the
        # others, or plain decoding, run; then it is due to be tried again
        for arm in self.arms.values():
            if arm.wait > 0:
                arm.wait -= 1
                arm.due = arm.wait == 0
        best, best_rate = None, self.plain_rate * self.margin
        for name, arm in self.arms.items():
            if arm.wait == 0 and not arm.due and arm.rate > best_rate:
                best, best_rate = name, arm.rate
        for name, arm in self.arms.items():
            if not arm.due:
                continue
            # chain and lookup acceptances are learnt whatever runs, and so is a tree's wherever
            # p and q are known (``observe_draft_node``): their re-probe must promise to beat
            # the best arm; a tree learnt only by trying it must promise to beat plain decoding
            rival = self.plain_rate * self.margin if name.startswith("tree") and not arm.exact else best_rate
            promise = self.expected_case(name, pending)
            if arm.steps and arm.promise > 0.0 and (arm.exact or not name.startswith("tree")):
                # an arm that ran and lost: its rate, scaled by how far its learnt acceptance has
                # moved since (the optimistic chain model alone would promise a tree a win every time)
                promise = arm.rate * promise / arm.promise
            if promise > rival:
                arm.due = False
                return self._plan(name, pending, f"re-probe {name} after backing off")
            arm.due = False  # what it has learnt says it cannot win: wait the next stretch out too
            arm.wait = arm.backoff
            arm.backoff = min(arm.backoff * 2, 256)
        for name, arm in self.arms.items():  # the losers wait for their next try
            if name != best and arm.wait == 0:
                arm.wait = arm.backoff
        if best is not None:
            return self._plan(best, pending, f"{best}: {best_rate:.2f} tokens/s > plain {self.plain_rate:.2f}")
        self.current = None
        self.last_choice, self.reason = "none", "plain: speculation lost its last probe"
        return None

    def _plan(self, arm: str, pending: int, reason: str) -> StepPlan:
        lim = self.limits
        # the arm decides the method and K; the bounds are auto's own (``max_depth``/``max_budget``)
        method, k = ("resispec", int(arm[4:])) if arm.startswith("tree") else ("chain", 1)
        params = lim.replace(method=method, draws=k, policy="budget", use_draft=True, depth=lim.max_depth,
                             budget=lim.max_budget)
        self.current = arm
        self.last_choice, self.reason = arm, reason
        return StepPlan(arm, params, self.target_s, self.draft_s, accept=self.arms[arm].accept,
                        overhead_s=self.overhead_s, pending=pending, row_s=self.row_s,
                        children=self.arms[arm].children, promise=self.expected_case(arm, pending))

    # -------------------------------------------------------------- learning

    def observe_step(self, plan: StepPlan, tokens: int, seconds: float) -> None:
        """A speculative step of ``plan`` emitted ``tokens`` in ``seconds`` (predicted)."""
        arm = self.arms[plan.arm]
        arm.observe(tokens, plan.value, seconds, self.decay)
        arm.promise = plan.promise
        rival = max([self.plain_rate * self.margin] + [a.rate for n, a in self.arms.items()
                                                        if n != plan.arm and a.steps and a.wait == 0])
        if arm.rate <= rival:  # not better than plain or another arm: try again later
            arm.wait = arm.backoff
            arm.backoff = min(arm.backoff * 2, 256)
        else:
            arm.backoff = 4

    def record_time(self, plan: StepPlan | None, measured_s: float) -> None:
        """A step of ``plan`` (None: plain) took ``measured_s`` of wall time: kept beside its
        predicted time for ``summary``, never used to choose."""
        kind = "none" if plan is None else plan.arm
        predicted = 1.0 / self.plain_rate if plan is None else plan.cost
        t = self.timing.setdefault(kind, [0, 0.0, 0.0])
        t[0] += 1
        t[1] += predicted
        t[2] += measured_s

    def observe_children(self, plan: StepPlan, mean_children: float) -> None:
        """After a step of ``plan``: its expanded nodes had ``mean_children`` distinct
        candidates each (used by the next steps' plans only)."""
        arm = self.arms[plan.arm]
        if not arm.exact:
            arm.children = 0.8 * arm.children + 0.2 * mean_children

    def observe_chain(self, alpha: float) -> None:
        """At a drafted node of any step, a chain's single draw would have been accepted with
        chance ``alpha``: the chain arm's acceptance, learnt whatever ran."""
        arm = self.arms.get("chain")
        if arm is not None:
            arm.learn(alpha, self.decay)

    def draft_accepts(self) -> list[tuple[int, float]]:
        """``(K, acceptance)`` of each draft arm."""
        return [(a.k, a.accept) for a in self.arms.values() if a.k]

    def observe_draft_node(self, accept: np.ndarray, distinct: np.ndarray) -> None:
        """At a drafted node of any step, with p and q known: a node of each draft arm (K =
        ``exact_ks``) would accept a candidate with chance ``accept`` and have ``distinct``
        children on average (``verify.acceptance_profile``): every draft arm's acceptance and
        width, learnt exactly whatever ran."""
        i = 0
        for arm in self.arms.values():
            if not arm.k:
                continue
            arm.learn(float(accept[i]), self.decay, float(distinct[i]))
            arm.exact = True
            i += 1

    def observe_node(self, accepted: bool) -> None:
        """A reached, expanded node of the step under way was verified (where
        ``observe_draft_node`` could not be told)."""
        arm = self.arms.get(self.current)
        if arm is None or self.current == "chain":  # the chain's is learnt exactly (observe_chain)
            return
        arm.learn(float(accepted), self.decay)

    def summary(self) -> str:
        arms = ", ".join(f"{n} {a.rate:.2f} tokens/s over {a.steps} steps, acceptance per node {a.accept:.2f}"
                         for n, a in self.arms.items())
        times = ", ".join(f"{k} {1000 * p / n:.1f}/{1000 * m / n:.1f} ms over {n}"
                          for k, (n, p, m) in self.timing.items())
        return (f"auto: {self.last_choice} ({self.reason}); plain {self.plain_rate:.2f} tokens/s predicted; "
                f"{arms}"
                + (f"; step time predicted/measured: {times}" if times else ""))
