"""Running a sweep's points: one at a time, ``jobs`` at once (CPU workers or one per GPU), or as
tasks of a Ray cluster; each row written to the output at once and yielded."""
from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import time
from typing import Any, Callable, Iterator, TextIO

import torch

from ..core.atomic import append_line_durable
from ..measurement import measure
from ..core.record import Measurement
from ..core.setting import DEFAULTS, Point, Setting
from .output import SweepOutput, say
from .ray_executor import run_on_ray
from ..measurement.runner import close_thread_server, kill_children_of, pin_gpu
from ..technique import TechniqueUnavailable

__all__ = ["EXECUTORS", "run_sweep", "check_jobs", "visible_gpus"]

#: where a sweep's points are measured: here (``--jobs`` at once), or as tasks of a Ray cluster
EXECUTORS = ("local", "ray")


def run_sweep(points: list[Point], out: "SweepOutput | TextIO | None", *,
              progress: Callable[[int, int, Point, Measurement | None, float], None] | None = None,
              warn: Callable[[str], None] | None = None, jobs: int = 1, row_extra: dict[str, Any] | None = None,
              gpu_pins: list[str] | None = None, executor: str = "local", ray_address: str | None = None,
              **options: Any) -> Iterator[Measurement]:
    """Measure each point (isolated) in its setting, append it to ``out`` at once, yield it.

    ``points``: :class:`~memlab.core.setting.Point` s (``SweepPoint``); ``options`` that are
    :class:`~memlab.core.setting.Setting` fields (``device="cuda"``, ``iterations=1``...) change every
    point's setting, the others (``isolate``, ``reference_cache``, ``plugins``) go to
    :func:`memlab.measure` as they are.  Every point's setting is validated before the first runs.

    ``out``: a :class:`SweepOutput` (locked, see NOTE [ sweep output ]) or an open text file.  A
    point whose technique cannot run on its device is skipped with a line to ``warn`` (default:
    stderr).  Raises :class:`SweepWriteFailed` when a row cannot be written to a SweepOutput.

    ``jobs``: measurements run at once (CPU only; NOTE [ parallel sweep ]).  Rows are written and
    yielded in the order they finish.  With ``jobs > 1``, a point whose setting has no ``threads``
    gets ``cores // jobs`` intra-op threads (at least 1).  The points' reference checks share the
    workload reference through a temporary folder (:mod:`memlab.measurement.reference_cache`),
    removed when the sweep ends.  ``row_extra`` is added to every row's ``extra`` (a shard's record:
    memlab.sweep.shard).  ``gpu_pins``: worker k's children see only GPU ``gpu_pins[k]`` (default on
    ``cuda`` with ``jobs > 1``: the visible GPUs; NOTE [ one GPU per worker ]).  ``executor="ray"``
    sends each point to a Ray cluster at ``ray_address`` instead (NOTE [ Ray executor ] in
    memlab.sweep.ray_executor; ``jobs`` must then be 1: Ray schedules by resources).
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r} is not valid: expected one of {', '.join(EXECUTORS)}")
    if executor == "ray" and jobs != 1:
        raise ValueError(f"jobs={jobs} with executor 'ray': Ray runs as many points at once as the cluster has "
                         "resources for (a CPU point takes --threads CPUs, a CUDA point one GPU); leave --jobs at 1")
    changes, run_kw = Setting.split(options)
    points = [p.with_setting(_threads(p.setting.replace(**changes).validate(), jobs)) for p in points]
    device = points[0].setting.device if points else DEFAULTS.device
    check_jobs(jobs, device, gpu_pins)
    if gpu_pins is None and jobs > 1 and str(device) == "cuda":
        gpu_pins = visible_gpus()
    if gpu_pins is not None and len(gpu_pins) < jobs:
        raise ValueError(f"gpu_pins={gpu_pins!r}: expected at least {jobs} entries, one per worker")
    warn = warn or say
    own_cache = None
    if executor == "local" and any(p.setting.check for p in points) and run_kw.get("reference_cache") is None:
        own_cache = run_kw["reference_cache"] = tempfile.mkdtemp(prefix="memlab-references-")
    try:
        yield from _measured(points, out, progress, warn, jobs, run_kw, row_extra or {}, gpu_pins,
                             (executor, ray_address))
    finally:
        if own_cache is not None:
            shutil.rmtree(own_cache, ignore_errors=True)


def _threads(setting: Setting, jobs: int) -> Setting:
    """With ``jobs > 1``, a setting without ``threads`` gets ``cores // jobs`` (NOTE [ parallel sweep ])."""
    if jobs > 1 and setting.threads is None:
        return setting.replace(threads=max(1, (os.cpu_count() or 1) // jobs))
    return setting


def _measured(points, out, progress, warn, jobs, run_kw, row_extra, gpu_pins, executor) -> Iterator[Measurement]:
    def measure_one(point: Point) -> Measurement:  # the keyword form: every field of the point's setting
        return measure(point.technique, **point.setting.to_dict(), **run_kw, **point.params)

    if executor[0] == "ray":
        finished = run_on_ray(points, run_kw, address=executor[1])
    elif jobs == 1 and gpu_pins is None:
        finished = _one_at_a_time(points, measure_one, progress)
    else:
        finished = _in_parallel(points, measure_one, jobs, gpu_pins)
    for done, (point, result, seconds) in enumerate(finished, start=1):
        if isinstance(result, TechniqueUnavailable):
            if progress:
                progress(done, len(points), point, None, seconds)
            warn(f"memlab: skipped {point.technique}: {result}")
            continue
        if isinstance(result, BaseException):
            raise result
        result.extra.update(row_extra)
        if isinstance(out, SweepOutput):
            out.append(result)
        elif out is not None:
            append_line_durable(out, result.to_json())
        if progress:
            progress(done, len(points), point, result, seconds)
        yield result


def check_jobs(jobs: int, device: str, gpus: list[str] | None = None) -> None:
    """``jobs`` must be a whole number from 1 to 64; on CUDA (device ``cuda``, no index) at most one
    per visible GPU (``gpus``, default :func:`visible_gpus`): NOTE [ one GPU per worker ]."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= 64:
        raise ValueError(f"jobs={jobs!r} is not valid: expected a whole number from 1 to 64")
    if jobs == 1 or str(device).startswith("cpu"):
        return
    if str(device) != "cuda":
        raise ValueError(f"jobs={jobs} with device {device!r}: a parallel sweep needs device 'cpu', or 'cuda' (no "
                         "index) to put one worker on each visible GPU; measurements on one GPU run one at a time")
    gpus = visible_gpus() if gpus is None else gpus
    if jobs > len(gpus):
        raise ValueError(f"jobs={jobs} needs {jobs} GPUs (one per worker), but {len(gpus)} "
                         f"{'is' if len(gpus) == 1 else 'are'} visible ({', '.join(gpus) or 'none'}): "
                         f"expected 1 to {max(1, len(gpus))}")


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries (indices, UUIDs or MIG
    names): that variable's entries when it is set, else ``0 .. device_count - 1``."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [e.strip() for e in env.split(",") if e.strip()]

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


# NOTE [ one GPU per worker ]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# ``memlab sweep --device cuda --jobs N`` runs N worker threads, each with its own fork server whose
# environment sets ``CUDA_VISIBLE_DEVICES`` to one GPU of those visible (memlab.measurement.runner.
# pin_gpu): worker k always measures on GPU k, so two measurements never share a GPU (the allocator
# figures are per process, but the device's memory and compute are not).  Inside the child that GPU
# is ``cuda:0``; the row records the entry it was given (``environment.cuda_visible_devices``), the
# GPU's model and UUID.  On a CPU sweep ``gpu_pins`` does the same to the children's environment
# (how the pinning is tested without a GPU).


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
# What it buys: where process and Python overheads dominate (``make demo``'s quick points) two jobs
# finish sooner; where compute dominates (the full grid) they do about what one job with two threads
# does: two single-thread GEMMs are no faster than one two-thread GEMM.  The exact figures of a
# ``--jobs 2`` sweep equal those of a one-job sweep at the points both measured.
# Evidence: docs/evidence/code-notes.md#parallel-sweep


def _attempt(measure_one, point: Point) -> tuple[Point, Any, float]:
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


def _in_parallel(points, measure_one, jobs: int, gpu_pins: list[str] | None = None):
    """Yield :func:`_attempt` of each point as ``jobs`` threads finish them (thread k's children
    pinned to ``gpu_pins[k]`` when given)."""
    todo: queue.Queue = queue.Queue()
    for point in points:
        todo.put(point)
    finished: queue.Queue = queue.Queue()
    stop = threading.Event()

    def worker(k: int) -> None:
        if gpu_pins is not None:
            pin_gpu(gpu_pins[k])
        try:
            while not stop.is_set():
                try:
                    point = todo.get_nowait()
                except queue.Empty:
                    return
                finished.put(_attempt(measure_one, point))
        finally:
            close_thread_server()

    workers = [threading.Thread(target=worker, args=(k,), name=f"memlab-sweep-{k}", daemon=True)
               for k in range(min(jobs, len(points)))]
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
