"""``Timeline.to_dict()`` files (data/timelines, and the timelines inside a reproduction): each checked
event by event (op, stack, phase, delta and live bytes) by :func:`timeline_problems`; read by
:func:`load_timelines`."""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Iterable

from ..core.record import is_number as _is_number
from .reading import bad_numbers, json_files, short_repr, shown_path

_EVENT_KEYS = ("op", "stack", "phase", "delta_bytes", "live_bytes")


def _event_problem(i: int, e: Any) -> str | None:
    if not isinstance(e, dict) or any(k not in e for k in _EVENT_KEYS):
        return f"event {i} lacks one of {_EVENT_KEYS}"
    if not (_is_number(e["delta_bytes"]) and _is_number(e["live_bytes"])):
        return f"event {i} has non-numeric bytes"
    if not isinstance(e["stack"], list) or not all(isinstance(s, str) for s in e["stack"]):
        return f"event {i} has a stack that is not a list of strings"
    if not isinstance(e["op"], str) or not isinstance(e["phase"], str):
        return f"event {i} has an 'op' or 'phase' that is not a string"
    return None


def timeline_problems(data: Any) -> list[str]:
    if not isinstance(data, dict):
        return [f"expected a JSON object, got {type(data).__name__}"]
    problems = []
    for key in ("technique", "device", "dtype", "mode"):
        if not isinstance(data.get(key), str):
            problems.append(f"field {key!r} must be a string")
    if not isinstance(data.get("params"), dict):
        problems.append("field 'params' must be an object")
    else:
        problems += itertools.islice(bad_numbers(data["params"], "params"), 3)
    if not _is_number(data.get("baseline_bytes")):
        problems.append(f"field 'baseline_bytes' must be a number, got {short_repr(data.get('baseline_bytes'))}")
    if data.get("method") is not None and not isinstance(data["method"], str):
        problems.append("field 'method' must be a string")
    events = data.get("events")
    if not isinstance(events, list):
        return problems + ["field 'events' must be a list"]
    bad = next((p for p in map(_event_problem, range(len(events)), events) if p), None)
    return problems + ([bad] if bad else [])


def load_timelines(paths: Iterable[Path | str]) -> list[dict[str, Any]]:
    """Read ``Timeline.to_dict()`` JSON files (a file may also hold a list of them).

    Returns:
        validated timeline dicts in file order, each with ``source`` (the path) added.

    Warns:
        ResultsWarning: naming each unreadable or malformed file (or list item).
    """
    out = []
    for path, data, report in json_files(paths):
        items = data if isinstance(data, list) else [data]
        for i, item in enumerate(items):
            problems = timeline_problems(item)
            if problems:
                where = "" if len(items) == 1 else f"item {i}: "
                report(f"{where}invalid timeline ({'; '.join(problems)}); skipped")
                continue
            out.append({**item, "source": shown_path(path)})
    return out
