"""``make demo``'s own words (memlab.sweep.demo, memlab.sweep.summary): the size it prints is the plan's, and its
summary counts each status and tells expected non-ok rows (with why) from unexpected ones."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.core.record import Measurement
from memlab.sweep import plan_sweep, read_jsonl
from memlab.sweep.demo import known_mismatch_of, main, plan_line, plan_of, site_lines, skipped_points
from memlab.sweep.summary import NotOk, classify_not_ok, demo_summary, expected_mismatch, failing_tensors
from process_checks import HANG_GUARD_S

ROOT = Path(__file__).resolve().parent.parent
ROWS = Path(__file__).resolve().parent / "data" / "demo-chunking.jsonl"
MEMCNN_ERROR = ("float64: max |error| 5.46e+00 (grad:x), relative 1.00e+00; tolerance rtol=1e-12 atol=1e-12; "
                "grad:x differs from the reference by up to 5.46 (outside tolerance)")


def _demo_sweep_options() -> list[str]:
    """``DEMO_SWEEP`` as the Makefile sets it, and a check that the demo's sweep and plan both use it."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^DEMO_SWEEP\s*:?=\s*(.*)$", text, re.M)
    assert found, "the Makefile defines DEMO_SWEEP"
    recipe = text[text.index("\ndemo:"):]
    recipe = recipe[:recipe.index("\n\n")]
    assert "memlab sweep $(DEMO_SWEEP)" in recipe and "memlab.sweep.demo plan $(DEMO_SWEEP)" in recipe
    assert "memlab.sweep.demo summary" in recipe and "$(DEMO_SWEEP)" in recipe.split("memlab.sweep.demo summary")[1]
    return shlex.split(found.group(1))


def test_the_size_make_demo_prints_is_the_plans():
    options = _demo_sweep_options()
    planned = plan_sweep(None, quick=True)
    assert "--quick" in options and len(plan_of(options)[0]) == len(planned)
    line = plan_line(options)
    assert line.startswith(f"the sweep: {len(planned)} points, 2 at a time")
    # offload_activations is CUDA-only, cut-cross-entropy's kernel is Triton: both named as skipped on the CPU
    assert "offload_activations" in line and "cut_cross_entropy" in line


def test_the_makefile_states_no_point_count_in_prose():
    """The demo's size is printed from the plan; a figure in the Makefile's comments would go stale."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert not re.search(r"\b\d+ (quick )?points\b", text)


def _rows() -> list[Measurement]:
    ok = read_jsonl(ROWS)
    base = ok[0]
    memcnn = [base.replace(technique="memcnn", family="reversible", status="mismatch", error=MEMCNN_ERROR,
                           params={"batch": b, "depth": 4}) for b in (4, 8)]
    wrong = base.replace(technique="slice_loop", status="mismatch", params={"chunk_size": 7},
                         error="float64: max |error| 1e-3 (grad:w1), relative 1e-4; tolerance rtol=1e-12 "
                               "atol=1e-12; grad:w1 differs from the reference by up to 0.001 (outside tolerance)")
    crashed = base.replace(technique="vmap_chunk", status="error", params={"chunk_size": 9},
                           error="RuntimeError: boom\ntraceback line")
    return ok + memcnn + [wrong, crashed]


def test_failing_tensors_read_the_reasons():
    assert failing_tensors(MEMCNN_ERROR) == ["grad:x"]
    assert failing_tensors("float64: max |error| -; tolerance rtol=1 atol=1; non-finite values in grad:x (3 of 9)") \
        is None
    assert failing_tensors(None) is None


def test_a_mismatch_is_expected_only_on_the_tensors_its_technique_declares():
    known = known_mismatch_of("memcnn")
    assert "grad:x" in known and "NOTE [ MemCNN 1.5.2 input gradient ]" in known["grad:x"]
    rows = _rows()
    memcnn = [m for m in rows if m.technique == "memcnn"]
    assert all(expected_mismatch(m, known) for m in memcnn)
    also_w = memcnn[0].replace(error=MEMCNN_ERROR + "; grad:f.0.weight differs from the reference by up to 2")
    assert expected_mismatch(also_w, known) is None  # a second tensor: not the known defect
    assert expected_mismatch(memcnn[0], known_mismatch_of("revlib")) is None
    assert known_mismatch_of("no_such_technique") == {}


def test_the_summary_counts_each_status_and_parts_expected_from_unexpected():
    rows = _rows()
    skipped = [NotOk("skipped", "offload_activations", "seq=64", "does not run on cpu", "runs on cuda only")]
    not_ok = classify_not_ok(rows, known_mismatch_of, skipped)
    lines, unexpected = demo_summary(rows, len(rows) + 1, not_ok)
    text = "\n".join(lines)
    assert lines[0] == f"{len(rows) + 1} points: 7 ok, 3 mismatch, 1 skipped, 1 error"
    assert unexpected == 2
    head, tail = text.split("!!! UNEXPECTED (2)")
    assert head.count("mismatch memcnn") == 2 and "skipped offload_activations seq=64: does not run on cpu" in head
    assert head.count("why expected: MemCNN 1.5.2 doubles the gradient of a leaf input") == 1  # once per technique
    assert "why expected: runs on cuda only" in head
    assert "mismatch slice_loop chunk_size=7: grad:w1 differs from the reference" in tail
    assert "error vmap_chunk chunk_size=9: RuntimeError: boom" in tail and "traceback" not in tail


def test_an_all_ok_sweep_says_nothing_is_unexpected():
    rows = read_jsonl(ROWS)
    lines, unexpected = demo_summary(rows, len(rows), classify_not_ok(rows, known_mismatch_of))
    assert unexpected == 0 and lines == [f"{len(rows)} points: 7 ok, 0 mismatch, 0 skipped, 0 error",
                                         "unexpected: none (every row ok)"]


def test_skipped_points_say_why_and_whether_it_is_expected():
    points = plan_sweep("transformer", quick=True, techniques=["offload_activations", "cut_cross_entropy", "sdpa"])
    got = {n.technique: n for n in skipped_points(points, [], "cpu")}
    assert got["offload_activations"].expected and got["cut_cross_entropy"].expected  # CUDA-only; Triton
    assert got["sdpa"].expected is None and "no row written" in got["sdpa"].reason  # runs on CPU: a missing row


def test_main_prints_the_summary_and_the_page_to_open_first(tmp_path):
    """In a fresh interpreter, as ``make demo`` runs it: the plan is the built-in techniques' (a test file's
    plug-ins registered in this worker would be points without rows)."""
    sweep = tmp_path / "demo-sweep.jsonl"
    sweep.write_text("".join(m.to_json() + "\n" for m in read_jsonl(ROWS)), encoding="utf-8")
    index = tmp_path / "site" / "index.html"
    index.parent.mkdir()
    index.write_text("<html></html>", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "memlab.sweep.demo", "summary", str(sweep), "--site", str(index),
                          "--family", "chunking", "--quick", "--jobs", "2"], capture_output=True, text=True,
                         timeout=HANG_GUARD_S, env={k: v for k, v in os.environ.items() if k != "MEMLAB_PLUGINS"})
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "7 points: 7 ok, 0 mismatch, 0 skipped, 0 error" in out
    assert f"site: {index.resolve()}" in out and f"open first: file://{index.resolve()}" in out
    assert site_lines("") == ["site: not built (see the lines above); the sweep's rows are in the --out file"]


@pytest.mark.parametrize("argv", [[], ["nonsense"]])
def test_main_usage(argv, capsys):
    assert main(argv) == 2 and "usage" in capsys.readouterr().err
