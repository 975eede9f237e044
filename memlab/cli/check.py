"""``memlab check``: each technique against its workload's reference (float64, CPU), a child each."""
from __future__ import annotations

import sys

from . import names
from .common import model_file
from .options import timeout_seconds
from ..registry import get_technique

__all__ = ["add_parser", "precheck", "run"]


def add_parser(sub, shared) -> None:
    s = sub.add_parser("check", parents=[shared.common, shared.model],
                       help="check techniques against their workload reference (float64, CPU)")
    s.add_argument("name", nargs="*", help="techniques to check (default: every one; with --model: its kinds, "
                                           "e.g. plain checkpoint_blocks)")
    s.add_argument("--timeout", type=timeout_seconds, default=300.0, metavar="SECONDS",
                   help="seconds each technique's check (its own child process) may take before it is killed "
                        "and reported as ERROR, at most a week (default 300)")
    s.set_defaults(func=run, precheck=precheck)


def precheck(args) -> None:
    if names.applies(args.plugin, args.model):
        for n in args.name:
            names.check_technique(n)


def run(args) -> int:
    from ..measurement.technique_checks import iter_checks  # deferred: torch line

    model_file(args, "check")
    for n in args.name or []:
        get_technique(n)
    outcomes = []
    for outcome in iter_checks(args.name or None, isolate=True, timeout=args.timeout):  # a child per technique
        print(outcome.line(), flush=True)
        outcomes.append(outcome)
    bad = list(dict.fromkeys(o.name for o in outcomes if o.verdict in ("FAIL", "ERROR")))
    if bad:
        checked = len({o.name for o in outcomes})
        print(f"memlab: {len(bad)} of {checked} techniques failed the reference check: {', '.join(bad)}",
              file=sys.stderr)
    return 1 if bad else 0
