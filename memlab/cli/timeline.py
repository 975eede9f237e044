"""``memlab timeline`` (allocated bytes over one step, event by event) and ``memlab timelines`` (one
file per technique)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from . import names
from .common import UsageError, check_measured_name, parse_params
from ..core.atomic import write_text_atomic
from ..core.record import fmt_mib
from ..registry import get_technique, list_families, list_techniques

__all__ = ["add_parsers", "run_timeline", "run_timelines", "precheck_timelines"]


def add_parsers(sub, shared) -> None:
    s = sub.add_parser("timeline", parents=[shared.common, shared.meas],
                       help="allocated bytes over one step, event by event")
    s.add_argument("name", help="technique; memlab list names them")
    s.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="workload/technique parameter, e.g. --param chunk_size=1000 (repeatable)")
    s.add_argument("--json", action="store_true", help="print the Timeline as one JSON object")
    s.add_argument("--out", help="write the Timeline JSON here (default: print the events)")
    s.set_defaults(func=run_timeline, precheck=check_measured_name)

    s = sub.add_parser("timelines", parents=[shared.common, shared.meas],
                       help="write one timeline per technique (default parameters)")
    s.add_argument("--family", help="only this family's techniques (default: every family)")
    s.add_argument("--peers", action="store_true", help="include peer comparators")
    s.add_argument("--out-dir", default="data/timelines", help="folder of the timeline files (default data/timelines)")
    s.set_defaults(func=run_timelines, precheck=precheck_timelines)


def run_timeline(args) -> int:
    from ..measurement import timeline  # deferred: torch line

    cls = get_technique(args.name)
    params = parse_params(cls, args.param or [])
    tl = timeline(cls, device=args.device, dtype=args.dtype, mode=args.mode, isolate=not args.in_process, **params)
    text = json.dumps(tl.to_dict(), sort_keys=True)
    if args.out:
        write_text_atomic(args.out, text)
        print(f"wrote {len(tl.events)} events to {args.out}; peak {fmt_mib(tl.peak_bytes)} above baseline")
        return 0
    if args.json:
        print(text)
        return 0
    for e in tl.events:
        print(f"{e.phase:<9} {e.delta_bytes / 2**20:+9.1f} MiB  live {fmt_mib(e.live_bytes):>11}  "
              f"{' > '.join(e.stack) or e.op}")
    print(f"peak {fmt_mib(tl.peak_bytes)} above baseline {fmt_mib(tl.baseline_bytes)}")
    return 0


def precheck_timelines(args) -> None:
    if names.applies(args.plugin):
        names.check_family(args.family)


def run_timelines(args) -> int:
    from ..measurement import timeline  # deferred: torch line

    if args.family is not None and args.family not in list_families():
        raise UsageError(f"unknown family {args.family!r}; available: {', '.join(list_families())}")
    out_dir = Path(args.out_dir)
    chosen = [n for n in list_techniques(args.family) if not get_technique(n).peer or args.peers]
    for i, name in enumerate(chosen, 1):
        try:
            tl = timeline(name, device=args.device, dtype=args.dtype, mode=args.mode)
        except Exception as exc:  # noqa: BLE001 - one failure must not lose the others
            print(f"[{i}/{len(chosen)}] {name}: FAILED {exc}", file=sys.stderr)
            continue
        path = out_dir / f"{get_technique(name).family()}-{name}-{args.mode}.json"
        write_text_atomic(path, json.dumps(tl.to_dict(), sort_keys=True))
        print(f"[{i}/{len(chosen)}] {name}: {len(tl.events)} events, peak {fmt_mib(tl.peak_bytes)} -> {path}",
              file=sys.stderr)
    return 0
