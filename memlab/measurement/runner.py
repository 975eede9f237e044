"""Running one measurement in a fresh Python process.

Results depend on what ran before in the same process (allocator state, lazy initialisation,
glibc heap layout), so memlab measures each configuration in its own subprocess by default.  The
child gets the parent's plug-ins and imports nothing from the caller's directory (see NOTE [ worker
isolation ]).  It starts under glibc's default heap (``MALLOC_MMAP_THRESHOLD_`` is removed from its
environment): the measuring child fixes the threshold itself before it builds anything, and the
timing child never does; its timed phase sets the timing heap (NOTE [ the timing heap ]).
A crash, a death by signal or a timeout becomes :class:`WorkerFailed`, whose ``status`` is ``oom``
when the kernel's out-of-memory killer most likely ended the child and ``error`` otherwise.

NOTE [ worker isolation ]
``python -m`` puts the current directory first on ``sys.path``, so a ``torch.py``, ``numpy.py`` or
``memlab/`` in the caller's directory would replace the real ones in the child.  The child is
therefore started with ``-P`` (Python 3.11+: no implicit path entry; on 3.10 the launcher drops its
own folder, the entry a script gets), through :mod:`memlab.measurement.launch` run by its path (it
asks to die with its parent before anything imports torch), and with its working directory
set to its private temporary folder (which holds only the request and the result), so neither the
implicit entry nor a relative import can reach the caller's directory.  ``PYTHONPATH`` is memlab's
root first, then the caller's own entries made absolute (entries the user named on purpose); empty
entries, which Python reads as "the current directory", are dropped.  Plug-ins travel as absolute
file paths in ``MEMLAB_PLUGINS``.  The child is the leader of a new session, so a timeout (or an
interrupt of the parent) kills it together with any process it started.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from ..registry import loaded_plugins
from ..technique import Technique
from .forkserver import ForkServer, ParentKilled, ServerFailed, fork_available, kill_group
from .launch import PARENT_ENV
from .launch import command as launch_command

__all__ = ["run_in_subprocess", "WorkerFailed", "describe_exit", "memory_limit_bytes", "OOM_FRACTION",
           "ISOLATION_MODES", "shutdown_server", "take_server_start_s"]

#: A child killed by SIGKILL whose peak resident memory reached this fraction of the memory limit is
#: reported as ``oom`` (see :func:`describe_exit`).
OOM_FRACTION = 0.5
#: Longest ``error`` message (characters); the last output lines are cut to fit.
MAX_MESSAGE = 500
_TAIL_LINES = 3
_TAIL_BYTES = 64 * 1024
_REAP_AFTER_KILL_S = 30.0
#: Progress lines the profiler (kineto) prints on every run, e.g.
#: ``USDT:<YYYY-MM-DD hh:mm:ss> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start``: never the
#: reason of a failure, so left out of the message (kineto's WARNING and ERROR lines are kept).
_PROFILER_CHATTER = re.compile(r"(VERBOSE|INFO|STAGE|USDT):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+:\d+\]")


class WorkerFailed(RuntimeError):
    """The measurement subprocess crashed, was killed, timed out or wrote no result.

    Attributes:
        status: ``oom`` when the kernel's out-of-memory killer most likely ended the child, else
            ``error``.  The message is one line of at most :data:`MAX_MESSAGE` characters.
    """

    def __init__(self, message: str, status: str = "error"):
        super().__init__(_one_line(message))
        self.status = status


def _one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_exit(returncode: int, peak_rss_bytes: int | None, memory_limit_bytes: int | None,
                  output_tail: Sequence[str] = ()) -> tuple[str, str]:
    """Status and one-line message for a measurement subprocess that ended without a result.

    A negative ``returncode`` is a death by signal (``subprocess`` convention).  SIGKILL is what the
    kernel's out-of-memory killer sends, but also what a user's ``kill -9`` sends; the OOM killer
    picks the process using the most memory, so a SIGKILL is reported as status ``oom`` when the
    child's peak resident memory was at least :data:`OOM_FRACTION` (50%) of the memory limit, and as
    ``error`` naming the signal otherwise (or when either figure is unknown).  Every other signal or
    exit code is an ``error`` naming it.

    Args:
        returncode: the child's exit code, or minus the number of the signal that killed it.
        peak_rss_bytes: the child's peak resident memory (bytes), None if unknown.
        memory_limit_bytes: the memory the child could use (bytes): physical memory or a smaller
            cgroup limit (:func:`memory_limit_bytes`), None if unknown.
        output_tail: the child's last non-empty output lines, appended to the message.

    Returns:
        ``(status, message)``, e.g. ``("error", "measurement subprocess killed by signal 11 (SIGSEGV)")``.

    Example:
        >>> describe_exit(-9, 15 * 2**30, 16 * 2**30)[0]
        'oom'
    """
    status = "error"
    if returncode >= 0:
        message = f"measurement subprocess exited with code {returncode}"
    else:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown signal"
        if (number == signal.SIGKILL and peak_rss_bytes is not None and memory_limit_bytes
                and peak_rss_bytes >= OOM_FRACTION * memory_limit_bytes):
            status = "oom"
            message = (f"measurement subprocess killed by signal {number} (likely the kernel's out-of-memory "
                       f"killer): peak resident memory {peak_rss_bytes / 2**20:,.0f} MiB of "
                       f"{memory_limit_bytes / 2**20:,.0f} MiB")
        else:
            message = f"measurement subprocess killed by signal {number} ({name})"
    if output_tail:
        message += ": " + " | ".join(output_tail)
    return status, _one_line(message)


def memory_limit_bytes() -> int | None:
    """The memory this process and its children can use (bytes), or None if unknown.

    The smaller of the physical memory (``MemTotal``) and any cgroup limit on the way from this
    process's memory cgroup up to the root (cgroup v2 ``memory.max`` or v1 ``memory.limit_in_bytes``).
    """
    limits = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    limits.append(int(line.split()[1]) * 1024)
                    break
        with open("/proc/self/cgroup") as f:
            entries = [line.rstrip("\n").split(":", 2) for line in f]
    except (OSError, ValueError, IndexError):
        entries = []
    for entry in entries:
        if len(entry) != 3:
            continue
        hierarchy, controllers, path = entry
        if hierarchy == "0" and not controllers:
            bases, file = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"], "memory.max"
        elif "memory" in controllers.split(","):
            bases, file = ["/sys/fs/cgroup/memory"], "memory.limit_in_bytes"
        else:
            continue
        for base in bases:
            folder = Path(base + path)
            for d in [folder, *folder.parents]:
                if not str(d).startswith(base):
                    break
                try:
                    limits.append(int((d / file).read_text().strip()))
                except (OSError, ValueError):  # absent, or "max"
                    pass
    return min(limits) if limits else None


def _absolute_paths(value: str) -> list[str]:
    """``os.pathsep``-separated entries made absolute; empty entries (meaning "here") dropped."""
    return [os.path.abspath(p) for p in value.split(os.pathsep) if p.strip()]


_pins = threading.local()


def pin_gpu(entry: str | None) -> None:
    """Children this thread starts from now on see only GPU ``entry`` (a ``CUDA_VISIBLE_DEVICES``
    entry; None: the process's own setting).  NOTE [ one GPU per worker ] in memlab.sweep.run."""
    _pins.gpu = entry


def _child_env(technique: type[Technique]) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)  # NOTE [ timing without the resident setting ]
    if getattr(_pins, "gpu", None) is not None:
        env["CUDA_VISIBLE_DEVICES"] = _pins.gpu
    env[PARENT_ENV] = str(os.getpid())  # the child dies with this process (forkserver.die_with_parent)
    plugins = _absolute_paths(env.get("MEMLAB_PLUGINS", ""))
    plugins += [p for p in loaded_plugins() if p not in plugins]
    src = technique.source_file()
    memlab_dir = str(Path(__file__).resolve().parents[1])
    if technique.__module__ == "__main__" or src is None:
        raise ValueError(
            f"technique {technique.name!r} is defined in __main__ or has no source file; a subprocess "
            "cannot import it: define it in a file (load it with memlab.load_plugin / --plugin) or pass isolate=False"
        )
    resolved = Path(src).resolve()  # a plug-in file, or a module of a plug-in family folder
    if not str(resolved).startswith(memlab_dir) and not any(Path(p) in (resolved, *resolved.parents) for p in plugins):
        plugins.append(str(resolved))
    env["MEMLAB_PLUGINS"] = os.pathsep.join(plugins)
    root = str(Path(memlab_dir).parent)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in _absolute_paths(env.get("PYTHONPATH", "")) if p != root])
    return env


def _command(req_path: str, res_path: str) -> list[str]:
    # NOTE [ worker isolation ]; under an expendable parent: NOTE [ an expendable parent ]
    return launch_command("memlab.measurement.worker", req_path, res_path, nanny=True)


def _output_tail(path: str) -> list[str]:
    """The last non-empty lines of the child's output, decoded with replacement, each cut short.

    The profiler's progress lines (:data:`_PROFILER_CHATTER`) are skipped.
    """
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - _TAIL_BYTES))
            data = f.read()
    except OSError:
        return []
    lines = [ln.strip() for ln in data.decode("utf-8", errors="replace").splitlines()]
    lines = [ln for ln in lines if ln and not _PROFILER_CHATTER.match(ln)]
    return [ln if len(ln) <= 200 else ln[:197] + "..." for ln in lines[-_TAIL_LINES:]]


def _wait(proc: subprocess.Popen, timeout: float) -> tuple[int | None, int | None]:
    """Reap ``proc``: ``(returncode, peak resident bytes)``, or ``(None, None)`` after a timeout.

    ``os.wait4`` reports the child's own peak resident memory (``ru_maxrss``); it runs in a helper
    thread so that the parent waits without polling.  On timeout, or if the parent is interrupted,
    the child's whole process group is killed before it is reaped.
    """
    if not hasattr(os, "wait4"):  # not POSIX: no rusage, no process group
        try:
            return proc.wait(timeout), None
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None, None
    reaped: list[Any] = []

    def reap() -> None:
        try:
            reaped.append(os.wait4(proc.pid, 0))
        except OSError as exc:
            reaped.append(exc)

    waiter = threading.Thread(target=reap, name=f"memlab-reap-{proc.pid}", daemon=True)
    waiter.start()
    timed_out = True
    try:
        waiter.join(timeout)
        timed_out = waiter.is_alive()
    finally:
        if waiter.is_alive():
            kill_group(proc.pid)
            waiter.join(_REAP_AFTER_KILL_S)
    if not reaped or isinstance(reaped[0], OSError):
        raise WorkerFailed(f"could not reap the measurement subprocess (pid {proc.pid}): "
                           f"{reaped[0] if reaped else 'still running after SIGKILL'}")
    _, wait_status, usage = reaped[0]
    proc.returncode = os.waitstatus_to_exitcode(wait_status)
    if timed_out:
        return None, None
    return proc.returncode, usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


ISOLATION_MODES = ("auto", "fork", "spawn")
#: the running ForkServers by thread (see NOTE [ fork server ]): one per thread that measures, so
#: ``memlab sweep --jobs N`` runs N measurements at once, each from its own warm server
_servers: dict[int, Any] = {}
_servers_lock = threading.Lock()
#: variables that change in the caller's process without changing what a child measures, so a
#: difference in these alone does not restart the fork server: torch sets inductor's default cache
#: folder when an in-process measurement's first optimizer step imports it (a child works out the
#: same folder itself), and pytest names the running test in its own variable before every test
_NOT_A_SETTING = frozenset({"TORCHINDUCTOR_CACHE_DIR", "PYTEST_CURRENT_TEST"})


def _same_setting(a: dict[str, str], b: dict[str, str]) -> bool:
    def setting(env: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if k not in _NOT_A_SETTING}
    return setting(a) == setting(b)


def _server_for(env: dict[str, str]):
    """This thread's running fork server for ``env`` (plug-ins, paths, malloc setting), started if needed."""
    key = threading.get_ident()
    with _servers_lock:
        server = _servers.get(key)
    if server is not None and (not _same_setting(server.env, env) or not server.alive()):
        server.close()
        server = None
    if server is None:
        started = time.perf_counter()
        server = ForkServer(env, launch_command("memlab.measurement.forkserver"))  # NOTE [ worker isolation ]
        _starts.seconds = getattr(_starts, "seconds", 0.0) + time.perf_counter() - started
    with _servers_lock:
        _servers[key] = server
    return server


#: per thread, the wall seconds spent starting fork servers since :func:`take_server_start_s` last ran
_starts = threading.local()


def take_server_start_s() -> float:
    """Wall seconds this thread spent starting measurement servers (torch and memlab imported, the
    warm-up step) since the last call, then zero: a sweep's one-off start per worker, which
    :func:`memlab.measurement.harness_cost.harness_seconds` keeps apart from the cost per point
    (NOTE [ harness cost ])."""
    taken = getattr(_starts, "seconds", 0.0)
    _starts.seconds = 0.0
    return taken


def close_thread_server() -> None:
    """Stop the fork server this thread started, if any (a sweep's worker thread, when it ends)."""
    with _servers_lock:
        server = _servers.pop(threading.get_ident(), None)
    if server is not None:
        server.close()


def kill_children_of(threads: set[int]) -> None:
    """Kill the measurement each of these threads' fork servers is running now (an interrupted
    parallel sweep: its workers' children lead their own sessions, so no signal reaches them)."""
    with _servers_lock:
        servers = [server for key, server in _servers.items() if key in threads]
    for server in servers:
        server.kill_child()


def shutdown_server() -> None:
    """Stop every fork server this process runs (also done at interpreter exit)."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()


atexit.register(shutdown_server)


def _resolve_mode(isolate: str, request: dict[str, Any]) -> str:
    if isolate not in ISOLATION_MODES:
        raise ValueError(f"isolate={isolate!r} is not valid; valid: True, False, {', '.join(map(repr, ISOLATION_MODES))}")
    if isolate == "spawn":
        return "spawn"
    cuda = not str(request.get("device", "cpu")).startswith("cpu")
    if cuda or not fork_available():
        if isolate == "fork":
            raise ValueError("isolate='fork' is not available for CUDA (no fork after CUDA initialisation) "
                             "or on a platform without fork; use isolate='spawn'")
        return "spawn"
    return "fork"


def run_in_subprocess(technique: type[Technique], request: dict[str, Any], timeout: float,
                      isolate: str = "auto") -> dict[str, Any]:
    """Run ``request`` in an isolated process; return the result JSON object.

    ``isolate``: ``"fork"`` (a child forked from the warm server, NOTE [ fork server ]), ``"spawn"``
    (``python -P -m memlab.measurement.worker``) or ``"auto"``: fork for CPU where the platform can,
    spawn for CUDA.  Either way the child runs in its own temporary folder (removed afterwards, also
    after a timeout) and its own session; its stdout and stderr go, as bytes, to one file there, of
    which the last lines (decoded with replacement) explain a failure.  A fork server that fails
    falls back to spawning, once per request.

    Raises:
        WorkerFailed: non-zero exit, death by signal, timeout, or missing/corrupt result; the
            one-line message carries the exit code or signal and the child's last output lines,
            ``status`` says ``oom`` or ``error`` (see :func:`describe_exit`).
        ValueError: an unknown ``isolate`` mode, or ``fork`` where it cannot work.
    """
    mode = _resolve_mode(isolate, request)
    env = _child_env(technique)
    with tempfile.TemporaryDirectory(prefix="memlab-", ignore_cleanup_errors=True) as tmp:
        req_path, res_path = os.path.join(tmp, "request.json"), os.path.join(tmp, "result.json")
        out_path = os.path.join(tmp, "output.log")
        with open(req_path, "w") as f:
            json.dump(request, f)
        outcome = None
        if mode == "fork":
            try:
                outcome = _server_for(env).run({"tmp": tmp, "request": req_path, "result": res_path,
                                                "output": out_path}, timeout)
            except ParentKilled as exc:  # never measured again: NOTE [ an expendable parent ]
                close_thread_server()
                raise WorkerFailed(str(exc)) from None
            except ServerFailed as exc:
                print(f"memlab: warning: {exc}; measuring in a spawned process instead", file=sys.stderr)
                close_thread_server()
        if outcome is None:
            with open(out_path, "wb") as out:
                proc = subprocess.Popen(_command(req_path, res_path), env=env, cwd=tmp, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=out, start_new_session=True)
            outcome = _wait(proc, timeout)
        returncode, peak_rss = outcome
        if returncode is None:
            raise WorkerFailed(f"measurement subprocess timed out after {timeout:g} s")
        if returncode != 0 or not os.path.exists(res_path):
            limit = memory_limit_bytes() if returncode == -signal.SIGKILL else None
            status, message = describe_exit(returncode, peak_rss, limit, _output_tail(out_path))
            if returncode == 0:  # sys.exit(0) or os._exit(0) inside the run: the worker never wrote its result
                message = message.replace("exited with code 0", "exited with code 0 before writing a result", 1)
            raise WorkerFailed(message, status)
        try:
            with open(res_path) as f:
                return json.load(f)
        except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise WorkerFailed(f"measurement subprocess wrote an unreadable result: {exc}") from None
