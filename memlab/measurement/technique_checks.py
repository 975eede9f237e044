"""The automatic reference check every technique gets, built-in or plug-in.

Each technique runs on its workload's small ``check_params`` (plus its own ``check_params``) in
float64 on the CPU; outputs and all gradients must match the workload reference within
``technique.tolerance("float64")`` (the workload's, see :data:`memlab.workload.DEFAULT_TOLERANCES`,
unless the technique declares its own), and the step must leave inputs and parameters unchanged.

By default each technique is checked in its own child process (forked from memlab's warm server,
NOTE [ fork server ] in :mod:`memlab.measurement.forkserver`), with a time limit: a technique that
calls ``sys.exit``/``os._exit``, dies by a signal or never returns is reported as an ``ERROR`` of its
own, and the others are still checked.
"""
from __future__ import annotations

import math
from typing import Any, Iterator

from .reference_check import CheckOutcome, check_outcome, check_technique, config_text, first_line
from ..registry import get_technique, list_techniques
from ..core.setting import DEFAULTS, MAX_TIMEOUT_S
from .runner import WorkerFailed, run_in_subprocess

__all__ = ["check_technique", "check_outcome", "iter_checks", "check_all", "check_timeout", "CheckOutcome",
           "DEFAULT_TIMEOUT_S", "MAX_TIMEOUT_S"]

#: Seconds one isolated technique check may take before it is killed and reported as ``ERROR``.
DEFAULT_TIMEOUT_S = 300.0
#: The prefix of :class:`~memlab.measurement.runner.WorkerFailed` messages, left out of a check's line.
_RUNNER_PREFIX = "measurement subprocess "


def check_timeout(value: Any, name: str = "timeout") -> float:
    """``value`` as seconds (float) when it is a number in (0, :data:`MAX_TIMEOUT_S`]; else ValueError
    naming it and the valid range (``name`` is how the caller spells the setting)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not 0 < seconds <= MAX_TIMEOUT_S:  # NaN fails the comparison too
        raise ValueError(f"{name}={value!r} is not valid: expected seconds in (0, {MAX_TIMEOUT_S}], "
                         f"more than 0 and at most a week (default {DEFAULT_TIMEOUT_S:g})")
    return seconds


def _check_isolated(name: str, mode: str, timeout: float, as_swept: bool = False) -> CheckOutcome:
    """Check one technique in a child process (:func:`~memlab.measurement.runner.run_in_subprocess`)."""
    request = {"kind": "check", "technique": name, "mode": mode, "device": "cpu", "as_swept": as_swept}
    config = config_text(name, as_swept)
    try:
        return CheckOutcome.from_dict(run_in_subprocess(get_technique(name), request, timeout))
    except (WorkerFailed, ValueError) as exc:  # ValueError: a class the child cannot import (__main__)
        message = str(exc)
        return CheckOutcome(name, "ERROR", message=message[len(_RUNNER_PREFIX):]
                            if message.startswith(_RUNNER_PREFIX) else message, config=config)
    except (KeyError, TypeError) as exc:  # a result of another shape: not a check result
        return CheckOutcome(name, "ERROR", message=f"unreadable check result: {first_line(exc)}", config=config)


# NOTE [ two check configurations ]
# A technique's own ``check_params`` may move a workload parameter away from its default (memcnn checks
# at x_requires_grad=False, where its known doubled input gradient does not show), while sweeps measure
# the default.  A PASS at the one and a mismatch row at the other would be two verdicts for one
# technique, so ``memlab check`` checks both: each line names its configuration
# (:func:`~memlab.measurement.reference_check.config_text`), and a FAIL at either is a failure.
def _configurations(name: str) -> list[bool]:
    """``as_swept`` per check of ``name``: ``[False]``, or ``[False, True]`` when its check
    configuration is not what a sweep measures (NOTE [ two check configurations ])."""
    return [False, True] if get_technique(name).swept_overrides() else [False]


def iter_checks(names: list[str] | None = None, *, mode: str = DEFAULTS.mode, isolate: bool = True,
                timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[CheckOutcome]:
    """Each technique's :class:`CheckOutcome` (every technique, or ``names``), as soon as it is known;
    two for a technique whose check configuration is not what sweeps measure (NOTE [ two check
    configurations ]).

    Args:
        names: registered technique names; None: every registered technique.
        mode: ``train`` or ``infer``.
        isolate: True (default): each technique in its own child process, so an exit, a signal or a
            hang is that technique's ``ERROR`` (``timed out after N s``, ``killed by signal 9
            (SIGKILL)``, ``exited with code 0 before writing a result``); False: in this process.
        timeout: seconds each isolated check may take, in (0, :data:`MAX_TIMEOUT_S`] (unused, but still
            validated, when not isolated).

    Raises:
        ValueError: a ``timeout`` out of that range, or not a number.
    """
    seconds = check_timeout(timeout)  # here, not at the first next(): a bad value fails before any check
    chosen = list(names or list_techniques())
    return (_check_isolated(name, mode, seconds, as_swept) if isolate else check_outcome(name, mode=mode, as_swept=as_swept)
            for name in chosen for as_swept in _configurations(name))


def check_all(names: list[str] | None = None, *, mode: str = DEFAULTS.mode, isolate: bool = True,
              timeout: float = DEFAULT_TIMEOUT_S) -> list[CheckOutcome]:
    """Check every technique (or ``names``); one technique's failure never stops the others.

    See :func:`iter_checks` for ``isolate`` and ``timeout`` (seconds per technique).
    """
    return list(iter_checks(names, mode=mode, isolate=isolate, timeout=timeout))
