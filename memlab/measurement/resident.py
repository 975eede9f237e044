"""CPU resident-memory high-water mark around one step (the CPU analogue of "reserved").

# NOTE [ CPU resident high-water mark ]
Linux keeps the process's peak resident set size in ``VmHWM`` (/proc/self/status); writing ``5`` to
/proc/self/clear_refs resets it to the current RSS.  memlab resets it, reads ``VmRSS``, runs one
step and reads ``VmHWM``: the difference is the extra physical memory the step needed, including
glibc heap growth and fragmentation, which the allocated figure does not show.  glibc keeps freed
chunks below its mmap threshold in the heap, which makes this figure vary by tens of MiB between
identical runs unless ``MALLOC_MMAP_THRESHOLD_`` is fixed when the process starts; memlab's
measurement subprocess sets it to 131072 (the asv configuration does too).  The figure is whole-
process and page-granular (4 KiB), so it is approximate where the allocated figure is exact.
"""
from __future__ import annotations

import os

__all__ = ["resident_supported", "reset_high_water", "read_kib", "MMAP_THRESHOLD"]

MMAP_THRESHOLD = "131072"


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


def malloc_threshold() -> str | None:
    return os.environ.get("MALLOC_MMAP_THRESHOLD_")
