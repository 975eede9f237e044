"""``memlab compare``: the exact memory figures of two sweep files, point by point."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub, shared) -> None:
    s = sub.add_parser("compare", help="compare the exact memory figures of two sweep files point by point "
                                        "(exit 1 if any byte differs)")
    s.add_argument("old", metavar="OLD.jsonl", help="the sweep file to compare against")
    s.add_argument("new", metavar="NEW.jsonl", help="the sweep file to check")
    s.add_argument("--limit", type=int, default=50, help="differences to print (default 50)")
    s.set_defaults(func=run)


def run(args) -> int:
    from ..sweep.compare import compare_sweeps

    for path in (args.old, args.new):
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such sweep file")
    result = compare_sweeps(args.old, args.new)
    for line in result.problems:
        print(f"memlab: warning: {line}", file=sys.stderr)
    for diff in result.differences[:args.limit]:
        print(diff)
    if len(result.differences) > args.limit:
        print(f"... and {len(result.differences) - args.limit} more")
    print(result.summary())
    return 0 if result.identical else 1
