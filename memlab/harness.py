"""``memlab bench-harness``: what the measurement harness itself costs, and how load moves its times.

Two experiments, both printed as ratios measured side by side in one run (never asserted in tests):

* **Overhead per point**: the wall time of an isolated measurement minus the time spent inside it
  on steps and checks (the reference checks, the timed technique and reference steps, the resident
  step and the FLOP-counted step), for the spawned worker and for the warm fork server, over the
  same points.  What remains is process start-up and imports, problem building and the warm-up
  step, and the profiled steps with the processing of their trace (allocations, categories).
* **Load robustness**: the same configuration measured on an idle machine and under a deliberate
  CPU load of ``load_processes`` busy loops (processes this harness starts and stops): the
  absolute step time and the ``relative_step_time`` (technique step / interleaved reference step)
  under load, each as a ratio to its idle value; once with one intra-op thread and once with the
  process's default (one per core): NOTE [ threads and load ] in :mod:`memlab.measurement.inprocess`
  says why only the first cancels the load.
"""
from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["overhead", "load_robustness", "OverheadRow", "LoadRow", "quick_points", "report"]

#: one technique per family, each at the first configuration of its family's quick grid (`make demo`)
QUICK_TECHNIQUES: tuple[str, ...] = ("slice_loop", "unchunked", "tt_factorized", "reversible")


def quick_points(names=QUICK_TECHNIQUES) -> list[tuple[str, dict[str, Any]]]:
    """``(technique, params)`` at the first quick-grid configuration of each technique's family."""
    import memlab

    out = []
    for name in names:
        cls = memlab.get_technique(name)
        valid = cls.all_params()
        grid = cls.workload.sweep_grid(True)
        out.append((name, {k: v for k, v in grid[0].items() if k in valid}))
    return out


@dataclass(frozen=True)
class OverheadRow:
    """One point in one isolation mode; seconds."""

    mode: str
    technique: str
    wall_s: float
    timed_steps_s: float  # timed steps and reference checks inside the measurement
    recorded_steps_s: float = 0.0  # build, warm-up step, profiled steps and their trace's processing
    predict_cuda_s: float = 0.0  # the CUDA allocator model's replay of the trace (part of recorded_steps_s)

    @property
    def overhead_s(self) -> float:
        """Wall time minus the timed steps and checks (the issue's definition)."""
        return self.wall_s - self.timed_steps_s

    @property
    def process_overhead_s(self) -> float:
        """Wall time minus everything the measurement did: process start, imports, plumbing."""
        return self.wall_s - self.timed_steps_s - self.recorded_steps_s


@dataclass(frozen=True)
class LoadRow:
    """One measurement of the load experiment."""

    condition: str
    threads: int | None  # the measurement's intra-op threads (None: the process's default)
    load_avg: float | None
    step_time_s: float
    step_time_iqr_s: float | None
    relative_step_time: float | None


def _timed_steps(m) -> float:
    """Seconds spent inside a measurement on the reference checks and on the technique's and the
    reference's timed steps (the reference steps as their median times their count)."""
    ref = (m.reference_step_time_s or 0.0) * (len(m.step_times_s) + 1)
    inside = sum(m.extra.get(k, 0.0) for k in ("reference_check_s", "resident_step_s", "flop_step_s"))
    return sum(m.step_times_s) + ref + inside


def overhead(points=None, modes=("spawn", "fork"), *, repeats: int = 3, time_budget: float = 0.0,
             progress: Callable[[str], None] | None = None) -> list[OverheadRow]:
    """Measure every point in every mode (the fork server is started first and not counted)."""
    import memlab
    from memlab.measurement.runner import shutdown_server

    points = quick_points() if points is None else points
    if "fork" in modes:
        memlab.measure("unchunked", isolate="fork", n=8, d=4, hidden=4, iterations=1, repeats=1, time_budget=0)
    rows = []
    for mode in modes:
        for name, params in points:
            t0 = time.perf_counter()
            m = memlab.measure(name, isolate=mode, iterations=2, repeats=repeats, time_budget=time_budget, **params)
            wall = time.perf_counter() - t0
            if m.status not in ("ok", "mismatch"):
                raise RuntimeError(f"{name} {params}: {m.status}: {m.error}")
            rows.append(OverheadRow(mode, name, wall, _timed_steps(m), m.extra.get("recorded_steps_s", 0.0),
                                    m.extra.get("predict_cuda_s", 0.0)))
            r = rows[-1]
            if progress:
                progress(f"{mode:5} {name:16} wall {wall:6.2f} s, timed steps+checks {r.timed_steps_s:6.2f} s, "
                         f"profiled steps {r.recorded_steps_s:5.2f} s, process overhead {r.process_overhead_s:5.2f} s")
    shutdown_server()
    return rows


def _busy(stop, running) -> None:
    running.set()
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def load_robustness(name: str = "slice_loop", params: dict[str, Any] | None = None, *, load_processes: int = 2,
                    repeats: int = 15, thread_settings: tuple[int | None, ...] = (1, None),
                    progress: Callable[[str], None] | None = None) -> list[LoadRow]:
    """Measure ``name`` idle, under ``load_processes`` busy loops, and idle again (a child of the fork
    server each time), once per entry of ``thread_settings`` in each condition."""
    import memlab

    params = params if params is not None else {"n": 4000, "d": 256, "hidden": 1024, "chunk_size": 1000}
    rows = []

    def one(condition: str) -> None:
        for threads in thread_settings:
            m = memlab.measure(name, isolate="fork", iterations=1, repeats=repeats, time_budget=0, threads=threads,
                               **params)
            if m.status != "ok":
                raise RuntimeError(f"{name} {params}: {m.status}: {m.error}")
            used = m.environment.get("threads")
            rows.append(LoadRow(condition, threads, m.load_avg_after, m.step_time_s, m.step_time_iqr_s,
                                m.relative_step_time))
            if progress:
                progress(f"{condition:12} {used} thread(s), load {m.load_avg_after:5.2f}: step "
                         f"{m.step_time_text()}, relative {m.relative_step_time:.3f}")

    one("idle")
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    running = [ctx.Event() for _ in range(load_processes)]
    workers = [ctx.Process(target=_busy, args=(stop, r), daemon=True) for r in running]
    for w in workers:
        w.start()
    try:
        # a spawned process takes seconds to start (it re-imports the caller's main module): measure
        # only once every busy loop runs, or the first measurements see no load at all
        for r in running:
            if not r.wait(120):
                raise RuntimeError("a busy-loop process of the load experiment did not start within 120 s")
        time.sleep(1.0)  # let the loops settle in the run queue
        one(f"{load_processes}-proc load")
    finally:
        stop.set()
        for w in workers:
            w.join(10)
    one("idle again")
    return rows


def report(over: list[OverheadRow], load: list[LoadRow]) -> str:
    """The two experiments as text: per-mode mean overhead and the spawn/fork ratio; load ratios."""
    lines = [f"machine: {os.cpu_count()} cores, load average before: {os.getloadavg()[0]:.2f}"]
    by_mode: dict[str, list[OverheadRow]] = {}
    for r in over:
        by_mode.setdefault(r.mode, []).append(r)
    for mode, rs in by_mode.items():
        lines.append(f"per point, {mode:5}: wall {statistics.mean(r.wall_s for r in rs):.2f} s, overhead "
                     f"(wall - timed steps and checks) {statistics.mean(r.overhead_s for r in rs):.2f} s, of "
                     f"which process start/imports/plumbing {statistics.mean(r.process_overhead_s for r in rs):.2f} s "
                     f"({len(rs)} points)")
    if over:  # issue 15's goal: the replay costs <= 10% of the measurement
        replay, wall = sum(r.predict_cuda_s for r in over), sum(r.wall_s for r in over)
        lines.append(f"CUDA prediction (allocator replay of each trace): {replay:.3f} s of {wall:.2f} s measured "
                     f"({100 * replay / max(wall, 1e-9):.2f}%)")
    if "spawn" in by_mode and "fork" in by_mode:
        for attr, label in (("overhead_s", "overhead"), ("process_overhead_s", "process overhead")):
            spawn = statistics.mean(getattr(r, attr) for r in by_mode["spawn"])
            fork = statistics.mean(getattr(r, attr) for r in by_mode["fork"])
            if fork < 0.05:  # within timing noise of zero: a ratio would be meaningless
                lines.append(f"{label}: spawn {spawn:.2f} s, fork {fork:.2f} s (zero within timing noise)")
            else:
                lines.append(f"{label} spawn / fork: {spawn / fork:.1f}x")
    idle_rows = {r.threads: r for r in load if r.condition == "idle"}
    for r in load:
        idle = idle_rows.get(r.threads)
        if r.condition == "idle" or idle is None:
            continue
        label = f"{r.condition:12} {'default' if r.threads is None else r.threads} thread(s)"
        rel = (r.relative_step_time / idle.relative_step_time) if r.relative_step_time and idle.relative_step_time else None
        lines.append(f"{label} vs idle: absolute step time x{r.step_time_s / idle.step_time_s:.2f}, "
                     f"relative step time x{rel:.2f}" if rel is not None else f"{label}: no relative time")
    return "\n".join(lines)
