"""``memlab sweep --executor ray``: each point a Ray task, measured on a worker, its row written by the driver.

NOTE [ Ray executor ]
~~~~~~~~~~~~~~~~~~~~~
The driver (the ``memlab sweep`` process) plans the sweep, sends every point as a task and writes
each row as it comes back, through the same durable output as a local sweep (lock, one write and
fsync per row, ``--resume`` unchanged): a worker never touches the file.  A task runs memlab's
isolated measurement on its worker (a child of a fork server there, as locally), so the figures are
the worker host's, and the row's ``environment`` says which host and GPU that was.  Resources: one
GPU per task on CUDA (``num_gpus=1``: Ray sets the task's ``CUDA_VISIBLE_DEVICES``), ``threads``
CPUs per task on the CPU (default 1).  A task whose worker process dies (killed, OOM-killed, node
lost) is retried once by Ray (``max_retries=1``); if the retry dies too, the point is recorded as an
``error`` row naming the failure, so nothing is lost and nothing is written twice.  An exception
inside the measurement is not a death: memlab already turns it into an ``error``/``oom`` row.
Plug-ins loaded in the driver are loaded by each task from the same path (it must exist on the
workers).  ``ray`` is an optional dependency: ``pip install "memlab[cluster]"``.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterator

from ..core.record import Measurement
from ..measurement.devices import parse_device
from ..measurement.inprocess import skeleton
from ..registry import get_technique, loaded_plugins
from memlab.core.setting import Point, Setting
from memlab.measurement import measure
from memlab.registry import load_plugin, loaded_plugins

__all__ = ["RAY_RETRIES", "ray_available", "run_on_ray"]

#: how many times Ray re-runs a point whose worker died, before memlab records it as an error
RAY_RETRIES = 1


def ray_available() -> str | None:
    """None when ``ray`` imports, else why not (one line, for the CLI and the tests' skip reason)."""
    try:
        import ray  # noqa: F401; deferred: optional dependency
    except ImportError as exc:
        return f"the Ray executor needs ray (pip install 'memlab[cluster]'): {exc}"
    return None


def _measure_task(technique: str, params: dict[str, Any], setting: str, run_kw: dict[str, Any],
                  plugins: list[str]) -> str:
    """Runs on a Ray worker: the isolated measurement of one point (its setting as
    :meth:`~memlab.core.setting.Setting.to_json`), as a Measurement JSON line."""
    for path in plugins:
        if path not in loaded_plugins():
            load_plugin(path)
    return measure(Point(technique, params, Setting.from_json(setting)), **run_kw).to_json()


def _error_row(point, exc: BaseException):
    """The ``error`` row of a point whose task failed twice (worker deaths)."""
    technique = get_technique(point.technique)(**point.params)
    row = skeleton(technique, str(parse_device(point.setting.device)), point.setting)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return dataclasses.replace(
        row, status="error",
        error=(f"the Ray task died {RAY_RETRIES + 1} times ({type(exc).__name__}: {first[:300]}); "
               f"Ray retried it {RAY_RETRIES} time{'s' if RAY_RETRIES != 1 else ''}"))


def run_on_ray(points: list, run_kw: dict[str, Any], *,
               address: str | None = None) -> Iterator[tuple[Any, Any, float]]:
    """Yield ``(point, Measurement, seconds)`` as Ray finishes the points (NOTE [ Ray executor ]):
    each a :class:`~memlab.core.setting.Point` measured in its setting, ``run_kw`` going to
    :func:`memlab.measure` as they are.

    Connects to ``address`` (a running cluster: ``auto`` or ``ray://host:port``), or uses the Ray
    instance this process already started, or starts a local one.
    """
    import ray  # deferred: optional dependency


    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    task = ray.remote(max_retries=RAY_RETRIES, retry_exceptions=False)(_measure_task)
    plugins = list(loaded_plugins())
    last = time.perf_counter()
    pending = {task.options(num_cpus=p.setting.threads or 1, num_gpus=1 if p.setting.device.startswith("cuda") else 0)
               .remote(p.technique, p.params, p.setting.to_json(), run_kw, plugins): p for p in points}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        ref = ready[0]
        point = pending.pop(ref)
        try:
            row = Measurement.from_json(ray.get(ref))
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.RayTaskError, ray.exceptions.NodeDiedError,
                ray.exceptions.RayError) as exc:
            row = _error_row(point, exc)
        now = time.perf_counter()
        yield point, row, now - last  # seconds since the previous point finished (for the ETA)
        last = now
