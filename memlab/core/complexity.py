"""Complexity read off the data: the log-log slope of memory against depth, and its badge.

A technique whose activation memory grows like ``depth ** k`` shows a straight line of slope ``k``
on log-log axes.  :func:`fit_exponent` fits that line by least squares over the measured depths
and reports the exponent with its coefficient of determination R²; :func:`badge` names the class
(``O(1)``, ``O(sqrt n)``, ``O(n)``, ``O(n^2)``, or ``O(n^k)`` when no class is within
:data:`CLASS_TOLERANCE`).  :func:`fit_groups` does it per technique for result rows (dicts such as
``Measurement.to_dict()`` or JSON Lines rows).  Pure Python: no torch, no numpy; the site uses it.

A fit over a small span says little: a fixed cost (the stem, the classifier, the input's gradient)
bends the line at small depths.  ``Fit.span`` is ``max depth / min depth``; quote it with the
exponent (the deep-network family's sweep spans 16x, 18 to 288 blocks).

Example:
    >>> f = fit_exponent([16, 64, 256], [4.0, 8.0, 16.0])
    >>> round(f.exponent, 3), badge(f).label
    (0.5, 'O(sqrt n)')
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = ["Fit", "Badge", "fit_exponent", "badge", "fit_groups", "CLASSES", "CLASS_TOLERANCE"]

#: exponent -> the class's name, for :func:`badge`
CLASSES: dict[float, str] = {0.0: "O(1)", 0.5: "O(sqrt n)", 1.0: "O(n)", 2.0: "O(n^2)"}
#: a fitted exponent within this distance of a class's exponent gets that class's name
CLASS_TOLERANCE = 0.15


@dataclass(frozen=True)
class Fit:
    """A least-squares line through ``(log x, log y)``: ``y ≈ coefficient · x ** exponent``.

    Attributes:
        exponent: the slope on log-log axes.
        coefficient: ``exp(intercept)``, in the units of y.
        r2: coefficient of determination of the log-log line (1.0 also when every y is equal and
            the fitted line is flat, which then fits exactly).
        points: how many (x, y) pairs were fitted.
        span: ``max(x) / min(x)``.
    """

    exponent: float
    coefficient: float
    r2: float
    points: int
    span: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Badge:
    """The class a fit names: ``label`` (``O(sqrt n)``) and ``text`` (label, exponent, R², span)."""

    label: str
    text: str
    exponent: float
    r2: float


def fit_exponent(xs: Sequence[float], ys: Sequence[float]) -> Fit:
    """Fit ``log y = exponent · log x + intercept`` by least squares.

    Args:
        xs: depths (blocks, layers, sequence lengths), positive; at least two distinct values.
        ys: the memory at each depth (bytes), positive.

    Returns:
        a :class:`Fit`.

    Raises:
        ValueError: lengths differ, fewer than two distinct x, or a non-positive or non-finite value.
    """
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]
    if len(xs) != len(ys):
        raise ValueError(f"fit_exponent: {len(xs)} x values but {len(ys)} y values; give one y per x")
    bad = [v for v in xs + ys if not (math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"fit_exponent: every x and y must be positive and finite for a log-log fit, got {bad[0]!r}")
    if len(set(xs)) < 2:
        raise ValueError(f"fit_exponent: needs at least two distinct x values, got {sorted(set(xs))}")
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    sxy = sum((a - mx) * (b - my) for a, b in zip(lx, ly))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_res = sum((b - (slope * a + intercept)) ** 2 for a, b in zip(lx, ly))
    ss_tot = sum((b - my) ** 2 for b in ly)
    tiny = 1e-24 * max(1.0, len(ly))
    r2 = 1.0 if ss_tot <= tiny else max(0.0, 1.0 - ss_res / ss_tot)
    if ss_tot <= tiny:
        slope = 0.0  # equal y: exactly flat, not a rounding residue
    return Fit(exponent=slope, coefficient=math.exp(intercept), r2=r2, points=len(xs), span=max(xs) / min(xs))


def badge(fit: Fit, tolerance: float = CLASS_TOLERANCE) -> Badge:
    """The complexity class of a fit, e.g. ``O(sqrt n)``, and a one-line text with the numbers.

    The nearest class in :data:`CLASSES` within ``tolerance`` of the exponent, else ``O(n^k)`` with
    ``k`` the exponent to two decimals.  ``text``: ``"O(sqrt n): exponent 0.49, R² 0.998 over 16x"``.
    """
    near = min(CLASSES, key=lambda c: abs(c - fit.exponent))
    label = CLASSES[near] if abs(near - fit.exponent) <= tolerance else f"O(n^{fit.exponent:.2f})"
    text = f"{label}: exponent {fit.exponent:.2f}, R² {fit.r2:.3f} over {fit.span:.3g}x ({fit.points} depths)"
    return Badge(label=label, text=text, exponent=fit.exponent, r2=fit.r2)


def fit_groups(rows: Iterable[Mapping[str, Any]], x: Callable[[Mapping[str, Any]], float | None],
               y: Callable[[Mapping[str, Any]], float | None],
               key: Callable[[Mapping[str, Any]], Any] = lambda r: r.get("technique")) -> dict[Any, Fit]:
    """One :class:`Fit` per group of rows (by default per technique).

    Rows where ``x`` or ``y`` gives None, or whose ``status`` is present and not ``ok``, are left
    out; a depth measured twice contributes its median.  Groups with fewer than two depths are left
    out.

    Example:
        >>> fits = fit_groups(rows, x=lambda r: r["extra"]["blocks"],
        ...                   y=lambda r: r["extra"]["activation_peak_bytes"])   # doctest: +SKIP
    """
    groups: dict[Any, dict[float, list[float]]] = {}
    for r in rows:
        if r.get("status", "ok") != "ok":
            continue
        try:
            xv, yv = x(r), y(r)
        except (KeyError, TypeError):
            continue
        if xv is None or yv is None:
            continue
        groups.setdefault(key(r), {}).setdefault(float(xv), []).append(float(yv))
    out = {}
    for k, by_x in groups.items():
        if len(by_x) < 2:
            continue
        xs = sorted(by_x)
        out[k] = fit_exponent(xs, [_median(by_x[v]) for v in xs])
    return out


def _median(values: list[float]) -> float:
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
