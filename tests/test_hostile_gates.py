"""The last hostile cases (issue 46): nothing wrong passes a gate, nothing measured is overwritten, a
verdict needs evidence, a plug-in that attacks memlab itself is refused or contained.

Every test is cheap: hand-written rows, or one tiny plug-in point (tests/plugins/hostile_gates.py)."""
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.core.record import SCHEMA_VERSION, Measurement

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

PLUGINS = Path(__file__).parent / "plugins"
GATES = PLUGINS / "hostile_gates.py"
ROOT = Path(__file__).resolve().parents[1]


def _row(technique="t", n=2, status="ok", **fields) -> dict:
    """A row of three measured steps (fewer read ``leak_unknown``: NOTE [ verdicts ])."""
    m = Measurement(technique=technique, workload="w", family="f", params={"n": n}, device="cpu", dtype="float32",
                    mode="train", status=status, error=None if status == "ok" else f"fake {status}",
                    peak_allocated_bytes=64, matches_reference=True if status == "ok" else None,
                    allocated_after_step_bytes=(0, 0, 0))
    return {**m.to_dict(), **fields}


def _write(path: Path, rows, tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("memlab: error: ") and "Traceback" not in err
    return err


# -- item 4: compare and merge are gates that fail closed --------------------------------------------
def _not_sweep_files(tmp_path: Path) -> dict[str, Path]:
    files = {"empty": b"", "random": os.urandom(5000), "pyproject": (ROOT / "pyproject.toml").read_bytes(),
             "list": b"[1,2,3]\n", "object": b'{"a": 1}\n'}
    out = {}
    for name, data in files.items():
        out[name] = tmp_path / f"{name}.jsonl"
        out[name].write_bytes(data)
    return out


@pytest.mark.parametrize("kind", ["empty", "random", "pyproject", "list", "object"])
def test_compare_refuses_a_file_that_is_not_a_sweep_file(tmp_path, capsys, kind):
    bad = _not_sweep_files(tmp_path)[kind]
    good = _write(tmp_path / "good.jsonl", [_row()])
    for old, new in ((bad, bad), (good, bad), (bad, good)):
        assert main(["compare", str(old), str(new)]) == 2
        err = _one_error_line(capsys)
        assert str(bad) in err and "not a memlab sweep file" in err and "refused" in err


@pytest.mark.parametrize("kind", ["empty", "random", "pyproject", "list", "object"])
def test_merge_refuses_a_file_that_is_not_a_sweep_file(tmp_path, capsys, kind):
    bad = _not_sweep_files(tmp_path)[kind]
    good = _write(tmp_path / "good.jsonl", [_row()])
    out = tmp_path / "merged.jsonl"
    assert main(["merge", str(out), str(good), str(bad)]) == 2
    err = _one_error_line(capsys)
    assert str(bad) in err and "not a memlab sweep file" in err
    assert not out.exists()


@pytest.mark.parametrize("schema", [99, 0, "2", True])
def test_compare_and_merge_refuse_a_row_of_an_unknown_schema(tmp_path, capsys, schema):
    good = _write(tmp_path / "good.jsonl", [_row()])
    bad = _write(tmp_path / "bad.jsonl", [_row(), _row(n=3, schema=schema)])
    assert main(["compare", str(good), str(bad)]) == 2
    err = _one_error_line(capsys)
    assert f"{bad}:2:" in err and f"schemas 1 to {SCHEMA_VERSION}" in err
    assert main(["merge", str(tmp_path / "m.jsonl"), str(good), str(bad)]) == 2
    assert f"{bad}:2:" in _one_error_line(capsys)
    assert not (tmp_path / "m.jsonl").exists()


def test_compare_still_reads_a_torn_last_line_as_a_warning(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", [_row()])
    b = _write(tmp_path / "b.jsonl", [_row()], tail='{"technique": "t", "par')
    assert main(["compare", str(a), str(b)]) == 0
    out, err = capsys.readouterr()
    assert "identical" in out and f"{b}:2: not JSON" in err


def test_committed_sweeps_compare_identical_with_themselves(capsys):
    for path in sorted((ROOT / "data" / "sweeps").glob("*.jsonl")):
        assert main(["compare", str(path), str(path)]) == 0, path
        assert "identical" in capsys.readouterr().out


@pytest.mark.parametrize("limit", ["-1", "abc", "1.5"])
def test_compare_limit_is_validated(tmp_path, capsys, limit):
    a = _write(tmp_path / "a.jsonl", [_row()])
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(a), str(a), "--limit", limit])
    assert exc.value.code == 2
    assert "--limit" in capsys.readouterr().err


def test_compare_limit_0_prints_no_difference_but_counts_them(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", [_row()])
    b = _write(tmp_path / "b.jsonl", [_row(peak_allocated_bytes=65)])
    assert main(["compare", str(a), str(b), "--limit", "0"]) == 1
    out = capsys.readouterr().out
    assert "... and 1 more" in out and "1 differ" in out
    assert main(["compare", str(a), str(a), "--limit", "0"]) == 0
    assert "more" not in capsys.readouterr().out


def test_merge_refuses_two_verdicts_for_one_point(tmp_path, capsys):
    ok = _write(tmp_path / "ok.jsonl", [_row()])
    bad = _write(tmp_path / "bad.jsonl", [_row(status="mismatch")])
    for first, second in ((ok, bad), (bad, ok)):
        out = tmp_path / "m.jsonl"
        assert main(["merge", str(out), str(first), str(second)]) == 2
        err = _one_error_line(capsys)
        assert "two verdicts" in err and "'ok'" in err and "'mismatch'" in err
        assert str(ok) in err and str(bad) in err and not out.exists()


def test_merge_refuses_a_file_a_running_sweep_holds(tmp_path, capsys):
    from memlab.sweep import open_sweep_output

    done = _write(tmp_path / "done.jsonl", [_row()])
    busy = tmp_path / "busy.jsonl"
    with open_sweep_output(busy, append=False) as writer:
        writer.append(Measurement.from_dict(_row(n=3)))
        out = tmp_path / "m.jsonl"
        assert main(["merge", str(out), str(done), str(busy)]) == 2
        err = _one_error_line(capsys)
        assert str(busy) in err and "being written by a running sweep" in err and not out.exists()
    assert main(["merge", str(tmp_path / "m.jsonl"), str(done), str(busy)]) == 0  # lock released


# -- item 4: the site does not draw a row of an unknown schema or with an unknown field as ok ---------
def _site_rows(path: Path):
    from memlab.results import ResultsWarning, load_runs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = load_runs([path])
    return frame, [str(w.message) for w in caught if issubclass(w.category, ResultsWarning)]


def test_site_skips_a_row_of_an_unknown_schema_with_a_warning(tmp_path):
    path = _write(tmp_path / "s.jsonl", [_row(), _row(n=3, schema=99)])
    frame, said = _site_rows(path)
    assert list(frame["params_key"]) == ['{"n": 2}'] and list(frame["status_shown"]) == ["ok"]
    assert any(f"{path}:2:" in w and "schema" in w for w in said)


def test_site_does_not_rank_a_row_with_an_unknown_field(tmp_path):
    path = _write(tmp_path / "s.jsonl", [_row(), _row(n=3, made_up_field=1)])
    frame, said = _site_rows(path)
    shown = dict(zip(frame["params_key"], frame["status_shown"]))
    assert shown == {'{"n": 2}': "ok", '{"n": 3}': "unverified"}
    reason = frame.loc[frame["params_key"] == '{"n": 3}', "reason"].item()
    assert "made_up_field" in reason and any("made_up_field" in w for w in said)


def test_site_refuses_an_ok_row_whose_max_error_disagrees_with_errors_by_tensor(tmp_path):
    errors = {"output": 1e-9, "grad:w": 2e-9}
    good = _row(max_abs_error=2e-9, errors_by_tensor=errors, tolerance=[1e-7, 1e-9])
    bad = _row(n=3, max_abs_error=1e5, errors_by_tensor=errors, tolerance=[1e-7, 1e-9])
    frame, said = _site_rows(_write(tmp_path / "s.jsonl", [good, bad]))
    assert list(frame["params_key"]) == ['{"n": 2}']
    assert any("max_abs_error" in w and "errors_by_tensor" in w for w in said)


def test_every_committed_row_keeps_its_status(tmp_path):
    from memlab.results import validate_measurement

    for path in sorted((ROOT / "data" / "sweeps").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            assert validate_measurement(json.loads(line)) == [], path


# -- item 6: environment settings up front; documented ranges match the messages ----------------------
@pytest.mark.parametrize("name, value", [
    ("MEMLAB_TIMING_CPU", "99999"), ("MEMLAB_TIMING_CPU", "-1"), ("MEMLAB_TIMING_CPU", "abc"),
    ("MEMLAB_PLUGINS", "/nonexistent/plugin.py"), ("MEMLAB_COMMIT", "a\nb"), ("MEMLAB_CACHE", str(ROOT / "Makefile")),
])
def test_a_bad_environment_setting_is_refused_up_front(monkeypatch, capsys, name, value):
    monkeypatch.setenv(name, value)
    assert main(["measure", "unchunked", "--iterations", "3"]) == 2
    err = _one_error_line(capsys)
    assert f"{name}=" in err and "is not valid" in err


def test_a_bad_timing_cpu_is_refused_before_torch_in_a_fresh_process():
    env = {**os.environ, "MEMLAB_TIMING_CPU": "abc"}
    code = ("import sys; from memlab.cli import main; rc = main(['measure', 'unchunked']); "
            "print('torch' in sys.modules); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout.strip() == "False"
    assert "MEMLAB_TIMING_CPU='abc' is not valid" in proc.stderr


def test_good_environment_settings_pass():
    from memlab.core.env_settings import environment_problem

    cpu = str(min(os.sched_getaffinity(0)))
    assert environment_problem({"MEMLAB_TIMING_CPU": cpu, "MEMLAB_PLUGINS": str(GATES), "MEMLAB_COMMIT": "abc123",
                                "MEMLAB_CACHE": str(ROOT)}) is None
    assert environment_problem({"MEMLAB_TIMING_CPU": "none", "MEMLAB_PLUGINS": ""}) is None


def test_the_documented_budget_range_is_the_one_the_message_states():
    from memlab.advisor.advise import AdviceError, parse_budget

    with pytest.raises(AdviceError) as exc:
        parse_budget("2e30")
    stated = exc.value.args[0].split("expected ")[1].split(" (")[0]  # '1 byte to 1 YiB'
    assert stated == "1 byte to 1 YiB"
    for doc in ("docs/cli.md", "docs/threat-model.md"):
        text = (ROOT / doc).read_text()
        assert f"`--budget` outside {stated}" in text and "EiB" not in text, doc


# -- item 2: a verdict needs evidence -------------------------------------------------------------
def test_check_calls_a_technique_twice(capsys):
    import memlab

    memlab.load_plugin(GATES)
    assert main(["check", "--plugin", str(GATES), "gates_right_once"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL  gates_right_once")
    assert main(["check", "--plugin", str(GATES), "gates_right"]) == 0
    assert capsys.readouterr().out.startswith("PASS  gates_right")


def test_leak_evidence_needs_three_steps():
    from memlab.core.record import MIN_LEAK_STEPS, row_reason, row_status
    from memlab.measurement.verdict import MIN_LEAK_STEPS as DECIDED, decide

    assert MIN_LEAK_STEPS == DECIDED == 3
    mib = 2**20
    assert decide(None, None, [mib, mib])[0] == "ok" and decide(None, None, [mib, mib, 2 * mib])[0] == "leak"
    for after, shown in (([mib, mib], "leak_unknown"), ([0], "leak_unknown"), ([], "leak_unknown"),
                         ([0, 0, 0], "ok"), ([0, 0, 0, 0, 0], "ok")):
        assert row_status({"status": "ok", "allocated_after_step_bytes": after}) == shown, after
    assert row_reason({"status": "ok", "allocated_after_step_bytes": [mib, mib]}) == \
        "leak unknown: 2 steps measured, 3 needed (--iterations 3)"
    for status in ("mismatch", "leak", "oom", "error"):  # a failure needs no more steps than it has
        assert row_status({"status": status, "allocated_after_step_bytes": [0]}) == status


def _sweep_in_process(tmp_path, iterations: int, *extra: str) -> tuple[int, Path, str]:
    import contextlib
    import io

    out = tmp_path / f"it{iterations}.jsonl"
    with contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(["sweep", "--plugin", str(GATES), "--technique", "gates_right", "--in-process", "--iterations",
                     str(iterations), "--repeats", "1", "--time-budget", "0", "--out", str(out), *extra])
    return code, out, err.getvalue()


def test_two_measured_steps_are_leak_unknown_on_the_site_and_in_the_summary(tmp_path):
    code, out, err = _sweep_in_process(tmp_path, 2)
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == 0  # NOTE [ verdicts ]: no check failed; the verdict is on stderr and in every reader
    assert row["status"] == "ok" and len(row["allocated_after_step_bytes"]) == 2 and "leak_unknown" not in row["extra"]
    assert Measurement.from_dict(row).verdict == "leak_unknown"
    assert "1 point: 1 leak unknown" in err
    assert "leak unknown gates_right n=2: leak unknown: 2 steps measured, 3 needed (--iterations 3)" in err
    frame, _ = _site_rows(out)
    assert list(frame["status_shown"]) == ["leak unknown"]
    assert frame["reason"].item() == "leak unknown: 2 steps measured, 3 needed (--iterations 3)"
    code3, out3, err3 = _sweep_in_process(tmp_path, 3)
    (row3,) = [json.loads(line) for line in out3.read_text().splitlines()]
    assert code3 == 0 and Measurement.from_dict(row3).verdict == "ok" and "1 point: 1 ok" in err3
    assert list(_site_rows(out3)[0]["status_shown"]) == ["ok"]


def test_make_demo_and_make_data_measure_three_steps():
    makefile = (ROOT / "Makefile").read_text()
    for var in ("DEMO_SWEEP", "SWEEP_FLAGS"):
        (line,) = [ln for ln in makefile.splitlines() if ln.startswith(f"{var} :=")]
        assert "--iterations 3" in line, line


# -- item 5: nothing measured is overwritten by accident ---------------------------------------------
def test_a_fresh_sweep_over_measured_rows_needs_force_append_or_resume(tmp_path, capsys):
    code, out, _ = _sweep_in_process(tmp_path, 3)
    before = out.read_bytes()
    code, _, err = _sweep_in_process(tmp_path, 3)
    assert code == 2 and out.read_bytes() == before
    (line,) = err.strip().splitlines()
    assert line == (f"memlab: error: --out {out} holds 1 measured row; give --resume to continue it, --append to "
                    f"add to it, or --force to replace it")
    assert _sweep_in_process(tmp_path, 3, "--resume")[0] == 0 and out.read_bytes() == before
    assert _sweep_in_process(tmp_path, 3, "--append")[0] == 0 and len(out.read_text().splitlines()) == 2
    assert _sweep_in_process(tmp_path, 3, "--force")[0] == 0 and len(out.read_text().splitlines()) == 1


def test_a_file_without_measured_rows_is_replaced_without_force(tmp_path):
    out = tmp_path / "it3.jsonl"
    for text in ("", "\n", "not a row\n"):
        out.write_text(text)
        assert _sweep_in_process(tmp_path, 3)[0] == 0 and len(out.read_text().splitlines()) == 1


# -- item 3: the measuring child's parent is expendable ---------------------------------------------
@pytest.mark.parametrize("how", [[], ["--spawn"]], ids=["forked", "spawned"])
def test_a_plugin_that_kills_its_parent_costs_an_error_row_not_the_cli(tmp_path, how):
    out = tmp_path / "killed.jsonl"
    argv = [sys.executable, "-m", "memlab", "sweep", "--plugin", str(GATES), "--technique", "gates_kills_parent",
            "--iterations", "3", "--repeats", "1", "--time-budget", "0", "--timeout", "120", "--out", str(out), *how]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["status"] == "error" and "signal 9" in row["error"], row["error"]
    assert "1 point: 1 error" in proc.stderr


def test_the_nanny_ends_as_its_child_ended(tmp_path):
    from memlab.measurement.launch import command

    script = tmp_path / "m.py"
    for body, code in (("raise SystemExit(3)", 3), ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
                                                     -signal.SIGSEGV), ("print('fine')", 0)):
        script.write_text(body + "\n")
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        proc = subprocess.run(command("m", nanny=True), env=env, cwd=tmp_path, capture_output=True, timeout=60)
        assert proc.returncode == code, proc.stderr


# -- item 1: a plug-in cannot replace what memlab measures against ------------------------------------
def test_a_plugin_that_replaces_a_builtin_reference_is_refused(capsys):
    import memlab
    from memlab.registry import get_workload, list_techniques

    workload = get_workload("chained_matmul")
    reference = workload.__dict__["reference"]
    hostile = PLUGINS / "replaces_reference.py"
    assert main(["measure", "--plugin", str(hostile), "replaced_reference_half", "--in-process"]) == 2
    err = _one_error_line(capsys)
    assert str(hostile) in err and "ChainedMatmul.reference" in err and "refused" in err
    assert workload.__dict__["reference"] is reference  # put back
    assert "replaced_reference_half" not in list_techniques()
    with pytest.raises(ImportError, match="ChainedMatmul.reference"):
        memlab.load_plugin(hostile)  # refused every time, not loaded on a second try


def test_a_plugin_that_changes_a_builtin_tolerance_in_place_is_refused(tmp_path):
    import memlab
    from memlab.registry import get_workload

    workload = get_workload("chained_matmul")
    before = dict(workload.tolerances)
    plugin = tmp_path / "loosens.py"
    plugin.write_text("from memlab.registry import get_workload\n"
                      "get_workload('chained_matmul').tolerances['float64'] = (1e9, 1e9)\n")
    with pytest.raises(ImportError, match="ChainedMatmul.tolerances"):
        memlab.load_plugin(plugin)
    assert workload.tolerances == before


def test_a_row_whose_identity_fields_have_the_wrong_type_is_not_a_row(tmp_path, capsys):
    odd = {"technique": "t", "params": {}, "mode": 5, "device": 7, "dtype": [1], "optimizer": {}}
    bad = _write(tmp_path / "odd.jsonl", [odd])
    assert main(["compare", str(bad), str(bad)]) == 2
    assert "not a memlab sweep file" in _one_error_line(capsys)
    assert main(["merge", str(tmp_path / "m.jsonl"), str(bad)]) == 2
    assert "not a memlab sweep file" in _one_error_line(capsys)
    later = _write(tmp_path / "later.jsonl", [_row(), odd])
    assert main(["compare", str(later), str(later)]) == 0
    assert f"{later}:2: not a memlab row" in capsys.readouterr().err
