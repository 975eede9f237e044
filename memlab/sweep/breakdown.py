"""Where a sweep's time went: the seconds each measurement spent in each of its phases, summed.

A measurement records how long its phases took (``extra``: ``reference_check_s``,
``recorded_steps_s``, ``step_check_s``, ``resident_step_s``, ``flop_step_s``, ``timing_setup_s``,
``timed_check_s``; wall seconds) beside its timed steps
(``step_times_s``, and the plain reference steps interleaved with them: one more than the technique
steps, recorded as their median ``reference_step_time_s``, so their sum here is that median times
their count).  ``memlab sweep`` prints the sum at its end; ``python -m memlab.sweep.breakdown FILE.jsonl``
prints it for a sweep file.  It tells a user which knob would shorten a long sweep: ``--repeats`` and
``--time-budget`` act on the timed steps, ``--iterations`` on the recorded ones, and the reference
checks (float64 at the measured size, NOTE [ verdicts ]) depend only on the grid.

Rows are read as plain dicts (``Measurement.to_dict()`` or a JSON line).  The phases and the cost
outside them are :mod:`memlab.measurement.harness_cost`'s (NOTE [ harness cost ] there).
"""
from __future__ import annotations

import sys
from typing import Any, Mapping

from ..measurement.harness_cost import PHASES, harness_seconds, phase_seconds
from .compare import read_rows

__all__ = ["PHASES", "phase_seconds", "harness_seconds", "time_breakdown", "main"]


def time_breakdown(rows: list[Mapping[str, Any]], wall_s: float | None = None, jobs: int = 1) -> str:
    """Lines: the seconds inside the measurements per phase, with their share; with ``wall_s`` (the
    sweep's wall time in seconds) also the fork servers' start and the rest of ``wall_s * jobs``,
    in all and per point (:func:`harness_seconds`: process plumbing and idle workers)."""
    phases = phase_seconds(rows)
    inside = sum(phases.values())
    head = f"time inside the {len(rows)} measurement(s): {inside:.0f} s"
    if wall_s is not None:
        head += f"; the sweep took {wall_s / 60:.1f} min at {jobs} job(s) ({wall_s * jobs:.0f} s of worker time)"
    lines = [head]
    for key, label in PHASES:
        share = phases[key] / inside if inside > 0 else 0.0
        lines.append(f"  {phases[key]:8.0f} s  {share:4.0%}  {label}")
    if wall_s is not None:
        cost = harness_seconds(rows, wall_s, jobs)
        lines.append(f"  {cost['server_start']:8.1f} s        starting the measurement server(s), once per worker")
        lines.append(f"  {cost['outside']:8.1f} s        outside the measured phases: {cost['per_point']:.2f} s per "
                     "point (NOTE [ harness cost ] in memlab.measurement.harness_cost)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m memlab.sweep.breakdown FILE.jsonl [FILE ...]``: the breakdown of each file."""
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m memlab.sweep.breakdown FILE.jsonl [FILE ...]", file=sys.stderr)
        return 2
    status = 0
    for name in paths:
        problems: list[str] = []
        try:
            rows = list(read_rows(name, problems))
        except OSError as exc:
            print(f"{name}: cannot read: {exc}", file=sys.stderr)
            status = 1
            continue
        bad = len(problems)
        print(f"{name}" + (f" ({bad} unreadable line(s) left out)" if bad else ""))
        print(time_breakdown(rows))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
