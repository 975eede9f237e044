"""Measuring one configuration in the current process (the subprocess worker calls this too)."""
from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..technique import Technique, described
from . import alloc_trace, resident
from .categories import Probe, baseline_categories, categorise, refuses_saved_hooks
from .devices import device_label, synchronize
from .environment import environment
from ..core.record import Measurement, Timeline, TimelineEvent
from ..core.setting import DEFAULTS, Setting
from .step import baseline_objects, make_step, tensors_bytes
from .step_check import Float64Arbiter, Shadow, StepLog, build_problem, checker_for, compare_logs
from .flops import count_step_flops
from .timing import time_in_process, timed_verdict
from ..cuda_replay.prediction import predict_cuda
from .verdict import decide
from .reference_cache import ReferenceCache
from .verify import verify_technique

__all__ = ["measure_in_process", "timeline_in_process", "traced_steps", "TracedSteps", "skeleton", "memory_method"]


def memory_method(device: torch.device) -> dict[str, str]:
    """What each memory figure means on ``device`` (stored on every Measurement)."""
    if device.type == "cuda":
        return {
            "allocated": "torch.cuda.max_memory_allocated() during the step minus memory_allocated() before it: bytes of live tensors, exact, rounded to the allocator's 512-byte blocks",
            "reserved": "torch.cuda.max_memory_reserved() during the step minus memory_reserved() before it: segments the caching allocator holds, free cached blocks included",
            "device_used": "torch.cuda.mem_get_info(): total minus free device memory after the steps, as nvidia-smi shows it (CUDA context and other processes included)",
            "categories": "not attributed on CUDA (total_peak_bytes and the categories are CPU figures); the activation peak of families that report one comes from one more step traced alone",
        }
    return {
        "allocated": "exact: replay of the PyTorch profiler's allocation and free events (profile_memory=True) over each step; bytes of live tensors above the baseline",
        "reserved": "resident: process VmHWM during one step (reset through /proc/self/clear_refs) minus VmRSS before it; page-granular, includes allocator overhead; CPU has no caching allocator",
        "device_used": "not applicable on CPU",
        "categories": "exact: every block of the same allocation trace attributed by storage identity (parameters, optimizer state and inputs by address; gradients, saved activations and the upstream gradient by hooks marked in the trace); they sum to the live bytes",
    }


def skeleton(technique: Technique, device: str, setting: Setting = DEFAULTS) -> Measurement:
    """A Measurement carrying only the identity of the configuration (used for error rows): the
    technique, its parameters, ``device`` (the label of the device it ran on: ``cpu``, ``cuda:0``) and
    the ``setting``'s dtype, mode, optimizer, loss and gradient options."""
    return Measurement(
        technique=technique.name, workload=technique.workload.name, family=technique.family(),
        params=dict(technique.config), device=device, dtype=setting.dtype, mode=setting.mode,
        samples_per_step=technique.samples_per_step(), peer=technique.peer, optimizer=setting.optimizer,
        loss=setting.loss, accumulate=setting.accumulate, grads=setting.grads,
        extra={"baseline": technique.baseline, "twin": technique.twin,
               **accumulation_note(technique, setting.accumulate, setting.grads)},
    )


def accumulation_note(technique: Technique, accumulate: int, grads: str) -> dict[str, str]:
    """``{"accumulation_note": why}``: the technique's stated reason its peak exceeds the baseline's
    when ``.grad`` exists before backward (:attr:`~memlab.Technique.accumulation_note`), for a row
    measured with ``accumulate`` > 1 or ``grads="zero"``; ``{}`` otherwise."""
    note = getattr(technique, "accumulation_note", None)
    if note and (accumulate, grads) != (DEFAULTS.accumulate, DEFAULTS.grads):
        return {"accumulation_note": note}
    return {}


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


def measure_in_process(technique: Technique, device: torch.device, dtype: torch.dtype, *,
                       setting: Setting = DEFAULTS, reference_cache: str | None = None,
                       timing: bool = True) -> Measurement:
    """Measure ``technique`` here, in ``setting`` (validated by the caller: :func:`memlab.measure`;
    its ``device`` and ``dtype`` are the parsed ``device`` and ``dtype``).  Callers that share a
    process should isolate it themselves.

    Order: reference checks (float64, then the measured dtype; own problems, freed), then on CPU
    inside one allocation recording: build, one warm-up step, ``iterations`` traced steps, each
    checked against a shadow reference afterwards (NOTE [ every step checked ]); then one resident
    high-water step and one FLOP-counted step (and on CUDA the ``iterations`` allocator-counted
    steps).  Then, with ``timing``, the timed phase (:func:`memlab.measurement.timing.time_in_process`,
    NOTE [ timed phase ]): at least ``repeats`` steps interleaved with the family baseline's (more
    until stable or ``time_budget`` is spent), each checked.  An isolated measurement runs the
    timed phase in a child of its own (``timing=False`` here).  The verdict (NOTE [ verdicts ]) sets
    the status: ``ok``, ``mismatch`` or ``leak``; OOM becomes ``oom``; any other exception ``error``.
    The traced CPU steps run with a :class:`~memlab.measurement.categories.Probe` for the memory
    categories (NOTE [ memory categories ]); ``optimizer`` and ``loss`` choose the training step
    (see :mod:`memlab.measurement.step`).  ``threads``: torch's intra-op threads for the memory
    phase (``None``: leave the process's setting) and for the timed phase (``None``: one thread,
    :data:`~memlab.measurement.timing.TIMING_THREADS`); restored afterwards (NOTE [ threads and load ]).
    ``reference_cache``: a folder where the reference checks of one sweep share the workload
    reference (:mod:`memlab.measurement.reference_cache`; the same verdict and errors, bit for bit).
    """
    s = setting
    base = skeleton(technique, device_label(device), s.replace(dtype=str(dtype).replace("torch.", "")))
    previous = torch.get_num_threads()
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    try:
        cache = ReferenceCache(reference_cache) if reference_cache else None
        measured = _measure(technique, device, dtype, base, s.mode, s.iterations, s.seed, s.check, cache)
        if timing:
            measured = time_measured(measured, technique, device, dtype, s)
        return measured
    except Exception as exc:  # noqa: BLE001 - every failure becomes a row, never a crash
        return failed_row(base, exc, device)
    finally:
        torch.set_num_threads(previous)


def failed_row(base: Measurement, exc: BaseException, device: torch.device) -> Measurement:
    """``base`` as an ``oom`` or ``error`` row carrying the exception's first line."""
    status = "oom" if _is_oom(exc) else "error"
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return base.replace(status=status, error=f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                        memory_method=memory_method(device), environment=environment(device))


def time_measured(measured: Measurement, technique: Technique, device: torch.device, dtype: torch.dtype,
                  setting: Setting) -> Measurement:
    """The timed phase for an ``ok`` row measured elsewhere (a timing child of its own), merged in;
    a failure of the phase makes the row ``error`` (or ``oom``), naming the phase.  The step is the
    row's (mode, optimizer, loss); ``setting`` says how long it is timed (repeats, time budget),
    with which seed, threads and checks."""
    if measured.status != "ok":
        return measured
    s = setting
    try:
        return timed_verdict(measured, time_in_process(
            technique, device, dtype, mode=measured.mode, repeats=s.repeats, time_budget_s=float(s.time_budget),
            seed=s.seed, optimizer=measured.optimizer, loss=measured.loss, threads=s.threads, check=s.check,
            accumulate=measured.accumulate, grads=measured.grads))
    except Exception as exc:  # noqa: BLE001 - a row, never a crash
        row = failed_row(measured, exc, device)
        return row.replace(error=f"timed phase: {row.error}"[:500], environment=measured.environment)


# NOTE [ threads and load ]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# ``relative_step_time`` divides each technique step by the plain reference steps timed around it, so
# a load that slows both cancels.  That holds only while the load slows both by the same factor, which
# intra-op parallelism breaks: with 2 OpenMP threads on 2 cores and 2 busy processes, every parallel
# region ends at a barrier that waits for whichever thread the scheduler has just descheduled, so a
# step's slowdown grows with its number of parallel regions.  A chunked loop (slice_loop at n=4000,
# chunk 1000: 4x the GEMM calls of its reference) then slows more than its reference, and under a
# few busy loops its relative time moves by a third or more.  With one thread there is no barrier,
# both steps get the same share of a core, and the ratio holds to a few per cent while the step
# itself slows (``memlab bench-harness``; Evidence: docs/evidence/code-notes.md#threads-and-load).
# The measured child leads its own session, so with the kernel's autogroup scheduling (on here) it
# competes as one group against the busy loops' group, however many loops there are: the absolute
# single-thread time moves less than a naive share would say.  So on a
# shared machine measure with ``threads=1`` (``memlab sweep --threads 1``, or ``--jobs 2``) when the
# relative time is the figure that matters; absolute times are then single-core times.


def _verify(technique, device, dtype, mode, seed, cache=None) -> tuple[Any, Any, dict[str, Any]]:
    """The float64 check (at the measured size, or the check size if that does not fit) and, for
    another measured dtype, the same check in that dtype (drift).  See NOTE [ verdicts ]."""
    notes: dict[str, Any] = {}
    try:
        exact = verify_technique(technique, device, torch.float64, mode=mode, seed=seed, cache=cache)
    except Exception as exc:  # noqa: BLE001 - only an out-of-memory check falls back
        if not _is_oom(exc):
            raise
        gc.collect()
        notes["verdict_config"] = "check"
        exact = verify_technique(type(technique).for_check(), device, torch.float64, mode=mode, seed=seed)
    gc.collect()
    drift = None
    if dtype != torch.float64:
        drift = verify_technique(technique, device, dtype, mode=mode, seed=seed, cache=cache)
        gc.collect()
    return exact, drift, notes


def _verdict_fields(exact, drift) -> dict[str, Any]:
    fields: dict[str, Any] = {"max_abs_error": exact.max_abs_error, "max_rel_error": exact.max_rel_error,
                              "errors_by_tensor": exact.errors, "tolerance": (exact.rtol, exact.atol),
                              "matches_reference": exact.ok, "check_dtype": exact.dtype}
    if drift is not None:
        fields.update(drift_max_abs_error=drift.max_abs_error, drift_max_rel_error=drift.max_rel_error)
    return fields


def _measure(technique, device, dtype, base, mode, iterations, seed, check, cache=None) -> Measurement:
    technique.check_available(device)
    fields: dict[str, Any] = {}
    exact = drift = None
    notes: dict[str, Any] = {}
    if check:
        started = time.perf_counter()
        exact, drift, notes = _verify(technique, device, dtype, mode, seed, cache)
        notes["reference_check_s"] = time.perf_counter() - started  # seconds, for memlab bench-harness
        fields.update(_verdict_fields(exact, drift))
    try:
        return _measure_steps(technique, device, dtype, base, mode, iterations, seed, fields, exact, drift, notes,
                              check)
    except Exception as exc:  # noqa: BLE001
        if exact is None or exact.ok:
            raise
        # a wrong output (None, a wrong shape) often cannot be stepped: the verdict is the row
        return base.replace(**fields, status="mismatch", error=f"{exact.line()}; the step then failed: "
                            f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                            memory_method=memory_method(device), environment=environment(device))


@dataclass
class TracedSteps:
    """What :func:`traced_steps` leaves: the problem and its step, and on CPU the exact figures.

    ``stats`` (per-iteration peaks and after-step bytes) and ``categories`` (one
    :class:`~memlab.measurement.categories.IterationCategories` per iteration) are None on CUDA.
    ``log`` holds the samples of every step taken so far (NOTE [ every step checked ]).
    """

    problem: Any
    step: Callable[..., None]
    optimizer: torch.optim.Optimizer | None
    log: StepLog
    stats: alloc_trace.IterationStats | None = None
    categories: list | None = None
    #: False when the technique refused saved-tensor hooks (NOTE [ memory categories ])
    saved_separated: bool = True
    #: CPU: the CUDA caching allocator's predicted figures for the peak iteration (memlab.cuda_replay.prediction)
    predicted_cuda: dict | None = None
    predict_cuda_s: float = 0.0  # seconds spent replaying the trace through the CUDA allocator model


def traced_steps(technique: Technique, device: torch.device, dtype: torch.dtype, *, mode: str = DEFAULTS.mode,
                 iterations: int = DEFAULTS.iterations, seed: int = DEFAULTS.seed,
                 optimizer: str = DEFAULTS.optimizer, loss: str = DEFAULTS.loss, probe: bool = True,
                 accumulate: int = DEFAULTS.accumulate, grads: str = DEFAULTS.grads) -> TracedSteps:
    """Build the problem, take one warm-up step, then on CPU ``iterations`` traced steps.

    Allocation recording starts before the problem exists, so that frees of its storages are seen
    (NOTE [ exact CPU allocated bytes ]); CUDA reads the allocator's own counters instead (the
    caller's steps).  ``probe=False`` leaves the memory-category hooks out (the tests show they
    change no figure).  Every step's output, gradients and parameters are sampled into the returned
    ``log`` without allocating in PyTorch's allocator (NOTE [ every step checked ]).
    """
    steps = {"optimizer": optimizer, "loss": loss, "accumulate": accumulate, "grads": grads}
    try:
        return _traced_steps(technique, device, dtype, mode, iterations, seed, steps, probe, saved=True)
    except RuntimeError as exc:
        if not (probe and refuses_saved_hooks(exc)):
            raise
    gc.collect()
    return _traced_steps(technique, device, dtype, mode, iterations, seed, steps, probe, saved=False)


# NOTE [ no garbage into the trace ]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The recording sees every free, also of storage allocated before it started: such a free pairs with no
# recorded allocation and would be counted as negative temporaries (a total_peak_bytes below zero) or
# lower a step's peak.  Garbage left by earlier work in the same process is such storage, and one
# gc.collect() need not free it all: autograd's ctx.y = y cycles (the reversible family's leaky stack,
# reproductions/_leaky_ctx.py) chain through C++ graph nodes the collector cannot see into, so each
# collection frees one layer and the next collections (a dozen per measurement) free the rest.  After an in-process measurement of
# LeakyCtxOutput (depth 8), the next in-process measurement of unchunked (n=16) recorded 10 such frees
# (198,144 bytes) and reported total_peak_bytes = -195968 (tests/test_inprocess_garbage.py).  So the
# collector runs until it finds nothing before the recording opens.  A fork-server child starts with
# nothing to collect: its figures are unchanged.
GC_PASSES = 100  # at most this many collections before the recording; one suffices when nothing is left


def collect_garbage() -> int:
    """Run the cycle collector until a collection finds nothing (at most :data:`GC_PASSES` times);
    returns the number of collections run.  See NOTE [ no garbage into the trace ]."""
    for passes in range(1, GC_PASSES + 1):
        if not gc.collect():
            return passes
    return GC_PASSES


def _traced_steps(technique, device, dtype, mode, iterations, seed, steps, probe, saved) -> TracedSteps:
    """``steps``: :func:`~memlab.measurement.step.make_step`'s optimizer, loss and gradient options."""
    cpu = device.type == "cpu"
    collect_garbage()  # NOTE [ no garbage into the trace ]
    recorder = alloc_trace.AllocationRecorder(device) if cpu else contextlib.nullcontext()
    log = StepLog(snapshots=True)
    with recorder:
        problem = build_problem(technique, device, dtype, seed, steps["loss"])
        step, opt = make_step(technique, problem, mode, **steps, capture=log)
        step()  # warm-up: lazy initialisation, optimizer state
        synchronize(device)
        gc.collect()
        if cpu:
            known = baseline_categories(problem.model, problem.inputs, problem.grad_output, opt)
            with Probe(problem.leaves() if mode == "train" and probe else (), saved=saved) as p:
                recorder.iterations((lambda: step(p)) if probe else step, iterations)
    traced = TracedSteps(problem, step, opt, log, saved_separated=saved)
    if cpu:
        events, windows = recorder.result()
        traced.stats = alloc_trace.iteration_stats(events, windows)
        traced.categories = categorise(events, windows, known)
        peaks = list(traced.stats.peaks)
        if peaks:  # the caching allocator replayed on the same trace (NOTE in memlab.cuda_replay.model)
            replay_started = time.perf_counter()
            traced.predicted_cuda = predict_cuda(events, windows, iteration=f"iteration{peaks.index(max(peaks))}")
            traced.predict_cuda_s = time.perf_counter() - replay_started
        del events, windows
        gc.collect()
    return traced


def _check_steps(technique, device, dtype, mode, seed, base: Measurement, log: StepLog):
    """The measured steps in ``log`` against the workload reference stepped as often on a shadow
    problem of the same seed, with ``base``'s optimizer, loss and gradient options (NOTE [ every step
    checked ]).  Its
    allocations come after the traced window and are freed before the next figure is taken."""
    steps = {"accumulate": base.accumulate, "grads": base.grads}
    shadow = Shadow(technique, device, dtype, mode, seed, base.optimizer, base.loss, **steps)
    shadow.follow(log)
    synchronize(device)
    # a step beyond the drift allowance is arbitrated by the reference in float64 from the technique's
    # starting values of that step (NOTE [ drift arbitrated in float64 ]); built only if needed
    arbiter = Float64Arbiter(technique, device, mode, seed, base.optimizer, base.loss, lambda k: log.start_of(k - 1),
                             **steps)
    result = compare_logs(log, shadow.log, checker_for(technique, dtype, "measured step", arbiter))
    del shadow, arbiter
    gc.collect()
    return result


def _measure_steps(technique, device, dtype, base, mode, iterations, seed, fields, exact, drift, notes,
                   check) -> Measurement:
    started = time.perf_counter()
    traced = traced_steps(technique, device, dtype, mode=mode, iterations=iterations, seed=seed,
                          optimizer=base.optimizer, loss=base.loss, accumulate=base.accumulate, grads=base.grads)
    # seconds: build, warm-up step, the profiled steps and their trace's processing (bench-harness)
    notes["recorded_steps_s"] = time.perf_counter() - started
    notes["predict_cuda_s"] = traced.predict_cuda_s  # seconds, part of recorded_steps_s (bench-harness)
    problem, step, optimizer, log = traced.problem, traced.step, traced.optimizer, traced.log
    if not traced.saved_separated:
        notes["saved_activations_separated"] = False
    fields["predicted_cuda"] = traced.predicted_cuda
    fields.update(_problem_fields(problem, optimizer, mode))
    activation = steps_check = None
    if traced.stats is not None:
        peaks, after = list(traced.stats.peaks), list(traced.stats.after)
        # the iteration with the highest peak; categories sum to its live bytes (NOTE [ memory categories ])
        activation = at = traced.categories[peaks.index(max(peaks))]
        fields.update(total_peak_bytes=at.total_peak_bytes, peak_by_category_bytes=at.peak,
                      end_by_category_bytes=at.end)
        started = time.perf_counter()
        steps_check = _check_steps(technique, device, dtype, mode, seed, base, log) \
            if check else None
        notes["step_check_s"] = time.perf_counter() - started  # seconds (NOTE [ harness cost ])
    del traced
    log.active = False  # the resident and FLOP-counted steps: counted for the shadow, not compared
    fields.update(_resident_step(step, device, notes))
    started = time.perf_counter()
    fields["flops"] = count_step_flops(step)
    notes["flop_step_s"] = time.perf_counter() - started
    gc.collect()
    if device.type == "cuda":
        log.active = True  # the allocator-counted steps are CUDA's measured steps
        peaks, after = _counted_steps(step, device, iterations)
        free, total = torch.cuda.mem_get_info(device)
        fields["device_used_bytes"] = total - free
        if technique.reports_activation_peak:
            activation = _traced_categories(step, problem, mode, device)
        steps_check = _check_steps(technique, device, dtype, mode, seed, base, log) \
            if check else None
    fields["peak_allocated_per_iteration_bytes"] = tuple(peaks)
    fields["allocated_after_step_bytes"] = tuple(after)
    fields["peak_allocated_bytes"] = max(peaks) if peaks else None
    status, reason, per_step = decide(exact, drift, after, steps_check)
    fields.update(status=status, error=reason, leak_bytes_per_step=per_step)
    if steps_check is not None:
        notes.update(measured_steps_checked=steps_check.steps, measured_steps_max_error=steps_check.max_error)
    fields["extra"] = {"baseline": technique.baseline, "twin": technique.twin, **notes, **described(technique, problem, mode)}
    fields["extra"].update(accumulation_note(technique, base.accumulate, base.grads))
    if technique.reports_activation_peak and activation is not None:
        fields["extra"].update(activation_peak_bytes=activation.activation_peak_bytes,
                               activation_peak_phase=activation.activation_peak_phase)
    fields["memory_method"] = memory_method(device)
    fields["environment"] = environment(device)
    return base.replace(**fields)


def _problem_fields(problem, optimizer, mode) -> dict[str, Any]:
    """Parameter count and bytes, gradient bytes, the optimizer that ran and the allocated baseline."""
    fields: dict[str, Any] = {}
    if optimizer is not None:
        fields["optimizer_class"] = f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"
    params = list(problem.model.parameters())
    fields["param_count"] = sum(p.numel() for p in params)
    fields["param_bytes"] = sum(p.numel() * p.element_size() for p in params)
    if mode == "train":
        fields["grad_bytes"] = sum(t.numel() * t.element_size() for t in problem.leaves())
    fields["allocated_baseline_bytes"] = tensors_bytes(baseline_objects(problem, optimizer))
    return fields


def _resident_step(step, device, notes) -> dict[str, Any]:
    """Reserved (CUDA) or resident (CPU) bytes around one step (NOTE [ CPU resident high-water mark ])."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        reserved0 = torch.cuda.memory_reserved(device)
        step()
        synchronize(device)
        return {"peak_reserved_bytes": torch.cuda.max_memory_reserved(device) - reserved0,
                "reserved_baseline_bytes": reserved0}
    if not resident.reset_high_water():
        return {}
    rss0 = resident.read_kib("VmRSS")
    started = time.perf_counter()
    step()
    notes["resident_step_s"] = time.perf_counter() - started  # seconds, for memlab bench-harness
    hwm = resident.read_kib("VmHWM")
    if rss0 is None or hwm is None:
        return {}
    return {"peak_reserved_bytes": max(0, hwm - rss0), "reserved_baseline_bytes": rss0}


def _counted_steps(step, device, iterations) -> tuple[list[int], list[int]]:
    """CUDA: ``iterations`` steps with the allocator's peak counter reset before each; returns the
    per-step peaks above the live bytes before the step and the live bytes after each step above
    the level before the first."""
    peaks, after = [], []
    start = torch.cuda.memory_allocated(device)
    for _ in range(iterations):
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        synchronize(device)
        peaks.append(torch.cuda.max_memory_allocated(device) - before)
        after.append(torch.cuda.memory_allocated(device) - start)
    return peaks, after


def _traced_categories(step, problem, mode, device):
    """CUDA: the categories of one more step traced alone (in-step figures only: what was allocated
    before the trace is not in it, so only the activation peak is used)."""
    with Probe(problem.leaves() if mode == "train" else (), saved=False) as probe:
        events, windows = alloc_trace.trace_allocations(lambda: step(probe), device, 1)
    gc.collect()
    return categorise(events, windows, {})[0]


def timeline_in_process(technique: Technique, device: torch.device, dtype: torch.dtype, *,
                        mode: str = DEFAULTS.mode, seed: int = DEFAULTS.seed) -> Timeline:
    """Allocated bytes event by event over one step (after a warm-up step), on CPU or CUDA.

    Uses the profiler's allocation events on both devices (see NOTE [ exact CPU allocated bytes ]).
    """
    technique.check_available(device)
    with alloc_trace.AllocationRecorder(device) as recorder:  # before build: see measure_in_process
        problem = technique.build(device, dtype, seed)
        step, optimizer = make_step(technique, problem, mode)
        step()
        synchronize(device)
        gc.collect()
        recorder.iterations(step, 1)
    baseline = tensors_bytes(baseline_objects(problem, optimizer))
    events, windows = recorder.result()
    iters = [w for w in windows if w.name.startswith("iteration")]
    live = 0
    out = []
    ordinal: dict[int, int] = {}  # address -> the ordinal of the allocation living there now
    allocations = 0
    for e in events:
        if iters and not (iters[0].start_ns <= e.time_ns <= iters[0].end_ns):
            continue
        live += e.delta_bytes
        if e.delta_bytes > 0:
            allocations += 1
            ordinal[e.address] = allocations
        out.append(TimelineEvent(op=e.op, stack=e.stack[-4:], phase=alloc_trace.phase_of(e.time_ns, windows),
                                 delta_bytes=e.delta_bytes, live_bytes=live, address=ordinal.get(e.address, 0)))
    return Timeline(technique=technique.name, params=dict(technique.config), device=device_label(device),
                    dtype=str(dtype).replace("torch.", ""), mode=mode, events=tuple(out),
                    baseline_bytes=baseline, method=memory_method(device)["allocated"] if device.type == "cpu"
                    else "profiler allocation events (profile_memory=True) on the CUDA device")
