"""Test helper: whether a process a measurement started has ended (no orphan outlives memlab)."""
import os
import select
import signal

import pytest


def assert_process_ended(pid: int, what: str, wait_s: float = 10.0) -> None:
    """Fail (after killing it) when process ``pid`` is still running ``wait_s`` seconds from now;
    skip where the platform has no pidfd to wait on a process that is not our child."""
    if not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd here to wait for a process that is not our child")
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # ended and reaped
    try:  # readable once the process has ended (a zombie nobody reaped counts as ended)
        ended = bool(select.select([fd], [], [], wait_s)[0])
    finally:
        os.close(fd)
    if not ended:
        os.kill(pid, signal.SIGKILL)
    assert ended, f"process {pid} {what}"


#: the hang guard of every subprocess a test starts (seconds): a guard, never a verdict, so it is sized
#: for a loaded runner (the suite beside another ``make test`` on two cores ran the asv checks past 150 s);
#: a real hang still ends the test
HANG_GUARD_S = 1200
