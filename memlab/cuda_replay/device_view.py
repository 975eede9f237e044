"""The requests a step would make of the CUDA caching allocator, derived from its tagged CPU trace.

# NOTE [ device view ]
The CUDA replay (NOTE [ predicted CUDA memory ]) does not replay the CPU trace as it is.  From the
trace's events (each tagged with its place, NOTE [ device tags ]) and windows it builds:

* the device events: every ``device`` allocation and free, in time order; ``host`` and ``cpu_only``
  ones are left out;
* offloading (``memlab::offload:ADDR`` markers of ``save_on_cpu``'s pack hook): the device block at
  ADDR is freed at the marker and its later free in the trace dropped; from the marker to that free
  its bytes count as host memory;
* device copies (``memlab::device_copy:NBYTES``, ``save_on_cpu``'s unpack): a device block of NBYTES
  from the marker until the backward node that unpacked it returns;
* convolutions (``conv`` windows): a call whose signature the calibration table has
  (NOTE [ calibration table ]) gets its ``workspace_bytes`` as a device block from 1 ns before the
  operator returns until it returns, and the device blocks its CPU kernel allocated and freed inside
  it are dropped (their CUDA counterparts are in the measured workspace).  A call the table lacks
  keeps the CPU kernel's nested temporaries (oneDNN's own scratch is already ``cpu_only``) and
  counts as uncalibrated.

Synthetic blocks have negative addresses, so they never pair with a traced one.
"""
from __future__ import annotations

import bisect
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..core.record import AllocEvent, Window
from .calibration import CalibrationTable, signature_key

__all__ = ["DeviceView", "device_view", "host_live_at", "host_peak", "summarise_tags"]


@dataclass
class DeviceView:
    """NOTE [ device view ]; events in time order, ties with the free first.

    Attributes:
        device: what the CUDA replay allocates and frees.
        host: host allocations and frees (tagged ``host``, and offloaded blocks from their marker).
        conv_calls: convolution calls in the trace; ``signatures``: their distinct signatures
            (key -> signature); ``missing``: keys the table lacks.
        added: synthetic terms, ``{"device_copy"|"cudnn_workspace"|"offload": {"count", "bytes"}}``.
    """

    device: list[AllocEvent]
    host: list[AllocEvent]
    conv_calls: int = 0
    signatures: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    added: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, term: str, nbytes: int) -> None:
        s = self.added.setdefault(term, {"count": 0, "bytes": 0})
        s["count"] += 1
        s["bytes"] += nbytes


def _synthetic(view: DeviceView, start: int, end: int, nbytes: int, op: str, ptr: int, term: str) -> None:
    view.device.append(AllocEvent(start, nbytes, op, (op,), ptr, rule=term))
    view.device.append(AllocEvent(end, -nbytes, op, (op,), ptr, rule=term))
    view.add(term, nbytes)


def _offload(view: DeviceView, windows: list[Window]) -> None:
    """Free offloaded device blocks at their marker; their bytes are host memory from there."""
    marks = sorted((w.start_ns, int(w.name.partition(":")[2])) for w in windows
                   if w.name.startswith("offload:") and w.name.partition(":")[2].isdigit())
    if not marks:
        return
    out: list[AllocEvent] = []
    live: dict[int, AllocEvent] = {}
    gone: set[int] = set()   # ptrs whose device block was offloaded (their traced free is dropped)
    k = 0
    for e in view.device:
        while k < len(marks) and marks[k][0] < e.time_ns:
            t, ptr = marks[k]
            k += 1
            block = live.pop(ptr, None)
            if block is not None:
                out.append(AllocEvent(t, -block.delta_bytes, "memlab::offload", ("memlab::offload",), ptr,
                                      rule="offload"))
                view.host.append(AllocEvent(t, block.delta_bytes, "memlab::offload", (), ptr, "host", "offload"))
                view.add("offload", block.delta_bytes)
                gone.add(ptr)
        if e.delta_bytes > 0:
            live[e.address] = e
            gone.discard(e.address)
        elif e.address in gone:
            gone.discard(e.address)
            view.host.append(dataclasses.replace(e, place="host", rule="offload"))
            continue
        else:
            live.pop(e.address, None)
        out.append(e)
    view.device = out


def _conv(view: DeviceView, windows: list[Window], table: CalibrationTable | None, next_ptr: int) -> int:
    """Look up every convolution call; calibrated ones get their workspace and lose their temporaries."""
    drop: set[int] = set()   # ids of events (alloc and free) of dropped temporaries
    free_of = _pair_frees(view.device)
    times = [e.time_ns for e in view.device]
    for w in windows:
        if w.name != "conv":
            continue
        view.conv_calls += 1
        sig = json.loads(w.detail) if w.detail else {}
        if not sig:
            sig = {"incomplete": True, "note": "signature unknown: not called through torch.nn.functional"}
        key = signature_key(sig)
        view.signatures.setdefault(key, sig)
        entry = table.lookup(sig) if table is not None else None
        if entry is None:
            view.missing.add(key)
            continue
        lo, hi = bisect.bisect_left(times, w.start_ns), bisect.bisect_right(times, w.end_ns)
        for e in view.device[lo:hi]:
            if e.delta_bytes > 0 and e.address >= 0:
                free = free_of.get(id(e))
                if free is not None and free.time_ns <= w.end_ns:
                    drop.update((id(e), id(free)))
        if entry["workspace_bytes"] > 0:
            next_ptr -= 1
            _synthetic(view, w.end_ns - 1, w.end_ns, entry["workspace_bytes"], "cudnn::workspace", next_ptr,
                       "cudnn_workspace")
    if drop:
        view.device = [e for e in view.device if id(e) not in drop]
    return next_ptr


def _pair_frees(events: list[AllocEvent]) -> dict[int, AllocEvent]:
    """``id(allocation) -> its free`` (by address, in time order)."""
    live: dict[int, AllocEvent] = {}
    out: dict[int, AllocEvent] = {}
    for e in events:
        if e.delta_bytes > 0:
            live[e.address] = e
        else:
            a = live.pop(e.address, None)
            if a is not None:
                out[id(a)] = e
    return out


def device_view(events: list[AllocEvent], windows: list[Window], table: CalibrationTable | None = None
                ) -> DeviceView:
    """NOTE [ device view ] of a CPU trace (``AllocationRecorder.result()``)."""
    view = DeviceView(device=[e for e in events if e.place == "device"],
                      host=[e for e in events if e.place == "host"])
    _offload(view, windows)
    next_ptr = _conv(view, windows, table, 0)
    for w in windows:
        kind, _, arg = w.name.partition(":")
        if kind == "device_copy" and arg.isdigit() and int(arg) > 0:
            next_ptr -= 1
            _synthetic(view, w.start_ns, w.end_ns, int(arg), "memlab::device_copy", next_ptr, "device_copy")
    order = (lambda e: (e.time_ns, e.delta_bytes))
    view.device.sort(key=order)
    view.host.sort(key=order)
    return view


def host_live_at(host: list[AllocEvent], time_ns: int) -> int:
    """Host bytes live (as requested) just after ``time_ns``."""
    live: dict[int, int] = {}
    for e in host:
        if e.time_ns > time_ns:
            break
        if e.delta_bytes > 0:
            live[e.address] = e.delta_bytes
        else:
            live.pop(e.address, None)
    return sum(live.values())


def host_peak(host: list[AllocEvent], start_ns: int, end_ns: int) -> int:
    """The most host bytes live at once from ``start_ns`` to ``end_ns`` (those live before included)."""
    live: dict[int, int] = {}
    total, peak = 0, None
    for e in host:
        if e.time_ns > end_ns:
            break
        if peak is None and e.time_ns >= start_ns:
            peak = total
        if e.delta_bytes > 0:
            total += e.delta_bytes - live.get(e.address, 0)
            live[e.address] = e.delta_bytes
        else:
            total -= live.pop(e.address, 0)
        if peak is not None:
            peak = max(peak, total)
    return total if peak is None else peak


def summarise_tags(events: Iterable) -> dict[str, dict[str, Any]]:
    """``{rule: {"place", "allocations", "bytes"}}`` over the allocations of ``events`` that a rule
    tagged (bytes as requested)."""
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.delta_bytes > 0 and e.rule:
            s = out.setdefault(e.rule, {"place": e.place, "allocations": 0, "bytes": 0})
            s["allocations"] += 1
            s["bytes"] += e.delta_bytes
    return out
