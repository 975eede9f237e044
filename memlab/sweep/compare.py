"""Compare the exact memory figures of two sweep files, point by point (torch-free).

``memlab compare OLD.jsonl NEW.jsonl`` answers "did re-measuring change any byte?": for every point
present in both files (its :meth:`memlab.core.setting.Point.key`: technique, parameters, mode, dtype,
device type, optimizer, loss and the gradient options) the exact figures of :data:`EXACT_FIELDS`
must be equal, and so must the verdict each row reads as (:func:`memlab.core.record.row_status`).
Times, resident memory and load are not compared: they are not deterministic.  A field missing from
one side (an older schema) is skipped for that point and counted, never reported as a difference.
A point measured over different step counts in the two files: NOTE [ more measured steps ].

Rows are read as raw JSON, so files of every schema this memlab knows compare; a line that is not a
row is reported with its file and line number and left out.  The command is a gate, so it fails
closed (NOTE [ a sweep file, as a gate reads it ]): a file that is not a memlab sweep file at all, or
a row of a schema newer than this memlab, is refused (:class:`NotASweepFile`), never "identical".
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..core.record import SCHEMA_VERSION, Status, row_status
from ..core.setting import Point

__all__ = ["EXACT_FIELDS", "SERIES_FIELDS", "Difference", "Comparison", "point_key", "compare_sweeps", "read_rows", "sweep_lines",
           "NotASweepFile", "first_difference"]

#: deterministic figures of a Measurement (bytes, or structures of bytes)
EXACT_FIELDS = ("peak_allocated_bytes", "allocated_baseline_bytes", "allocated_after_step_bytes",
                "peak_allocated_per_iteration_bytes", "param_bytes", "grad_bytes", "total_peak_bytes",
                "peak_by_category_bytes", "end_by_category_bytes")
# NOTE [ more measured steps ]
# A point measured over more steps in one file than in the other (the rows of data/sweeps were measured
# over two, `make data` now measures three) has its per-step series (SERIES_FIELDS) compared over the
# steps both measured, and the point is counted (Comparison.steps_apart): step i of a deterministic
# step allocates the same bytes whatever the count, so more steps is no changed byte.  The verdict
# `leak_unknown` (too few steps, NOTE [ verdicts ] in memlab.measurement.verdict) becoming `ok` in a
# new file of more steps is counted too (Comparison.leak_decided), not a difference; any other change
# of verdict is one: a leak the third step shows, or a new file of fewer steps, which proves less.
# Evidence: docs/evidence/hostile-cases.md#leak-unknown
#: exact figures that hold one value per measured step (NOTE [ more measured steps ])
SERIES_FIELDS = ("allocated_after_step_bytes", "peak_allocated_per_iteration_bytes")


def point_key(row: dict[str, Any]) -> tuple:
    """What identifies a measured point: :meth:`memlab.core.setting.Point.key` of the row (technique,
    parameters, mode, dtype, device type, optimizer, loss, the gradient options).

    Rows of schema 1 have no optimizer or loss: they read as the defaults (``sgd`` and ``given``).
    """
    return Point.from_row(row).key()


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
    #: shared points measured over a different number of steps in the two files (NOTE [ more measured steps ])
    steps_apart: int = 0
    #: shared points that read ``leak_unknown`` in the old file and ``ok`` in the new, measured over more steps
    leak_decided: int = 0

    @property
    def identical(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        verdict = "identical" if self.identical else f"{len(self.differences)} differ"
        steps = (f"; {self.steps_apart} points measured over different step counts, their per-step figures "
                 f"compared over the steps both measured" if self.steps_apart else "")
        decided = (f"; {self.leak_decided} points leak unknown in the old file and ok in the new (more steps "
                   f"measured)" if self.leak_decided else "")
        return (f"{self.shared} shared points, {self.fields_compared} exact figures compared: {verdict}; "
                f"{self.only_old} points only in the old file, {self.only_new} only in the new; "
                f"{self.fields_skipped} figures missing on one side (older schema) not compared{steps}{decided}")


class NotASweepFile(ValueError):
    """A file a gate (``memlab compare``, ``memlab merge``) refuses; the message is one line naming it."""


# NOTE [ a sweep file, as a gate reads it ]
# compare and merge are gates (a CI job passes on "identical"), so what they accept is narrow:
# * a memlab row is a JSON object with a non-empty string ``technique``, an object ``params`` and fields
#   that name its point (point_key) of types a key can hold;
# * the file's first non-blank line must be a row: an empty file, random bytes, a TOML file, ``[1,2,3]``
#   or ``{"a": 1}`` is refused whole (NotASweepFile, exit 2), never compared as "no shared points";
# * a row whose ``schema`` is not a whole number from 1 to SCHEMA_VERSION is refused with its file: a
#   newer memlab's figures may mean something else, and a guess would pass them;
# * after a first row, a line that is not a row (a torn last line of a killed sweep) is reported as
#   FILE:LINE and left out, as the site does.
def _shown_schema(row: dict[str, Any]) -> str | None:
    """Why the row's ``schema`` is unknown here, or None (a missing or null schema is schema 1, as the
    site reads it)."""
    schema = row.get("schema")
    if schema is None or isinstance(schema, int) and not isinstance(schema, bool) and 1 <= schema <= SCHEMA_VERSION:
        return None
    return f"a row of schema {json.dumps(schema)[:40]}, which this memlab does not read (schemas 1 to {SCHEMA_VERSION})"


def _line_problem(raw: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """``(why it is not a row, None)`` or ``(None, row)`` for one non-blank line."""
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8", None
    except (ValueError, RecursionError) as exc:
        return f"not JSON ({type(exc).__name__})", None
    if not isinstance(row, dict):
        return f"not a JSON object (a {type(row).__name__})", None
    if not isinstance(row.get("technique"), str) or not row["technique"] or not isinstance(row.get("params"), dict):
        return "not a memlab row (no technique and params)", None
    try:
        hash(point_key(row))
    except Exception as exc:  # noqa: BLE001 - a hostile row: mode, dtype, device... of any JSON type
        return f"not a memlab row (a field naming its point is of the wrong type: {type(exc).__name__})", None
    return None, row


def sweep_lines(path: str | Path, problems: list[str]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """``(line number, text, row)`` of each memlab row of ``path`` (NOTE [ a sweep file, as a gate reads
    it ]); each other line after the first row adds ``FILE:LINE: why`` to ``problems``.

    Raises:
        NotASweepFile: the file holds no row, its first line is not a row, or a row's schema is unknown.
    """
    seen = False
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            why, row = _line_problem(raw)
            if why is not None and not seen:
                raise NotASweepFile(f"{path}:{number}: not a memlab sweep file ({why}); refused")
            if why is not None:
                problems.append(f"{path}:{number}: {why}")
                continue
            unknown = _shown_schema(row)
            if unknown:
                raise NotASweepFile(f"{path}:{number}: {unknown}; refused")
            seen = True
            yield number, raw.decode("utf-8").rstrip("\r\n"), row
    if not seen:
        raise NotASweepFile(f"{path}: not a memlab sweep file (no row: the file is empty); refused")


def read_rows(path: str | Path, problems: list[str]) -> Iterator[dict[str, Any]]:
    """The JSON-object lines of ``path``, of any shape (a lenient reader: the time breakdown's); each
    unreadable line adds ``FILE:LINE: why`` to ``problems``.  The gates read with :func:`sweep_lines`."""
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

    Raises:
        NotASweepFile: either file is not a memlab sweep file (NOTE [ a sweep file, as a gate reads it ]).
    """
    out = Comparison()
    old_rows = {point_key(r): r for _, _, r in sweep_lines(old, out.problems)}
    new_rows = {point_key(r): r for _, _, r in sweep_lines(new, out.problems)}
    out.only_old = len(old_rows.keys() - new_rows.keys())
    out.only_new = len(new_rows.keys() - old_rows.keys())
    for key in sorted(old_rows.keys() & new_rows.keys(), key=repr):
        out.shared += 1
        _compare_point(out, key, old_rows[key], new_rows[key])
    return out


def first_difference(a: dict[str, Any], b: dict[str, Any], fields: tuple[str, ...],
                     show: Callable[[Any], str] = repr) -> str | None:
    """``"NAME A vs B"`` for the first of ``fields`` both rows hold with different values (each value
    written by ``show``), or None when they agree; a field one row lacks is skipped.  ``memlab merge``
    names a conflict with it, for technique rows and for sharded rank rows alike."""
    for name in fields:
        if name in a and name in b and a[name] != b[name]:
            return f"{name} {show(a[name])} vs {show(b[name])}"
    return None


def _steps(row: dict[str, Any]) -> int | None:
    series = row.get(SERIES_FIELDS[0])
    return len(series) if isinstance(series, list) else None


def _compare_point(out: Comparison, key: tuple, a: dict[str, Any], b: dict[str, Any]) -> None:
    """Add the differences of one point's rows ``a`` (old) and ``b`` (new) to ``out``: each exact figure,
    a per-step series over the steps both measured, and the verdict (NOTE [ more measured steps ])."""
    apart = _steps(a) is not None and _steps(b) is not None and _steps(a) != _steps(b)
    out.steps_apart += apart
    for name in EXACT_FIELDS:
        if name not in a or name not in b or a[name] is None or b[name] is None:
            out.fields_skipped += 1
            continue
        out.fields_compared += 1
        old, new = a[name], b[name]
        if apart and name in SERIES_FIELDS and isinstance(old, list) and isinstance(new, list):
            old, new = old[:len(new)], new[:len(old)]
        if old != new:
            out.differences.append(Difference(key, name, a[name], b[name]))
    before, after = row_status(a), row_status(b)
    if before == after:
        return
    if before == Status.LEAK_UNKNOWN and after == Status.OK and (_steps(b) or 0) > (_steps(a) or 0):
        out.leak_decided += 1
    else:
        out.differences.append(Difference(key, "verdict", before, after))
