"""Every bad value is refused with one line and exit status 2 (issue 24, item 6).

--timeout (every command that has one), --budget, a repeated --param, an ``ok`` row whose recorded
error proves its reference check failed, ``memlab site`` with a missing input folder, and
``python -m memlab`` run from a folder holding a ``torch.py``.  The sweep file cases (--resume of
invalid rows, complete last lines, --out through a symbolic link) are in test_sweep_durable.py.
"""
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from memlab.advisor import AdviceError, parse_budget
from memlab.cli import main
from memlab.core.params import split_params
from memlab.results import ResultsWarning, load_runs, sweep_records, validate_measurement
from site_fixtures import MiB, measurement, write_jsonl
from process_checks import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memlab: error: ") and "Traceback" not in err, err
    return err.strip()


def _exit_code(argv) -> int:
    """``main(argv)``'s exit status, whether it returns it or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


# -- --timeout ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1", "1e400", "604801", "soon"])
@pytest.mark.parametrize("command", [["measure", "slice_loop"], ["sweep"], ["timeline", "slice_loop"],
                                     ["timelines"], ["check"]])
def test_timeout_must_be_finite_and_positive(command, value, capsys):
    assert _exit_code([*command, "--timeout", value]) == 2
    line = _one_error_line(capsys)
    assert f"argument --timeout: {value!r} is not valid: expected seconds > 0 and <= 604800 (a week)" in line


def test_a_valid_timeout_is_accepted(capsys):
    assert _exit_code(["measure", "no_such_technique", "--timeout", "0.5"]) == 2  # refused later, by name
    assert "unknown technique 'no_such_technique'" in _one_error_line(capsys)


def test_every_timeout_option_uses_the_one_helper():
    source = "".join(p.read_text() for p in sorted((ROOT / "memlab" / "cli").glob("*.py")))
    options = re.findall(r'add_argument\("--timeout",([^)]*)', source)
    assert options and all("type=timeout_seconds" in o for o in options), options


# -- --budget ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("budget, words", [
    ("1e400GiB", "is out of range: expected 1 byte to 1 YiB"),
    ("2e24", "is out of range: expected 1 byte to 1 YiB"),
    ("0", "is out of range: expected 1 byte to 1 YiB"),
    ("0.5", "is out of range: expected 1 byte to 1 YiB"),
    ("-1GiB", "is not a memory size; expected 1 byte to 1 YiB"),
    ("nan", "is not a memory size; expected 1 byte to 1 YiB"),
    ("inf", "is not a memory size; expected 1 byte to 1 YiB"),
])
def test_budget_out_of_range_is_one_line(budget, words, capsys):
    with pytest.raises(AdviceError, match=re.escape(f"--budget {budget!r} {words}")):
        parse_budget(budget)
    assert main(["advise", "--family", "chunking", f"--budget={budget}"]) == 2
    assert f"--budget {budget!r} {words}" in _one_error_line(capsys)


def test_budget_at_the_limits():
    assert parse_budget("1") == 1 and parse_budget("1TiB") == 2**40
    assert parse_budget(str(2**80)) == 2**80


# -- a repeated --param ------------------------------------------------------------------------------
def test_split_params_refuses_a_repeated_name():
    assert split_params(["n=64", " d =8"]) == {"n": "64", "d": "8"}
    with pytest.raises(ValueError, match=r"--param n is given twice \(n='1' and n='2'\); give it once"):
        split_params(["n=1", "d=2", "n=2"])


@pytest.mark.parametrize("argv", [
    ["measure", "slice_loop", "--param", "n=64", "--param", "n=128"],
    ["timeline", "slice_loop", "--param", "n=64", "--param", "n=128"],
    ["advise", "--family", "chunking", "--budget", "1GiB", "--param", "n=64", "--param", "n=128"],
], ids=["measure", "timeline", "advise"])
def test_repeated_param_is_refused_naming_both_values(argv, capsys):
    assert main(argv) == 2
    assert _one_error_line(capsys) == "memlab: error: --param n is given twice (n='64' and n='128'); give it once"


# -- an ok row whose error proves a failed check -----------------------------------------------------
def _checked(errors: dict, rel: float, tol=(1e-9, 1e-9), **fields) -> dict:
    rec = measurement("a", "f", {"n": 1}, MiB)
    rec.update({"matches_reference": True, "tolerance": list(tol), "errors_by_tensor": errors,
                "max_abs_error": max(errors.values()), "max_rel_error": rel, **fields})
    return rec


@pytest.mark.parametrize("rec", [
    _checked({"output": 1e-3, "grad:w": 0.0}, rel=1e-3),           # scale 1: allowed 2e-9
    _checked({"output": 1e-3}, rel=float("inf")),                  # scale 0: allowed atol
    _checked({"output": 1e-3, "grad:w": 1e-4}, rel=1e-9, tol=(0.0, 1e-6)),  # rtol 0: allowed atol
], ids=["one-tensor", "zero-reference", "absolute-tolerance"])
def test_ok_row_with_error_beyond_its_tolerance_is_invalid(rec):
    problems = validate_measurement(rec)
    assert len(problems) == 1 and problems[0].startswith("status 'ok' but max_abs_error 0.001 exceeds its tolerance")


@pytest.mark.parametrize("rec", [
    _checked({"output": 2e-9, "grad:w": 0.0}, rel=2e-9),           # scale 1: exactly atol + rtol * scale
    _checked({"output": 1e-3, "grad:w": 1e-12}, rel=1e-3),         # two tensors: scales unknown
    _checked({"output": 1e-3, "grad:w": 0.0}, rel=1e-3, matches_reference=False),  # says it failed
    _checked({"output": 1e-3, "grad:w": 0.0}, rel=1e-3, status="mismatch", error="differs"),
], ids=["at-tolerance", "several-tensors", "says-mismatch", "status-mismatch"])
def test_rows_the_figures_cannot_convict_stay_valid(rec):
    assert validate_measurement(rec) == []


def test_every_committed_row_passes():
    warned: list[str] = []
    rows = [rec for path in sorted((ROOT / "data" / "sweeps").glob("*.jsonl"))
            for _, rec in sweep_records(path, warned.append)]
    assert warned == [] and sum(r["status"] == "ok" for r in rows) > 250


def test_site_lists_the_row_as_invalid_and_does_not_rank_it(tmp_path):
    good = measurement("a", "f", {"n": 1}, MiB)
    bad = _checked({"output": 1e-3, "grad:w": 0.0}, rel=1e-3)
    bad["params"] = {"n": 2}
    path = tmp_path / "s.jsonl"
    write_jsonl(path, [good, bad])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResultsWarning)
        runs = load_runs([path])
    assert list(runs["params"]) == [{"n": 1}]
    assert [str(w.message) for w in caught] == [
        f"{path}:2: invalid measurement (status 'ok' but max_abs_error 0.001 exceeds its tolerance (rtol=1e-09, "
        f"atol=1e-09 allow 2e-09 here): the reference check failed); skipped"]


# -- memlab site with a missing input folder --------------------------------------------------------
@pytest.mark.parametrize("missing", ["--results", "--data"])
def test_site_refuses_a_missing_input_folder(tmp_path, capsys, missing):
    folders = {"--results": tmp_path / "results", "--data": tmp_path / "data"}
    for option, folder in folders.items():
        if option != missing:
            folder.mkdir()
    out = tmp_path / "site"
    argv = ["site", *(x for option, folder in folders.items() for x in (option, str(folder))), "--out", str(out)]
    assert main(argv) == 2
    assert _one_error_line(capsys) == f"memlab: error: {missing} {folders[missing]}: no such folder"
    assert not out.exists()


# -- python -m memlab from a folder holding torch.py --------------------------------------------------
def test_python_m_memlab_never_imports_from_the_current_folder(tmp_path):
    (tmp_path / "torch.py").write_text("raise SystemExit('imported torch.py from the current folder')\n")
    (tmp_path / "json.py").write_text("raise SystemExit('imported json.py from the current folder')\n")
    proc = subprocess.run([sys.executable, "-m", "memlab", "list", "--json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr
    assert any(t["name"] == "slice_loop" for t in json.loads(proc.stdout))
