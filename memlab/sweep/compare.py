"""Compare the exact memory figures of two sweep files, point by point (torch-free).

``memlab compare OLD.jsonl NEW.jsonl`` answers "did re-measuring change any byte?": for every point
present in both files (same technique, parameters, mode, dtype, device, optimizer and loss) the
exact figures of :data:`EXACT_FIELDS` must be equal.  Times, resident memory and load are not
compared: they are not deterministic.  A field missing from one side (an older schema) is skipped
for that point and counted, never reported as a difference.

Rows are read as raw JSON, so files of any schema compare; a line that is not a JSON object is
reported with its file and line number and left out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

__all__ = ["EXACT_FIELDS", "Difference", "Comparison", "point_key", "compare_sweeps", "read_rows"]

#: deterministic figures of a Measurement (bytes, or structures of bytes)
EXACT_FIELDS = ("peak_allocated_bytes", "allocated_baseline_bytes", "allocated_after_step_bytes",
                "peak_allocated_per_iteration_bytes", "param_bytes", "grad_bytes", "total_peak_bytes",
                "peak_by_category_bytes", "end_by_category_bytes")


def point_key(row: dict[str, Any]) -> tuple:
    """What identifies a measured point: technique, parameters, mode, dtype, device, optimizer, loss.

    Rows of schema 1 have no optimizer or loss: they were ``sgd`` and ``given``.
    """
    params = json.dumps(row.get("params", {}), sort_keys=True)
    return (row.get("technique"), params, row.get("mode"), row.get("dtype"), row.get("device"),
            row.get("optimizer") or "sgd", row.get("loss") or "given")


@dataclass(frozen=True)
class Difference:
    key: tuple
    field: str
    old: Any
    new: Any

    def __str__(self) -> str:
        technique, params, mode = self.key[:3]
        return f"{technique} {params} {mode}: {self.field} {self.old!r} -> {self.new!r}"


@dataclass
class Comparison:
    shared: int = 0
    only_old: int = 0
    only_new: int = 0
    fields_compared: int = 0
    fields_skipped: int = 0
    differences: list[Difference] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        verdict = "identical" if self.identical else f"{len(self.differences)} differ"
        return (f"{self.shared} shared points, {self.fields_compared} exact figures compared: {verdict}; "
                f"{self.only_old} points only in the old file, {self.only_new} only in the new; "
                f"{self.fields_skipped} figures missing on one side (older schema) not compared")


def read_rows(path: str | Path, problems: list[str]) -> Iterator[dict[str, Any]]:
    """The JSON-object lines of ``path``; each unreadable line adds ``FILE:LINE: why`` to ``problems``."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                problems.append(f"{path}:{number}: not JSON ({type(exc).__name__})")
                continue
            if not isinstance(row, dict):
                problems.append(f"{path}:{number}: not a JSON object")
                continue
            yield row


def compare_sweeps(old: str | Path, new: str | Path) -> Comparison:
    """Compare :data:`EXACT_FIELDS` for every point present in both files.

    A point measured twice in one file is compared by its last row (what ``--resume`` keeps).
    """
    out = Comparison()
    old_rows = {point_key(r): r for r in read_rows(old, out.problems)}
    new_rows = {point_key(r): r for r in read_rows(new, out.problems)}
    out.only_old = len(old_rows.keys() - new_rows.keys())
    out.only_new = len(new_rows.keys() - old_rows.keys())
    for key in sorted(old_rows.keys() & new_rows.keys(), key=repr):
        out.shared += 1
        a, b = old_rows[key], new_rows[key]
        for name in EXACT_FIELDS:
            if name not in a or name not in b or a[name] is None or b[name] is None:
                out.fields_skipped += 1
                continue
            out.fields_compared += 1
            if a[name] != b[name]:
                out.differences.append(Difference(key, name, a[name], b[name]))
    return out
