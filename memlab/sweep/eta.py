"""How long a sweep has left, from the points it has measured and the size of those it has not.

A full grid's points differ in cost by a factor of a thousand (a 4-block stack and a 64-block one),
and the sweep measures each family's small configurations first, so "mean seconds per point so far
times points left" said 8 min when 24 were left.  :class:`Eta` instead scales each remaining point
by its *size*: the product of its workload's numeric parameters (``n * d * hidden``, ``depth * batch
* width * hidden * spatial``...; a list parameter counts as the product of its entries).  Per
workload, a point takes ``c * size**k`` seconds, ``c`` and ``k`` fitted on the points measured so far
(least squares in log-log, ``k`` within [0, 1.5]; 1 while one size is known); a workload not yet
reached counts the median seconds of all measured points.  It is an estimate for a progress line,
never a published figure.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Callable, Iterable, Mapping

__all__ = ["size_of", "Eta"]


def size_of(config: Mapping[str, Any], workload_params: Iterable[str]) -> float | None:
    """Product of the numeric values of ``workload_params`` in ``config`` (booleans and text left
    out, a list of numbers as the product of its entries); None when nothing numeric is left or the
    product is not a positive finite number."""
    size, found = 1.0, False
    for key in workload_params:
        value = config.get(key)
        items = value if isinstance(value, (list, tuple)) else [value]
        for v in items:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                size *= float(v)
                found = True
    return size if found and math.isfinite(size) and size > 0 else None


class Eta:
    """Seconds left in a sweep of ``points`` run ``jobs`` at a time.

    ``describe(point)`` returns ``(workload name, size or None)`` for a point; ``finished(point,
    seconds)`` records a measured (or skipped) point; ``seconds_left()`` estimates the rest.
    Points are matched by ``(technique, sorted params)``.
    """

    def __init__(self, points: list[Any], describe: Callable[[Any], tuple[str, float | None]], jobs: int = 1):
        self.jobs = max(1, int(jobs))
        self.pending: dict[tuple, tuple[str, float | None]] = {}
        for p in points:
            try:
                self.pending[self._key(p)] = describe(p)
            except Exception:  # noqa: BLE001 - an estimate must never stop a sweep
                self.pending[self._key(p)] = ("?", None)
        self.done: list[tuple[str, float | None, float]] = []

    @staticmethod
    def _key(point: Any) -> tuple:
        return (point.technique, tuple(sorted((k, repr(v)) for k, v in point.params.items())))

    def finished(self, point: Any, seconds: float) -> None:
        workload, size = self.pending.pop(self._key(point), ("?", None))
        self.done.append((workload, size, max(0.0, float(seconds))))

    def seconds_left(self) -> float:
        if not self.done:
            return 0.0
        overall = statistics.median(s for _, _, s in self.done)
        fits: dict[str, tuple[float, float]] = {}
        for workload in {w for w, _, _ in self.done}:
            mine = [(math.log(size), math.log(max(s, 1e-3))) for w, size, s in self.done if w == workload and size]
            if mine:
                fits[workload] = _power_law(mine)
        total = 0.0
        for workload, size in self.pending.values():
            fit = fits.get(workload)
            total += math.exp(fit[0] + fit[1] * math.log(size)) if fit is not None and size else overall
        return total / self.jobs


def _power_law(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(log c, k)`` of ``seconds = c * size**k`` fitted by least squares on ``(log size, log
    seconds)``; ``k`` kept within [0, 1.5] (1 from a single size: cost proportional to size)."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    k = 1.0 if sxx < 1e-9 else sum((x - mx) * (y - my) for x, y in points) / sxx
    k = min(1.5, max(0.0, k))
    return my - k * mx, k
