"""``memlab bench-harness``: what the measurement harness itself costs, and how load moves its times.

Two experiments, both printed as ratios measured side by side in one run (never asserted in tests):

* **Overhead per point**: the wall time of an isolated measurement outside every phase its
  children time themselves (:func:`harness_seconds`, NOTE [ harness cost ]: the figure ``memlab
  sweep``'s breakdown prints per point), for the spawned worker and for the warm fork server, over
  the same points.  What remains is process start-up (a spawned worker's imports), the fork, the
  request and result files and the parent's bookkeeping.
* **Load robustness**: one technique of each of three families (:func:`load_points`: the points the
  families' ``meta.py`` name in ``HARNESS_LOAD_POINTS``), each measured three times on an idle
  machine and three times under a deliberate CPU load of ``load_processes`` busy loops (default
  three per core; processes this harness starts and stops), with memlab's default settings: the
  ``relative_step_time`` (thread CPU time of the technique's step over the interleaved
  family-baseline steps, NOTE [ CPU time and load ] in :mod:`memlab.measurement.timing`) of each
  run, the spread of the runs in each condition, and the loaded/idle ratio of the medians, beside
  the same ratio in wall-clock time.
"""
from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import memlab
from ..core.record import WHOLE_STATUSES
from ..registry import family_meta
from memlab.measurement.runner import shutdown_server

__all__ = ["PHASES", "phase_seconds", "harness_seconds", "overhead", "load_robustness", "load_table", "OverheadRow",
           "LoadRow", "load_points", "quick_points", "quick_techniques", "report"]


#: (key, what it is) in the order printed; wall seconds inside the measuring children
PHASES = (
    ("reference_check_s", "reference checks (float64, then the measured dtype)"),
    ("recorded_steps_s", "build, warm-up and allocation-traced steps"),
    ("step_check_s", "traced steps checked against the shadow reference"),
    ("resident_step_s", "resident high-water step"),
    ("flop_step_s", "FLOP-counted step"),
    ("timing_setup_s", "timed phase: build and warm-up of technique, baseline and shadow"),
    ("timed_steps_s", "timed technique steps"),
    ("timed_reference_steps_s", "timed plain-reference steps (median x count)"),
    ("timed_check_s", "timed steps checked against the shadow reference"),
)
#: the phases a measurement records in ``extra`` (the timed steps come from ``step_times_s``)
_EXTRA_PHASES = tuple(k for k, _ in PHASES if k not in ("timed_steps_s", "timed_reference_steps_s"))

# NOTE [ harness cost ]
# ~~~~~~~~~~~~~~~~~~~~~~
# What the harness costs beyond measuring is one figure, computed by :func:`harness_seconds` and
# nowhere else, which ``memlab sweep``'s breakdown and ``memlab bench-harness`` both print
# (tests/test_harness_cost.py checks that both call it): the wall time of the measurements (a
# sweep's wall time times its jobs; one ``memlab.measure`` call's wall time) minus every phase the
# children time themselves (:data:`PHASES`: the steps, the reference checks, the check of every
# traced and timed step against its shadow, the builds and warm-ups of both children) and minus the
# start of the fork servers (``extra["harness_s"]["server_start"]``: torch and memlab imported once per worker,
# not per point).  What is left is process plumbing (a fork, the request and result files, the
# parent's bookkeeping, idle workers at a parallel sweep's end), reported per point.  Before issue 47
# the check of every step and the timed phase's builds were in no phase, so a sweep's breakdown put
# them "outside", while ``bench-harness`` counted the checks it knew inside and the server's start
# nowhere: the two disagreed.
# Evidence: docs/evidence/readme-timing.md#harness-cost


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0.0


def phase_seconds(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds per phase (keys of :data:`PHASES`) summed over ``rows``; missing figures count 0."""
    total = {key: 0.0 for key, _ in PHASES}
    for row in rows:
        extra = row.get("extra") or {}
        for key in _EXTRA_PHASES:
            total[key] += _seconds(extra.get(key))
        times = [_seconds(t) for t in row.get("step_times_s") or ()]
        total["timed_steps_s"] += sum(times)
        if times:
            total["timed_reference_steps_s"] += _seconds(row.get("reference_step_time_s")) * (len(times) + 1)
    return total


def _harness(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """A row's ``extra["harness_s"]`` (``memlab.measure``'s: the children's wall seconds and the servers' start), or {}."""
    harness = (row.get("extra") or {}).get("harness_s")
    return harness if isinstance(harness, Mapping) else {}


def harness_seconds(rows: list[Mapping[str, Any]], wall_s: float, jobs: int = 1) -> dict[str, float]:
    """NOTE [ harness cost ]: for ``rows`` measured in ``wall_s`` wall seconds by ``jobs`` workers,
    seconds ``inside`` the phases, ``server_start`` (the fork servers' start), ``outside`` (the rest of
    ``wall_s * jobs``, at least 0) and ``per_point`` (``outside`` over the rows; 0 without rows)."""
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} is not valid: expected a whole number >= 1")
    inside = sum(phase_seconds(rows).values())
    start = sum(_seconds(_harness(row).get("server_start")) for row in rows)
    outside = max(0.0, wall_s * jobs - inside - start)
    return {"inside": inside, "server_start": start, "outside": outside,
            "per_point": outside / len(rows) if rows else 0.0}


def quick_techniques() -> tuple[str, ...]:
    """One technique per registered family, families sorted: the family's baseline (``baseline = True``,
    the no-savings reference every family has), what ``make demo``'s overhead table measures.

    A family without a baseline technique (a plug-in's may have none) is left out.

    Raises:
        ValueError: a family with more than one baseline technique (the message names them).
    """
    out = []
    for family in memlab.list_families():
        baselines = [n for n in memlab.list_techniques(family) if memlab.get_technique(n).baseline]
        if not baselines:  # a plug-in family may have none: it is timed against its reference
            continue
        if len(baselines) != 1:
            raise ValueError(f"family {family!r} has baseline techniques {baselines}; expected exactly one "
                             "(set baseline = True on its no-savings technique)")
        out.append(baselines[0])
    return tuple(out)


def quick_points(names=None) -> list[tuple[str, dict[str, Any]]]:
    """``(technique, params)`` at the first quick-grid configuration of each technique's family
    (default: :func:`quick_techniques`, one per family)."""
    names = quick_techniques() if names is None else names
    out = []
    for name in names:
        cls = memlab.get_technique(name)
        valid = cls.all_params()
        grid = cls.workload.sweep_grid(True)
        out.append((name, {k: v for k, v in grid[0].items() if k in valid}))
    return out


@dataclass(frozen=True)
class OverheadRow:
    """One point in one isolation mode: the wall seconds of its ``memlab.measure`` call and
    :func:`harness_seconds` of its row over them (NOTE [ harness cost ])."""

    mode: str
    technique: str
    wall_s: float
    inside_s: float  # the phases the children time (PHASES)
    outside_s: float  # the rest: process plumbing (a started fork server not counted)
    predict_cuda_s: float = 0.0  # the CUDA allocator model's replay of the trace (part of recorded_steps_s)

    @property
    def overhead_s(self) -> float:
        """Seconds outside the measured phases (:func:`harness_seconds`)."""
        return self.outside_s


@dataclass(frozen=True)
class LoadRow:
    """One measurement of the load experiment (seconds; the relative times are ratios)."""

    condition: str
    threads: int | None  # the timed phase's intra-op threads as asked (None: memlab's default, one)
    load_avg: float | None
    step_time_s: float
    step_time_iqr_s: float | None
    relative_step_time: float | None
    technique: str  # the technique measured
    relative_step_time_wall: float | None = None
    run: int = 1
    relative_to: str | None = None  # the technique the ratios divide by (the family baseline)
    reference_step_time_s: float | None = None  # its median wall step in the same measurement
    timing_cpu: int | None = None  # the CPU the timed phase was pinned to (NOTE [ one CPU per timed phase ])


def load_points(environ: Mapping[str, str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(technique, params)`` of the load experiment, at sizes that take seconds, not minutes: the
    points every family folder's ``meta.py`` names in ``HARNESS_LOAD_POINTS`` (built-in and plug-in
    folders of ``environ``'s ``MEMLAB_PLUGINS``, :func:`memlab.registry.family_meta`), in their
    positions' order (issue 15's three: a chunking, a tensor-train and a reversible technique)."""
    points = [p for meta in family_meta(environ).values() for p in meta.harness_load_points]
    return [(name, params) for _, name, params in sorted(points, key=lambda p: p[0])]


def overhead(points=None, modes=("spawn", "fork"), *, repeats: int = 3, time_budget: float = 0.0,
             progress: Callable[[str], None] | None = None) -> list[OverheadRow]:
    """Measure every point in every mode; each row's cost outside the measured phases is
    :func:`harness_seconds` of its measurement over the wall time of its ``memlab.measure`` call, as
    ``memlab sweep``'s breakdown computes it (the fork server is started first, by one untimed
    measurement of the first point; a spawned child's start counts, as it does in a CUDA sweep)."""
    points = quick_points() if points is None else points
    if "fork" in modes and points:
        first, params = points[0]
        memlab.measure(first, isolate="fork", iterations=1, repeats=1, time_budget=0, **params)
    rows = []
    for mode in modes:
        for name, params in points:
            t0 = time.perf_counter()
            m = memlab.measure(name, isolate=mode, iterations=2, repeats=repeats, time_budget=time_budget, **params)
            wall = time.perf_counter() - t0
            if m.status not in WHOLE_STATUSES:
                raise RuntimeError(f"{name} {params}: {m.status}: {m.error}")
            cost = harness_seconds([m.to_dict()], wall)
            rows.append(OverheadRow(mode, name, wall, cost["inside"], cost["outside"],
                                    m.extra.get("predict_cuda_s", 0.0)))
            if progress:
                progress(f"{mode:5} {name:16} wall {wall:6.2f} s, inside the measured phases {cost['inside']:6.2f} s, "
                         f"outside {rows[-1].outside_s:5.2f} s")
    shutdown_server()
    return rows


def _busy(stop, running) -> None:
    running.set()
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def _busy_loops(count: int):
    """Start ``count`` busy-loop processes and wait until each runs; returns ``(stop event, processes)``."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    running = [ctx.Event() for _ in range(count)]
    workers = [ctx.Process(target=_busy, args=(stop, r), daemon=True) for r in running]
    for w in workers:
        w.start()
    # a spawned process takes seconds to start (it re-imports the caller's main module): measure
    # only once every busy loop runs, or the first measurements see no load at all
    for r in running:
        if not r.wait(120):
            stop.set()
            raise RuntimeError("a busy-loop process of the load experiment did not start within 120 s")
    time.sleep(1.0)  # let the loops settle in the run queue
    return stop, workers


def load_robustness(points=None, *, load_processes: int | None = None, runs: int = 3, repeats: int = 5,
                    time_budget: float = 2.0, threads: int | None = None,
                    progress: Callable[[str], None] | None = None) -> list[LoadRow]:
    """Measure each point ``runs`` times idle, then ``runs`` times under ``load_processes`` busy loops
    (default: three per core), each a child of the fork server with memlab's default settings
    (``threads=None``: the timed phase at one thread, relative time in thread CPU time; ``repeats``
    and ``time_budget`` as ``memlab measure``'s defaults: NOTE [ when to stop timing ]); ``points``
    default: :func:`load_points`."""
    points = load_points() if points is None else points
    load_processes = 3 * (os.cpu_count() or 1) if load_processes is None else load_processes
    rows: list[LoadRow] = []

    def one(condition: str) -> None:
        for run in range(1, runs + 1):
            for name, params in points:
                m = memlab.measure(name, isolate="fork", iterations=1, repeats=repeats, time_budget=time_budget,
                                   threads=threads, **params)
                if m.status != "ok":
                    raise RuntimeError(f"{name} {params}: {m.status}: {m.error}")
                rows.append(LoadRow(condition, threads, m.load_avg_after, m.step_time_s, m.step_time_iqr_s,
                                    m.relative_step_time, name, m.relative_step_time_wall, run, m.relative_to,
                                    m.reference_step_time_s, m.environment.get("timing_cpu")))
                if progress:
                    progress(f"{condition:12} run {run} {name:12} load {m.load_avg_after:5.2f}: step "
                             f"{m.step_time_text()}, relative {m.relative_step_time:.3f} (wall "
                             f"{m.relative_step_time_wall:.3f}) against {m.relative_to} (step {_ms(m.reference_step_time_s)} ms)")

    one("idle")
    stop, workers = _busy_loops(load_processes)
    try:
        one(f"{load_processes}-proc load")
    finally:
        stop.set()
        for w in workers:
            w.join(10)
    return rows


def _spread(values: list[float]) -> float:
    """(max - min) / min of positive values, as a fraction."""
    return (max(values) - min(values)) / min(values) if values and min(values) > 0 else float("nan")


def _iqr(values: list[float]) -> float | None:
    """Interquartile range (``statistics.quantiles``, inclusive, as memlab records a step's IQR); None under two."""
    if len(values) < 2:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q3 - q1


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _detail_lines(name: str, load: list[LoadRow], conditions: list[str]) -> list[str]:
    """Under a technique's line: what its ratios divide by (the reference technique and its step in each
    run) and the spread behind each figure (the IQR of the runs' relative times, each run's own step
    median ± IQR of its timed steps), so no ratio stands against a row the output does not show."""
    rs = [r for r in load if r.technique == name]
    refs = sorted({r.relative_to for r in rs if r.relative_to})
    lines = [f"  ratios against: {', '.join(refs) if refs else 'the family baseline (not recorded)'}, "
             "timed interleaved in the same measurement"]
    for c in conditions:
        runs = [r for r in rs if r.condition == c]
        rel = [r.relative_step_time for r in runs if r.relative_step_time]
        iqr = _iqr(rel)
        med = statistics.median(rel) if rel else None
        spread = (f"IQR {iqr:.3f} ({100 * iqr / med:.1f}% of the median {med:.3f})" if iqr is not None and med
                  else "IQR - (under two runs)")
        steps = ", ".join(f"{_ms(r.step_time_s)} ± {_ms(r.step_time_iqr_s)}" for r in runs)
        refs_ms = ", ".join(_ms(r.reference_step_time_s) for r in runs)
        cpus = ", ".join("-" if r.timing_cpu is None else str(r.timing_cpu) for r in runs)
        wide = [r.run for r in runs if r.step_time_iqr_s is not None and r.step_time_s and r.step_time_iqr_s > r.step_time_s]
        lines.append(f"  {c}: relative {spread}; {name} step ms (median ± IQR of its timed steps, per run) {steps}; "
                     f"reference step ms {refs_ms}; timed on CPU {cpus}"
                     + (f"; run(s) {', '.join(map(str, wide))}: IQR above the median (wall-clock steps "
                        "disturbed by the load; the ratios are CPU time)" if wide else ""))
    return lines


def load_table(load: list[LoadRow]) -> list[str]:
    """Per technique: the median relative time idle and loaded, their ratio, and the spread of the
    repeated runs in each condition (the issue's two 5% criteria), with the load averages; under it,
    the reference the ratios divide by, its steps, and the IQRs (:func:`_detail_lines`)."""
    conditions = list(dict.fromkeys(r.condition for r in load))
    lines = ["technique     " + "  ".join(f"{c + ' (runs)':>38}" for c in conditions)
             + "  loaded/idle  wall loaded/idle"]
    for name in dict.fromkeys(r.technique for r in load):
        cells, medians, walls = [], [], []
        for c in conditions:
            rs = [r for r in load if r.technique == name and r.condition == c and r.relative_step_time]
            rel = [r.relative_step_time for r in rs]
            medians.append(statistics.median(rel) if rel else None)
            walls.append(statistics.median(r.relative_step_time_wall for r in rs) if rs else None)
            loads = "/".join(f"{r.load_avg:.1f}" for r in rs if r.load_avg is not None)
            cells.append(f"{' '.join(f'{x:.3f}' for x in rel)} ±{100 * _spread(rel):.1f}% @{loads}")
        ratio = (f"{medians[-1] / medians[0]:.3f}" if len(medians) > 1 and medians[0] and medians[-1] else "-")
        wall = (f"{walls[-1] / walls[0]:.3f}" if len(walls) > 1 and walls[0] and walls[-1] else "-")
        lines.append(f"{name:13} " + "  ".join(f"{c:>38}" for c in cells) + f"  {ratio:>11}  {wall:>16}")
        lines.extend(_detail_lines(name, load, conditions))
    return lines


def report(over: list[OverheadRow], load: list[LoadRow]) -> str:
    """The two experiments as text: per-mode mean overhead and the spawn/fork ratio; load ratios."""
    lines = [f"machine: {os.cpu_count()} cores, load average before: {os.getloadavg()[0]:.2f}"]
    by_mode: dict[str, list[OverheadRow]] = {}
    for r in over:
        by_mode.setdefault(r.mode, []).append(r)
    for mode, rs in by_mode.items():
        lines.append(f"per point, {mode:5}: wall {statistics.mean(r.wall_s for r in rs):.2f} s, outside the measured "
                     f"phases {statistics.mean(r.outside_s for r in rs):.2f} s ({len(rs)} points; NOTE [ harness cost ])")
    if over:  # issue 15's goal: the replay costs <= 10% of the measurement
        replay, wall = sum(r.predict_cuda_s for r in over), sum(r.wall_s for r in over)
        lines.append(f"CUDA prediction (allocator replay of each trace): {replay:.3f} s of {wall:.2f} s measured "
                     f"({100 * replay / max(wall, 1e-9):.2f}%)")
    if "spawn" in by_mode and "fork" in by_mode:
        spawn = statistics.mean(r.outside_s for r in by_mode["spawn"])
        fork = statistics.mean(r.outside_s for r in by_mode["fork"])
        if fork < 0.05:  # within timing noise of zero: a ratio would be meaningless
            lines.append(f"outside the phases: spawn {spawn:.2f} s, fork {fork:.2f} s (zero within timing noise)")
        else:
            lines.append(f"outside the phases, spawn / fork: {spawn / fork:.1f}x")
    if load:
        lines.append("relative step time (thread CPU time of the technique's step over the reference's, one thread; "
                     "the reference and its steps are under each technique; ±: (max - min) / min of the runs; "
                     "@: load averages):")
        lines.extend(load_table(load))
    return "\n".join(lines)
