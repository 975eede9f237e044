"""A memlab command killed from outside leaves nothing running: its measurement servers and their
children die with it (prctl PR_SET_PDEATHSIG; issue 29)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_checks import HANG_GUARD_S

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

MEMLAB = [sys.executable, "-m", "memlab"]


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc/*/stat parent links)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _kill_when_measuring(cmd: list[str], cwd: Path) -> set[int]:
    """Start ``cmd``, wait until a measurement child runs under it, SIGKILL it; its descendants then."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    below: set[int] = set()
    while time.monotonic() < deadline:
        below = _descendants(proc.pid)
        if len(below) >= 2:  # a server and the measurement it forked (or a spawned worker and more)
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert below, "no measurement started within 120 s"
    return below


@pytest.mark.parametrize("cmd", [
    ["sweep", "--quick", "--family", "reversible", "--jobs", "2", "--out", "sweep.jsonl"],
    ["reproduce", "--out", "reproductions"],
], ids=["sweep --jobs 2", "reproduce"])
def test_sigkill_leaves_no_memlab_process_within_5_s(cmd, tmp_path):
    below = _kill_when_measuring(MEMLAB + cmd, tmp_path)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in below):
        time.sleep(0.1)
    left = [p for p in below if _alive(p)]
    for p in left:  # never leave them behind, even when the test fails
        os.kill(p, signal.SIGKILL)
    assert not left, f"still running 5 s after SIGKILL: {left}"


def test_a_child_whose_parent_is_gone_exits_before_importing_torch():
    """The launcher asks to die with its parent before anything imports memlab or torch: a server
    started for a parent that has already ended exits at once (rc 1), without a 'ready' line, rather
    than importing torch for nobody (the window the SIGKILL test above found open under load)."""
    from memlab.measurement.launch import PARENT_ENV, command

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    env = {**os.environ, PARENT_ENV: str(gone.pid), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = command("memlab.measurement.forkserver")
    out = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, capture_output=True, timeout=HANG_GUARD_S)
    assert out.returncode == 1 and b"ready" not in out.stdout, out
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.decode().splitlines() if line.count("|") == 2}
    assert "ctypes" in imported, imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "memlab")}, imported
