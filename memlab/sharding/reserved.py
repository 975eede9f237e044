"""What PyTorch's CUDA caching allocator needs at least for the blocks live at a rank's peak, from its
rounding and segment rules alone (not measured, not a replay); torch-free.

# NOTE [ a reserved floor from the live blocks ]
A sharded row keeps the blocks live at the rank's peak (``at_peak``: size and count), not the whole
trace, so the allocator cannot be replayed on it (:func:`memlab.cuda_replay.model.simulate` needs
every allocation and free in order).  What the rules give from the live blocks alone, with the
default ``PYTORCH_CUDA_ALLOC_CONF`` (NOTE [ CUDA caching allocator rules ] in
:mod:`memlab.cuda_replay.model`): each block takes at least ``round_size`` bytes (a multiple of
512 B, 512 B at least); a block of at most 1 MiB rounded lives in the small pool's 2 MiB segments,
which it never spans, so those take at least ``2 MiB · ceil(Σ small / 2 MiB)`` bytes; the larger
blocks at least their rounded sizes in large-pool segments.  Their sum is a floor on the bytes a
GPU reserves at that moment: cached free blocks, segments split by earlier requests and the large
pool's unsplit remainders (up to 1 MiB per block) come on top, and are not bounded here.  It is
not the device's memory either: the CUDA context and NCCL's own buffers are outside the allocator.
"""
from __future__ import annotations

from typing import Iterable

from ..cuda_replay.model import KSMALL_BUFFER, KSMALL_SIZE, round_size

__all__ = ["live_blocks", "cuda_floor"]


def live_blocks(row: dict) -> list[tuple[int, int]]:
    """``[(bytes per block, count), ...]`` of the blocks a sharded row lists live at its peak."""
    return [(int(key.rsplit(" | ", 1)[1]), count)
            for calls in row.get("at_peak", {}).get("blocks", {}).values() for key, count in calls.items()]


def cuda_floor(blocks: Iterable[tuple[int, int]]) -> dict[str, int]:
    """The least a GPU's caching allocator holds for ``blocks`` (``(bytes, count)`` pairs, all live at
    once; NOTE [ a reserved floor from the live blocks ]): ``allocated_floor_bytes`` (each block
    rounded), ``reserved_floor_bytes`` (the small pool's 2 MiB segments, the large blocks rounded),
    ``small_bytes`` and ``large_bytes`` (rounded, by pool).  ValueError naming a negative size or count."""
    small = large = 0
    for nbytes, count in blocks:
        if not isinstance(nbytes, int) or not isinstance(count, int) or nbytes < 0 or count < 0:
            raise ValueError(f"block ({nbytes!r}, {count!r}) is not valid; valid: (bytes >= 0, count >= 0) ints")
        if nbytes == 0:   # a request of 0 bytes allocates nothing
            continue
        r = round_size(nbytes)
        if r <= KSMALL_SIZE:
            small += r * count
        else:
            large += r * count
    segments = -(-small // KSMALL_BUFFER) * KSMALL_BUFFER
    return {"allocated_floor_bytes": small + large, "reserved_floor_bytes": segments + large,
            "small_bytes": small, "large_bytes": large}
