"""Predicted CUDA allocated and reserved memory of a step, from its exact CPU allocation trace.

memlab's CPU measurement records every allocation and free of a step in order
(NOTE [ exact CPU allocated bytes ]).  :func:`predict_cuda` replays the first measured iteration of
such a trace through the caching allocator model of :mod:`memlab.cuda_replay.model` and returns what
``torch.cuda.max_memory_allocated()`` / ``max_memory_reserved()`` would be for the same requests on a
GPU, under a ``PYTORCH_CUDA_ALLOC_CONF`` setting.  Every figure it returns is a prediction.

# NOTE [ predicted CUDA memory ]
Replay: the allocations live when the iteration starts (the baseline: parameters, inputs, optimizer
state) are allocated first, in the order they were made, and stay; then the iteration's allocations
and frees run in order, a free paired with its allocation by address.  So the prediction is that of
a step run on a fresh cache holding only the baseline.  ``with_history`` repeats the replay with
everything before the iteration (building the problem, the warm-up step) replayed as well, so the
segments the warm-up left cached are reused, as in a process that never calls ``empty_cache()``:
its ``reserved_peak_above_baseline_bytes`` is the figure memlab's CUDA measurement records
(``max_memory_reserved()`` during the step minus ``memory_reserved()`` before it).
The requests replayed are the trace's *device view* (NOTE [ device view ] in
:mod:`memlab.cuda_replay.device_view`): allocations that stay on the host on a GPU (saved RNG states,
wrapped Python scalars, torch.optim's step counters, ``save_on_cpu``'s copies, ``memlab.host_memory()``
ranges) and a CPU kernel's own scratch (oneDNN reorders) are left out (NOTE [ device tags ]);
``save_on_cpu``'s device copies in backward and calibrated cuDNN workspaces are put in.
``host_bytes`` is the host-tagged memory (bytes as requested, pinned rounding not modelled) live when
the replayed iteration's device allocated peak is reached, baseline included; ``host_peak_bytes``
the most host-tagged bytes live at once during the iteration.  ``status`` is ``uncalibrated`` when a
convolution's signature is missing from the calibration table (NOTE [ calibration table ] in
:mod:`memlab.cuda_replay.calibration`): its cuDNN workspace is then not in the figures, and ``calibration``
gives the error range that family of configurations showed on a real GPU; otherwise ``ok``.
What the CPU trace cannot see, listed under ``extra_terms`` and never added into the prediction:
the CUDA context (outside the allocator, driver- and GPU-dependent), the cuBLAS/cuBLASLt workspaces
(allocated through the caching allocator by the first matmul on a stream and kept).  Also unseen:
kernels whose CUDA implementation allocates differently from the CPU one (temporaries, fused ops,
``out=`` paths) other than calibrated convolutions, other streams.
"""
from __future__ import annotations

from typing import Any, Iterable

from .calibration import CalibrationTable, conv_error_range, default_table
from .device_view import DeviceView, device_view, host_live_at, host_peak, summarise_tags
from .model import CachingAllocatorModel, SimulatedOOM, parse_alloc_conf, round_size

__all__ = ["predict_cuda", "rounded_replay_peak", "extra_terms", "iteration_window",
           "CUBLAS_WORKSPACE_BYTES", "CUBLAS_WORKSPACE_SM90_BYTES", "CUBLASLT_WORKSPACE_BYTES", "BLAS_OPS"]

# Workspace sizes of the pinned torch's defaults (bytes).  Source: aten/src/ATen/cuda/CublasHandlePool.cpp
# (pytorch/pytorch at 26a39059ec580351411f180816c47e2ef5134ae1): parseChosenWorkspaceSize() defaults to
# CUBLAS_WORKSPACE_CONFIG=":4096:2:16:8" (2 x 4096 KiB + 8 x 16 KiB) and to 8 x 4096 KiB on sm90
# (Hopper); parseCUDABlasLtWorkspaceSize() to 1024 KiB.  getNewWorkspace() and
# getNewCUDABlasLtWorkspace() take them from the caching allocator, once per (handle, stream), and keep
# them: on a GPU they count in memory_allocated() from the first matmul on.
#: cuBLAS workspace per (handle, stream), GPUs other than sm90 (bytes)
CUBLAS_WORKSPACE_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
#: cuBLAS workspace per (handle, stream) on sm90 / Hopper (bytes)
CUBLAS_WORKSPACE_SM90_BYTES = 4096 * 1024 * 8
#: cuBLASLt workspace per (handle, stream), unless TORCH_CUBLASLT_UNIFIED_WORKSPACE=1 shares cuBLAS's (bytes)
CUBLASLT_WORKSPACE_BYTES = 1024 * 1024
#: operators of the CPU trace that run on cuBLAS on a GPU (a matmul in the step means the workspaces exist)
BLAS_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::matmul",
                      "aten::linear", "aten::addmv", "aten::mv", "aten::dot", "aten::vdot", "aten::einsum",
                      "aten::tensordot", "aten::_addmm_activation"})


def extra_terms(events: Iterable | None = None, *, context_bytes: int | None = None) -> dict[str, Any]:
    """The device memory a CPU trace cannot see, each as its own term (bytes; never summed into a prediction).

    Args:
        events: the trace; if given, says whether any cuBLAS-backed operator ran (the workspaces exist).
        context_bytes: the CUDA context size if known (measured on the target GPU); None = unknown.
    """
    blas = None
    if events is not None:
        blas = sum(1 for e in events if e.delta_bytes > 0 and any(op in BLAS_OPS for op in e.stack))
    uses_blas = None if blas is None else blas > 0
    return {
        "cuda_context_bytes": {
            "bytes": context_bytes, "in_allocator": False,
            "note": "outside the caching allocator (nvidia-smi and torch.cuda.mem_get_info see it, "
                    "memory_allocated/reserved do not); set by the driver, the GPU and the kernels loaded, "
                    "not by torch: measure it on the target GPU (memlab's CUDA device_used figure)"},
        "cublas_workspace_bytes": {
            "bytes": CUBLAS_WORKSPACE_BYTES, "sm90_bytes": CUBLAS_WORKSPACE_SM90_BYTES, "in_allocator": True,
            "applies": uses_blas,
            "note": "one per (cuBLAS handle, stream), from the first matmul on; default CUBLAS_WORKSPACE_CONFIG "
                    "(torch aten/src/ATen/cuda/CublasHandlePool.cpp)"},
        "cublaslt_workspace_bytes": {
            "bytes": CUBLASLT_WORKSPACE_BYTES, "in_allocator": True, "applies": uses_blas,
            "note": "one per (cuBLASLt handle, stream) when cuBLASLt runs; default CUBLASLT_WORKSPACE_SIZE"},
        "cudnn_workspace_bytes": {
            "bytes": None, "in_allocator": True,
            "note": "per convolution signature, from the calibration table when it has the signature (then "
                    "already in the prediction; see calibration), otherwise not predicted (status uncalibrated)"},
    }


def iteration_window(windows, name: str):
    """The trace window called ``name`` (``"iteration0"``...); ValueError naming the iterations there."""
    for w in windows:
        if w.name == name:
            return w
    names = ", ".join(sorted({w.name for w in windows if w.name.startswith("iteration")})) or "none"
    raise ValueError(f"iteration={name!r} is not a window of the trace; iterations in it: {names}")


class _Replayer:
    """The state of one replay: the allocator model, the live allocations (address -> allocation id),
    the trace's anomalies and when the allocated peak was last raised (ns)."""

    def __init__(self, conf, capacity_bytes: int | None, start_ns: int) -> None:
        self.model = CachingAllocatorModel(conf, capacity_bytes)
        self.live: dict[int, int] = {}   # ptr -> allocation id
        self.anomalies = {"unpaired_frees": 0, "reused_addresses": 0}
        self.next_id = 0
        self.peak_time = start_ns

    def alloc(self, e) -> None:
        if e.address in self.live:  # an address allocated again without its free being seen
            self.anomalies["reused_addresses"] += 1
            self.model.free(self.live.pop(e.address))
        self.live[e.address] = self.next_id
        peak = self.model.peak_allocated
        self.model.malloc(self.next_id, e.delta_bytes)
        if self.model.peak_allocated > peak:
            self.peak_time = e.time_ns
        self.next_id += 1

    def free(self, e) -> None:
        key = self.live.pop(e.address, None)
        if key is None:
            self.anomalies["unpaired_frees"] += 1
        else:
            self.model.free(key)

    def run(self, events: Iterable) -> None:
        """Each event in order: an allocation (``delta_bytes`` > 0) or a free."""
        for e in events:
            self.alloc(e) if e.delta_bytes > 0 else self.free(e)


def _split_at(events, it) -> tuple[list, list]:
    """``(before, inside)``: the events before the window ``it`` starts and those inside it (by time)."""
    before: list = []
    k = 0
    n = len(events)
    while k < n and events[k].time_ns < it.start_ns:
        before.append(events[k])
        k += 1
    inside = []
    while k < n and events[k].time_ns <= it.end_ns:
        inside.append(events[k])
        k += 1
    return before, inside


def _live_at_start(before: Iterable) -> list:
    """The allocations of ``before`` still live at its end, in the order they were made."""
    order: dict[int, Any] = {}
    for e in before:
        if e.delta_bytes > 0:
            order.pop(e.address, None)
            order[e.address] = e
        else:
            order.pop(e.address, None)
    return list(order.values())


def _replay(events, it, conf, capacity_bytes: int | None, history: bool) -> dict[str, Any]:
    """One replay of NOTE [ predicted CUDA memory ]; returns the raw figures."""
    before, inside = _split_at(events, it)
    r = _Replayer(conf, capacity_bytes, it.start_ns)
    model = r.model
    oom = base = None
    try:
        # with history, everything before; else only what is live at the start, in the order it was allocated
        r.run(before if history else _live_at_start(before))
        base = {"allocated": model.allocated, "reserved": model.reserved, "requested": model.requested,
                "rounded": model.rounded, "segments": model.segments}
        model.reset_peaks()
        r.peak_time = it.start_ns
        r.run(inside)
    except SimulatedOOM as exc:
        oom = {k: (v if isinstance(v, (int, float, str, type(None))) else repr(v)) for k, v in exc.request.items()}
    return {"model": model, "base": base, "oom": oom, "anomalies": r.anomalies, "inside": inside,
            "peak_time_ns": r.peak_time}


def predict_cuda(events, windows, *, conf: str = "", capacity_bytes: int | None = None,
                 iteration: str = "iteration0", context_bytes: int | None = None,
                 with_history: bool = True, calibration: CalibrationTable | None = None) -> dict[str, Any]:
    """Predict a step's CUDA memory from its CPU allocation trace (NOTE [ predicted CUDA memory ]).

    Args:
        events, windows: ``AllocationRecorder.result()`` (or :func:`trace_allocations`) of a CPU run
            whose recording began before the problem was built.
        conf: the ``PYTORCH_CUDA_ALLOC_CONF`` to simulate (ValueError if invalid).
        capacity_bytes: device memory the allocator may reserve (the GPU's memory less the CUDA
            context); None = unlimited.  A request it cannot hold sets ``would_oom``.
        iteration: the marker window replayed.
        context_bytes: the CUDA context size, if known, reported under ``extra_terms`` only.
        with_history: also replay everything before the iteration (``with_history`` block).
        calibration: the cuDNN table (NOTE [ calibration table ]); None = the committed one
            (:func:`memlab.cuda_replay.calibration.default_table`), if any.

    Returns:
        A JSON-ready dict of integers in bytes: ``allocated_peak_bytes`` (above the baseline, as the
        CPU figure), ``allocated_peak_total_bytes``, ``allocated_baseline_bytes``,
        ``reserved_peak_bytes`` (total), ``reserved_peak_above_baseline_bytes``,
        ``reserved_baseline_bytes``, ``reserved_end_bytes``, ``fragmentation_at_peak_bytes``
        (reserved − allocated when allocated peaks), ``fragmentation_at_reserved_peak_bytes``,
        ``segments_peak``/``segments_end``, ``would_oom``/``oom_request``, the CPU exact peak of the
        iteration (``cpu_peak_bytes``, every allocation whatever its place), the device requests'
        peak (``requested_peak_bytes``) and its rounded counterpart, ``host_bytes`` /
        ``host_peak_bytes``, ``device_tags`` (what each rule of NOTE [ device tags ] took out of the
        iteration) and ``added_terms`` (what NOTE [ device view ] put in), ``status`` (``ok`` or
        ``uncalibrated``) with ``calibration``, ``conf``/``conf_parsed``, and the separate
        ``extra_terms``.

    Example::

        with AllocationRecorder(dev) as rec:
            problem = technique.build(dev, torch.float32, 0); step, _ = make_step(technique, problem, "train")
            step(); rec.iterations(step, 1)
        predict_cuda(*rec.result(), conf="expandable_segments:True")["reserved_peak_bytes"]
    """
    parsed = parse_alloc_conf(conf)
    if capacity_bytes is not None and (not isinstance(capacity_bytes, int) or capacity_bytes <= 0):
        raise ValueError(f"capacity_bytes={capacity_bytes!r} is not valid; valid: a positive int (bytes) or None")
    it = iteration_window(windows, iteration)
    table = default_table() if calibration is None else calibration
    view = device_view(events, windows, table)
    r = _replay(view.device, it, parsed, capacity_bytes, history=False)
    out = _prediction_head(events, it, view, table, r, conf, parsed, capacity_bytes)
    out["extra_terms"] = extra_terms(r["inside"], context_bytes=context_bytes)
    if r["base"] is None:  # out of memory while placing the baseline
        out.update(allocated_peak_bytes=None, reserved_peak_bytes=None)
        return out
    out.update(_figures(r["model"], r["base"]))
    if with_history:
        out["with_history"] = _with_history(_replay(view.device, it, parsed, capacity_bytes, history=True))
    return out


def _prediction_head(events, it, view: DeviceView, table: CalibrationTable | None, r: dict[str, Any], conf: str,
                     parsed, capacity_bytes: int | None) -> dict[str, Any]:
    """The keys of :func:`predict_cuda`'s answer before its figures: the method, the setting, the OOM
    and anomalies of replay ``r``, the calibration status, the device tags and the host bytes."""
    return {
        "predicted": True,
        "method": "replay of the CPU allocation trace's device view through memlab.cuda_replay.model (PyTorch CUDA "
                  "caching allocator, one stream): the baseline allocated first, then the iteration's "
                  "allocations and frees in order; host-only and CPU-kernel-only allocations left out",
        "iteration": it.name, "conf": conf, "conf_parsed": parsed.to_dict(), "capacity_bytes": capacity_bytes,
        "would_oom": r["oom"] is not None, "oom_request": r["oom"],
        **r["anomalies"], **_calibration_status(view, table),
        "device_tags": summarise_tags(e for e in events if it.start_ns <= e.time_ns <= it.end_ns),
        "added_terms": view.added, "cpu_peak_bytes": _cpu_peak(events, it),
        "host_bytes": host_live_at(view.host, r["peak_time_ns"]),
        "host_peak_bytes": host_peak(view.host, it.start_ns, it.end_ns),
    }


def _with_history(h: dict[str, Any]) -> dict[str, Any] | None:
    """The ``with_history`` block of a prediction from replay ``h`` (everything before the iteration
    replayed too); None when the baseline itself did not fit."""
    if h["base"] is None:
        return None
    return {"note": "everything before the iteration replayed too (build, warm-up): segments cached by the "
                    "warm-up are reused; reserved_peak_above_baseline_bytes is what memlab's CUDA measurement "
                    "records as peak_reserved_bytes",
            "would_oom": h["oom"] is not None, **_figures(h["model"], h["base"])}


def _calibration_status(view: DeviceView, table: CalibrationTable | None) -> dict[str, Any]:
    """``status`` and ``calibration`` of a prediction (NOTE [ calibration table ])."""
    missing = sorted(view.missing)
    info: dict[str, Any] = {"table": table.describe() if table is not None else None,
                            "convolution_calls": view.conv_calls, "signatures": len(view.signatures),
                            "calibrated": len(view.signatures) - len(missing), "missing": len(missing),
                            "missing_examples": [view.signatures[k] for k in missing[:3]]}
    if missing:
        info["family_error"] = conv_error_range()
        info["note"] = ("cuDNN workspace of the missing signatures is not in the figures; family_error is how far "
                        "predictions of convolutional configurations were from a real GPU's measurement "
                        "(percent of measured) before calibration: use it as the margin")
    return {"status": "uncalibrated" if missing else "ok", "calibration": info}


def _cpu_peak(events, it) -> int:
    """The exact CPU peak of the iteration ``it`` above its start (every event, whatever its place)."""
    live = peak = start = 0
    seen = False
    for e in events:
        if e.time_ns > it.end_ns:
            break
        if not seen and e.time_ns >= it.start_ns:
            seen, start, peak = True, live, live
        live += e.delta_bytes
        if seen:
            peak = max(peak, live)
    return peak - start if seen else 0


def _figures(m: CachingAllocatorModel, base: dict[str, int]) -> dict[str, int]:
    return {
        "allocated_peak_bytes": m.peak_allocated - base["allocated"],
        "allocated_peak_total_bytes": m.peak_allocated,
        "allocated_baseline_bytes": base["allocated"],
        "reserved_peak_bytes": m.peak_reserved,
        "reserved_peak_above_baseline_bytes": m.peak_reserved - base["reserved"],
        "reserved_baseline_bytes": base["reserved"],
        "reserved_end_bytes": m.reserved,
        "allocated_end_above_baseline_bytes": m.allocated - base["allocated"],
        "fragmentation_at_peak_bytes": m.reserved_at_allocated_peak - m.peak_allocated,
        "fragmentation_at_reserved_peak_bytes": m.peak_reserved - m.allocated_at_reserved_peak,
        "segments_peak": m.peak_segments,
        "segments_end": m.segments,
        "requested_peak_bytes": m.peak_requested - base["requested"],
        "rounded_peak_bytes": m.peak_rounded - base["rounded"],
        "max_unsplit_slack_bytes": m.max_slack,
    }


def rounded_replay_peak(events, windows, iteration: str = "iteration0", conf: str = "",
                        calibration: CalibrationTable | None = None) -> int:
    """Peak above the iteration's start of the live bytes with every request rounded by
    :func:`memlab.cuda_replay.model.round_size`: the requests the CUDA replay makes (NOTE [ device view ]),
    rounded, without segments or splitting."""
    parsed = parse_alloc_conf(conf)
    it = iteration_window(windows, iteration)
    live: dict[int, int] = {}
    total = 0
    start = peak = None
    table = default_table() if calibration is None else calibration
    for e in device_view(events, windows, table).device:
        if e.time_ns > it.end_ns:
            break
        if start is None and e.time_ns >= it.start_ns:
            start = peak = total
        if e.delta_bytes > 0:
            if e.address in live:
                total -= live.pop(e.address)
            live[e.address] = round_size(e.delta_bytes, parsed)
            total += live[e.address]
        elif e.address in live:
            total -= live.pop(e.address)
        if start is not None:
            peak = max(peak, total)
    if start is None:
        return 0
    return peak - start


# ---------------------------------------------------------------------------------------------------
# Tracing a step here (tests, the chunked-slicing answer)
