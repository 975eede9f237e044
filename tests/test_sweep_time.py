"""Where a sweep's time went (memlab.sweep.breakdown): phase sums, shares and the file reader."""
import json

import pytest

from memlab.sweep.breakdown import harness_seconds, main, phase_seconds, time_breakdown


def _row(check=2.0, recorded=1.0, steps=(0.5, 0.25, 0.25), reference=0.2, resident=0.4, flop=0.3, step_check=0.6,
         timing_setup=0.7, timed_check=0.8, server_start=0.0):
    return {"extra": {"reference_check_s": check, "recorded_steps_s": recorded, "resident_step_s": resident,
                      "flop_step_s": flop, "step_check_s": step_check, "timing_setup_s": timing_setup,
                      "timed_check_s": timed_check, "harness_s": {"server_start": server_start, "children": 9.0}},
            "step_times_s": list(steps), "reference_step_time_s": reference}


#: seconds inside one _row(): every phase, the reference steps as their median times their count
INSIDE = 2 + 1 + 1 + 0.2 * 4 + 0.4 + 0.3 + 0.6 + 0.7 + 0.8


def test_phase_seconds_sums_every_phase_and_counts_one_more_reference_step_than_technique_steps():
    p = phase_seconds([_row(), _row(check=4.0, steps=(1.0,))])
    assert p["reference_check_s"] == 6.0 and p["recorded_steps_s"] == 2.0
    assert p["timed_steps_s"] == 2.0
    assert p["timed_reference_steps_s"] == pytest.approx(0.2 * 4 + 0.2 * 2)
    assert p["resident_step_s"] == pytest.approx(0.8) and p["flop_step_s"] == pytest.approx(0.6)
    # the checks of every traced and timed step and the timed phase's build are phases (NOTE [ harness cost ])
    assert p["step_check_s"] == pytest.approx(1.2) and p["timed_check_s"] == pytest.approx(1.6)
    assert p["timing_setup_s"] == pytest.approx(1.4)
    assert "harness_s" not in p  # the servers' start is the harness's, not a measurement's


def test_missing_or_bad_figures_count_zero():
    p = phase_seconds([{"status": "error", "extra": None, "step_times_s": None},
                       {"extra": {"reference_check_s": -1, "recorded_steps_s": "x", "flop_step_s": True}}])
    assert set(p.values()) == {0.0}


def test_harness_seconds_is_the_wall_time_less_the_phases_and_the_servers_start():
    rows = [_row(server_start=3.0), _row()]
    cost = harness_seconds(rows, wall_s=20.0, jobs=2)
    assert cost["inside"] == pytest.approx(2 * INSIDE) and cost["server_start"] == 3.0
    assert cost["outside"] == pytest.approx(40 - 2 * INSIDE - 3) and cost["per_point"] == pytest.approx(cost["outside"] / 2)
    assert harness_seconds(rows, wall_s=1.0)["outside"] == 0.0  # never negative
    assert harness_seconds([], wall_s=5.0)["per_point"] == 0.0
    with pytest.raises(ValueError, match="jobs=0 is not valid"):
        harness_seconds(rows, 1.0, 0)


def test_breakdown_shares_and_the_time_outside_the_measurements():
    text = time_breakdown([_row(server_start=1.5)], wall_s=10.0, jobs=2)
    assert f"time inside the 1 measurement(s): {INSIDE:.0f} s" in text
    assert "at 2 job(s) (20 s of worker time)" in text
    assert f"{2 / INSIDE:4.0%}  reference checks" in text
    assert "     1.5 s        starting the measurement server(s), once per worker" in text
    outside = 20 - INSIDE - 1.5
    assert f"{outside:8.1f} s        outside the measured phases: {outside:.2f} s per point" in text


def test_file_reader_leaves_out_unreadable_lines_and_names_them(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_row()) + "\n{torn\n")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "(1 unreadable line(s) left out)" in out and "time inside the 1 measurement(s)" in out
    assert main([str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl: cannot read" in capsys.readouterr().err
    assert main([]) == 2
