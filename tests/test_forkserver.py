"""The warm fork server measures exactly what a fresh spawned process measures, faster, and carries
nothing from one measurement to the next (NOTE [ fork server ])."""
from pathlib import Path

import pytest

import memlab
from memlab.measurement.runner import shutdown_server
from process_checks import HANG_GUARD_S

STATEFUL = Path(__file__).parent / "plugins" / "stateful.py"
pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)
FAST = {"iterations": 2, "repeats": 1, "time_budget": 0}
#: the float64 reference check is maths, not isolation: left out of the fork-vs-spawn comparison for time
NO_CHECK = {**FAST, "check": False}
#: figures that are exact bytes, hence identical in every fresh process
EXACT = ("status", "matches_reference", "peak_allocated_bytes", "peak_allocated_per_iteration_bytes",
         "allocated_after_step_bytes", "allocated_baseline_bytes", "grad_bytes", "param_bytes", "flops",
         "max_abs_error", "errors_by_tensor")


def _builtin_names():
    """Built-in techniques that run on the CPU (offload_activations is CUDA only)."""
    return [n for n in memlab.list_techniques() if memlab.get_technique(n).__module__.startswith("memlab.families.")
            and "cpu" in (getattr(memlab.get_technique(n), "devices", None) or ("cpu",))]


def _one_per_family():
    names = _builtin_names()
    return [next(n for n in names if memlab.get_technique(n).family() == f) for f in memlab.list_families()]


def _compare(name, other_mode):
    cls = memlab.get_technique(name)
    params = {**cls.workload.check_params, **cls.check_params}
    try:
        other = memlab.measure(name, isolate=other_mode, **NO_CHECK, **params)
    except memlab.TechniqueUnavailable as exc:  # in process, a peer that does not import here raises
        pytest.skip(str(exc))
    if other.status == "error" and "unavailable" in (other.error or "").lower():
        pytest.skip(other.error)
    forked = memlab.measure(name, isolate="fork", **NO_CHECK, **params)
    assert forked.status == "ok", forked.error
    for field in EXACT:
        assert getattr(forked, field) == getattr(other, field), field


# Every built-in against a fresh spawned process would cost ~8 s each (process start and torch import):
# each built-in is compared with an in-process measurement, and one per family with a spawned process.
@pytest.mark.parametrize("name", _builtin_names())
def test_fork_and_in_process_give_identical_exact_figures(name):
    _compare(name, False)


@pytest.mark.parametrize("name", _one_per_family())
def test_fork_and_spawn_give_identical_exact_figures(name):
    _compare(name, "spawn")


def test_no_state_carries_over_between_forked_measurements():
    memlab.load_plugin(STATEFUL)
    small = {"n": 16, "d": 4, "hidden": 8}
    first = memlab.measure("stateful_counts_calls", isolate="fork", **FAST, **small)
    second = memlab.measure("stateful_counts_calls", isolate="fork", **FAST, **small)
    assert first.status == "ok", first.error
    calls = first.extra["forward_calls_in_process"]
    assert calls > 0 and second.extra["forward_calls_in_process"] == calls
    # in one process the count grows: what the fork keeps out (``describe`` runs before the timed phase,
    # whose forward calls the second measurement sees too)
    here = memlab.measure("stateful_counts_calls", isolate=False, **FAST, **small)
    again = memlab.measure("stateful_counts_calls", isolate=False, **FAST, **small)
    assert again.extra["forward_calls_in_process"] > 2 * here.extra["forward_calls_in_process"]


def test_a_plugin_loaded_after_the_server_started_restarts_it(tmp_path):
    shutdown_server()
    assert memlab.measure("unchunked", isolate="fork", n=16, d=4, hidden=8, **FAST).status == "ok"
    plugin = tmp_path / "late_plugin.py"
    plugin.write_text(
        "from memlab import Technique\n"
        "from memlab.families.chunking.workload import ChainedMatmul\n"
        "class Late(Technique, name='late_plugin_matmul'):\n"
        "    workload = ChainedMatmul\n"
        "    def forward(self, problem):\n"
        "        m = problem.model\n"
        "        return (problem.inputs['x'] @ m.w1) @ m.w2\n")
    memlab.load_plugin(plugin)
    m = memlab.measure("late_plugin_matmul", isolate="fork", n=16, d=4, hidden=8, **FAST)
    assert m.status == "ok", m.error


def test_bad_isolation_modes_name_the_value():
    with pytest.raises(ValueError, match=r"isolate='threads' is not valid"):
        memlab.measure("unchunked", isolate="threads", n=16, d=4, hidden=8)


def test_the_server_reads_the_git_commit_once_before_any_fork():
    """A child must record the commit of the code the server imported, not HEAD at the time it runs."""
    import subprocess
    import sys

    code = ("from memlab.measurement import environment, forkserver; forkserver._warm(); "
            "print(environment.git_commit.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "1"


def _server_pid():
    from memlab.measurement import runner
    import threading
    return runner._servers[threading.get_ident()].proc.pid


def test_the_server_is_reused_across_tests_and_after_an_in_process_step(monkeypatch):
    """A variable that is not a setting (pytest's per-test name, the inductor cache folder torch sets
    after an in-process step) does not restart the server; a real setting (a malloc variable) does."""
    small = {"n": 16, "d": 4, "hidden": 8}
    assert memlab.measure("unchunked", isolate="fork", **FAST, **small).status == "ok"
    first = _server_pid()
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test (call)")
    assert memlab.measure("unchunked", isolate=False, **FAST, **small).status == "ok"
    assert memlab.measure("unchunked", isolate="fork", **FAST, **small).status == "ok"
    assert _server_pid() == first
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")
    assert memlab.measure("unchunked", isolate="fork", **FAST, **small).status == "ok"
    assert _server_pid() != first
