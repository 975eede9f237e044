"""Where a sweep's time went: the seconds each measurement spent in each of its phases, summed.

A measurement records how long its phases took (``extra``: ``reference_check_s``,
``recorded_steps_s``, ``resident_step_s``, ``flop_step_s``) beside its timed steps
(``step_times_s``, and the plain reference steps interleaved with them: one more than the technique
steps, recorded as their median ``reference_step_time_s``, so their sum here is that median times
their count).  ``memlab sweep`` prints the sum at its end; ``python -m memlab.sweep.breakdown FILE.jsonl``
prints it for a sweep file.  It tells a user which knob would shorten a long sweep: ``--repeats`` and
``--time-budget`` act on the timed steps, ``--iterations`` on the recorded ones, and the reference
checks (float64 at the measured size, NOTE [ verdicts ]) depend only on the grid.

Rows are read as plain dicts (``Measurement.to_dict()`` or a JSON line), torch-free.
"""
from __future__ import annotations

import sys
from typing import Any, Iterable, Mapping

from .compare import read_rows

__all__ = ["PHASES", "phase_seconds", "time_breakdown", "main"]

#: (key, what it is) in the order printed; seconds inside the measuring process
PHASES = (
    ("reference_check_s", "reference checks (float64, then the measured dtype)"),
    ("recorded_steps_s", "build, warm-up and allocation-traced steps"),
    ("timed_steps_s", "timed technique steps"),
    ("timed_reference_steps_s", "timed plain-reference steps (median x count)"),
    ("resident_step_s", "resident high-water step"),
    ("flop_step_s", "FLOP-counted step"),
)


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0.0


def phase_seconds(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds per phase (keys of :data:`PHASES`) summed over ``rows``; missing figures count 0."""
    total = {key: 0.0 for key, _ in PHASES}
    for row in rows:
        extra = row.get("extra") or {}
        for key in ("reference_check_s", "recorded_steps_s", "resident_step_s", "flop_step_s"):
            total[key] += _seconds(extra.get(key))
        times = [_seconds(t) for t in row.get("step_times_s") or ()]
        total["timed_steps_s"] += sum(times)
        if times:
            total["timed_reference_steps_s"] += _seconds(row.get("reference_step_time_s")) * (len(times) + 1)
    return total


def time_breakdown(rows: list[Mapping[str, Any]], wall_s: float | None = None, jobs: int = 1) -> str:
    """Lines: the seconds inside the measurements per phase, with their share; with ``wall_s`` (the
    sweep's wall time in seconds) also the rest of ``wall_s * jobs``: process start, imports, plumbing
    and idle workers."""
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
        lines.append(f"  {max(0.0, wall_s * jobs - inside):8.0f} s        outside the measured phases")
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
