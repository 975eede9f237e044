"""Seed-reproduction files (contract in :mod:`memlab.reproductions`): the claim, verdict and summary,
the measurements as :mod:`memlab.results.runs` rows, the timelines, and the figure spec each report
draws (:func:`load_reproductions`)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

from ..core.record import VERDICTS
from ..core.record import is_number as _is_number
from .reading import FileProblems, load_json_objects, short_repr, shown_path
from .runs import RUN_COLUMNS, measurement_row, validate_measurement
from .timelines import timeline_problems


def _figure(fig: Any, report: FileProblems) -> dict[str, Any] | None:
    """A reproduction's figure spec, checked; None (reported) when it cannot be drawn.

    Values that are null or NaN in a series are drawn as gaps (NaN is reported).
    """
    if fig is None:
        return None
    problem = None
    if not isinstance(fig, dict):
        problem = "'figure' must be an object"
    elif fig.get("type") not in ("bar", "line"):
        problem = f"figure type {short_repr(fig.get('type'))} is not 'bar' or 'line'"
    elif not isinstance(fig.get("x"), list) or not isinstance(fig.get("series"), dict):
        problem = "figure needs a list 'x' and an object 'series'"
    elif not all(isinstance(v, str) or _is_number(v) for v in fig["x"]):
        problem = "figure 'x' values must be strings or finite numbers"
    else:
        bad = [k for k, v in fig["series"].items() if not isinstance(v, list) or len(v) != len(fig["x"])
               or not all(y is None or isinstance(y, float) and math.isnan(y) or _is_number(y) for y in v)]
        if bad:
            problem = f"figure series {short_repr(sorted(bad))} do not match x in length or hold non-numbers"
    if problem:
        report(f"{problem}; figure left out")
        return None
    gaps = sorted(k for k, v in fig["series"].items() if any(isinstance(y, float) for y in v if not _is_number(y)))
    if gaps:
        report(f"figure series {short_repr(gaps)} hold NaN values; drawn as gaps")
    text = {k: fig[k] if isinstance(fig.get(k), str) else "" for k in ("title", "x_label", "y_label")}
    return {"type": fig["type"], "x": fig["x"], **text, "log_x": fig.get("log_x") is True,
            "log_y": fig.get("log_y") is True,
            "series": {k: [y if _is_number(y) else None for y in v] for k, v in fig["series"].items()}}


def _kept(items: list, problems_of, kind: str, report) -> list[tuple[int, Any]]:
    """``(index, item)`` of each item ``problems_of`` finds nothing wrong with; every other one is
    reported by its index (``"<kind> <i> invalid (...); left out"``) and left out."""
    out = []
    for i, item in enumerate(items):
        bad = problems_of(item)
        if bad:
            report(f"{kind} {i} invalid ({'; '.join(bad)}); left out")
            continue
        out.append((i, item))
    return out


def load_reproductions(paths: Iterable[Path | str]) -> list[dict[str, Any]]:
    """Read seed-reproduction JSON files (see :mod:`memlab.reproductions` for the contract).

    Returns:
        validated dicts sorted by ``seed`` (the file stem when absent), with ``source`` added,
        ``figure`` checked (None when it cannot be drawn) and ``measurements`` replaced by a
        DataFrame of the valid ones (as :func:`load_runs` rows).  A second file with a seed
        already read is left out.

    Warns:
        ResultsWarning: naming each unreadable or malformed file, and each invalid measurement.
    """
    import pandas as pd  # deferred: torch line

    out, seen = [], set()
    for path, data in load_json_objects(paths, not_object="a reproduction must be a JSON object; skipped"):
        with FileProblems(path) as report:
            problems = [f"field {key!r} must be a string" for key in ("title", "claim", "summary")
                        if not isinstance(data.get(key), str)]
            if data.get("verdict") not in VERDICTS:
                problems.append(f"verdict {short_repr(data.get('verdict'))} is not one of {VERDICTS}")
            if not isinstance(data.get("measurements", []), list) or not isinstance(data.get("timelines", []), list):
                problems.append("'measurements' and 'timelines' must be lists")
            if problems:
                report(f"invalid reproduction ({'; '.join(problems)}); skipped")
                continue
            seed = data.get("seed") if isinstance(data.get("seed"), str) and data.get("seed") else shown_path(path.stem)
            if seed in seen:
                report(f"seed {seed!r} was already read from another file; skipped")
                continue
            seen.add(seed)
            rows = [measurement_row(rec, shown_path(path.stem), shown_path(path), i)
                    for i, rec in _kept(data.get("measurements", []), validate_measurement, "measurement", report)]
            timelines = [{**t, "source": shown_path(path)}
                         for _, t in _kept(data.get("timelines", []), timeline_problems, "timeline", report)]
            env = data.get("environment")
            out.append({**data, "seed": seed, "source": shown_path(path), "timelines": timelines,
                        "quick": data.get("quick") is True, "figure": _figure(data.get("figure"), report),
                        "environment": env if isinstance(env, dict) else {},
                        "measurements": pd.DataFrame(rows, columns=list(RUN_COLUMNS))})
    return sorted(out, key=lambda d: d["seed"])
