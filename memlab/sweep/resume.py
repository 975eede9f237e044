"""``--resume``: which points a sweep file already holds a finished row for."""
from __future__ import annotations

import os
from typing import Callable

from ..core.record import FINISHED_STATUSES, MIN_LEAK_STEPS, Status, row_status
from ..registry import get_technique
from ..core.setting import DEFAULTS, Point, Setting
from ..results import sweep_records

# FINISHED_STATUSES (memlab.core.record.Status.finished): a resumed sweep does not repeat them (a verdict
# is deterministic); ``oom`` and ``error`` rows may be transient and are measured again.  A row that
# reads ``leak_unknown`` (too few measured steps: NOTE [ verdicts ] in memlab.measurement.verdict) is
# measured again only by a sweep of at least MIN_LEAK_STEPS iterations, which can decide it; a sweep of
# fewer would write the same leak-unknown row again, so for it the point is finished.
__all__ = ["FINISHED_STATUSES", "finished_keys", "is_finished", "resolved_key", "is_done", "already_measured"]


def is_finished(row: dict, iterations: int | None = None) -> bool:
    """Whether a resumed sweep measuring ``iterations`` steps a point (None: not said) leaves ``row``'s
    point alone: its status is in :data:`FINISHED_STATUSES`, and a row that reads ``leak_unknown``
    (:func:`memlab.core.record.row_status`) only while ``iterations`` is None or under
    :data:`~memlab.core.record.MIN_LEAK_STEPS`.

    >>> is_finished({"status": "ok", "allocated_after_step_bytes": [0, 0]}, iterations=3)
    False
    >>> is_finished({"status": "ok", "allocated_after_step_bytes": [0, 0]}, iterations=2)
    True
    """
    if row_status(row) == Status.LEAK_UNKNOWN:
        return iterations is None or iterations < MIN_LEAK_STEPS
    return row.get("status") in FINISHED_STATUSES


def finished_keys(path: str | os.PathLike, warn: Callable[[str], None] | None = None, *,
                  iterations: int | None = None) -> set[tuple]:
    """The :meth:`~memlab.core.setting.Point.key` of every finished row in ``path`` (for --resume).

    A row counts when :func:`is_finished` says so for a sweep of ``iterations`` measured steps (a row
    that reads ``leak_unknown`` does not count for a sweep of at least 3); its key holds its technique,
    its parameters (every resolved one) and its setting's identity (mode, dtype, device type,
    optimizer, loss, the gradient options), so a row measured another way is another point.  Rows are
    read as the site reads them (:func:`memlab.results.sweep_records`): a line that is unreadable, or a
    row the site would refuse (a NaN, negative or non-numeric figure, an ``ok`` whose error is beyond
    its tolerance), is passed to ``warn`` as ``memlab: warning: FILE:LINE: ...`` and does not count, so
    its point is measured again.
    """
    if not os.path.exists(path):
        return set()

    def skipped(msg: str) -> None:
        if warn is not None:
            warn(f"memlab: warning: {msg}; not counted as measured")

    return {Point.from_row(rec).key() for _, rec in sweep_records(path, skipped) if is_finished(rec, iterations)}


def resolved_key(point: Point) -> tuple:
    """The key of the row ``point`` is measured as: its parameters resolved by its technique (a row
    carries every parameter, a planned point only those it was asked for)."""
    return Point(point.technique, get_technique(point.technique).resolve(point.params), point.setting).key()


def is_done(point: Point, done: set[tuple]) -> bool:
    """Whether ``done`` (:func:`finished_keys`) holds ``point``'s row."""
    return resolved_key(point) in done


def already_measured(path: str | os.PathLike, device: str, dtype: str, mode: str,
                     warn: Callable[[str], None] | None = None, *, optimizer: str = DEFAULTS.optimizer,
                     loss: str = DEFAULTS.loss, accumulate: int = DEFAULTS.accumulate,
                     grads: str = DEFAULTS.grads) -> set[tuple[str, str]]:
    """``(technique, canonical params)`` of the finished rows in ``path`` measured in the setting of
    ``device`` (its type), ``dtype``, ``mode``, ``optimizer``, ``loss``, ``accumulate`` and ``grads``:
    :func:`finished_keys` for one setting."""
    want = Setting(device=device, dtype=dtype, mode=mode, optimizer=optimizer, loss=loss, accumulate=accumulate,
                   grads=grads).key()
    return {key[:2] for key in finished_keys(path, warn) if key[2:] == want}
