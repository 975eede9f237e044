"""memlab compare: exact figures of two sweep files, point by point."""
import json

from memlab.cli import main
from memlab.sweep.compare import compare_sweeps


def _row(technique="t", peak=100, **extra):
    return {"technique": technique, "params": {"n": 2}, "mode": "train", "dtype": "float32", "device": "cpu",
            "peak_allocated_bytes": peak, "step_time_s": extra.pop("step_time_s", 1.0), **extra}


def _write(path, rows, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


def test_identical_figures_pass_and_times_are_not_compared(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_row(), _row("u", 5)])
    b = _write(tmp_path / "b.jsonl", [_row(step_time_s=9.0), _row("v", 7)])
    result = compare_sweeps(a, b)
    assert result.identical and result.shared == 1 and result.only_old == 1 and result.only_new == 1
    assert main(["compare", str(a), str(b)]) == 0


def test_one_byte_differs_exit_1_naming_the_point(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", [_row()])
    b = _write(tmp_path / "b.jsonl", [_row(peak=101)], tail="{not json\n")
    assert main(["compare", str(a), str(b)]) == 1
    out, err = capsys.readouterr()
    assert "t {\"n\": 2} train: peak_allocated_bytes 100 -> 101" in out and "1 differ" in out
    assert f"{b}:2: not JSON" in err


def test_schema_1_rows_are_sgd_given_and_missing_fields_are_skipped(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_row()])
    b = _write(tmp_path / "b.jsonl", [_row(optimizer="sgd", loss="given", total_peak_bytes=300)])
    result = compare_sweeps(a, b)
    assert result.shared == 1 and result.identical and result.fields_skipped >= 1
    c = _write(tmp_path / "c.jsonl", [_row(optimizer="adam")])
    assert compare_sweeps(a, c).shared == 0


def test_missing_file_is_one_line(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nope.jsonl"), str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl: no such sweep file" in capsys.readouterr().err
