"""The history page's chart: one asv benchmark on one machine across the commits that machine measured.

A plain plotly dict, like :mod:`memlab.site.figures` (every string through :func:`figures.esc` or
:func:`figures.value`).  One panel per technique, stacked on one shared x-axis (the machine's
measured commits in history order, NOTE [ commit order ] in :mod:`memlab.site.history`), a line per
combination of the other parameters and benchmark version, in the technique's colour:

* a failed commit is an ``x`` on its series (the line breaks there), drawn at the series' last good
  value (the next one when it never had one), with "failed" and the last good commit on hover;
* commits of the history the machine did not measure are a dotted vertical line between two
  categories, labelled ``+N`` on top (hover: which commits);
* a benchmark version bump is a dashed vertical line labelled ``version V``; the new version's
  points are a new trace, never joined to the old ones;
* more than :data:`RANGE_SLIDER_FROM` commits get plotly's range slider under the axis;
* the axis first shows the commits from the first to the last that hold this benchmark (a time
  history of the last 50 commits is not squeezed into the right fifth of a 244-commit memory
  history); the range slider and the categories still span all of the machine's commits.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from . import figures as F
from . import history as H

__all__ = ["history_figure", "FAILED_COLOR", "RANGE_SLIDER_FROM", "METRIC_NAMES"]

#: the failure marks: dark red, no technique's colour (the browser test checks that)
FAILED_COLOR = "#8b0000"
#: a history longer than this many commits gets a range slider
RANGE_SLIDER_FROM = 40
#: asv metric -> the quantity named on the y-axes
METRIC_NAMES = {"track_peak_allocated": "peak allocated", "track_peak_reserved": "peak reserved",
                "track_predicted_cuda_reserved": "predicted CUDA reserved", "time_step": "step",
                "track_relative_step_time": "relative step time", "track_activation_exponent": "exponent",
                "track_time_limit_gap": "time over FLOP limit"}
_NEUTRAL = "#444444"
_GAP_COLOR = "#9e9e9e"
_VERSION_COLOR = "#555555"
_SYMBOLS = ("circle", "square", "triangle-up", "diamond", "star", "triangle-down", "hexagon", "pentagon")
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def _round(v: float, digits: int = 6) -> float | None:
    return round(v, digits) if math.isfinite(v) else None


def _subject(c: H.Commit) -> str:
    return F.esc(c.subject or "(subject unknown: not in this repository)")


def _value_text(v: float, scale: float, unit: str, raw_unit: str) -> str:
    return f"{_round(v * scale, 4)} {F.esc(unit)}" + (f" ({v:,.0f} bytes)" if raw_unit == "bytes" else "")


def _line_trace(line: H.Line, tech: str, style: int, axis: str, color: str, units: tuple) -> dict[str, Any]:
    """One series: its values in commit order, None (a break) at each failed commit."""
    scale, unit, raw = units
    version = f"<br>benchmark version {F.esc(line.version)}" if line.version else ""
    points = sorted([(c, v) for c, v in line.points] + [(c, None) for c, _ in line.failed], key=lambda p: p[0].position)
    hover = [f"<b>{F.esc(c.short)}</b> {_subject(c)}<br>{F.esc(tech or '-')}: {F.esc(line.label)}<br>"
             + ("<b>failed</b>" if v is None else _value_text(v, scale, unit, raw)) + version for c, v in points]
    return {"type": "scatter", "mode": "lines+markers", "name": F.esc(line.label),
            "x": [F.value(c.short) for c, _ in points], "y": [None if v is None else _round(v * scale) for _, v in points],
            "xaxis": "x", "yaxis": axis, "hoverinfo": "text", "hovertext": hover, "legendgroup": F.esc(line.label),
            "showlegend": False, "legendrank": 1000 + style, **({"meta": {"technique": F.esc(tech)}} if tech else {}),
            "line": {"color": color, "dash": _DASHES[style % len(_DASHES)]},
            "marker": {"color": color, "symbol": _SYMBOLS[style % len(_SYMBOLS)]}}


def _anchor_value(line: H.Line, commit: H.Commit) -> float | None:
    """Where a failure is drawn: the series' last value before ``commit``, else its first after."""
    before = [v for c, v in line.points if c.position < commit.position]
    after = [v for c, v in line.points if c.position > commit.position]
    return before[-1] if before else (after[0] if after else None)


def _failure_hover(line: H.Line, tech: str, commit: H.Commit, error: str, units: tuple) -> str:
    scale, unit, raw = units
    good = [(c, v) for c, v in line.points if c.position < commit.position]
    last = (f"last good: <b>{F.esc(good[-1][0].short)}</b>, {_value_text(good[-1][1], scale, unit, raw)}" if good
            else "no earlier value on this machine")
    why = F.esc(error) if error else "asv keeps no error text: <i>asv run -e</i> on this commit shows the traceback"
    return (f"<b>{F.esc(commit.short)}</b> {_subject(commit)}<br>{F.esc(tech or '-')}: {F.esc(line.label)}<br>"
            f"<b>failed</b> ({why})<br>{last}")


def _failure_trace(panel: H.TechniqueHistory, axis: str, units: tuple, fallback: float) -> dict[str, Any] | None:
    """The failures of one panel as ``x`` marks (one trace, legend group "failed")."""
    xs, ys, hover = [], [], []
    for line in panel.lines:
        for commit, error in line.failed:
            anchor = _anchor_value(line, commit)
            xs.append(F.value(commit.short))
            ys.append(_round(anchor * units[0]) if anchor is not None else fallback)
            hover.append(_failure_hover(line, panel.technique, commit, error, units))
    if not xs:
        return None
    return {"type": "scatter", "mode": "markers", "name": "failed", "x": xs, "y": ys, "xaxis": "x", "yaxis": axis,
            "hoverinfo": "text", "hovertext": hover, "legendgroup": "failed", "showlegend": False,
            "marker": {"color": FAILED_COLOR, "symbol": "x", "size": 11, "line": {"width": 1, "color": FAILED_COLOR}}}


def _y_axis(traces: list[dict], title: str, domain: tuple[float, float]) -> dict[str, Any]:
    ys = [v for t in traces for v in t["y"] if v is not None]
    axis = {"title": {"text": "<br>".join(F.esc(part) for part in title.split("<br>"))}, "zeroline": False, "tickformat": ",", "anchor": "x",
            "domain": [round(max(domain[0], 0.0), 6), round(domain[1], 6)]}
    if ys:
        lo, hi = min(ys), max(ys)
        pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
        axis["range"] = [_round(lo - pad), _round(hi + pad)]
    return axis


def _panel_title(tech: str, color: str, top: float, colors: dict[str, str]) -> dict[str, Any]:
    baseline = " (baseline)" if tech and colors.get(tech) == F.BASELINE_COLOR else ""
    return {"text": f"<b>{F.esc(tech or 'all')}</b>{baseline}", "xref": "paper", "yref": "paper", "x": 0,
            "y": round(top, 6), "xanchor": "left", "yanchor": "bottom", "showarrow": False, "font": {"color": color}}


def _marks(order: Sequence[H.Commit], gaps: Sequence[tuple[int, int]],
           versions: Sequence[tuple[H.Commit, str]]) -> tuple[list[dict], list[dict]]:
    """Shapes and labels of the commits left out (dotted, ``+N``) and of version bumps (dashed)."""
    shapes, labels = [], []
    for k, n in gaps:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": k - 0.5, "x1": k - 0.5, "y0": 0, "y1": 1,
                       "line": {"color": _GAP_COLOR, "width": 1, "dash": "dot"}, "layer": "below"})
        labels.append({"text": f"+{n}", "xref": "x", "yref": "paper", "x": k - 0.5, "y": 1, "yanchor": "bottom",
                       "yshift": 20, "showarrow": False, "font": {"size": 10, "color": _GAP_COLOR},
                       "hovertext": F.esc(f"{n} commit(s) of the history not measured on this machine between "
                                          f"{order[k - 1].short} and {order[k].short}")})
    for commit, version in versions:
        k = commit.position
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": k - 0.5, "x1": k - 0.5, "y0": 0, "y1": 1,
                       "line": {"color": _VERSION_COLOR, "width": 1.5, "dash": "dash"}})
        labels.append({"text": F.esc(f"version {version}"), "xref": "x", "yref": "paper", "x": k - 0.5, "y": 1,
                       "xanchor": "left", "yanchor": "bottom", "yshift": 36, "showarrow": False,
                       "font": {"size": 10, "color": _VERSION_COLOR},
                       "hovertext": F.esc(f"benchmark version {version} from {commit.short}: a new series")})
    return shapes, labels


def _x_axis(order: Sequence[H.Commit], bottom: str, span: tuple[int, int] | None = None) -> dict[str, Any]:
    """The commit axis: every commit of ``order`` a category; shown at first from ``span`` (the first
    and last position holding this benchmark; default all), the range slider spanning them all."""
    lo, hi = span if span is not None else (0, len(order) - 1)
    axis = {"type": "category", "categoryorder": "array", "categoryarray": [F.value(c.short) for c in order],
            "range": [lo - 0.5, hi + 0.5], "anchor": bottom, "tickangle": -60, "automargin": True,
            "title": {"text": "commit measured on this machine, oldest first (history order; hover for its subject)"}}
    if len(order) > RANGE_SLIDER_FROM:
        axis["rangeslider"] = {"visible": True, "thickness": 0.06, "range": [-0.5, len(order) - 0.5]}
    return axis


def _legend_entries(labels: Sequence[str], style: dict[str, int], failed: bool) -> list[dict[str, Any]]:
    """The legend: one neutral entry per combination (a line's colour is its panel's), "failed" if any."""
    out = [{"type": "scatter", "mode": "lines+markers", "name": F.esc(lab), "x": [None], "y": [None], "xaxis": "x",
            "yaxis": "y", "legendgroup": F.esc(lab), "legendrank": 1000 + style[lab], "hoverinfo": "skip",
            "line": {"color": _NEUTRAL, "dash": _DASHES[style[lab] % len(_DASHES)]},
            "marker": {"color": _NEUTRAL, "symbol": _SYMBOLS[style[lab] % len(_SYMBOLS)]}} for lab in labels]
    if failed:
        out.append({"type": "scatter", "mode": "markers", "name": "failed", "x": [None], "y": [None], "xaxis": "x",
                    "yaxis": "y", "legendgroup": "failed", "legendrank": 2000, "hoverinfo": "skip",
                    "marker": {"color": FAILED_COLOR, "symbol": "x", "size": 11}})
    return out


def history_figure(frame: pd.DataFrame, order: Sequence[H.Commit], colors: dict[str, str], *,
                   failures: pd.DataFrame | None = None, gaps: Sequence[tuple[int, int]] = (),
                   versions: Sequence[tuple[H.Commit, str]] = ()) -> dict[str, Any]:
    """One asv benchmark on one machine across ``order`` (that machine's measured commits).

    Args:
        frame: :func:`memlab.results.load_asv_results` rows of one benchmark and machine, with the
            ``version`` column of :func:`memlab.site.history.with_versions`.
        order: :func:`memlab.site.history.machine_order` of the machine.
        colors: technique colours (:func:`memlab.site.figures.technique_colors`).
        failures: the benchmark's failed combinations on the machine (:func:`history.load_outcomes`).
        gaps: :func:`memlab.site.history.history_gaps` of ``order``.
        versions: :func:`memlab.site.history.version_starts` of the benchmark on the machine.

    Bytes are drawn in MiB (hover adds the exact bytes), seconds in ms, other units as they are.
    """
    benchmark = str((frame if len(frame) else failures)["benchmark"].iloc[0])
    raw = str(frame["unit"].iloc[0]) if len(frame) and isinstance(frame["unit"].iloc[0], str) else ""
    scale, unit = F.UNITS.get(raw, (1.0, raw or "value"))
    panels = H.technique_histories(frame, order, failures)
    labels = H.line_labels(panels)
    style = {lab: i for i, lab in enumerate(labels)}
    n, gap = max(len(panels), 1), 0.06
    height = (1 - gap * (n - 1)) / n
    y_name = METRIC_NAMES.get(H.split_benchmark(benchmark)[1], H.split_benchmark(benchmark)[1])
    traces, layout, titles, failed_any = [], {}, [], False
    for k, panel in enumerate(panels):
        axis, top = "y" if k == 0 else f"y{k + 1}", 1 - k * (height + gap)
        color = colors.get(panel.technique, _NEUTRAL) if panel.technique else _NEUTRAL
        lines = [_line_trace(ln, panel.technique, style[ln.label], axis, color, (scale, unit, raw))
                 for ln in panel.lines if ln.points]  # a series that only failed is its x marks alone
        # the unit on a second line: a one-line "relative step time (ratio)" is taller than its panel
        layout["yaxis" if k == 0 else f"yaxis{k + 1}"] = _y_axis(lines, f"{y_name}<br>({unit})", (top - height, top))
        mid = sum(layout["yaxis" if k == 0 else f"yaxis{k + 1}"].get("range", [0, 0])) / 2
        fails = _failure_trace(panel, axis, (scale, unit, raw), _round(mid))
        traces += lines + ([fails] if fails else [])
        failed_any = failed_any or fails is not None
        titles.append(_panel_title(panel.technique, color, top, colors))
    shapes, marks = _marks(order, gaps, versions)
    traces += _legend_entries(labels, style, failed_any)
    held = [c.position for p in panels for ln in p.lines for c, _ in list(ln.points) + list(ln.failed)]
    slider = len(order) > RANGE_SLIDER_FROM
    # labels of gaps (20 px) and versions (36 px) above the top panel's title, below plotly's toolbar (top 96 px)
    layout.update(xaxis=_x_axis(order, f"y{n}" if n > 1 else "y", (min(held), max(held)) if held else None), hovermode="closest", annotations=titles + marks,
                  shapes=shapes, height=170 + 190 * n + (70 if slider else 0),
                  margin={"l": 90, "r": 20, "t": 96, "b": 110}, legend={"orientation": "v", "title": {"text": "parameters"}})
    return {"data": traces, "layout": layout}
