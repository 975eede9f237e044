"""One run of a sharded sweep, where it runs (here, or on a Ray worker): the traced step on N ranks
(:func:`memlab.sharding.launch.run_sharded`) and its rank rows marked as a sweep's rows
(:mod:`memlab.sharding.sweep_plan`).

The ``sweep`` record of each row says where and how the run ran: ``executor`` (``local`` or
``ray``), ``seconds`` (wall time of the whole run: N processes started, the reference and the traced
steps; a host- and load-dependent figure, never compared), ``load_before``/``load_after`` (the host's
1-minute load average), ``cores`` (CPUs this process may use), ``torch``, ``commit`` (memlab's, with
``+dirty``) and ``kernel_host`` (:func:`memlab.core.host.kernel_host`).  The bytes do not depend on
any of them but the torch version (docs/sharding.md).
"""
from __future__ import annotations

import os
import time
from typing import Any

import torch

from ..core.host import kernel_host
from ..measurement.environment import git_commit, load_average
from .launch import run_sharded
from .model import Sizes
from .sweep_plan import SHARDED_KIND, ShardedRun

__all__ = ["run_one", "sweep_rows"]


def _cores() -> int | None:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def sweep_rows(rows: list[dict], record: dict[str, Any], shard: dict[str, Any] | None = None) -> list[dict]:
    """``rows`` (one run's rank rows) as a sweep writes them: ``kind`` first, the ``sweep`` record
    last, and the shard's record where there is one."""
    extra = {"sweep_shard": shard} if shard else {}
    return [{"kind": SHARDED_KIND, **row, "sweep": dict(record), **extra} for row in rows]


def run_one(run: ShardedRun | dict[str, Any], device: str = "cpu", executor: str = "local",
            shard: dict[str, Any] | None = None) -> list[dict]:
    """Run ``run`` (a :class:`ShardedRun`, or its :meth:`~ShardedRun.to_dict` as a Ray task gets it) on
    ``device`` (``cpu``: gloo; ``cuda``: nccl) and return its rank rows in rank order, marked
    (:func:`sweep_rows`).  Raises what :func:`run_sharded` raises (ValueError for a bad size or world; a
    rank's exception)."""
    run = run if isinstance(run, ShardedRun) else ShardedRun(**run)
    before, started = load_average(), time.perf_counter()
    sizes = Sizes(model=run.model, batch=run.batch, checkpoint_blocks=run.checkpoint_blocks)
    rows, = run_sharded([(run.strategy, run.reshard)], run.world, [sizes], device)
    record = {"executor": executor, "seconds": round(time.perf_counter() - started, 3), "load_before": before,
              "load_after": load_average(), "cores": _cores(), "torch": torch.__version__, "commit": git_commit(),
              "kernel_host": kernel_host()}
    return sweep_rows(rows, record, shard)
