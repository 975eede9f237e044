"""CLI: bad input is one line, exit status 2, no traceback; JSON keeps bytes."""
import json
import subprocess
import sys

import pytest

from memlab.cli import main
from process_checks import HANG_GUARD_S

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)


@pytest.mark.parametrize("argv,match", [
    (["measure", "nope"], "unknown technique 'nope'; available:"),
    (["measure", "slice_loop", "--param", "chunk_size=0"], "chunk_size=0 is out of range: expected integer in [1,"),
    (["measure", "slice_loop", "--param", "rank=4"], "technique 'slice_loop' has no parameter 'rank'"),
    (["measure", "slice_loop", "--param", "n"], "is not of the form name=value"),
    (["measure", "slice_loop", "--device", "tpu"], "device='tpu' is not valid; valid devices: cpu, cuda, cuda:N"),
    (["measure", "slice_loop", "--dtype", "int8"], "dtype='int8' is not valid; valid dtypes:"),
    (["measure", "slice_loop", "--mode", "eval"], "mode='eval' is not valid; valid modes: train, infer"),
    (["measure", "slice_loop", "--iterations", "0"], "iterations=0 is not valid"),
    (["sweep", "--family", "nofamily"], "unknown family 'nofamily'; available:"),
    (["measure", "slice_loop", "--threads", "0"], "threads=0 is not valid: expected a whole number from 1 to 1024"),
    (["list", "--plugin", "/does/not/exist.py"], "does not exist"),
])
def test_bad_input_exit_2_one_line(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("memlab: error: ") and match in err
    assert "\n" not in err and "Traceback" not in err


def test_cuda_without_gpu_is_a_clean_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["measure", "slice_loop", "--device", "cuda"]) == 2
    assert "no CUDA GPU is available" in capsys.readouterr().err


def test_console_script_error_has_no_traceback():
    p = subprocess.run([sys.executable, "-m", "memlab", "measure", "slice_loop", "--param", "chunk_size=0"],
                       capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "chunk_size=0" in p.stderr


def test_measure_json_and_human_output(capsys):
    assert main(["measure", "slice_loop", "--param", "n=64", "--param", "d=8", "--param", "hidden=16",
                 "--param", "chunk_size=20", "--iterations", "1", "--repeats", "1", "--time-budget", "0",
                 "--in-process", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert isinstance(rec["peak_allocated_bytes"], int) and rec["params"]["chunk_size"] == 20
    assert main(["measure", "unchunked", "--param", "n=64", "--param", "d=8", "--param", "hidden=16",
                 "--iterations", "1", "--repeats", "1", "--time-budget", "0", "--in-process"]) == 0
    out = capsys.readouterr().out
    assert "MiB" in out and "VmHWM" in out
    for internal in ("flop_step_s", "predict_cuda_s", "recorded_steps_s", "reference_check_s", "resident_step_s"):
        assert internal not in out, internal  # the harness's own phase seconds: --json keeps them


def test_sweep_writes_jsonl_as_it_goes(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    assert main(["sweep", "--technique", "unchunked", "--quick", "--out", str(out),
                 "--iterations", "1", "--repeats", "1", "--time-budget", "0"]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) >= 1 and all(json.loads(l)["status"] == "ok" for l in lines)
    text = capsys.readouterr()
    assert "peak alloc" in text.out and "/" in text.err  # table on stdout, progress on stderr
    assert f"time inside the {len(lines)} measurement(s)" in text.out and "reference checks" in text.out
    # --resume with nothing left: a sentence, no table (at one step: at 3 or more, a leak-unknown row is
    # measured again)
    assert main(["sweep", "--technique", "unchunked", "--quick", "--out", str(out), "--resume",
                 "--iterations", "1"]) == 0
    text = capsys.readouterr()
    assert text.out == "" and "nothing left to measure" in text.err, text


def _rows(path, n=None):
    from memlab.core.record import Measurement

    return [Measurement.from_dict(json.loads(line)) for line in path.read_text().splitlines()[:n]]


def test_sweep_table_is_grouped_by_family_and_the_summary_names_each_row_that_is_not_ok():
    import dataclasses
    from pathlib import Path

    from memlab.sweep import format_table, not_ok_lines

    repo = Path(__file__).resolve().parents[1]
    chunking = _rows(repo / "tests" / "data" / "demo-chunking.jsonl")
    others = [m.replace(allocated_after_step_bytes=(0, 0, 0))  # ok with three steps (two: leak unknown)
              for m in _rows(repo / "data" / "sweeps" / "cpu-adam.jsonl") if m.family != "chunking"][:4]
    bad = dataclasses.replace(chunking[0], status="mismatch", error="output differs by up to 1.0\nsecond line")
    rows = [bad, *others, *chunking[1:]]  # interleaved, as they finish
    table = format_table(rows).splitlines()
    families = [line[3:] for line in table if line.startswith("-- ")]
    assert families == sorted(set(families)) and len(families) == len({m.family for m in rows})
    at = table[0].index("status")
    status = [line[at:].split()[0] for line in table[1:] if not line.startswith("-- ")]
    assert "mismatch" in status and not any(s.startswith("mismatch:") for s in status)  # no reason cut mid-text
    lines = not_ok_lines(rows)
    assert lines == [f"mismatch {bad.technique} " + " ".join(f"{k}={v}" for k, v in sorted(bad.params.items()))
                     + ": output differs by up to 1.0"]


def test_list_json(capsys):
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    sl = next(r for r in rows if r["name"] == "slice_loop")
    assert sl["params"]["chunk_size"]["valid"].startswith("integer in [1,")
