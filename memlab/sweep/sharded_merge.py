"""``memlab merge`` for a sharded sweep's files (``memlab sweep --shard-strategy ... --shard i/n``): the
rank rows read as a gate reads them, one rank's two rows compared, and the plan's missing shards and
runs named from the record each row carries (:mod:`memlab.sweep.sharded`).  :func:`memlab.sweep.merge.merge_shards`
calls these when every file it merges is a sharded sweep's; torch-free."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from ..sharding.sweep_plan import EXACT_FIELDS, finished_runs, is_sharded_row, planned_key, rank_key
from .compare import NotASweepFile, first_difference

__all__ = ["is_sharded_file", "sharded_lines", "sharded_conflict", "check_sharded_plan"]


def _row(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None


def is_sharded_file(path: str | Path) -> bool:
    """Whether the first non-blank line of ``path`` is a sharded sweep's rank row (False for a file that
    cannot be read: the technique reader then names why)."""
    try:
        with open(path, "rb") as fh:
            raw = next((line for line in fh if line.strip()), b"")
    except OSError:
        return False
    return is_sharded_row(_row(raw))


def sharded_lines(path: str | Path, problems: list[str]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """``(line number, text, row)`` of each rank row of ``path``; another line (not JSON, a row of
    another kind, a row without its key's fields) adds ``FILE:LINE: why`` to ``problems``.  Raises
    NotASweepFile when the file holds no rank row."""
    seen = False
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            row = _row(raw)
            why = None if is_sharded_row(row) else "not a sharded sweep's rank row"
            if why is None:
                try:
                    hash(rank_key(row))
                except (KeyError, TypeError, ValueError) as exc:
                    why = f"a rank row without its model, strategy, world, sizes or rank ({type(exc).__name__})"
            if why is not None:
                problems.append(f"{path}:{number}: {why}")
                continue
            seen = True
            yield number, raw.decode("utf-8").rstrip("\r\n"), row
    if not seen:
        raise NotASweepFile(f"{path}: no rank row of a sharded sweep; refused")


def sharded_conflict(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Why two rows of one rank cannot be kept as one (an exact figure differs, each value shown as
    its JSON's first 80 characters), or None."""
    return first_difference(a, b, EXACT_FIELDS, show=lambda v: json.dumps(v)[:80])


def check_sharded_plan(rows: list[dict[str, Any]], report: Any) -> str | None:
    """Fill ``report`` (a :class:`memlab.sweep.merge.MergeReport`) from the rows' shard records: the
    shard count, the planned runs, the shards and runs missing (a run is there when every rank is).
    Returns why the files cannot be merged (shards of two plans), else None."""
    records: dict[str, list[dict]] = {}
    for row in rows:
        rec = row.get("sweep_shard")
        if isinstance(rec, dict):
            records.setdefault(str(rec.get("plan")), []).append(rec)
    if not records:
        return None
    if len(records) > 1:
        return f"the files are shards of different sharded sweeps (plans {', '.join(sorted(records))}); merge the shards of one plan"
    recs = next(iter(records.values()))
    first = recs[0]
    report.shard_count, report.planned = int(first["count"]), int(first["planned"])
    seen = {int(r["index"]) for r in recs}
    report.missing_shards = [i for i in range(1, report.shard_count + 1) if i not in seen]
    done = finished_runs(rows)
    planned = [planned_key(k) for k in (first.get("plan_args") or {}).get("runs", [])]
    report.missing_points = [f"{m} {s} N={n} G={g}{' checkpointed' if c else ''}" for m, s, n, g, c in planned
                             if (m, s, n, g, c) not in done]
    report.missing_count = len(report.missing_points) if planned else max(0, report.planned - len(done))
    return None
