"""``memlab reproduce``: re-run the seed-report reproductions."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub, shared) -> None:
    s = sub.add_parser("reproduce", parents=[shared.common], help="re-run the seed-report reproductions")
    s.add_argument("--out", default="data/reproductions",
                   help="folder of the reproduction files (default data/reproductions)")
    s.add_argument("--quick", action="store_true", help="smaller configurations, faster (each file records quick: true)")
    s.add_argument("--only", action="append", metavar="SEED", help="only this seed (repeatable; default: every seed)")
    s.set_defaults(func=run)


def run(args) -> int:
    from ..reproductions import list_reproductions, run_all  # deferred: heavy, CLI startup

    try:
        known = list_reproductions()  # every family folder's, the plug-in folders' included
    except ValueError as exc:  # two reproductions declare one seed
        raise UsageError(str(exc)) from None
    for s in args.only or []:
        if s not in known:
            raise UsageError(f"unknown seed {s!r}; available: {', '.join(sorted(known))}")
    paths = run_all(Path(args.out), quick=args.quick, only=args.only, progress=lambda s: print(s, file=sys.stderr))
    for p in paths:
        print(f"wrote {p}")
    return 0
