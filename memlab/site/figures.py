"""Plotly figures as plain JSON-ready dicts (``{"data": [...], "layout": {...}}``).

Built by hand rather than through ``plotly.graph_objects`` so the output is small, has no
template blob and is byte-for-byte stable.  Every string that reaches plotly goes through
:func:`esc` (trace names, hover text, titles, annotations) or :func:`value` (x values and category
tick labels): plotly renders a subset of HTML in all of them (``<a href=...>`` becomes a live
link), so ``<`` ``>`` ``&`` are entity-escaped and plotly displays the entities as the characters.
Only ranked rows are drawn (:func:`memlab.site.analysis.ranked`).  Memory is shown in MiB
(bytes / 2**20), throughput in samples/s, time in ms.
"""
from __future__ import annotations

import html
import json
import math
from typing import Any, Iterable

import pandas as pd

from ..units import MiB
from .analysis import pareto_front, ranked, sort_key

__all__ = ["esc", "value", "mib", "to_json", "palette", "memory_vs_param", "memory_by_technique",
           "throughput_vs_peak", "step_vs_param", "step_by_technique", "UNDER_LOAD_COLOR", "lowest_peaks", "history", "timeline", "timelines_overlay", "seed_figure"]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")
_PEER_SYMBOL, _PEER_DASH = "diamond-open", "dash"
#: The ring drawn around a point measured under load.
UNDER_LOAD_COLOR = "#d62728"
_PHASE_COLORS = {"forward": "rgba(31,119,180,0.08)", "backward": "rgba(214,39,40,0.08)",
                 "optimizer": "rgba(44,160,44,0.08)"}


def esc(text: Any) -> str:
    """``text`` as a string safe for plotly's pseudo-HTML (names, hover text, titles)."""
    return html.escape(str(text), quote=False)


def value(v: Any) -> Any:
    """A data value for plotly: a finite number as it is, anything else as escaped text."""
    if _num(v) is not None and not isinstance(v, str):
        return v
    return esc(v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))


def mib(n: Any) -> float | None:
    return None if n is None or (isinstance(n, float) and math.isnan(n)) else round(n / MiB, 4)


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def to_json(fig: dict) -> str:
    """Canonical JSON: sorted keys, no spaces, no NaN."""
    return json.dumps(fig, sort_keys=True, separators=(",", ":"), allow_nan=False)


def palette(names: Iterable[str]) -> dict[str, str]:
    """A stable colour per name (names sorted first)."""
    return {n: _COLORS[i % len(_COLORS)] for i, n in enumerate(sorted(set(names)))}


def _axis(title: str, values: list[Any] | None = None, kind: str | None = None) -> dict[str, Any]:
    """An axis; log when all values are positive numbers spanning a factor of 10 or more."""
    axis: dict[str, Any] = {"title": {"text": esc(title)}, "zeroline": False}
    if kind:
        axis["type"] = kind
    elif values:
        nums = [_num(v) for v in values]
        if all(n is not None for n in nums):
            if min(nums) > 0 and max(nums) / min(nums) >= 10:
                axis["type"] = "log"
        else:
            axis["type"] = "category"
    return axis


def _layout(title: str, xaxis: dict, yaxis: dict, **kw: Any) -> dict[str, Any]:
    return {"title": {"text": esc(title)}, "xaxis": xaxis, "yaxis": yaxis, "hovermode": "closest",
            "margin": {"l": 70, "r": 20, "t": 50, "b": 60}, "legend": {"orientation": "v"},
            "height": 420, **kw}


def _style(tech_color: str, peer: bool) -> dict[str, Any]:
    return {"line": {"color": tech_color, "dash": _PEER_DASH if peer else "solid"},
            "marker": {"color": tech_color, "symbol": _PEER_SYMBOL if peer else "circle", "size": 8}}


def _hover(row: Any, extra: str = "") -> str:
    lines = [f"<b>{esc(row.technique)}</b>" + (" (peer)" if row.peer else "")]
    lines += [f"{esc(k)}={esc(v)}" for k, v in sorted(row.params.items())]
    lines.append(f"peak allocated {mib(row.peak_allocated_bytes)} MiB")
    if _num(row.peak_reserved_bytes) is not None:
        lines.append(f"peak {'resident' if row.device == 'cpu' else 'reserved'} {mib(row.peak_reserved_bytes)} MiB")
    if _num(row.activation_peak_bytes) is not None:
        expected = _num(row.expected_activation_bytes)
        lines.append(f"activation peak {mib(row.activation_peak_bytes)} MiB"
                     + (f" (expected {mib(expected)} MiB)" if expected is not None else ""))
    lines += _time_lines(row)
    return "<br>".join(lines + ([extra] if extra else []))


def _time_lines(row: Any) -> list[str]:
    """Step time (median ± IQR, samples), relative step time, throughput, load: hover lines."""
    out = []
    if _num(row.step_time_s) is not None:
        iqr = _num(row.step_time_iqr_s)
        n = len(row.step_times_s)
        out.append(f"step {row.step_time_s * 1e3:.1f}" + (f" ± {iqr * 1e3:.1f}" if iqr is not None else "")
                   + " ms" + (f" (median ± IQR of {n} samples)" if n else " (median)"))
    if _num(row.relative_step_time) is not None:
        out.append(f"{row.relative_step_time:.2f}× the reference step")
    if _num(row.samples_per_s) is not None:
        out.append(f"{row.samples_per_s:,.0f} samples/s")
    if row.under_load:
        out.append(f"<b>measured under load</b> ({esc(_load(row))})")
    return out


def _load(row: Any) -> str:
    loads = " → ".join(f"{v:.2f}" if _num(v) is not None else "?" for v in (row.load_avg_before, row.load_avg_after))
    return f"load average {loads} on " + (f"{int(row.cores)} cores" if _num(row.cores) else "? cores")


def _spread(row: Any, value: float, per_second: float) -> tuple[float | None, float | None]:
    """``(below, above)``: the step-time quartiles around ``value`` for error bars, where ``value`` is
    the median step expressed as ``median * per_second`` (ms: 1e3; relative: ratio / median)."""
    q1, q3 = _num(row.step_time_q1_s), _num(row.step_time_q3_s)
    if q1 is None or q3 is None:
        return None, None
    return _r(value - q1 * per_second), _r(q3 * per_second - value)


def _rate_spread(row: Any, y: float) -> tuple[float | None, float | None]:
    """``(below, above)`` for a throughput ``y`` (samples per median step): the step's quartiles
    q1 <= median <= q3 give throughputs ``y * median / q3`` ... ``y * median / q1``."""
    q1, q3, med = _num(row.step_time_q1_s), _num(row.step_time_q3_s), _num(row.step_time_s)
    if q1 is None or q3 is None or not med or not q1:
        return None, None
    return _r(y - y * med / q3), _r(y * med / q1 - y)


def _r(v: float) -> float:
    return round(max(v, 0.0), 6)


def _error_bars(below: list, above: list, color: str) -> dict[str, Any]:
    return {"type": "data", "symmetric": False, "array": above, "arrayminus": below, "color": color,
            "thickness": 1.5, "width": 4}


def _load_ring(points: list[tuple[Any, Any, Any]], name: str = "under load (load average > cores)") -> list[dict]:
    """A red ring around each point measured under load (``(x, y, row)``); nothing when none was."""
    if not points:
        return []
    return [{"type": "scatter", "mode": "markers", "name": name, "x": [p[0] for p in points],
             "y": [p[1] for p in points], "hoverinfo": "text",
             "hovertext": [f"<b>measured under load</b><br>{esc(_load(p[2]))}" for p in points],
             "marker": {"symbol": "circle-open", "size": 20, "color": UNDER_LOAD_COLOR, "line": {"width": 2.5}}}]


def memory_vs_param(rows: pd.DataFrame, labels: pd.Series, swept: str, column: str, title: str,
                    y_title: str, colors: dict[str, str], floor_column: str | None = None,
                    floor_name: str = "analytic floor") -> dict[str, Any]:
    """Peak memory (``column``, bytes -> MiB) against the swept parameter, one line per label.

    A label whose rows lack the swept parameter (a baseline without chunks) is one measurement:
    it is drawn as a flat line across the swept range.  With ``floor_column`` (bytes, e.g.
    ``analytic_floor_bytes``), each line's expectation is drawn beside it, dotted, in the same
    colour, named ``floor_name``.
    """
    ok = ranked(rows)
    ok = ok[ok[column].notna()]
    distinct = {json.dumps(p[swept], sort_keys=True, default=str): p[swept] for p in ok["params"] if swept in p}
    xs = sorted(distinct.values(), key=sort_key)  # values may be unhashable (lists)
    traces = []
    for label in sorted(set(labels[ok.index])):
        group = ok[labels[ok.index] == label]
        tuples = list(group.itertuples())
        first = tuples[0]
        style = _style(colors[label], bool(first.peer))
        name = esc(label) + (" (peer)" if first.peer else "")
        have = sorted((r for r in tuples if swept in r.params), key=lambda r: sort_key(r.params[swept]))
        if have:
            x, rowset, mode = [r.params[swept] for r in have], have, "lines+markers"
        elif len(tuples) == 1 and xs:
            x, rowset = [xs[0], xs[-1]], [first] * 2
            style["line"]["dash"], mode = "dashdot", "lines"
            name += f" (no {esc(swept)})"
        else:
            continue
        x = [value(v) for v in x]
        traces.append({"type": "scatter", "mode": mode, "name": name, "x": x,
                       "y": [mib(getattr(r, column)) for r in rowset], "hoverinfo": "text",
                       "hovertext": [_hover(r) for r in rowset], **style, "legendgroup": name})
        floors = [_num(getattr(r, floor_column)) for r in rowset] if floor_column else []
        if any(f is not None for f in floors):
            # a short horizontal tick per point keeps a one-point expectation visible
            traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{name} {floor_name}", "x": x,
                           "y": [mib(f) for f in floors], "hoverinfo": "x+y+name", "legendgroup": name,
                           "line": {"color": style["line"]["color"], "dash": "dot", "width": 1.5},
                           "marker": {"symbol": "line-ew-open", "size": 14, "color": style["line"]["color"],
                                      "line": {"width": 2, "color": style["line"]["color"]}}})
    return {"data": traces, "layout": _layout(title, _axis(swept, xs), _axis(y_title, kind=_log_if_wide(traces)))}


def _log_if_wide(traces: list[dict]) -> str:
    ys = [y for t in traces for y in t["y"] if y is not None]
    return "log" if ys and min(ys) > 0 and max(ys) / min(ys) >= 10 else "linear"


def memory_by_technique(rows: pd.DataFrame, labels: pd.Series, title: str, colors: dict[str, str]) -> dict:
    """Bars of peak allocated and peak reserved/resident per configuration (nothing is swept)."""
    ok = ranked(rows).assign(_label=labels).sort_values(["_label", "params_key"], kind="stable")
    names = [esc(l) + (" (peer)" if p else "") for l, p in zip(ok["_label"], ok["peer"])]
    second = "peak resident" if set(ok["device"]) == {"cpu"} else "peak reserved/resident"
    data = [
        {"type": "bar", "name": "peak allocated", "x": names, "y": [mib(v) for v in ok["peak_allocated_bytes"]],
         "marker": {"color": [colors[l] for l in ok["_label"]]}, "hoverinfo": "text",
         "hovertext": [_hover(r) for r in ok.itertuples()]},
        {"type": "bar", "name": second, "x": names, "y": [mib(_num(v)) for v in ok["peak_reserved_bytes"]],
         "marker": {"color": "rgba(120,120,120,0.6)"}},
    ]
    return {"data": data, "layout": _layout(title, _axis("technique", kind="category"), _axis("MiB"),
                                            barmode="group")}


def throughput_vs_peak(rows: pd.DataFrame, labels: pd.Series, title: str, colors: dict[str, str],
                       groups: list[tuple[str, pd.Index]] | None = None) -> dict:
    """Samples/s against peak allocated MiB, markers per label, the Pareto front as a line.

    ``groups`` (name, row index) split the front where rows are different workloads (e.g. depths):
    one front per group; default one front over all rows.
    """
    ok = ranked(rows)
    ok = ok[ok["samples_per_s"].notna() & ok["peak_allocated_bytes"].notna()]
    traces, rings = [], []
    for label in sorted(set(labels[ok.index])):
        group = ok[labels[ok.index] == label]
        peer = bool(group.iloc[0]["peer"])
        style = _style(colors[label], peer)
        tuples = list(group.itertuples())
        ys = [float(r.samples_per_s) for r in tuples]
        spread = [_rate_spread(r, y) for r, y in zip(tuples, ys)]
        trace = {"type": "scatter", "mode": "markers", "name": esc(label) + (" (peer)" if peer else ""),
                 "x": [mib(r.peak_allocated_bytes) for r in tuples], "y": ys,
                 "hoverinfo": "text", "hovertext": [_hover(r) for r in tuples],
                 "marker": {**style["marker"], "size": 10}}
        if any(b is not None for b, _ in spread):
            trace["error_y"] = _error_bars([b for b, _ in spread], [a for _, a in spread], style["marker"]["color"])
        traces.append(trace)
        rings += [(x, y, r) for x, y, r in zip(trace["x"], ys, tuples) if r.under_load]
    fronts = []
    for name, index in groups or [("", ok.index)]:
        part = ok[ok.index.isin(index)]
        points = [(float(m), float(t)) for m, t in zip(part["peak_allocated_bytes"], part["samples_per_s"])]
        front = pareto_front(points)
        if front:
            fronts.append({"type": "scatter", "mode": "lines", "name": "Pareto front" + (f" ({esc(name)})" if name else ""),
                           "x": [mib(points[i][0]) for i in front], "y": [points[i][1] for i in front],
                           "line": {"color": "rgba(0,0,0,0.45)", "width": 6, "shape": "hv"}, "hoverinfo": "name"})
    traces = fronts + traces + _load_ring(rings)  # the fronts beneath the markers
    xs = [float(m) for m in ok["peak_allocated_bytes"]]
    return {"data": traces, "layout": _layout(title, _axis("peak allocated (MiB)", xs), _axis("throughput (samples/s)"))}


def _step_values(ok: pd.DataFrame) -> tuple[bool, str]:
    """Whether step times are drawn relative to the reference step (every row has the figure), and the
    axis title."""
    relative = bool(len(ok)) and bool(ok["relative_step_time"].notna().all())
    return relative, ("step time (× the workload's reference step)" if relative else "step time (ms)")


def _step_point(r: Any, relative: bool) -> tuple[float, float | None, float | None]:
    """``(y, below, above)``: the median step (ms, or relative) and its quartiles as error bars."""
    if relative:
        y = float(r.relative_step_time)
        return (y, *_spread(r, y, y / r.step_time_s))
    y = round(r.step_time_s * 1e3, 6)
    return (y, *_spread(r, y, 1e3))


def step_vs_param(rows: pd.DataFrame, labels: pd.Series, swept: str, title: str, colors: dict[str, str]) -> dict:
    """Step time against the swept parameter, one line per label, the quartiles as error bars.

    Drawn relative to the workload's reference step (``relative_step_time``, load-robust) when every
    row has it, else in ms.  A label without the swept parameter is drawn flat across the range (as
    in :func:`memory_vs_param`); points measured under load are ringed.
    """
    ok = ranked(rows)
    ok = ok[ok["step_time_s"].notna() & (ok["step_time_s"] > 0)]
    relative, y_title = _step_values(ok)
    distinct = {json.dumps(p[swept], sort_keys=True, default=str): p[swept] for p in ok["params"] if swept in p}
    xs = sorted(distinct.values(), key=sort_key)
    traces, rings = [], []
    for label in sorted(set(labels[ok.index])):
        tuples = list(ok[labels[ok.index] == label].itertuples())
        style = _style(colors[label], bool(tuples[0].peer))
        name = esc(label) + (" (peer)" if tuples[0].peer else "")
        have = sorted((r for r in tuples if swept in r.params), key=lambda r: sort_key(r.params[swept]))
        if have:
            x, rowset, mode = [value(r.params[swept]) for r in have], have, "lines+markers"
        elif len(tuples) == 1 and xs:
            x, rowset, mode = [value(xs[0]), value(xs[-1])], [tuples[0]] * 2, "lines"
            style["line"]["dash"], name = "dashdot", name + f" (no {esc(swept)})"
        else:
            continue
        points = [_step_point(r, relative) for r in rowset]
        trace = {"type": "scatter", "mode": mode, "name": name, "x": x, "y": [p[0] for p in points],
                 "hoverinfo": "text", "hovertext": [_hover(r) for r in rowset], **style}
        if mode == "lines+markers" and any(p[1] is not None for p in points):
            trace["error_y"] = _error_bars([p[1] for p in points], [p[2] for p in points], style["line"]["color"])
        traces.append(trace)
        rings += [(xv, p[0], r) for xv, p, r in zip(x, points, rowset) if r.under_load and mode != "lines"]
    return {"data": traces + _load_ring(rings),
            "layout": _layout(title, _axis(swept, xs), _axis(y_title, kind=_log_if_wide(traces)))}


def step_by_technique(rows: pd.DataFrame, labels: pd.Series, title: str, colors: dict[str, str]) -> dict:
    """Bars of the step time per configuration (nothing swept), the quartiles as error bars."""
    ok = ranked(rows)
    ok = ok[ok["step_time_s"].notna() & (ok["step_time_s"] > 0)].assign(line_label=labels)
    ok = ok.sort_values(["line_label", "params_key"], kind="stable")
    relative, y_title = _step_values(ok)
    tuples = list(ok.itertuples())
    names = [esc(r.line_label) + (" (peer)" if r.peer else "") for r in tuples]
    points = [_step_point(r, relative) for r in tuples]
    trace = {"type": "bar", "name": "step time", "x": names, "y": [p[0] for p in points],
             "marker": {"color": [colors[r.line_label] for r in tuples]}, "hoverinfo": "text",
             "hovertext": [_hover(r) for r in tuples], "showlegend": False}
    if any(p[1] is not None for p in points):
        trace["error_y"] = _error_bars([p[1] for p in points], [p[2] for p in points], "#333333")
    rings = [(n, p[0], r) for n, p, r in zip(names, points, tuples) if r.under_load]
    return {"data": [trace] + _load_ring(rings),
            "layout": _layout(title, _axis("technique", kind="category"), _axis(y_title))}


def history(frame: pd.DataFrame, title: str) -> dict[str, Any]:
    """One asv benchmark on one machine across commits: a line per parameter combination.

    ``frame`` holds :func:`memlab.results.load_asv_results` rows; bytes are shown in MiB and
    seconds in ms; x is the commit date (UTC), hover names the commit.
    """
    unit = frame["unit"].iloc[0]
    scale, y_title = {"bytes": (1 / MiB, "MiB"), "seconds": (1e3, "ms")}.get(unit, (1.0, unit or "value"))
    traces = []
    for key, group in frame.groupby("params_key", sort=True):
        group = group.sort_values(["date_ms", "commit"], kind="stable")
        params = group.iloc[0]["params"]
        name = esc(", ".join(f"{k}={v}" for k, v in params.items())) or "(no parameters)"
        dates = [_utc(d) for d in group["date_ms"]]
        traces.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": dates,
                       "y": [_rounded(v * scale, 6) for v in group["value"]], "hoverinfo": "text",
                       "hovertext": [f"{name}<br>commit {esc(c[:10])}<br>{_rounded(v * scale, 4)} {esc(y_title)}"
                                     for c, v in zip(group["commit"], group["value"])]})
    return {"data": traces, "layout": _layout(title, _axis("commit date (UTC)", kind="date"), _axis(y_title))}


def _rounded(v: float, digits: int) -> float | None:
    return round(v, digits) if math.isfinite(v) else None


def _utc(ms: Any) -> str | None:
    """Milliseconds since the epoch as a UTC date; None when unknown or beyond the calendar."""
    import datetime as _dt

    n = _num(ms)
    if n is None:
        return None
    try:
        return _dt.datetime.fromtimestamp(n / 1000, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):
        return None


def _event_hover(e: dict, i: int) -> str:
    sign = "+" if e["delta_bytes"] >= 0 else "-"
    stack = " › ".join(esc(s) for s in e["stack"]) or "?"
    return (f"#{i} <b>{esc(e['op'])}</b> ({esc(e['phase'])})<br>{stack}<br>"
            f"{sign}{mib(abs(e['delta_bytes']))} MiB → {mib(e['live_bytes'])} MiB live")


def timeline(tl: dict, title: str) -> dict[str, Any]:
    """Live MiB over one step, event by event (a step line), phases shaded, the peak annotated."""
    events = tl["events"]
    x = list(range(1, len(events) + 1))
    y = [mib(e["live_bytes"]) for e in events]
    shapes, start = [], 0
    for i in range(1, len(events) + 1):
        if i == len(events) or events[i]["phase"] != events[start]["phase"]:
            color = _PHASE_COLORS.get(events[start]["phase"])
            if color:
                shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": start + 0.5, "x1": i + 0.5,
                               "y0": 0, "y1": 1, "fillcolor": color, "line": {"width": 0}, "layer": "below"})
            start = i
    annotations = []
    if events:
        k = max(range(len(events)), key=lambda i: (events[i]["live_bytes"], -i))
        annotations.append({"x": k + 1, "y": y[k], "text": f"peak {y[k]} MiB: {esc(events[k]['op'])}",
                            "showarrow": True, "arrowhead": 2, "ax": 0, "ay": -30})
    trace = {"type": "scatter", "mode": "lines+markers", "name": esc(tl["technique"]), "x": x, "y": y,
             "line": {"shape": "hv", "color": _COLORS[0]}, "marker": {"size": 4}, "hoverinfo": "text",
             "hovertext": [_event_hover(e, i + 1) for i, e in enumerate(events)]}
    return {"data": [trace], "layout": _layout(title, _axis("allocation event", kind="linear"),
                                               _axis("live tensor memory above baseline (MiB)"),
                                               shapes=shapes, annotations=annotations, showlegend=False)}


def timelines_overlay(timelines: list[dict], labels: list[str], title: str) -> dict[str, Any]:
    """Several timelines on one chart; x is the fraction of the step's events (0..1)."""
    colors = palette(labels)
    traces = []
    for tl, label in zip(timelines, labels):
        n = max(len(tl["events"]), 1)
        traces.append({"type": "scatter", "mode": "lines", "name": esc(label),
                       "x": [round((i + 1) / n, 6) for i in range(len(tl["events"]))],
                       "y": [mib(e["live_bytes"]) for e in tl["events"]],
                       "line": {"shape": "hv", "color": colors[label]}, "hoverinfo": "text",
                       "hovertext": [f"{esc(label)}<br>" + _event_hover(e, i + 1) for i, e in enumerate(tl["events"])]})
    return {"data": traces, "layout": _layout(title, _axis("fraction of the step's allocation events", kind="linear"),
                                              _axis("live tensor memory above baseline (MiB)"))}


def lowest_peaks(items: list[tuple[str, bool, bool, float]], title: str) -> dict[str, Any]:
    """Horizontal bars: each technique's lowest peak allocated (bytes -> MiB) at the baseline's
    configuration; ``items`` are ``(label, is_baseline, peer, peak_bytes)``, drawn top-down."""
    items = list(reversed(items))
    names = [esc(l) + (" (peer)" if peer else "") for l, _, peer, _ in items]
    colors = ["#8c8c8c" if base else ("#c08a2c" if peer else _COLORS[0]) for _, base, peer, _ in items]
    trace = {"type": "bar", "orientation": "h", "name": "peak allocated", "y": names,
             "x": [mib(p) for *_, p in items], "marker": {"color": colors}, "hoverinfo": "x+y",
             "text": [f"{p / MiB:.1f} MiB" for *_, p in items], "textposition": "auto"}
    layout = _layout(title, _axis("peak allocated (MiB)", kind="linear"), _axis("", kind="category"),
                     showlegend=False, height=max(160, 60 + 36 * len(items)))
    layout["margin"] = {"l": 20, "r": 20, "t": 40, "b": 50}
    layout["yaxis"]["automargin"] = True
    return {"data": [trace], "layout": layout}


def seed_figure(spec: dict) -> dict[str, Any]:
    """A reproduction's ``figure`` spec (``type`` bar/line, ``x``, ``series``, labels, log flags)."""
    kind = spec["type"]
    traces = []
    x = [value(v) for v in spec["x"]]
    for i, (name, ys) in enumerate(sorted(spec["series"].items())):
        trace = {"type": "bar" if kind == "bar" else "scatter", "name": esc(name), "x": x,
                 "y": [_num(v) for v in ys], "marker": {"color": _COLORS[i % len(_COLORS)]}}
        if kind == "line":
            trace["mode"] = "lines+markers"
        traces.append(trace)
    xaxis = _axis(spec.get("x_label", ""), kind="log" if spec.get("log_x") else
                  ("category" if any(isinstance(v, str) for v in spec["x"]) else "linear"))
    yaxis = _axis(spec.get("y_label", ""), kind="log" if spec.get("log_y") else "linear")
    return {"data": traces, "layout": _layout(spec.get("title", ""), xaxis, yaxis,
                                              **({"barmode": "group"} if kind == "bar" else {}))}
