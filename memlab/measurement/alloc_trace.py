"""Exact allocated-bytes traces from the PyTorch profiler's allocation events.

# NOTE [ exact CPU allocated bytes ]
The CPU has no caching allocator and no ``max_memory_allocated``.  The profiler with
``profile_memory=True`` records one event per allocation and per free made through c10's allocator,
with its exact size (frees negative).  Replaying these deltas in time order gives the bytes live at
every point, exactly and reproducibly (the same bytes in every fresh process).  It does not change
what is measured: unlike a ``TorchDispatchMode`` tracker, it leaves autograd's in-place gradient
accumulation alone and sees temporaries allocated inside kernels (``slice_backward``'s zeros).
Limits: the running totals the profiler reports are process-wide and only move while profiling, so
memlab sums deltas from the first event instead; allocations made on threads the profiler does not
follow would be invisible (none are made by the ops memlab measures).
Frees of storage allocated *before* the profiler started are not reported at all: c10's CPU memory
reporter learns a block's size only while memory profiling is on, and drops the free of a block it
never saw.  A technique that frees a pre-existing tensor's storage (MemCNN frees the caller's input
in forward, RevLib likewise) would then look as if that storage were still live, inflating the
first iteration's peak and every ``after`` figure by its size.  So a measurement starts recording
*before* it builds the problem (:class:`AllocationRecorder`): every storage a step can free was
allocated inside the session, and its free is seen.
The same replay works for CUDA events and gives the timelines on both devices.
Each allocation of a CPU trace also carries where it would live on a GPU (``place``: NOTE [ device
tags ] in :mod:`memlab.measurement.host_tags`); the CPU figures sum every event whatever its place.
A CPU recording also wraps ``torch.nn.functional``'s convolutions and ``save_on_cpu``'s hooks with
markers (:mod:`memlab.measurement.conv_marks`, :func:`memlab.measurement.host_marks.marked_offloading`;
no tensor's lifetime changes), so that each convolution operator call becomes a ``conv`` window
whose ``detail`` is its signature (JSON; NOTE [ calibration table ]).
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
from dataclasses import dataclass
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from ..cuda_replay.calibration import CONV_OPS
from ..core.record import AllocEvent, Window
from ..core.setting import DEFAULTS
from . import host_tags
from .conv_marks import CONV_MARK, marked_convolutions
from .host_marks import marked_offloading
from .step import make_step

# NOTE [ the profiler's native log ]
# Kineto, behind torch.profiler, writes "USDT: ... profiler_start" and "... profiler_stop" to stderr
# for every session, at its highest severity (USDT, 5): one `memlab advise --model` printed over a
# hundred such lines.  KINETO_LOG_LEVEL=6 is above every level.  Kineto reads it when the first
# session starts, after this module is imported (so torch may be imported first); a level the user
# set is kept.  tests/test_cli_fast.py counts the lines; evidence: docs/evidence/code-notes-cli.md.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

__all__ = ["AllocEvent", "Window", "AllocationRecorder", "trace_allocations", "IterationStats", "iteration_stats",
           "window", "phase_of", "trace_step"]

_MARKER = "memlab::"


class AllocationRecorder:
    """A profiler session with allocation events, opened before the tensors a step may free exist.

    Usage::

        with AllocationRecorder(device) as rec:
            problem = technique.build(...)      # allocated inside the session: frees are seen
            step()                              # warm-up, unmarked
            rec.iterations(step, 3)             # marked memlab::iteration0..2
        events, windows = rec.result()

    Only the marked iterations count in :func:`iteration_stats`; events before them set the live
    bytes those iterations start from (see NOTE [ exact CPU allocated bytes ]).
    """

    def __init__(self, device: torch.device):
        self.device = device
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(activities=activities, profile_memory=True, record_shapes=False, with_stack=False)
        self._marks = contextlib.ExitStack()
        self._done = False

    def __enter__(self) -> "AllocationRecorder":
        if self.device.type == "cpu":   # markers for the CUDA prediction (module docstring)
            self._marks.enter_context(marked_offloading())
            self._marks.enter_context(marked_convolutions())
        self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._prof.__exit__(*exc)
        finally:
            self._marks.close()
        self._done = True

    def iterations(self, fn: Callable[[], None], n: int) -> None:
        """Run ``fn`` ``n`` times, each inside a ``memlab::iterationK`` marker."""
        for i in range(n):
            with record_function(f"{_MARKER}iteration{i}"):
                fn()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)

    def result(self):
        """``(events, windows)`` as :func:`trace_allocations` returns them; after the ``with`` block."""
        if not self._done:
            raise RuntimeError("AllocationRecorder.result() is available after its `with` block ends")
        return _collect(self._prof, self.device)


def trace_allocations(fn: Callable[[], None], device: torch.device, iterations: int = 1):
    """Run ``fn`` ``iterations`` times under the profiler.

    Frees of storage that existed before this call are not seen (see the NOTE): use
    :class:`AllocationRecorder` around the setup when ``fn`` may free such storage.

    Returns:
        ``(events, windows)``: allocation events on ``device``'s type sorted by time, and the
        ``memlab::iterationK`` / phase marker windows (name, start, end in ns).
    """
    with AllocationRecorder(device) as rec:
        rec.iterations(fn, iterations)
    return rec.result()


def _collect(prof, device: torch.device):
    events: list[AllocEvent] = []
    windows: list[Window] = []
    convs = []
    stack_nodes = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack_nodes:
        node = stack_nodes.pop()
        stack_nodes.extend(node.children)
        if node.tag.name == "Allocation":
            ef = node.extra_fields
            if ef.device.type != device.type:
                continue
            names, ends, marks = _ancestors(node)
            events.append(AllocEvent(node.start_time_ns, int(ef.alloc_size), names[-1] if names else "?",
                                     tuple(names), int(ef.ptr), marks=tuple(marks), stack_end_ns=tuple(ends)))
        elif node.name in CONV_OPS:
            convs.append(node)
        elif node.name.startswith(_MARKER) and not node.name.startswith(_MARKER + CONV_MARK):
            windows.append(_marker_window(node))
    events.sort(key=lambda e: (e.time_ns, e.delta_bytes))  # an exact tie: the free first
    if device.type == "cpu":
        events = host_tags.tag_events(events)
        windows.extend(_conv_windows(convs))
    windows.sort(key=lambda w: w.start_ns)
    return events, windows


def _ancestors(node) -> tuple[list[str], list[int], list[str]]:
    """The enclosing ranges' names and end times (outermost first, memlab markers left out), and
    the memlab markers' names (``memlab::`` removed)."""
    names, ends, marks = [], [], []
    p = node.parent
    while p is not None:
        if p.name.startswith(_MARKER):
            if not p.name.startswith(_MARKER + CONV_MARK):   # a signature: not a mark
                marks.append(p.name[len(_MARKER):])
        else:
            names.append(p.name)
            ends.append(p.end_time_ns)
        p = p.parent
    names.reverse()
    ends.reverse()
    marks.reverse()
    return names, ends, marks


def _marker_window(node) -> Window:
    """A marker's window; a ``device_copy`` marker's lasts until the backward node around it returns
    (the unpacked copy lives that long; NOTE [ device tags ])."""
    name = node.name[len(_MARKER):]
    end = node.end_time_ns
    if name.startswith("device_copy:"):
        p = node.parent
        while p is not None and not p.name.startswith("autograd::engine::evaluate_function"):
            p = p.parent
        scope = p if p is not None else node.parent
        end = scope.end_time_ns if scope is not None else end
    return Window(name, node.start_time_ns, end)


def _conv_windows(nodes) -> list[Window]:
    """One ``conv`` window per convolution operator call, its signature as ``detail`` (JSON; ``{}``
    when unknown): a forward's from the ``memlab::conv:`` range around it, a backward's from its
    forward, found by autograd's sequence number on the ``ConvolutionBackward`` node above it."""
    backward_of: dict[int, dict] = {}
    forwards, backwards = [], []
    for node in nodes:
        if node.name == "aten::convolution":
            marker = _enclosing(node, lambda p: p.name.startswith(_MARKER + CONV_MARK))
            sigs = json.loads(marker.name[len(_MARKER + CONV_MARK):]) if marker is not None else {}
            forwards.append(Window("conv", node.start_time_ns, node.end_time_ns,
                                   json.dumps(sigs.get("forward") or {}, sort_keys=True)))
            seq = getattr(node.extra_fields, "sequence_number", -1)
            if sigs.get("backward") and seq >= 0:
                backward_of[seq] = sigs["backward"]
        else:
            backwards.append(node)
    for node in backwards:
        grad_fn = _enclosing(node, lambda p: getattr(p.extra_fields, "sequence_number", -1) >= 0)
        sig = backward_of.get(grad_fn.extra_fields.sequence_number) if grad_fn is not None else None
        forwards.append(Window("conv", node.start_time_ns, node.end_time_ns, json.dumps(sig or {}, sort_keys=True)))
    return forwards


def _enclosing(node, test):
    """The nearest enclosing range of ``node`` that passes ``test``, or None."""
    p = node.parent
    while p is not None and not test(p):
        p = p.parent
    return p


@dataclass(frozen=True)
class IterationStats:
    """Per iteration: peak live bytes above that iteration's start, live bytes at its end above the
    first iteration's start (events before the first iteration set the level it starts from)."""

    peaks: tuple[int, ...]
    after: tuple[int, ...]


def iteration_stats(events: list[AllocEvent], windows: list[Window]) -> IterationStats:
    iters = [w for w in windows if w.name.startswith("iteration")]
    peaks, after = [], []
    live = 0
    first = None
    k = 0
    for w in iters:
        while k < len(events) and events[k].time_ns < w.start_ns:
            live += events[k].delta_bytes
            k += 1
        start = live
        first = start if first is None else first
        peak = live
        while k < len(events) and events[k].time_ns <= w.end_ns:
            live += events[k].delta_bytes
            peak = max(peak, live)
            k += 1
        peaks.append(peak - start)
        after.append(live - first)
    return IterationStats(tuple(peaks), tuple(after))


def window(windows: list[Window], name: str) -> Window:
    """The marker window called ``name`` (``iteration0``, ``forward``...); KeyError if absent."""
    for w in windows:
        if w.name == name:
            return w
    raise KeyError(f"no memlab::{name} window in the trace")


def phase_of(time_ns: int, windows: list[Window]) -> str:
    for w in windows:
        if w.name in ("forward", "backward", "optimizer") and w.start_ns <= time_ns <= w.end_ns:
            return w.name
    return "other"


def trace_step(technique, *, mode: str = DEFAULTS.mode, dtype: str = DEFAULTS.dtype, seed: int = DEFAULTS.seed,
               optimizer: str = DEFAULTS.optimizer, loss: str = DEFAULTS.loss, iterations: int = 1):
    """Trace ``technique`` (an instance) on CPU as memlab's measurement does: recording opened before
    the problem is built, one warm-up step, then ``iterations`` marked steps.

    Returns:
        ``(events, windows)`` for :func:`memlab.cuda_replay.prediction.predict_cuda`.
    """
    dev = torch.device("cpu")
    dt = getattr(torch, dtype)
    technique.check_available(dev)
    with AllocationRecorder(dev) as rec:
        problem = technique.build(dev, dt, seed)
        if loss != DEFAULTS.loss:
            problem.grad_output = None
        step, _ = make_step(technique, problem, mode, optimizer=optimizer, loss=loss)
        step()
        gc.collect()
        rec.iterations(step, iterations)
    events, windows = rec.result()
    del problem, step
    gc.collect()
    return events, windows
