"""Sweeps: measure every technique of a family over its workload's grid, writing JSON Lines.

Each finished Measurement is appended to the output file and fsync'd at once, so an interrupted
sweep keeps every row it finished; non-``ok`` rows are written like any other and the sweep goes on.
See NOTE [ sweep output ] for how the output file is kept whole.
"""
from __future__ import annotations

import errno
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from .atomic import FileLocked, append_line_durable, lock_exclusive
from .measurement import measure
from .record import STATUSES, Measurement, fmt_mib
from .registry import get_technique, list_families, list_techniques

__all__ = ["SweepPoint", "plan_sweep", "parse_grid", "run_sweep", "read_jsonl", "format_table", "already_measured", "is_done",
           "check_jobs", "SweepOutput", "open_sweep_output", "SweepOutputBusy", "SweepWriteFailed", "status_summary", "not_ok_lines"]

# NOTE [ sweep output ]
# A sweep's --out file is only ever written by the sweep that holds its lock, one whole row at a time:
# * open_sweep_output opens the file without truncating it, takes a non-blocking flock on it (a second
#   sweep on the same file is refused, naming the holder's pid) and only then truncates it (a fresh
#   run) or repairs its tail (--append / --resume);
# * a torn last line (a killed run, a full disk: no final newline and not a whole JSON object) is
#   reported as FILE:LINE and cut off, so its point counts as not measured and is measured again.
#   A complete line (it ends with its newline: one write(2) put it there whole) is never removed: a
#   last one that is not a row (not UTF-8, not JSON) is reported as FILE:LINE and kept, and --resume
#   counts its point as not measured, like an unreadable line elsewhere;
# * --out that is a symbolic link to an existing file that is not a memlab sweep file (empty, or
#   its first line a row memlab.results reads) is refused: it would replace or extend that file;
# * each row is one write(2) call plus fsync (memlab.atomic.append_line_durable); a write that fails
#   half-way is cut back off, so after any OSError the file still ends with a complete row and the
#   sweep stops with SweepWriteFailed ("disk full writing FILE after N rows; rerun with --resume").


@dataclass(frozen=True)
class SweepPoint:
    technique: str
    params: dict[str, Any]


def parse_grid(specs: list[str]) -> dict[str, list[str]]:
    """``["chunk_size=100,1000", "batch=256"]`` -> ``{"chunk_size": ["100", "1000"], "batch": ["256"]}``.

    Values stay text here; each technique parses them with its own :class:`~memlab.Param`.
    Raises ValueError naming the malformed spec or the repeated parameter.
    """
    grid: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key or not items:
            raise ValueError(f"--grid {spec!r} is not of the form name=value1,value2,...")
        if key in grid:
            raise ValueError(f"--grid names {key!r} twice; give all its values in one --grid {key}=a,b,c")
        grid[key] = items
    return grid


def _grid_points(cls, grid: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The cross product of ``grid`` for one technique, each value parsed by the technique's Param."""
    import itertools

    specs = cls.all_params()
    unknown = [k for k in grid if k not in specs]
    if unknown:
        raise ValueError(f"technique {cls.name!r} has no parameter {unknown[0]!r}; valid parameters: "
                         f"{', '.join(sorted(specs))}")
    keys = list(grid)
    parsed = [[specs[k].parse(k, v) for v in grid[k]] for k in keys]
    points = [dict(zip(keys, combo)) for combo in itertools.product(*parsed)]
    for p in points:
        cls.resolve(p)  # cross-parameter checks (divisibility...) up front: one line, before measuring
        cls(**p)
    return points


def plan_sweep(family: str | None = None, quick: bool = False, techniques: list[str] | None = None,
               grid: dict[str, list[str]] | None = None, defaults: bool = False) -> list[SweepPoint]:
    """Technique x configuration pairs to measure.

    The configurations are the workload's sweep grid (``quick``: its small one); or, with ``grid``
    (``{parameter: [values as text]}``), the cross product of those values for every selected
    technique, which must all have those parameters (a plug-in's own included); or, with
    ``defaults``, each technique's default configuration only.
    Grid keys a technique does not have are dropped and the resulting duplicates measured once.
    The order is configuration-major and round-robin over families: the first grid entry of every
    family for every technique, then the second..., so an interrupted sweep has covered every
    technique (and every family) at the configurations it reached.
    Raises ValueError for an unknown family, technique or parameter, or a value out of range.
    """
    families = list_families()
    if family is not None and family not in families:
        raise ValueError(f"unknown family {family!r}; available: {', '.join(families)}")
    if grid and defaults:
        raise ValueError("--grid and --defaults exclude each other: --defaults measures each technique's defaults only")
    names = techniques if techniques is not None else list_techniques(family)
    keyed: list[tuple[int, str, int, SweepPoint]] = []
    for order, name in enumerate(names):
        cls = get_technique(name)
        if family is not None and cls.family() != family:
            continue
        valid = cls.all_params()
        seen: list[dict[str, Any]] = []
        configs = _grid_points(cls, grid) if grid else [{}] if defaults else cls.workload.sweep_grid(quick)
        for index, cfg in enumerate(configs):
            kept = {k: v for k, v in cfg.items() if k in valid}
            if kept not in seen:
                seen.append(kept)
                keyed.append((index, cls.family(), order, SweepPoint(name, kept)))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


#: statuses of a finished measurement: a resumed sweep does not repeat them (a verdict is
#: deterministic); ``oom`` and ``error`` rows may be transient and are measured again
FINISHED_STATUSES = ("ok", "mismatch", "leak")


def already_measured(path: str | os.PathLike, device: str, dtype: str, mode: str,
                     warn: Callable[[str], None] | None = None, *, optimizer: str = "sgd",
                     loss: str = "given") -> set[tuple[str, str]]:
    """``(technique, canonical params)`` keys of the finished rows in ``path`` (for --resume).

    A row counts when its status is in :data:`FINISHED_STATUSES` and it was measured with the same
    device type, dtype, mode, optimizer and loss.  A point is identified by the parameters it was
    asked for; the stored rows carry every resolved parameter, so a stored row matches a point when
    the point's parameters agree with it.  Rows are read as the site reads them
    (:func:`memlab.results.sweep_records`): a line that is unreadable, or a row the site would refuse
    (a NaN, negative or non-numeric figure, an ``ok`` whose error is beyond its tolerance), is passed
    to ``warn`` as ``memlab: warning: FILE:LINE: ...`` and does not count, so its point is measured again.
    """
    from .results import sweep_records

    if not os.path.exists(path):
        return set()

    def skipped(msg: str) -> None:
        if warn is not None:
            warn(f"memlab: warning: {msg}; not counted as measured")

    rows = [rec for _, rec in sweep_records(path, skipped)]
    return {(r["technique"], json.dumps(r["params"], sort_keys=True)) for r in rows
            if r["status"] in FINISHED_STATUSES and r["device"].split(":")[0] == device.split(":")[0]
            and r["dtype"] == dtype and r["mode"] == mode and (r.get("optimizer") or "sgd") == optimizer
            and (r.get("loss") or "given") == loss}


def is_done(point: SweepPoint, done: set[tuple[str, str]]) -> bool:
    full = get_technique(point.technique).resolve(point.params)
    return (point.technique, json.dumps(full, sort_keys=True, default=list)) in done


def run_sweep(points: list[SweepPoint], out: "SweepOutput | TextIO | None", *, device: str = "cpu",
              dtype: str = "float32", mode: str = "train",
              progress: Callable[[int, int, SweepPoint, Measurement | None, float], None] | None = None,
              warn: Callable[[str], None] | None = None, jobs: int = 1, **measure_kw: Any) -> Iterator[Measurement]:
    """Measure each point (isolated), append it to ``out`` at once, yield it.

    ``out``: a :class:`SweepOutput` (locked, see NOTE [ sweep output ]) or an open text file.  A
    point whose technique cannot run on ``device`` is skipped with a line to ``warn`` (default:
    stderr).  Raises :class:`SweepWriteFailed` when a row cannot be written to a SweepOutput.

    ``jobs``: measurements run at once (CPU only; NOTE [ parallel sweep ]).  Rows are written and
    yielded in the order they finish.  With ``jobs > 1`` and no ``threads`` given, each measurement
    gets ``cores // jobs`` intra-op threads (at least 1).  The points' reference checks share the
    workload reference through a temporary folder (:mod:`memlab.measurement.reference_cache`),
    removed when the sweep ends.
    """
    check_jobs(jobs, device)
    warn = warn or _to_stderr
    if jobs > 1 and measure_kw.get("threads") is None:
        measure_kw["threads"] = max(1, (os.cpu_count() or 1) // jobs)

    own_cache = None
    if measure_kw.get("check", True) and measure_kw.get("reference_cache") is None:
        own_cache = measure_kw["reference_cache"] = tempfile.mkdtemp(prefix="memlab-references-")
    try:
        yield from _measured(points, out, device, dtype, mode, progress, warn, jobs, measure_kw)
    finally:
        if own_cache is not None:
            shutil.rmtree(own_cache, ignore_errors=True)


def _measured(points, out, device, dtype, mode, progress, warn, jobs, measure_kw) -> Iterator[Measurement]:
    from .technique import TechniqueUnavailable

    def measure_one(point: SweepPoint) -> Measurement:
        return measure(point.technique, device=device, dtype=dtype, mode=mode, **measure_kw, **point.params)

    if jobs == 1:
        finished = _one_at_a_time(points, measure_one, progress)
    else:
        finished = _in_parallel(points, measure_one, jobs)
    for done, (point, result, seconds) in enumerate(finished, start=1):
        if isinstance(result, TechniqueUnavailable):
            if progress:
                progress(done, len(points), point, None, seconds)
            warn(f"memlab: skipped {point.technique}: {result}")
            continue
        if isinstance(result, BaseException):
            raise result
        if isinstance(out, SweepOutput):
            out.append(result)
        elif out is not None:
            append_line_durable(out, result.to_json())
        if progress:
            progress(done, len(points), point, result, seconds)
        yield result


def check_jobs(jobs: int, device: str) -> None:
    """``jobs`` must be a whole number from 1 to 64, and 1 unless the device is the CPU."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= 64:
        raise ValueError(f"jobs={jobs!r} is not valid: expected a whole number from 1 to 64")
    if jobs > 1 and not str(device).startswith("cpu"):
        raise ValueError(f"jobs={jobs} needs device 'cpu' (got {device!r}): measurements on one GPU run one at a time")


# NOTE [ parallel sweep ]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# ``jobs`` worker threads each take the next point and measure it through their own fork server
# (memlab.measurement.runner keeps one per thread), so ``jobs`` children measure at once.  What
# memlab reports stays exact: allocated bytes come from each child's own allocation events, the
# resident figure from its own VmHWM; nothing is shared between children but the cores.  Times are
# another matter: two measurements on two cores slow each other like any load, so a parallel sweep
# gives each one ``cores // jobs`` threads (one, on our 2-core machines), which keeps
# ``relative_step_time`` load-robust (NOTE [ threads and load ] in memlab.measurement.inprocess);
# the rows record their threads and the load average, and their absolute times are single-thread
# times.  For absolute times on an idle machine, sweep with jobs=1.
# What it buys (3 December 2026, 2 idle cores): ``make demo`` (38 quick points, where process and
# Python overheads dominate) took 41 s with ``--jobs 2``; the full grid, where compute dominates,
# ran at 10.7 s per point (101 of 213 points in 18 min), about what one job with two threads
# does: two single-thread GEMMs are no faster than one two-thread GEMM.  Its 747 exact figures at the
# 83 points it shared with data/sweeps/cpu.jsonl (one job, two threads) were identical.


def _attempt(measure_one, point: SweepPoint) -> tuple[SweepPoint, Any, float]:
    """``(point, Measurement or the exception measuring it raised, seconds)``: run_sweep decides."""
    t0 = time.perf_counter()
    try:
        result = measure_one(point)
    except Exception as exc:  # noqa: BLE001 - handed back to run_sweep, which decides
        result = exc
    return point, result, time.perf_counter() - t0


def _one_at_a_time(points, measure_one, progress):
    """Yield :func:`_attempt` of each point, in order, telling ``progress`` when each starts."""
    for i, point in enumerate(points):
        if progress:
            progress(i, len(points), point, None, 0.0)
        yield _attempt(measure_one, point)


def _in_parallel(points, measure_one, jobs: int):
    """Yield :func:`_attempt` of each point as ``jobs`` threads finish them."""
    from .measurement.runner import close_thread_server, kill_children_of

    todo: queue.Queue = queue.Queue()
    for point in points:
        todo.put(point)
    finished: queue.Queue = queue.Queue()
    stop = threading.Event()

    def worker() -> None:
        try:
            while not stop.is_set():
                try:
                    point = todo.get_nowait()
                except queue.Empty:
                    return
                finished.put(_attempt(measure_one, point))
        finally:
            close_thread_server()

    workers = [threading.Thread(target=worker, name=f"memlab-sweep-{k}", daemon=True) for k in range(min(jobs, len(points)))]
    for w in workers:
        w.start()
    done = 0
    try:
        for _ in range(len(points)):
            yield finished.get()
            done += 1
    finally:
        stop.set()
        if done < len(points):  # interrupted (Ctrl-C, SIGTERM) or failed: stop the measurements running now
            # again and again until the workers end: a worker that was starting its next measurement
            # when the signal came has no child to kill yet (that child then ran until the 30 s join
            # gave up, 1 time in 6: a SIGTERM took 40 s instead of 0.5 s)
            threads = {w.ident for w in workers if w.ident is not None}
            deadline = time.monotonic() + 30
            while any(w.is_alive() for w in workers) and time.monotonic() < deadline:
                kill_children_of(threads)
                for w in workers:
                    w.join(0.05)


def read_jsonl(path: str | os.PathLike, warn: Callable[[str], None] | None = None) -> list[Measurement]:
    """Measurements from a JSON Lines file.

    A line that is not UTF-8, not JSON (or nested too deeply) or not a Measurement is skipped with
    a warning ``FILE:LINE: skipped unreadable measurement (reason)``; the other lines are kept.
    """
    out = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                out.append(Measurement.from_dict(json.loads(raw.decode("utf-8"))))
            except (ValueError, TypeError, RecursionError) as exc:
                if warn is not None:
                    warn(f"{path}:{lineno}: skipped unreadable measurement ({str(exc)[:120]})")
    return out


def status_summary(rows: list[Measurement], planned: int) -> str:
    """``'14 points: 12 ok, 1 mismatch, 1 error'``: the count per status, in :data:`STATUSES` order.

    ``planned`` points that yielded no row (technique unavailable on the device) count as skipped.
    """
    counts: dict[str, int] = {}
    for m in rows:
        counts[m.status] = counts.get(m.status, 0) + 1
    order = [s for s in STATUSES if s in counts] + sorted(set(counts) - set(STATUSES))
    parts = [f"{counts[s]} {s}" for s in order]
    if planned > len(rows):
        parts.append(f"{planned - len(rows)} skipped")
    return f"{planned} point{'' if planned == 1 else 's'}: " + (", ".join(parts) or "none measured")


def _to_stderr(text: str) -> None:
    """One line to stderr; a closed stderr is ignored (the sweep goes on without its messages)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


# -- the output file (NOTE [ sweep output ]) -------------------------------------------------------
class SweepOutputBusy(Exception):
    """Another sweep holds the output file's lock; the message is the one line to show."""


class SweepWriteFailed(Exception):
    """A row could not be written (disk full, I/O error); the file still ends with a whole row.

    Attributes: ``path``, ``rows`` (rows this sweep wrote before the failure), ``cause`` (the OSError).
    """

    def __init__(self, path: str, rows: int, cause: OSError):
        self.path, self.rows, self.cause = path, rows, cause
        reason = "disk full" if cause.errno == errno.ENOSPC else (cause.strerror or str(cause))
        super().__init__(f"{reason} writing {path} after {rows} row{'' if rows == 1 else 's'}; rerun with --resume")


class SweepOutput:
    """A sweep's JSON Lines file, opened by :func:`open_sweep_output` and locked until :meth:`close`.

    ``rows_written``: rows this sweep appended.  Use as a context manager.
    """

    def __init__(self, path: str, fd: int):
        self.path, self._fd, self.rows_written = path, fd, 0

    def append(self, m: Measurement) -> None:
        """Append ``m`` as one line, fsync'd.  Raises :class:`SweepWriteFailed` on any OSError."""
        try:
            append_line_durable(self._fd, m.to_json())
        except OSError as exc:
            raise SweepWriteFailed(self.path, self.rows_written, exc) from None
        self.rows_written += 1

    def close(self) -> None:
        """Close the file, which releases the lock.  Closing twice is a no-op."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "SweepOutput":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_sweep_output(path: str | os.PathLike, *, append: bool,
                      warn: Callable[[str], None] | None = None) -> SweepOutput:
    """Open ``path`` for a sweep, exclusively: locked, then emptied (``append=False``) or repaired.

    With ``append`` the rows already there are kept, and a torn last line is cut off with one
    line to ``warn`` naming ``FILE:LINE`` (a complete last line that is not a row is kept and
    reported; see NOTE [ sweep output ]).  Folders above ``path`` are created.  Nothing is
    written or truncated unless the lock was taken.

    Raises:
        ValueError: ``path`` is a directory or not a regular file, a symbolic link to an existing
            file that is not a memlab sweep file, or cannot be opened for writing (the message
            names the path and the system's reason).
        SweepOutputBusy: another sweep holds the lock (the message names its pid).
    """
    path = str(path)
    warn = warn or _to_stderr
    if os.path.isdir(path):
        raise ValueError(f"--out {path} is a directory; give a file path such as {os.path.join(path, 'sweep.jsonl')}")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ValueError(f"--out {path} is not a regular file; give a file path such as sweep.jsonl")
    if os.path.islink(path) and os.path.exists(path) and not _is_sweep_file(path):
        raise ValueError(f"--out {path} is a symbolic link to {os.path.realpath(path)}, which is not a memlab "
                         f"sweep file; refused rather than {'appended to' if append else 'replaced'}: give "
                         f"another --out")
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ValueError(f"cannot write --out {path}: {exc.strerror or exc}") from None
    try:
        lock_exclusive(fd, path)
        if append:
            _cut_torn_tail(fd, path, warn)
        else:
            os.ftruncate(fd, 0)
    except FileLocked as exc:
        os.close(fd)
        holder = f"pid {exc.pid}" if exc.pid is not None else "pid unknown"
        raise SweepOutputBusy(f"{path} is being written by another sweep ({holder}); "
                              f"wait for it or use another --out") from None
    except OSError as exc:
        os.close(fd)
        raise ValueError(f"cannot write --out {path}: {exc.strerror or exc}") from None
    return SweepOutput(path, fd)


def _is_sweep_file(path: str) -> bool:
    """True for an empty file or one whose first non-blank line is a row the site reads."""
    from .results import sweep_records

    problems: list[str] = []
    next(sweep_records(path, problems.append), None)  # a bad first line is reported before any row
    return not problems


def _cut_torn_tail(fd: int, path: str, warn: Callable[[str], None]) -> None:
    """Truncate an incomplete last line off the open file ``fd``, with one warning naming FILE:LINE;
    a complete last line that is not a row is kept, with one warning naming FILE:LINE."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0) if size else b""
    torn = torn_tail(data)
    if torn is None:
        if data and not data.endswith(b"\n"):  # a whole row that lacks only its newline: keep it
            append_line_durable(fd, "")
        elif data:
            _report_unreadable_last_line(data, path, warn)
        return
    offset, lineno = torn
    os.ftruncate(fd, offset)
    os.fsync(fd)
    warn(f"memlab: warning: {path}:{lineno}: incomplete last line ({len(data) - offset} bytes) removed; "
         f"its point will be measured again")


def _report_unreadable_last_line(data: bytes, path: str, warn: Callable[[str], None]) -> None:
    """Warn (naming FILE:LINE) when the complete last line of ``data`` is neither blank nor JSON."""
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    last = data[start:-1]
    if not last.strip() or _json_kind(last) is not None:
        return
    try:
        last.decode("utf-8")
        why = "not JSON"
    except UnicodeDecodeError:
        why = "not UTF-8"
    lineno = data.count(b"\n", 0, start) + 1
    warn(f"memlab: warning: {path}:{lineno}: last line is complete but {why}; kept "
         f"(only a torn line, one without its newline, is removed)")


def torn_tail(data: bytes) -> tuple[int, int] | None:
    """``(byte offset, line number)`` of a torn last line of JSON Lines ``data``; None if whole.

    Torn: the last line lacks its newline and is not a whole JSON object.  A line that ends with
    its newline is complete, whatever it holds, and never torn.
    """
    if not data or data.endswith(b"\n"):
        return None
    start = data.rfind(b"\n") + 1
    if _json_kind(data[start:]) == "object":
        return None
    return start, data.count(b"\n", 0, start) + 1


def _json_kind(raw: bytes) -> str | None:
    """``'object'`` or ``'other'`` for valid JSON in ``raw`` (UTF-8); None when it is not valid JSON."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return "object" if isinstance(value, dict) else "other"


def _params_text(m: Measurement) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(m.params.items()))


def format_table(rows: list[Measurement]) -> str:
    """A plain-text table grouped by family (a heading line each), rows by technique and parameters:
    technique, params, status, peak allocated/resident (MiB), step ms, floor ratio.  A row that is
    not ``ok`` shows its status alone; :func:`not_ok_lines` gives the reasons."""
    header = ("technique", "params", "status", "peak alloc", "peak resident/reserved", "step", "floor ratio")
    ordered = sorted(rows, key=lambda m: (m.family, m.technique, _params_text(m)))
    lines: list[tuple | str] = [header]
    for i, m in enumerate(ordered):
        if i == 0 or m.family != ordered[i - 1].family:
            lines.append(f"-- {m.family}")
        floor = m.analytic_floor_bytes()
        ratio = f"{m.peak_allocated_bytes / floor:.2f}x" if floor and m.peak_allocated_bytes else "-"
        step = "-" if m.step_time_s is None else f"{m.step_time_s * 1e3:.1f} ms"
        lines.append((m.technique, _params_text(m), m.status, fmt_mib(m.peak_allocated_bytes),
                      fmt_mib(m.peak_reserved_bytes), step, ratio))
    cells = [r for r in lines if isinstance(r, tuple)]
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    return "\n".join(r if isinstance(r, str) else "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in lines)


def not_ok_lines(rows: list[Measurement]) -> list[str]:
    """One line per row that is not ``ok``, grouped by family: status, technique, parameters and the
    one-line reason (``mismatch memcnn batch=64 depth=16: grad:x differs ...``)."""
    bad = sorted((m for m in rows if m.status != "ok"), key=lambda m: (m.family, m.technique, _params_text(m)))
    return [f"{m.status} {m.technique} {_params_text(m)}: {(m.error or 'no reason recorded').splitlines()[0]}"
            for m in bad]
