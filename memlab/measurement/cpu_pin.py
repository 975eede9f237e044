"""The timed phase on one CPU: the measuring thread pinned for the phase, one timed phase per CPU.

# NOTE [ one CPU per timed phase ]
On this project's 2-vCPU machines the two CPUs are not alike: the same relative time, pinned to
CPU 0 and to CPU 1, reads a few per cent apart, and each CPU's reading repeats.  An unpinned thread
migrates between them, so one run's relative time was a mix that differed from the next run's,
idle: more rounds did not help, pinning did (Evidence:
docs/evidence/code-notes.md#one-cpu-per-timed-phase).  So a CPU timed phase at one intra-op thread
pins its thread to one CPU for the phase and restores the thread's affinity after:

* the CPU is the lowest-numbered one of the thread's affinity mask that no other timed phase on this
  machine holds (an ``flock`` on ``<tmp>/memlab-timing-cpu-<n>.lock``, released when the phase ends
  or its process dies), so ``memlab sweep --jobs 2`` times its two points on two CPUs and a single
  measurement always on the same CPU;
* when every CPU of the mask is held, or the platform cannot pin (no ``os.sched_setaffinity``), the
  phase runs unpinned and records ``None``;
* ``MEMLAB_TIMING_CPU=<n>`` names the CPU (it must be in the mask), ``MEMLAB_TIMING_CPU=none`` turns
  pinning off.

The CPU used is recorded as ``environment["timing_cpu"]``.  Pinning changes where the thread waits,
not what it computes: on a loaded machine a pinned thread waits longer in wall time (it cannot move
to an idle CPU), which the thread-CPU-time figure does not count (NOTE [ CPU time and load ] in
:mod:`memlab.measurement.timing`).  Multi-threaded and CUDA phases are not pinned.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["pinned_to_one_cpu", "TIMING_CPU_ENV", "lock_path"]

#: environment variable naming the timing CPU (an integer in the affinity mask) or ``none``
TIMING_CPU_ENV = "MEMLAB_TIMING_CPU"


def lock_path(cpu: int) -> Path:
    """The lock file a timed phase holds while pinned to ``cpu``."""
    return Path(tempfile.gettempdir()) / f"memlab-timing-cpu-{cpu}.lock"


def _requested(mask: set[int]) -> list[int] | None:
    """The CPUs to try, in order: the one ``MEMLAB_TIMING_CPU`` names, or every CPU of ``mask``
    lowest first; None when pinning is turned off.  Raises ValueError for a value that is neither
    ``none`` nor a CPU of the mask."""
    value = os.environ.get(TIMING_CPU_ENV, "").strip()
    if not value:
        return sorted(mask)
    if value.lower() == "none":
        return None
    try:
        cpu = int(value)
    except ValueError:
        raise ValueError(f"{TIMING_CPU_ENV}={value!r} is not valid: expected 'none' or one of the CPUs "
                         f"this process may run on: {sorted(mask)}") from None
    if cpu not in mask:
        raise ValueError(f"{TIMING_CPU_ENV}={cpu} is not valid: expected 'none' or one of the CPUs this "
                         f"process may run on: {sorted(mask)}")
    return [cpu]


def _take(cpus: list[int]) -> tuple[int, int] | tuple[None, None]:
    """``(cpu, open lock fd)`` for the first CPU whose lock is free, or ``(None, None)``."""
    for cpu in cpus:
        try:  # read-only: another user's lock file (mode 0644 under a usual umask) still opens
            fd = os.open(lock_path(cpu), os.O_RDONLY | os.O_CREAT, 0o666)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return cpu, fd
    return None, None


@contextlib.contextmanager
def pinned_to_one_cpu(enabled: bool = True) -> Iterator[int | None]:
    """Pin the calling thread to one CPU (NOTE [ one CPU per timed phase ]) for the block; yields
    the CPU number, or None when the thread was left unpinned (``enabled`` false, pinning off or
    unsupported, every CPU held by another timed phase).  The thread's affinity is restored after."""
    if not enabled or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    mask = os.sched_getaffinity(0)
    cpus = _requested(mask)
    cpu, fd = _take(cpus) if cpus else (None, None)
    if cpu is None:
        yield None
        return
    try:
        os.sched_setaffinity(0, {cpu})
        yield cpu
    finally:
        os.sched_setaffinity(0, mask)
        os.close(fd)  # releases the flock
