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

import hashlib
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from .config import DraftParams

ROW_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


@dataclass(frozen=True)
class CostCurve:
    """Seconds for one decode of n rows, measured at ``ROW_COUNTS``; linear in between."""

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
        slope = (secs[-1] - secs[-2]) / (rows[-1] - rows[-2])
        return secs[-1] + slope * (n - rows[-1])

    def describe(self) -> str:
        base = self.seconds[0]
        return " ".join(f"{r}:{s / base:.2f}" for r, s in zip(self.rows, self.seconds) if r in (1, 2, 4, 8, 16))


def measure_curve(decode_rows, rows=ROW_COUNTS, repeats: int = 3) -> CostCurve:
    """Time ``decode_rows(n)`` (one decode of n rows) for each n, in ``repeats`` rounds over
    all n (so that every n sees the same mix of a shared machine's load), keeping each n's
    median round."""
    decode_rows(1)  # warm-up
    times = [[] for _ in rows]
    for _ in range(repeats):
        for i, n in enumerate(rows):
            t = time.perf_counter()
            decode_rows(n)
            times[i].append(time.perf_counter() - t)
    out = [float(np.median(ts)) for ts in times]
    # a decode of more rows never costs less than one of fewer (timing noise aside)
    for i in range(1, len(out)):
        out[i] = max(out[i], out[i - 1])
    return CostCurve(tuple(rows), tuple(out))


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
# a lookup candidate is binned by the copy run it continues (tokens in a row that lookup
# predicted, 0..3+) when its context match is at least 2 tokens long; bin 4: a 1-token match
_LOOKUP_PRIOR = (0.3, 0.5, 0.6, 0.7, 0.15)


def lookup_bin(match: int, run: int) -> int:
    """The calibration bin of a lookup candidate: ``match`` tokens of context matched, and
    the ``run`` tokens before it were each what lookup predicted."""
    return min(run, 3) if match >= 2 else 4


class Calibration:
    """Decayed acceptance counts per candidate bin, with a prior worth ``prior_weight``
    observations: a draft candidate of probability q is accepted with chance about
    ``q ** 0.5``, a lookup candidate with 0.15 to 0.7 by bin (``lookup_bin``), until the
    request's own counts say otherwise.  An observation may be a 0/1 outcome or, where it
    is known, the exact chance of acceptance."""

    def __init__(self, decay: float = 0.98, prior_weight: float = 2.0):
        mids = 0.5 * (_Q_EDGES[:-1] + _Q_EDGES[1:])
        self.decay = decay
        self.draft_acc = np.sqrt(np.minimum(mids, 1.0)) * prior_weight
        self.draft_seen = np.full(len(mids), prior_weight)
        self.look_acc = np.array(_LOOKUP_PRIOR) * prior_weight
        self.look_seen = np.full(len(_LOOKUP_PRIOR), prior_weight)

    @staticmethod
    def _qbin(q: float) -> int:
        return int(np.searchsorted(_Q_EDGES, q, side="right")) - 1

    def draft(self, q: float) -> float:
        b = self._qbin(q)
        return float(self.draft_acc[b] / self.draft_seen[b])

    def lookup(self, b: int) -> float:
        return float(self.look_acc[b] / self.look_seen[b])

    def observe_draft(self, q: float, accepted: float) -> None:
        b = self._qbin(q)
        self.draft_acc[b] = self.draft_acc[b] * self.decay + float(accepted)
        self.draft_seen[b] = self.draft_seen[b] * self.decay + 1.0

    def observe_lookup(self, b: int, accepted: float) -> None:
        self.look_acc[b] = self.look_acc[b] * self.decay + float(accepted)
        self.look_seen[b] = self.look_seen[b] * self.decay + 1.0


# --------------------------------------------------------------------------- one step


@dataclass
class StepPlan:
    """The shape of one speculative step and the growth rule ``tree.grow`` consults.

    ``kind``: "draft" (the draft model expands nodes; lookup candidates ride along) or
    "lookup" (no draft model calls: chains of lookup candidates).  ``params``: the method,
    K and the user's upper bounds.  ``value``/``cost`` track the step's expected tokens E
    and predicted seconds T as the tree grows.
    """

    kind: str
    params: DraftParams
    target: CostCurve
    draft: CostCurve | None
    accept: float  # expected accepted tokens below a reached, expanded node
    overhead_s: float
    pending: int = 1  # draft rows of the level-0 call
    row_s: float = 0.0  # host seconds to process one logits row (measured once per vocabulary)
    value: float = 1.0
    cost: float = 0.0
    n_nodes: int = 0
    draft_cost: float = 0.0

    def __post_init__(self):
        self.draft_cost = self.draft(self.pending) + self.row_s if self.kind == "draft" else 0.0
        self.cost = self.draft_cost + self.target(1) + self.overhead_s + self.row_s

    def _row(self, extra: int = 1) -> float:
        """Marginal seconds of ``extra`` more target rows."""
        return self.target(1 + self.n_nodes + extra) - self.target(1 + self.n_nodes)

    def width(self, level: int, scores: list[float]) -> int:
        """How many of the new children (scores best first) to expand next.

        Expanding child c keeps c (worth its score s, one target row) and gives it children
        (worth about ``s * accept``, about one more row), for one more draft row: take it
        while that marginal value per marginal second beats the step's E / T."""
        w = 0
        for s in scores:
            d_draft = self.draft(w + 1) - self.draft(w) + self.row_s if self.kind == "draft" else 0.0
            d_value = s * (1.0 + self.accept)
            d_cost = d_draft + self._row(2) + self.row_s * s * (1.0 + self.accept)
            if d_value * self.cost <= self.value * d_cost:
                break
            w += 1
            self.value += s
            self.cost += d_draft + self._row(1) + self.row_s * s
            self.n_nodes += 1
        if w and self.kind == "draft":
            self.draft_cost += self.draft(w) + w * self.row_s
        return w

    def leaves(self, expanded_scores: list[float], leaf_scores: list[float]) -> int:
        """How many leaves (scores best first) to keep beside the expanded nodes: a leaf is
        worth its score (the bonus token after it) for one target row."""
        self.n_nodes = len(expanded_scores)
        self.value = 1.0 + sum(expanded_scores)
        self.cost = (self.draft_cost + self.target(1 + self.n_nodes) + self.overhead_s
                     + self.row_s * (1.0 + sum(expanded_scores)))
        n = 0
        for s in leaf_scores:
            d_cost = self._row() + self.row_s * s
            if s * self.cost <= self.value * d_cost:
                break
            n += 1
            self.value += s
            self.cost += d_cost
            self.n_nodes += 1
        return n


@dataclass
class _Arm:
    """Speculation of one kind: its realised rate and when to try it again."""

    tokens: float = 0.0  # decayed sums over its steps
    seconds: float = 0.0
    steps: int = 0
    backoff: int = 4  # plain steps to wait after a losing probe (doubles)
    wait: int = 0  # plain steps left before the next probe

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def observe(self, tokens: int, seconds: float, decay: float) -> None:
        self.tokens = self.tokens * decay + tokens
        self.seconds = self.seconds * decay + seconds
        self.steps += 1


class AutoTuner:
    """Per request: choose plain decoding or a ``StepPlan`` for each step (module docstring)."""

    def __init__(self, target: CostCurve, draft: CostCurve | None, limits: DraftParams, *,
                 has_draft: bool = True, overhead_s: float = 0.0005, row_s: float = 0.0, decay: float = 0.8,
                 margin: float = 1.0):
        self.target, self.draft = target, draft
        self.row_s = row_s
        self.limits = limits
        self.overhead_s = overhead_s
        self.decay = decay
        self.margin = margin
        self.calibration = Calibration()
        self.accept = 0.6  # accepted tokens per reached expanded node, decayed (prior)
        self._acc_n = 2.0
        self.plain_rate = 1.0 / (target(1) + overhead_s + row_s)
        # an arm that cannot beat plain decoding even if every candidate were accepted is
        # never tried: on such a machine auto is plain decoding, probes included
        kinds = ("draft", "lookup") if has_draft and draft is not None else ("lookup",)
        self.arms = {k: _Arm() for k in kinds if self.best_case(k) > self.plain_rate * max(margin, 1.05)}
        self.last_choice = "none"
        self.reason = "start: probe"
        # per kind ("none", "draft", "lookup"): [steps, predicted seconds, measured seconds],
        # for the user's eyes only (a measured time never steers a choice)
        self.timing: dict[str, list] = {}

    def best_case(self, kind: str) -> float:
        """Tokens/s of the best chain of ``kind`` if every candidate were accepted."""
        best = 0.0
        for depth in range(1, int(self.limits.depth) + 1):
            t = self.target(depth + 1) + self.overhead_s + (depth + 1) * self.row_s
            if kind == "draft":
                t += depth * (self.draft(1) + self.row_s)
            best = max(best, (depth + 1) / t)
        return best

    def expected_case(self, kind: str, pending: int = 1) -> float:
        """Tokens/s of the best chain of ``kind`` at the acceptance learnt so far (a draft
        candidate: ``accept`` per reached node; a lookup one: its best bin's rate), with the
        draft's catch-up on ``pending`` tokens."""
        if kind == "draft":
            a = self.accept
        else:
            cal = self.calibration
            a = max(cal.lookup(b) for b in range(len(cal.look_seen)))
        best = 0.0
        for depth in range(1, int(self.limits.depth) + 1):
            t = self.target(depth + 1) + self.overhead_s + (depth + 1) * self.row_s
            if kind == "draft":
                t += self.draft(pending) + (depth - 1) * self.draft(1) + depth * self.row_s
            best = max(best, sum(a ** i for i in range(depth + 1)) / t)
        return best

    # -------------------------------------------------------------- choice per step

    def choose(self, pending: int = 1) -> StepPlan | None:
        """The next step's plan, or None for a plain step."""
        for name in self.arms:  # every kind is probed once at the start
            if self.arms[name].steps == 0:
                return self._plan(name, pending, f"probe {name}")
        best, best_rate = None, self.plain_rate * self.margin
        for name, arm in self.arms.items():
            if arm.wait > 0:
                continue
            if arm.rate > best_rate:
                best, best_rate = name, arm.rate
        if best is not None:
            return self._plan(best, pending, f"{best}: {best_rate:.2f} tokens/s > plain {self.plain_rate:.2f}")
        # nothing wins now: count down to the next probe of each kind
        due = None
        for name, arm in self.arms.items():  # an arm whose wait ran out stays due until probed
            if arm.wait > 0:
                arm.wait -= 1
                if arm.wait > 0:
                    continue
            if due is None:
                due = name
        if due is not None and self.expected_case(due, pending) > self.plain_rate * self.margin:
            return self._plan(due, pending, f"re-probe {due} after backing off")
        if due is not None:  # what it has learnt says it cannot win: wait the next stretch out too
            arm = self.arms[due]
            arm.wait = arm.backoff
            arm.backoff = min(arm.backoff * 2, 256)
        self.last_choice, self.reason = "none", "plain: speculation lost its last probe"
        return None

    def _plan(self, kind: str, pending: int, reason: str) -> StepPlan:
        lim = self.limits
        k = max(1, min(int(lim.draws), 4)) if kind == "draft" else 0
        method = "chain" if k == 1 else "resispec"
        params = lim.replace(method=method, draws=max(k, 1), policy="budget", use_draft=True)  # kind decides
        self.last_choice, self.reason = kind, reason
        plan = StepPlan(kind, params, self.target, self.draft if kind == "draft" else None,
                        accept=self.accept, overhead_s=self.overhead_s, pending=pending, row_s=self.row_s)
        return plan

    # -------------------------------------------------------------- learning

    def observe_step(self, plan: StepPlan, tokens: int, seconds: float) -> None:
        """A speculative step of ``plan`` emitted ``tokens`` in ``seconds`` (predicted)."""
        arm = self.arms[plan.kind]
        arm.observe(tokens, seconds, self.decay)
        if arm.rate <= self.plain_rate * self.margin:  # not better than plain: try again later
            arm.wait = arm.backoff
            arm.backoff = min(arm.backoff * 2, 256)
        else:
            arm.backoff = 4

    def record_time(self, plan: StepPlan | None, measured_s: float) -> None:
        """A step of ``plan`` (None: plain) took ``measured_s`` of wall time: kept beside its
        predicted time for ``summary``, never used to choose."""
        kind = "none" if plan is None else plan.kind
        predicted = 1.0 / self.plain_rate if plan is None else plan.cost
        t = self.timing.setdefault(kind, [0, 0.0, 0.0])
        t[0] += 1
        t[1] += predicted
        t[2] += measured_s

    def observe_node(self, accepted: bool) -> None:
        """A reached, expanded node was verified."""
        self.accept = (self.accept * self._acc_n * self.decay + float(accepted)) / (self._acc_n * self.decay + 1.0)
        self._acc_n = self._acc_n * self.decay + 1.0

    def summary(self) -> str:
        arms = ", ".join(f"{n} {a.rate:.2f} tokens/s over {a.steps} steps" for n, a in self.arms.items())
        times = ", ".join(f"{k} {1000 * p / n:.1f}/{1000 * m / n:.1f} ms over {n}"
                          for k, (n, p, m) in self.timing.items())
        return (f"auto: {self.last_choice} ({self.reason}); plain {self.plain_rate:.2f} tokens/s predicted; "
                f"{arms}; acceptance per node {self.accept:.2f}"
                + (f"; step time predicted/measured: {times}" if times else ""))
