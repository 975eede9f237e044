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

import os
import signal
import sys

__all__ = ["PARENT_ENV", "die_with_parent", "command"]

#: the environment variable through which a caller tells the process it starts its own pid
PARENT_ENV = "MEMLAB_PARENT_PID"


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
    import ctypes
    import ctypes.util

    if parent is None:
        parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    try:
        ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before the request took effect
        os._exit(1)


def command(module: str, *args: str) -> list[str]:
    """The command line that runs ``module`` (``memlab.measurement.worker``...) through this launcher,
    without the caller's directory on ``sys.path`` (NOTE [ worker isolation ])."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, os.path.abspath(__file__), module, *args]


def main() -> None:
    die_with_parent()
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:  # Python 3.10: no -P, the script's folder
        del sys.path[0]
    import runpy

    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
