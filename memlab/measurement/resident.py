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

# NOTE [ which heap a time represents ]
Decided (issue 47): every time memlab records (``step_time_s``, ``relative_step_time``) is a step on
an allocator that keeps what it grows.  On CUDA that is PyTorch's caching allocator, which every CUDA
user's step runs on; on CPU it is the kept heap above, the caching allocator's counterpart, so a CPU
row and a GPU answer predicted from it describe the same thing: the step's own work once its memory
is in place, which is what a technique changes and what repeats between processes.  It is not what
every CPU user sees: a plain CPU process runs on glibc's defaults, under which a technique whose step
frees and reallocates large blocks pays page faults the kept heap does not (``tt_factorized`` against
``dense`` at B=4096: 1.31 on the kept heap, 1.97-2.34 in processes with glibc's defaults, where
``dense`` took 3,992 faults a step in one process and 0 in the next; issue 47).  Those defaults do not
give one figure (the history of the process decides: the NOTE above), so they are not the recorded
time; the row says which heap it was timed on (``environment["timing_heap"]``) and its median minor
faults per timed step (``extra``'s ``timed_minor_faults``/``baseline_minor_faults``).  To see a row
under glibc's defaults, measure it again with ``MEMLAB_TIMING_HEAP=default`` (:data:`TIMING_HEAP_ENV`:
no ``mallopt`` in the timed phase, so the timing child keeps the dynamic rule it started with): the
row then reads ``timing_heap`` = :data:`TIMING_HEAP_DEFAULT`, and where the two heaps differ beyond
the noise (a few per cent between processes on the kept heap; more under the defaults) the two rows'
relative times differ and the default-heap row's faults per step are in the hundreds or thousands
where the kept heap's are in the tens.  asv's ``time_step`` is neither: its own heap is told in
NOTE [ timing ] in benchmarks/common.py.  Evidence: docs/evidence/readme-timing.md#which-heap-a-time-represents
"""
from __future__ import annotations

import os

import contextlib
import ctypes

from .launch import libc_name

__all__ = ["resident_supported", "reset_high_water", "read_kib", "MMAP_THRESHOLD", "fix_mmap_threshold",
           "timing_heap", "threshold_fixed", "TIMING_HEAP_DEFAULT", "TIMING_HEAP_KEPT", "TIMING_HEAP_ENV",
           "timing_heap_choice"]

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
#: environment variable choosing the timed phase's heap: ``kept`` (the default) or ``default`` (glibc's own
#: rule, no ``mallopt``): NOTE [ which heap a time represents ]
TIMING_HEAP_ENV = "MEMLAB_TIMING_HEAP"
_TIMING_HEAP_CHOICES = ("kept", "default")
_fixed_here = False


def _mallopt():
    """glibc's ``mallopt``, or None (another C library, another platform)."""
    name = libc_name()
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


def timing_heap_choice(environ=None) -> str:
    """``kept`` or ``default``: :data:`TIMING_HEAP_ENV` of ``environ`` (default ``os.environ``), ``kept``
    when unset; a ValueError naming any other value and the valid ones."""
    value = (os.environ if environ is None else environ).get(TIMING_HEAP_ENV, "").strip().lower() or "kept"
    if value not in _TIMING_HEAP_CHOICES:
        raise ValueError(f"{TIMING_HEAP_ENV}={value!r} is not valid: expected one of {', '.join(_TIMING_HEAP_CHOICES)}")
    return value


@contextlib.contextmanager
def timing_heap():
    """The timed phase's heap: glibc's mmap threshold at its 32 MiB ceiling and trimming off (NOTE [ the
    timing heap ]).

    Yields the ``timing_heap`` label.  Where ``mallopt`` is unavailable nothing changes and the label
    says which heap the steps ran under; in a process with the resident setting the fixed threshold
    is set again on exit.
    """
    fn = None if timing_heap_choice() == "default" else _mallopt()  # NOTE [ which heap a time represents ]
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

