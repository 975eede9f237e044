"""Reading the analytic expectations techniques state in ``Measurement.extra`` (torch-free)."""
from __future__ import annotations

from typing import Any

__all__ = ["analytic_floor", "activation_figures"]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v >= 0


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
    return (measured if _number(measured) else None), (expected if _number(expected) else None)


def analytic_floor(extra: dict[str, Any] | None, mode: str) -> float | None:
    """The analytic floor (bytes above baseline) a technique stated for ``mode``, or None.

    Techniques put ``analytic_floor_bytes_by_mode`` (``{"train": .., "infer": ..}``) or
    ``analytic_floor_bytes`` (for ``analytic_floor_mode``, train when absent) in ``extra``.
    """
    extra = extra if isinstance(extra, dict) else {}
    by_mode = extra.get("analytic_floor_bytes_by_mode")
    if isinstance(by_mode, dict) and _number(by_mode.get(mode)):
        return by_mode[mode]
    floor = extra.get("analytic_floor_bytes")
    if not _number(floor) or extra.get("analytic_floor_mode", mode) != mode:
        return None
    return floor
