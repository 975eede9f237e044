"""Plotly figures as plain JSON-ready dicts (``{"data": [...], "layout": {...}}``).

Built by hand rather than through ``plotly.graph_objects`` so the output is small, has no
template blob and is byte-for-byte stable.  Every string that reaches plotly goes through
:func:`esc` (trace names, hover text, annotations, the technique in ``meta``) or :func:`value` (x
values and category tick labels): plotly renders a subset of HTML in all of them (``<a href=...>`` becomes a live
link), so ``<`` ``>`` ``&`` are entity-escaped and plotly displays the entities as the characters.
Only ranked rows are drawn (:func:`memlab.site.ranking.ranked`).  Memory is shown in MiB
(bytes / 2**20), throughput in samples/s, time in ms (or relative to the family baseline's step).

# NOTE [ one visual language ]
* A technique has one colour everywhere, a function of its name alone (:mod:`memlab.site.colors`:
  fixed for memlab's own, the baselines grey; a stable hash of the name for a plug-in's), so a
  plug-in never moves another's colour; peers are dashed with open markers and "(peer)" in the
  legend, or hatched bars.
* Legends list techniques: a technique's several configurations in one chart (``opt_einsum=True``
  and ``False``) share its colour and legend entry and differ by marker symbol; the configuration
  is in the hover text and the tables.
* Titles are HTML headings above the chart (with a permalink), never inside plotly, so the toolbar
  covers nothing; log axes carry explicit 1-2-5 (or power-of-ten) ticks with full labels.
"""
from __future__ import annotations

import html
import json
import math
import re
from typing import Any, Iterable, Sequence

import pandas as pd

from ..core.record import UNDER_LOAD_FACTOR
from ..core.units import MiB
from .colors import BASELINE_COLOR, PALETTE, technique_color, technique_colors as by_name
from .ranking import pareto_front, ranked, sort_key
from .text import relative_against
from . import history as H

__all__ = ["esc", "value", "mib", "to_json", "draws_data", "fit_legend", "technique_colors", "color_of", "BASELINE_COLOR", "UNDER_LOAD_COLOR",
           "PALETTE", "NEUTRAL_COLOR", "SERIES_PATTERNS", "hatch", "series_technique", "pattern_legend",
           "CATEGORY_COLORS", "memory_vs_param", "memory_by_technique", "step_vs_param", "step_by_technique",
           "throughput_vs_peak", "draws_second_bars", "SECOND_BAR_COLOR", "lowest_peaks", "peak_by_category", "history", "timeline", "timelines_overlay",
           "seed_figure", "chart_axis", "chart_layout", "drawn_ys", "SYMBOLS", "FRONT_DASHES"]

#: Technique colours (:mod:`memlab.site.colors`): a function of the name alone.
_COLORS = PALETTE
#: A series that is no technique (an analytic floor, a prediction beside the measured bars): near black.
NEUTRAL_COLOR = "#222222"
_OTHER = "#444444"
SYMBOLS = ("circle", "square", "triangle-up", "x", "star", "triangle-down", "hexagon", "cross")
_PEER_SYMBOLS = ("diamond-open", "square-open", "triangle-up-open", "x-open", "star-open", "triangle-down-open",
                 "hexagon-open", "cross-open")
_PEER_DASH = "dash"
#: The ring drawn around a point measured under load: the tables' "under load" red, darker than any
#: technique's (it was the palette's red, reversible's colour, ringing reversible's own points).
UNDER_LOAD_COLOR = "#9a1f1f"
#: Memory categories (``memlab.measurement.categories.CATEGORIES``): warm for activation memory (what
#: the techniques change), pale for the rest.
CATEGORY_COLORS = {"parameters": "#a6bddb", "gradients": "#74a9cf", "optimizer_state": "#d9d9d9",
                   "inputs": "#bcbddc", "saved_activations": "#e34a33", "temporaries": "#fdbb84"}
FRONT_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
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


def fit_legend(fig: dict) -> dict:
    """``fig`` grown so that its vertical legend fits beside the plot without a scroll bar (plotly
    scrolls a legend taller than the plot, hiding entries: a Pareto chart of 15 entries in 420 px)."""
    layout = fig.get("layout", {})
    legend = layout.get("legend") or {}
    if layout.get("showlegend") is False or legend.get("orientation", "v") != "v":
        return fig
    entries = sum(1 for t in fig.get("data", []) if t.get("showlegend", True) is not False)
    if entries < 2:
        return fig
    margin = layout.get("margin") or {}
    need = 30 * entries + (24 if legend.get("title") else 0) + margin.get("t", 100) + margin.get("b", 80) + 20
    if need > layout.get("height", 450):
        fig = {**fig, "layout": {**layout, "height": need}}
    return fig


def draws_data(fig: dict) -> bool:
    """Whether ``fig`` draws anything: a trace with a finite value other than 0 (its ``y``, or its
    ``x`` for a horizontal bar).  A figure whose every series is empty or 0 (the peak resident of
    rows that all reserved nothing new) is two flat lines on a made-up axis: not drawn at all
    (:meth:`memlab.site.page.Page.chart` says why instead)."""
    for t in fig.get("data", []):
        values = t.get("x" if t.get("orientation") == "h" else "y") or []
        if any((f := _num(v)) is not None and f != 0 for v in values):
            return True
    return False


def to_json(fig: dict) -> str:
    """Canonical JSON: sorted keys, no spaces, no NaN."""
    return json.dumps(fig, sort_keys=True, separators=(",", ":"), allow_nan=False)


# -- colours and styles ----------------------------------------------------------------------------
def technique_colors(names: Iterable[str]) -> dict[str, str]:
    """One colour per technique, a function of its name (:func:`memlab.site.colors.technique_color`)."""
    return by_name(names)


def color_of(colors: dict[str, str], technique: str) -> str:
    """``technique``'s colour: the build's, else its own by name (never a stand-in grey)."""
    return colors.get(technique) or technique_color(technique)


def _style(color: str, peer: bool, variant: int = 0) -> dict[str, Any]:
    symbols = _PEER_SYMBOLS if peer else SYMBOLS
    return {"line": {"color": color, "dash": _PEER_DASH if peer else "solid"},
            "marker": {"color": color, "symbol": symbols[variant % len(symbols)], "size": 8}}


def _name(technique: str, peer: bool) -> str:
    return esc(technique) + (" (peer)" if peer else "")


def _lines(ok: pd.DataFrame, variants: pd.Series) -> list[tuple[str, str, int, bool, list]]:
    """``(technique, variant, variant index, first of its technique, rows)`` per line, by technique then variant."""
    groups: dict[tuple[str, str], list] = {}
    for r, v in zip(ok.itertuples(), variants[ok.index]):
        groups.setdefault((r.technique, v), []).append(r)
    out, index = [], {}
    for (tech, variant), rows in sorted(groups.items()):
        i = index.get(tech, -1) + 1
        index[tech] = i
        out.append((tech, variant, i, i == 0, rows))
    return out


def _legend(trace: dict[str, Any], technique: str, first: bool) -> dict[str, Any]:
    """One legend entry per technique: its first trace shows it; the others toggle with it."""
    trace["legendgroup"] = esc(technique)
    trace["meta"] = {"technique": esc(technique)}
    if not first:
        trace["showlegend"] = False
    return trace


# -- axes and layout -------------------------------------------------------------------------------
def _tick(t: float) -> str:
    return f"{t:,.0f}" if t >= 1 else f"{t:g}"


def _log_ticks(nums: list[float]) -> dict[str, Any]:
    """A log axis over ``nums`` (positive) with an explicit range and 1-2-5 ticks (powers of ten only
    when those would be more than 10), each labelled in full."""
    a, b = math.log10(min(nums)), math.log10(max(nums))
    pad = max(0.04 * (b - a), 0.05)
    r0, r1 = a - pad, b + pad
    ticks = [float(m * 10 ** e) if e >= 0 else m / 10 ** -e
             for e in range(math.floor(r0), math.ceil(r1) + 1) for m in (1, 2, 5)]
    ticks = [t for t in ticks if r0 <= math.log10(t) <= r1]
    if len(ticks) > 10:
        ticks = [t for t in ticks if f"{t:e}".startswith("1")]
    return {"type": "log", "range": [round(r0, 6), round(r1, 6)], "tickmode": "array",
            "tickvals": [float(f"{t:.12g}") for t in ticks], "ticktext": [_tick(t) for t in ticks]}


def chart_axis(title: str, values: Iterable[Any] | None = None, kind: str | None = None) -> dict[str, Any]:
    """An axis titled ``title``; with ``values`` and no ``kind``: log (1-2-5 ticks) when all are positive
    numbers spanning a factor of 10 or more, category when any is not a number, else linear."""
    axis: dict[str, Any] = {"title": {"text": esc(title)}, "zeroline": False}
    if kind and kind != "log":
        axis["type"] = kind
        if kind == "category":  # slanted long labels push the margin; the title stays below them
            axis.update(automargin=True)
            axis["title"]["standoff"] = 10
        if kind == "linear":
            axis["tickformat"] = ","  # 25,000 as in the tables, not plotly's 25k
        return axis
    vals = list(values or [])
    nums = [_num(v) for v in vals]
    if vals and any(n is None for n in nums) and kind is None:
        axis["type"] = "category"
        return axis
    nums = [n for n in nums if n is not None]
    if nums and min(nums) > 0 and (kind == "log" or max(nums) / min(nums) >= 10):
        axis.update(_log_ticks(nums))
    elif kind == "log":
        axis["type"] = "log"
    else:
        axis["tickformat"] = ","
    return axis


def drawn_ys(traces: list[dict]) -> list[float]:
    """Every y drawn, error-bar ends included (so an explicit axis range keeps the whole bar)."""
    out = []
    for t in traces:
        ys = t.get("y", [])
        err = t.get("error_y") or {}
        above, below = err.get("array") or [None] * len(ys), err.get("arrayminus") or [None] * len(ys)
        for y, a, b in zip(ys, above, below):
            if _num(y) is None:
                continue
            out += [y] + ([y + a] if _num(a) else []) + ([y - b] if _num(b) and y - b > 0 else [])
    return out


def chart_layout(xaxis: dict, yaxis: dict, **kw: Any) -> dict[str, Any]:
    """No title inside the figure (the page's heading names it); 36 px on top keep the toolbar above
    the plot area."""
    return {"xaxis": xaxis, "yaxis": yaxis, "hovermode": "closest",
            "margin": {"l": 70, "r": 20, "t": 36, "b": 60}, "legend": {"orientation": "v"},
            "height": 420, **kw}


# -- hover -----------------------------------------------------------------------------------------
def _hover(row: Any, extra: str = "") -> str:
    lines = [f"<b>{esc(row.technique)}</b>" + (" (peer)" if row.peer else "")]
    lines += [f"{esc(k)}={esc(v)}" for k, v in sorted(row.params.items()) if v is not None and str(v).strip()]
    lines.append(f"peak allocated {mib(row.peak_allocated_bytes)} MiB")
    if _num(row.total_peak_bytes) is not None:
        lines.append(f"total peak {mib(row.total_peak_bytes)} MiB (baseline included)")
    if _num(row.peak_reserved_bytes) is not None:
        lines.append(f"peak {'resident' if row.device == 'cpu' else 'reserved'} {mib(row.peak_reserved_bytes)} MiB")
    if _num(row.activation_peak_bytes) is not None:
        expected = _num(row.expected_activation_bytes)
        lines.append(f"activation peak {mib(row.activation_peak_bytes)} MiB"
                     + (f" (expected {mib(expected)} MiB)" if expected is not None else ""))
    lines += _time_lines(row)
    lines.append(f"run {esc(row.run)}")
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
        out.append(f"{row.relative_step_time:.2f}× {esc(relative_against(getattr(row, 'relative_to', None)))}")
    if _num(row.samples_per_s) is not None:
        out.append(f"{row.samples_per_s:,.0f} samples/s")
    if row.under_load:
        out.append(f"<b>measured under load</b> ({esc(_load(row))})")
    return out


def _load(row: Any) -> str:
    loads = " → ".join(f"{v:.2f}" if _num(v) is not None else "?" for v in (row.load_avg_before, row.load_avg_after))
    return f"load average {loads} on " + (f"{int(row.cores)} cores" if _num(row.cores) else "? cores")


# -- spread and load -------------------------------------------------------------------------------
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


def _load_ring(points: list[tuple[Any, Any, Any]],
               name: str = f"under load (load average > {UNDER_LOAD_FACTOR:g} x cores)") -> list[dict]:
    """A red ring around each point measured under load (``(x, y, row)``); nothing when none was."""
    if not points:
        return []
    return [{"type": "scatter", "mode": "markers", "name": name, "x": [p[0] for p in points],
             "y": [p[1] for p in points], "hoverinfo": "text",
             "hovertext": [f"<b>measured under load</b><br>{esc(_load(p[2]))}" for p in points],
             "marker": {"symbol": "circle-open", "size": 20, "color": UNDER_LOAD_COLOR, "line": {"width": 2.5}}}]


# -- family charts ---------------------------------------------------------------------------------
def _swept_values(ok: pd.DataFrame, swept: str) -> list[Any]:
    distinct = {json.dumps(p[swept], sort_keys=True, default=str): p[swept] for p in ok["params"] if swept in p}
    return sorted(distinct.values(), key=sort_key)  # values may be unhashable (lists)


def _against_param(ok: pd.DataFrame, variants: pd.Series, swept: str, colors: dict[str, str], point,
                   floor=None, floor_name: str = "") -> tuple[list, list, list]:
    """Lines of ``point(row) -> (y, below, above)`` against ``swept``, one per technique and variant.

    A technique's line whose rows lack ``swept`` (a baseline without chunks) is one measurement:
    drawn flat across the swept range, dash-dotted.  With ``floor(row) -> y or None``, each line's
    expectation follows it, dotted, in the same colour (a short tick per point keeps a one-point
    expectation visible).  Returns ``(traces, ring points, xs)``.
    """
    xs = _swept_values(ok, swept)
    traces, rings = [], []
    for tech, variant, vi, first, rows in _lines(ok, variants):
        peer = bool(rows[0].peer)
        style = _style(color_of(colors, tech), peer, vi)
        have = sorted((r for r in rows if swept in r.params), key=lambda r: sort_key(r.params[swept]))
        flat = False
        if have:
            x, rowset = [value(r.params[swept]) for r in have], have
        elif len(rows) == 1 and xs:
            x, rowset, flat = [value(xs[0]), value(xs[-1])], rows * 2, True
            style["line"]["dash"] = "dashdot"
        else:
            continue
        points = [point(r) for r in rowset]
        note = f"no {esc(swept)}: one measurement, drawn across the range" if flat else ""
        name = _name(tech, peer)
        trace = {"type": "scatter", "mode": "lines" if flat else "lines+markers", "name": name,
                 "x": x, "y": [p[0] for p in points], "hoverinfo": "text",
                 "hovertext": [_hover(r, note) for r in rowset], **style}
        if not flat and any(p[1] is not None for p in points):
            trace["error_y"] = _error_bars([p[1] for p in points], [p[2] for p in points], style["line"]["color"])
        traces.append(_legend(trace, tech, first))
        rings += [(xv, p[0], r) for xv, p, r in zip(x, points, rowset) if r.under_load and not flat]
        floors = [floor(r) for r in rowset] if floor else []
        if any(f is not None for f in floors):
            color = style["line"]["color"]
            traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{name}: {floor_name}", "x": x,
                           "y": floors, "hoverinfo": "x+y+name", "showlegend": False, "legendgroup": esc(tech),
                           "meta": {"technique": esc(tech)},
                           "line": {"color": color, "dash": "dot", "width": 1.5},
                           "marker": {"symbol": "line-ew-open", "size": 14, "color": color,
                                      "line": {"width": 2, "color": color}}})
    return traces, rings, xs


def memory_vs_param(rows: pd.DataFrame, variants: pd.Series, swept: str, column: str, y_title: str,
                    colors: dict[str, str], floor_column: str | None = None,
                    floor_name: str = "analytic floor") -> dict[str, Any]:
    """Peak memory (``column``, bytes -> MiB) against the swept parameter, one line per technique
    (and variant); with ``floor_column`` (bytes, e.g. ``analytic_floor_bytes``) each line's
    expectation beside it, dotted, named ``floor_name`` in the hover text."""
    ok = ranked(rows)
    ok = ok[ok[column].notna()]
    floor = (lambda r: mib(_num(getattr(r, floor_column)))) if floor_column else None
    traces, _, xs = _against_param(ok, variants, swept, colors, lambda r: (mib(getattr(r, column)), None, None),
                                   floor, floor_name)
    return {"data": traces, "layout": chart_layout(chart_axis(swept, xs), chart_axis(y_title, drawn_ys(traces)))}


def _step_values(ok: pd.DataFrame) -> tuple[bool, str]:
    """Whether step times are drawn relative to the family baseline's step (every row has the
    figure), and the axis title: the baseline's name when every row was timed against the same one."""
    relative = bool(len(ok)) and bool(ok["relative_step_time"].notna().all())
    if not relative:
        return False, "step time (ms)"
    against = set(ok["relative_to"]) if "relative_to" in ok else {None}
    if len(against) == 1:
        return True, f"step time (× {relative_against(against.pop())})"
    return True, "step time (× each row's family baseline step)"


def _step_point(r: Any, relative: bool) -> tuple[float, float | None, float | None]:
    """``(y, below, above)``: the median step (ms, or relative) and its quartiles as error bars."""
    if relative:
        y = float(r.relative_step_time)
        return (y, *_spread(r, y, y / r.step_time_s))
    y = round(r.step_time_s * 1e3, 6)
    return (y, *_spread(r, y, 1e3))


def _timed(rows: pd.DataFrame) -> pd.DataFrame:
    ok = ranked(rows)
    return ok[ok["step_time_s"].notna() & (ok["step_time_s"] > 0)]


def step_vs_param(rows: pd.DataFrame, variants: pd.Series, swept: str, colors: dict[str, str]) -> dict:
    """Step time against the swept parameter, one line per technique (and variant), the quartiles as
    error bars; relative to the family baseline's step (``relative_step_time``, load-robust) when
    every row has it, else in ms; points measured under load are ringed."""
    ok = _timed(rows)
    relative, y_title = _step_values(ok)
    traces, rings, xs = _against_param(ok, variants, swept, colors, lambda r: _step_point(r, relative))
    return {"data": traces + _load_ring(rings), "layout": chart_layout(chart_axis(swept, xs), chart_axis(y_title, drawn_ys(traces)))}


def _bar_names(ok: pd.DataFrame, variants: pd.Series) -> list[str]:
    return [_name(r.technique, r.peer) + (f" ({esc(v)})" if v else "") for r, v in zip(ok.itertuples(), variants[ok.index])]


def _sorted_rows(ok: pd.DataFrame, variants: pd.Series) -> pd.DataFrame:
    return ok.assign(line_variant=variants[ok.index]).sort_values(["technique", "line_variant", "params_key"],
                                                                  kind="stable")


def _peer_pattern(peers: list[bool]) -> dict[str, Any]:
    return {"shape": ["/" if p else "" for p in peers], "fgcolor": "rgba(255,255,255,0.7)", "solidity": 0.3}


#: The grey of the second bar per configuration (peak reserved / resident).
SECOND_BAR_COLOR = "rgba(120,120,120,0.45)"


def draws_second_bars(rows: pd.DataFrame) -> bool:
    """Whether :func:`memory_by_technique` draws the grey peak reserved/resident bars: some ranked row's
    figure is above 0 (on CUDA every row of a quick sweep held 0: the caching allocator kept the
    warm-up step's segments, so reserved memory did not grow during the measured step)."""
    values = [_num(v) for v in ranked(rows)["peak_reserved_bytes"]]
    return any(v for v in values if v is not None)


def memory_by_technique(rows: pd.DataFrame, variants: pd.Series, colors: dict[str, str]) -> dict:
    """Bars of peak allocated (coloured by technique, peers hatched) beside grey bars of peak
    reserved/resident, per configuration (nothing is swept); no grey bars when every row's is 0
    (:func:`draws_second_bars`)."""
    ok = _sorted_rows(ranked(rows), variants)
    names = _bar_names(ok, variants)
    second = "peak resident" if set(ok["device"]) == {"cpu"} else "peak reserved/resident"
    data = [
        {"type": "bar", "name": "peak allocated", "x": names, "y": [mib(v) for v in ok["peak_allocated_bytes"]],
         "marker": {"color": [color_of(colors, t) for t in ok["technique"]], "pattern": _peer_pattern(list(ok["peer"]))},
         "meta": {"techniques": [esc(t) for t in ok["technique"]]},
         "hoverinfo": "text", "hovertext": [_hover(r) for r in ok.itertuples()], "showlegend": False},
    ]
    if draws_second_bars(rows):
        data.append({"type": "bar", "name": second, "x": names, "y": [mib(_num(v)) for v in ok["peak_reserved_bytes"]],
                     "marker": {"color": SECOND_BAR_COLOR}, "showlegend": False, "hoverinfo": "x+y+name"})
    return {"data": data, "layout": chart_layout(chart_axis("technique", kind="category"), chart_axis("memory (MiB)"),
                                                 barmode="group")}


def step_by_technique(rows: pd.DataFrame, variants: pd.Series, colors: dict[str, str]) -> dict:
    """Bars of the step time per configuration (nothing swept), the quartiles as error bars."""
    ok = _sorted_rows(_timed(rows), variants)
    relative, y_title = _step_values(ok)
    tuples = list(ok.itertuples())
    names = _bar_names(ok, variants)
    points = [_step_point(r, relative) for r in tuples]
    trace = {"type": "bar", "name": "step time", "x": names, "y": [p[0] for p in points],
             "marker": {"color": [color_of(colors, r.technique) for r in tuples],
                        "pattern": _peer_pattern([bool(r.peer) for r in tuples])},
             "meta": {"techniques": [esc(r.technique) for r in tuples]},
             "hoverinfo": "text", "hovertext": [_hover(r) for r in tuples], "showlegend": False}
    if any(p[1] is not None for p in points):
        trace["error_y"] = _error_bars([p[1] for p in points], [p[2] for p in points], "#333333")
    rings = [(n, p[0], r) for n, p, r in zip(names, points, tuples) if r.under_load]
    return {"data": [trace] + _load_ring(rings), "layout": chart_layout(chart_axis("technique", kind="category"), chart_axis(y_title))}


def throughput_vs_peak(rows: pd.DataFrame, variants: pd.Series, colors: dict[str, str],
                       groups: list[tuple[str, pd.Index]] | None = None) -> dict:
    """Samples/s against peak allocated MiB, markers per technique (and variant), throughput at the
    step's quartiles as error bars, points under load ringed, the Pareto front as a grey step line.

    ``groups`` (name, row index) split the front where rows are different workloads (e.g. depths):
    one front per group, told apart by dash; default one front over all rows.
    """
    ok = ranked(rows)
    ok = ok[ok["samples_per_s"].notna() & ok["peak_allocated_bytes"].notna()]
    traces, rings = [], []
    for tech, variant, vi, first, tuples in _lines(ok, variants):
        style = _style(color_of(colors, tech), bool(tuples[0].peer), vi)
        ys = [float(r.samples_per_s) for r in tuples]
        spread = [_rate_spread(r, y) for r, y in zip(tuples, ys)]
        trace = {"type": "scatter", "mode": "markers", "name": _name(tech, bool(tuples[0].peer)),
                 "x": [mib(r.peak_allocated_bytes) for r in tuples], "y": ys, "hoverinfo": "text",
                 "hovertext": [_hover(r) for r in tuples], "marker": {**style["marker"], "size": 10}}
        if any(b is not None for b, _ in spread):
            trace["error_y"] = _error_bars([b for b, _ in spread], [a for _, a in spread], style["marker"]["color"])
        traces.append(_legend(trace, tech, first))
        rings += [(x, y, r) for x, y, r in zip(trace["x"], ys, tuples) if r.under_load]
    fronts = []
    for i, (name, index) in enumerate(groups or [("", ok.index)]):
        part = ok[ok.index.isin(index)]
        points = [(float(m), float(t)) for m, t in zip(part["peak_allocated_bytes"], part["samples_per_s"])]
        front = pareto_front(points)
        if len(front) >= 2:  # a one-point front is a line of no length: plotly draws nothing
            fronts.append({"type": "scatter", "mode": "lines", "name": "Pareto front" + (f" ({esc(name)})" if name else ""),
                           "x": [mib(points[j][0]) for j in front], "y": [points[j][1] for j in front],
                           "line": {"color": "rgba(0,0,0,0.4)", "width": 3, "shape": "hv",
                                    "dash": FRONT_DASHES[i % len(FRONT_DASHES)]}, "hoverinfo": "name"})
    traces = fronts + traces + _load_ring(rings)  # the fronts beneath the markers
    return {"data": traces, "layout": chart_layout(chart_axis("peak allocated (MiB)", [mib(m) for m in ok["peak_allocated_bytes"]]),
                                                   chart_axis("throughput (samples/s)", drawn_ys(traces)))}


# -- overview charts -------------------------------------------------------------------------------
def lowest_peaks(items: list[tuple[str, bool, bool, float]], x_title: str, colors: dict[str, str]) -> dict[str, Any]:
    """Horizontal bars, top-down: each technique's lowest memory (bytes -> MiB) at the baseline's
    configuration; ``items`` are ``(technique, is_baseline, peer, bytes)``; colours by technique,
    peers hatched."""
    items = list(reversed(items))
    names = [_name(t, peer) for t, _, peer, _ in items]
    trace = {"type": "bar", "orientation": "h", "name": esc(x_title), "y": names,
             "x": [mib(p) for *_, p in items], "hoverinfo": "x+y",
             "marker": {"color": [color_of(colors, t) for t, *_ in items], "pattern": _peer_pattern([p for _, _, p, _ in items])},
             "meta": {"techniques": [esc(t) for t, *_ in items]},
             "text": [f"{p / MiB:.1f} MiB" for *_, p in items], "textposition": "auto"}
    layout = chart_layout(chart_axis(x_title, kind="linear"), chart_axis("", kind="category"), showlegend=False,
                          height=max(160, 70 + 36 * len(items)))
    layout["margin"] = {"l": 20, "r": 20, "t": 36, "b": 50}
    layout["yaxis"]["automargin"] = True
    return {"data": [trace], "layout": layout}


def peak_by_category(items: list[tuple[str, bool, dict[str, int]]], categories: Sequence[str],
                     x_title: str = "memory at the step's peak (MiB)") -> dict[str, Any]:
    """Stacked horizontal bars, top-down: each technique's peak split by memory category
    (``items``: ``(technique, peer, {category: bytes})``); one trace (and legend entry) per category."""
    items = list(reversed(items))
    names = [_name(t, peer) for t, peer, _ in items]
    data = []
    for cat in categories:
        xs = [mib(cats.get(cat, 0)) for *_, cats in items]
        if not any(xs):
            continue
        data.append({"type": "bar", "orientation": "h", "name": esc(cat.replace("_", " ")), "y": names, "x": xs,
                     "marker": {"color": CATEGORY_COLORS.get(cat, _OTHER)}, "hoverinfo": "x+y+name"})
    # the legend (categories) above the bars on the left, clear of the toolbar on the right
    layout = chart_layout(chart_axis(x_title, kind="linear"), chart_axis("", kind="category"), barmode="stack",
                          height=max(200, 120 + 36 * len(items)),
                          legend={"orientation": "h", "y": 1.0, "x": 0, "xanchor": "left", "yanchor": "bottom",
                                  "traceorder": "normal"})
    layout["margin"] = {"l": 20, "r": 20, "t": 64, "b": 50}
    layout["yaxis"]["automargin"] = True
    return {"data": data, "layout": layout}


# -- history, timelines, reproductions -------------------------------------------------------------
#: asv units -> (scale, the unit shown)
UNITS = {"bytes": (1 / MiB, "MiB"), "seconds": (1e3, "ms")}
#: asv metric -> the quantity named on the history chart's y-axes
_HISTORY_METRICS = {"track_peak_allocated": "peak allocated", "track_peak_reserved": "peak reserved",
                    "time_step": "step"}


def history(frame: pd.DataFrame, colors: dict[str, str], order: Sequence[Any] = ()) -> dict[str, Any]:
    """One asv benchmark on one machine across commits: one panel per technique (stacked, sharing the
    commit axis), a line per combination of its other parameters, in the technique's colour.

    ``frame`` holds :func:`memlab.results.load_asv_results` rows of one benchmark and machine;
    ``order`` the measured commits in history order (:func:`memlab.site.history.commit_order`; the
    commits' dates when empty).  x is the commit (short hash, one category per measured commit, in
    history order, NOTE [ commit order ] in :mod:`memlab.site.history`), hover names its subject;
    bytes are shown in MiB (hover adds the exact bytes), seconds in ms.  A combination's marker
    symbol and dash are the same in every panel and its legend entry toggles it in all of them.
    """
    order = list(order) or H.commit_order(frame)
    unit = frame["unit"].iloc[0]
    scale, shown_unit = UNITS.get(unit, (1.0, unit or "value"))
    panels = H.technique_histories(frame, order)
    labels = H.line_labels(panels)
    style = {lab: i for i, lab in enumerate(labels)}
    n, gap = max(len(panels), 1), 0.06
    height = (1 - gap * (n - 1)) / n
    traces, layout, annotations = [], {}, []
    metric = str(frame["benchmark"].iloc[0]).rpartition(".")[2]
    y_title = esc(f"{_HISTORY_METRICS.get(metric, metric)} ({shown_unit})")
    categories = [value(c.short) for c in order]
    for k, panel in enumerate(panels):
        suffix = "" if k == 0 else str(k + 1)
        top = 1 - k * (height + gap)
        tech = panel.technique
        color = colors.get(tech, _OTHER) if tech else _OTHER
        panel_traces = [_history_line_trace(line, style[line.label], tech, color, suffix, scale, unit, shown_unit)
                        for line in panel.lines]
        traces.extend(panel_traces)
        ys = [v for t in panel_traces for v in t["y"] if v is not None]
        annotations.append(_history_panel_title(tech, color, colors, top))
        layout[f"xaxis{suffix}"] = _history_x_axis(k, n, suffix, categories)
        layout[f"yaxis{suffix}"] = _history_y_axis(ys, y_title, suffix, top, height)
    traces.extend(_history_legend_traces(labels, style))
    fig_layout = chart_layout(layout.pop("xaxis", {"title": {"text": "commit"}}), layout.pop("yaxis", {"title": {"text": shown_unit}}),
                              **layout)
    fig_layout.update(height=120 + 190 * n, margin={"l": 90, "r": 20, "t": 36, "b": 110},
                      legend={"orientation": "v", "title": {"text": "parameters"}}, annotations=annotations)
    return {"data": traces, "layout": fig_layout}


def _history_line_trace(line: Any, i: int, tech: str | None, color: str, suffix: str, scale: float, unit: str,
                        shown_unit: str) -> dict[str, Any]:
    """The trace of one parameter combination (``line``, the ``i``-th label: its dash and marker) in the
    panel of axes ``suffix``; y is the value times ``scale`` (bytes in MiB, seconds in ms), hover names
    the commit's subject and, for bytes, the exact bytes."""
    name = esc(line.label)
    xs = [value(c.short) for c, _ in line.points]
    ys = [_rounded(v * scale, 6) for _, v in line.points]
    hover = [f"<b>{esc(c.short)}</b> {esc(c.subject or '(subject unknown: not in this repository)')}"
             f"<br>{esc(tech or '-')}: {name}<br>{_rounded(v * scale, 4)} {esc(shown_unit)}"
             + (f" ({v:,.0f} bytes)" if unit == "bytes" else "") for c, v in line.points]
    return {"type": "scatter", "mode": "lines+markers", "name": name, "x": xs, "y": ys,
            "xaxis": f"x{suffix}", "yaxis": f"y{suffix}", "hoverinfo": "text", "hovertext": hover,
            "legendgroup": name, "showlegend": False, "legendrank": 1000 + i,
            **({"meta": {"technique": esc(tech)}} if tech else {}),
            "line": {"color": color, "dash": FRONT_DASHES[i % len(FRONT_DASHES)]},
            "marker": {"color": color, "symbol": SYMBOLS[i % len(SYMBOLS)]}}


def _history_panel_title(tech: str | None, color: str, colors: dict[str, str], top: float) -> dict[str, Any]:
    """The annotation above a panel whose top is at paper height ``top`` (0..1): its technique, in its
    colour, marked when it is the baseline."""
    return {"text": f"<b>{esc(tech or 'all')}</b>" + (" (baseline)" if tech and colors.get(tech) == BASELINE_COLOR else ""),
            "xref": "paper", "yref": "paper", "x": 0, "y": round(top, 6), "xanchor": "left",
            "yanchor": "bottom", "showarrow": False, "font": {"color": color}}


def _history_x_axis(k: int, n: int, suffix: str, categories: list[Any]) -> dict[str, Any]:
    """Panel ``k`` of ``n``'s commit axis: one category per commit, matched to the first panel's; only
    the bottom panel shows the ticks and the title."""
    x_axis = {"type": "category", "categoryorder": "array", "categoryarray": categories,
              "range": [-0.5, len(categories) - 0.5], "anchor": f"y{suffix}", "showticklabels": k == n - 1,
              "tickangle": -60, "automargin": True}
    if k:
        x_axis["matches"] = "x"
    if k == n - 1:
        x_axis["title"] = {"text": "commit, oldest first (history order; hover for its subject)"}
    return x_axis


def _history_y_axis(ys: list[float], title: str, suffix: str, top: float, height: float) -> dict[str, Any]:
    """A panel's value axis over paper heights ``[top - height, top]``, its range the panel's values
    ``ys`` (shown units) padded by 8% of their spread (5% of the value, or 1, when flat)."""
    y_axis = {"title": {"text": title}, "zeroline": False, "tickformat": ",",
              "domain": [round(max(top - height, 0.0), 6), round(top, 6)], "anchor": f"x{suffix}"}
    if ys:
        lo, hi = min(ys), max(ys)
        pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
        y_axis["range"] = [_rounded(lo - pad, 6), _rounded(hi + pad, 6)]
    return y_axis


def _history_legend_traces(labels: list[str], style: dict[str, int]) -> list[dict[str, Any]]:
    """Empty traces that make the legend: one per parameter combination, by dash and marker."""
    # the legend lists the parameter combinations by dash and marker, in neutral grey: a line's colour
    # is its panel's technique (named above the panel), the same combination has another in each panel
    out = []
    for label in labels:
        i = style[label]
        out.append({"type": "scatter", "mode": "lines+markers", "name": esc(label), "x": [None], "y": [None],
                    "xaxis": "x", "yaxis": "y", "legendgroup": esc(label), "legendrank": 1000 + i, "hoverinfo": "skip",
                    "line": {"color": _OTHER, "dash": FRONT_DASHES[i % len(FRONT_DASHES)]},
                    "marker": {"color": _OTHER, "symbol": SYMBOLS[i % len(SYMBOLS)]}})
    return out


def _rounded(v: float, digits: int) -> float | None:
    return round(v, digits) if math.isfinite(v) else None


def _event_hover(e: dict, i: int) -> str:
    sign = "+" if e["delta_bytes"] >= 0 else "-"
    stack = " › ".join(esc(s) for s in e["stack"]) or "?"
    return (f"#{i} <b>{esc(e['op'])}</b> ({esc(e['phase'])})<br>{stack}<br>"
            f"{sign}{mib(abs(e['delta_bytes']))} MiB → {mib(e['live_bytes'])} MiB live")


def timeline(tl: dict, color: str) -> dict[str, Any]:
    """Live MiB over one step, event by event (a step line), phases shaded, the peak annotated."""
    events = tl["events"]
    x = list(range(1, len(events) + 1))
    y = [mib(e["live_bytes"]) for e in events]
    shapes, start = [], 0
    for i in range(1, len(events) + 1):
        if i == len(events) or events[i]["phase"] != events[start]["phase"]:
            fill = _PHASE_COLORS.get(events[start]["phase"])
            if fill:
                shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": start + 0.5, "x1": i + 0.5,
                               "y0": 0, "y1": 1, "fillcolor": fill, "line": {"width": 0}, "layer": "below"})
            start = i
    annotations = []
    if events:
        k = max(range(len(events)), key=lambda i: (events[i]["live_bytes"], -i))
        annotations.append({"x": k + 1, "y": y[k], "text": f"peak {y[k]:.1f} MiB: {esc(events[k]['op'])}",
                            "showarrow": True, "arrowhead": 2, "ax": 0, "ay": -30})
    trace = {"type": "scatter", "mode": "lines+markers", "name": esc(tl["technique"]), "x": x, "y": y,
             "meta": {"technique": esc(tl["technique"])},
             "line": {"shape": "hv", "color": color}, "marker": {"size": 4, "color": color}, "hoverinfo": "text",
             "hovertext": [_event_hover(e, i + 1) for i, e in enumerate(events)]}
    return {"data": [trace], "layout": chart_layout(chart_axis("allocation event", kind="linear"),
                                                    chart_axis("live tensor memory above baseline (MiB)", kind="linear"),
                                                    shapes=shapes, annotations=annotations, showlegend=False)}


def timelines_overlay(timelines: list[dict], labels: list[str], colors: dict[str, str]) -> dict[str, Any]:
    """Several timelines on one chart; x is the fraction of the step's events (0..1); the legend
    (one entry per technique) sits below the plot so the plot keeps its width."""
    traces, seen = [], {}
    for tl, label in zip(timelines, labels):
        tech = tl["technique"]
        n = max(len(tl["events"]), 1)
        vi = seen.get(tech, -1) + 1
        seen[tech] = vi
        trace = {"type": "scatter", "mode": "lines", "name": esc(tech), "x": [round((i + 1) / n, 6) for i in range(len(tl["events"]))],
                 "y": [mib(e["live_bytes"]) for e in tl["events"]],
                 "line": {"shape": "hv", "color": color_of(colors, tech),
                          "dash": ("solid", "dash", "dot", "dashdot")[vi % 4]}, "hoverinfo": "text",
                 "hovertext": [f"{esc(label)}<br>" + _event_hover(e, i + 1) for i, e in enumerate(tl["events"])]}
        traces.append(_legend(trace, tech, vi == 0))
    return {"data": traces, "layout": chart_layout(chart_axis("fraction of the step's allocation events", kind="linear"),
                                                   chart_axis("live tensor memory above baseline (MiB)", kind="linear"),
                                                   legend={"orientation": "h", "y": -0.2, "x": 0, "xanchor": "left",
                                                           "yanchor": "top"},
                                                   margin={"l": 70, "r": 20, "t": 36, "b": 90}, height=460)}


_BASELINE_WORDS = frozenset({"plain", "baseline", "reference"})
#: Series that are no technique, told apart from each other: near black, then greys (none is the baseline's).
_NEUTRALS = (NEUTRAL_COLOR, "#5a5a5a", "#a0a0a0", "#c8c8c8")
#: Bar patterns that tell apart the series of one chart whose bars take their technique's colour.
SERIES_PATTERNS = ("", "/", "x", ".", "\\", "+", "-", "|")


def hatch(shape: str) -> dict[str, Any]:
    """A bar's ``marker.pattern``: ``shape`` in white over the bar's own colour (which stays visible:
    ``fillmode`` overlay; a pattern alone left a single-colour bar transparent)."""
    return {"shape": shape, "fgcolor": "rgba(255,255,255,0.85)", "solidity": 0.4, "fillmode": "overlay"}


def pattern_legend(name: str, shape: str) -> dict[str, Any]:
    """A legend entry alone (no bar drawn) for a series of bars coloured per technique: the legend
    shows its hatching in neutral grey, not the first bar's colour; the series' bars take
    ``legendgroup`` and ``offsetgroup`` = ``name`` and ``showlegend`` False, so a click on the entry
    toggles them and the entry takes no place of its own beside them."""
    return {"type": "bar", "name": name, "x": [None], "y": [None], "legendgroup": name, "offsetgroup": name,
            "hoverinfo": "skip", "marker": {"color": "#d0d0d0", "line": {"color": "#333333", "width": 1},
                                            "pattern": {"shape": shape, "fgcolor": "#333333", "solidity": 0.35, "fillmode": "overlay"}}}


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def series_technique(name: Any, techniques: Sequence[str], colors: dict[str, str], loose: bool = True) -> str | None:
    """The technique a reproduction figure's series (or x category) draws, or None when it is no technique.

    In this order: a technique's exact name (any technique with a colour); one of the reproduction's
    ``techniques`` named in other case (``ResNet`` -> ``resnet``) or followed by what is drawn
    (``residual total peak`` -> ``residual``; the longest name first); the one technique sharing a word
    that not all of them share (``per-block activation`` -> ``resnet_checkpoint_block``; a word may end
    in a size: ``memlab ResNet32`` -> ``resnet``); a word naming
    the baseline (``plain activation`` -> the reproduction's technique in the baseline's grey).
    Anything else (``analytic floor``, ``train``) is no technique and is drawn neutral.  Not ``loose``
    (an x category): a technique's name only, in any case.
    """
    if not isinstance(name, str):
        return None
    if name in colors:
        return name
    techs = sorted(set(techniques), key=lambda t: (-len(t), t))
    low = name.lower().strip()
    for t in techs:
        if low == t.lower() or (loose and low.startswith(t.lower() + " ")):
            return t
    if not loose:
        return None
    words = _tokens(name)
    words |= {w.rstrip("0123456789") for w in words if w[:1].isalpha()}  # ResNet32 draws resnet
    common = set.intersection(*(_tokens(t) for t in techs)) if techs else set()
    hits = [t for t in techs if (_tokens(t) - common) & words]
    if len(hits) == 1:
        return hits[0]
    if words & _BASELINE_WORDS:
        base = [t for t in techs if colors.get(t) == BASELINE_COLOR]
        if len(base) == 1:
            return base[0]
    return None


def seed_figure(spec: dict, colors: dict[str, str], techniques: Sequence[str] = ()) -> dict[str, Any]:
    """A reproduction's ``figure`` spec (``type`` bar/line, ``x``, ``series``, labels, log flags).

    Colours follow NOTE [ one visual language ]: a series naming one of the reproduction's
    ``techniques`` (:func:`series_technique`) takes that technique's colour (a technique's second
    series is dashed, or hatched as bars); a bar chart whose x categories are all techniques colours
    each bar by its technique and tells the series apart by hatching; a series that is no technique
    (an analytic floor) is drawn near black and dotted.  No palette colour is left to chance.
    """
    kind = spec["type"]
    bar = kind == "bar"
    traces = []
    x = [value(v) for v in spec["x"]]
    x_techs = [series_technique(v, techniques, colors, loose=False) for v in spec["x"]]
    per_bar = bar and bool(x_techs) and all(x_techs)
    used: dict[str | None, int] = {}
    for i, (name, ys) in enumerate(sorted(spec["series"].items())):
        trace: dict[str, Any] = {"type": "bar" if bar else "scatter", "name": esc(name), "x": x,
                                 "y": [_num(v) for v in ys]}
        if per_bar:
            trace["marker"] = {"color": [color_of(colors, t) for t in x_techs],
                               "pattern": hatch(SERIES_PATTERNS[i % len(SERIES_PATTERNS)]),
                               "line": {"color": "#333333", "width": 1}}
            trace["meta"] = {"techniques": [esc(t) for t in x_techs]}
            trace.update(legendgroup=esc(name), offsetgroup=esc(name), showlegend=False)
            traces += [trace] + ([pattern_legend(esc(name), SERIES_PATTERNS[i % len(SERIES_PATTERNS)])]
                                 if len(spec["series"]) > 1 else [])  # one series: the axes say it all
            continue
        tech = series_technique(name, techniques, colors)
        k = used[tech] = used.get(tech, -1) + 1
        color = color_of(colors, tech) if tech else _NEUTRALS[k % len(_NEUTRALS)]
        if tech:
            trace["meta"] = {"technique": esc(tech)}
        if bar:
            shape = SERIES_PATTERNS[k % len(SERIES_PATTERNS)] if tech else (".", "x", "-", "|")[k % 4]
            trace["marker"] = {"color": color, "pattern": hatch(shape)}
        else:
            trace["mode"] = "lines+markers"
            dash = FRONT_DASHES[k % len(FRONT_DASHES)] if tech else ("dot", "dashdot", "longdash")[k % 3]
            trace["line"] = {"color": color, "dash": dash, "width": 2 if tech else 1.5}
            trace["marker"] = {"color": color, "symbol": SYMBOLS[k % len(SYMBOLS)] if tech else "line-ew-open",
                               "size": 8 if tech else 12, "line": {"color": color, "width": 2}}
        traces.append(trace)
    strings = any(isinstance(v, str) for v in spec["x"])
    xaxis = chart_axis(spec.get("x_label", ""), spec["x"], kind="log" if spec.get("log_x") and not strings else
                       ("category" if strings else "linear"))
    if strings:
        xaxis["automargin"] = True  # long category labels push the margin, not off the figure
    nums = [_num(v) for v in spec["x"]]
    if xaxis.get("type") == "log" and 2 <= len(nums) <= 8 and all(n is not None and n > 0 for n in nums):
        # a handful of measured sizes: label those (depth 4 and 16), not the 1-2-5 ticks between them
        xaxis.update(tickmode="array", tickvals=sorted(set(nums)), ticktext=[_tick(n) for n in sorted(set(nums))])
    # bars are read by their length, so a bar chart's y-axis is linear whatever the spec asks (on a log
    # axis the dense layer's 15.6 MiB was a sliver beside the TT layer's); lines keep a log axis
    yaxis = chart_axis(spec.get("y_label", ""), drawn_ys(traces), kind="log" if spec.get("log_y") and not bar else "linear")
    extra: dict[str, Any] = {"barmode": "group"} if bar else {}
    if per_bar and len(spec["series"]) > 1:  # the legend names the series by hatching; colours are the bars' techniques
        extra["legend"] = {"title": {"text": "hatching:"}}
    return {"data": traces, "layout": chart_layout(xaxis, yaxis, **extra)}
