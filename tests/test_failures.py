"""Failures become rows (status oom / error) and never stop a sweep."""
import memlab
from memlab.sweep import SweepPoint, run_sweep, read_jsonl
import pytest

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)


def test_error_and_oom_in_process(patterns):
    m = memlab.measure("pattern_raises", isolate=False)
    assert m.status == "error" and "deliberate failure" in m.error
    m = memlab.measure("pattern_oom", isolate=False)
    assert m.status == "oom" and "out of memory" in m.error


def test_real_allocator_oom_is_a_row(patterns):
    m = memlab.measure("pattern_huge", isolate=False, rows=10, cols=10)
    assert m.status == "oom", m.error
    assert "281474976710656" in m.error


def test_crash_and_timeout_become_error_rows(patterns):
    m = memlab.measure("pattern_crash", check=False, rows=10, cols=10)
    assert m.status == "error" and "exited with code 3" in m.error
    m = memlab.measure("pattern_hang", check=False, rows=10, cols=10, timeout=4)  # it hangs: any limit is hit
    assert m.status == "error" and "timed out after 4 s" in m.error


def test_sweep_goes_on_after_failures_and_writes_each_row(patterns, tmp_path):
    points = [SweepPoint("pattern_crash", {"rows": 10, "cols": 10}),
              SweepPoint("pattern_oom", {"rows": 10, "cols": 10}),
              SweepPoint("pattern_broadcast_mul", {"rows": 10, "cols": 10})]
    path = tmp_path / "sweep.jsonl"
    with open(path, "w") as f:
        rows = list(run_sweep(points, f, iterations=1, repeats=1, time_budget=0))
    assert [r.status for r in rows] == ["error", "oom", "ok"]
    back = read_jsonl(path)
    assert [r.technique for r in back] == ["pattern_crash", "pattern_oom", "pattern_broadcast_mul"]


def test_truncated_jsonl_line_warns_with_file_and_line(patterns, tmp_path):
    m = memlab.measure("pattern_broadcast_mul", isolate=False, repeats=1, iterations=1, time_budget=0, rows=4, cols=4)
    path = tmp_path / "partial.jsonl"
    path.write_text(m.to_json() + "\n" + m.to_json()[:40] + "\n")
    warnings = []
    rows = read_jsonl(path, warn=warnings.append)
    assert len(rows) == 1
    assert len(warnings) == 1 and "partial.jsonl:2" in warnings[0]
