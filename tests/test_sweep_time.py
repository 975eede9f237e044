"""Where a sweep's time went (memlab.sweep.breakdown): phase sums, shares and the file reader."""
import json

import pytest

from memlab.sweep.breakdown import main, phase_seconds, time_breakdown


def _row(check=2.0, recorded=1.0, steps=(0.5, 0.25, 0.25), reference=0.2, resident=0.4, flop=0.3):
    return {"extra": {"reference_check_s": check, "recorded_steps_s": recorded, "resident_step_s": resident,
                      "flop_step_s": flop}, "step_times_s": list(steps), "reference_step_time_s": reference}


def test_phase_seconds_sums_every_phase_and_counts_one_more_reference_step_than_technique_steps():
    p = phase_seconds([_row(), _row(check=4.0, steps=(1.0,))])
    assert p["reference_check_s"] == 6.0 and p["recorded_steps_s"] == 2.0
    assert p["timed_steps_s"] == 2.0
    assert p["timed_reference_steps_s"] == pytest.approx(0.2 * 4 + 0.2 * 2)
    assert p["resident_step_s"] == pytest.approx(0.8) and p["flop_step_s"] == pytest.approx(0.6)


def test_missing_or_bad_figures_count_zero():
    p = phase_seconds([{"status": "error", "extra": None, "step_times_s": None},
                       {"extra": {"reference_check_s": -1, "recorded_steps_s": "x", "flop_step_s": True}}])
    assert set(p.values()) == {0.0}


def test_breakdown_shares_and_the_time_outside_the_measurements():
    text = time_breakdown([_row()], wall_s=10.0, jobs=2)
    inside = 2 + 1 + 1 + 0.2 * 4 + 0.4 + 0.3
    assert f"time inside the 1 measurement(s): {inside:.0f} s" in text
    assert "at 2 job(s) (20 s of worker time)" in text
    assert " 36%  reference checks" in text  # 2 of 5.5 s
    assert f"{20 - inside:8.0f} s        outside the measured phases" in text


def test_file_reader_leaves_out_unreadable_lines_and_names_them(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_row()) + "\n{torn\n")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "(1 unreadable line(s) left out)" in out and "time inside the 1 measurement(s)" in out
    assert main([str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl: cannot read" in capsys.readouterr().err
    assert main([]) == 2
