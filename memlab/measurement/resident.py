"""CPU resident-memory high-water mark around one step (the CPU analogue of "reserved").

# NOTE [ CPU resident high-water mark ]
Linux keeps the process's peak resident set size in ``VmHWM`` (/proc/self/status); writing ``5`` to
/proc/self/clear_refs resets it to the current RSS.  memlab resets it, reads ``VmRSS``, runs one
step and reads ``VmHWM``: the difference is the extra physical memory the step needed, including
glibc heap growth and fragmentation, which the allocated figure does not show.  glibc keeps freed
chunks below its mmap threshold in the heap, which makes this figure vary by tens of MiB between
identical runs unless the mmap threshold is fixed: memlab's measuring child fixes it at 131072 B
before it builds anything (:func:`fix_mmap_threshold`, ``mallopt(M_MMAP_THRESHOLD)``: what
``MALLOC_MMAP_THRESHOLD_=131072`` does from a process's start; the asv configuration sets that
variable).  The figure is whole-process and page-granular (4 KiB), so it is approximate where the
allocated figure is exact.

# NOTE [ timing without the resident setting ]
A fixed 128 KiB mmap threshold makes every tensor of 128 KiB or more a fresh ``mmap`` whose pages the
kernel faults in and zeroes, and every free a ``munmap``: the price of a resident figure that tracks
tensor lifetimes.  A user's training loop runs under glibc's default, which raises the threshold to
the largest block freed (up to 32 MiB) and keeps freed blocks for reuse.  Timed under the fixed
threshold, ``tt_factorized``'s step took 2.4 s instead of 0.45 s and its relative time read 3.5
instead of 2.0.  So steps are timed in a child of their own that never had the setting
(:mod:`memlab.measurement.timing`): the fork server and the timing child run with glibc's default,
and only the measuring child fixes the threshold.  Where a caller measures in its own process
(``isolate=False``, as asv does) and the process was started with ``MALLOC_MMAP_THRESHOLD_``, the
timed phase lifts the threshold to glibc's own ceiling (:func:`glibc_default_heap`: 32 MiB mmap,
64 MiB trim, the values the default's dynamic adjustment tends to for blocks up to 32 MiB) and
restores the fixed setting afterwards; the row records which heap timed it (``environment``'s
``timing_heap``).
"""
from __future__ import annotations

import os

import contextlib
import ctypes
import ctypes.util

__all__ = ["resident_supported", "reset_high_water", "read_kib", "MMAP_THRESHOLD", "fix_mmap_threshold",
           "glibc_default_heap", "threshold_fixed", "TIMING_HEAP_DEFAULT", "TIMING_HEAP_CEILING"]

MMAP_THRESHOLD = "131072"
#: mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: glibc's ceiling for its dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX), bytes
_DYNAMIC_MMAP_CEILING = 32 * 2**20
_DEFAULT_TRIM_THRESHOLD = 128 * 1024
#: ``environment["timing_heap"]`` values
TIMING_HEAP_DEFAULT = "glibc default (no malloc setting)"
TIMING_HEAP_CEILING = "glibc dynamic-threshold ceiling (mallopt: mmap 32 MiB, trim 64 MiB)"
_fixed_here = False


def _mallopt():
    """glibc's ``mallopt``, or None (another C library, another platform)."""
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        return None
    return fn


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD` bytes in this process (the measuring
    child, before it builds anything).  False where ``mallopt`` is unavailable."""
    global _fixed_here
    fn = _mallopt()
    if fn is None or fn(_M_MMAP_THRESHOLD, int(MMAP_THRESHOLD)) != 1:
        return False
    _fixed_here = True
    return True


def threshold_fixed() -> bool:
    """Whether this process runs with the resident setting (from its environment or fixed here)."""
    return _fixed_here or os.environ.get("MALLOC_MMAP_THRESHOLD_") is not None


@contextlib.contextmanager
def glibc_default_heap():
    """Time under glibc's default heap behaviour (NOTE [ timing without the resident setting ]).

    Yields the ``timing_heap`` label.  In a process without the resident setting nothing changes;
    in one with it, the thresholds are lifted to glibc's dynamic ceiling and fixed again on exit.
    """
    fn = _mallopt() if threshold_fixed() else None
    if fn is None:
        yield TIMING_HEAP_DEFAULT if not threshold_fixed() else f"MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD}"
        return
    fn(_M_MMAP_THRESHOLD, _DYNAMIC_MMAP_CEILING)
    fn(_M_TRIM_THRESHOLD, 2 * _DYNAMIC_MMAP_CEILING)
    try:
        yield TIMING_HEAP_CEILING
    finally:
        fn(_M_MMAP_THRESHOLD, int(os.environ.get("MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD)))
        fn(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)


def read_kib(key: str) -> int | None:
    """``VmRSS``/``VmHWM`` of this process in bytes, or None where /proc is unavailable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_high_water() -> bool:
    """Reset VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def resident_supported() -> bool:
    return read_kib("VmHWM") is not None and reset_high_water()

