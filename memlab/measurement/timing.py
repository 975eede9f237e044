"""Step times: the timed phase of a measurement, against the family's baseline technique.

# NOTE [ timed phase ]
Times are taken in a phase of their own, in a process that never had the resident-memory malloc
setting (NOTE [ timing without the resident setting ] in :mod:`memlab.measurement.resident`), under
a heap that keeps what it grows (glibc's mmap threshold at its 32 MiB ceiling, trimming off: NOTE [
the timing heap ], same module), with no profiler, FLOP counter or dispatch mode active.  The phase builds three problems from one seed:

* the technique's, whose steps are timed;
* the **family baseline**'s (``unchunked``, ``dense``, ``residual``, ``resnet``: the technique of the
  same workload marked ``baseline``), stepped with the same optimizer choice, loss, dtype and mode:
  the plain way a user compares against.  A workload without a baseline technique (a plug-in
  family) is timed against its reference instead; ``relative_to`` names which;
* a **shadow** that runs the workload reference on the technique's own problem, untimed, against
  which every timed step is checked (NOTE [ every step checked ] in
  :mod:`memlab.measurement.step_check`).

After one warm-up step of each, steps run as ``baseline, technique, baseline, ..., baseline`` and
each technique step is divided by the mean of the two baseline steps around it;
``relative_step_time`` is the median of those ratios.  The shadow steps (untimed) after the baseline
step that follows the technique's, so each timed step follows a full step of another problem: with
the shadow between the technique's step and the baseline's, every baseline step ran on caches the
shadow had just filled, and ``unchunked`` timed against itself read 0.976-0.984 at a 2.6 ms step
(0.994-1.000 unchecked; 0.991-1.001 in this order: docs/evidence/time-model-bias.md).  Each step is timed twice: wall-clock
(``time.perf_counter``, the raw figure: ``step_times_s``) and the CPU time of the measuring thread
(``time.thread_time``: ``step_cpu_times_s``).

# NOTE [ CPU time and load ]
With one intra-op thread a CPU step runs on the calling thread (autograd runs CPU backward there
too), so that thread's CPU time is the step's work, however long the scheduler kept the thread
waiting: a busy machine moves wall-clock ratios (a step descheduled for whole time slices, a barrier
waiting for a descheduled thread) but not CPU-time ratios.  The relative time is therefore taken
from thread CPU time when the phase runs at one thread on CPU (``extra["relative_time_clock"] ==
"thread_cpu"``), from wall time otherwise (several threads: the other threads' work is not this
thread's CPU time; CUDA: the work is on the device).  Where CPU time is blind: a step slowed by
memory-bandwidth or cache contention with other processes burns more CPU time for the same work, so
heavy co-runners that stream memory still move it (less than wall time); and it says nothing of a
multi-threaded step's parallel efficiency.  The phase runs at one intra-op thread unless ``threads``
says otherwise (``memlab sweep``/``measure --threads``).
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from ..registry import get_technique, list_techniques
from ..technique import Technique
from ..core.setting import DEFAULTS
from .cpu_pin import pinned_to_one_cpu
from .devices import synchronize
from .environment import load_average
from .resident import timing_heap
from .step import make_step
from .step_check import Float64Arbiter, ReferenceAsTechnique, Shadow, StepLog, build_problem, checker_for

try:
    import resource
except ImportError:  # pragma: no cover - not a POSIX platform
    resource = None

__all__ = ["time_in_process", "family_baseline", "relative_step_time", "step_time_fields", "timed_verdict",
           "TIMING_THREADS", "STABLE_IQR_FRACTION", "RATIO_PRECISION", "MAX_TIMED_STEPS", "WALL_BUDGET_FACTOR"]

#: intra-op threads of the timed phase unless the caller names its own (NOTE [ CPU time and load ])
TIMING_THREADS = 1
#: stop sampling once the step times' interquartile range is below this fraction of their median
STABLE_IQR_FRACTION = 0.05
#: ... and once the relative time's median is known to this fraction (its standard error, estimated
#: as 0.93 IQR / sqrt(rounds) of the per-round ratios: NOTE [ when to stop timing ])
RATIO_PRECISION = 0.01
#: never take more timed steps than this, whatever the budget
MAX_TIMED_STEPS = 200
#: the time budget is spent in the relative time's own clock (thread CPU time at one thread); wall
#: time may stretch to this many times the budget under load before sampling stops anyway
WALL_BUDGET_FACTOR = 10

# NOTE [ when to stop timing ]
# Sampling stops once ``repeats`` rounds are taken, the technique's own step times are stable (IQR
# at most STABLE_IQR_FRACTION of the median) **and** the median of the per-round ratios is precise:
# for a median of n samples the standard error is about 1.253 sigma / sqrt(n), and sigma about
# IQR / 1.349, so 0.93 IQR / sqrt(n) <= RATIO_PRECISION * median.  Or when the time budget is
# spent, counted on the same clock as the figure (thread CPU time of the technique's and the
# baseline's steps at one thread): a wall-clock budget ran out after the fewest rounds on a loaded
# machine, so the figure was least precise exactly when the machine was busy.  Stopping on the
# step's own stability alone stopped at the fewest rounds (a CPU-time step is stable at once), and
# the relative time then moved by several per cent between runs of one configuration; its ratio is
# what users read.  Evidence: docs/evidence/code-notes.md#when-to-stop-timing

# NOTE [ the noise floor of a memory-bound step ]
# What is left of run-to-run spread once the phase is pinned, in CPU time, idle, is the step's own
# user time.  For a memory-bound step (slice_loop at n=4000, chunk 100: 40 chunk gradients, each a
# 4 MB zero-filled tensor plus a 4 MB add, against unchunked's two GEMMs) the timed steps of either
# take no minor page faults and no system time and the reference steps are steady, yet the
# technique's per-round ratio scatters by several per cent whether the every-step check runs or
# not.  So the scatter is neither the allocator, the kernel, the check nor the other CPU: it is the
# memory-bound step's speed itself, which drifts over minutes, consistent with memory bandwidth
# shared beyond this VM.  More rounds in one process do not remove a drift that is slower than the
# process.  The asv time history measures it across fresh processes: 50 idle runs of slice_loop at
# chunk 500 have a CV of 1.2% and 3 of them differ by more than 5% with probability 0.06
# (results/README.md).  On a noisier host of the same kind the default 2 s budget, not the
# precision rule, limited such a step's rounds, and a 4x budget narrowed the spread between
# processes.  A larger default would cost only the steps that do not settle; its price on the test
# suite is not measured.  Evidence: docs/evidence/code-notes.md#the-noise-floor-of-a-memory-bound-step


def family_baseline(technique: Technique) -> Technique | None:
    """The baseline technique of ``technique``'s workload at the same workload configuration, or
    None when the workload has none (then steps are timed against the workload reference)."""
    cls = type(technique)
    if cls.baseline:
        return cls(**technique.config)
    workload_cfg = {k: v for k, v in technique.config.items() if k in cls.workload.params}
    for name in list_techniques(cls.family()):
        other = get_technique(name)
        if other.baseline and other.workload is cls.workload:
            return other(**workload_cfg)
    return None


def step_time_fields(times: list[float], samples_per_step: int | None) -> dict[str, Any]:
    """Median, interquartile range (inclusive quartiles; None under two samples) and throughput of
    step times in seconds."""
    if not times:
        return {}
    median = statistics.median(times)
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive") if len(times) >= 2 else (None, None, None)
    return {"step_times_s": tuple(times), "step_time_s": median,
            "step_time_iqr_s": None if q1 is None else q3 - q1,
            "samples_per_s": samples_per_step / median if samples_per_step and median > 0 else None}


def round_ratios(times: list[float], ref_times: list[float]) -> list[float]:
    """``times[i] / mean(ref_times[i], ref_times[i + 1])`` for every round ``i``: each step against the
    baseline steps timed just before and after it (dimensionless)."""
    return [t / ((a + b) / 2) for t, a, b in zip(times, ref_times, ref_times[1:]) if a + b > 0]


def relative_step_time(times: list[float], ref_times: list[float]) -> float | None:
    """Median of :func:`round_ratios`, or None with no complete round."""
    ratios = round_ratios(times, ref_times)
    return statistics.median(ratios) if ratios else None


def _iqr(xs: list[float]) -> float:
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q3 - q1


def _minor_faults() -> int | None:
    """The process's minor page faults so far (``getrusage``), or None without ``resource``."""
    return None if resource is None else resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _timed(fn, device, log: StepLog | None = None) -> tuple[float, float, int | None]:
    """``(wall seconds, thread CPU seconds, minor page faults)`` of one call, the times less what
    ``log`` spent sampling it (the faults include the sampling's: NOTE [ the timing heap ])."""
    synchronize(device)
    if log is not None:
        log.take_overhead()
    f0 = _minor_faults()
    w0, c0 = time.perf_counter(), time.thread_time()
    fn()
    synchronize(device)
    wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
    faults = None if f0 is None else _minor_faults() - f0
    if log is None:
        return wall, cpu, faults
    sampled_wall, sampled_cpu = log.take_overhead()
    return wall - sampled_wall, cpu - sampled_cpu, faults


def _median_faults(samples: list[tuple[float, float, int | None]]) -> float | None:
    """Median minor page faults per step of ``_timed`` samples, or None where they were not counted."""
    faults = [s[2] for s in samples if s[2] is not None]
    return statistics.median(faults) if faults else None


class _Problems:
    """The technique's, the baseline's and the shadow reference's steps (NOTE [ timed phase ]).

    The baseline's step samples its tensors as the technique's does, into a log that keeps nothing,
    and both timings subtract the sampling: the two timed steps do the same extra work around them
    (sampling only the technique's made the baseline, which then ran right after the shadow, read
    up to 15% slower than an identical technique: ``residual`` against itself at 0.87)."""

    def __init__(self, technique, baseline, device, dtype, mode, seed, optimizer, loss, check=True, grads=None):
        # grads: make_step's gradient options (accumulate, grads), the technique's and the baseline's alike
        started = time.perf_counter()
        grads = grads or {}
        self.log, self.baseline_log = StepLog(keep=check), StepLog(keep=False)
        problem = build_problem(technique, device, dtype, seed, loss)
        self.leaves = problem.leaves()
        self.step, opt = make_step(technique, problem, mode, optimizer=optimizer, loss=loss, capture=self.log,
                                   **grads)
        self.optimizer_class = None if opt is None else f"{type(opt).__module__}.{type(opt).__qualname__}"
        self.shadow = Shadow(technique, device, dtype, mode, seed, optimizer, loss, **grads) if check else None
        timed_against = baseline if baseline is not None else ReferenceAsTechnique(technique)
        self.baseline, _ = make_step(timed_against, build_problem(baseline or technique, device, dtype, seed, loss),
                                     mode, optimizer=optimizer, loss=loss, capture=self.baseline_log, **grads)
        # the start of the last step, for the float64 arbiter (NOTE [ drift arbitrated in float64 ]), in a
        # box of its own: a lambda reading self._start made a reference cycle (self -> checker -> arbiter
        # -> lambda -> self) that kept every problem of the timed phase alive until the garbage collector
        # ran, inside the next in-process measurement's traced steps, whose figures it then changed
        self._start: list[list[torch.Tensor] | None] = [None]
        start = self._start
        arbiter = Float64Arbiter(technique, device, mode, seed, optimizer, loss, lambda k: start[0], **grads) \
            if check else None
        self.checker = checker_for(technique, dtype, "timed step", arbiter)
        self.check_s = 0.0  # wall seconds of the shadow's syncs, steps and comparisons (NOTE [ harness cost ])
        self.setup_s = time.perf_counter() - started  # wall seconds building the three problems

    def sync_shadow(self) -> None:
        """Before a technique step: the shadow's leaves take the technique's values (NOTE [ every step
        checked ]), so both start the step alike."""
        if self.shadow is not None:
            started = time.perf_counter()
            self.shadow.sync(self.leaves)
            self.check_s += time.perf_counter() - started

    def check_last(self) -> None:
        """Step the shadow, compare the technique's last step with the shadow's, then drop both
        (nothing without a check: the log keeps nothing and there is no shadow)."""
        if self.shadow is not None:
            started = time.perf_counter()
            if self.checker.arbiter is not None and not self.checker.structural_only:
                self._start[0] = [leaf.detach().clone() for leaf in self.shadow.problem.leaves()]
            self.shadow()
            self.checker.add(self.log.taken(), self.log.pop_last(), self.shadow.log.pop_last())
            self._start[0] = None
            self.check_s += time.perf_counter() - started

    def check_seconds(self) -> float:
        """Wall seconds spent checking the timed steps so far: the shadow's syncs, steps and comparisons
        and the sampling of the technique's and the baseline's steps (which the timed steps exclude)."""
        return self.check_s + self.log.sampled_s + self.baseline_log.sampled_s


def _interleave(problems: _Problems, device, min_steps: int, budget_s: float, cpu_clock: bool):
    """``baseline, technique, baseline, ...``; after the baseline step that follows each technique
    step the shadow steps, untimed, and the technique's step is compared with it (NOTE [ timed phase ]).

    Returns ``(technique (wall, cpu, faults) samples, baseline samples)``: at least ``min_steps`` technique
    steps, then more until :func:`_settled` (NOTE [ when to stop timing ]) or ``budget_s`` seconds
    have passed.
    """
    started = time.perf_counter()
    k = 1 if cpu_clock else 0
    ref = [_timed(problems.baseline, device, problems.baseline_log)]
    times: list[tuple[float, float, int | None]] = []
    while len(times) < MAX_TIMED_STEPS:
        problems.sync_shadow()
        times.append(_timed(problems.step, device, problems.log))
        ref.append(_timed(problems.baseline, device, problems.baseline_log))
        problems.check_last()
        if len(times) < min_steps:
            continue
        if _settled(times, ref, cpu_clock):
            break
        # the budget is counted on the figure's own clock: under load a CPU-time figure gets as many
        # rounds as idle (wall time stretches instead, up to WALL_BUDGET_FACTOR times the budget)
        spent = sum(t[k] for t in times) + sum(r[k] for r in ref)
        if spent >= budget_s or time.perf_counter() - started >= WALL_BUDGET_FACTOR * budget_s:
            break
    return times, ref


def _settled(times: list[tuple], ref: list[tuple], cpu_clock: bool) -> bool:
    """Stable step times and a precise median ratio (NOTE [ when to stop timing ])."""
    k = 1 if cpu_clock else 0
    clock = [t[k] for t in times]
    if len(clock) < 3 or _iqr(clock) > STABLE_IQR_FRACTION * statistics.median(clock):
        return False
    ratios = round_ratios(clock, [r[k] for r in ref])
    if len(ratios) < 3:
        return False
    return 0.93 * _iqr(ratios) / len(ratios) ** 0.5 <= RATIO_PRECISION * statistics.median(ratios)


def time_in_process(technique: Technique, device: torch.device, dtype: torch.dtype, *, mode: str = DEFAULTS.mode,
                    repeats: int = DEFAULTS.repeats, time_budget_s: float = DEFAULTS.time_budget,
                    seed: int = DEFAULTS.seed, optimizer: str = DEFAULTS.optimizer, loss: str = DEFAULTS.loss,
                    threads: int | None = None, check: bool = DEFAULTS.check, accumulate: int = DEFAULTS.accumulate,
                    grads: str = DEFAULTS.grads) -> dict[str, Any]:
    """The timed phase (NOTE [ timed phase ]): Measurement fields, every timed step checked.

    Returns the fields ``step_times_s`` (wall seconds), ``step_cpu_times_s`` (thread CPU seconds),
    ``step_time_s``, ``step_time_iqr_s``, ``samples_per_s``, ``reference_step_time_s`` (the
    baseline's median wall seconds), ``relative_step_time``, ``relative_step_time_wall``,
    ``relative_to``, ``relative_step_ratios`` (the per-round ratios whose median is
    ``relative_step_time``: :func:`round_ratios`, in its clock; asv's samples of it), ``timing_threads``,
    ``steps_checked``, ``load_avg_before``/``after``, and
    ``timed_check`` (a :class:`~memlab.measurement.step_check.StepComparison`; pass it to
    :func:`timed_verdict`), ``timing_heap``, ``timing_cpu`` (the CPU the phase was pinned to, or None:
    NOTE [ one CPU per timed phase ] in :mod:`memlab.measurement.cpu_pin`), ``relative_time_clock``,
    ``optimizer_class``, ``timed_minor_faults``/``baseline_minor_faults`` (median minor page
    faults per technique/baseline step: NOTE [ the timing heap ]), and ``timing_setup_s``/``timed_check_s``
    (wall seconds of the phase's build and warm-up, and of its checks: :func:`_phase`).
    ``threads``: intra-op threads for the phase (default :data:`TIMING_THREADS`), restored after.
    ``check=False``: no shadow, no step compared (``steps_checked`` 0), as for ``measure(check=False)``.
    ``accumulate``, ``grads``: the step's gradient options, the baseline's step taking the same.
    """
    timing_threads = TIMING_THREADS if threads is None else threads
    previous = torch.get_num_threads()
    torch.set_num_threads(timing_threads)
    cpu_clock = device.type == "cpu" and timing_threads == 1
    baseline = family_baseline(technique)
    try:
        with timing_heap() as heap, pinned_to_one_cpu(cpu_clock) as timing_cpu:
            problems = _Problems(technique, baseline, device, dtype, mode, seed, optimizer, loss, check,
                                 {"accumulate": accumulate, "grads": grads})
            run = _phase(problems, device, repeats, time_budget_s, cpu_clock)
            del problems
    finally:
        torch.set_num_threads(previous)
    times, ref, check = run.pop("times"), run.pop("ref"), run["timed_check"]
    wall, cpu = [t[0] for t in times], [t[1] for t in times]
    ref_wall, ref_cpu = [r[0] for r in ref], [r[1] for r in ref]
    rel_wall = relative_step_time(wall, ref_wall)
    return {**step_time_fields(wall, technique.samples_per_step()), "step_cpu_times_s": tuple(cpu),
            "reference_step_time_s": statistics.median(ref_wall),
            "relative_step_time": relative_step_time(cpu, ref_cpu) if cpu_clock else rel_wall,
            "relative_step_ratios": round_ratios(cpu, ref_cpu) if cpu_clock else round_ratios(wall, ref_wall),
            "relative_step_time_wall": rel_wall,
            "relative_to": baseline.name if baseline is not None else "reference",
            "timing_threads": timing_threads, "steps_checked": check.steps, **run,
            "timing_heap": heap, "timing_cpu": timing_cpu,
            "relative_time_clock": "thread_cpu" if cpu_clock else "wall",
            "timed_minor_faults": _median_faults(times), "baseline_minor_faults": _median_faults(ref)}


def _phase(problems: _Problems, device, repeats: int, budget_s: float, cpu_clock: bool) -> dict[str, Any]:
    """The warm-up steps and the interleaved rounds of built ``problems``: ``times`` and ``ref``
    (:func:`_interleave`), the load averages around the rounds, ``optimizer_class``, ``timed_check``
    and the seconds of the phase that are not timed steps (NOTE [ harness cost ] in
    :mod:`memlab.measurement.harness_cost`): ``timing_setup_s`` (wall seconds from the start of the build of
    the three problems to the end of their warm-up steps) and ``timed_check_s`` (the timed steps'
    checks: :meth:`_Problems.check_seconds`)."""
    setup_s = problems.setup_s + _seconds(problems.step)  # warm-up of each: lazy initialisation, optimizer state
    problems.check_last()  # (checked: step 1)
    setup_s += _seconds(problems.baseline)
    setup_s += problems.check_s  # the warm-up step's check (its sampling is inside the warm-up step)
    check_before = problems.check_seconds()
    load_before = load_average()
    times, ref = _interleave(problems, device, repeats, budget_s, cpu_clock)
    load_after = load_average()
    return {"times": times, "ref": ref, "load_avg_before": load_before, "load_avg_after": load_after,
            "optimizer_class": problems.optimizer_class, "timed_check": problems.checker.result(),
            "timing_setup_s": setup_s, "timed_check_s": problems.check_seconds() - check_before}


def _seconds(fn) -> float:
    """Wall seconds of one call of ``fn``."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def timed_verdict(measurement, timed: dict[str, Any]):
    """``measurement`` with the timed phase's fields (from :func:`time_in_process`, or the same as
    JSON from a timing child); an ``ok`` row whose timed steps disagree with the shadow reference
    becomes ``mismatch``, naming the step."""
    timed = dict(timed)
    check = timed.pop("timed_check")
    reason = check.reason if hasattr(check, "reason") else check.get("reason")
    extra = {**measurement.extra, "relative_time_clock": timed.pop("relative_time_clock"),
             "relative_step_ratios": list(timed.pop("relative_step_ratios", None) or ()),
             "timed_minor_faults": timed.pop("timed_minor_faults", None),
             "baseline_minor_faults": timed.pop("baseline_minor_faults", None),
             **{k: timed.pop(k) for k in ("timing_setup_s", "timed_check_s") if k in timed},
             "timed_steps_max_error": check.max_error if hasattr(check, "max_error") else check.get("max_error")}
    environment = {**measurement.environment, "timing_heap": timed.pop("timing_heap"),
                   "timing_cpu": timed.pop("timing_cpu", None)}
    optimizer_class = timed.pop("optimizer_class", None)
    fields: dict[str, Any] = {**timed, "extra": extra, "environment": environment}
    if measurement.optimizer_class is None and optimizer_class is not None:
        fields["optimizer_class"] = optimizer_class
    if reason is not None and measurement.status == "ok":
        fields.update(status="mismatch", error=reason[:500])
    return measurement.replace(**fields)
