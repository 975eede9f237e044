"""The measurement subprocess: isolated from the caller's directory, deaths by signal named (SIGKILL
with high memory as ``oom``), output read as bytes, timeouts that kill the whole process group and
leave no temporary folder.  Hostile plug-ins: tests/plugins/hostile_process.py."""
import os
import re
from pathlib import Path

import pytest

import memlab
from memlab.measurement import runner
from memlab.measurement.runner import MAX_MESSAGE, WorkerFailed, describe_exit, memory_limit_bytes
from process_checks import assert_process_ended

HOSTILE = Path(__file__).parent / "plugins" / "hostile_process.py"
FAST = {"iterations": 1, "repeats": 1}
MiB, GiB = 2**20, 2**30
KILLED = "measurement subprocess killed by signal"
OOM = f"{KILLED} 9 (likely the kernel's out-of-memory killer)"


@pytest.fixture(scope="module")
def hostile():
    memlab.load_plugin(HOSTILE)


# -- the pure classification --------------------------------------------------------------------
@pytest.mark.parametrize("returncode, peak, limit, expected", [
    (-9, 9 * GiB, 16 * GiB, ("oom", f"{OOM}: peak resident memory 9,216 MiB of 16,384 MiB")),
    (-9, 8 * GiB, 16 * GiB, ("oom", f"{OOM}: peak resident memory 8,192 MiB of 16,384 MiB")),  # 50%: oom
    (-9, 8 * GiB - 1, 16 * GiB, ("error", f"{KILLED} 9 (SIGKILL)")),                            # below
    (-9, None, 16 * GiB, ("error", f"{KILLED} 9 (SIGKILL)")),                                   # unknown
    (-9, 9 * GiB, None, ("error", f"{KILLED} 9 (SIGKILL)")),
    (-11, 15 * GiB, 16 * GiB, ("error", f"{KILLED} 11 (SIGSEGV)")),   # only SIGKILL can be the OOM killer
    (-6, None, None, ("error", f"{KILLED} 6 (SIGABRT)")),
    (-15, None, None, ("error", f"{KILLED} 15 (SIGTERM)")),
    (-200, None, None, ("error", f"{KILLED} 200 (unknown signal)")),
    (3, 15 * GiB, 16 * GiB, ("error", "measurement subprocess exited with code 3")),
    (0, None, None, ("error", "measurement subprocess exited with code 0")),   # no result written
], ids=["kill-high", "kill-half", "kill-low", "kill-no-peak", "kill-no-limit", "segv", "abrt", "term",
        "unknown", "exit3", "exit0"])
def test_describe_exit(returncode, peak, limit, expected):
    assert describe_exit(returncode, peak, limit) == expected


def test_describe_exit_appends_the_output_tail_on_one_line():
    status, message = describe_exit(1, None, None, ["Traceback (most recent call last):", "ValueError: bad"])
    assert (status, message) == ("error", "measurement subprocess exited with code 1: "
                                          "Traceback (most recent call last): | ValueError: bad")
    status, message = describe_exit(-6, None, None, ["a\x1b[31m red\r\nb\tc", "x" * 2000])
    assert status == "error" and "\n" not in message and "\r" not in message and "\x1b" not in message
    assert message.startswith(f"{KILLED} 6 (SIGABRT): a [31m red b c | xxx") and message.endswith("...")
    assert len(message) == MAX_MESSAGE


def test_worker_failed_is_one_line_with_a_status():
    exc = WorkerFailed("first\nsecond\r\n" + "y" * 1000, "oom")
    assert exc.status == "oom" and str(exc).startswith("first second yyy") and len(str(exc)) == MAX_MESSAGE
    assert WorkerFailed("x").status == "error"


def test_output_tail_reads_bytes_with_replacement_without_profiler_chatter(tmp_path):
    log = tmp_path / "output.log"
    log.write_bytes(b"noise\n" * 50000 + b"\xff\xfe bad \xc3\x28\n\n  \nline two\n" + b"z" * 300 + b"\n"
                    + b"USDT:2026-12-03 07:50:13 9742:9742 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
                    + b"STAGE:2026-12-03 07:50:50 9960:9960 SyncActivityProfilerHandler.cpp:60] Completed\n")
    tail = runner._output_tail(str(log))
    assert tail == ["\ufffd\ufffd bad \ufffd(", "line two", "z" * 197 + "..."]
    assert runner._output_tail(str(tmp_path / "missing.log")) == []


def test_memory_limit_is_at_most_physical_memory():
    limit = memory_limit_bytes()
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo here")
    with open("/proc/meminfo") as f:
        total = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemTotal:"))
    assert 0 < limit <= total


# -- end to end: one subprocess each (~3-5 s, the torch import) ---------------------------------
def test_worker_never_imports_from_the_callers_directory(hostile, tmp_path, monkeypatch):
    here = tmp_path / "caller"
    (here / "memlab").mkdir(parents=True)
    marker = tmp_path / "imported.txt"
    poison = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\nraise SystemExit('imported from the cwd')\n"
    for name in ("torch.py", "numpy.py", "sitecustomize.py", "memlab/__init__.py"):
        (here / name).write_text(poison)
    monkeypatch.chdir(here)
    # empty PYTHONPATH entries mean "the current directory"; a relative plug-in path is the caller's
    monkeypatch.setenv("PYTHONPATH", os.pathsep + os.environ.get("PYTHONPATH", "") + os.pathsep)
    monkeypatch.setenv("MEMLAB_PLUGINS", os.path.relpath(HOSTILE, here))
    m = memlab.measure("hostile_binary_stdout", **FAST)
    assert (m.status, m.error) == ("ok", None)
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("technique, message", [
    ("hostile_segfault", f"{KILLED} 11 (SIGSEGV)"),
    ("hostile_abort", f"{KILLED} 6 (SIGABRT)"),
    ("hostile_sigkill", f"{KILLED} 9 (SIGKILL)"),    # little memory in use: not the OOM killer
])
def test_death_by_signal_is_named(hostile, technique, message):
    m = memlab.measure(technique, check=False, **FAST)
    assert (m.status, m.error) == ("error", message)


def test_sigkill_with_high_memory_is_oom(hostile, monkeypatch):
    # A 64 MiB "machine": the child's real peak (torch imported, >= 100 MiB) is above half of it.
    monkeypatch.setattr(runner, "memory_limit_bytes", lambda: 64 * MiB)
    m = memlab.measure("hostile_sigkill", check=False, **FAST)
    assert m.status == "oom", m.error
    found = re.fullmatch(re.escape(OOM) + r": peak resident memory ([\d,]+) MiB of 64 MiB", m.error)
    assert found, m.error
    assert int(found.group(1).replace(",", "")) >= 100


def test_non_utf8_output_still_gives_an_ok_row(hostile):
    m = memlab.measure("hostile_binary_stdout", **FAST)
    assert (m.status, m.error, m.matches_reference) == ("ok", None, True)


def test_timeout_kills_the_process_group_and_removes_the_temp_folder(hostile, tmp_path, monkeypatch):
    import tempfile

    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    pidfile = tmp_path / "grandchild.pid"
    monkeypatch.setenv("MEMLAB_TEST_HOSTILE_PIDFILE", str(pidfile))
    # the limit counts from the fork server's fork (ForkServer.run), not from the server's start (a torch
    # import): the child builds a [4, 3] problem and reaches forward within a fraction of a second, then
    # hangs, so the test waits the whole limit (8 s: margin for a loaded CI machine); 15 s dated from the spawned
    # worker, which imported torch first
    m = memlab.measure("hostile_hang", check=False, timeout=8, **FAST)
    assert (m.status, m.error) == ("error", "measurement subprocess timed out after 8 s")
    # the measurement's folder is gone; the warm fork server (restarted here, as the environment
    # changed) keeps its own folder while it lives, and removes it when it stops
    assert [p.name for p in temp_root.iterdir() if not p.name.startswith("memlab-server-")] == []
    from memlab.measurement.runner import shutdown_server

    shutdown_server()
    assert list(temp_root.iterdir()) == []
    assert pidfile.exists(), "the worker did not reach forward within the timeout"
    assert_process_ended(int(pidfile.read_text()), "started by the worker outlived the timeout")
