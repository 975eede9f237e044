"""Sweeps: measure every technique of a family over its workload's grid, writing JSON Lines.

Each finished Measurement is appended to the output file and fsync'd at once, so an interrupted
sweep keeps every row it finished; ``oom`` and ``error`` rows are written like any other and the
sweep goes on.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from .atomic import append_line_durable
from .measure import measure
from .measure.record import Measurement, fmt_mib
from .registry import get_technique, list_families, list_techniques

__all__ = ["SweepPoint", "plan_sweep", "run_sweep", "read_jsonl", "format_table", "already_measured", "is_done"]


@dataclass(frozen=True)
class SweepPoint:
    technique: str
    params: dict[str, Any]


def plan_sweep(family: str | None = None, quick: bool = False, techniques: list[str] | None = None) -> list[SweepPoint]:
    """Technique x configuration pairs to measure.

    Grid keys a technique does not have are dropped and the resulting duplicates measured once.
    The order is configuration-major and round-robin over families: the first grid entry of every
    family for every technique, then the second..., so an interrupted sweep has covered every
    technique (and every family) at the configurations it reached.
    Raises ValueError for an unknown family or technique.
    """
    families = list_families()
    if family is not None and family not in families:
        raise ValueError(f"unknown family {family!r}; available: {', '.join(families)}")
    names = techniques if techniques is not None else list_techniques(family)
    keyed: list[tuple[int, str, int, SweepPoint]] = []
    for order, name in enumerate(names):
        cls = get_technique(name)
        if family is not None and cls.family() != family:
            continue
        valid = cls.all_params()
        seen: list[dict[str, Any]] = []
        for index, cfg in enumerate(cls.workload.sweep_grid(quick)):
            kept = {k: v for k, v in cfg.items() if k in valid}
            if kept not in seen:
                seen.append(kept)
                keyed.append((index, cls.family(), order, SweepPoint(name, kept)))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


def already_measured(path: str | os.PathLike, device: str, dtype: str, mode: str) -> set[tuple[str, str]]:
    """``(technique, canonical params)`` keys of the rows in ``path`` with status ok (for --resume).

    A point is identified by the parameters it was asked for; the stored rows carry every resolved
    parameter, so a stored row matches a point when the point's parameters agree with it.
    """
    if not os.path.exists(path):
        return set()
    return {(m.technique, json.dumps(m.params, sort_keys=True)) for m in read_jsonl(path)
            if m.status == "ok" and m.device.split(":")[0] == device.split(":")[0] and m.dtype == dtype and m.mode == mode}


def is_done(point: SweepPoint, done: set[tuple[str, str]]) -> bool:
    full = get_technique(point.technique).resolve(point.params)
    return (point.technique, json.dumps(full, sort_keys=True, default=list)) in done


def run_sweep(points: list[SweepPoint], out: TextIO | None, *, device: str = "cpu", dtype: str = "float32",
              mode: str = "train", progress: Callable[[int, int, SweepPoint, Measurement | None, float], None] | None = None,
              **measure_kw: Any) -> Iterator[Measurement]:
    """Measure each point (isolated), append it to ``out`` at once, yield it."""
    from .technique import TechniqueUnavailable

    for i, point in enumerate(points):
        t0 = time.perf_counter()
        if progress:
            progress(i, len(points), point, None, 0.0)
        try:
            m = measure(point.technique, device=device, dtype=dtype, mode=mode, **measure_kw, **point.params)
        except TechniqueUnavailable as exc:
            if progress:
                progress(i + 1, len(points), point, None, time.perf_counter() - t0)
            print(f"memlab: skipped {point.technique}: {exc}", file=sys.stderr)
            continue
        if out is not None:
            append_line_durable(out, m.to_json())
        if progress:
            progress(i + 1, len(points), point, m, time.perf_counter() - t0)
        yield m


def read_jsonl(path: str | os.PathLike, warn: Callable[[str], None] | None = None) -> list[Measurement]:
    """Measurements from a JSON Lines file; a corrupt line is skipped with a warning naming file and line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Measurement.from_dict(json.loads(line)))
            except (ValueError, TypeError) as exc:
                if warn is not None:
                    warn(f"{path}:{lineno}: skipped unreadable measurement ({exc})")
    return out


def format_table(rows: list[Measurement]) -> str:
    """A plain-text table: technique, params, status, peak allocated/resident (MiB), step ms."""
    header = ("technique", "params", "status", "peak alloc", "peak resident/reserved", "step", "floor ratio")
    lines = [header]
    for m in rows:
        params = " ".join(f"{k}={v}" for k, v in sorted(m.params.items()))
        floor = m.analytic_floor_bytes()
        ratio = f"{m.peak_allocated_bytes / floor:.2f}x" if floor and m.peak_allocated_bytes else "-"
        step = "-" if m.step_time_s is None else f"{m.step_time_s * 1e3:.1f} ms"
        lines.append((m.technique, params, m.status if m.status == "ok" else f"{m.status}: {(m.error or '')[:40]}",
                      fmt_mib(m.peak_allocated_bytes), fmt_mib(m.peak_reserved_bytes), step, ratio))
    widths = [max(len(str(r[i])) for r in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in lines)
