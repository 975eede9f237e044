"""The verdict on one measurement: ``ok``, ``mismatch`` or ``leak`` (``oom``/``error`` come from failures).

# NOTE [ verdicts ]
memlab publishes a figure only for a technique that computes the right thing and holds its memory
steady; everything else is a row with a status and a one-line reason, never ranked.

* **Algorithmic exactness vs float drift.**  ``matches_reference`` is decided in float64 at the
  measured configuration, where a correct technique agrees with plain autograd to ~1e-12 (a
  reversible stack rebuilds its inputs exactly enough that no ReLU mask flips).  In float32 the
  rebuilt inputs of a correct reversible stack differ by ~1e-6, enough to flip a few ReLU masks and
  move some gradient entries by 0.25-0.74: that is drift, not a bug, so the error in the measured
  dtype is reported as a number (``drift_max_abs_error``) and decides nothing, except when it is
  structural (non-finite values, wrong shape, changed inputs), which is wrong in any dtype.
  If the float64 check does not fit in memory at the measured size it runs at the technique's
  check configuration instead (``extra["verdict_config"] == "check"``).
* **Mismatch.**  Outputs or any gradient outside ``technique.tolerance("float64")``, non-finite
  values, a wrong shape, or a changed input/parameter (see :mod:`memlab.measurement.verify`).
* **Every measured step.**  Each traced (CPU) or allocator-counted (CUDA) step and each timed step
  is compared with a shadow reference stepped in lockstep (NOTE [ every step checked ] in
  :mod:`memlab.measurement.step_check`): a difference is ``mismatch`` naming the step.
* **Leak.**  ``allocated_after_step_bytes`` (live bytes after each measured step, above the level
  before the first one) is higher after the last measured step than after the first by more than
  :data:`LEAK_THRESHOLD_BYTES`, whatever the pattern in between (growth at every other step is a
  leak too): :func:`leak_per_step`.  A one-off retention in the first measured step (a cache filled
  once) is not a leak by this rule; a constant offset neither.  This needs an allocation trace that sees frees of storage allocated before the measured
  steps (see NOTE [ exact CPU allocated bytes ]), or MemCNN's freed input would look live.  The
  threshold is 0 bytes: allocated bytes are exact and every ``ok`` row memlab has committed holds
  exactly level after its first measured step.
* **Leak unknown.**  A verdict needs evidence: with two measured steps a leak at every other step
  (after the steps: 1 MiB, 1 MiB) looks level, so a row whose checks all passed over fewer than
  :data:`MIN_LEAK_STEPS` measured steps reads ``leak_unknown`` (a status of
  :class:`memlab.core.record.Status`, decided on read by :func:`memlab.core.record.row_status` from the
  length of ``allocated_after_step_bytes``, so the rows committed before the rule read so too, their
  files unchanged).  The site, a sweep's summary and resume, ``memlab compare`` and ``memlab merge``
  read that, never ``ok``: it is listed with "leak unknown: 2 steps measured, 3 needed" and never
  ranked.  The row's ``status`` field holds what the checks decided (``ok``), so a short run's file is
  what it was.  Exit status: ``memlab measure`` and ``memlab sweep`` exit 0 for it, with the verdict on
  stderr (a count per status for a sweep), by decision: no check failed, the run was asked for too few
  steps to give the leak verdict (``--iterations`` below 3; the default, 5, and ``make demo``/``make
  data``, 3, give it), and a one-step run is how a quick look and the test suite measure.  A mismatch
  or a leak needs no more evidence than it has: growth over two steps is a leak.
  Evidence: docs/evidence/hostile-cases.md#leak-unknown
"""
from __future__ import annotations

from typing import Sequence

from ..core.record import MIN_LEAK_STEPS, fmt_mib

__all__ = ["leak_per_step", "decide", "leak_reason", "LEAK_THRESHOLD_BYTES", "MIN_LEAK_STEPS"]

#: live bytes after the last measured step may exceed those after the first by at most this (bytes)
LEAK_THRESHOLD_BYTES = 0


def leak_per_step(after: Sequence[int]) -> float | None:
    """Mean growth in bytes per step from the first measured step to the last, when it exceeds
    :data:`LEAK_THRESHOLD_BYTES`; else None.

    ``after[i]`` is the live bytes after step ``i`` above the level before step 0.  Decides nothing
    under two steps; under :data:`MIN_LEAK_STEPS` the row reads ``leak_unknown`` (NOTE [ verdicts ]).

    >>> leak_per_step([4, 8, 12])
    4.0
    >>> leak_per_step([2, 2, 2]) is None     # a constant offset: retained once, not growing
    True
    >>> leak_per_step([1, 1, 2, 2, 3])       # growth at every other step
    0.5
    """
    if len(after) < 2:
        return None
    growth = after[-1] - after[0]
    return growth / (len(after) - 1) if growth > LEAK_THRESHOLD_BYTES else None


def leak_reason(per_step: float, after: Sequence[int]) -> str:
    return (f"live memory grows by {fmt_mib(per_step)} ({per_step:.0f} B) per step "
            f"(after each step: {', '.join(fmt_mib(a) for a in after)})")


def decide(exact, drift=None, after: Sequence[int] = (), steps=None) -> tuple[str, str | None, float | None]:
    """``(status, reason, leak bytes per step)`` from the float64 check, the measured-dtype check,
    the check of every measured step and the after-step live bytes.

    Args:
        exact: the :class:`~memlab.measurement.verify.Verification` in float64 (or None: not checked).
        drift: the Verification in the measured dtype (or None); only structural failures count.
        after: ``allocated_after_step_bytes``.
        steps: the :class:`~memlab.measurement.step_check.StepComparison` of the measured steps
            against the shadow reference (or None: not checked).
    """
    if exact is not None and not exact.ok:
        return "mismatch", exact.line()[:500], None
    if drift is not None and drift.structural:
        return "mismatch", f"{drift.reason} ({drift.dtype})"[:500], None
    if steps is not None and not steps.ok:
        return "mismatch", steps.reason[:500], None
    per_step = leak_per_step(after)
    if per_step is not None:
        return "leak", leak_reason(per_step, after), per_step
    return "ok", None, None
