"""``make demo``'s own words: the size of its sweep before it starts, and what came of it at its end.

``python -m memlab.sweep.demo plan SWEEP-OPTIONS...`` prints the number of points the sweep with those
``memlab sweep`` options (the Makefile's ``DEMO_SWEEP``) will run, computed from the plan
(:func:`memlab.sweep.plan.plan_sweep`), and the points the device cannot run.

``python -m memlab.sweep.demo summary FILE.jsonl --site INDEX.html SWEEP-OPTIONS...`` prints the count
per status (ok, mismatch, skipped, error), each non-ok row with its reason, the expected ones apart
from the unexpected ones with why each is expected (NOTE [ expected non-ok rows ] in
:mod:`memlab.sweep.summary`), then the site's path and the page to open first.  Exit status 1 when
something is unexpected (a row, or a planned point with no row that the device could run), else 0.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Mapping

import torch

from .plan import SweepPoint, parse_grid, plan_sweep
from .summary import NotOk, classify_not_ok, demo_summary
from ..registry import get_technique
from ..technique import TechniqueUnavailable
from .output import read_jsonl

__all__ = ["plan_of", "plan_line", "skipped_points", "known_mismatch_of", "summary_lines", "site_lines", "main"]


def _sweep_options() -> argparse.ArgumentParser:
    """The ``memlab sweep`` options that make its plan (and its device and jobs); the others are ignored."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--family")
    p.add_argument("--technique", action="append")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--grid", action="append", default=[])
    p.add_argument("--defaults", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--jobs", type=int, default=1)
    return p


def plan_of(options: list[str]) -> tuple[list[SweepPoint], argparse.Namespace]:
    """The points ``memlab sweep OPTIONS`` measures, and the parsed options."""
    args, _ = _sweep_options().parse_known_args(options)
    return plan_sweep(args.family, quick=args.quick, techniques=args.technique, grid=parse_grid(args.grid),
                      defaults=args.defaults), args


def _unsupported(points: list[SweepPoint], device: str) -> list[SweepPoint]:
    """The points whose technique does not run on ``device`` (its ``devices``) or is known to refuse it
    (its ``known_unavailable``)."""
    kind = device.split(":")[0]
    out = []
    for p in points:
        cls = get_technique(p.technique)
        if kind not in cls.devices or kind in (getattr(cls, "known_unavailable", None) or {}):
            out.append(p)
    return out


def plan_line(options: list[str]) -> str:
    """``'the sweep: 52 points, 2 at a time; 2 of them do not run on cpu (cut_cross_entropy,
    offload_activations) and are skipped'``, from the plan of ``options``."""
    points, args = plan_of(options)
    line = f"the sweep: {len(points)} point{'' if len(points) == 1 else 's'}, {args.jobs} at a time"
    off = _unsupported(points, args.device)
    if off:
        names = ", ".join(sorted({p.technique for p in off}))
        line += f"; {len(off)} of them do not run on {args.device} ({names}) and are skipped"
    return line


def _matches(point: SweepPoint, row) -> bool:
    return row.technique == point.technique and all(row.params.get(k) == v for k, v in point.params.items())


def skipped_points(points: list[SweepPoint], rows: list, device: str) -> list[NotOk]:
    """The planned points with no row, each with why: expected when its technique does not run on
    ``device`` (its ``devices``, or its ``known_unavailable`` ``{device type: why}``); otherwise the
    technique's own refusal (a missing package...) or "no row written", unexpected."""
    out = []
    kind = device.split(":")[0]
    for p in points:
        if any(_matches(p, r) for r in rows):
            continue
        cls = get_technique(p.technique)
        params = " ".join(f"{k}={v}" for k, v in sorted(p.params.items()))
        if kind not in cls.devices:
            out.append(NotOk("skipped", p.technique, params, f"does not run on {kind}",
                             f"{p.technique} runs on {', '.join(cls.devices)} only"))
            continue
        known = (getattr(cls, "known_unavailable", None) or {}).get(kind)
        out.append(NotOk("skipped", p.technique, params, _refusal(cls, p, device), known))
    return out


def _refusal(cls, point: SweepPoint, device: str) -> str:
    """Why the technique refuses ``point`` on ``device`` (its first line), or that it left no row."""
    try:
        cls(**point.params).check_available(torch.device(device))
    except TechniqueUnavailable as exc:
        return str(exc).splitlines()[0]
    return "no row written (the sweep was stopped, or the point failed before writing its row)"


def known_mismatch_of(technique: str) -> Mapping[str, str]:
    """A technique's ``known_mismatch`` (``{tensor: why}``; empty when it declares none or is not registered)."""
    try:
        return dict(getattr(get_technique(technique), "known_mismatch", None) or {})
    except (KeyError, ValueError):
        return {}


def summary_lines(path: str, options: list[str]) -> tuple[list[str], int]:
    """The summary of the sweep file ``path`` made with ``options``, and the number of unexpected items."""
    points, args = plan_of(options)
    rows = read_jsonl(path, warn=lambda line: print(line, file=sys.stderr))
    not_ok = classify_not_ok(rows, known_mismatch_of, skipped_points(points, rows, args.device))
    return demo_summary(rows, len(points), not_ok)


def site_lines(index: str | None) -> list[str]:
    """Where the site is and the page to open first."""
    if not index or not Path(index).is_file():
        return ["site: not built (see the lines above); the sweep's rows are in the --out file"]
    index = str(Path(index).resolve())
    lines = [f"site: {index}",
             f"open first: file://{index}  (Overview: per family, the technique with the least memory at "
             "each configuration, the fastest within a memory budget, and the seed papers' verdicts)"]
    choose = Path(index).with_name("choose.html")
    if choose.is_file():
        lines.append(f"then: file://{choose}  (choose a technique for a step of your own)")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``plan OPTIONS...`` or ``summary FILE --site INDEX OPTIONS...`` (module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("plan", "summary"):
        print("usage: python -m memlab.sweep.demo plan SWEEP-OPTIONS... | "
              "summary FILE.jsonl [--site INDEX.html] SWEEP-OPTIONS...", file=sys.stderr)
        return 2
    if argv[0] == "plan":
        print(plan_line(argv[1:]))
        return 0
    p = argparse.ArgumentParser(prog="python -m memlab.sweep.demo summary")
    p.add_argument("file")
    p.add_argument("--site")
    args, options = p.parse_known_args(argv[1:])
    lines, unexpected = summary_lines(args.file, options)
    printed = (args.site or "").strip().splitlines()  # `memlab site`'s stdout: the index's path, last
    print("\n".join(["", "== make demo: summary =="] + lines + site_lines(printed[-1] if printed else None)))
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
