"""``memlab bench-harness --limits``: each technique's relative step time beside its FLOP ratio.

# NOTE [ time limits ]
A technique that recomputes, or contracts in another order, does a known number of FLOPs more or
fewer than its family's baseline (``dense`` for the tensor-train family, ``unchunked`` for the
chunking family, ...).  If every product ran at the baseline's rate, its step would take exactly
``flops / baseline_flops`` of the baseline's time: that FLOP ratio is the technique's *time limit*.
The table puts the measured ``relative_step_time`` (thread CPU time of the technique's step over the
interleaved baseline steps at one intra-op thread, NOTE [ CPU time and load ] in
:mod:`memlab.measurement.timing`) beside that limit, and their quotient, the **gap** (``relative
time / FLOP ratio``): 1.0 means the technique runs its FLOPs as fast as the baseline runs its own;
above 1, the products are slower (small or skinny shapes, layout copies, page faults of fresh
memory) or the step spends time outside products (Python loops, autograd).  FLOPs are those of
:func:`~memlab.measurement.flops.count_step_flops` (in-place and ``out=`` products counted), both
for the technique (``Measurement.flops``) and for the baseline (measured the same way, once per
configuration).

The points (:func:`limit_points`: each family folder's ``meta.py`` names its own in ``LIMIT_POINTS``)
are issue 32's: the tensor-train techniques and tensorly-torch's layer at B = 1024 and 4096, a
chunking technique at chunk n/100 and the reversible stack against its residual baseline.  A
technique whose optional dependency is missing gives a row with its status.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import memlab
from ..core.setting import DEFAULTS
from ..core.errors import TechniqueUnavailable
from ..registry import family_meta

__all__ = ["limit_points", "LimitRow", "measure_limits", "limits_table", "baseline_flops"]

def limit_points(environ: Mapping[str, str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(technique, params)`` of the limits table (issue 32's measurements): the points every family
    folder's ``meta.py`` names in ``LIMIT_POINTS`` (built-in and plug-in folders of ``environ``'s
    ``MEMLAB_PLUGINS``, :func:`memlab.registry.family_meta`), in their positions' order."""
    points = [p for meta in family_meta(environ).values() for p in meta.limit_points]
    return [(name, params) for _, name, params in sorted(points, key=lambda p: p[0])]


@dataclass(frozen=True)
class LimitRow:
    """One point: the technique's relative step time and FLOPs, and its baseline's FLOPs.

    ``relative_step_time`` is a ratio (technique step / baseline step); ``flops`` and
    ``baseline_flops`` are FLOPs of one step; ``status`` is the measurement's (``ok``, ``mismatch``,
    ``unavailable``, ``error``...), with ``error`` its message.
    """

    technique: str
    params: dict[str, Any]
    relative_to: str | None
    relative_step_time: float | None
    flops: int | None
    baseline_flops: int | None
    status: str
    error: str | None = None

    @property
    def flop_ratio(self) -> float | None:
        """The time limit: the technique's FLOPs over the baseline's (NOTE [ time limits ])."""
        if not self.flops or not self.baseline_flops:
            return None
        return self.flops / self.baseline_flops

    @property
    def gap(self) -> float | None:
        """``relative_step_time / flop_ratio``: how far the step is from its FLOP limit (1.0: at it)."""
        ratio = self.flop_ratio
        if ratio is None or self.relative_step_time is None:
            return None
        return self.relative_step_time / ratio


def _workload_params(name: str, params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k in memlab.get_technique(name).workload.params}


def baseline_flops(name: str, params: dict[str, Any], baseline: str, *,
                   timeout: float = DEFAULTS.timeout) -> int | None:
    """FLOPs of one step of ``baseline`` at ``name``'s workload configuration (a forked
    measurement: one traced step, no reference check, one timed step)."""
    m = memlab.measure(baseline, isolate="fork", iterations=1, repeats=1, time_budget=0, check=False,
                       timeout=timeout, **_workload_params(name, params))
    return m.flops if m.status in ("ok", "mismatch") else None


def measure_limits(points: Sequence[tuple[str, dict[str, Any]]] | None = None, *, repeats: int = 15,
                   progress: Callable[[str], None] | None = None) -> list[LimitRow]:
    """Measure every point (forked, one traced iteration, ``repeats`` interleaved timed steps, no
    time budget) and its baseline's FLOPs; a point that fails or is unavailable gives a row with
    its status and no figures; ``points`` default: :func:`limit_points`."""
    points = limit_points() if points is None else points
    cache: dict[tuple, int | None] = {}
    rows = []
    for name, params in points:
        try:
            m = memlab.measure(name, isolate="fork", iterations=1, repeats=repeats, time_budget=0, **params)
        except TechniqueUnavailable as exc:
            rows.append(LimitRow(name, dict(params), None, None, None, None, "unavailable", str(exc)))
            continue
        base = m.relative_to
        key = (base, tuple(sorted(_workload_params(name, params).items())))
        if base and m.flops and key not in cache:
            cache[key] = baseline_flops(name, params, base)
        rows.append(LimitRow(name, dict(params), base, m.relative_step_time, m.flops, cache.get(key), m.status,
                             m.error))
        if progress:
            progress(limits_table(rows[-1:]).splitlines()[-1])
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def limits_table(rows: Sequence[LimitRow]) -> str:
    """The rows as text: technique, parameters, baseline, relative time, FLOP ratio, gap, status."""
    lines = [f"{'technique':28} {'parameters':44} {'against':10} {'rel. time':>9} {'FLOP ratio':>10} "
             f"{'gap':>6}  status"]
    for r in rows:
        params = " ".join(f"{k}={v}" for k, v in r.params.items())
        lines.append(f"{r.technique:28} {params:44} {r.relative_to or '-':10} {_fmt(r.relative_step_time, '.3f'):>9} "
                     f"{_fmt(r.flop_ratio, '.3f'):>10} {_fmt(r.gap, '.2f'):>6}  {r.status}"
                     + (f": {r.error[:80]}" if r.error and r.status != "ok" else ""))
    return "\n".join(lines)
