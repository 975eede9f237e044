"""``memlab sweep --jobs N``: N measurements at once, each from its own fork server, with the same
exact memory figures as one at a time (NOTE [ parallel sweep ])."""
import json
import os
import threading

import pytest

from memlab.cli import main
from process_checks import HANG_GUARD_S, assert_process_ended
from memlab.measurement import runner
from memlab.sweep import SweepPoint, check_jobs, run_sweep

POINTS = [SweepPoint("slice_loop", {"n": 256, "d": 16, "hidden": 32, "chunk_size": c}) for c in (32, 64, 128, 256)]
FAST = {"iterations": 1, "repeats": 1, "time_budget": 0, "check": False}


def _key(m):
    return m.technique, json.dumps(m.params, sort_keys=True)


def test_two_jobs_give_the_same_bytes_as_one_run_at_once_and_write_every_row(monkeypatch, tmp_path):
    """``memlab sweep --jobs 2`` (the CLI, in this process) against the same points one at a time:
    the same bytes, two worker threads each with its own server, every row written once."""
    from memlab.core.record import Measurement

    serial = {_key(m): m for m in run_sweep(POINTS, None, **FAST)}
    seen_threads = set()
    real = runner._server_for

    def spy(env):
        seen_threads.add(threading.get_ident())
        return real(env)

    monkeypatch.setattr(runner, "_server_for", spy)
    out = tmp_path / "s.jsonl"
    assert main(["sweep", "--technique", "slice_loop", "--grid", "n=256", "--grid", "d=16", "--grid", "hidden=32",
                 "--grid", "chunk_size=32,64,128,256", "--iterations", "1", "--repeats", "1", "--time-budget", "0",
                 "--jobs", "2", "--out", str(out)]) == 0  # POINTS
    rows = [Measurement.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    parallel = {_key(m): m for m in rows}
    assert len(rows) == len(parallel) == len(POINTS)  # every row, each once
    assert parallel.keys() == serial.keys()
    for key, m in parallel.items():
        assert m.status == "ok"
        assert m.peak_allocated_bytes == serial[key].peak_allocated_bytes
        assert m.environment["threads"] == max(1, (os.cpu_count() or 1) // 2)  # cores // jobs, at least 1
    assert len(seen_threads) == 2  # two worker threads, each with its own server
    # each worker stopped the server it started when it ran out of points
    assert not (set(runner._servers) & seen_threads)


@pytest.mark.parametrize("jobs,device,match", [(0, "cpu", "jobs=0 is not valid"), (65, "cpu", "1 to 64"),
                                               (True, "cpu", "jobs=True"), (2, "cuda:1", "needs device .cpu.")])
def test_bad_jobs_names_the_value(jobs, device, match):
    with pytest.raises(ValueError, match=match):
        check_jobs(jobs, device)


def test_cli_bad_jobs_is_one_line(capsys):
    assert main(["sweep", "--technique", "unchunked", "--jobs", "0"]) == 2
    assert "jobs=0 is not valid: expected a whole number from 1 to 64" in capsys.readouterr().err


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_sigterm_stops_the_sweep_and_its_running_measurements(tmp_path, jobs):
    """A killed sweep must not leave its measurements running: the children lead their own
    sessions, so no signal to the sweep reaches them unless the sweep kills them itself."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    hostile = Path(__file__).parent / "plugins" / "hostile_process.py"
    pidfile = tmp_path / "grandchild.pid"
    env = {**os.environ, "MEMLAB_TEST_HOSTILE_PIDFILE": str(pidfile)}
    proc = subprocess.Popen([sys.executable, "-m", "memlab", "sweep", "--plugin", str(hostile), "--technique",
                             "hostile_hang", "--grid", "rows=4,5", "--grid", "cols=3", "--jobs", jobs,
                             "--iterations", "1", "--repeats", "1", "--time-budget", "0",
                             "--out", str(tmp_path / "s.jsonl")],
                            env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not pidfile.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert pidfile.exists(), "no measurement reached the technique's forward"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "memlab: terminated; 0 finished measurement(s) kept" in err
    # started by a measurement, in its process group
    assert_process_ended(int(pidfile.read_text()), "of a measurement outlived the terminated sweep")
