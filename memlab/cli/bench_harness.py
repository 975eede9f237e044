"""``memlab bench-harness``: the harness's own overhead per point (the seconds outside the measured
phases, the same figure ``memlab sweep``'s breakdown prints: NOTE [ harness cost ] in
memlab.measurement.harness_cost), how a CPU load moves absolute vs relative step times, or each
technique's time limit (``--limits``)."""
from __future__ import annotations

import sys

from .common import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub, shared) -> None:
    s = sub.add_parser("bench-harness", help="the harness's own overhead per point (seconds outside the measured "
                                             "phases, as memlab sweep's breakdown; spawn vs fork server) and how "
                                             "a CPU load moves absolute vs relative step times")
    s.add_argument("--no-load", action="store_true", help="skip the load experiment")
    s.add_argument("--load-processes", type=int, default=None,
                   help="busy loops for the load experiment (default: three per core)")
    s.add_argument("--limits", action="store_true",
                   help="instead: each technique's relative step time beside its FLOP ratio (its time limit)")
    s.set_defaults(func=run)


def run(args) -> int:
    if args.load_processes is not None and not 1 <= args.load_processes <= 64:
        raise UsageError(f"--load-processes {args.load_processes} is not valid: expected 1 to 64")
    from ..measurement.harness_cost import load_robustness, overhead, report  # deferred: torch line

    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.limits:  # relative time beside the FLOP ratio per technique (memlab/measurement/flop_limits.py), nothing else
        from ..measurement.flop_limits import limits_table, measure_limits  # deferred: torch line

        print(limits_table(measure_limits(progress=say)))
        return 0
    over = overhead(progress=say)
    load = [] if args.no_load else load_robustness(load_processes=args.load_processes, progress=say)
    print(report(over, load))
    return 0
