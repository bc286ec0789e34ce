"""costs.py: a ``CostCurve`` is linear between its measured counts and continues along its
last stretch (never falling); ``measure_curve`` keeps each count's fastest round; ``measured``
measures once per identity and caches on disk (``$RESISPEC_COSTS``); ``host_row_seconds`` is a
positive time, cached too."""

import json
import os

import numpy as np
import pytest

from resispec_gguf.decoding import costs
from resispec_gguf.decoding.costs import CostCurve


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch):
    """Whatever else runs on the test machine, ``measured`` sees it quiet unless a test says
    (and with the default threshold, not the suite's "never busy")."""
    monkeypatch.setattr(costs.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.delenv("RESISPEC_BUSY_LOAD", raising=False)


def test_linear_between_the_counts_and_proportional_below_the_first():
    c = CostCurve((2, 4, 8), (1.0, 1.5, 3.5))
    assert c(0) == 0.0 and c(-3) == 0.0
    assert c(1) == pytest.approx(0.5)  # below the first count: a share of it
    assert [c(n) for n in (2, 4, 8)] == [1.0, 1.5, 3.5]  # the measured values themselves
    assert c(3) == pytest.approx(1.25) and c(6) == pytest.approx(2.5)


def test_beyond_the_last_count_along_the_last_slope_never_falling():
    c = CostCurve((1, 2, 4), (1.0, 1.5, 2.5))
    assert c(6) == pytest.approx(3.5) and c(10) == pytest.approx(5.5)
    dip = CostCurve((1, 2, 3, 4), (1.0, 1.7, 2.2, 1.6))
    assert dip(4) == 1.6 and dip(3) == 2.2  # a measured dip is kept where it was measured
    assert dip(9) == 1.6  # but not extrapolated downwards


def test_describe_shows_ratios_to_one_row():
    c = CostCurve((1, 2, 3, 4, 8, 16, 32), (2.0, 2.2, 2.4, 3.0, 4.0, 8.0, 16.0))
    assert c.describe() == "1:1.00 2:1.10 4:1.50 8:2.00 16:4.00"


def test_the_copy_ceiling_is_the_best_tokens_per_unit_of_cost():
    # the 2-core AMD's curve: 16 rows cost 6.45 times one row, the best at 16 of 2.48
    amd = CostCurve((1, 2, 4, 8, 16, 32), (1.0, 1.65, 2.71, 4.71, 6.45, 13.0))
    speedup, rows = amd.copy_ceiling()
    assert rows == 16 and speedup == pytest.approx(16 / 6.45)
    # a GPU: every row free up to 32, the ceiling 32
    assert CostCurve((1, 2, 4, 8, 16, 32), (1.0,) * 6).copy_ceiling() == (32.0, 32)
    # rows that cost what they are worth: no copy can gain, the ceiling is plain decoding
    assert CostCurve((1, 2, 4), (1.0, 2.0, 4.0)).copy_ceiling() == (1.0, 1)


def test_cost_table_is_read_only_and_zero_without_a_curve():
    c = CostCurve((1, 2, 4), (1.0, 1.5, 2.5))
    table = costs.cost_table(c, 6)
    assert table.tolist() == pytest.approx([c(i) for i in range(6)])
    assert not table.flags.writeable and costs.cost_table(c, 6) is table  # built once
    assert costs.cost_table(None, 3).tolist() == [0.0, 0.0, 0.0]


def test_measure_curve_keeps_each_counts_fastest_round(monkeypatch):
    """A fake clock: decoding n rows takes n seconds, plus 10 in the rounds where another job
    was busy during that count's decode (4 rows: in two rounds of three)."""
    clock = [0.0]
    monkeypatch.setattr(costs.time, "perf_counter", lambda: clock[0])
    busy = {(0, 1), (1, 2), (0, 4), (2, 4)}  # (round, rows)
    calls = []

    def decode_rows(n):
        calls.append(n)
        rnd = (len(calls) - 2) // 3  # after the warm-up, three counts per round
        clock[0] += n + (10.0 if (rnd, n) in busy else 0.0)

    curve = costs.measure_curve(decode_rows, rows=(1, 2, 4), repeats=3)
    assert calls == [1] + [1, 2, 4] * 3  # a warm-up, then interleaved rounds over all counts
    assert curve == CostCurve((1, 2, 4), (1.0, 2.0, 4.0))


def test_measured_is_cached_on_disk_per_identity(tmp_path, monkeypatch):
    cache = tmp_path / "sub" / "costs.json"
    monkeypatch.setenv("RESISPEC_COSTS", str(cache))
    runs = []

    def measure():
        runs.append(1)
        return CostCurve((1, 2), (0.5, 0.75 + len(runs)))

    first = costs.measured("model-a", measure)
    assert costs.measured("model-a", measure) == first and len(runs) == 1  # read back, not measured again
    other = costs.measured("model-b", measure)
    assert other != first and len(runs) == 2
    data = json.loads(cache.read_text())
    entry = data[costs.curve_cache_key("model-a")]
    assert entry["rows"] == [1, 2] and entry["seconds"] == [0.5, 1.75] and entry["at"] > 0  # when: for doctor
    assert len(data) == 2
    assert not [p for p in os.listdir(cache.parent) if p.endswith(".tmp")]  # written through a temporary file


def test_a_damaged_cache_is_measured_again_and_an_unwritable_one_skipped(tmp_path, monkeypatch):
    cache = tmp_path / "costs.json"
    cache.write_text("{not json")
    monkeypatch.setenv("RESISPEC_COSTS", str(cache))
    curve = CostCurve((1,), (0.1,))
    assert costs.measured("m", lambda: curve) == curve
    assert costs.load_cached_curve(str(cache), costs.curve_cache_key("m")) == curve  # rewritten
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RESISPEC_COSTS", str(blocker / "costs.json"))  # under a file: cannot be written
    runs = []
    assert costs.measured("m", lambda: runs.append(1) or curve) == curve
    assert costs.measured("m", lambda: runs.append(1) or curve) == curve and len(runs) == 2


def test_without_resispec_costs_the_cache_is_in_the_model_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("RESISPEC_COSTS", raising=False)
    monkeypatch.setenv("RESISPEC_CACHE", str(tmp_path / "models"))
    costs.measured("m", lambda: CostCurve((1,), (0.2,)))
    assert (tmp_path / "models" / "costs.json").is_file()


def test_host_row_seconds_is_a_positive_time_measured_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RESISPEC_COSTS", str(tmp_path / "costs.json"))
    seconds = costs.host_row_seconds(1000)
    assert isinstance(seconds, float) and seconds > 0 and np.isfinite(seconds)
    assert costs.host_row_seconds(1000) == seconds  # from the cache: identical
    assert len(json.loads((tmp_path / "costs.json").read_text())) == 1


def test_a_curve_measured_on_a_busy_machine_is_kept_not_measured_at_every_start(tmp_path, monkeypatch):
    """Measured while other work loaded the machine: stored as busy (``cache_state`` counts
    it) and read back at the next start as it is; measuring again at every start on a busy
    machine cost minutes (a corrected curve replaces it: ``costcheck``)."""
    cache = tmp_path / "costs.json"
    monkeypatch.setenv("RESISPEC_COSTS", str(cache))
    monkeypatch.setattr(costs.os, "getloadavg", lambda: (3.0 * (os.cpu_count() or 1), 0.0, 0.0))
    runs = []

    def measure():
        runs.append(1)
        return CostCurve((1, 2, 4), (0.9, 1.0, 4.0))

    key = costs.curve_cache_key("m")
    assert costs.measured("m", measure) == CostCurve((1, 2, 4), (0.9, 1.0, 4.0))
    assert json.loads(cache.read_text())[key]["busy"] is True
    assert costs.measured("m", measure) == CostCurve((1, 2, 4), (0.9, 1.0, 4.0)) and len(runs) == 1
    state = costs.cache_state()
    assert state["curves"] == 1 and state["busy"] == 1 and state["corrected"] == 0 and state["newest"] > 0
    costs.store_corrected("m", CostCurve((1, 2, 4), (0.5, 0.6, 1.5)))
    assert costs.measured("m", measure) == CostCurve((1, 2, 4), (0.5, 0.6, 1.5)) and len(runs) == 1
    assert costs.cache_state()["corrected"] == 1 and costs.cache_state()["busy"] == 1  # still a busy measurement


def test_a_busy_curve_is_measured_again_once_the_machine_is_quiet(tmp_path, monkeypatch):
    monkeypatch.setenv("RESISPEC_COSTS", str(tmp_path / "costs.json"))
    load = [3.0 * (os.cpu_count() or 1)]
    monkeypatch.setattr(costs.os, "getloadavg", lambda: (load[0], 0.0, 0.0))
    shapes = iter([(0.9, 1.0, 4.0), (0.5, 0.7, 1.1)])
    lines = []

    def measure():
        return CostCurve((1, 2, 4), next(shapes))

    assert costs.measured("m", measure, lines.append, "measuring m").seconds == (0.9, 1.0, 4.0)
    assert costs.measured("m", measure, lines.append, "measuring m").seconds == (0.9, 1.0, 4.0)  # busy still
    load[0] = 0.0
    assert costs.measured("m", measure, lines.append, "measuring m").seconds == (0.5, 0.7, 1.1)  # quiet: again
    assert costs.measured("m", measure, lines.append, "measuring m").seconds == (0.5, 0.7, 1.1)  # and settled
    assert lines == ["measuring m", "measuring m; again, as the cached figures were measured on a busy machine"]


def test_a_measurement_says_first_what_it_does_and_only_when_it_measures(tmp_path, monkeypatch):
    monkeypatch.setenv("RESISPEC_COSTS", str(tmp_path / "costs.json"))
    lines = []
    curve = CostCurve((1, 2), (0.1, 0.15))
    costs.measured("m", lambda: lines.append("measured") or curve, lines.append, "measuring m")
    costs.measured("m", lambda: lines.append("measured") or curve, lines.append, "measuring m")
    assert lines == ["measuring m", "measured"]


def _clocked(monkeypatch, cost):
    """A fake clock and a ``decode_rows`` that advances it by ``cost(n, calls so far)``."""
    clock, calls = [0.0], []
    monkeypatch.setattr(costs.time, "perf_counter", lambda: clock[0])

    def decode_rows(n):
        calls.append(n)
        clock[0] += cost(n, calls)

    return decode_rows, calls


def test_a_budget_bounds_the_measurement_warm_up_included(monkeypatch):
    """n rows take n seconds.  Budget 10: the warm-up and a first round (1, 2, 4) take 8 s;
    a decode is made only while it would end within the budget (a 1-row decode twice more),
    then within a quarter more the small counts are timed again (2 once)."""
    decode_rows, calls = _clocked(monkeypatch, lambda n, calls: float(n))
    curve = costs.measure_curve(decode_rows, rows=(1, 2, 4), repeats=3, budget_s=10.0)
    assert calls == [1, 1, 2, 4, 1, 1, 2] and curve == CostCurve((1, 2, 4), (1.0, 2.0, 4.0))


def test_a_first_round_past_the_budget_leaves_out_what_does_not_fit(monkeypatch):
    """Budget 8: 1 and 2 (always), then 4 fits; neither 8 nor 3 does: the curve goes on from 4."""
    decode_rows, calls = _clocked(monkeypatch, lambda n, calls: float(n))
    curve = costs.measure_curve(decode_rows, rows=(1, 2, 3, 4, 8), repeats=3, budget_s=8.0)
    assert curve.rows == (1, 2, 4) and 8 not in calls and 3 not in calls
    assert costs._priority((1, 2, 3, 4, 5, 8, 12, 16)) == [1, 2, 4, 8, 16, 3, 5, 12]


def test_a_count_dearer_than_a_larger_one_is_timed_again(monkeypatch):
    """One round fits the budget; its 2-row decode was slowed by other work (9 s, dearer
    than 4 rows' 4 s): in the quarter more it alone is timed again, and its 2 s kept."""
    decode_rows, calls = _clocked(monkeypatch, lambda n, calls: 9.0 if n == 2 and calls.count(2) == 1 else float(n))
    curve = costs.measure_curve(decode_rows, rows=(1, 2, 4), repeats=1, budget_s=30.0)
    assert calls == [1, 1, 2, 4, 2] and curve == CostCurve((1, 2, 4), (1.0, 2.0, 4.0))
    assert costs._suspects([1.0, 5.0, 4.0, 3.0]) == [1, 2] and costs._suspects([1.0, 2.0, 1.8]) == []
    assert costs._estimate({}, 4) == 0.0 and costs._estimate({2: [0.5, 0.4]}, 8) == 1.6


def test_the_machine_id_names_the_cores():
    assert costs.machine_id().endswith(f"|{os.cpu_count()}")


def test_a_machine_without_a_load_average_is_taken_as_quiet(monkeypatch):
    def missing():
        raise OSError("no load average here")

    monkeypatch.setattr(costs.os, "getloadavg", missing)
    assert costs._machine_busy() is False


def test_the_busy_threshold_can_be_set_or_turned_off(monkeypatch):
    cores = os.cpu_count() or 1
    monkeypatch.setattr(costs.os, "getloadavg", lambda: (0.5 * cores, 0.0, 0.0))
    assert costs._machine_busy() is False  # 0.5 per core: below the default 0.75
    monkeypatch.setenv("RESISPEC_BUSY_LOAD", "0.25")
    assert costs._machine_busy() is True
    monkeypatch.setenv("RESISPEC_BUSY_LOAD", "inf")
    assert costs._machine_busy() is False
    monkeypatch.setenv("RESISPEC_BUSY_LOAD", "lots")  # not a number: the default
    assert costs._machine_busy() is False


def test_one_row_never_costs_more_than_more_rows(monkeypatch):
    """The 1-row decode slowed by other work in every round (5 s, against 2 rows' 2 s): the
    curve's first figure is the least of all, the shape every other figure is read against."""
    decode_rows, calls = _clocked(monkeypatch, lambda n, calls: 5.0 if n == 1 else float(n))
    curve = costs.measure_curve(decode_rows, rows=(1, 2, 4), repeats=2)
    assert curve == CostCurve((1, 2, 4), (2.0, 2.0, 4.0))
