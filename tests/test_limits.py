"""memlab.measurement.flop_limits (``memlab bench-harness --limits``): the ratio arithmetic, the table and the loop,
with the measurements faked (the real ones take minutes; run ``memlab bench-harness --limits``)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import memlab
from memlab.measurement import flop_limits as limits
from memlab.cli import main
from memlab.core.errors import TechniqueUnavailable
from memlab.measurement.flop_limits import LimitRow, limit_points, limits_table, measure_limits


def test_flop_ratio_and_gap():
    row = LimitRow("tt_chunked", {"batch": 1024}, "dense", 1.3, 5_570_000, 6_144_000, "ok")
    assert row.flop_ratio == pytest.approx(5_570_000 / 6_144_000)
    assert row.gap == pytest.approx(1.3 / (5_570_000 / 6_144_000))
    missing = LimitRow("x", {}, None, None, None, None, "unavailable", "no tltorch")
    assert missing.flop_ratio is None and missing.gap is None


def test_table_has_one_line_per_row_and_dashes_for_missing_figures():
    rows = [LimitRow("slice_accumulate", {"n": 4000, "chunk_size": 40}, "unchunked", 1.25, 7, 6, "ok"),
            LimitRow("tltorch_blocktt_factorized", {"batch": 1024}, None, None, None, None, "unavailable",
                     "tensorly-torch is not importable")]
    lines = limits_table(rows).splitlines()
    assert len(lines) == 3 and "FLOP ratio" in lines[0] and "gap" in lines[0]
    assert "1.250" in lines[1] and "1.167" in lines[1] and "1.07" in lines[1] and "n=4000 chunk_size=40" in lines[1]
    assert lines[2].count(" - ") >= 3 and "unavailable: tensorly-torch is not importable" in lines[2]


def test_measure_limits_counts_each_baseline_once(monkeypatch):
    calls = []

    def fake_measure(name, **kw):
        calls.append((name, kw.get("repeats"), kw.get("batch")))
        if name == "tltorch_blocktt_factorized":
            raise TechniqueUnavailable("tensorly-torch is not importable")
        if name == "dense":
            return SimpleNamespace(flops=6 * kw["batch"], status="ok")
        return SimpleNamespace(relative_step_time=1.2, flops=5 * kw["batch"], relative_to="dense", status="ok",
                               error=None)

    monkeypatch.setattr(memlab, "measure", fake_measure)
    points = [("tt_chunked", {"batch": 8, "rank": 8, "chunk_size": 4}), ("tt_factorized", {"batch": 8, "rank": 8}),
              ("tt_factorized", {"batch": 16, "rank": 8}), ("tltorch_blocktt_factorized", {"batch": 8, "rank": 8})]
    rows = measure_limits(points, repeats=3)
    assert [c for c in calls if c[0] == "dense"] == [("dense", 1, 8), ("dense", 1, 16)]  # once per configuration
    assert [r.flop_ratio for r in rows[:3]] == [pytest.approx(5 / 6)] * 3
    assert rows[3].status == "unavailable" and rows[3].gap is None
    assert all(c[1] == 3 for c in calls if c[0] != "dense")


def test_points_are_valid_and_the_flag_runs_only_the_table(monkeypatch, capsys):
    for name, params in limit_points():
        memlab.get_technique(name)(**params)  # raises on a bad parameter
    monkeypatch.setattr(limits, "measure_limits",
                        lambda progress=None: [LimitRow("tt_factorized", {"batch": 8}, "dense", 1.1, 5, 6, "ok")])
    assert main(["bench-harness", "--limits"]) == 0
    out = capsys.readouterr().out
    assert "tt_factorized" in out and "FLOP ratio" in out and "spawn" not in out
