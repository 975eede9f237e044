"""``memlab compare``: the exact memory figures of two sweep files, point by point."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub, shared) -> None:
    s = sub.add_parser("compare", help="compare the exact memory figures of two sweep files point by point "
                                        "(exit 1 if any byte differs)")
    s.add_argument("old", metavar="OLD.jsonl", help="the sweep file to compare against")
    s.add_argument("new", metavar="NEW.jsonl", help="the sweep file to check")
    s.add_argument("--limit", type=_limit, default=50, help="differences to print, 0 or more (default 50)")
    s.set_defaults(func=run)


def _limit(text: str) -> int:
    """argparse ``type=`` of ``--limit``: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid: expected a whole number of differences, 0 or more")
    return value


def run(args) -> int:
    from ..sweep.compare import NotASweepFile, compare_sweeps  # deferred: torch line

    for path in (args.old, args.new):
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such sweep file")
    try:
        result = compare_sweeps(args.old, args.new)
    except NotASweepFile as exc:  # a gate fails closed: NOTE [ a sweep file, as a gate reads it ]
        raise UsageError(str(exc)) from None
    for line in result.problems:
        print(f"memlab: warning: {line}", file=sys.stderr)
    for diff in result.differences[:args.limit]:
        print(diff)
    if len(result.differences) > args.limit:
        print(f"... and {len(result.differences) - args.limit} more")
    print(result.summary())
    return 0 if result.identical else 1
