"""Test helper: whether a process a measurement started has ended (no orphan outlives memlab)."""
import json
import os
import select
import signal
import subprocess
import sys
import textwrap

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


#: runs ``memlab.cli.main(argv)`` in a fresh interpreter and prints its exit status and the torch
#: modules imported by then (argparse's own errors exit through SystemExit)
_CLI_PROBE = textwrap.dedent("""
    import json, sys
    from memlab.cli import main
    try:
        rc = main(json.loads(sys.argv[1]))
    except SystemExit as exc:
        rc = exc.code
    print(json.dumps({"rc": rc, "torch": sorted(m for m in sys.modules if m.split(".")[0] == "torch")}))
""")


def cli_probe(argv: list[str], cwd=None, env=None) -> tuple[int, list[str], str]:
    """``(exit status, torch modules imported, stderr)`` of ``memlab argv`` in a fresh interpreter."""
    p = subprocess.run([sys.executable, "-c", _CLI_PROBE, json.dumps(argv)], capture_output=True, text=True,
                       timeout=HANG_GUARD_S, cwd=cwd, env=env)
    result = json.loads(p.stdout.strip().splitlines()[-1])
    return result["rc"], result["torch"], p.stderr
