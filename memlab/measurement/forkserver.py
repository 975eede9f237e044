"""A warm measurement server: torch imported once, one forked child per measurement.

# NOTE [ fork server ]
A fresh ``python -m memlab.measurement.worker`` per measurement pays for the torch import, memlab's
import, plug-in loading and the lazy imports of the first step (``torch._dynamo`` through the first
optimizer: 1.2-1.6 s) every time: several seconds per point on 2 cores, more than most measured
steps.  The server pays them once, then forks one child per measurement.  The child is as isolated
as a fresh process for what memlab measures:

* The server never builds a problem, measures, profiles or touches CUDA; it only imports and runs
  one tiny optimizer step on a 1-element tensor (no allocation survives it).  So every child starts
  from the same state, and no measurement sees another's allocations, allocator or profiler state.
* Allocated bytes are exact and unaffected by what was imported; the resident figure depends on
  glibc's heap, which the child inherits from an idle server: the server runs under glibc's
  default, the measuring child fixes the mmap threshold before it builds anything and the timing
  child never does (NOTE [ timing without the resident setting ]), exactly as spawned workers do.
* Plug-ins are loaded (registered) in the server before any fork; a request whose plug-ins differ
  restarts the server.  The server starts like the spawn worker (``-P``, its own temporary folder as
  working directory: NOTE [ worker isolation ]), so nothing comes from the caller's directory.
* Server and child die with their parent (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, :func:`die_with_parent`):
  a ``memlab sweep`` or ``reproduce`` killed with SIGKILL leaves no server or measurement running.
* The child is the leader of a new session, writes its output as bytes to a log in its own temporary
  folder and its result to a file there, exactly as the spawned worker does; the server reaps it
  with ``os.wait4`` and reports the exit status and peak resident memory, which the caller turns
  into the same errors (:func:`~memlab.measurement.runner.describe_exit`).
* CUDA must not be initialised before a fork, and the server cannot know whether a plug-in does:
  CUDA measurements, and platforms without ``fork``, use the spawned worker.

Protocol: JSON lines.  Server -> caller ``{"ready": pid}`` once; caller -> server
``{"tmp", "request", "result", "output"}``; server -> caller ``{"child": pid}`` then
``{"exit": code, "maxrss": bytes}`` (``code`` negative for a signal, as in ``subprocess``).
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

import torch
import torch.utils.flop_counter  # noqa: F401 - imported by every measurement
from torch.profiler import profile  # noqa: F401

from .. import registry
from . import environment, inprocess, worker  # noqa: F401 - imported before any fork

__all__ = ["ForkServer", "ServerFailed", "ParentKilled", "serve", "fork_available", "kill_group", "die_with_parent",
           "PARENT_ENV"]


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (a measurement and whatever it started)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


from .launch import PARENT_ENV, die_with_parent  # noqa: E402  (re-exported: the server's side uses both)


def fork_available() -> bool:
    """Whether this platform can fork (POSIX with ``os.fork`` and ``os.wait4``)."""
    return hasattr(os, "fork") and hasattr(os, "wait4") and sys.platform != "win32"


# -- server side ----------------------------------------------------------------------------------

def _warm() -> None:
    """Run what every measurement's first step imports lazily (its modules are imported above)."""
    p = torch.nn.Parameter(torch.zeros(1))
    p.grad = torch.zeros(1)
    torch.optim.SGD([p], lr=0.1, foreach=False).step()  # imports torch._dynamo (NOTE above)
    del p
    registry.list_techniques()  # built-ins and MEMLAB_PLUGINS registered before any fork
    # the commit of the code imported here, read once: every child inherits it.  Read in the child, it
    # named whatever HEAD was at that moment (a sweep run while commits were made filed its rows under
    # six later commits although all ran the code this server imported)
    environment.git_commit()
    # the cached parts of a row's environment (platform, CPU name) likewise: each child asked again
    environment.environment(torch.device("cpu"))
    # Everything imported so far lives as long as the server: moved out of the collector's sight,
    # a child's gc.collect() (five per measurement) scans only the measurement's own objects
    # (0.18 s -> ms each) and never writes to the inherited pages (no copy-on-write growth).

    gc.collect()
    gc.freeze()


def _child(job: dict[str, str], server: int) -> None:
    """In the forked child: detach, redirect output to the job's log, run the worker, never return."""
    code = 1
    try:
        die_with_parent(server)  # a child never outlives a killed server
        os.setsid()
        os.chdir(job["tmp"])
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(job["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        code = worker.main([job["request"], job["result"]])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - report like a crashed worker: traceback in the log, exit 1
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> int:
    """Server main loop: warm up, announce, then fork one child per request line on stdin."""
    die_with_parent()
    _warm()
    out = sys.stdout
    print(json.dumps({"ready": os.getpid()}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(job, server)
        print(json.dumps({"child": pid}), file=out, flush=True)
        _, status, usage = os.wait4(pid, 0)
        maxrss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status), "maxrss": maxrss}), file=out, flush=True)
    return 0


# -- caller side ----------------------------------------------------------------------------------

class ServerFailed(RuntimeError):
    """The server could not start, or stopped answering; the caller falls back to spawning."""


class ParentKilled(RuntimeError):
    """The server died while its child measured: the measurement killed its parent, or someone killed
    the server.  The caller reports the point as an error and does not measure it again (a spawned
    retry would make the caller the parent it kills: NOTE [ an expendable parent ])."""


class ForkServer:
    """The caller's handle on one running server (started with ``env``; see :func:`run`)."""

    #: seconds the server may take to import torch and warm up (a loaded 2-core machine: ~30 s)
    START_TIMEOUT_S = 300.0

    def __init__(self, env: dict[str, str], command: list[str]):
        self.env = env
        self._tmp = tempfile.TemporaryDirectory(prefix="memlab-server-", ignore_cleanup_errors=True)
        self._log = open(os.path.join(self._tmp.name, "server.log"), "wb")
        self.proc = subprocess.Popen(command, env=env, cwd=self._tmp.name, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        self._buffer = b""
        self._eof = False  # the server closed its output: it ended
        self.child: int | None = None  # the pid (and process group) of the child measuring now
        ready = self._read(self.START_TIMEOUT_S)
        if ready is None or "ready" not in ready:
            self.close()
            raise ServerFailed(f"the measurement server did not start: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            with open(os.path.join(self._tmp.name, "server.log"), "rb") as f:
                lines = f.read()[-2000:].decode("utf-8", errors="replace").strip().splitlines()
            return " | ".join(lines[-3:]) or "no output"
        except OSError:
            return "no output"

    def _read(self, timeout: float | None) -> dict[str, Any] | None:
        """The next JSON line from the server, or None on timeout or end of file."""
        deadline = None if timeout is None else time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self._eof = True
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, job: dict[str, str], timeout: float) -> tuple[int | None, int | None]:
        """Run one job; ``(exit code, peak resident bytes)``, or ``(None, None)`` after a timeout
        (the child's process group is killed first).

        Raises:
            ServerFailed: the server died or stopped answering, or did not start a child.
            ParentKilled: the server died while its child measured (NOTE [ an expendable parent ]).
        """
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as exc:
            raise ServerFailed(f"the measurement server is gone: {exc}") from None
        started = self._read(60.0)
        if started is None or "child" not in started:
            raise ServerFailed(f"the measurement server did not fork: {self._log_tail()}")
        child = self.child = int(started["child"])
        done = None
        try:
            done = self._read(timeout)
        finally:
            self.child = None
            if done is None:
                kill_group(child)
        if done is not None:
            return int(done["exit"]), int(done["maxrss"])
        if self._eof:
            raise ParentKilled(self._death())
        reaped = self._read(60.0)
        if reaped is None:
            raise ServerFailed("the measurement server did not reap a killed child")
        return None, None

    def _death(self) -> str:
        """One line on the server's end during a measurement (after its output closed)."""
        try:
            code = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        how = (f"killed by signal {-code} ({signal.Signals(-code).name})" if code is not None and code < 0
               and -code in signal.valid_signals() else f"ended (exit code {code})")
        return (f"measurement subprocess ended with its parent: memlab's measurement server {how} during the "
                f"measurement (a technique that kills its parent process?); not measured again")

    def kill_child(self) -> None:
        """Kill the child measuring now, if any, with its process group (from another thread: the
        thread in :meth:`run` then reads its exit, as after a crash)."""
        child = self.child
        if child is not None:
            kill_group(child)

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            self._log.close()
            self._tmp.cleanup()


if __name__ == "__main__":
    sys.exit(serve())
