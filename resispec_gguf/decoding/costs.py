"""What a decode costs on this machine: ``CostCurve`` (seconds of one decode of n rows),
measured once per model content, build, settings and machine through the ``ModelBackend``
seam and cached on disk, and the host time to turn one logits row into a distribution.
``auto`` plans with them; no wall-clock reading during a request steers a choice (between
requests ``costcheck.CurveCheck`` may correct a curve that measured steps contradict).

A start measures only what the cache lacks, says so first (``note``: one line, what, why,
about how long) and spends about ``MEASURE_BUDGET_S`` per curve (``measure_curve``): a
figure measured while the machine was busy is kept (``busy`` in the cache, for ``doctor``)
rather than measured again at every start.

May import: ``kernels``, ``config``, ``paths`` and ``decoding.protocol``; never a concrete model.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import time
from dataclasses import dataclass

import numpy as np

from ..kernels import sampling
from ..paths import cache_dir, read_json_dict, write_json_atomic

__all__ = ["MEASURE_BUDGET_S", "ROW_COUNTS", "CostCurve", "backend_curve", "cache_file", "cache_state",
           "cost_table", "host_row_seconds", "machine_id", "measure_curve", "measured", "measuring_line",
           "store_corrected"]

# committed tokens before a cost curve is measured: a reply's context rather than none, and
# short, as its prefill counts against the budget (129 tokens took 15 s of a 1.5B target on
# the 2-core machine under a load of 8)
_CURVE_CONTEXT = 32

# every count up to 8: on a CPU llama.cpp's batched kernels make some counts cheaper than
# smaller ones (a decode of 4 rows can cost less than one of 2 or 3), which a coarser grid
# with interpolation would hide
ROW_COUNTS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32)

# seconds one curve's measurement may take, the context's prefill included, and a quarter more
# for timing again what looks disturbed (a busy 2-core machine took 160 s for three full
# rounds of both models); later rounds only refine the fastest times
MEASURE_BUDGET_S = 6.0


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

    def copy_ceiling(self, max_rows: int = 32) -> tuple[float, int]:
        """``(speed-up, rows)``: the most a perfect copy could gain over plain decoding, a
        decode of n rows then taking n tokens (n - 1 candidates accepted and the bonus): the
        largest ``n * cost(1) / cost(n)`` for n up to ``max_rows`` (the measured counts'
        range), and the n that reaches it."""
        one = self(1)
        if one <= 0.0:
            return 1.0, 1
        top = min(max_rows, max(self.rows))
        return max(((n * one / self(n), n) for n in range(1, top + 1)), key=lambda t: (t[0], -t[1]))

    def describe(self) -> str:
        base = self.seconds[0]
        return " ".join(f"{r}:{s / base:.2f}" for r, s in zip(self.rows, self.seconds) if r in (1, 2, 4, 8, 16))


def measure_curve(decode_rows, rows=ROW_COUNTS, repeats: int = 3, budget_s: float | None = None) -> CostCurve:
    """Time ``decode_rows(n)`` (one decode of n rows) for each n, in ``repeats`` rounds over
    all n, keeping each n's fastest round: another job on a shared machine can only add time,
    and it adds it unevenly (a busy moment during the 4-row decode of one round would make 4
    rows look dearer than 8), so the fastest round is the machine's own shape.

    ``budget_s`` bounds the measurement, warm-up included: a decode is made only if, priced
    from the counts timed so far (``_estimate``), it would end within the budget; the first
    round takes the counts in ``_priority`` order (1 and 2 always), and a count it cannot
    fit is left out (the curve goes on along its last measured stretch).  What is left of
    the budget, and a quarter more, goes to timing again the small counts and those that
    still cost more than a larger count (``_suspects``): where one busy moment shows in a
    curve of one round."""
    start = time.perf_counter()
    decode_rows(1)  # warm-up
    times: dict[int, list[float]] = {}

    def timed(n: int) -> None:
        t = time.perf_counter()
        decode_rows(n)
        times.setdefault(n, []).append(time.perf_counter() - t)

    def fits(n: int, limit: float | None = budget_s, cost: float | None = None) -> bool:
        cost = _estimate(times, n) if cost is None else cost
        return limit is None or time.perf_counter() - start + cost <= limit

    for n in _priority(rows) if budget_s is not None else rows:
        if len(times) < 2 or fits(n):
            timed(n)
    for _ in range(repeats - 1):
        for n in [n for n in rows if n in times]:
            if fits(n):
                timed(n)
    counts = tuple(n for n in rows if n in times)
    if budget_s is not None:
        for _ in range(repeats):
            best = [min(times[n]) for n in counts]
            for i in sorted(set(_suspects(best)) | {i for i, n in enumerate(counts) if n <= 4 and len(times[n]) < repeats}):
                if fits(counts[i], 1.25 * budget_s, min(best[i:])):  # a suspect costs what a larger count does
                    timed(counts[i])
    # not forced to grow with n: a batch of some sizes may really cost less than a smaller one;
    # but never less than one row, whose figure every other is read against (a 1-row decode
    # slowed by other work made 4 rows look 0.3x one row, and speculation look free)
    best = [float(np.min(times[n])) for n in counts]
    best[0] = min(best)
    return CostCurve(counts, tuple(best))


def _priority(rows) -> list[int]:
    """``rows`` in the order a bounded measurement takes them: 1, 2, 4, 8, ... first (the
    shape ``auto`` reads most), then the counts between, smallest first."""
    powers = [n for n in rows if n & (n - 1) == 0]
    return powers + [n for n in rows if n not in powers]


def _estimate(times: dict, n: int) -> float:
    """The seconds a decode of ``n`` rows may take, from the counts timed so far: the
    nearest timed count's fastest time, scaled up in proportion past it (rows cost at most
    in proportion on a CPU); 0 before any."""
    if not times:
        return 0.0
    below = [m for m in times if m <= n]
    m = max(below) if below else min(times)
    return min(times[m]) * max(1.0, n / m)


def _suspects(best: list[float], slack: float = 1.15) -> list[int]:
    """The counts whose best time exceeds a larger count's by more than ``slack``: likely a
    decode that other work slowed (on this 2-core machine one round under load timed 4 rows
    at 594 ms and 6 at 222)."""
    later = np.minimum.accumulate(np.array(best)[::-1])[::-1]  # the least time of each count and those above it
    return [i for i in range(len(best) - 1) if best[i] > slack * later[i + 1]]


def curve_cache_key(identity: str) -> str:
    """The cache key of a model's cost curve, from its ``cost_key()``."""
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


def cache_file() -> str:
    """Where measured costs are kept: ``$RESISPEC_COSTS``, else ``costs.json`` in the model cache."""
    return os.environ.get("RESISPEC_COSTS") or str(cache_dir() / "costs.json")


def load_cached_curve(cache_file: str, key: str) -> CostCurve | None:
    """The curve cached under ``key``, None when there is none (or it is unreadable)."""
    entry = _cached_entry(cache_file, key)
    return entry["curve"] if entry else None


def _cached_entry(cache_file: str, key: str) -> dict | None:
    """The entry cached under ``key``: ``curve``, ``busy`` (the machine was loaded while it
    was measured, ``_machine_busy``), ``at`` (when written, seconds since the epoch; 0 for an
    entry older than the field) and ``source`` ("measured" or "corrected", ``store_corrected``)."""
    entry = read_json_dict(cache_file).get(key)
    try:
        if not entry:
            return None
        return {"curve": CostCurve(tuple(entry["rows"]), tuple(entry["seconds"])), "busy": bool(entry.get("busy")),
                "at": float(entry.get("at", 0.0)), "source": str(entry.get("source", "measured"))}
    except (KeyError, TypeError, AttributeError, ValueError):
        return None


def store_cached_curve(cache_file: str, key: str, curve: CostCurve, busy: bool = False,
                       source: str = "measured") -> None:
    data = read_json_dict(cache_file)
    data[key] = ({"rows": list(curve.rows), "seconds": list(curve.seconds), "at": round(time.time(), 1)}
                 | ({"busy": True} if busy else {}) | ({"source": source} if source != "measured" else {}))
    write_json_atomic(cache_file, data)


def store_corrected(identity: str, curve: CostCurve) -> None:
    """Keep ``curve``, corrected from measured steps (``costcheck``), as ``identity``'s
    figures for the next starts; a cache that cannot be written is skipped."""
    cache, key = cache_file(), curve_cache_key(identity)
    entry = _cached_entry(cache, key)  # a busy measurement stays marked busy: a quiet start measures it again
    try:
        store_cached_curve(cache, key, curve, bool(entry and entry["busy"]), source="corrected")
    except OSError:
        pass


def cache_state() -> dict:
    """What the cost cache holds, for ``doctor``: its ``path``, ``curves`` (decode curves,
    host-row figures aside), how many were ``busy`` or ``corrected``, and ``newest``/``oldest``
    (when written, seconds since the epoch; 0 when unknown)."""
    path = cache_file()
    data = read_json_dict(path)
    entries = [e for e in (_cached_entry(path, k) for k in data) if e is not None and len(e["curve"].rows) > 1]
    ats = [e["at"] for e in entries]
    return {"path": path, "curves": len(entries), "busy": sum(e["busy"] for e in entries),
            "corrected": sum(e["source"] == "corrected" for e in entries),
            "newest": max(ats, default=0.0), "oldest": min(ats, default=0.0)}


# the 1-minute load average, per core, above which a measurement is taken as disturbed
BUSY_LOAD = 0.75


def _machine_busy() -> bool:
    """Whether other work loads the machine: the 1-minute load average above ``BUSY_LOAD``
    per core, or ``$RESISPEC_BUSY_LOAD`` ("inf": never busy); never where the platform has
    no load average.  Only recorded with a measurement (``doctor`` says how many cached
    figures were measured busy): a start does not measure again for it."""
    try:
        limit = float(os.environ.get("RESISPEC_BUSY_LOAD", BUSY_LOAD))
    except ValueError:
        limit = BUSY_LOAD
    try:
        return os.getloadavg()[0] > limit * (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return False


@functools.lru_cache(maxsize=16)
def cost_table(curve: CostCurve | None, n: int) -> np.ndarray:
    """``curve(i)`` for i = 0..n-1 (zeros without a curve), for vectorised look-ups; built
    once per curve (read-only: every request's tuner shares it)."""
    table = np.zeros(n) if curve is None else np.array([curve(i) for i in range(n)])
    table.flags.writeable = False
    return table


def measured(identity: str, measure, note=None, what: str = "") -> CostCurve:
    """``measure()``'s CostCurve for ``identity``, cached on disk (``cache_file``) so that
    auto's choices stay deterministic; a cache that cannot be written is skipped.

    A cached figure measured while other work loaded the machine (kept as *busy*) is used
    as it is while the machine is still busy: measuring again at every start on a busy
    machine cost minutes, and a curve that steps contradict is corrected from them
    (``costcheck``); the first start that finds the machine quiet measures it again (once:
    that measurement is not busy).  ``note(line)`` is told before a measurement, with
    ``what`` (what is measured and about how long)."""
    cache = cache_file()
    key = curve_cache_key(identity)
    entry = _cached_entry(cache, key)
    if entry is not None and not (entry["busy"] and not _machine_busy()):
        return entry["curve"]
    if note is not None and what:
        note(what if entry is None else f"{what}; again, as the cached figures were measured on a busy machine")
    busy = _machine_busy()
    curve = measure()
    busy = busy or _machine_busy()
    try:
        store_cached_curve(cache, key, curve, busy)
    except OSError:
        pass
    return curve


@functools.lru_cache(maxsize=1)
def machine_id() -> str:
    """The machine a cost was measured on: its architecture, CPU model and cores (a cache
    copied to another machine, or a container given other cores, measures afresh)."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.machine()}|{model or platform.processor()}|{os.cpu_count()}"


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


def backend_curve(model, note=None, name: str = "") -> CostCurve:
    """Seconds of one decode of n rows of ``model`` (a ``ModelBackend``), measured with a
    chain of n nodes after ``_CURVE_CONTEXT`` committed tokens (a reply's context rather than
    an empty one: attention over it is part of every row's cost); cached per ``cost_key()``
    and ``machine_id``.  ``note``/``name``: told before a measurement (``measured``).  Leaves
    the model's cache empty."""

    def measure():
        start = time.perf_counter()
        context = max(0, min(_CURVE_CONTEXT, model.n_ctx - max(ROW_COUNTS) - 2))
        model.reset()
        if context:
            model.sync_prefix([min(100 + i % 50, model.n_vocab - 1) for i in range(context + 1)])

        def rows(n):
            model.decode([min(100 + i, model.n_vocab - 1) for i in range(n)], [-1] + list(range(n - 1)))
            model.drop_uncommitted()

        curve = measure_curve(rows, budget_s=max(0.0, MEASURE_BUDGET_S - (time.perf_counter() - start)))
        model.reset()
        return curve

    return measured(curve_identity(model), measure, note, measuring_line(name or "model", cache_file()))


def measuring_line(name: str, where: str) -> str:
    """The line a start prints before it measures ``name``'s curve (``where``: the cache file)."""
    return (f"measuring what a decode of 1 to {max(ROW_COUNTS)} rows costs the {name} here, for auto (first start "
            f"with this model, build and settings; about {MEASURE_BUDGET_S:.0f} s, more on a busy machine; then cached "
            f"in {where})")


def curve_identity(model) -> str:
    """The identity ``model``'s curve is cached under: its ``cost_key()`` and ``machine_id``."""
    # v6: keyed by content, build and machine (v5's by file path and modification time)
    return f"v6:{model.cost_key()}|{machine_id()}"
