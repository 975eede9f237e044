"""Measurement: peak allocated, peak reserved/resident, step time and FLOPs of any technique.

``measure`` and ``timeline`` validate their arguments here, in the caller's process (bad input is a
ValueError naming the value), then run in a fresh subprocess unless ``isolate=False``.
"""
from __future__ import annotations

import os
import time
from typing import Any

from ..registry import get_technique, load_plugin
from ..technique import Technique
from .devices import parse_device, parse_dtype
from .inprocess import measure_in_process, memory_method, skeleton, timeline_in_process
from ..core.record import MODES, Measurement, Timeline, TimelineEvent, fmt_mib
from ..core.setting import DEFAULTS, Point, Setting
from .micro_batches import check_accumulate
from .resident import timing_heap_choice
from .runner import ISOLATION_MODES, WorkerFailed, run_in_subprocess, take_server_start_s

__all__ = ["measure", "timeline", "Measurement", "Timeline", "TimelineEvent", "fmt_mib", "prepare", "as_point", "Point",
           "Setting"]


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
    if not (isinstance(isolate, bool) or isolate in ISOLATION_MODES):
        raise ValueError(f"isolate={isolate!r} is not valid; valid: True, False, "
                         f"{', '.join(repr(m) for m in ISOLATION_MODES)}")


def _request(technique: Technique, setting: Setting, reference_cache) -> dict[str, Any]:
    """The worker's ``measure`` request: the technique, its parameters and the setting as JSON
    (:meth:`Setting.to_json`); ``device`` repeats the setting's for the runner, which spawns rather
    than forks for CUDA."""
    return {"kind": "measure", "technique": technique.name, "params": technique.config,
            "setting": setting.to_json(), "device": setting.device,
            "reference_cache": None if reference_cache is None else os.fspath(reference_cache)}


def _check_gradient_options(technique: Technique, s: Setting) -> None:
    """The gradient options apply to a training step, and ``accumulate`` must split the batch
    (NOTE [ micro-batches of a problem ] in :mod:`memlab.measurement.micro_batches`)."""
    if s.mode == "infer" and (s.accumulate, s.grads) != (DEFAULTS.accumulate, DEFAULTS.grads):
        raise ValueError(f"accumulate={s.accumulate} and grads={s.grads!r} are options of a training step; "
                         f"mode='infer' takes neither (give mode='train', or leave them at their defaults)")
    check_accumulate(technique, s.accumulate)


def as_point(target: str | type[Technique] | Point, setting: Setting | None = None,
             **options: Any) -> tuple[str | type[Technique], Point]:
    """``(technique name or class, Point)`` of :func:`measure`'s arguments: a :class:`Point`, or a name
    or class; its setting is ``setting`` (default: the point's, else the defaults) with the options
    that are Setting fields changed; the other options are technique parameters.  Not validated."""
    changes, params = Setting.split(options)
    if isinstance(target, Point):
        base = setting or target.setting
        return target.technique, Point(target.technique, {**target.params, **params}, base.replace(**changes))
    name = target.name if isinstance(target, type) and issubclass(target, Technique) else target
    return target, Point(name, params, (setting or DEFAULTS).replace(**changes))


def measure(target: str | type[Technique] | Point, *, setting: Setting | None = None, isolate: bool | str = True,
            plugins=(), reference_cache: str | None = None, **options: Any) -> Measurement:
    """Measure one technique on one configuration.

    ``measure(Point(name, params, Setting(...)))``, or, as before the :class:`~memlab.core.setting.Setting`
    existed, ``measure(name, device="cpu", optimizer="adam", chunk_size=2500)``: the keywords that are
    Setting fields build (or change) the setting, the others are the technique's parameters.

    The setting (:class:`memlab.core.setting.Setting`, checked by its ``validate()``; defaults there):
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``float32``, ``float64``, ``bfloat16`` or ``float16``.
        mode: ``train`` (forward, backward, the optimizer's step) or ``infer`` (forward under no_grad).
        iterations: allocation-measured steps; ``allocated_after_step_bytes`` has one entry each.
        repeats: the fewest timed steps; ``step_time_s`` is their median (seconds).  More are taken,
            interleaved with the family baseline's steps, until the interquartile range is within 5%
            of the median or ``time_budget`` seconds are spent (NOTE [ timed phase ]).
        seed: the inputs' seed.
        check: compare outputs/gradients with the workload reference first.
        timeout: seconds before an isolated run is abandoned (status ``error``).
        time_budget: seconds of timing (on the relative time's clock: thread CPU time at one thread) after which
            sampling stops, once ``repeats`` steps are taken (NOTE [ when to stop timing ]).
        optimizer: one of :data:`memlab.core.setting.OPTIMIZERS`: ``sgd`` (the default), ``sgd_momentum``, ``adam``,
            ``adamw``, ``adafactor``, or one of them ``_in_backward`` (each parameter stepped in its post-accumulate-grad
            hook, its gradient freed at once); its state is the ``optimizer_state`` category; a technique may supply its own.
        loss: ``given`` (the default: ``output.backward(grad_output)``, the upstream gradient
            preallocated in the baseline) or ``mse`` (``mse_loss(output.float(), zeros)``: the upstream
            gradient is allocated inside the step, as in a user's loop).
        threads: torch's intra-op threads for the memory phase (``None``: the process's default, one per core)
            and for the timed phase (``None``: one thread, which keeps ``relative_step_time`` load-robust:
            NOTE [ CPU time and load ] in :mod:`memlab.measurement.timing`).
        accumulate: micro-batches of the batch accumulated into ``.grad`` before one optimizer step
            (default 1); a batch it does not divide is a ValueError naming both (NOTE [ micro-batches
            of a problem ] in :mod:`memlab.measurement.micro_batches`).
        grads: ``none`` (default: gradients set to None after the optimizer step) or ``zero`` (zeroed
            in place: live between steps, in the baseline).

    Args:
        target: a :class:`~memlab.core.setting.Point`, or a registered technique name (or the class).
        setting: the setting (default: the point's, else the defaults), changed by any Setting field
            among ``options``.
        isolate: ``True``/``"auto"`` (default): a child forked from a warm server for CPU, a fresh
            spawned process for CUDA; ``"spawn"``: always a fresh process; ``"fork"``: always the
            server; ``False``: in this process (when the caller already is one, as asv is).
        plugins: plug-in files to load first.
        reference_cache: a folder shared by the measurements of one sweep, where the workload
            reference's output and gradients are computed once per workload configuration
            (:mod:`memlab.measurement.reference_cache`; ``memlab sweep`` makes one per run).
        **options: Setting fields, and workload and technique parameters (``chunk_size=2500``...).

    Returns:
        a :class:`Measurement`; failures inside the run are rows with status ``oom`` or ``error``.

    Example:
        >>> m = memlab.measure("slice_loop", n=10000, chunk_size=2500)   # doctest: +SKIP
        >>> m.peak_allocated_bytes                                        # bytes above baseline
    """
    technique, dev, dt, s = _checked(*as_point(target, setting, **options), isolate, plugins)
    if not isolate:
        return measure_in_process(technique, dev, dt, setting=s, reference_cache=reference_cache)
    return _measure_isolated(technique, dev, s, isolate, reference_cache)


def _checked(name: str | type[Technique], point: Point, isolate: bool | str,
             plugins) -> tuple[Technique, Any, Any, Setting]:
    """Every check of :func:`measure`'s arguments, in the caller's process: ``(technique instance,
    torch.device, torch.dtype, validated setting)``; a bad value is a ValueError naming it."""
    s = point.setting.validate()
    _check_isolation(isolate)
    timing_heap_choice()  # a bad MEMLAB_TIMING_HEAP is refused before any child (NOTE [ which heap a time represents ])
    technique, dev, dt = prepare(name, point.params, s.device, s.dtype, s.mode, plugins)
    _check_gradient_options(technique, s)
    return technique, dev, dt, s


def _measure_isolated(technique: Technique, dev: Any, s: Setting, isolate: bool | str,
                      reference_cache: str | None) -> Measurement:
    """The memory phase in one child, then, when it is ``ok``, the timed phase in a child of its own;
    a child that fails is a row with its status and error (at most 500 characters).  ``extra`` gains
    ``harness_s``: ``{"children": wall seconds of the children as this process waited for them,
    "server_start": of those, starting a fork server}`` (NOTE [ harness cost ] in
    :mod:`memlab.measurement.harness_cost`; a dict, which ``memlab measure`` leaves out of its table)."""
    request = _request(technique, s, reference_cache)
    started = time.perf_counter()
    try:
        measured = Measurement.from_dict(run_in_subprocess(type(technique), request, s.timeout, _isolation(isolate)))
    except (WorkerFailed, ValueError) as exc:
        return _with_harness_s(skeleton(technique, str(dev), s).replace(
            status=getattr(exc, "status", "error"), error=str(exc)[:500], memory_method=memory_method(dev)), started)
    if measured.status != "ok":
        return _with_harness_s(measured, started)
    # the timed phase in a child of its own, under the timing heap (NOTE [ timed phase ])
    timing = {"kind": "time", "measured": measured.to_dict(),
              **{k: request[k] for k in ("technique", "params", "setting", "device")}}
    try:
        timed = Measurement.from_dict(run_in_subprocess(type(technique), timing, s.timeout, _isolation(isolate)))
    except (WorkerFailed, ValueError) as exc:
        timed = measured.replace(status=getattr(exc, "status", "error"), error=f"timed phase: {exc}"[:500])
    return _with_harness_s(timed, started)


def _with_harness_s(m: Measurement, started: float) -> Measurement:
    """``m`` with ``extra``'s ``harness_s``: the children's wall seconds since ``started``, the servers' start."""
    return m.replace(extra={**m.extra, "harness_s": {"children": time.perf_counter() - started,
                                                     "server_start": take_server_start_s()}})


def timeline(name: str | type[Technique], *, device: str = DEFAULTS.device, dtype: str = DEFAULTS.dtype,
             mode: str = DEFAULTS.mode, seed: int = DEFAULTS.seed, isolate: bool | str = True,
             timeout: float = DEFAULTS.timeout, plugins=(), **params: Any) -> Timeline:
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
