"""Start a memlab child process that dies with its parent from its first instruction.

``python -P .../memlab/measurement/launch.py MODULE ARG...`` asks the kernel to SIGKILL this process when
its parent ends (:func:`die_with_parent`), and only then runs ``MODULE`` as ``__main__`` with ``ARG...``.
It is run by its path, never with ``-m``: ``-m memlab.measurement.worker`` imports the package
``memlab`` (hence torch) before the module's first line, seconds on an idle machine and minutes under
load, and a parent killed in that window left a server or worker importing for nobody (the SIGKILL
test of ``memlab sweep --jobs 2`` under heavy load found two; Evidence:
docs/evidence/code-notes.md#launch-die-with-parent).  This file imports nothing of memlab's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import runpy
import signal
import sys

__all__ = ["PARENT_ENV", "NANNY", "die_with_parent", "command", "libc_name"]

#: the environment variable through which a caller tells the process it starts its own pid
PARENT_ENV = "MEMLAB_PARENT_PID"
#: the first argument that puts an expendable parent between the caller and the module (:func:`_nanny`)
NANNY = "--nanny"


@functools.lru_cache(maxsize=None)
def libc_name() -> str | None:
    """The C library's file name (``ctypes.util.find_library("c")``), looked up once per process.

    The lookup runs ``ldconfig -p`` in a subprocess, and every measurement child asked for it twice
    (its parent-death request and the heap setting): looked up in the fork server before any fork,
    the children inherit the answer (NOTE [ harness cost ] in :mod:`memlab.measurement.harness_cost`)."""
    return ctypes.util.find_library("c")


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel SIGKILL this process when the process that started it ends, however it ends
    (Linux ``prctl(PR_SET_PDEATHSIG)``; nothing elsewhere).  A measurement server, or a measurement,
    whose caller was killed would otherwise go on measuring for nobody (NOTE [ fork server ]).

    ``parent``: the pid of the process that started this one (default: :data:`PARENT_ENV`, set by
    the runner, else the current parent).  If it has already ended, this process exits at once.
    The kernel sends the signal when the *thread* that started this process ends: memlab starts each
    fork server from the thread that uses it (one per ``--jobs`` worker), which closes it anyway.
    """
    if not sys.platform.startswith("linux"):
        return

    if parent is None:
        parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    try:
        ctypes.CDLL(libc_name(), use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before the request took effect
        os._exit(1)


def command(module: str, *args: str, nanny: bool = False) -> list[str]:
    """The command line that runs ``module`` (``memlab.measurement.worker``...) through this launcher,
    without the caller's directory on ``sys.path`` (NOTE [ worker isolation ]); with ``nanny``, under
    an expendable parent of its own (NOTE [ an expendable parent ])."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, os.path.abspath(__file__), *([NANNY] if nanny else []), module, *args]


# NOTE [ an expendable parent ]
# A measurement may kill its parent (``os.kill(os.getppid(), SIGKILL)``).  A child forked from the fork
# server kills the server, which the caller reports as that point's error row (NOTE [ fork server ]).
# A spawned worker's parent would be the caller itself (``memlab measure``: exit 137, no row), so the
# launcher started with NANNY forks the module into a child and only waits for it: the caller's
# parent-to-be is this small process, which imports nothing of memlab's.  It dies with the caller, the
# child dies with it (each asks, prctl(PR_SET_PDEATHSIG)), it leaves the child in its own process group
# (a timeout's killpg reaches both), and it ends as its child ended, the same exit code or the same
# signal, so the caller's reading of a crash is unchanged; its peak resident memory, as wait4 reports
# it to the caller, includes the child's (Linux counts reaped children's maxrss).
def _nanny() -> None:
    """Fork: the child returns (and runs the module); this process waits for it and ends as it ended."""
    pid = os.fork()
    if pid == 0:
        os.environ[PARENT_ENV] = str(os.getppid())
        die_with_parent()  # a forked child does not inherit the request
        return
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        os._exit(128 - code)  # a signal whose default is not to end the process
    os._exit(code & 0xFF)


def main() -> None:
    die_with_parent()
    if len(sys.argv) > 1 and sys.argv[1] == NANNY:
        del sys.argv[1]
        _nanny()
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:  # Python 3.10: no -P, the script's folder
        del sys.path[0]

    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
