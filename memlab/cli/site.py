"""``memlab site``: the static results site, built from the files only (no torch)."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

from .common import UsageError

__all__ = ["add_parser", "precheck", "run"]


def add_parser(sub, shared) -> None:
    s = sub.add_parser("site", parents=[shared.common], help="build the static results site")
    s.add_argument("--results", default="results", help="asv results directory (default results)")
    s.add_argument("--data", default="data", help="memlab data directory: sweeps, timelines, reproductions, "
                                                  "models (default data)")
    s.add_argument("--out", default="html", help="output directory (default html)")
    s.add_argument("--run", action="append", metavar="FILE.jsonl", help="extra sweep JSON Lines file (repeatable)")
    s.set_defaults(func=run, precheck=precheck)


def precheck(args) -> None:
    """``--results`` and ``--data`` are folders: a mistyped one would build an empty site."""
    for option, folder in (("--results", args.results), ("--data", args.data)):
        if not Path(folder).is_dir():
            raise UsageError(f"{option} {folder}: no such folder" if not Path(folder).exists()
                             else f"{option} {folder} is not a folder")


def run(args) -> int:
    """Build the site; each input problem is one ``memlab: warning:`` line on stderr (and on the
    methodology page).  A refused ``--out`` is the ValueError's one line, exit 2 (see ``main``)."""
    from ..results import ResultsWarning  # deferred: heavy, CLI startup
    from ..site import build_site  # deferred: heavy, CLI startup

    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResultsWarning)
            index = build_site(Path(args.results), Path(args.data), Path(args.out),
                               extra_runs=[Path(p) for p in args.run or []])
    except OSError as exc:  # e.g. no permission to write beside --out, disk full
        raise UsageError(f"cannot write the site to {args.out}: {exc.strerror or exc}") from None
    finally:
        problems = [w for w in caught if issubclass(w.category, ResultsWarning)]
        for w in problems:
            print(f"memlab: warning: {w.message}", file=sys.stderr)
        for w in caught:
            if not issubclass(w.category, ResultsWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    print(Path(index).resolve())
    if problems:
        print(f"memlab: {len(problems)} input problem(s) left out of the site; listed on "
              f"{Path(index).resolve().parent / 'methodology.html'}", file=sys.stderr)
    return 0
