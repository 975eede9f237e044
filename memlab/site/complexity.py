"""Complexity badges and paper tables for the site (issue 18), read from results; no torch.

* :func:`family_badges`: for a family whose rows sweep a size (``depth``, ``length`` or ``seq``) at
  otherwise fixed parameters, the log-log exponent of the measured activation peak against that
  size per technique (:mod:`memlab.core.complexity`), as badges for the family page, each labelled by
  the variable it is fitted against (``x``).  The x is ``extra["blocks"]`` when the rows carry it
  (the resnet family: 3n residual blocks), else the swept parameter.
* :func:`reproduction_extras`: a reproduction's optional ``tables`` (the paper's table beside
  memlab's) and ``badges`` (see :mod:`memlab.reproductions.papers`), validated, as page tables.
  Anything malformed is left out (a reproduction file is input like any other).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

from ..core.complexity import badge, fit_exponent
from .tables import clean, column, sort_value

__all__ = ["family_badges", "reproduction_extras", "against", "axes_text", "DEPTH_PARAMS"]

#: parameters read as a depth, in order of preference (``seq``: the transformer family's sequence
#: length, whose exponent separates O(T²) attention from O(T))
DEPTH_PARAMS = ("depth", "length", "seq")
#: fewest depths, and smallest max/min depth ratio, for a badge
MIN_DEPTHS, MIN_SPAN = 3, 4.0
_MAX_TABLES, _MAX_ROWS, _MAX_COLS, _MAX_TEXT = 8, 200, 16, 400


def against(text: str, variable: str) -> str:
    """A badge's text (:func:`memlab.core.complexity.badge`: ``"... over 8x (4 depths)"``) with its count
    of points named by the ``variable`` the slope is fitted against (``"(4 values of seq)"``), unless
    that is a depth."""
    if variable == "depth":
        return text
    return re.sub(r"\((\d+) depths\)", lambda m: f"({m.group(1)} values of {variable})", text)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) and f > 0 else None


def family_badges(rows) -> list[dict[str, Any]]:
    """Badges ``{"technique", "fixed", "x", "label", "text"}`` (``x``: what depth counts) for each technique x fixed-parameter
    group x machine of ``rows`` (a runs DataFrame of one family) that sweeps a depth over >= 3 values spanning >= 4x;
    ``"machine"`` too where the rows come from several machines.
    Only ``ok`` rows with an activation peak count."""
    groups: dict[tuple[str, str, str, str], dict[float, list[float]]] = {}
    for r in rows.to_dict("records") if len(rows) else []:
        params = r.get("params")
        if r.get("status") != "ok" or not isinstance(params, Mapping):
            continue
        key = next((k for k in DEPTH_PARAMS if k in params), None)
        y = _num(r.get("activation_peak_bytes"))
        extra = r.get("extra") if isinstance(r.get("extra"), Mapping) else {}
        if key is None or y is None:
            continue
        xname = "blocks" if key == "depth" and "blocks" in extra else key
        x = _num(extra.get(xname) if xname == "blocks" else params.get(key))
        if x is None:
            continue
        fixed = json.dumps({k: v for k, v in sorted(params.items()) if k != key}, sort_keys=True, default=str)
        # one machine's rows only (NOTE [ the machine a row ran on ] in memlab.results)
        machine = str(r.get("machine") or "")
        groups.setdefault((str(r.get("technique")), fixed, xname, machine), {}).setdefault(x, []).append(y)
    out = []
    for (tech, fixed, xname, machine), by_x in sorted(groups.items()):
        xs = sorted(by_x)
        if len(xs) < MIN_DEPTHS or xs[-1] / xs[0] < MIN_SPAN:
            continue
        fit = fit_exponent(xs, [sorted(by_x[x])[len(by_x[x]) // 2] for x in xs])
        b = badge(fit)
        fixed_text = ", ".join(f"{k}={v}" for k, v in json.loads(fixed).items())
        out.append({"technique": tech, "fixed": fixed_text, "x": xname, "label": b.label,
                    "text": against(b.text, xname), "machine": machine})
    several = len({b["machine"] for b in out}) > 1
    return [b if several else {k: v for k, v in b.items() if k != "machine"} for b in out]


def axes_text(badges: list[dict[str, Any]]) -> str:
    """The variables ``badges`` are fitted against, in order of first appearance (``"seq"``,
    ``"blocks and seq"``): what "against" names in a family page's complexity section."""
    names = list(dict.fromkeys(b["x"] for b in badges))
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _cell(v: Any) -> Any:
    if v is None or isinstance(v, bool):
        return None if v is None else str(v)
    if isinstance(v, (int, float)):
        return clean(v)
    return str(v)[:_MAX_TEXT] if isinstance(v, str) else None


def _paper_table(page, t: Any, machine: str = "") -> dict[str, Any] | None:
    if not isinstance(t, Mapping):
        return None
    cols, rows = t.get("columns"), t.get("rows")
    if not (isinstance(cols, list) and 0 < len(cols) <= _MAX_COLS and all(isinstance(c, str) for c in cols)):
        return None
    if not (isinstance(rows, list) and len(rows) <= _MAX_ROWS and all(isinstance(r, list) and len(r) == len(cols) for r in rows)):
        return None
    title = str(t.get("title") or "Table")[:_MAX_TEXT]
    columns, shown, records = [], [], []
    cells = [[_cell(v) for v in r] for r in rows]
    tech = cols.index("technique") if "technique" in cols and all(isinstance(r[cols.index("technique")], str)
                                                                  for r in cells) else None
    for i, label in enumerate(cols):
        numeric = any(isinstance(r[i], (int, float)) for r in cells)
        # a column of technique names shows each with its swatch, as every other table does
        columns.append(column(f"c{i}", label[:_MAX_TEXT], num=numeric, kind="tech" if i == tech else "text"))
    if machine:  # where memlab's figures of the table were measured (NOTE [ the machine a row ran on ])
        columns.append(column("machine", "machine (memlab's figures)"))
    for r in cells:
        row: dict[str, Any] = {"technique": r[tech], "peer": False} if tech is not None else {}
        for i, v in enumerate(r):
            row[f"c{i}"] = "-" if v is None else v
            row[f"c{i}__sort"] = sort_value(v)
        shown.append({**row, "machine": machine} if machine else row)
        records.append({cols[i]: v for i, v in enumerate(r)} | ({"machine": machine} if machine else {}))
    note = t.get("note")
    return {"title": title, "note": note[:2 * _MAX_TEXT] if isinstance(note, str) else "",
            "table": page.table(title, columns, shown, records)}


def reproduction_extras(page, data: Mapping[str, Any], machine: str = "") -> dict[str, Any]:
    """``{"paper_tables": [...], "badges": [...], "badge_axis": str}`` for a seed page from its reproduction
    ``data``; ``machine``: where the reproduction measured (a column of each table when given);
    ``badge_axis`` names what the badges' exponent is against (``depth`` unless the data says, e.g.
    ``sequence length``)."""
    tables = data.get("tables") if isinstance(data.get("tables"), list) else []
    made = [_paper_table(page, t, machine) for t in tables[:_MAX_TABLES]]
    raw = data.get("badges") if isinstance(data.get("badges"), list) else []
    badges = [{"name": str(b.get("name"))[:100], "label": str(b.get("label"))[:40], "text": str(b.get("text"))[:_MAX_TEXT]}
              for b in raw[:50] if isinstance(b, Mapping) and all(isinstance(b.get(k), str) for k in ("name", "label", "text"))]
    axis = data.get("badge_axis")
    axis = axis[:60] if isinstance(axis, str) and axis.strip() else "depth"
    return {"paper_tables": [t for t in made if t is not None], "badge_axis": axis,
            "badges": [{**b, "text": against(b["text"], axis)} for b in badges]}
