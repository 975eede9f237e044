"""A sweep split into ``n`` balanced shards for any scheduler, and the shard files merged back exactly.

``memlab sweep ... --shard i/n`` measures part ``i`` (1-based) of the plan; every host that runs the
same command with its own ``i`` gets the same partition (NOTE [ shard partition ]).  Each row of a
shard records ``extra["sweep_shard"]``: its index and count, the plan's digest, the plan's size and
the arguments that made the plan, so that ``memlab merge OUT SHARD...`` can tell shards of one sweep
from shards of another and name the points no shard holds.  Torch-free apart from planning.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ..registry import get_technique
from .eta import size_of

__all__ = ["MAX_SHARDS", "parse_shard", "shard_indices", "select_shard", "plan_digest", "shard_record",
           "point_cost", "ShardSummary", "summarise"]

#: more shards than this is a typo, not a cluster
MAX_SHARDS = 4096


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(2, 4)``; ValueError naming the value and the valid form otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not match:
        raise ValueError(f"--shard {text!r} is not of the form i/n (e.g. 2/4: the second of four shards)")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"--shard {text!r}: the shard count {count} is out of range 1..{MAX_SHARDS}")
    if not 1 <= index <= count:
        raise ValueError(f"--shard {text!r}: the shard index {index} is out of range 1..{count}")
    return index, count


def _canonical(point: Any) -> str:
    """The point as sorted JSON: ``[technique, params]``, or its ``plan_key()`` where it has one (a
    sharded sweep's run: memlab.sharding.sweep_plan.ShardedRun)."""
    key = getattr(point, "plan_key", None)
    return json.dumps(key() if callable(key) else [point.technique, point.params], sort_keys=True, default=str)


def point_cost(point: Any) -> tuple[str, float | None]:
    """``(workload name, size)`` of a sweep point: the product of its workload's numeric parameters
    (memlab.sweep.eta.size_of), the quantity the sweep's ETA scales each point's seconds by."""
    cls = get_technique(point.technique)
    return cls.workload.name, size_of(cls(**point.params).config, cls.workload.params)


# NOTE [ shard partition ]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# A point's cost grows with its size (memlab.sweep.eta: seconds ~ c * size**k per workload, k near 1), and
# the constant c differs between workloads by orders of magnitude, so sizes are compared only within
# a workload: each point's cost is its size over its workload's mean size (a workload's points then
# weigh as many units as there are of them).  Points are dealt largest first (longest processing
# time first) to the shard with the least cost of that workload so far, ties going to the shard with
# the least cost overall, then the lowest index.  Every shard so gets about 1/n of every workload's
# work.  The order is fixed by (workload, -size, technique, parameters as sorted JSON): no hash seed,
# no dict order and no float formatting enters, so every host and Python version computes the same
# partition from the same plan.


def _partition(points: list[Any], count: int,
               cost: Callable[[Any], tuple[str, float | None]]) -> tuple[list[int], list[float]]:
    """The 0-based shard of each point and its cost in units of its workload's mean size
    (NOTE [ shard partition ])."""
    if count < 1:
        raise ValueError(f"shard count {count} is out of range 1..{MAX_SHARDS}")
    costs = [cost(p) for p in points]
    by_workload: dict[str, list[int]] = {}
    for i, (workload, _) in enumerate(costs):
        by_workload.setdefault(workload, []).append(i)
    total = [0.0] * count
    out, unit = [0] * len(points), [0.0] * len(points)
    for workload in sorted(by_workload):
        members = by_workload[workload]
        sizes = [costs[i][1] for i in members if costs[i][1]]
        mean = sum(sizes) / len(sizes) if sizes else 1.0
        for i in members:
            unit[i] = (costs[i][1] or mean) / mean
        order = sorted(members, key=lambda i: (-unit[i], _canonical(points[i])))
        mine = [0.0] * count
        for i in order:
            target = min(range(count), key=lambda s: (mine[s], total[s], s))
            out[i] = target
            mine[target] += unit[i]
            total[target] += unit[i]
    return out, unit


def shard_indices(points: list[Any], count: int,
                  cost: Callable[[Any], tuple[str, float | None]] = point_cost) -> list[int]:
    """The 0-based shard of each point of ``points`` among ``count`` shards (NOTE [ shard partition ])."""
    return _partition(points, count, cost)[0]


def select_shard(points: list[Any], index: int, count: int,
                 cost: Callable[[Any], tuple[str, float | None]] = point_cost) -> list[Any]:
    """The points of shard ``index`` (1-based) of ``count``, in plan order."""
    shards = shard_indices(points, count, cost)
    return [p for p, s in zip(points, shards) if s == index - 1]


def plan_digest(points: Iterable[Any], setting: Mapping[str, Any]) -> str:
    """A short digest of the whole plan (every point, and the device, dtype, mode, optimizer and loss
    in ``setting``): shards of one sweep share it, shards of two different sweeps do not."""
    h = hashlib.sha256(json.dumps(dict(setting), sort_keys=True, default=str).encode())
    for p in points:
        h.update(b"\n" + _canonical(p).encode())
    return h.hexdigest()[:16]


def shard_record(index: int, count: int, points: list[Any], setting: Mapping[str, Any],
                 plan_args: Mapping[str, Any]) -> dict[str, Any]:
    """What each row of a shard records in ``extra["sweep_shard"]``."""
    return {"index": index, "count": count, "plan": plan_digest(points, setting), "planned": len(points),
            "setting": dict(setting), "plan_args": dict(plan_args)}


@dataclass
class ShardSummary:
    """How the points of a plan fall into shards: point count and relative cost per shard."""
    counts: list[int] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)

    def text(self) -> str:
        return ", ".join(f"{i + 1}: {c} point{'s' if c != 1 else ''} ({100 * s:.1f}%)"
                         for i, (c, s) in enumerate(zip(self.counts, self.shares)))


def summarise(points: list[Any], count: int,
              cost: Callable[[Any], tuple[str, float | None]] = point_cost) -> ShardSummary:
    """Points and share of the (size-model) cost per shard, for the sweep's opening line."""
    shards, unit = _partition(points, count, cost)
    total = sum(unit) or 1.0
    counts, shares = [0] * count, [0.0] * count
    for s, u in zip(shards, unit):
        counts[s] += 1
        shares[s] += u / total
    return ShardSummary(counts, shares)
