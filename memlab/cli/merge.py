"""``memlab merge``: the shard files of a sweep (or any sweep files) put into one file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .common import UsageError, say
from ..registry import get_technique, load_plugin

__all__ = ["add_parser", "run"]


def add_parser(sub, shared) -> None:
    s = sub.add_parser("merge", help="put the shard files of a sweep (or any sweep files) into one file: refuses two "
                                      "different exact figures for one point, names missing shards and points "
                                      "(exit 1 if any is missing)")
    s.add_argument("out", metavar="OUT.jsonl", help="the merged sweep file to write (must not exist, unless --force)")
    s.add_argument("shards", metavar="SHARD.jsonl", nargs="+", help="the sweep files to merge (one or more)")
    s.add_argument("--force", action="store_true", help="replace OUT if it exists")
    s.set_defaults(func=run)


def _replan(plan_args: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(technique, resolved params)`` of the plan a shard records (for naming missing points)."""
    from ..sweep import parse_grid, plan_sweep  # deferred: torch line

    for path in plan_args.get("plugins") or []:
        load_plugin(path)
    points = plan_sweep(plan_args.get("family"), quick=plan_args.get("quick", False),
                        techniques=plan_args.get("technique"), grid=parse_grid(plan_args.get("grid") or []),
                        defaults=plan_args.get("defaults", False))
    return [(p.technique, json.loads(json.dumps(get_technique(p.technique).resolve(p.params), default=list)))
            for p in points]


def run(args) -> int:
    from ..sweep.merge import MergeConflict, merge_shards  # deferred: torch line

    if Path(args.out).exists() and not args.force:
        raise UsageError(f"{args.out} exists; give a new file, or --force to replace it")
    try:
        report = merge_shards(args.out, args.shards, replan=_replan)
    except (MergeConflict, OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(report.text(args.out))
    for line in report.problems:
        say(f"memlab: warning: {line}")
    return 0 if report.complete else 1
