"""Back a large, freshly mapped CPU buffer by transparent huge pages before it is first written.

# NOTE [ huge pages for a fresh buffer ]
glibc serves an allocation of 32 MiB or more (its largest dynamic mmap threshold,
``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit) by a new ``mmap`` and unmaps it when it is freed, so a
step that allocates such a buffer every time takes one page fault per 4 KiB of it every time, and the
kernel zeroes each page as it maps it.  ``tt_factorized`` keeps one [40960, 800] float32 intermediate
at B = 4096 (131 MB): 32,001 faults a step, about a fifth of its step's thread CPU time (Evidence:
docs/evidence/code-notes.md#huge-pages-for-a-fresh-buffer).

:func:`advise_huge_pages` asks the kernel (``madvise(MADV_HUGEPAGE)``) to map the buffer's 2 MiB-aligned
part by transparent huge pages: 64 faults instead of 32,001 for that buffer, and a shorter step.  It
changes no byte that memlab measures: the allocation is PyTorch's own, of the same
size, and only pages inside it are mapped (the resident set grows by no more than the buffer).  It
does nothing where it cannot help or is not available: off Linux, on other devices, below 32 MiB
(glibc reuses such blocks from its heap, already mapped), or when the kernel refuses (transparent
huge pages ``never``, or not built in).  Where the kernel's ``defrag`` setting is ``madvise`` a
fault may compact memory to find a free huge page, so a step on a host short of free 2 MiB blocks
can take longer than with small pages; memlab's timings show that as scatter.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

import torch

__all__ = ["FRESH_MAPPING_BYTES", "HUGE_PAGE_BYTES", "advise_huge_pages"]

#: glibc's largest dynamic mmap threshold on 64-bit: an allocation of at least this many bytes is
#: always a fresh mapping (NOTE [ huge pages for a fresh buffer ])
FRESH_MAPPING_BYTES = 32 << 20
#: the transparent huge page size of x86-64 and (with 4 KiB base pages) aarch64
HUGE_PAGE_BYTES = 2 << 20
_MADV_HUGEPAGE = 14  # linux/mman.h


@functools.lru_cache(maxsize=1)
def _madvise():
    """libc's ``madvise`` on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name, use_errno=True).madvise
    except (OSError, AttributeError):  # pragma: no cover - a Linux without a loadable libc
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def advise_huge_pages(buffer: torch.Tensor) -> bool:
    """Ask for transparent huge pages behind ``buffer``'s 2 MiB-aligned span, before its first write.

    Args:
        buffer: a contiguous tensor just allocated (``torch.empty``-like, not yet written; pages
            already touched keep their small pages).

    Returns:
        True when the kernel accepted the advice for at least one huge page; False when it was not
        given (not a CPU tensor, under :data:`FRESH_MAPPING_BYTES`, no whole huge page inside it,
        not Linux) or refused.  The buffer's contents and size are never changed.
    """
    nbytes = buffer.numel() * buffer.element_size()
    if buffer.device.type != "cpu" or nbytes < FRESH_MAPPING_BYTES or not buffer.is_contiguous():
        return False
    madvise = _madvise()
    if madvise is None:
        return False
    start = buffer.data_ptr()
    first = -(-start // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    stop = (start + nbytes) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    if stop <= first:
        return False
    return madvise(first, stop - first, _MADV_HUGEPAGE) == 0
