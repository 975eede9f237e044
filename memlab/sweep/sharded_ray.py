"""``memlab sweep --shard-strategy ... --executor ray``: each (model, strategy, world) run one Ray task,
its rank rows written by the driver as they come back.

NOTE [ sharded runs on Ray ]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A task runs :func:`memlab.sharding.sweep_run.run_one` on its worker: the run's N rank processes are
spawned there and meet in that worker's temporary folder, so a run never spans two hosts, and its
rows name the worker's host (``machine``) and its load.  The driver writes each row through the
sweep's locked, durable output (NOTE [ sweep output ]); a worker never touches the file.  Resources:
a CPU run asks for ``min(N, the cluster's CPUs)`` CPUs, not N: Ray would never place a task that
asks for more CPUs than the cluster has (a world of 4 on a 2-core host), and the ranks' bytes do not
depend on how many cores they share (each rank runs one intra-op thread; only the time does); a
CUDA run asks for N GPUs (rank r uses ``cuda:r``).  A task whose worker dies is retried once
(:data:`~memlab.sweep.ray_executor.RAY_RETRIES`); a run that fails twice, or raises, writes no row and
is named, as locally.  Evidence: docs/sharding.md#a-sweep-over-n-and-strategy.
"""
from __future__ import annotations

import json
import time
from typing import Any, Iterator

from ..sharding.sweep_plan import ShardedRun
from ..sharding.sweep_run import run_one
from .ray_executor import RAY_RETRIES

__all__ = ["run_on_ray", "task_cpus"]


def task_cpus(world: int, cluster_cpus: float) -> int:
    """CPUs a CPU run of ``world`` ranks asks Ray for: ``min(world, cluster CPUs)``, at least 1
    (NOTE [ sharded runs on Ray ])."""
    return max(1, min(int(world), int(cluster_cpus)))


def _run_task(run: dict[str, Any], device: str, shard: dict[str, Any] | None) -> str:
    """Runs on a Ray worker: the run's rank rows as one JSON list."""
    return json.dumps(run_one(run, device, "ray", shard))


def run_on_ray(runs: list[ShardedRun], device: str = "cpu", address: str | None = None,
               shard: dict[str, Any] | None = None) -> Iterator[tuple[ShardedRun, list[dict] | None, str | None, float]]:
    """Yield ``(run, rank rows or None, error or None, seconds since the previous run finished)`` as Ray
    finishes the runs.  Joins ``address`` (``auto``, ``ray://host:port``), the Ray instance this
    process started, or starts a local one."""
    import ray  # deferred: optional dependency

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    cpus = ray.cluster_resources().get("CPU", 1)
    task = ray.remote(max_retries=RAY_RETRIES, retry_exceptions=False)(_run_task)
    cuda = device.startswith("cuda")
    pending = {task.options(num_cpus=1 if cuda else task_cpus(r.world, cpus), num_gpus=r.world if cuda else 0)
               .remote(r.to_dict(), device, shard): r for r in runs}
    last = time.perf_counter()
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        run = pending.pop(ref)
        try:
            rows, error = json.loads(ray.get(ref)), None
        except ray.exceptions.RayError as exc:
            first = (str(exc).strip().splitlines() or [""])[-1]
            rows, error = None, f"the Ray task failed ({type(exc).__name__}: {first[:300]})"
        now = time.perf_counter()
        yield run, rows, error, now - last
        last = now
