"""``--resume``: which points a sweep file already holds a finished row for."""
from __future__ import annotations

import json
import os
from typing import Callable

from ..record import FINISHED_STATUSES
from ..registry import get_technique
from .plan import SweepPoint

# FINISHED_STATUSES (memlab.record.Status.finished): a resumed sweep does not repeat them (a verdict
# is deterministic); ``oom`` and ``error`` rows may be transient and are measured again.
__all__ = ["FINISHED_STATUSES", "already_measured", "is_done"]


def already_measured(path: str | os.PathLike, device: str, dtype: str, mode: str,
                     warn: Callable[[str], None] | None = None, *, optimizer: str = "sgd",
                     loss: str = "given") -> set[tuple[str, str]]:
    """``(technique, canonical params)`` keys of the finished rows in ``path`` (for --resume).

    A row counts when its status is in :data:`FINISHED_STATUSES` and it was measured with the same
    device type, dtype, mode, optimizer and loss.  A point is identified by the parameters it was
    asked for; the stored rows carry every resolved parameter, so a stored row matches a point when
    the point's parameters agree with it.  Rows are read as the site reads them
    (:func:`memlab.results.sweep_records`): a line that is unreadable, or a row the site would refuse
    (a NaN, negative or non-numeric figure, an ``ok`` whose error is beyond its tolerance), is passed
    to ``warn`` as ``memlab: warning: FILE:LINE: ...`` and does not count, so its point is measured again.
    """
    from ..results import sweep_records

    if not os.path.exists(path):
        return set()

    def skipped(msg: str) -> None:
        if warn is not None:
            warn(f"memlab: warning: {msg}; not counted as measured")

    rows = [rec for _, rec in sweep_records(path, skipped)]
    return {(r["technique"], json.dumps(r["params"], sort_keys=True)) for r in rows
            if r["status"] in FINISHED_STATUSES and r["device"].split(":")[0] == device.split(":")[0]
            and r["dtype"] == dtype and r["mode"] == mode and (r.get("optimizer") or "sgd") == optimizer
            and (r.get("loss") or "given") == loss}


def is_done(point: SweepPoint, done: set[tuple[str, str]]) -> bool:
    full = get_technique(point.technique).resolve(point.params)
    return (point.technique, json.dumps(full, sort_keys=True, default=list)) in done
