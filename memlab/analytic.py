"""Reading the analytic expectations techniques state in ``Measurement.extra`` (torch-free)."""
from __future__ import annotations

from typing import Any

__all__ = ["analytic_floor"]


def analytic_floor(extra: dict[str, Any] | None, mode: str) -> float | None:
    """The analytic floor (bytes above baseline) a technique stated for ``mode``, or None.

    Techniques put ``analytic_floor_bytes_by_mode`` (``{"train": .., "infer": ..}``) or
    ``analytic_floor_bytes`` (for ``analytic_floor_mode``, train when absent) in ``extra``.
    """
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v >= 0

    extra = extra if isinstance(extra, dict) else {}
    by_mode = extra.get("analytic_floor_bytes_by_mode")
    if isinstance(by_mode, dict) and number(by_mode.get(mode)):
        return by_mode[mode]
    floor = extra.get("analytic_floor_bytes")
    if not number(floor) or extra.get("analytic_floor_mode", mode) != mode:
        return None
    return floor
