"""What a decode costs on this machine: ``CostCurve`` (seconds of one decode of n rows),
measured once per model file and settings through the ``ModelBackend`` seam and cached on
disk, and the host time to turn one logits row into a distribution.  ``auto`` plans with
them; no wall-clock reading during a request steers a choice.

May import: ``kernels``, ``config``, ``paths`` and ``decoding.protocol``; never a concrete model.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from dataclasses import dataclass

import numpy as np

from ..kernels import sampling
from ..paths import cache_dir, read_json_dict, write_json_atomic

__all__ = ["ROW_COUNTS", "CostCurve", "backend_curve", "cost_table", "host_row_seconds", "measure_curve",
           "measured"]

# committed tokens before a cost curve is measured
_CURVE_CONTEXT = 128

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
    """The curve cached under ``key``, None when there is none (or it is unreadable)."""
    entry = _cached_entry(cache_file, key)
    return entry[0] if entry else None


def _cached_entry(cache_file: str, key: str) -> tuple[CostCurve, bool] | None:
    """``(curve, busy)`` cached under ``key``: ``busy`` when the machine was loaded while it
    was measured (``_machine_busy``)."""
    entry = read_json_dict(cache_file).get(key)
    try:
        return (CostCurve(tuple(entry["rows"]), tuple(entry["seconds"])), bool(entry.get("busy", False))) if entry else None
    except (KeyError, TypeError, AttributeError):
        return None


def store_cached_curve(cache_file: str, key: str, curve: CostCurve, busy: bool = False) -> None:
    data = read_json_dict(cache_file)
    data[key] = {"rows": list(curve.rows), "seconds": list(curve.seconds)} | ({"busy": True} if busy else {})
    write_json_atomic(cache_file, data)


# the 1-minute load average, per core, above which a measurement is taken as disturbed
BUSY_LOAD = 0.75


def _machine_busy() -> bool:
    """Whether other work loads the machine: the 1-minute load average above ``BUSY_LOAD``
    per core, or ``$RESISPEC_BUSY_LOAD`` ("inf": never busy, so a cached curve is always
    trusted, as the test suite does for reproducible runs); never where the platform has no
    load average."""
    try:
        limit = float(os.environ.get("RESISPEC_BUSY_LOAD", BUSY_LOAD))
    except ValueError:
        limit = BUSY_LOAD
    try:
        return os.getloadavg()[0] > limit * (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return False


def _fastest(a: CostCurve, b: CostCurve) -> CostCurve:
    """Each count's faster time of two measurements of the same counts (``a`` when the
    counts differ): other work can only add time."""
    if a.rows != b.rows:
        return a
    return CostCurve(a.rows, tuple(min(x, y) for x, y in zip(a.seconds, b.seconds)))


@functools.lru_cache(maxsize=16)
def cost_table(curve: CostCurve | None, n: int) -> np.ndarray:
    """``curve(i)`` for i = 0..n-1 (zeros without a curve), for vectorised look-ups; built
    once per curve (read-only: every request's tuner shares it)."""
    table = np.zeros(n) if curve is None else np.array([curve(i) for i in range(n)])
    table.flags.writeable = False
    return table


def measured(identity: str, measure) -> CostCurve:
    """``measure()``'s CostCurve for ``identity``, cached on disk (``$RESISPEC_COSTS``, else
    ``costs.json`` in the model cache) so that auto's choices stay deterministic; a cache
    that cannot be written is skipped.

    A curve measured while other work loaded the machine (``_machine_busy``, before or after
    measuring) is kept as *busy*: its times hold that work's share too, and not evenly (a
    curve measured under a load of 2.5 jobs per core made a 4-row decode cost 1.01x a 3-row
    one where it costs 1.3x, so ``auto`` added rows that did not pay).  It serves this
    process, and the next start measures again and keeps each count's fastest time of the
    two (other work can only add time), until a measurement on a quiet machine settles it."""
    cache = os.environ.get("RESISPEC_COSTS") or str(cache_dir() / "costs.json")
    key = curve_cache_key(identity)
    entry = _cached_entry(cache, key)
    if entry is not None and not entry[1]:
        return entry[0]
    busy = _machine_busy()
    curve = measure()
    busy = busy or _machine_busy()
    if entry is not None:
        curve = _fastest(curve, entry[0])
    try:
        store_cached_curve(cache, key, curve, busy)
    except OSError:
        pass
    return curve


def host_row_seconds(n_vocab: int) -> float:
    """Host time to turn one logits row of this vocabulary into a distribution and verify on
    it (measured once per vocabulary size, cached)."""

    def measure():
        row = np.random.default_rng(0).normal(0.0, 3.0, n_vocab).astype(np.float32)
        best = float("inf")
        row.flags.writeable = False  # as the backend's rows
        for _ in range(5):
            t = time.perf_counter()
            ids, probs = sampling.probs_sparse(row, 0.8, 40, 0.95, 0.05)  # as the generation's target p
            sampling.sample_sparse(ids, probs, 0.5)
            sampling.probs_sparse(row, 0.8, 40, 0.95, 0.05, 64)
            best = min(best, time.perf_counter() - t)
        return CostCurve((1,), (best,))

    # v2: since the target's p is sparse (rows read once, no dense [V] vector)
    return measured(f"host-row-v2:{n_vocab}", measure).seconds[0]


def backend_curve(model) -> CostCurve:
    """Seconds of one decode of n rows of ``model`` (a ``ModelBackend``), measured with a
    chain of n nodes after ``_CURVE_CONTEXT`` committed tokens (a reply's context rather than
    an empty one: attention over it is part of every row's cost); cached per ``cost_key()``.
    Leaves the model's cache empty."""

    def measure():
        context = max(0, min(_CURVE_CONTEXT, model.n_ctx - max(ROW_COUNTS) - 2))
        model.reset()
        if context:
            model.sync_prefix([min(100 + i % 50, model.n_vocab - 1) for i in range(context + 1)])

        def rows(n):
            model.decode([min(100 + i, model.n_vocab - 1) for i in range(n)], [-1] + list(range(n - 1)))
            model.drop_uncommitted()

        curve = measure_curve(rows)
        model.reset()
        return curve

    # v5: measured after a context, every count to 8, the fastest of interleaved rounds, and
    # measured again while the machine was busy (v4's were kept however busy it was)
    return measured("v5:" + model.cost_key(), measure)
