"""A model of PyTorch's CUDA caching allocator, replayed on an allocation trace (pure Python, no torch).

Given the ordered allocations and frees of a program (as memlab's exact CPU trace records them),
:func:`simulate` says what ``torch.cuda.max_memory_allocated()`` and ``max_memory_reserved()`` would
be on a GPU running the same requests through the native caching allocator on one stream, under a
``PYTORCH_CUDA_ALLOC_CONF`` setting, and whether a device of a given capacity would run out of
memory.  It is deterministic: the same trace and settings give the same figures on every machine.

# NOTE [ CUDA caching allocator rules ]
Read from PyTorch's source, never copied: ``c10/cuda/CUDACachingAllocator.cpp`` at commit
001074d25084fdb87a799823e395a50f5ec044d3 (the newest stored copy; the pinned torch 2.13.0 build is
git cf30153c4c13, whose .cpp is not stored), ``c10/core/AllocatorConfig.cpp`` at
0ac716637f3258efcaf7fdfb851bdd520c9c1441, ``c10/cuda/CUDAAllocatorConfig.cpp`` at
b944315b93d36f842ef94d67a041371993234a74, and the pinned torch's own installed headers
``c10/core/AllocatorConfig.h`` and ``c10/cuda/CUDAAllocatorConfig.h`` (torch 2.13.0+cpu), which
declare the constants and options below.  The 0ac7166 ``AllocatorConfig.cpp`` predates
``large_segment_size_mb``, which the 2.13 header declares (``parseLargeSegmentSize``); the rules
for it (read first, the least ``max_split_size_mb`` and ``max_non_split_rounding_mb``) follow a
newer ``AllocatorConfig.cpp`` whose ``parseMaxSplitSize`` checks against ``large_segment_size_``.
Garbage collection and the memory-fraction check follow ``garbage_collect_cached_blocks``,
``get_free_block`` and ``alloc_block`` of the 001074d ``.cpp``.

* Rounding (``round_size``): a request under 512 B (``kMinBlockSize``) takes 512 B; otherwise it is
  rounded up to a multiple of 512 B, unless ``roundup_power2_divisions`` gives the request's size
  interval d > 1 divisions and the request exceeds 512 * d bytes: then it is rounded up to the next
  of d equal steps between the two powers of two around it (a power of two stays as it is).  The 16
  intervals are [2^k, 2^(k+1)) MiB for k = 0..15 (1 MiB to 64 GiB); requests under 1 MiB use the
  first interval's setting, those of 32 GiB and more the last's.
* Pools: rounded sizes up to 1 MiB (``kSmallSize``) go to the small pool, larger ones to the large
  pool; a block never moves between pools.
* Segments (``get_allocation_size``): a small request that finds no free block makes a 2 MiB
  (``kSmallBuffer``) segment; a large one under 10 MiB (``kMinLargeAlloc``) a 20 MiB one
  (``kLargeBuffer``, the ``large_segment_size_mb`` option of torch 2.13, default 20, must be > 10);
  from 10 MiB up, its size rounded up to 2 MiB (``kRoundLarge``).
* Best fit (``get_free_block``): the free block of the pool with the smallest size >= the request,
  ties broken by the lowest address (the pool is ordered by size, then address).
* Oversize blocks (``max_split_size_mb``, default unlimited, must be >= ``large_segment_size_mb``,
  20 by default): a request below the limit is never served by a free block at or above it; a
  request at or above it only by a free block smaller than request + ``max_non_split_rounding_mb``
  (default and least value: ``large_segment_size_mb``).  The parser reads ``large_segment_size_mb``
  first, wherever it stands in the string, as torch 2.13's ``AcceleratorAllocatorConfig::parseArgs``
  does (its ``parseMaxSplitSize`` takes ``large_segment_size_`` as the least value).
* Splitting (``should_split``): the block found is split and the rest stays free when, in the small
  pool (or with expandable segments), at least 512 B remain; in the large pool, when the request is
  below ``max_split_size`` and more than 1 MiB remains.  An unsplit block is handed out whole and
  counts whole in the allocated bytes.
* Freeing (``free_block``): the freed block merges with free neighbours of its segment (never across
  segments); segments stay reserved.
* Out of memory (``malloc``): when no free block fits and the device refuses a new segment, (1) with
  ``max_split_size`` set, free cached oversize blocks (the smallest single one large enough, else the
  largest ones until enough is freed) and retry; (2) free every cached segment that is entirely free
  (``release_cached_blocks``, as ``torch.cuda.empty_cache()``) and retry; (3) raise the OOM error.
* Memory fraction (``per_process_memory_fraction``; torch's ``set_fraction``): ``alloc_block``
  refuses a new segment when reserved + the segment size ``get_allocation_size`` gives (2 MiB,
  ``large_segment_size``, or the request rounded to 2 MiB) would exceed fraction x capacity.  The
  check comes first, so it holds for expandable segments too: there it is the full allocation size,
  not the pages still to map, that must fit under the fraction; the pages then map while the device
  has room.
* Garbage collection (``garbage_collection_threshold``, in (0, 1); acts only with a memory
  fraction, as in torch): every ``get_free_block`` call on a pool ticks that pool's counter; a free
  block's age is the ticks since it entered the pool (a free, a split's remainder, a merge).  When no
  free block fits, before asking for a new segment, if reserved exceeds threshold x fraction x
  capacity, the allocator releases whole free large-pool segments (never split ones, never
  expandable ones) whose age is at least the average age of those segments, in (size, address)
  order, and repeats with the new average until it has released reserved − threshold x allowed
  bytes or nothing more goes (``garbage_collect_cached_blocks``).
* Expandable segments (``expandable_segments:True``): one segment per pool whose virtual address
  space (9/8 of the device) is backed by physical pages on demand: 2 MiB pages for the small pool,
  ``large_segment_size`` (20 MiB) pages for the large pool (so "reserved" grows in pages).  A
  request that finds no free block maps pages at the lowest address with enough free and unmapped
  space, usually the end, extending the free block before it.  Both pools split down to 512 B.  In
  best fit, a free block followed by unmapped space counts as that much larger.  On OOM, the fully
  free pages of free blocks are unmapped.

What the model leaves out: other streams and cross-stream ``record_stream`` events (one stream, every
free completes at once), CUDA graphs' private pools, ``backend:cudaMallocAsync`` (another allocator:
refused); the pinned host allocator's options are checked and ignored (no device memory).  A new
``cudaMalloc`` segment is placed above every earlier one (real addresses only matter for ties
between equal-size free blocks).  A request of 0 bytes allocates nothing, as in the allocator.
"""
from __future__ import annotations

import bisect
import random
import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Hashable, Iterable

from ..core.units import MiB

__all__ = ["AllocatorConf", "AllocatorStats", "CachingAllocatorModel", "SimulatedOOM", "parse_alloc_conf",
           "simulate", "round_size", "allocation_size", "KMIN_BLOCK_SIZE", "KSMALL_SIZE", "KSMALL_BUFFER",
           "KMIN_LARGE_ALLOC", "KROUND_LARGE", "KLARGE_BUFFER"]


# Constants of NOTE [ CUDA caching allocator rules ], named as in PyTorch's source (bytes).
#: kMinBlockSize: every request is rounded up to a multiple of this
KMIN_BLOCK_SIZE = 512
#: kSmallSize: the largest request served by the small pool
KSMALL_SIZE = 1 * MiB
#: kSmallBuffer: size of a small-pool segment (and of a small-pool expandable page)
KSMALL_BUFFER = 2 * MiB
#: kMinLargeAlloc: large requests below this share a kLargeBuffer segment
KMIN_LARGE_ALLOC = 10 * MiB
#: kRoundLarge: larger requests get a segment of their size rounded up to this
KROUND_LARGE = 2 * MiB
#: kLargeBuffer: default ``large_segment_size`` (and ``max_non_split_rounding``, and the least
#: ``max_split_size``)
KLARGE_BUFFER = 20 * MiB
#: roundup_power2_divisions has one setting per interval [2^k, 2^(k+1)) MiB, k = 0..15
ROUNDUP_POWER2_INTERVALS = 16
_ROUNDUP_START_LOG2 = 20  # 1 MiB


@dataclass(frozen=True)
class AllocatorConf:
    """The allocator settings a ``PYTORCH_CUDA_ALLOC_CONF`` string chooses (sizes in bytes).

    Attributes:
        text: the string parsed (``""``: the defaults).
        max_split_size: blocks at or above it are never split; None = unlimited (the default).
        max_non_split_rounding: a request at or above ``max_split_size`` takes a free block only if it
            is smaller than request + this (default 20 MiB).
        roundup_power2_divisions: divisions per size interval (16 intervals of NOTE [ CUDA caching
            allocator rules ]); 0 or 1 = plain 512-byte rounding.
        expandable_segments: one growing segment per pool.
        large_segment_size: segment size for large requests below 10 MiB, and the large pool's
            expandable page (default 20 MiB).
        per_process_memory_fraction: the allocator may reserve at most this fraction of the
            capacity given to the model (torch applies it to the device's total memory); None = no limit.
        garbage_collection_threshold: with a memory fraction, free old cached segments once
            reserved exceeds this fraction of the allowed bytes; 0.0 = off (the default).
    """

    text: str = ""
    max_split_size: int | None = None
    max_non_split_rounding: int = KLARGE_BUFFER
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_POWER2_INTERVALS
    expandable_segments: bool = False
    large_segment_size: int = KLARGE_BUFFER
    per_process_memory_fraction: float | None = None
    garbage_collection_threshold: float = 0.0

    def divisions(self, size: int) -> int:
        """The ``roundup_power2_divisions`` setting for a request of ``size`` bytes."""
        index = max(0, size.bit_length() - 1 - _ROUNDUP_START_LOG2)
        return self.roundup_power2_divisions[min(index, ROUNDUP_POWER2_INTERVALS - 1)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["roundup_power2_divisions"] = list(self.roundup_power2_divisions)
        return d


# ---------------------------------------------------------------------------------------------------
# PYTORCH_CUDA_ALLOC_CONF parsing

_OPTIONS = ("max_split_size_mb", "max_non_split_rounding_mb", "roundup_power2_divisions", "expandable_segments",
            "large_segment_size_mb", "per_process_memory_fraction", "backend", "garbage_collection_threshold")
#: options that change nothing about one stream's device blocks: accepted (value checked) and ignored
_NO_EFFECT_BOOL = ("release_lock_on_cudamalloc", "pinned_use_cuda_host_register", "pinned_use_background_threads",
                   "graph_capture_record_stream_reuse", "throw_on_cudamalloc_oom", "pinned_free_catch_all")
_NO_EFFECT_INT = ("pinned_num_register_threads", "pinned_reserve_segment_size_mb")
_KNOWN = _OPTIONS + _NO_EFFECT_BOOL + _NO_EFFECT_INT


def _conf_error(msg: str) -> ValueError:
    return ValueError(f"PYTORCH_CUDA_ALLOC_CONF: {msg}")


def _tokens(text: str) -> list[str]:
    out, buf = [], ""
    for ch in text:
        if ch in ",:[]":
            if buf:
                out.append(buf)
                buf = ""
            out.append(ch)
        elif not ch.isspace():
            buf += ch
    if buf:
        out.append(buf)
    return out


def _int(option: str, token: str | None, valid: str) -> int:
    if token is None or not re.fullmatch(r"\d+", token):
        raise _conf_error(f"{option}={token!r} is not valid; valid: {valid}")
    return int(token)


def _bool(option: str, token: str | None) -> bool:
    if token not in ("True", "False"):
        raise _conf_error(f"{option}={token!r} is not valid; valid: True or False")
    return token == "True"


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def parse_alloc_conf(text: str = "") -> AllocatorConf:
    """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string as the pinned torch does (NOTE [ CUDA caching
    allocator rules ]): ``key:value`` pairs separated by commas, lists in brackets
    (``roundup_power2_divisions:[256:1,512:2,>:4]``), whitespace ignored.  ``large_segment_size_mb``
    is read first wherever it stands: the least ``max_split_size_mb`` and
    ``max_non_split_rounding_mb`` (and the latter's default) are that size.

    Raises:
        ValueError: one line naming the option, the bad value and the valid range; an unknown option
            lists the known ones; an option the model does not simulate says so.

    Example::

        parse_alloc_conf("max_split_size_mb:128,expandable_segments:True").max_split_size  # 134217728
    """
    if not isinstance(text, str):
        raise TypeError(f"PYTORCH_CUDA_ALLOC_CONF must be a str, got {type(text).__name__}")
    tok = _tokens(text)
    kw: dict[str, Any] = {"large_segment_size": _large_segment_size(tok)}
    kw["max_non_split_rounding"] = kw["large_segment_size"]
    divisions = [0] * ROUNDUP_POWER2_INTERVALS
    i = 0
    while i < len(tok):
        key = tok[i]
        if key not in _KNOWN:
            raise _conf_error(f"unknown option {key!r}; known options: {', '.join(_KNOWN)}")
        if tok[i + 1:i + 2] != [":"]:
            raise _conf_error(f"{key} needs a value after ':' (as in {key}:VALUE)")
        i += 2
        if key == "roundup_power2_divisions":
            i = _parse_divisions(tok, i, divisions)
        else:
            _parse_option(key, tok[i] if i < len(tok) else None, kw)
        i += 1
        if i < len(tok):
            if tok[i] != ",":
                raise _conf_error(f"expected ',' after {key}'s value, got {tok[i]!r}")
            i += 1
    kw["roundup_power2_divisions"] = tuple(divisions)
    return AllocatorConf(text=text, **kw)


def _large_segment_size(tok: list[str]) -> int:
    """``large_segment_size_mb`` in bytes (the default 20 MiB if absent); the last one given wins."""
    size = KLARGE_BUFFER
    for i, key in enumerate(tok):
        if key == "large_segment_size_mb" and tok[i + 1:i + 2] == [":"]:
            value = tok[i + 2] if i + 2 < len(tok) else None
            mb = _int(key, value, f"an integer number of MiB > {KMIN_LARGE_ALLOC // MiB}")
            if mb <= KMIN_LARGE_ALLOC // MiB:
                raise _conf_error(f"{key}={mb} is too small; valid: an integer > {KMIN_LARGE_ALLOC // MiB}")
            size = mb * MiB
    return size


def _parse_option(key: str, value: str | None, kw: dict[str, Any]) -> None:
    """One ``key:value`` other than ``roundup_power2_divisions``, checked and stored in ``kw``."""
    least = kw["large_segment_size"] // MiB
    if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
        mb = _int(key, value, f"an integer number of MiB >= {least}")
        if mb < least:
            raise _conf_error(f"{key}={mb} is too small; valid: an integer >= {least} "
                              f"(large_segment_size_mb, {KLARGE_BUFFER // MiB} by default)")
        kw["max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding"] = mb * MiB
    elif key == "large_segment_size_mb":
        pass  # read first (_large_segment_size)
    elif key == "expandable_segments":
        kw["expandable_segments"] = _bool(key, value)
    elif key == "per_process_memory_fraction":
        frac = _float(value)
        if not 0.0 <= frac <= 1.0:
            raise _conf_error(f"{key}={value!r} is not valid; valid: a number in [0.0, 1.0]")
        kw["per_process_memory_fraction"] = frac
    elif key == "garbage_collection_threshold":
        threshold = _float(value)
        if not 0.0 < threshold < 1.0:
            raise _conf_error(f"{key}={value!r} is not valid; valid: a number in (0.0, 1.0), both ends excluded")
        kw["garbage_collection_threshold"] = threshold
    elif key == "backend":
        if value == "cudaMallocAsync":
            raise _conf_error("backend=cudaMallocAsync is another allocator, not modelled; valid: native")
        if value != "native":
            raise _conf_error(f"backend={value!r} is not valid; valid: native (cudaMallocAsync is not modelled)")
    elif key in _NO_EFFECT_BOOL:
        _bool(key, value)
    else:  # _NO_EFFECT_INT
        _int(key, value, "a positive integer")


def _float(value: str | None) -> float:
    try:
        return float(value) if value is not None else float("nan")
    except ValueError:
        return float("nan")


def _parse_divisions(tok: list[str], i: int, divisions: list[int]) -> int:
    """``roundup_power2_divisions``: one power of two for every interval, or a ``[MB:D,...,>:D]`` list
    whose keys are interval starts in MiB (powers of two); returns the index of the last token used."""
    name = "roundup_power2_divisions"
    value = tok[i] if i < len(tok) else None
    if value != "[":
        d = _int(name, value, "a power of two, or a list such as [256:1,512:2,>:4]")
        if not _pow2(d):
            raise _conf_error(f"{name}={d} is not valid; valid: a power of two (1, 2, 4, ...)")
        divisions[:] = [d] * ROUNDUP_POWER2_INTERVALS
        return i
    first, last = True, 0
    i += 1
    while i < len(tok) and tok[i] != "]":
        bound = tok[i]
        if tok[i + 1:i + 2] != [":"]:
            raise _conf_error(f"{name}: expected ':' after {bound!r} in the list")
        d = _int(name, tok[i + 2] if i + 2 < len(tok) else None, "0 or a power of two per interval")
        if d != 0 and not _pow2(d):
            raise _conf_error(f"{name}: divisions {d} for {bound!r} is not valid; valid: 0 or a power of two")
        if bound == ">":
            divisions[last + 1:] = [d] * (ROUNDUP_POWER2_INTERVALS - last - 1)
        else:
            mb = _int(name, bound, "interval starts in MiB that are powers of two, or '>'")
            if not _pow2(mb):
                raise _conf_error(f"{name}: interval {mb} is not valid; valid: a power of two number of MiB or '>'")
            index = min(mb.bit_length() - 1, ROUNDUP_POWER2_INTERVALS - 1)
            if first:
                divisions[:index] = [d] * index
                first = False
            divisions[index] = d
            last = index
        i += 3
        if i < len(tok) and tok[i] == ",":
            i += 1
    if i >= len(tok):
        raise _conf_error(f"{name}: the list has no closing ']'")
    return i


# ---------------------------------------------------------------------------------------------------
# Sizes

def _roundup_power2_next_division(size: int, divisions: int) -> int:
    if _pow2(size):
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    low = size & ~(step - 1)
    return size if low == size else low + step


def round_size(nbytes: int, conf: AllocatorConf = AllocatorConf()) -> int:
    """Bytes the allocator hands out for a request of ``nbytes`` (before any unsplit remainder)."""
    if nbytes < KMIN_BLOCK_SIZE:
        return KMIN_BLOCK_SIZE
    d = conf.divisions(nbytes)
    if d > 1 and nbytes > KMIN_BLOCK_SIZE * d:
        return _roundup_power2_next_division(nbytes, d)
    return -(-nbytes // KMIN_BLOCK_SIZE) * KMIN_BLOCK_SIZE


def allocation_size(size: int, conf: AllocatorConf = AllocatorConf()) -> int:
    """Bytes of the new ``cudaMalloc`` segment for a rounded request of ``size`` bytes."""
    if size <= KSMALL_SIZE:
        return KSMALL_BUFFER
    if size < KMIN_LARGE_ALLOC:
        return conf.large_segment_size
    return -(-size // KROUND_LARGE) * KROUND_LARGE


# ---------------------------------------------------------------------------------------------------
# The model

class SimulatedOOM(Exception):
    """The modelled device refused a request even after freeing the cache (``torch.OutOfMemoryError``)."""

    def __init__(self, request: dict[str, Any]):
        super().__init__(f"simulated CUDA out of memory: {request}")
        self.request = request


class _Segment:
    __slots__ = ("base", "size", "page", "expandable")

    def __init__(self, base: int, size: int, page: int = 0, expandable: bool = False):
        self.base, self.size, self.page, self.expandable = base, size, page, expandable


class _Block:
    __slots__ = ("addr", "size", "allocated", "mapped", "prev", "next", "pool", "seg", "req", "raw", "gc_base")

    def __init__(self, addr: int, size: int, pool: "_Pool", seg: _Segment, mapped: bool = True):
        self.addr, self.size, self.pool, self.seg, self.mapped = addr, size, pool, seg, mapped
        self.allocated = False
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.req = 0  # rounded request, while allocated
        self.raw = 0  # raw request, while allocated
        self.gc_base = 0  # the pool's get_free_block count when the block entered the pool

    def split(self, size: int) -> "_Block":
        """Keep the first ``size`` bytes and return the rest as a new free block linked after this one
        (mapped as this one is); the caller puts it in its pool."""
        rest = _Block(self.addr + size, self.size - size, self.pool, self.seg, mapped=self.mapped)
        rest.prev, rest.next = self, self.next
        if self.next is not None:
            self.next.prev = rest
        self.next = rest
        self.size = size
        return rest


class _Pool:
    """Free mapped blocks ordered by (size, address), as the allocator's ``BlockPool.blocks``; and
    unmapped expandable ranges ordered by address (``BlockPool.unmapped``)."""

    __slots__ = ("small", "keys", "by_addr", "unmapped", "unmapped_by_addr", "expandable", "free_calls")

    def __init__(self, small: bool):
        self.small = small
        self.free_calls = 0  # get_free_block calls while garbage collection is on (block ages)
        self.keys: list[tuple[int, int]] = []
        self.by_addr: dict[int, _Block] = {}
        self.unmapped: list[int] = []
        self.unmapped_by_addr: dict[int, _Block] = {}
        self.expandable: list[_Segment] = []

    def add(self, b: _Block) -> None:
        bisect.insort(self.keys, (b.size, b.addr))
        self.by_addr[b.addr] = b
        b.gc_base = self.free_calls

    def remove(self, b: _Block) -> None:
        i = bisect.bisect_left(self.keys, (b.size, b.addr))
        del self.keys[i]
        del self.by_addr[b.addr]

    def add_unmapped(self, b: _Block) -> None:
        bisect.insort(self.unmapped, b.addr)
        self.unmapped_by_addr[b.addr] = b

    def remove_unmapped(self, b: _Block) -> None:
        del self.unmapped[bisect.bisect_left(self.unmapped, b.addr)]
        del self.unmapped_by_addr[b.addr]


#: virtual address space of an expandable segment when no capacity is given (bytes)
_UNBOUNDED_ADDRESS_SPACE = 1 << 48


class CachingAllocatorModel:
    """One device, one stream: :meth:`malloc` and :meth:`free` as the caching allocator does them.

    Args:
        conf: an :class:`AllocatorConf` or a ``PYTORCH_CUDA_ALLOC_CONF`` string.
        capacity_bytes: device memory the allocator may reserve (the GPU's memory less the CUDA
            context and anything else resident); None = unlimited, no OOM.  A memory fraction
            allows ``fraction x capacity_bytes`` (``allowed``) on top of that.

    Counters (bytes): ``allocated`` (sum of handed-out block sizes, ``memory_allocated()``),
    ``reserved`` (segments and mapped pages, ``memory_reserved()``), ``requested`` (sum of the raw
    request sizes), ``rounded`` (sum of the rounded request sizes), each with its ``peak_*`` since
    the last :meth:`reset_peaks`.
    """

    def __init__(self, conf: AllocatorConf | str = "", capacity_bytes: int | None = None):
        self.conf = parse_alloc_conf(conf) if isinstance(conf, str) else conf
        if capacity_bytes is not None and (not isinstance(capacity_bytes, int) or capacity_bytes <= 0):
            raise ValueError(f"capacity_bytes={capacity_bytes!r} is not valid; valid: a positive int (bytes) or None")
        self.capacity = capacity_bytes
        frac = self.conf.per_process_memory_fraction
        if frac is not None and capacity_bytes is None:
            raise ValueError("per_process_memory_fraction needs capacity_bytes (a fraction of what?)")
        #: torch's allowed_memory_maximum: set only with a memory fraction (bytes)
        self.allowed = None if frac is None else int(frac * capacity_bytes)
        self.limit = capacity_bytes if self.allowed is None else self.allowed  # the tighter bound, reported
        self.gc = self.allowed is not None and self.conf.garbage_collection_threshold > 0.0
        self.small, self.large = _Pool(True), _Pool(False)
        self.live: dict[Hashable, _Block] = {}
        self._next_addr = 1 << 40
        self.allocated = self.reserved = self.requested = self.rounded = 0
        self.segments = 0
        self.num_allocs = self.num_frees = self.num_device_allocs = self.num_device_frees = 0
        self.num_alloc_retries = 0
        self.reset_peaks()

    # -- peaks ---------------------------------------------------------------------------------------
    def reset_peaks(self) -> None:
        """Peaks restart from the current values (``torch.cuda.reset_peak_memory_stats``)."""
        self.peak_allocated = self.allocated
        self.reserved_at_allocated_peak = self.reserved
        self.peak_reserved = self.reserved
        self.allocated_at_reserved_peak = self.allocated
        self.peak_requested = self.requested
        self.peak_rounded = self.rounded
        self.peak_segments = self.segments
        self.max_slack = self.allocated - self.rounded

    def _reserve(self, nbytes: int, new_ranges: int) -> None:
        self.reserved += nbytes
        self.segments += new_ranges
        self.num_device_allocs += 1
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
            self.allocated_at_reserved_peak = self.allocated
        self.peak_segments = max(self.peak_segments, self.segments)

    def _unreserve(self, nbytes: int, ranges: int) -> None:
        self.reserved -= nbytes
        self.segments -= ranges
        self.num_device_frees += 1

    def _fits(self, nbytes: int) -> bool:
        """The device has room for ``nbytes`` more (``cudaMalloc``/``cuMemCreate`` would succeed)."""
        return self.capacity is None or self.reserved + nbytes <= self.capacity

    def _allowed(self, alloc: int) -> bool:
        """Under a memory fraction, a new segment of ``alloc`` bytes keeps reserved within it."""
        return self.allowed is None or self.reserved + alloc <= self.allowed

    # -- public operations ---------------------------------------------------------------------------
    def malloc(self, key: Hashable, nbytes: int) -> None:
        """Allocate ``nbytes`` for ``key`` (a live key may not be reused until freed).

        Raises:
            SimulatedOOM: the device cannot hold it even after the cache is freed.
        """
        if key in self.live:
            raise ValueError(f"allocation id {key!r} is already live; free it first")
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"allocation size {nbytes!r} for id {key!r} is not valid; valid: an int >= 0 (bytes)")
        if nbytes == 0:
            self.live[key] = None  # type: ignore[assignment]  # the allocator hands out a null pointer
            return
        conf = self.conf
        reserved_peak_before = self.peak_reserved
        size = round_size(nbytes, conf)
        pool = self.small if size <= KSMALL_SIZE else self.large
        block = self._get_free_block(pool, size)
        if block is None:
            alloc = allocation_size(size, conf)
            if self.gc:
                self._garbage_collect_cached_blocks()
            block = self._alloc_block(pool, size, alloc)
            if block is None and self._release_available_cached_blocks(pool, size):
                block = self._alloc_block(pool, size, alloc)
            if block is None:
                self._release_cached_blocks()
                self.num_alloc_retries += 1
                block = self._alloc_block(pool, size, alloc)
            if block is None:
                raise SimulatedOOM({"id": key, "bytes": nbytes, "rounded_bytes": size,
                                    "segment_bytes": alloc if not conf.expandable_segments else size,
                                    "allocated_bytes": self.allocated, "reserved_bytes": self.reserved,
                                    "capacity_bytes": self.limit})
        if self._should_split(block, size):
            pool.add(block.split(size))
        block.allocated = True
        block.req = size
        block.raw = nbytes
        self.live[key] = block
        self.num_allocs += 1
        self.allocated += block.size
        self.requested += nbytes
        self.rounded += size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
            self.reserved_at_allocated_peak = self.reserved
        if self.peak_reserved > reserved_peak_before and self.reserved == self.peak_reserved:
            self.allocated_at_reserved_peak = self.allocated  # the segment made for this request
        if self.requested > self.peak_requested:
            self.peak_requested = self.requested
        if self.rounded > self.peak_rounded:
            self.peak_rounded = self.rounded
        if self.allocated - self.rounded > self.max_slack:
            self.max_slack = self.allocated - self.rounded

    def free(self, key: Hashable) -> None:
        """Free the allocation ``key``."""
        try:
            block = self.live.pop(key)
        except KeyError:
            raise ValueError(f"free of id {key!r}, which is not live") from None
        if block is None:
            return
        self.num_frees += 1
        self.allocated -= block.size
        self.rounded -= block.req
        self.requested -= block.raw
        block.allocated = False
        block.req = block.raw = 0
        self._free_block(block)

    def empty_cache(self) -> None:
        """Release every entirely free segment (``torch.cuda.empty_cache()``)."""
        self._release_cached_blocks()

    # -- internals (names follow the allocator's functions) -------------------------------------------
    def _should_split(self, block: _Block, size: int) -> bool:
        remaining = block.size - size
        if block.pool.small or self.conf.expandable_segments:
            return remaining >= KMIN_BLOCK_SIZE
        mss = self.conf.max_split_size
        return (mss is None or size < mss) and remaining > KSMALL_SIZE

    def _get_free_block(self, pool: _Pool, size: int) -> _Block | None:
        if self.gc:
            pool.free_calls += 1
        keys = pool.keys
        i = bisect.bisect_left(keys, (size, -1))
        if i == len(keys):
            return None
        block = pool.by_addr[keys[i][1]]
        if block.seg.expandable:
            # a free block followed by unmapped space counts as that much larger
            while i + 1 < len(keys) and block.seg.expandable:
                nxt = pool.by_addr[keys[i + 1][1]]
                if _expandable_size(nxt) < _expandable_size(block):
                    i, block = i + 1, nxt
                else:
                    break
        mss = self.conf.max_split_size
        if mss is not None:
            if size < mss and block.size >= mss:
                return None
            if size >= mss and block.size >= size + self.conf.max_non_split_rounding:
                return None
        pool.remove(block)
        return block

    def _alloc_block(self, pool: _Pool, size: int, alloc: int) -> _Block | None:
        if not self._allowed(alloc):  # the fraction is checked first, expandable segments included
            return None
        if self.conf.expandable_segments:
            return self._try_allocate_expandable_block(pool, size)
        if not self._fits(alloc):
            return None
        seg = _Segment(self._next_addr, alloc)
        self._next_addr += alloc
        self._reserve(alloc, 1)
        return _Block(seg.base, alloc, pool, seg)

    def _free_block(self, block: _Block) -> None:
        pool = block.pool
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.add(block)

    def _try_merge_blocks(self, dst: _Block, src: _Block | None, pool: _Pool) -> int:
        """Merge free neighbour ``src`` into ``dst`` (``dst`` is in no index while this runs)."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return 0
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _release_available_cached_blocks(self, pool: _Pool, size: int) -> bool:
        mss = self.conf.max_split_size
        if mss is None:
            return False
        target = max(size, mss)
        keys = pool.keys
        i = bisect.bisect_left(keys, (target, -1))
        # only whole cudaMalloc segments can be released (expandable ones are unmapped instead)
        if i < len(keys):
            block = pool.by_addr[keys[i][1]]
            if block.seg.expandable or block.prev is not None or block.next is not None:
                return False
            self._release_block(block)
            return True
        released = 0
        j = len(keys) - 1
        while released < target and j >= 0:
            block = pool.by_addr[keys[j][1]]
            if block.size < mss or block.seg.expandable or block.prev is not None or block.next is not None:
                break
            released += block.size
            self._release_block(block)
            j -= 1
        return released >= target

    def _garbage_collect_cached_blocks(self) -> None:
        """Release old whole free large-pool segments once reserved exceeds the threshold (NOTE [ CUDA
        caching allocator rules ], garbage collection)."""
        threshold = int(self.conf.garbage_collection_threshold * self.allowed)
        if self.reserved <= threshold:
            return
        target, reclaimed = self.reserved - threshold, 0
        pool = self.large

        def whole(b: _Block) -> bool:
            return b.prev is None and b.next is None and not b.seg.expandable

        ages = {addr: pool.free_calls - pool.by_addr[addr].gc_base for _, addr in pool.keys
                if whole(pool.by_addr[addr])}
        total, count = sum(ages.values()), len(ages)
        freed = True
        while reclaimed < target and freed and count > 0:
            average, freed = total / count, False
            for _, addr in list(pool.keys):
                block = pool.by_addr[addr]
                if whole(block) and ages[addr] >= average:
                    freed = True
                    reclaimed += block.size
                    total -= ages.pop(addr)
                    count -= 1
                    self._release_block(block)

    def _release_block(self, block: _Block) -> None:
        block.pool.remove(block)
        self._unreserve(block.size, 1)

    def _release_cached_blocks(self) -> None:
        for pool in (self.large, self.small):
            to_unmap = []
            for _, addr in list(pool.keys):
                block = pool.by_addr[addr]
                if block.seg.expandable:
                    to_unmap.append(block)
                elif block.prev is None and block.next is None:
                    self._release_block(block)
            for block in to_unmap:
                self._unmap_block(block)

    # -- expandable segments --------------------------------------------------------------------------
    def _find_expandable_block(self, pool: _Pool, size: int) -> _Block:
        for addr in pool.unmapped:
            c = pool.unmapped_by_addr[addr]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            room, b = 0, c
            while room < size and b is not None and not b.allocated:
                room += b.size
                b = b.next
            if room >= size:
                return c
        page = KSMALL_BUFFER if pool.small else self.conf.large_segment_size
        space = _UNBOUNDED_ADDRESS_SPACE if self.capacity is None else self.capacity + self.capacity // 8
        space = -(-space // page) * page
        seg = _Segment(self._next_addr, space, page, expandable=True)
        self._next_addr += space
        pool.expandable.append(seg)
        block = _Block(seg.base, space, pool, seg, mapped=False)
        pool.add_unmapped(block)
        return block

    def _map_block(self, block: _Block, size: int) -> bool:
        page = block.seg.page
        mapped = -(-size // page) * page
        if not self._fits(mapped):
            return False
        pool = block.pool
        pool.remove_unmapped(block)
        if mapped < block.size:
            pool.add_unmapped(block.split(mapped))  # the rest stays unmapped
        block.mapped = True
        joins = (block.prev is not None and block.prev.mapped) + (block.next is not None and block.next.mapped)
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.add(block)
        self._reserve(mapped, 1 - joins)
        return True

    def _try_allocate_expandable_block(self, pool: _Pool, size: int) -> _Block | None:
        c = self._find_expandable_block(pool, size)
        if not c.mapped and not self._map_block(c, min(c.size, size)):
            return None
        while c.size < size:
            nxt = c.next
            assert nxt is not None and not nxt.mapped
            if not self._map_block(nxt, min(size - c.size, nxt.size)):
                return None
            c = nxt
        pool.remove(c)
        return c

    def _unmap_block(self, block: _Block) -> None:
        seg, pool = block.seg, block.pool
        page = seg.page
        begin = seg.base + -(-(block.addr - seg.base) // page) * page
        end = seg.base + (block.addr + block.size - seg.base) // page * page
        if begin >= end:
            return
        pool.remove(block)
        before = begin - block.addr
        after = block.addr + block.size - end
        split_range = (before > 0 or (block.prev is not None and block.prev.mapped)) + \
                      (after > 0 or (block.next is not None and block.next.mapped))
        if before > 0:
            b = _Block(block.addr, before, pool, seg)
            b.prev, b.next = block.prev, block
            if block.prev is not None:
                block.prev.next = b
            block.prev = b
            pool.add(b)
        if after > 0:
            a = _Block(end, after, pool, seg)
            a.prev, a.next = block, block.next
            if block.next is not None:
                block.next.prev = a
            block.next = a
            pool.add(a)
        block.addr, block.size, block.mapped = begin, end - begin, False
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.add_unmapped(block)
        self._unreserve(end - begin, 1 - split_range)
        if block.prev is None and block.next is None:  # nothing mapped any more: the segment goes
            pool.remove_unmapped(block)
            pool.expandable.remove(seg)

    # -- reading -------------------------------------------------------------------------------------
    def stats(self, *, would_oom: bool = False, oom_request: dict[str, Any] | None = None) -> "AllocatorStats":
        """The figures now (peaks since the last :meth:`reset_peaks`)."""
        return AllocatorStats(
            peak_allocated_bytes=self.peak_allocated, peak_reserved_bytes=self.peak_reserved,
            allocated_end_bytes=self.allocated, reserved_end_bytes=self.reserved,
            fragmentation_at_peak_bytes=self.reserved_at_allocated_peak - self.peak_allocated,
            fragmentation_at_reserved_peak_bytes=self.peak_reserved - self.allocated_at_reserved_peak,
            reserved_at_allocated_peak_bytes=self.reserved_at_allocated_peak,
            peak_requested_bytes=self.peak_requested, peak_rounded_bytes=self.peak_rounded,
            max_unsplit_slack_bytes=self.max_slack,
            peak_segments=self.peak_segments, segments_end=self.segments,
            would_oom=would_oom, oom_request=oom_request,
            num_allocs=self.num_allocs, num_frees=self.num_frees, num_device_allocs=self.num_device_allocs,
            num_device_frees=self.num_device_frees, num_alloc_retries=self.num_alloc_retries,
            capacity_bytes=self.capacity, conf=self.conf.text,
        )


def _expandable_size(b: _Block) -> int:
    return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)


@dataclass(frozen=True)
class AllocatorStats:
    """What :func:`simulate` predicts (bytes; peaks over the replayed events).

    Attributes:
        peak_allocated_bytes: ``torch.cuda.max_memory_allocated()``: the most bytes in handed-out
            blocks (rounded requests, whole unsplit blocks).
        peak_reserved_bytes: ``torch.cuda.max_memory_reserved()``: the most bytes in segments.
        allocated_end_bytes / reserved_end_bytes: after the last event.
        fragmentation_at_peak_bytes: reserved minus allocated when allocated peaked.
        fragmentation_at_reserved_peak_bytes: reserved minus allocated when reserved peaked.
        reserved_at_allocated_peak_bytes: reserved when allocated peaked.
        peak_requested_bytes: the most bytes requested and live (raw sizes: memlab's CPU figure).
        peak_rounded_bytes: the same with every request rounded (:func:`round_size`).
        max_unsplit_slack_bytes: the most bytes handed out beyond the rounded requests (unsplit
            large or oversize blocks): 0 means peak_allocated_bytes == peak_rounded_bytes.
        peak_segments / segments_end: ``cudaMalloc`` segments, plus contiguous mapped ranges of
            expandable segments (as ``torch.cuda.memory_snapshot()`` lists them).
        would_oom: the device of ``capacity_bytes`` refused a request; the replay stopped there.
        oom_request: that request (id, bytes, rounded, segment bytes, allocated/reserved then).
        num_device_allocs / num_device_frees: ``cudaMalloc``/page maps and ``cudaFree``/unmaps.
        num_alloc_retries: requests that freed the cache and retried.
    """

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    allocated_end_bytes: int
    reserved_end_bytes: int
    fragmentation_at_peak_bytes: int
    fragmentation_at_reserved_peak_bytes: int
    reserved_at_allocated_peak_bytes: int
    peak_requested_bytes: int
    peak_rounded_bytes: int
    max_unsplit_slack_bytes: int
    peak_segments: int
    segments_end: int
    would_oom: bool
    oom_request: dict[str, Any] | None
    num_allocs: int
    num_frees: int
    num_device_allocs: int
    num_device_frees: int
    num_alloc_retries: int
    capacity_bytes: int | None
    conf: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["oom_request"] is not None:
            d["oom_request"] = {k: (v if isinstance(v, (int, float, str, type(None))) else repr(v))
                                for k, v in d["oom_request"].items()}
        return d


def simulate(events: Iterable[tuple[str, Hashable, int | None]], *, capacity_bytes: int | None = None,
             conf: AllocatorConf | str = "") -> AllocatorStats:
    """Replay ``events`` through the caching allocator model (NOTE [ CUDA caching allocator rules ]).

    Args:
        events: ``(kind, id, size)`` in program order: ``("alloc", id, nbytes)``,
            ``("free", id, _)`` (the size of a free is ignored; ids pair them), or
            ``("empty_cache", _, _)`` (``torch.cuda.empty_cache()``).
        capacity_bytes: device memory the allocator may reserve; None = unlimited.
        conf: a ``PYTORCH_CUDA_ALLOC_CONF`` string (or a parsed :class:`AllocatorConf`).

    Returns:
        :class:`AllocatorStats`.  On a simulated OOM, ``would_oom`` is True, ``oom_request`` names
        the request, and the figures are those up to it (a real program stops there too).

    Raises:
        ValueError: a bad ``conf``, an unknown event kind, a negative size, a live id allocated
            again, or a free of an id that is not live.

    Example::

        simulate([("alloc", 1, 3 * 2**20), ("free", 1, None)]).peak_reserved_bytes  # 20 MiB segment
    """
    model = CachingAllocatorModel(conf, capacity_bytes)
    n = -1
    try:
        for n, (kind, key, size) in enumerate(events):
            if kind == "alloc":
                model.malloc(key, size)
            elif kind == "free":
                model.free(key)
            elif kind == "empty_cache":
                model.empty_cache()
            else:
                raise ValueError(f"event {n}: kind {kind!r} is not valid; valid: 'alloc', 'free', 'empty_cache'")
    except SimulatedOOM as oom:
        return model.stats(would_oom=True, oom_request={"event": n, **oom.request})
    return model.stats()


def _speed(n_events: int = 200_000, seed: int = 0) -> float:
    """Replay rate of :func:`simulate` on a random trace (events per second)."""
    rng = random.Random(seed)
    events, live, nid = [], [], 0
    while len(events) < n_events:
        if live and (rng.random() < 0.5 or len(live) > 200):
            events.append(("free", live.pop(rng.randrange(len(live))), None))
        else:
            size = rng.choice((rng.randrange(1, 4096), rng.randrange(1, 1 << 20), rng.randrange(1 << 20, 40 << 20)))
            events.append(("alloc", nid, size))
            live.append(nid)
            nid += 1
    t0 = time.perf_counter()
    simulate(events)
    return len(events) / (time.perf_counter() - t0)


if __name__ == "__main__":
    print(f"memlab.cuda_replay.model replay rate: {_speed():,.0f} events/s")
