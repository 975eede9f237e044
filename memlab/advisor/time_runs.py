"""Relative step times measured in passes and compared by their median: the part the two time checks
share (:mod:`memlab.advisor.time_check` at the families' held-out settings, :mod:`memlab.own_model.time_check`
beyond a model file's timed batches).  No torch: the measuring function is the caller's.
"""
from __future__ import annotations

import statistics
from typing import Any, Callable, Sequence, TypeVar

__all__ = ["measure_in_passes", "median_error", "fmt_time", "fmt_error"]

T = TypeVar("T")


def measure_in_passes(settings: Sequence[T], runs: int, measure: Callable[[T], Any],
                      line: Callable[[T, Any, int], str], say: Callable[[str], None]) -> list[list[Any]]:
    """Each of ``settings`` measured ``runs`` times (``measure(setting)``), one pass over the settings after
    another so that a stretch of heavier load falls on different settings; ``say(line(setting, m, run))``
    after each measurement ``m`` (``run`` counted from 1).  Returns, per setting, its measurements in the
    order of the passes."""
    measured: list[list[Any]] = [[] for _ in settings]
    for run in range(1, runs + 1):
        for i, setting in enumerate(settings):
            m = measure(setting)
            measured[i].append(m)
            say(line(setting, m, run))
    return measured


def median_error(figures: Sequence[float | None], predicted: float | None) -> tuple[float | None, float | None]:
    """``(median, error)`` of one setting's relative times ``figures``: the median, None unless every run
    measured one; the relative error ``(predicted - median) / median``, None without a prediction or median."""
    median = statistics.median(figures) if figures and all(figures) else None
    error = None if predicted is None or not median else (predicted - median) / median
    return median, error


def fmt_time(t: float | None) -> str:
    """A relative time as the checks print it: three decimals, ``-`` where none was measured or predicted."""
    return "-" if t is None else f"{t:.3f}"


def fmt_error(error: float | None) -> str:
    """A relative error as the checks print it: a signed percentage to one decimal, ``-`` where there is none."""
    return "-" if error is None else f"{100 * error:+.1f}%"
