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
tensor lifetimes.  Timed under it, ``tt_factorized``'s step took 2.4 s instead of 0.45 s and its
relative time read 3.5 instead of 2.0.  So steps are timed in a child of their own that never had the
setting (:mod:`memlab.measurement.timing`); only the measuring child fixes the threshold.

# NOTE [ the timing heap ]
glibc's default is not one heap but a history: its mmap threshold starts at 128 KiB and rises to the
size of each mmapped block freed (up to 32 MiB), its trim threshold with it (twice the mmap
threshold), so how many pages a step faults in depends on which blocks this process happened to free
first and on where its free space lies when a step ends.  Timed under the untouched default, a
relative time measured that history as much as the technique: in separate processes of the same
code a relative time moved by over 10% with the thousands of pages each process faulted a step, and
a baseline that faulted thousands of pages a step against its technique's hundreds made the
technique read faster than its baseline.  Lifting only the mmap threshold to glibc's ceiling (32
MiB, trim 64 MiB) left a trim-and-regrow cycle in some processes (``selective_checkpoint``: one
process in eight far off the others).

So every timed phase runs under a heap that keeps what it grows (:func:`timing_heap`, set with
``mallopt``): the mmap threshold at glibc's ceiling of 32 MiB and trimming off, the CPU counterpart
of PyTorch's CUDA caching allocator, which keeps the segments it has reserved.  The heap grows to its
high-water mark in the first steps and is reused after: the same settings then repeat to a few per
cent at tens of faults per step (Evidence: docs/evidence/code-notes.md#the-timing-heap).  Fragmentation can
still grow it by a block in a few later steps, how many depending on where the heap starts (ASLR):
``unchunked`` at n=4096 (16 MiB blocks, ~4,100 faults each) grew in 0-3 of 16 baseline steps over 8
fork-server starts, and in 4 of its first 8 in one CI run; the median is the settled step's.  A
block of 32 MiB or more is still a fresh mapping, as in every glibc process, and its first touch is
part of the step's cost (``vmap_chunk``'s 32 MiB baseline blocks: 8,000-16,000 faults a step).  ``extra``'s
``timed_minor_faults``/``baseline_minor_faults`` record the median per step.  This is not the
resident figure's setting, which exists for another figure.  In a process with the resident setting
(asv's, ``isolate=False``) the fixed threshold is restored after the phase; in one without it the
timing heap stays, as glibc offers no way back to its dynamic rule once ``mallopt`` is called.  The
row names the heap (``environment``'s ``timing_heap``); where ``mallopt`` is not glibc's (musl's
does nothing), nothing is set and the label says so.
"""
from __future__ import annotations

import os

import contextlib
import ctypes
import ctypes.util

__all__ = ["resident_supported", "reset_high_water", "read_kib", "MMAP_THRESHOLD", "fix_mmap_threshold",
           "timing_heap", "threshold_fixed", "TIMING_HEAP_DEFAULT", "TIMING_HEAP_KEPT"]

MMAP_THRESHOLD = "131072"
#: mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: glibc's ceiling for its dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX), bytes
_DYNAMIC_MMAP_CEILING = 32 * 2**20
_DEFAULT_TRIM_THRESHOLD = 128 * 1024
#: M_TRIM_THRESHOLD -1: "disables trimming completely" (glibc manual, Malloc Tunable Parameters)
_NEVER_TRIM = -1
#: ``environment["timing_heap"]`` values
TIMING_HEAP_DEFAULT = "C library default (no mallopt)"
TIMING_HEAP_KEPT = "glibc heap kept (mallopt: mmap threshold 32 MiB, no trim)"
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
def timing_heap():
    """The timed phase's heap: glibc's mmap threshold at its 32 MiB ceiling and trimming off (NOTE [ the
    timing heap ]).

    Yields the ``timing_heap`` label.  Where ``mallopt`` is unavailable nothing changes and the label
    says which heap the steps ran under; in a process with the resident setting the fixed threshold
    is set again on exit.
    """
    fn = _mallopt()
    if fn is None or fn(_M_MMAP_THRESHOLD, _DYNAMIC_MMAP_CEILING) != 1:  # musl's mallopt does nothing, returns 0
        yield TIMING_HEAP_DEFAULT if not threshold_fixed() else f"MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD}"
        return
    fn(_M_TRIM_THRESHOLD, _NEVER_TRIM)
    try:
        yield TIMING_HEAP_KEPT
    finally:
        if threshold_fixed():
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

