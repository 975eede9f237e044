"""``memlab list``: the techniques, their workload and parameters (text, or ``--json``)."""
from __future__ import annotations

import json

from . import names
from .common import UsageError
from ..registry import get_technique, list_families, list_techniques

__all__ = ["add_parser", "precheck", "run"]

#: the dtypes whose reference-check tolerance ``--json`` states
DTYPES = ("float64", "float32", "bfloat16", "float16")


def add_parser(sub, shared) -> None:
    s = sub.add_parser("list", parents=[shared.common], help="list techniques, their workload and parameters")
    s.add_argument("--family", help="only this family's techniques (default: every family)")
    s.add_argument("--json", action="store_true", help="print one JSON array: each technique's family, workload, "
                                                       "flags, tolerances and parameters with default and range")
    s.set_defaults(func=run, precheck=precheck)


def precheck(args) -> None:
    if names.applies(args.plugin):
        names.check_family(args.family)


def run(args) -> int:
    if args.family is not None and args.family not in list_families():  # a plug-in's family, say
        raise UsageError(f"unknown family {args.family!r}; available: {', '.join(list_families())}")
    found = list_techniques(args.family)
    if args.json:
        print(json.dumps([_row(n, get_technique(n)) for n in found], indent=1, sort_keys=True, default=list))
        return 0
    by_family: dict[str, list[str]] = {}
    for n in found:
        by_family.setdefault(get_technique(n).family(), []).append(n)
    for fam in sorted(by_family):
        print(f"{fam}:")
        for n in by_family[fam]:
            c = get_technique(n)
            tags = "".join([" [baseline]" if c.baseline else "", " [peer]" if c.peer else ""])
            print(f"  {n}{tags} (workload {c.workload.name}): {c.summary()}")
            for k, p in sorted(c.all_params().items()):
                print(f"      {k} = {p.default!r:<12} {p.describe_range()}{'  - ' + p.doc if p.doc else ''}")
    return 0


def _row(name: str, c) -> dict:
    return {"name": name, "family": c.family(), "workload": c.workload.name, "summary": c.summary(),
            "baseline": c.baseline, "peer": c.peer, "twin": c.twin,
            "tolerance": {dt: list(c.tolerance(dt)) for dt in DTYPES},
            "params": {k: {"default": p.default, "valid": p.describe_range(), "doc": p.doc}
                       for k, p in sorted(c.all_params().items())}}
