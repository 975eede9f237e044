"""What ``slice_loop``'s backward allocates: the ``slice_backward`` temporaries of the report.

Two views of one training step:

* :func:`slice_backward_allocations` reads a :class:`~memlab.core.record.Timeline` (from
  ``memlab.timeline("slice_loop", ...)``): every allocation whose operator stack contains
  ``aten::slice_backward`` (its ``aten::zeros``), with its size and the live bytes at that moment.
  A timeline has no addresses, so it cannot say when each of them is freed.
* :func:`slice_backward_lifetimes` traces one step in this process with the profiler's allocation
  addresses, pairs every allocation with its free, and so counts how many ``slice_backward``
  buffers are alive at once and in which phase each dies (one of them becomes ``x.grad``).

# NOTE [ slice_backward accumulation ]
Each chunk's ``SliceBackward0`` returns a zero-filled [n, d] tensor with the chunk's rows copied in.
All of them flow into x's ``AccumulateGrad``; autograd's input buffer keeps the first as the running
sum and adds each later one into it in place, freeing it at once.  So there are as many x-sized
allocations as chunks, but at most two are alive at the same time, and the training peak does not
grow with the number of chunks because of them (it is the saved hiddens that keep it high).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["SliceBackwardAllocations", "SliceBackwardLifetimes", "slice_backward_allocations",
           "slice_backward_lifetimes", "MARKER_OP", "COPY_SLICES_OP"]

MARKER_OP = "aten::slice_backward"
#: the backward of ``y[st:ed] = ...`` (in-place copy into a slice of y) allocates a y-sized gradient too
COPY_SLICES_OP = "torch::autograd::CopySlices"


@dataclass(frozen=True)
class SliceBackwardAllocations:
    """From a timeline: the ``slice_backward`` allocations of one step (bytes).

    Attributes:
        count: number of allocations made under ``aten::slice_backward``.
        sizes: their sizes in bytes, in order.
        live_at_alloc: live bytes above the baseline right after each of them.
        copy_slices_sizes: sizes of the allocations made under ``CopySlices`` (the backward of the
            slice assignment ``y[st:ed] = ...``), which the report's profile did not single out.
        backward_peak_bytes / forward_peak_bytes / peak_bytes: timeline peaks above the baseline.
    """

    technique: str
    params: dict[str, Any]
    count: int
    sizes: tuple[int, ...]
    live_at_alloc: tuple[int, ...]
    copy_slices_sizes: tuple[int, ...]
    forward_peak_bytes: int
    backward_peak_bytes: int
    peak_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sizes": list(self.sizes), "live_at_alloc": list(self.live_at_alloc),
                "copy_slices_sizes": list(self.copy_slices_sizes)}


def slice_backward_allocations(timeline) -> SliceBackwardAllocations:
    """Count the ``aten::slice_backward`` allocations of a :class:`Timeline` (any technique)."""
    sizes, live, copies = [], [], []
    for e in timeline.events:
        if e.delta_bytes > 0 and MARKER_OP in e.stack:
            sizes.append(e.delta_bytes)
            live.append(e.live_bytes)
        elif e.delta_bytes > 0 and COPY_SLICES_OP in e.stack:
            copies.append(e.delta_bytes)

    def peak(phase: str) -> int:
        return max((e.live_bytes for e in timeline.events if e.phase == phase), default=0)

    return SliceBackwardAllocations(
        technique=timeline.technique, params=dict(timeline.params), count=len(sizes), sizes=tuple(sizes),
        live_at_alloc=tuple(live), copy_slices_sizes=tuple(copies), forward_peak_bytes=peak("forward"), backward_peak_bytes=peak("backward"),
        peak_bytes=timeline.peak_bytes)


@dataclass(frozen=True)
class SliceBackwardLifetimes:
    """From an address-paired trace: how long each ``slice_backward`` buffer lives (bytes).

    Attributes:
        count, sizes: as in :class:`SliceBackwardAllocations`.
        max_alive: the most ``slice_backward`` buffers alive at the same moment.
        freed_in_phase: per buffer, the phase it was freed in (``backward``; ``optimizer`` for the
            one autograd turns into ``x.grad``, which the step drops after the SGD step).
        x_bytes: bytes of x (each buffer's expected size).
    """

    technique: str
    params: dict[str, Any]
    count: int
    sizes: tuple[int, ...]
    max_alive: int
    freed_in_phase: tuple[str, ...]
    x_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sizes": list(self.sizes), "freed_in_phase": list(self.freed_in_phase)}


def slice_backward_lifetimes(name: str = "slice_loop", *, seed: int = 0, **params: Any) -> SliceBackwardLifetimes:
    """Trace one CPU float32 training step of technique ``name`` (after a warm-up step) in this process.

    Uses the profiler's allocation events with their addresses (the same events as the exact CPU
    replay of NOTE [ exact CPU allocated bytes ]); a free is paired with the latest allocation at
    its address.
    """
    from memlab.measurement import prepare  # deferred: torch line
    from memlab.measurement.alloc_trace import phase_of, trace_allocations, window  # deferred: torch line
    from memlab.measurement.step import make_step  # deferred: torch line

    technique, dev, dt = prepare(name, params, "cpu", "float32", "train")
    problem = technique.build(dev, dt, seed)
    step, _ = make_step(technique, problem, "train")
    step()
    events, windows = trace_allocations(step, dev, 1)
    it = window(windows, "iteration0")
    allocs = [(e.time_ns, e.address, e.delta_bytes, MARKER_OP in e.stack) for e in events
              if it.start_ns <= e.time_ns <= it.end_ns]
    open_at: dict[int, int] = {}
    lives: list[list] = []  # [alloc_time, free_time | None, size, is_slice_backward]
    for t, ptr, size, is_sb in allocs:
        if size > 0:
            open_at[ptr] = len(lives)
            lives.append([t, None, size, is_sb])
        elif ptr in open_at:
            lives[open_at.pop(ptr)][1] = t
    sb = [lv for lv in lives if lv[3]]
    points = sorted([(lv[0], 1) for lv in sb] + [(lv[1], -1) for lv in sb if lv[1] is not None])
    alive = max_alive = 0
    for _, d in points:
        alive += d
        max_alive = max(max_alive, alive)
    phases = tuple("alive after step" if lv[1] is None else phase_of(lv[1], windows) for lv in sb)
    x = problem.inputs["x"]
    return SliceBackwardLifetimes(technique=technique.name, params=dict(technique.config), count=len(sb),
                                  sizes=tuple(lv[2] for lv in sb), max_alive=max_alive, freed_in_phase=phases,
                                  x_bytes=x.numel() * x.element_size())
