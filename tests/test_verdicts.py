"""Verdicts: wrong techniques are `mismatch`, growing ones `leak`, and neither is ever `ok`.

The hostile techniques live in tests/plugins/hostile_maths.py; each is wrong in a way a check that
compares only the output with a reference computed after the forward would miss or mis-report.
"""
import importlib.util
from pathlib import Path

import pytest

import memlab
from memlab.cli import main
from memlab.measurement.verdict import leak_per_step

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

HOSTILE = Path(__file__).parent / "plugins" / "hostile_maths.py"
SMALL = {"n": 64, "d": 16, "hidden": 32}
LEAK_BYTES = 4 * 1024 * 1024

# technique -> (check verdict, a fragment of its one-line message)
EXPECTED = {
    "hostile_wrong_values": ("FAIL", "differs from the reference by up to"),
    "hostile_nan": ("FAIL", "non-finite values in output (1 of 296 NaN/inf; the reference is finite)"),
    "hostile_wrong_shape": ("FAIL", "output has shape (36, 8) but the reference (37, 8)"),
    "hostile_none": ("FAIL", "output is NoneType but the reference gives a tensor of shape (37, 8)"),
    "hostile_raises": ("ERROR", "ValueError: deliberate failure in forward"),
    "hostile_mutates_input": ("FAIL", "forward modified input 'x'"),
    "hostile_zero_weights": ("FAIL", "forward modified parameter 'w1'"),
    "hostile_leak": ("PASS", "max |error|"),
    "hostile_frees_input": ("PASS", "max |error|"),
}


@pytest.fixture(scope="module")
def hostile():
    memlab.load_plugin(HOSTILE)


def test_leak_rule():
    # net growth from the first measured step to the last, whatever the pattern (NOTE [ verdicts ])
    assert leak_per_step([4, 8, 12]) == 4.0
    assert leak_per_step([3, 5]) == 2.0
    assert leak_per_step([2, 2, 2]) is None          # retained once: a constant offset
    assert leak_per_step([0, 4, 8]) == 4.0           # growth after a first step that kept nothing
    assert leak_per_step([1, 1, 2, 2, 3]) == 0.5     # growth at every other step
    assert leak_per_step([3, 1, 3]) is None          # back to the first step's level: no net growth
    assert leak_per_step([4]) is None                # one step cannot show growth
    assert leak_per_step([0, 0, 0]) is None


def test_check_prints_one_line_per_technique_and_checks_them_all(hostile, capsys):
    rc = main(["check", *EXPECTED])
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert rc == 1
    assert "Traceback" not in out + err and "second line" not in out + err
    swept = [line for line in lines if "[as swept: " in line]
    lines = [line for line in lines if line not in swept]
    assert len(lines) == len(EXPECTED)
    for line, (name, (verdict, fragment)) in zip(lines, EXPECTED.items()):
        assert line.startswith(f"{verdict:<5} {name}"), line
        assert fragment in line, line
    assert "tolerance rtol=1e-09 atol=1e-09" in lines[0]
    # hostile_frees_input checks at x_requires_grad=False; sweeps measure True, where it fails
    assert [line.split(": float")[0] for line in swept] == ["FAIL  hostile_frees_input [as swept: x_requires_grad=True]"]
    assert "8 of 9 techniques failed" in err


def test_check_of_correct_techniques_exits_zero(hostile, capsys):
    assert main(["check", "hostile_leak", "slice_loop"]) == 0
    assert capsys.readouterr().out.count("PASS") == 2


def test_check_checks_both_configurations_when_sweeps_measure_another(hostile, capsys):
    """Issue 29 (NOTE [ two check configurations ]): a technique whose own check_params move a workload
    parameter from its default (memcnn, hostile_frees_input: x_requires_grad=False) is also checked as
    sweeps measure it; each line names its configuration, and a FAIL at either fails the command."""
    from memlab.registry import get_technique

    assert get_technique("hostile_frees_input").swept_overrides() == {"x_requires_grad": True}
    assert get_technique("slice_loop").swept_overrides() == {} and get_technique("hostile_nan").swept_overrides() == {}
    assert main(["check", "hostile_frees_input"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["PASS  hostile_frees_input [check configuration",
                                                   "FAIL  hostile_frees_input [as swept"]
    assert "x_requires_grad=False]" in out[0] and "x_requires_grad=True]" in out[1] and "grad:x" in out[1]


@pytest.mark.parametrize("name", [n for n, (v, _) in EXPECTED.items() if v == "FAIL"])
def test_wrong_techniques_are_mismatch_rows_with_errors_and_tolerance(hostile, name):
    m = memlab.measure(name, isolate=False, iterations=2, repeats=1, **SMALL)
    assert m.status == "mismatch", (m.status, m.error)
    assert m.matches_reference is False and m.check_dtype == "float64"
    assert m.tolerance == (1e-9, 1e-9)
    assert m.error and "\n" not in m.error and "tolerance rtol=1e-09 atol=1e-09" in m.error
    if name == "hostile_wrong_values":
        assert m.max_abs_error > 1e-3 and m.max_rel_error == pytest.approx(0.01, rel=1e-6)
    if name in ("hostile_nan", "hostile_wrong_shape", "hostile_none"):
        assert m.max_abs_error is None          # not comparable: the reason says why
    assert m.peak_allocated_bytes is not None or name == "hostile_none" or name == "hostile_wrong_shape"


def test_measure_cli_exits_1_with_one_line_for_mismatch_and_leak(hostile, capsys):
    args = ["--in-process", "--iterations", "3", "--repeats", "1"] + [f"--param={k}={v}" for k, v in SMALL.items()]
    assert main(["measure", "hostile_zero_weights", *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("memlab: hostile_zero_weights: MISMATCH: ")
    assert "forward modified parameter 'w1'" in err[0]
    assert main(["measure", "hostile_leak", *args]) == 1
    out, err = capsys.readouterr()
    assert err.strip().startswith("memlab: hostile_leak: LEAK: live memory grows by 4.0 MiB (4194304 B) per step")


def test_leak_is_reported_with_bytes_per_step(hostile):
    m = memlab.measure("hostile_leak", isolate=False, iterations=3, repeats=1, **SMALL)
    assert m.status == "leak"
    assert m.matches_reference is True
    assert m.leak_bytes_per_step == LEAK_BYTES
    assert list(m.allocated_after_step_bytes) == [LEAK_BYTES, 2 * LEAK_BYTES, 3 * LEAK_BYTES]


def test_freeing_a_preexisting_input_is_neither_a_leak_nor_an_inflated_peak(hostile):
    """The first iteration frees storage allocated before the measured steps (the caller's x):
    the replay must see that free, or the first peak and every after-step figure grow by x."""
    m = memlab.measure("hostile_frees_input", isolate=False, iterations=3, repeats=1, time_budget=0,
                       x_requires_grad=False, **SMALL)
    assert m.status == "ok", m.error
    assert list(m.allocated_after_step_bytes) == [0, 0, 0]
    assert len(set(m.peak_allocated_per_iteration_bytes)) == 1
    plain = memlab.measure("unchunked", isolate=False, iterations=1, repeats=1, time_budget=0, x_requires_grad=False,
                           **SMALL)
    x_bytes = SMALL["n"] * SMALL["d"] * 4
    # x's storage is freed in forward and restored when backward starts, while the clone the
    # technique computes from stays saved: one x above the plain step, and not two
    assert m.peak_allocated_bytes == plain.peak_allocated_bytes + x_bytes


REV = {"depth": 3, "batch": 16, "width": 8, "hidden": 16, "spatial": 3}


def test_reversible_matches_in_float64_and_reports_float32_drift_as_a_number():
    m = memlab.measure("reversible", isolate=False, iterations=2, repeats=1, time_budget=0, **REV)
    assert m.status == "ok", m.error
    assert m.matches_reference is True and m.check_dtype == "float64" and m.dtype == "float32"
    assert m.max_abs_error < 1e-10 and m.tolerance == (1e-12, 1e-12)
    assert m.drift_max_abs_error is not None and m.drift_max_abs_error > m.max_abs_error


@pytest.mark.skipif(importlib.util.find_spec("memcnn") is None, reason="MemCNN peer not installed")
def test_memcnn_doubled_input_gradient_is_a_mismatch_with_a_flat_after_step():
    m = memlab.measure("memcnn", isolate=False, iterations=3, repeats=1, **REV)
    assert m.status == "mismatch" and "grad:x" in m.error
    assert m.max_rel_error == pytest.approx(1.0, rel=1e-9)      # 2g against g
    assert list(m.allocated_after_step_bytes) == [0, 0, 0]
    assert len(set(m.peak_allocated_per_iteration_bytes)) == 1
