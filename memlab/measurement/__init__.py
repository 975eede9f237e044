"""Measurement: peak allocated, peak reserved/resident, step time and FLOPs of any technique.

``measure`` and ``timeline`` validate their arguments here, in the caller's process (bad input is a
ValueError naming the value), then run in a fresh subprocess unless ``isolate=False``.
"""
from __future__ import annotations

import os

from typing import Any

from ..registry import get_technique, load_plugin
from ..technique import Technique
from .devices import parse_device, parse_dtype
from .inprocess import check_threads, measure_in_process, memory_method, skeleton, timeline_in_process
from ..record import MODES, Measurement, Timeline, TimelineEvent, fmt_mib
from .runner import WorkerFailed, run_in_subprocess
from .step import LOSSES, OPTIMIZERS, check_choice

__all__ = ["measure", "timeline", "Measurement", "Timeline", "TimelineEvent", "fmt_mib", "prepare"]


def prepare(name: str | type[Technique], params: dict[str, Any], device: str, dtype: str, mode: str,
            plugins=()) -> tuple[Technique, Any, Any]:
    """Validate everything up front: returns ``(technique instance, torch.device, torch.dtype)``.

    Raises:
        ValueError: unknown technique, parameter, value out of range, device, dtype or mode.
        TechniqueUnavailable: the technique cannot run on that device.
    """
    for p in plugins:
        load_plugin(p)
    cls = name if isinstance(name, type) and issubclass(name, Technique) else get_technique(name)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not valid; valid modes: {', '.join(MODES)}")
    dev, dt = parse_device(device), parse_dtype(dtype)
    technique = cls(**params)
    technique.check_available(dev)
    return technique, dev, dt


def _isolation(isolate: bool | str) -> str:
    return "auto" if isolate is True else isolate


def _check_isolation(isolate: bool | str) -> None:
    from .runner import ISOLATION_MODES

    if not (isinstance(isolate, bool) or isolate in ISOLATION_MODES):
        raise ValueError(f"isolate={isolate!r} is not valid; valid: True, False, "
                         f"{', '.join(repr(m) for m in ISOLATION_MODES)}")


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} is not valid: expected an integer >= 1")


def measure(name: str | type[Technique], *, device: str = "cpu", dtype: str = "float32", mode: str = "train",
            iterations: int = 5, repeats: int = 5, seed: int = 0, check: bool = True, isolate: bool | str = True,
            timeout: float = 900.0, time_budget: float = 2.0, plugins=(), optimizer: str = "sgd", loss: str = "given",
            threads: int | None = None, reference_cache: str | None = None, **params: Any) -> Measurement:
    """Measure one technique on one configuration.

    Args:
        name: registered technique name (or the class).
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``float32``, ``float64``, ``bfloat16`` or ``float16``.
        mode: ``train`` (forward, backward, the optimizer's step) or ``infer`` (forward under no_grad).
        iterations: allocation-measured steps; ``allocated_after_step_bytes`` has one entry each.
        repeats: the fewest timed steps; ``step_time_s`` is their median (seconds).  More are taken,
            interleaved with the family baseline's steps, until the interquartile range is within 5%
            of the median or ``time_budget`` seconds are spent (NOTE [ timed phase ]).
        check: compare outputs/gradients with the workload reference first.
        isolate: ``True``/``"auto"`` (default): a child forked from a warm server for CPU, a fresh
            spawned process for CUDA; ``"spawn"``: always a fresh process; ``"fork"``: always the
            server; ``False``: in this process (when the caller already is one, as asv is).
        timeout: seconds before an isolated run is abandoned (status ``error``).
        time_budget: seconds of timing (on the relative time's clock: thread CPU time at one thread) after which
            sampling stops, once ``repeats`` steps are taken (NOTE [ when to stop timing ]).
        plugins: plug-in files to load first.
        optimizer: the training step's optimizer: ``sgd`` (default), ``sgd_momentum``, ``adam`` or
            ``adamw`` (its state is the ``optimizer_state`` category); a technique may supply its own.
        loss: ``given`` (default: ``output.backward(grad_output)``, the upstream gradient
            preallocated in the baseline) or ``mse`` (``mse_loss(output.float(), zeros)``: the upstream
            gradient is allocated inside the step, as in a user's loop).
        threads: torch's intra-op threads for the memory phase (``None``: the process's default,
            one per core) and for the timed phase (``None``: one thread, which keeps
            ``relative_step_time`` load-robust: NOTE [ CPU time and load ] in
            :mod:`memlab.measurement.timing`).
        reference_cache: a folder shared by the measurements of one sweep, where the workload
            reference's output and gradients are computed once per workload configuration
            (:mod:`memlab.measurement.reference_cache`; ``memlab sweep`` makes one per run).
        **params: workload and technique parameters (``chunk_size=2500``, ``batch=4096``...).

    Returns:
        a :class:`Measurement`; failures inside the run are rows with status ``oom`` or ``error``.

    Example:
        >>> m = memlab.measure("slice_loop", n=10000, chunk_size=2500)   # doctest: +SKIP
        >>> m.peak_allocated_bytes                                        # bytes above baseline
    """
    _positive("iterations", iterations)
    _positive("repeats", repeats)
    _check_isolation(isolate)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_choice("loss", loss, LOSSES)
    check_threads(threads)
    if not isinstance(time_budget, (int, float)) or isinstance(time_budget, bool) or not 0 <= time_budget <= 3600:
        raise ValueError(f"time_budget={time_budget!r} is not valid: expected seconds between 0 and 3600")
    technique, dev, dt = prepare(name, params, device, dtype, mode, plugins)
    if not isolate:
        return measure_in_process(technique, dev, dt, mode=mode, iterations=iterations, repeats=repeats,
                                  seed=seed, check=check, time_budget_s=float(time_budget), optimizer=optimizer,
                                  loss=loss, threads=threads, reference_cache=reference_cache)
    request = {"kind": "measure", "technique": technique.name, "params": technique.config, "device": device,
               "dtype": dtype, "mode": mode, "iterations": iterations, "repeats": repeats, "seed": seed,
               "check": check, "time_budget_s": float(time_budget),
               "optimizer": optimizer, "loss": loss, "threads": threads,
               "reference_cache": None if reference_cache is None else os.fspath(reference_cache)}
    try:
        measured = Measurement.from_dict(run_in_subprocess(type(technique), request, timeout, _isolation(isolate)))
    except (WorkerFailed, ValueError) as exc:
        return skeleton(technique, str(dev), dtype, mode, optimizer=optimizer, loss=loss).replace(
            status=getattr(exc, "status", "error"), error=str(exc)[:500], memory_method=memory_method(dev))
    if measured.status != "ok":
        return measured
    # the timed phase in a child of its own, under the timing heap (NOTE [ timed phase ])
    timing = {"kind": "time", "measured": measured.to_dict(), **{k: request[k] for k in (
        "technique", "params", "device", "dtype", "repeats", "seed", "time_budget_s", "threads", "check")}}
    try:
        return Measurement.from_dict(run_in_subprocess(type(technique), timing, timeout, _isolation(isolate)))
    except (WorkerFailed, ValueError) as exc:
        return measured.replace(status=getattr(exc, "status", "error"), error=f"timed phase: {exc}"[:500])


def timeline(name: str | type[Technique], *, device: str = "cpu", dtype: str = "float32", mode: str = "train",
             seed: int = 0, isolate: bool | str = True, timeout: float = 900.0, plugins=(), **params: Any) -> Timeline:
    """Allocated bytes over one step as a sequence of events ``(op, stack, phase, delta, live)``.

    ``live_bytes`` is above the step's baseline.  Raises :class:`WorkerFailed` when the isolated
    run crashes (a timeline has no error row).
    """
    technique, dev, dt = prepare(name, params, device, dtype, mode, plugins)
    if not isolate:
        return timeline_in_process(technique, dev, dt, mode=mode, seed=seed)
    request = {"kind": "timeline", "technique": technique.name, "params": technique.config, "device": device,
               "dtype": dtype, "mode": mode, "seed": seed}
    return Timeline.from_dict(run_in_subprocess(type(technique), request, timeout, _isolation(isolate)))
