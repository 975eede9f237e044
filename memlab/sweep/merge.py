"""``memlab merge OUT SHARD...``: the rows of a sharded sweep (or of any sweep files) in one file.

Rows are copied as they were written (the raw JSON line, so every host fact and figure stays as
measured).  A point present in two files must have the same status and the same exact figures
(:data:`memlab.sweep.compare.EXACT_FIELDS`) in both: then it is kept once, else nothing is written
and the conflict is named.  A merge is a gate (NOTE [ a sweep file, as a gate reads it ]): a file
that is not a memlab sweep file, a row of an unknown schema and a file a running sweep holds locked
are refused, and nothing is written.  Within one file a point measured twice keeps its last row (what
``--resume`` leaves).  When the rows carry ``extra["sweep_shard"]`` (``memlab sweep --shard``), the
merge also checks that every file belongs to the same plan and names the shards and points missing.
A sharded sweep's files (``memlab sweep --shard-strategy``: rank rows, ``"kind": "sharded"``) merge
the same way, a rank's row being its point (:mod:`memlab.sweep.sharded_merge`); a mix of the two
kinds is refused.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..core.atomic import write_text_atomic
from ..core.record import row_status
from ..core.setting import Point, Setting
from .compare import EXACT_FIELDS, first_difference, point_key, sweep_lines
from .sharded_merge import check_sharded_plan, is_sharded_file, sharded_conflict, sharded_lines
from ..sharding.sweep_plan import rank_key
from ..registry import get_technique

__all__ = ["MergeConflict", "MergeReport", "merge_shards"]


class MergeConflict(ValueError):
    """Two files hold different exact figures or statuses for one point, shards of different plans, or
    a file a running sweep is writing."""


@dataclass
class MergeReport:
    """What :func:`merge_shards` did: rows written, duplicates kept once, unreadable lines, missing
    shards and points (named when the plan could be rebuilt)."""
    rows: int = 0
    files: int = 0
    duplicates: int = 0
    problems: list[str] = field(default_factory=list)
    shard_count: int | None = None
    missing_shards: list[int] = field(default_factory=list)
    planned: int | None = None
    missing_points: list[str] = field(default_factory=list)
    missing_count: int = 0
    #: planned points of techniques that cannot run on the sweep's device: skipped by the sweep, no row
    skipped_count: int = 0

    @property
    def complete(self) -> bool:
        return not self.missing_shards and not self.missing_count and not self.problems

    def text(self, out: str) -> str:
        lines = [f"merged {self.rows} row{'s' if self.rows != 1 else ''} from {self.files} "
                 f"file{'s' if self.files != 1 else ''} into {out}"
                 + (f" ({self.duplicates} point{'s' if self.duplicates != 1 else ''} found in two files with "
                    f"identical exact figures, kept once)" if self.duplicates else "")]
        if self.shard_count is not None:
            lines.append(f"plan: {self.planned} points in {self.shard_count} shards; "
                         + ("every shard present" if not self.missing_shards else
                            "missing shard" + ("s " if len(self.missing_shards) > 1 else " ")
                            + ", ".join(f"{i}/{self.shard_count}" for i in self.missing_shards)))
            lines.append(f"missing points: {self.missing_count}" if self.missing_count else "missing points: none")
            if self.skipped_count:
                lines.append(f"skipped (technique not available on the sweep's device, no row): {self.skipped_count}")
            lines += [f"  {p}" for p in self.missing_points[:20]]
            if len(self.missing_points) > 20:
                lines.append(f"  ... and {len(self.missing_points) - 20} more")
        lines += [f"unreadable: {p}" for p in self.problems]
        return "\n".join(lines)


def _rows(path: Path, problems: list[str], sharded: bool = False) -> dict[tuple, tuple[str, dict[str, Any]]]:
    """``{point key: (raw line, row)}`` of one file (``sharded``: ``{rank key: ...}`` of a sharded
    sweep's rank rows), the last row of a point winning; read under a shared lock, so a file a running
    sweep holds (its exclusive lock) is refused, not half-merged.

    Raises:
        MergeConflict: a running sweep holds the file's lock.
        NotASweepFile: see :func:`~memlab.sweep.compare.sweep_lines` (and
            :func:`~memlab.sweep.sharded_merge.sharded_lines`).
    """
    out: dict[tuple, tuple[str, dict[str, Any]]] = {}
    with open(path, "rb") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise MergeConflict(f"{path} is being written by a running sweep (its lock is held); wait for it to "
                                f"finish, then merge") from None
        lines, key = (sharded_lines, rank_key) if sharded else (sweep_lines, point_key)
        for _, text, row in lines(path, problems):
            out[key(row)] = (text, row)
    return out


def _conflict(key: tuple, a: dict, b: dict) -> str | None:
    """Why rows ``a`` and ``b`` of one point cannot be kept as one: two verdicts as each reads
    (:func:`memlab.core.record.row_status`: an ``ok`` row of two measured steps reads ``leak_unknown``),
    or an exact figure that differs; None when they agree."""
    if row_status(a) != row_status(b):
        return f"status {row_status(a)!r} vs {row_status(b)!r} (two verdicts)"
    return first_difference(a, b, EXACT_FIELDS)


def merge_shards(out: str | os.PathLike, shards: list[str | os.PathLike], *,
                 replan: Callable[[dict[str, Any]], list[tuple[str, dict[str, Any]]]] | None = None) -> MergeReport:
    """Union the rows of ``shards`` into ``out`` (written atomically; nothing is written on a conflict).

    ``replan(plan_args)`` rebuilds the plan's ``(technique, params)`` list so that missing points can
    be named; without it (or when it fails) they are counted from the shards' records.
    Raises :class:`MergeConflict` (two statuses or exact figures for one point, shards of different plans,
    a file a running sweep holds), :class:`~memlab.sweep.compare.NotASweepFile` (a file that is not a
    memlab sweep file, or a row of an unknown schema), FileNotFoundError / IsADirectoryError for an
    unusable input, ValueError when ``out`` is an input.
    """
    paths = [Path(p) for p in shards]
    if not paths:
        raise ValueError("memlab merge needs at least one shard file")
    if any(Path(out).resolve() == p.resolve() for p in paths if p.exists()):
        raise ValueError(f"{out}: the output is also one of the inputs; write the merge to a new file")
    report = MergeReport(files=len(paths))
    merged: dict[tuple, tuple[str, dict[str, Any], Path]] = {}
    sharded = _sharded(paths)
    for path in paths:
        for key, (text, row) in _rows(path, report.problems, sharded).items():
            if key in merged:
                why = sharded_conflict(merged[key][1], row) if sharded else _conflict(key, merged[key][1], row)
                if why:
                    raise MergeConflict(f"{key[0]} {key[1]} ({', '.join(map(str, key[2:]))}): {why} "
                                        f"in {merged[key][2]} and {path}; refusing to merge")
                report.duplicates += 1
                continue
            merged[key] = (text, row, path)
    if sharded:
        why = check_sharded_plan([row for _, row, _ in merged.values()], report)
        if why:
            raise MergeConflict(why)
    else:
        _check_plan(merged, report, replan)
    write_text_atomic(Path(out), "".join(text + "\n" for text, _, _ in merged.values()))
    report.rows = len(merged)
    return report


def _sharded(paths: list[Path]) -> bool:
    """Whether the files are a sharded sweep's (each first row ``"kind": "sharded"``: memlab.sweep.sharded)
    rather than a technique sweep's; MergeConflict for a mix, FileNotFoundError / IsADirectoryError for
    an unusable input."""
    for path in paths:
        if path.is_dir():
            raise IsADirectoryError(f"{path}: is a directory, not a sweep file")
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such sweep file")
    kinds = {path: is_sharded_file(path) for path in paths}
    if len(set(kinds.values())) > 1:
        raise MergeConflict("the files mix a sharded sweep's rank rows (" + ", ".join(str(p) for p, k in kinds.items() if k)
                            + ") with a technique sweep's rows; merge each kind on its own")
    return all(kinds.values())


def _check_plan(merged: dict, report: MergeReport, replan) -> None:
    records = {}
    for _, row, path in merged.values():
        rec = (row.get("extra") or {}).get("sweep_shard")
        if isinstance(rec, dict):
            records.setdefault(rec.get("plan"), []).append((rec, path))
    if not records:
        return
    if len(records) > 1:
        files = {plan: sorted({str(p) for _, p in recs}) for plan, recs in records.items()}
        raise MergeConflict("the files are shards of different sweeps (plans "
                            + "; ".join(f"{plan}: {', '.join(fs)}" for plan, fs in files.items())
                            + "); merge the shards of one plan")
    (plan, recs), = records.items()
    first = recs[0][0]
    report.shard_count, report.planned = int(first["count"]), int(first["planned"])
    seen = {int(r["index"]) for r, _ in recs}
    report.missing_shards = [i for i in range(1, report.shard_count + 1) if i not in seen]
    # only the rows of this plan count toward it: a row of another file (another optimizer's sweep) of the
    # same technique and parameters is another point (Point.key()), and no planned point's row
    report.missing_count = max(0, report.planned - len(recs))
    if replan is None or not report.missing_count:
        return
    try:
        planned = replan(first["plan_args"])
    except Exception as exc:  # noqa: BLE001 - naming the points is a courtesy; the count stands
        report.missing_points = [f"(could not rebuild the plan to name them: {exc})"]
        return
    setting = Setting.from_row(first.get("setting") or {})  # the plan's: device, dtype, mode, optimizer...
    runnable = [(t, p) for t, p in planned if _runs_on(t, setting.device.split(":")[0])]
    report.skipped_count = len(planned) - len(runnable)  # a sweep skips these without a row
    # a point is its Point.key(): the same technique and parameters in another setting is another point
    report.missing_points = [f"{t} {json.dumps(p, sort_keys=True)}" for t, p in runnable
                             if Point(t, p, setting).key() not in merged]
    report.missing_count = len(report.missing_points)


def _runs_on(technique: str, device: str) -> bool:
    """Whether ``technique`` can run on a ``device`` type (``cpu``, ``cuda``): a sweep skips, with no row,
    the points of a technique that cannot (``offload_activations`` on the CPU)."""
    try:
        return device in get_technique(technique).devices
    except (KeyError, ValueError):
        return True  # an unknown technique (a plug-in not loaded here) is counted as missing
