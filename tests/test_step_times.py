"""Step times carry their spread and the load they were measured under (no time is asserted)."""
import pytest

import memlab
from memlab.measurement.timing import step_time_fields

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)


def test_median_and_interquartile_range():
    f = step_time_fields([0.5, 0.1, 0.2, 0.3, 0.4], samples_per_step=10)
    assert f["step_time_s"] == 0.3
    assert f["step_time_iqr_s"] == pytest.approx(0.4 - 0.2)
    assert f["samples_per_s"] == pytest.approx(10 / 0.3)
    assert step_time_fields([0.2], 1)["step_time_iqr_s"] is None
    assert step_time_fields([], 1) == {}


def test_measurement_records_samples_load_and_threads():
    # time_budget=0: exactly ``repeats`` timed steps (a budget may add more until the spread is stable)
    m = memlab.measure("unchunked", isolate=False, iterations=1, repeats=4, time_budget=0, n=64, d=8, hidden=16)
    assert len(m.step_times_s) == 4 and m.step_time_iqr_s is not None
    assert m.load_avg_before is not None and m.load_avg_after is not None
    assert m.environment["threads"] >= 1 and m.environment["cores"] >= 1
    assert "± " in m.step_time_text() and "n=4" in m.step_time_text()


def test_under_load_compares_the_load_average_with_the_cores():
    m = memlab.measure("unchunked", isolate=False, iterations=1, repeats=2, n=64, d=8, hidden=16)
    cores = m.environment["cores"]
    assert m.replace(load_avg_before=1.25 * cores + 0.1).under_load()
    assert not m.replace(load_avg_before=cores - 0.5, load_avg_after=0.0).under_load()
    # a sweep using every core holds the load at about the cores by itself: not a load (NOTE [ under load ])
    assert not m.replace(load_avg_before=cores + 0.2 * cores, load_avg_after=float(cores)).under_load()
    assert "[under load]" in m.replace(load_avg_after=cores * 3.0).step_time_text()


def test_relative_step_time_cancels_a_load_that_slows_both():
    from memlab.measurement.timing import relative_step_time

    # each step against the mean of the reference steps just before and after it
    assert relative_step_time([2.0, 4.0, 2.0], [1.0, 3.0, 1.0, 1.0]) == pytest.approx(2.0)   # 1, 2, 2
    assert relative_step_time([3.0, 3.0], [1.0, 1.0, 1.0]) == 3.0
    # a load that slows steps and references alike leaves the ratio unchanged
    assert relative_step_time([6.0, 6.0], [2.0, 2.0, 2.0]) == relative_step_time([3.0, 3.0], [1.0, 1.0, 1.0])
    assert relative_step_time([], [1.0]) is None


def test_measurement_carries_a_relative_step_time():
    m = memlab.measure("slice_loop", isolate=False, iterations=1, repeats=3, time_budget=0, n=64, d=8, hidden=16,
                       chunk_size=16)
    assert len(m.step_times_s) == 3          # budget 0: exactly the minimum
    assert m.relative_step_time > 0 and m.reference_step_time_s > 0


def test_bad_time_budget_names_the_value():
    with pytest.raises(ValueError, match=r"time_budget=-1 is not valid: expected seconds between 0 and 3600"):
        memlab.measure("unchunked", time_budget=-1)


@pytest.mark.parametrize("isolate", [False, "fork"])
def test_threads_sets_the_measurements_intra_op_threads_and_restores_ours(isolate):
    import torch

    ours = torch.get_num_threads()
    m = memlab.measure("unchunked", isolate=isolate, iterations=1, repeats=1, time_budget=0, check=False,
                       threads=1, n=64, d=8, hidden=16)
    assert m.status == "ok" and m.environment["threads"] == 1
    assert torch.get_num_threads() == ours


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "2"])
def test_bad_threads_names_the_value_and_the_range(bad):
    with pytest.raises(ValueError, match=rf"threads={bad!r}.*1 to 1024"):
        memlab.measure("unchunked", isolate=False, threads=bad, n=64, d=8, hidden=16)


def test_bench_harness_report_tables_each_technique_idle_and_loaded():
    from memlab.measurement.harness_cost import LoadRow, report

    rows = [LoadRow("idle", None, 0.5, 0.10, 0.01, rel, "slice_loop", 1.0, run)
            for run, rel in enumerate((1.00, 1.02, 1.01), start=1)]
    rows += [LoadRow("6-proc load", None, 6.2, 0.30, 0.01, rel, "slice_loop", 2.0, run)
             for run, rel in enumerate((1.03, 1.04, 1.03), start=1)]
    text = report([], rows)
    line = next(ln for ln in text.splitlines() if ln.startswith("slice_loop"))
    assert "1.000 1.020 1.010 ±2.0% @0.5/0.5/0.5" in line and "1.030 1.040 1.030 ±1.0% @6.2/6.2/6.2" in line
    assert line.split()[-2:] == ["1.020", "2.000"]     # loaded/idle of the medians: relative, then wall


def test_bench_harness_shows_the_reference_its_ratios_divide_by_and_the_spread():
    """Issue 29: the load table printed ratios against a row it did not show, and no IQR."""
    from memlab.measurement.harness_cost import LoadRow, report

    rows = [LoadRow("idle", None, 0.5, step, 0.002, rel, "slice_loop", 1.0, run, "unchunked", ref, run % 2)
            for run, (rel, step, ref) in enumerate(((1.00, 0.100, 0.098), (1.02, 0.102, 0.097), (1.01, 0.101, 0.099)), 1)]
    rows += [LoadRow("6-proc load", None, 6.2, 0.30, 0.60, rel, "slice_loop", 2.0, run, "unchunked", 0.29)
             for run, rel in enumerate((1.03, 1.04, 1.03), start=1)]
    lines = report([], rows).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("slice_loop"))
    detail = lines[at + 1:at + 4]
    assert "ratios against: unchunked" in detail[0]
    assert detail[1].startswith("  idle: relative IQR 0.010 (1.0% of the median 1.010)")
    assert "100.0 ± 2.0, 102.0 ± 2.0, 101.0 ± 2.0" in detail[1] and "reference step ms 98.0, 97.0, 99.0" in detail[1]
    assert "IQR above the median" not in detail[1]
    assert detail[1].endswith("timed on CPU 1, 0, 1")  # the CPU each run's timed phase was pinned to
    assert "timed on CPU -, -, -" in detail[2]  # not recorded: not pinned
    assert detail[2].startswith("  6-proc load: relative IQR 0.005") and "reference step ms 290.0, 290.0, 290.0" in detail[2]
    assert "run(s) 1, 2, 3: IQR above the median" in detail[2]


def test_timing_stops_only_once_the_median_ratio_is_precise():
    """NOTE [ when to stop timing ]: stable technique steps are not enough; the per-round ratios must
    pin their median to RATIO_PRECISION (0.93 IQR / sqrt(n) of the ratios)."""
    from memlab.measurement.timing import RATIO_PRECISION, _settled

    steady = [(1.0, 1.0)] * 9
    ref_steady = [(1.0, 1.0)] * 10
    assert _settled(steady, ref_steady, cpu_clock=True)
    # the baseline's steps cycle 1.0 / 1.1 / 1.2: the technique is stable, its 9 ratios (IQR ~7%) are not
    ref_drift = [(1.0, 1.0 + 0.1 * (i % 3)) for i in range(10)]  # neighbour means 1.05, 1.15, 1.1 ...
    assert not _settled(steady, ref_drift, cpu_clock=True)
    assert 0.93 * 0.07 / 9 ** 0.5 > RATIO_PRECISION and 0.93 * 0.07 / 199 ** 0.5 < RATIO_PRECISION
    many = [(1.0, 1.0)] * 199
    assert _settled(many, [(1.0, 1.0 + 0.1 * (i % 3)) for i in range(200)], cpu_clock=True)
    # the clock matters: wall times noisy (IQR 40% of the median), CPU times steady
    noisy_wall = [(1.0 + 0.4 * (i % 2), 1.0) for i in range(9)]
    assert _settled(noisy_wall, ref_steady, cpu_clock=True)
    assert not _settled(noisy_wall, ref_steady, cpu_clock=False)


def test_the_time_budget_is_spent_on_the_figures_clock(monkeypatch):
    """Under load a step's wall time stretches but its CPU time does not: the budget counts CPU time,
    so a loaded machine gets as many rounds as an idle one (NOTE [ when to stop timing ])."""
    from types import SimpleNamespace

    from memlab.measurement import timing

    calls = {"n": 0}

    def fake_timed(fn, device, log=None):  # every step: 1 s of wall, 10-13 ms of CPU
        calls["n"] += 1
        return 1.0, (0.013 if fn == "step" and calls["n"] % 4 == 0 else 0.010)

    monkeypatch.setattr(timing, "_timed", fake_timed)
    problems = SimpleNamespace(step="step", baseline="baseline", log=None, baseline_log=None,
                               sync_shadow=lambda: None, check_last=lambda: None)
    times, ref = timing._interleave(problems, None, 5, 0.5, cpu_clock=True)
    spent = sum(c for _, c in times) + sum(c for _, c in ref)
    assert 0.5 <= spent < 0.5 + 0.03  # stopped by the CPU-time budget, one round past it at most
    assert len(times) > 5  # a wall-clock budget (1 s per step) would have stopped at the fewest rounds
    assert len(ref) == len(times) + 1
