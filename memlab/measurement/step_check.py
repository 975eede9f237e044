"""Every measured step checked: a technique's outputs, gradients and updated parameters, step by step,
against the workload reference stepped in lockstep on its own copy of the problem.

# NOTE [ every step checked ]
The float64 check (:mod:`memlab.measurement.verify`) runs one step on a fresh problem.  A technique
that is right on its first call and wrong afterwards (a stale cache, a buffer reused across steps,
state carried from one step to the next) passes it.  So every step memlab measures is checked too:

* the step's output, every gradient (before the optimizer) and every parameter (after it) are
  *sampled* (:data:`SAMPLES` entries per tensor, evenly spaced in C order, every entry of a small
  tensor) into NumPy arrays.  On CPU the samples are read through NumPy views of the tensors' memory
  and NumPy indexing, so they allocate nothing in PyTorch's allocator: the allocation-traced steps, and the
  CUDA prediction replayed from their trace, are the same bytes with or without the check.  On
  CUDA the tensor is copied to the host first (host memory: no device figure moves).
* a *shadow* problem, built with the same seed, runs the workload reference with the same optimizer
  (the technique's own when it supplies one: NOTE [ its own optimizer ]), one step for each of the
  technique's, sampled the same way, outside any traced window: its allocations reach no figure.
  Each shadow step starts from the technique's own values of the leaves at the start of that step
  (copied in the timed phase; kept as NumPy copies of the traced steps' starting values, outside
  PyTorch's allocator, in the memory phase).  Without that the two trajectories part: a correct
  reversible stack in float32 whose gradients are 1e8 moved its parameters by 1e4 at lr 1e-4, and
  at its third step differed from an unsynchronised shadow by 150 times the gradient's size.
* the first step fixes the drift ``d0``: the largest error of its output or a gradient against the
  shadow, relative to that tensor's largest reference magnitude, in the measured dtype (their
  values are the float64 check's business).  The first step's updated parameters, and every tensor
  of every later step, pass when the largest error is at most ``(DRIFT_FACTOR * d0 + FLOOR_ULPS *
  eps) * max|reference|``
  (``eps`` the dtype's machine epsilon): starting from the same values, the technique may differ
  from the reference as much as it did at first.  One drift for all tensors, not one each: a
  correct reversible stack in float32 flips a few ReLU masks per step, in whichever tensors the
  rounding reaches.  The dtype's check tolerance would be far too loose here (float32 ``atol`` 1e-3
  for the chained matmul): a stale output is off by one optimizer update (parameters move by ``lr *
  grad``), orders of magnitude beyond the float32 rounding of the chunked and tensor-train
  families.  A technique that rebuilds its inputs (``drifts_in_low_precision``: reversible stacks,
  RevNets, MemCNN, RevLib) is checked for structure only at its later steps in float32 (a shape, a
  missing gradient, a NaN): its rounding flips ReLU masks in whichever tensors it reaches, so one
  step's drift bounds nothing (a gradient that agreed to 2e-5 at step 1 differed by 3.5e-3 at step
  3), and where the workload's gradients are large enough to throw the weights far in one update
  (residual_stack at depth 4, batch 512, width 512: gradients of 1e8 at lr 1e-4) the rebuilt inputs
  lose every digit by the third step, which the reference step started from the same weights does
  not.  The float64 check remains the verdict on their maths.
  The parameters after the update also differ through the optimizer's own state (momentum, Adam's
  moments), built from slightly different gradients; at ``lr = 1e-4`` that stays within the drift.

Sampling sees a fault that touches a few entries only when a sampled entry is among them; a fault of
a whole tensor (stale, zeroed, doubled, a wrong update) is always seen.

NOTE [ updates of undetermined sign ]
A gradient entry that is zero in exact arithmetic is rounding in float32, of either sign, and Adam's
update ``lr * m / (sqrt(v) + eps)`` normalises it: the first step moves such an entry by a sizeable
fraction of ``lr`` in a direction the rounding picks.  Attention has such entries: the key projection's
bias shifts every score of a softmax row by the same amount, so its gradient is zero (float64: at most
1.4e-18; float32: 5.2e-10 against 1.6e-2 for the value bias, the transformer at seq 64, hidden 64).
Two correct float32 steps (``sdpa`` and the eager reference, Adam) then disagreed on the updated
``qkv.bias`` by 8.6e-6 where the drift allowed 2.0e-6.  So the parameters after the update are
compared over the entries whose direction the steps determine: an entry is left out, from that step
on, once both the technique's and the reference's gradient of it are within the drift allowance of
zero (``(DRIFT_FACTOR * d0 + FLOOR_ULPS * eps) * max|reference gradient|``) and not both exactly zero.
From that step on, not at that step only: the optimizer's state carries the rounding, and a later
step whose two gradients of the entry were both exactly 0 still moved it by Adam's momentum of the
earlier noise, 2.0e-6 apart (``sdpa``, timed step 9).  An entry whose gradients were exactly zero at
every step so far stays compared: neither update may move it.  The gradients themselves are still
held to the allowance; a wrong update of a whole tensor is still seen at its other entries.

NOTE [ its own optimizer ]
A technique that supplies its optimizer (:meth:`memlab.Technique.make_optimizer`) is checked by
applying a fresh instance of that optimizer, over the shadow's parameters, to the reference
gradients: the parameters after each step must agree.  An update that depends on anything but the
parameters, their gradients and the optimizer's own state (a step that reads the technique's
buffers, state shared between instances) then shows as a parameter mismatch naming the step.
"""
from __future__ import annotations

import ctypes
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..core.setting import DEFAULTS
from .step import make_step

__all__ = ["SAMPLES", "DRIFT_FACTOR", "FLOOR_ULPS", "StepLog", "StepComparison", "StepChecker", "checker_for",
           "compare_logs", "Shadow", "ReferenceAsTechnique", "Float64Arbiter",
           "build_problem"]

#: sampled entries per tensor (every entry of a tensor with at most this many)
SAMPLES = 1024
#: a later step may differ from the shadow reference by this multiple of the first step's drift ...
DRIFT_FACTOR = 8.0
#: ... plus this many machine epsilons of the tensor's largest reference magnitude
FLOOR_ULPS = 16

# NOTE [ drift arbitrated in float64 ]
# The first step's drift ``d0`` bounds a later step only while the reference's own float32 rounding
# stays what it was.  It does not have to: the error of a float32 backward pass through L layers is
# of order L * eps * kappa, kappa the conditioning of that step's Jacobian chain, and kappa moves with
# the weights.  RevNet-578 (revnet_nosave, batch 4, width 4) agreed with plain autograd to 8.8e-7 at
# its first step and differed by 1.2e-3 at its second; against the same step in float64, from the
# same starting values, revnet_nosave was off by at most 3.6e-6 (every gradient) and plain autograd
# in float32 by 2.0e-3: the reference's rounding, not the technique's.  So a later step that exceeds
# the drift allowance is arbitrated before it is called a mismatch: the reference's step is taken
# again in float64 from the technique's starting values, and the step passes when every output and
# gradient of the technique is within ``DRIFT_FACTOR * max(d0, e_ref) + FLOOR_ULPS * eps`` of it,
# relative to its largest entry, ``e_ref`` the float32 reference's own distance from it: the technique
# may be as far from the maths as float32 autograd is at that step.  A technique that is wrong (a stale
# output, a wrong update) is off by far more than the float32 reference and stays a mismatch.  The
# float64 step runs only on such a step (never in a float64 measurement; not for the parameters after
# the update, whose optimizer state the arbiter lacks), outside every traced and timed window.


_NUMPY_DTYPES = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16,
                 torch.bfloat16: np.int16, torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16,
                 torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_}


def _host_view(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor's memory, made from its data pointer and strides.

    Not ``Tensor.numpy()``: that marks the storage as shared with NumPy, and a technique that frees
    its input's storage afterwards (MemCNN's ``storage().resize_(0)``) then fails ("Trying to resize
    storage that is not resizable").  The view is read at once and never kept.
    """
    if t.numel() == 0:
        return np.zeros(tuple(t.shape), dtype=_NUMPY_DTYPES[t.dtype])
    itemsize = t.element_size()
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    buffer = (ctypes.c_char * (span * itemsize)).from_address(t.data_ptr())
    flat = np.frombuffer(buffer, dtype=_NUMPY_DTYPES[t.dtype], count=span)
    return np.lib.stride_tricks.as_strided(flat, shape=tuple(t.shape), strides=[st * itemsize for st in t.stride()],
                                           writeable=False)


def _widen_bfloat16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values held as their int16 bits (NumPy has no bfloat16) -> the same values in float32
    (exact: a bfloat16 is the top half of a float32)."""
    return ((bits.astype(np.int32) & 0xFFFF) << 16).astype(np.uint32).view(np.float32)


def _host_copy(t: torch.Tensor) -> np.ndarray:
    """A NumPy copy of a CPU tensor's values that ``torch.from_numpy`` reads back as the same numbers:
    bfloat16 widened to float32 (its int16 bits would be read back as integers: a bfloat16 weight of
    0.5, bits 16128, came back as 16128.0 and the shadow's second step overflowed)."""
    arr = _host_view(t)
    return _widen_bfloat16(arr) if t.dtype == torch.bfloat16 else np.array(arr, copy=True)


def _samples(t: torch.Tensor) -> np.ndarray:
    """Up to :data:`SAMPLES` entries of ``t`` as float64, evenly spaced in C order (on CPU no torch
    allocation: a NumPy view of its memory and NumPy fancy indexing)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype not in _NUMPY_DTYPES:
        return np.full(1, np.nan)
    arr = _host_view(t)
    if arr.size > SAMPLES:
        flat = np.linspace(0, arr.size - 1, SAMPLES).astype(np.int64)
        arr = arr[np.unravel_index(flat, arr.shape)]
    else:
        arr = arr.reshape(-1)
    if t.dtype == torch.bfloat16:
        arr = _widen_bfloat16(arr)
    # a copy: a float64 tensor of at most SAMPLES entries would otherwise be kept as a view of memory
    # the allocator reuses once the tensor is freed (the samples then read whatever lands there)
    return np.array(arr, dtype=np.float64, copy=True)


class StepLog:
    """Samples of the tensors of each step taken: ``steps()[k]`` maps a name to ``(shape, samples)``,
    or is None for a step taken while the log was not :attr:`active` (a resident or FLOP-counted
    step: it moves the parameters, so it is counted to keep the shadow in lockstep, not compared).

    Names: ``output``, ``grad:<i>`` (the i-th leaf's gradient before the optimizer), ``param:<i>``
    (the i-th leaf after it).  The calls come from the training step
    (:func:`memlab.measurement.step.make_step`'s ``capture``); :meth:`next_step` closes a step.
    """

    def __init__(self, keep: bool = True, snapshots: bool = False) -> None:
        self.active = True
        self.keep = keep  # False: sample (the same work, for a symmetric timing) but store nothing
        self.snapshots = snapshots  # keep each recorded step's starting leaves (NOTE [ every step checked ])
        self._starts: dict[int, list[np.ndarray]] = {}
        self._taken = 0
        self._steps: list[dict[str, tuple[tuple[int, ...], np.ndarray]] | None] = []
        self._current: dict[str, tuple[tuple[int, ...], np.ndarray]] = {}
        self._overhead = [0.0, 0.0]  # wall and thread CPU seconds spent sampling since last taken
        self.sampled_s = 0.0  # wall seconds spent sampling over the log's life (the timed phase's check cost)

    def record(self, name: str, t) -> None:
        if not self.active:
            return
        w0, c0 = time.perf_counter(), time.thread_time()
        if isinstance(t, torch.Tensor):
            self._current[name] = (tuple(t.shape), _samples(t))
        else:  # None where a tensor is expected (a missing gradient): never equal to a tensor
            self._current[name] = (("not a tensor", type(t).__name__), np.full(1, np.nan))
        wall = time.perf_counter() - w0
        self._overhead[0] += wall
        self._overhead[1] += time.thread_time() - c0
        self.sampled_s += wall

    def take_overhead(self) -> tuple[float, float]:
        """``(wall, thread CPU)`` seconds spent sampling since the last call: a timed step subtracts
        them, so the check costs the technique no time (NOTE [ timed phase ])."""
        taken, self._overhead = tuple(self._overhead), [0.0, 0.0]
        return taken

    def begin(self, leaves) -> None:
        """At the start of a training step: with :attr:`snapshots`, copy the leaves' values into NumPy
        memory (after the first step: the shadow starts equal), so the shadow can start its step
        where the technique started it."""
        if self.active and self.snapshots and self._taken > 0:
            self._starts[self._taken] = [_host_copy(t.detach().cpu()) for t in leaves]

    def start_of(self, index: int) -> list[np.ndarray] | None:
        """The leaves' values at the start of step ``index`` (0-based), if kept."""
        return self._starts.get(index)

    def output(self, out) -> None:
        self.record("output", out)

    def gradients(self, leaves) -> None:
        for i, leaf in enumerate(leaves):
            self.record(f"grad:{i}", leaf.grad)

    def parameters(self, leaves) -> None:
        for i, leaf in enumerate(leaves):
            self.record(f"param:{i}", leaf)

    def next_step(self) -> None:
        self._taken += 1
        if self.keep:
            self._steps.append(self._current if self.active else None)
        self._current = {}

    def steps(self) -> list[dict[str, tuple[tuple[int, ...], np.ndarray]] | None]:
        """Every step taken and kept, in order (None: taken while inactive)."""
        return list(self._steps)

    def taken(self) -> int:
        """Steps taken so far (kept or not)."""
        return self._taken

    def pop_last(self) -> dict[str, tuple[tuple[int, ...], np.ndarray]] | None:
        """The last step's samples, removed from the log (a long timed run keeps no history)."""
        return self._steps.pop() if self._steps else None

    def last_recorded(self) -> int:
        """How many steps the shadow must take to reach the last recorded one (0: none recorded)."""
        return max((k + 1 for k, s in enumerate(self._steps) if s is not None), default=0)


@dataclass(frozen=True)
class StepComparison:
    """The outcome of :func:`compare_logs`.

    Attributes:
        steps: how many steps were compared.
        first_step_error: the first step's relative drift ``d0`` (largest error over the tensor's
            largest reference magnitude), in the measured dtype.
        max_error: the largest absolute error over all steps; None when it is not finite (the
            reference itself overflowed where the technique did too).
        reason: None when every step passed; else one line naming the step (counted from 1, the
            first step the technique took) and the tensor.
    """

    steps: int
    first_step_error: float
    max_error: float | None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def _structural(name: str, got: dict, shape, b: np.ndarray) -> str | None:
    """Why ``got[name]`` cannot be compared with the reference's ``(shape, b)``, or None."""
    if name not in got:
        return f"{name} missing"
    gshape, a = got[name]
    if gshape != shape:
        return f"{name} has shape {list(gshape)}, the reference {list(shape)}"
    if not np.all(np.isfinite(a)) and np.all(np.isfinite(b)):
        return f"{name} is not finite where the reference is"
    return None


def _errors(got: dict, want: dict) -> tuple[dict[str, tuple[float, float]], str | None]:
    """Per tensor of one step ``(largest absolute error, largest |reference|)``, or the structural
    reason the step cannot be compared."""
    errors: dict[str, tuple[float, float]] = {}
    for name, (shape, b) in want.items():
        reason = _structural(name, got, shape, b)
        if reason is not None:
            return errors, reason
        with np.errstate(invalid="ignore"):  # inf - inf where both overflowed: NaN, ignored below
            err = np.abs(got[name][1] - b)
        errors[name] = (_largest(err), _largest(np.abs(b)))
    return errors, None


def _largest(a: np.ndarray) -> float:
    """The largest entry that is not NaN; NaN when every entry is (a reference that overflowed where
    the technique did too: nothing to compare, and no RuntimeWarning); 0.0 for no entries."""
    if not a.size:
        return 0.0
    kept = a[~np.isnan(a)]
    return float(kept.max()) if kept.size else math.nan


def _update_errors(got: dict, want: dict, d0: float, eps: float,
                   undetermined: dict[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """``param:<i>``'s ``(largest absolute error, largest |reference|)`` over the entries whose update
    the steps so far determine (NOTE [ updates of undetermined sign ]).  ``undetermined`` maps a
    parameter's name to its sampled entries left out so far, and gains this step's: those whose two
    gradients ``grad:<i>`` are both within the drift allowance of zero and not both exactly zero."""
    allowance = DRIFT_FACTOR * d0 + FLOOR_ULPS * eps
    errors: dict[str, tuple[float, float]] = {}
    for name, (shape, b) in want.items():  # _errors passed: every name is in got with want's shape
        grad = "grad:" + name[len("param:"):]
        if not name.startswith("param:") or grad not in want or want[grad][0] != shape:
            continue  # no gradient of the same shape (sampled at the same entries): compared whole
        g_ref, g_got, a = want[grad][1], got[grad][1], got[name][1]
        limit = allowance * _largest(np.abs(g_ref))
        now = (np.abs(g_ref) <= limit) & (np.abs(g_got) <= limit) & ((g_ref != 0) | (g_got != 0))
        left_out = undetermined[name] = now | undetermined.get(name, np.zeros(b.shape, dtype=bool))
        with np.errstate(invalid="ignore"):
            err = np.abs(a - b)[~left_out]
        errors[name] = (_largest(err), _largest(np.abs(b)))
    return errors


def _relative_drift(errors: dict[str, tuple[float, float]]) -> float:
    """The largest error of a step relative to its tensor's largest reference magnitude."""
    return max((err / scale for err, scale in errors.values() if scale > 0), default=0.0)


class StepChecker:
    """Compares a technique's steps with the shadow's as they come (NOTE [ every step checked ]):
    :meth:`add` each pair, then :meth:`result`.  The first pair fixes the drift ``d0``: the largest
    error of its output or a gradient relative to that tensor's largest reference magnitude.  From
    then on (the first step's updated parameters included) each tensor may differ by
    ``(DRIFT_FACTOR * d0 + FLOOR_ULPS * eps) * max|reference|``;
    the first step is only checked for structure (its values are the float64 check's business).
    ``eps``: the measured dtype's machine epsilon; ``what`` names the steps in the reason
    (``measured step``, ``timed step``), counted from 1, the technique's first step."""

    def __init__(self, eps: float, what: str = "step", *, structural_only: bool = False, arbiter=None):
        self.eps, self.what, self.structural_only = eps, what, structural_only
        #: ``arbiter(k)``: the float64 reference's samples of step ``k`` from the technique's starting
        #: values, or None (NOTE [ drift arbitrated in float64 ])
        self.arbiter = arbiter
        self.arbitrated: list[int] = []  # the steps the float64 arbiter passed
        self.d0: float | None = None
        self.first = 0  # the step that fixed d0
        self.steps = 0
        self.worst = 0.0
        self.reason: str | None = None
        #: per parameter, the sampled entries whose update no step compares (NOTE [ updates of
        #: undetermined sign ])
        self.undetermined: dict[str, np.ndarray] = {}

    def add(self, k: int, got: dict, want: dict | None) -> None:
        if self.reason is not None:
            return
        self.steps += 1
        if want is None:
            self.reason = f"the shadow reference took no step {k}"
            return
        errors, reason = _errors(got, want)
        if reason is None and self.d0 is None:
            # the drift of what the step computes (output, gradients); the parameters after the update
            # are held to it from the first step on: an update the reference gradients do not give
            self.d0, self.first = _relative_drift({n: e for n, e in errors.items() if not n.startswith("param:")}), k
            errors = {n: e for n, e in errors.items() if n.startswith("param:")}
        if reason is None:
            errors.update(_update_errors(got, want, self.d0 or 0.0, self.eps, self.undetermined))
        self.worst = max([self.worst, *(e for e, _ in errors.values())])
        if reason is None and not self.structural_only:
            reason = _excess(errors, self.d0 or 0.0, self.eps)
            computed = {n: e for n, e in errors.items() if not n.startswith("param:")}
            if reason is not None and self.arbiter is not None and _excess(computed, self.d0 or 0.0, self.eps):
                # the output and gradients arbitrated; the parameters after the update are not (the
                # arbiter lacks the optimizer's state): they are held to the drift rule once those pass
                updated = {n: e for n, e in errors.items() if n.startswith("param:")}
                reason = self._arbitrate(k, got, want, reason) or _excess(updated, self.d0 or 0.0, self.eps)
        if reason is not None:
            self.reason = f"{self.what} {k}: {reason} (first step's relative drift {self.d0 or 0.0:.3g})"

    def _arbitrate(self, k: int, got: dict, want: dict, reason: str) -> str | None:
        """NOTE [ drift arbitrated in float64 ]: None when the technique's step is as close to the float64
        reference as the float32 reference's own step allows, else the reason, both distances named."""
        exact = self.arbiter(k)
        if exact is None:
            return reason
        for name, (shape, b64) in exact.items():
            if name.startswith("param:") or name not in want or name not in got:
                continue
            scale = _largest(np.abs(b64))
            if scale == 0.0 or not np.all(np.isfinite(b64)):
                continue
            with np.errstate(invalid="ignore"):
                mine = _largest(np.abs(got[name][1] - b64)) / scale
                ref = _largest(np.abs(want[name][1] - b64)) / scale
            allowed = DRIFT_FACTOR * max(self.d0 or 0.0, ref) + FLOOR_ULPS * self.eps
            if not mine <= allowed:
                return (f"{reason}; against the float64 reference {name} differs by {mine:.3g} of its largest "
                        f"entry, the float32 reference by {ref:.3g} (allowed {allowed:.3g})")
        self.arbitrated.append(k)
        return None

    def result(self) -> StepComparison:
        # a reference that itself overflowed (float32 SGD diverging) gives an infinite error: no number
        # to record (JSON has none for it), so None; the verdict is the reason's business
        worst = self.worst if math.isfinite(self.worst) else None
        return StepComparison(self.steps, self.d0 or 0.0, worst, self.reason)


def checker_for(technique, dtype: torch.dtype, what: str, arbiter=None) -> StepChecker:
    """The :class:`StepChecker` for ``technique``'s steps in ``dtype``: structure only for a technique
    that :attr:`~memlab.Technique.drifts_in_low_precision` in a dtype other than float64; ``arbiter``
    (NOTE [ drift arbitrated in float64 ]) only below float64."""
    return StepChecker(torch.finfo(dtype).eps, what, structural_only=bool(
        getattr(technique, "drifts_in_low_precision", False)) and dtype != torch.float64,
        arbiter=arbiter if dtype != torch.float64 else None)


class Float64Arbiter:
    """``arbiter(k)`` for :class:`StepChecker`: the workload reference's step ``k`` in float64, from the
    technique's values at the start of that step (``start_of(k)``: NumPy or tensors in
    ``problem.leaves()`` order, or None), sampled like every step (NOTE [ drift arbitrated in float64 ]).
    The float64 problem is built on first use, so a run that never needs it pays nothing."""

    def __init__(self, technique, device, mode: str, seed: int, optimizer: str, loss: str, start_of,
                 accumulate: int = DEFAULTS.accumulate, grads: str = DEFAULTS.grads):
        self._args = (technique, device, torch.float64, mode, seed, optimizer, loss, accumulate, grads)
        self._start_of = start_of
        self._shadow: Shadow | None = None

    def __call__(self, k: int):
        start = self._start_of(k)
        if start is None:
            return None
        if self._shadow is None:
            self._shadow = Shadow(*self._args)
        self._shadow.sync(start)
        self._shadow()
        return self._shadow.log.pop_last()


def compare_logs(got: StepLog, want: StepLog, checker: StepChecker) -> StepComparison:
    """Compare a technique's recorded steps (``got``) with the shadow reference's (``want``), step by
    step, with ``checker`` (:func:`checker_for`).  Steps the technique took unrecorded (None) are skipped; ``want``
    must have recorded up to the technique's last recorded step."""
    b = want.steps()
    for k, sa in enumerate(got.steps(), start=1):
        if sa is not None:
            checker.add(k, sa, b[k - 1] if k - 1 < len(b) else None)
    return checker.result()


def _excess(errors: dict[str, tuple[float, float]], d0: float, eps: float) -> str | None:
    """The first tensor whose error exceeds its allowance ``(DRIFT_FACTOR * d0 + FLOOR_ULPS * eps) *
    max|reference|``, as a reason; None when none does."""
    for name, (err, scale) in errors.items():
        allowed = (DRIFT_FACTOR * d0 + FLOOR_ULPS * eps) * scale
        if err > allowed:
            return f"{name} differs from the reference by {err:.3g} (allowed {allowed:.3g})"
    return None


class ReferenceAsTechnique:
    """A technique's workload reference as a step-able technique (``make_step`` calls ``forward``)."""

    def __init__(self, technique):
        self.forward = technique.reference
        # the batch a step with accumulation splits (memlab.measurement.micro_batches)
        self.workload, self.config = technique.workload, technique.config


def build_problem(technique, device, dtype, seed: int, loss: str):
    """``technique.build(device, dtype, seed)``; with a loss other than ``given`` the problem drops its
    upstream gradient (the loss computes it inside the step)."""
    problem = technique.build(device, dtype, seed)
    if loss != "given":
        problem.grad_output = None
    return problem


class Shadow:
    """The workload reference stepped on its own copy of a technique's problem (same seed), with the
    same optimizer choice, or a fresh instance of the technique's own optimizer (NOTE [ its own
    optimizer ]), and the same gradient options (``accumulate``, ``grads``: the reference accumulates
    its micro-batches as the technique does); every step sampled into :attr:`log`.  Call it to take
    one step."""

    def __init__(self, technique, device, dtype, mode: str, seed: int, optimizer: str, loss: str,
                 accumulate: int = DEFAULTS.accumulate, grads: str = DEFAULTS.grads):
        self.problem = build_problem(technique, device, dtype, seed, loss)
        params = [p for p in self.problem.model.parameters() if p.requires_grad]
        own = technique.make_optimizer(params, optimizer) if mode == "train" and params else None
        self.log = StepLog()
        self.step, _ = make_step(ReferenceAsTechnique(technique), self.problem, mode,
                                 optimizer=own if own is not None else optimizer, loss=loss,
                                 accumulate=accumulate, grads=grads, capture=self.log)

    def __call__(self) -> None:
        self.step()

    @torch.no_grad()
    def sync(self, values) -> None:
        """Set the shadow's leaves to ``values`` (tensors or NumPy arrays, in ``problem.leaves()``
        order): its next step starts where the technique's did."""
        for leaf, v in zip(self.problem.leaves(), values):
            leaf.copy_(torch.from_numpy(v) if isinstance(v, np.ndarray) else v)

    def follow(self, log: StepLog) -> None:
        """Take as many steps as ``log`` needs to be compared (:meth:`StepLog.last_recorded`), each from
        the technique's starting values where the log kept them."""
        for index in range(len(self.log.steps()), log.last_recorded()):
            start = log.start_of(index)
            if start is not None:
                self.sync(start)
            self.step()
