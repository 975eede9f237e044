"""The record core (torch-free): what a measurement is and how its figures read.

:class:`Measurement` and :class:`Timeline` (frozen, JSON); one vocabulary, declared here once: the
statuses (:class:`Status`), verdicts (:class:`Verdict`) and memory categories (:class:`Category`) as
enums carrying their labels and flags, each record field's kind (:class:`FieldKind`), the modes; the
byte unit and formatting, the number predicate every reader uses, and how the analytic
expectations a technique states in ``Measurement.extra`` are read (:func:`analytic_floor`).  The
measurement layer (:mod:`memlab.measurement`) writes these records; the results reader
(:mod:`memlab.results`), the site and the advisor read them.  This module imports nothing heavy
(no torch, no pandas), so ``import memlab.core.record`` is cheap anywhere; a test keeps it so.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Mapping

from .setting import DEFAULTS, MODES, Point, Setting
from .units import MiB

__all__ = ["Measurement", "Timeline", "TimelineEvent", "AllocEvent", "Window", "SCHEMA_VERSION", "Status", "STATUSES", "MODES",
           "RANKABLE_STATUS", "FINISHED_STATUSES", "WHOLE_STATUSES", "MIN_LEAK_STEPS", "measured_steps",
           "row_status", "row_reason", "leak_unknown_reason", "Verdict", "VERDICTS", "Category", "CATEGORIES", "ACTIVATION_CATEGORIES",
           "CATEGORY_LABELS", "FieldKind", "fields_of_kind", "MiB", "fmt_mib", "is_number", "analytic_floor",
           "activation_figures", "UNDER_LOAD_FACTOR", "is_under_load"]

SCHEMA_VERSION = 2


class Status(enum.StrEnum):
    """What became of a measurement; a record and its JSON hold the value (``"ok"``...).

    ``ok``: measured and verified; ``mismatch``: outputs/gradients differ from the reference (or the
    technique mutated its inputs/parameters, or produced non-finite values); ``leak``: live bytes grow
    every step; ``oom``: out of memory (or killed by the kernel's OOM killer); ``error``: anything else;
    ``leak_unknown``: every check passed but fewer than :data:`MIN_LEAK_STEPS` steps were measured, too
    few to tell a leak (NOTE [ verdicts ] in :mod:`memlab.measurement.verdict`).  The measurement writes
    ``ok`` for such a row and every reader reads it as ``leak_unknown`` (:func:`row_status`), so rows
    written before the rule read so too.  Only ``ok`` rows are ever ranked, called best, or drawn as
    Pareto points (``rankable``).  ``finished``: a sweep's resume does not measure the point again
    (``leak_unknown``: only while the sweep measures too few steps to decide it, :func:`memlab.sweep.resume.finished_keys`);
    ``whole``: the step ran to its end, so its figures are whole (a mismatch is wrong maths, not missing
    memory); ``label``: how the status reads in text.
    """

    def __new__(cls, value: str, rankable: bool, finished: bool, whole: bool):
        member = str.__new__(cls, value)
        member._value_ = value
        member.rankable, member.finished, member.whole = rankable, finished, whole
        member.label = value.replace("_", " ")
        return member

    OK = "ok", True, True, True
    MISMATCH = "mismatch", False, True, True
    LEAK = "leak", False, True, False
    OOM = "oom", False, False, False
    ERROR = "error", False, False, False
    LEAK_UNKNOWN = "leak_unknown", False, False, True


#: every status, as the strings a record holds
STATUSES = tuple(s.value for s in Status)
RANKABLE_STATUS = Status.OK.value
#: statuses a sweep's ``--resume`` does not measure again
FINISHED_STATUSES = tuple(s.value for s in Status if s.finished)
#: statuses whose step ran to its end (its memory figures are whole)
WHOLE_STATUSES = tuple(s.value for s in Status if s.whole)
#: measured steps a leak verdict needs: with two, a leak at every other step (after the steps: 1 MiB,
#: 1 MiB) looks level (NOTE [ verdicts ] in memlab.measurement.verdict)
MIN_LEAK_STEPS = 3


def measured_steps(row: Mapping[str, Any]) -> int:
    """How many steps a row (a Measurement's dict) measured: the length of its
    ``allocated_after_step_bytes`` (0 when it holds none, or not a list)."""
    after = row.get("allocated_after_step_bytes")
    return len(after) if isinstance(after, (list, tuple)) else 0


def row_status(row: Mapping[str, Any]) -> str:
    """How a row's verdict reads, one of :data:`STATUSES`: its ``status``, except ``leak_unknown`` for an
    ``ok`` row of fewer than :data:`MIN_LEAK_STEPS` measured steps (:func:`measured_steps`).  Every reader
    that decides what a row says (the site, compare, merge, a sweep's summary and resume) reads this."""
    status = row.get("status")
    if status == Status.OK and measured_steps(row) < MIN_LEAK_STEPS:
        return Status.LEAK_UNKNOWN.value
    return status


def leak_unknown_reason(steps: int) -> str:
    """Why a row is ``leak_unknown``: ``'leak unknown: 2 steps measured, 3 needed (--iterations 3)'``."""
    return (f"leak unknown: {steps} step{'' if steps == 1 else 's'} measured, {MIN_LEAK_STEPS} needed "
            f"(--iterations {MIN_LEAK_STEPS})")


def row_reason(row: Mapping[str, Any]) -> str:
    """The one-line reason of a row that does not read ``ok`` (:func:`row_status`): its ``error``'s first
    line, or :func:`leak_unknown_reason` for a ``leak_unknown`` row without one."""
    error = row.get("error")
    if isinstance(error, str) and error.strip():
        return error.strip().splitlines()[0]
    if row_status(row) == Status.LEAK_UNKNOWN:
        return leak_unknown_reason(measured_steps(row))
    return "no reason recorded"


class Verdict(enum.StrEnum):
    """A seed reproduction's verdict (``data/reproductions/<seed>.json``'s ``verdict``)."""

    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced on this device"
    WITH_CAVEAT = "reproduced with caveat"


#: every verdict, as the strings a reproduction file holds
VERDICTS = tuple(v.value for v in Verdict)


class Category(enum.StrEnum):
    """A memory category (NOTE [ memory categories ] in :mod:`memlab.measurement.categories`): the key
    in ``peak_by_category_bytes``, its label in text, its short label in one-line output, and whether it
    is activation memory (what a memory-saving technique for activations changes)."""

    def __new__(cls, value: str, label: str, short: str, activation: bool):
        member = str.__new__(cls, value)
        member._value_ = value
        member.label, member.short, member.activation = label, short, activation
        return member

    PARAMETERS = "parameters", "parameters", "params", False
    GRADIENTS = "gradients", "gradients", "grads", False
    OPTIMIZER_STATE = "optimizer_state", "optimizer state", "opt", False
    INPUTS = "inputs", "inputs", "inputs", False
    SAVED_ACTIVATIONS = "saved_activations", "saved activations", "saved", True
    TEMPORARIES = "temporaries", "temporaries", "temp", True


#: every category key, in the order figures list them
CATEGORIES = tuple(c.value for c in Category)
#: the categories that are activation memory
ACTIVATION_CATEGORIES = tuple(c.value for c in Category if c.activation)
#: how each category reads in text
CATEGORY_LABELS = {c.value: c.label for c in Category}


class FieldKind(enum.StrEnum):
    """What a :class:`Measurement` field holds, declared on the field (``metadata["kind"]``), so a reader
    derives its checks from the record and not from the annotation's spelling (:func:`fields_of_kind`)."""

    KEY = "key"                #: a string every row has: technique, workload, family, device, dtype, mode, status
    CHOICE = "choice"          #: a string with the default rows from before the choice existed carry
    COUNT = "count"            #: bytes or a count: a number >= 0, or null
    FIGURE = "figure"          #: seconds, a ratio, a load, samples/s: a number >= 0, or null
    ERROR = "error"            #: an error against the reference: a number (NaN/Infinity allowed), or null
    SIGNED = "signed"          #: a signed number, or null
    SERIES = "series"          #: a list of numbers
    CATEGORIES = "categories"  #: bytes by memory category
    OTHER = "other"            #: read and checked by name where it is read


def _field(kind: FieldKind, *default: Any, **kw: Any) -> Any:
    """A record field of ``kind``, with its default (positional) or ``default_factory``."""
    if default:
        kw["default"] = default[0]
    return field(metadata={"kind": kind}, **kw)


def fields_of_kind(kind: FieldKind, cls: type | None = None) -> tuple[str, ...]:
    """The names of ``cls``'s (:class:`Measurement`'s) fields of ``kind``, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls or Measurement) if f.metadata.get("kind") == kind)


def is_number(v: Any) -> bool:
    """A real, finite number: ints, floats and numpy scalars; not bool, NaN or infinity."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def fmt_mib(n: Any) -> str:
    """Bytes as MiB with one decimal (``'87.3 MiB'``); ``'-'`` for None or anything not a finite number."""
    return f"{n / MiB:.1f} MiB" if is_number(n) else "-"


# -- the analytic expectations a technique states in ``Measurement.extra`` --------------------------
def _floor_number(v: Any) -> bool:
    return is_number(v) and v >= 0


def activation_figures(extra: dict[str, Any] | None, technique: str) -> tuple[float | None, float | None]:
    """``(measured activation peak, expected activation bytes)`` a technique stated, each or None.

    Some families (reversible) state activation memory rather than a whole-step floor, because the
    step peak is dominated by parameter gradients: ``extra["activation_peak_bytes"]`` is the measured
    peak of bytes live above the baseline minus the gradients accumulated so far, and
    ``extra["expected_activation_bytes"]`` maps technique names to the analytic expectation.
    """
    extra = extra if isinstance(extra, dict) else {}
    measured = extra.get("activation_peak_bytes")
    expected = extra.get("expected_activation_bytes")
    expected = expected.get(technique) if isinstance(expected, dict) else None
    return (measured if _floor_number(measured) else None), (expected if _floor_number(expected) else None)


def analytic_floor(extra: dict[str, Any] | None, mode: str) -> float | None:
    """The analytic floor (bytes above baseline) a technique stated for ``mode``, or None.

    Techniques put ``analytic_floor_bytes_by_mode`` (``{"train": .., "infer": ..}``) or
    ``analytic_floor_bytes`` (for ``analytic_floor_mode``, train when absent) in ``extra``.
    """
    extra = extra if isinstance(extra, dict) else {}
    by_mode = extra.get("analytic_floor_bytes_by_mode")
    if isinstance(by_mode, dict) and _floor_number(by_mode.get(mode)):
        return by_mode[mode]
    floor = extra.get("analytic_floor_bytes")
    if not _floor_number(floor) or extra.get("analytic_floor_mode", mode) != mode:
        return None
    return floor


def _tupled(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


# NOTE [ under load ]
# ~~~~~~~~~~~~~~~~~~~
# A measurement that uses the whole machine keeps the 1-minute load average at about the cores by
# itself: ``memlab sweep --jobs 2`` on 2 cores runs two single-thread children, and the sweep's own
# process starts and forks add a little.  With nothing else running, most rows of an idle full CPU
# sweep read a load above the cores, so a threshold of "load > cores" marked most of an idle sweep
# as loaded.  A row is *under load* when the load exceeded ``UNDER_LOAD_FACTOR`` x the cores: at
# least a quarter of a core per core of work that is not the sweep's.  The committed sweep, measured
# under a real load, stays marked; its seconds are not an idle machine's (its relative step time
# still compares).  Evidence: docs/evidence/code-notes.md#under-load
#: a load average above this many times the cores marks a measurement as under load
UNDER_LOAD_FACTOR = 1.25


def is_under_load(loads, cores) -> bool:
    """True when any number in ``loads`` (1-minute load averages) exceeds ``UNDER_LOAD_FACTOR * cores``
    (NOTE [ under load ]); False without a positive ``cores``."""
    if not isinstance(cores, (int, float)) or isinstance(cores, bool) or cores <= 0:
        return False
    return any(isinstance(x, (int, float)) and not isinstance(x, bool) and x > UNDER_LOAD_FACTOR * cores
               for x in loads)


@dataclass(frozen=True)
class Measurement:
    """One measured configuration of one technique.  All memory figures are bytes, times seconds.

    Memory figures (see ``memory_method`` for how they were obtained on this device):
        peak_allocated_bytes: highest tensor bytes live during one step, *above*
            ``allocated_baseline_bytes`` (max over the measured iterations).
        allocated_baseline_bytes: bytes of the tensors the problem holds before a step:
            parameters, buffers, inputs, upstream gradient and optimizer state.
        peak_reserved_bytes: CUDA: ``max_memory_reserved`` during the step minus
            ``memory_reserved`` before it; CPU: process resident high-water mark (VmHWM) during one
            step minus the resident size (VmRSS) before it.
        reserved_baseline_bytes: the reserved (CUDA) / resident (CPU) bytes before the step.
        device_used_bytes: CUDA only: device memory in use after the steps as the driver (and
            nvidia-smi) sees it, all processes and the CUDA context included.
        grad_bytes: bytes of the gradients one training step produces (parameters and
            grad-requiring inputs); part of the peak, so ``peak - grad_bytes`` bounds activations.
        total_peak_bytes: everything live at the step's peak, baseline included: what
            ``torch.cuda.max_memory_allocated()`` of a training loop would show for the step.
            ``total_peak_bytes - peak_allocated_bytes`` is the baseline the allocation trace saw
            live at the step's start (``allocated_baseline_bytes`` plus any other storage the
            technique or workload keeps between steps).
        peak_by_category_bytes: ``total_peak_bytes`` split by category (NOTE [ memory categories ]
            in ``memlab/measurement/categories.py``): ``parameters``, ``gradients``, ``optimizer_state``,
            ``inputs`` (inputs and upstream gradient), ``saved_activations`` (tensors autograd
            saved for backward) and ``temporaries`` (everything else); the values sum to
            ``total_peak_bytes`` exactly.
        end_by_category_bytes: the same categories live at the end of that step (sum: the baseline
            plus ``allocated_after_step_bytes`` of that step).
            The three figures above come from the exact CPU allocation trace, at the measured
            iteration with the highest peak; empty/None on CUDA (not attributed there yet).
        allocated_after_step_bytes: per iteration, tensor bytes live after the step minus the
            baseline before the first measured step; growth here is a leak.
        leak_bytes_per_step: set with status ``leak``: mean growth of live bytes per step.
        predicted_cuda: CPU only: PyTorch's CUDA caching allocator replayed on this step's exact
            allocation trace (:func:`memlab.cuda_replay.prediction.predict_cuda`; bytes, marked
            ``predicted``): allocated and reserved peaks, fragmentation, segments, the extra
            device terms the trace cannot see listed apart.  A prediction, not a measurement.

    Training step (``mode="train"``): ``optimizer`` is the requested optimizer (``sgd``,
    ``sgd_momentum``, ``adam``, ``adamw``; rows from before the choice existed are ``sgd``) and
    ``optimizer_class`` the class that ran (a technique may supply its own); ``loss`` is ``given``
    (``output.backward(grad_output)`` with a preallocated upstream gradient in the baseline) or
    ``mse`` (``mse_loss(output.float(), zeros).backward()``: the upstream gradient is allocated inside
    the step and no ``grad_output`` is in the baseline).  See ``memlab/measurement/step.py``.

    Step time (seconds; NOTE [ timed phase ] in ``memlab/measurement/timing.py``): ``step_times_s``
    holds every timed sample's wall-clock seconds, ``step_cpu_times_s`` the same steps' CPU seconds
    of the measuring thread, ``step_time_s`` the wall median and ``step_time_iqr_s`` its
    interquartile range (None under two samples); ``timing_threads`` the intra-op threads of the
    timed phase; ``load_avg_before`` and ``load_avg_after`` the machine's 1-minute load average
    around the timed steps, compared with ``environment["cores"]`` by :meth:`under_load`.
    ``relative_step_time`` is the load-robust figure: the median over timed steps of the technique's
    step divided by the mean of the two steps of ``relative_to`` (the family's baseline technique,
    or ``reference`` where the workload has none) timed right before and after it, in thread CPU
    time at one thread on CPU (``extra["relative_time_clock"]``), and ``relative_step_time_wall``
    the same ratio in wall-clock time; ``reference_step_time_s`` is the baseline's median wall step.
    Compare techniques and commits on ``relative_step_time``.  ``steps_checked``: how many timed
    steps were compared with the shadow reference (NOTE [ every step checked ]).

    Verdict (see NOTE [ verdicts ] in ``memlab/measurement/verdict.py``):
        status: one of :class:`Status`; ``error`` holds the one-line reason for every non-ok status.
        matches_reference: decided in ``check_dtype`` (float64 unless the technique runs in low
            precision only), where a correct technique agrees to ~1e-12.
        max_abs_error, max_rel_error, tolerance (rtol, atol): the float64 check's errors (max over
            output and every gradient) and the tolerance it was held to.  None: not comparable
            (wrong shape, non-finite values: the reason says which).
        drift_max_abs_error, drift_max_rel_error: the same comparison in the measured ``dtype``
            (float32 drift, e.g. rebuilt inputs of a reversible stack); a number, not a verdict.
    """

    technique: str = _field(FieldKind.KEY)
    workload: str = _field(FieldKind.KEY)
    family: str = _field(FieldKind.KEY)
    params: dict[str, Any] = _field(FieldKind.OTHER)
    device: str = _field(FieldKind.KEY)
    dtype: str = _field(FieldKind.KEY)
    mode: str = _field(FieldKind.KEY)
    status: str = _field(FieldKind.KEY, "ok")
    error: str | None = _field(FieldKind.OTHER, None)
    peak_allocated_bytes: int | None = _field(FieldKind.COUNT, None)
    allocated_baseline_bytes: int | None = _field(FieldKind.COUNT, None)
    peak_reserved_bytes: int | None = _field(FieldKind.COUNT, None)
    reserved_baseline_bytes: int | None = _field(FieldKind.COUNT, None)
    device_used_bytes: int | None = _field(FieldKind.COUNT, None)
    allocated_after_step_bytes: tuple[int, ...] = _field(FieldKind.SERIES, ())
    peak_allocated_per_iteration_bytes: tuple[int, ...] = _field(FieldKind.SERIES, ())
    step_time_s: float | None = _field(FieldKind.FIGURE, None)
    step_times_s: tuple[float, ...] = _field(FieldKind.SERIES, ())
    step_time_iqr_s: float | None = _field(FieldKind.FIGURE, None)
    reference_step_time_s: float | None = _field(FieldKind.FIGURE, None)
    relative_step_time: float | None = _field(FieldKind.FIGURE, None)
    step_cpu_times_s: tuple[float, ...] = _field(FieldKind.SERIES, ())
    relative_step_time_wall: float | None = _field(FieldKind.FIGURE, None)
    relative_to: str | None = _field(FieldKind.OTHER, None)
    timing_threads: int | None = _field(FieldKind.COUNT, None)
    steps_checked: int | None = _field(FieldKind.COUNT, None)
    load_avg_before: float | None = _field(FieldKind.FIGURE, None)
    load_avg_after: float | None = _field(FieldKind.FIGURE, None)
    samples_per_step: int | None = _field(FieldKind.COUNT, None)
    samples_per_s: float | None = _field(FieldKind.FIGURE, None)
    flops: int | None = _field(FieldKind.COUNT, None)
    max_abs_error: float | None = _field(FieldKind.ERROR, None)
    max_rel_error: float | None = _field(FieldKind.ERROR, None)
    check_dtype: str | None = _field(FieldKind.OTHER, None)
    drift_max_abs_error: float | None = _field(FieldKind.ERROR, None)
    drift_max_rel_error: float | None = _field(FieldKind.ERROR, None)
    leak_bytes_per_step: float | None = _field(FieldKind.SIGNED, None)
    predicted_cuda: dict[str, Any] | None = _field(FieldKind.OTHER, None)
    errors_by_tensor: dict[str, float] = _field(FieldKind.OTHER, default_factory=dict)
    tolerance: tuple[float, float] | None = _field(FieldKind.OTHER, None)
    matches_reference: bool | None = _field(FieldKind.OTHER, None)
    param_count: int | None = _field(FieldKind.COUNT, None)
    param_bytes: int | None = _field(FieldKind.COUNT, None)
    grad_bytes: int | None = _field(FieldKind.COUNT, None)
    optimizer: str = _field(FieldKind.CHOICE, DEFAULTS.optimizer)
    optimizer_class: str | None = _field(FieldKind.OTHER, None)
    loss: str = _field(FieldKind.CHOICE, DEFAULTS.loss)
    #: micro-batches accumulated into ``.grad`` per optimizer step (NOTE [ micro-batches of a problem ])
    accumulate: int = _field(FieldKind.COUNT, DEFAULTS.accumulate)
    #: between steps the parameters' gradients are set to ``none`` or zeroed in place (``zero``)
    grads: str = _field(FieldKind.CHOICE, DEFAULTS.grads)
    total_peak_bytes: int | None = _field(FieldKind.COUNT, None)
    peak_by_category_bytes: dict[str, int] = _field(FieldKind.CATEGORIES, default_factory=dict)
    end_by_category_bytes: dict[str, int] = _field(FieldKind.CATEGORIES, default_factory=dict)
    peer: bool = _field(FieldKind.OTHER, False)
    memory_method: dict[str, str] = _field(FieldKind.OTHER, default_factory=dict)
    extra: dict[str, Any] = _field(FieldKind.OTHER, default_factory=dict)
    environment: dict[str, Any] = _field(FieldKind.OTHER, default_factory=dict)
    schema: int = _field(FieldKind.OTHER, SCHEMA_VERSION)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} is not one of {STATUSES}")
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} is not 'train' or 'infer'")

    # -- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return json.loads(self.to_json())

    def to_json(self, **kw: Any) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, default=_json_default, **kw)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Measurement":
        """Rebuild from :meth:`to_dict` output.  Raises ValueError on missing or unknown keys."""
        if not isinstance(data, dict):
            raise ValueError(f"a Measurement must be a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown Measurement field(s): {', '.join(unknown)}")
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise ValueError(f"Measurement is missing field(s): {', '.join(missing)}")
        return cls(**{k: _tupled(v) for k, v in data.items()})

    @classmethod
    def from_json(cls, text: str) -> "Measurement":
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> "Measurement":
        return dataclasses.replace(self, **changes)

    def setting(self) -> Setting:
        """The setting this row was measured in, as far as the row records it: device, dtype, mode,
        optimizer and loss (:data:`memlab.core.setting.KEY_FIELDS`; the others are their defaults: the
        row does not record them, and they change no exact figure).  ``setting().key()`` is what a
        sweep's resume, merge and compare identify the row's point by."""
        return Setting.from_row(vars(self))

    def point(self) -> Point:
        """The point this row was measured at: ``point().key()`` identifies it (:class:`memlab.core.setting.Point`)."""
        return Point(self.technique, self.params, self.setting())

    def under_load(self) -> bool:
        """True when the 1-minute load average before or after the timed steps exceeded
        :data:`UNDER_LOAD_FACTOR` times the cores (:func:`is_under_load`)."""
        return is_under_load((self.load_avg_before, self.load_avg_after), self.environment.get("cores"))

    def step_time_text(self) -> str:
        """``'12.3 ms ± 0.4 ms (IQR, n=5)'``, or ``'-'`` without samples."""
        if self.step_time_s is None:
            return "-"
        n = len(self.step_times_s)
        spread = "" if self.step_time_iqr_s is None else f" ± {self.step_time_iqr_s * 1e3:.1f} ms (IQR, n={n})"
        return f"{self.step_time_s * 1e3:.1f} ms{spread}" + (" [under load]" if self.under_load() else "")

    def analytic_floor_bytes(self) -> float | None:
        """The technique's stated analytic floor for this row's mode (see :func:`analytic_floor`)."""
        return analytic_floor(self.extra, self.mode)

    # -- human output --------------------------------------------------------------------------
    @property
    def verdict(self) -> str:
        """How the row reads (:func:`row_status`): its status, or ``leak_unknown`` for an ``ok`` row of
        fewer than :data:`MIN_LEAK_STEPS` measured steps.  Only ``verdict == "ok"`` is ok."""
        return row_status(vars(self))

    @property
    def reason(self) -> str | None:
        """The one-line reason of a row whose :attr:`verdict` is not ``ok`` (:func:`row_reason`); None for ``ok``."""
        return None if self.verdict == Status.OK else row_reason(vars(self))

    def summary(self) -> str:
        """One line: technique, key parameters, peak allocated/reserved in MiB, step time; a row whose
        step ran whole but reads ``leak_unknown`` ends with ``[leak unknown: why]``."""
        args = " ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        if self.verdict not in (Status.OK, Status.LEAK_UNKNOWN):
            return f"{self.technique} [{args}] {self.device} {self.mode}: {self.status.upper()} {self.error or ''}".rstrip()
        t = self.step_time_text()
        unknown = f" [{self.reason}]" if self.verdict == Status.LEAK_UNKNOWN else ""
        return (
            f"{self.technique} [{args}] {self.device} {self.dtype} {self.mode}: "
            f"peak allocated {fmt_mib(self.peak_allocated_bytes)}, "
            f"peak {'resident' if self.device == 'cpu' else 'reserved'} {fmt_mib(self.peak_reserved_bytes)}, "
            f"step {t}{unknown}"
        )


@dataclass(frozen=True)
class AllocEvent:
    """One allocation (``delta_bytes`` > 0) or free (< 0) through c10's allocator.

    ``stack`` holds every enclosing operator, outermost first (memlab markers left out); ``address`` is
    the block's address in this process, which pairs a free with the allocation it releases (a
    :class:`~memlab.core.record.TimelineEvent`'s ``address`` is the same block's ordinal in the step).  ``place`` says where it would
    live on a GPU (``device``, ``host``, ``cpu_only``) and ``rule`` which rule of
    :data:`memlab.measurement.host_tags.RULES` decided it (NOTE [ device tags ]); ``marks`` are the
    memlab markers around it (``host``, ``iteration0``...), ``stack_end_ns`` the end of each range of
    ``stack`` (ns, same order).
    """

    time_ns: int
    delta_bytes: int
    op: str
    stack: tuple[str, ...]
    address: int = 0
    place: str = "device"
    rule: str = ""
    marks: tuple[str, ...] = ()
    stack_end_ns: tuple[int, ...] = ()


@dataclass(frozen=True)
class Window:
    """A ``memlab::NAME`` marker range (ns); ``detail``: a ``conv`` window's signature (JSON)."""

    name: str
    start_ns: int
    end_ns: int
    detail: str = ""


@dataclass(frozen=True)
class TimelineEvent:
    """One allocation (``delta_bytes`` > 0) or free (< 0) during a step.

    Attributes:
        op: innermost operator that allocated or freed (e.g. ``aten::zeros``).
        stack: enclosing operators, outermost first (at most 4), e.g.
            ``('SliceBackward0', 'aten::slice_backward', 'aten::zeros', 'aten::empty')``.
        phase: ``forward``, ``backward``, ``optimizer`` or ``other``.
        live_bytes: tensor bytes live after this event, above the step's baseline.
        address: the block's identity within the step: the allocation's ordinal (1 for the step's
            first allocation, 2 for the next...); a free carries the ordinal of the allocation it
            releases, 0 for a block allocated before the step.  Not the memory address, which
            varies from run to run: a timeline is byte-identical whenever its figures are.
    """

    op: str
    stack: tuple[str, ...]
    phase: str
    delta_bytes: int
    live_bytes: int
    address: int = 0


@dataclass(frozen=True)
class Timeline:
    """Allocated bytes over one step, event by event (the picture a memory profiler shows)."""

    technique: str
    params: dict[str, Any]
    device: str
    dtype: str
    mode: str
    events: tuple[TimelineEvent, ...]
    baseline_bytes: int
    method: str

    @property
    def peak_bytes(self) -> int:
        return max((e.live_bytes for e in self.events), default=0)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self), sort_keys=True, default=_json_default))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Timeline":
        events = tuple(TimelineEvent(**{**e, "stack": tuple(e["stack"])}) for e in data["events"])
        return cls(**{**data, "events": events})


def _json_default(o: Any) -> Any:
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")
