"""``method="auto"``: pick the tree shape (or plain decoding) that maximises tokens/s here.

A Sequoia-style cost model on measured costs.  ``CostCurve`` holds the measured wall time of
one decode of ``n`` rows, per model, on this machine and settings; ``AutoTuner`` combines it
with a running estimate of the per-depth acceptance rate:

    expected tokens per step  E(D, a) = 1 + a + a^2 + ... + a^D   (chain of depth D)
    step time                 T(D, N) = D * draft(rows per level) + target(N + 1) + overhead
    plain decoding            1 token per target(1) + overhead

and picks the candidate with the best E / T — ``none`` when nothing beats plain decoding.
If even *perfect* acceptance (a = 1) cannot beat plain decoding on these cost curves (a slow
CPU, where a batch of rows costs nearly rows x one row), speculation is switched off for good
and never probed: that is what keeps ``auto`` at plain-decoding speed there.  Otherwise the
tuner re-probes speculation now and then while running plain, so a drifting acceptance can
switch it back.

No model calls here: measuring is done by the caller (``measure_curve``) through a callback.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field

from .config import DraftParams

ROW_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


@dataclass(frozen=True)
class CostCurve:
    """Seconds for one decode of n rows, measured at ``ROW_COUNTS``; linear in between."""

    rows: tuple[int, ...]
    seconds: tuple[float, ...]

    def __call__(self, n: int) -> float:
        rows, secs = self.rows, self.seconds
        if n <= rows[0]:
            return secs[0] * n / rows[0]
        for (r0, s0), (r1, s1) in zip(zip(rows, secs), zip(rows[1:], secs[1:])):
            if n <= r1:
                return s0 + (s1 - s0) * (n - r0) / (r1 - r0)
        slope = (secs[-1] - secs[-2]) / (rows[-1] - rows[-2])
        return secs[-1] + slope * (n - rows[-1])


def measure_curve(decode_rows, rows=ROW_COUNTS, repeats: int = 2) -> CostCurve:
    """Time ``decode_rows(n)`` (one decode of n rows) for each n; keeps the fastest repeat."""
    decode_rows(1)  # warm-up
    out = []
    for n in rows:
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            decode_rows(n)
            best = min(best, time.perf_counter() - t)
        out.append(best)
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
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_cached_curve(cache_file: str, key: str, curve: CostCurve) -> None:
    try:
        with open(cache_file, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    data[key] = {"rows": list(curve.rows), "seconds": list(curve.seconds)}
    os.makedirs(os.path.dirname(cache_file) or ".", exist_ok=True)
    tmp = cache_file + f".{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, cache_file)


@dataclass(frozen=True)
class Plan:
    params: DraftParams  # method "none" for plain decoding
    tokens_per_s: float  # the model's prediction


def expected_tokens(depth: int, accept: float) -> float:
    """Tokens per step of a depth-``depth`` chain whose draws are accepted w.p. ``accept``."""
    return sum(accept**d for d in range(depth + 1))


@dataclass
class AutoTuner:
    target: CostCurve
    draft: CostCurve
    base: DraftParams = field(default_factory=lambda: DraftParams(method="resispec"))
    overhead_s: float = 0.0005  # per step, outside model calls
    accept: float = 0.7  # running per-depth acceptance estimate (prior)
    probe_every: int = 200  # plain tokens between probes, when probing makes sense
    margin: float = 1.03  # speculation must beat plain by this factor
    _since_probe: int = 0
    _probing: int = 0

    def candidates(self):
        for depth in range(1, 9):
            for width in (1, 2, 3):
                budget = depth * width
                draws = 1 if width == 1 else min(4, 2 * width)
                method = "chain" if width == 1 else self.base.method
                yield DraftParams(
                    method=method, draws=draws, depth=depth, budget=budget,
                    draft_support=self.base.draft_support, policy="budget",
                ), width

    def predict(self, params: DraftParams, width: int, accept: float) -> float:
        # a wider tree lifts the per-depth acceptance: the next draws get a second chance
        a = 1.0 - (1.0 - accept) ** (1.0 + 0.5 * (width - 1))
        e = expected_tokens(params.depth, a)
        t = params.depth * self.draft(width) + self.target(params.budget + 1) + self.overhead_s
        return e / t

    def plain_speed(self) -> float:
        return 1.0 / (self.target(1) + self.overhead_s)

    def best(self, accept: float) -> Plan:
        best = Plan(DraftParams(method="none"), self.plain_speed())
        for params, width in self.candidates():
            speed = self.predict(params, width, accept)
            if speed > best.tokens_per_s * (self.margin if best.params.method == "none" else 1.0):
                best = Plan(params, speed)
        return best

    @property
    def speculation_can_pay(self) -> bool:
        return self.best(1.0).params.method != "none"

    def choose(self) -> DraftParams:
        """The configuration for the next step."""
        plan = self.best(self.accept)
        if plan.params.method != "none":
            return plan.params
        if self.speculation_can_pay:
            self._since_probe += 1
            if self._probing > 0 or self._since_probe >= self.probe_every:
                self._since_probe = 0
                self._probing = max(self._probing - 1, 0) if self._probing else 3
                return self.best(1.0).params
        return plan.params

    def observe(self, accepted: int, reached: int) -> None:
        """Fold one step's per-depth acceptance counts into the running estimate."""
        if reached > 0:
            rate = accepted / reached
            w = min(0.5, 0.1 * reached)
            self.accept = (1 - w) * self.accept + w * rate
