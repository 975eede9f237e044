"""Predicted CUDA memory on the site: a chart per family section, allocator settings compared on the
seed pages, and predicted vs measured on a real GPU (``make gpu-check``) where such a table exists.

Every figure here is a *prediction* of :mod:`memlab.cuda_replay.model` replayed on a step's exact CPU
allocation trace (NOTE [ predicted CUDA memory ] in :mod:`memlab.cuda_replay.prediction`), said
so on every chart, column and table, except the GPU-check table's measured columns.  Inputs:

* ``predicted_cuda_*`` columns of the measurement rows (:mod:`memlab.results`);
* ``data/cuda-variants/<seed>.json`` (``make cuda-variants``, :mod:`memlab.cuda.variants`): each seed
  configuration predicted under several ``PYTORCH_CUDA_ALLOC_CONF`` settings, and for the chunked-slicing
  seed its own answer (its reproduction module's ``cuda_variants`` hook);
* ``data/gpu-check/*.json`` (``make gpu-check``, :mod:`memlab.cuda.gpu_check`): the same configurations
  measured on a GPU beside their prediction.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from .. import results as R
from . import figures as F
from . import ranking as A
from .page import Page
from .seed_meta import seed_metadata
from .tables import column, sort_value
from .text import fmt_mib

__all__ = ["predicted_chart", "variant_files", "gpu_check_files", "load_variants", "load_gpu_checks",
           "add_cuda_to_seed_pages", "gpu_check_section", "relative_error", "VARIANT_FIGURES", "GPU_CHECK_FIGURES"]

#: bytes a variant row carries (``memlab.cuda.variants``), all predicted
VARIANT_FIGURES = ("allocated_peak_total_bytes", "reserved_peak_bytes", "fragmentation_at_peak_bytes")
#: bytes a GPU-check row carries: measured on the GPU and predicted from the CPU trace
GPU_CHECK_FIGURES = ("measured_allocated_bytes", "predicted_allocated_bytes", "measured_reserved_bytes",
                     "predicted_reserved_bytes")


def _bytes(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def variant_files(data_dir: Path) -> list[Path]:
    return R.list_input_files(Path(data_dir) / "cuda-variants", ".json")


def gpu_check_files(data_dir: Path) -> list[Path]:
    return R.list_input_files(Path(data_dir) / "gpu-check", ".json")


# -- family sections ---------------------------------------------------------------------------------
def predicted_chart(page: Page, rows: pd.DataFrame, variants: pd.Series, swept: str | None, colors: dict[str, str],
                    heading: str) -> dict | None:
    """Predicted GPU reserved (solid) beside the measured CPU total peak (dotted) against the swept
    parameter, or per configuration as bars; None when no ranked row carries a prediction."""
    ok = A.ranked(rows)
    if not len(ok) or not ok["predicted_cuda_reserved_bytes"].notna().any():
        return None
    if swept:
        fig = F.memory_vs_param(rows, variants, swept, "predicted_cuda_reserved_bytes", "predicted GPU reserved (MiB)",
                                colors, floor_column="total_peak_bytes", floor_name="measured CPU total peak")
        caption = ("Predicted, not measured: PyTorch's CUDA caching allocator (memlab.cuda_replay.model, default "
                   "PYTORCH_CUDA_ALLOC_CONF) replayed on each row's exact CPU allocation trace gives the step's "
                   "max_memory_reserved() (solid); dotted: the measured CPU total peak of the same step (allocated "
                   "bytes, baseline included). The gap is the allocator's rounding, segments and fragmentation; the "
                   "CUDA context and cuBLAS workspaces are not in either.")
        return page.chart(fig, f"Predicted GPU reserved vs {swept}", caption, anchor=f"{heading} predicted gpu")
    ok = ok[ok["predicted_cuda_reserved_bytes"].notna()]
    names = [F.esc(t) + (f" ({F.esc(v)})" if v else "") for t, v in zip(ok["technique"], variants[ok.index])]
    data = [{"type": "bar", "name": "predicted GPU reserved", "x": names,
             "y": [F.mib(v) for v in ok["predicted_cuda_reserved_bytes"]],
             "marker": {"color": [F.color_of(colors, t) for t in ok["technique"]]},
             "meta": {"techniques": [F.esc(t) for t in ok["technique"]]}, "hoverinfo": "x+y+name", "showlegend": False},
            {"type": "bar", "name": "measured CPU total peak", "x": names,
             "y": [F.mib(v if _bytes(v) else None) for v in ok["total_peak_bytes"]],
             "marker": {"color": "rgba(120,120,120,0.45)"}, "hoverinfo": "x+y+name", "showlegend": False}]
    # no legend: a legend entry for bars coloured per technique would show the first bar's colour
    layout = F.chart_layout(F.chart_axis("technique", kind="category"), F.chart_axis("memory (MiB)"), barmode="group")
    return page.chart({"data": data, "layout": layout}, "Predicted GPU reserved per configuration",
                      "Coloured: predicted max_memory_reserved() on a GPU (not measured; the caching-allocator model "
                      "replayed on the CPU trace); grey: the measured CPU total peak.", anchor=f"{heading} predicted gpu")


# -- seed pages: allocator settings compared -------------------------------------------------------------
def _conf_name(conf: str) -> str:
    return conf or "default"


def _variant_problems(data: dict) -> list[str]:
    problems = []
    if not isinstance(data.get("seed"), str) or not isinstance(data.get("confs"), list) or \
            not all(isinstance(c, str) for c in data["confs"]) or not isinstance(data.get("rows"), list):
        return ["needs seed (a string), confs (strings) and rows (a list)"]
    for i, r in enumerate(data["rows"]):
        if not isinstance(r, dict) or not isinstance(r.get("technique"), str) or not isinstance(r.get("params"), dict) \
                or r.get("conf") not in data["confs"]:
            problems.append(f"row {i}: needs technique, params and one of the confs")
        elif r.get("error") is None and not all(_bytes(r.get(k)) for k in VARIANT_FIGURES):
            problems.append(f"row {i}: {', '.join(VARIANT_FIGURES)} must be numbers >= 0")
    sb = data.get("slice_backward")
    if sb is not None and not (isinstance(sb, dict) and isinstance(sb.get("answer"), str)
                               and isinstance(sb.get("rows"), list) and all(
            isinstance(r, dict) and isinstance(r.get("conf"), str) and all(
                _bytes(r.get(k)) for k in ("chunks", "predicted_allocated_total_bytes", "predicted_reserved_bytes",
                                           "fragmentation_bytes")) for r in sb["rows"])):
        problems.append("slice_backward: needs answer (a string) and rows of chunks and predicted bytes")
    return problems


def load_variants(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Valid ``cuda-variants`` files by seed (ResultsWarning for the others)."""
    out = {}
    for path, data in R.load_json_objects(paths):
        problems = _variant_problems(data)
        if problems:
            warnings.warn(f"{R.shown_path(path)}: invalid CUDA variants ({'; '.join(problems[:3])}); skipped",
                          R.ResultsWarning, stacklevel=2)
            continue
        out[data["seed"]] = {**data, "source": path.name}
    return out


def _variants_block(page: Page, v: dict[str, Any], colors: dict[str, str]) -> dict[str, Any]:
    """A seed's ``data/cuda-variants`` file ``v`` as a block: a table and a bar chart of each
    configuration's predicted reserved bytes under each allocator setting, and the seed's own answer."""
    confs = list(v["confs"])
    groups = _variant_groups(v["rows"])
    # what every configuration shares is said once; the table and the chart's labels show what varies
    params = [g["params"] for g in groups.values()]
    common = set.intersection(*(set(p) for p in params)) if params else set()
    fixed = {k: params[0][k] for k in sorted(common) if all(p[k] == params[0][k] for p in params)}
    modes = len({g["mode"] for g in groups.values()}) > 1
    table = _variants_table(page, groups, confs, fixed, modes)
    chart = _variants_chart(page, groups, confs, fixed, modes, colors)
    block = {"id": page.anchor("predicted on gpu"), "confs": [_conf_name(c) for c in confs], "table": table,
             "fixed": A.param_text(fixed),
             "chart": chart, "source": v["source"], "answer": None}
    sb = v.get("slice_backward")
    if sb:
        block["answer"] = _slice_answer(page, sb, colors, _answer_technique(v["seed"]))
    return block


def _variant_groups(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Variant rows grouped by configuration (technique, parameters, mode), in first-seen order:
    ``{key: {"technique", "params", "mode", "by": {allocator setting: row}}}``."""
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = r["technique"] + " " + A.param_text(r["params"]) + (f" · {r['mode']}" if r.get("mode") else "")
        groups.setdefault(key, {"technique": r["technique"], "params": r["params"], "mode": r.get("mode"), "by": {}})
        groups[key]["by"][r["conf"]] = r
    return groups


def _variants_table(page: Page, groups: dict[str, dict[str, Any]], confs: list[str], fixed: dict[str, Any],
                    modes: bool) -> dict[str, Any]:
    """The table of the variants: one row per configuration, its predicted allocated peak and a
    reserved column per allocator setting (MiB; ``error`` where the replay failed)."""
    cols = [column("technique", "technique", kind="tech"), column("params", "parameters")]
    cols += [column("mode", "mode")] if modes else []
    cols += [column("allocated", "GPU allocated (predicted)", num=True,
                   title="predicted max_memory_allocated(), baseline included (the same for every setting)")]
    for i, c in enumerate(confs):
        cols.append(column(f"r{i}", f"reserved: {_conf_name(c)}", num=True,
                           title=f"predicted max_memory_reserved() with PYTORCH_CUDA_ALLOC_CONF={c!r}"))
    cells, records = [], []
    for key, g in groups.items():
        first = next(iter(g["by"].values()))
        cell = {"technique": g["technique"], "peer": False, "is_baseline": False, "note": None,
                "params": A.param_text(g["params"], fixed) or "-", "mode": g["mode"] or "-",
                "allocated": fmt_mib(first.get("allocated_peak_total_bytes")),
                "allocated__sort": sort_value(first.get("allocated_peak_total_bytes"))}
        for i, c in enumerate(confs):
            r = g["by"].get(c) or {}
            cell[f"r{i}"] = fmt_mib(r.get("reserved_peak_bytes")) if not r.get("error") else "error"
            cell[f"r{i}__sort"] = sort_value(r.get("reserved_peak_bytes"))
        cells.append(cell)
        records.append({"technique": g["technique"], "params": g["params"], "mode": g["mode"],
                        "by_conf": {_conf_name(c): {k: (g["by"].get(c) or {}).get(k) for k in (*VARIANT_FIGURES, "error")}
                                    for c in confs}})
    return page.table("predicted gpu memory by allocator setting", cols, cells, records)


def _variants_chart(page: Page, groups: dict[str, dict[str, Any]], confs: list[str], fixed: dict[str, Any],
                    modes: bool, colors: dict[str, str]) -> dict[str, Any]:
    """The chart of the variants: per configuration, a bar of predicted reserved MiB per allocator
    setting (its technique's colour, the setting's hatching) and a tick at the predicted allocated peak."""
    names = [F.esc(" ".join(p for p in (g["technique"], A.param_text(g["params"], fixed),
                                        (g["mode"] or "") if modes else "") if p)) for g in groups.values()]
    techs = [g["technique"] for g in groups.values()]
    data = []
    for i, c in enumerate(confs):  # each bar in its technique's colour; the allocator setting by hatching
        data.append({"type": "bar", "name": F.esc(f"reserved, {_conf_name(c)}"), "x": names,
                     "y": [F.mib((g["by"].get(c) or {}).get("reserved_peak_bytes")) for g in groups.values()],
                     "marker": {"color": [F.color_of(colors, t) for t in techs],
                                "pattern": F.hatch(F.SERIES_PATTERNS[i % len(F.SERIES_PATTERNS)]),
                                "line": {"color": "#333333", "width": 1}},
                     "meta": {"techniques": [F.esc(t) for t in techs]}, "hoverinfo": "x+y+name",
                     "legendgroup": F.esc(f"reserved, {_conf_name(c)}"),
                     "offsetgroup": F.esc(f"reserved, {_conf_name(c)}"), "showlegend": False})
        data.append(F.pattern_legend(F.esc(f"reserved, {_conf_name(c)}"), F.SERIES_PATTERNS[i % len(F.SERIES_PATTERNS)]))
    data.append({"type": "scatter", "mode": "markers", "name": "allocated (any setting)", "x": names,
                 "y": [F.mib(next(iter(g["by"].values())).get("allocated_peak_total_bytes")) for g in groups.values()],
                 "marker": {"color": "#000000", "symbol": "line-ew-open", "size": 18, "line": {"width": 2}},
                 "hoverinfo": "x+y+name"})
    layout = F.chart_layout(F.chart_axis("configuration", kind="category"), F.chart_axis("predicted GPU memory (MiB)"), barmode="group",
                            legend={"orientation": "h", "y": 1.0, "x": 0, "xanchor": "left", "yanchor": "bottom",
                                    "title": {"text": "hatching:"}},
                            height=min(760, 400 + 6 * max((len(n) for n in names), default=0)))  # room for slanted labels
    layout["margin"] = {"l": 70, "r": 20, "t": 64, "b": 60}
    layout["xaxis"].update(tickangle=-40, automargin=True)
    layout["xaxis"]["title"]["standoff"] = 12  # below the slanted labels (automargin makes room)
    return page.chart({"data": data, "layout": layout}, "Predicted GPU reserved under each allocator setting",
                      "Predicted, not measured: each configuration's CPU allocation trace replayed through the caching "
                      "allocator model under each PYTORCH_CUDA_ALLOC_CONF. A bar takes its technique's colour; the "
                      "hatching is the allocator setting; the black tick is the predicted allocated peak, which no "
                      "setting changes.", anchor="predicted gpu by allocator setting")


def _answer_technique(seed: str) -> str:
    """The technique a seed's own answer is about: its reproduction module's ``CUDA_ANSWER_TECHNIQUE``
    (read from its source, :mod:`memlab.site.seed_meta`: importing the modules could import torch)."""
    return seed_metadata(seed).get("CUDA_ANSWER_TECHNIQUE", "")


def _slice_answer(page: Page, sb: dict[str, Any], colors: dict[str, str], technique: str) -> dict[str, Any]:
    """Predicted reserved per allocator setting against the number of chunks: one technique, so every
    line is in its colour, the setting told apart by dash and marker."""
    rows = sorted(sb["rows"], key=lambda r: (r["conf"], r["chunks"]))
    confs = list(dict.fromkeys(r["conf"] for r in rows))
    tech = sb.get("technique") if isinstance(sb.get("technique"), str) else technique
    color = F.color_of(colors, tech)
    data = []
    for i, c in enumerate(confs):
        mine = [r for r in rows if r["conf"] == c]
        data.append({"type": "scatter", "mode": "lines+markers", "name": F.esc(f"reserved, {_conf_name(c)}"),
                     "x": [r["chunks"] for r in mine], "y": [F.mib(r["predicted_reserved_bytes"]) for r in mine],
                     "meta": {"technique": F.esc(tech)}, "line": {"color": color, "dash": F.FRONT_DASHES[i % len(F.FRONT_DASHES)]},
                     "marker": {"color": color, "symbol": F.SYMBOLS[i % len(F.SYMBOLS)], "size": 8}})
    base = [r for r in rows if r["conf"] == confs[0]]
    data.append({"type": "scatter", "mode": "lines+markers", "name": "allocated (any setting)",
                 "x": [r["chunks"] for r in base], "y": [F.mib(r["predicted_allocated_total_bytes"]) for r in base],
                 "line": {"color": "#000000", "dash": "dot"}, "marker": {"color": "#000000"}})
    xs = [r["chunks"] for r in rows]
    layout = F.chart_layout(F.chart_axis("chunks", xs), F.chart_axis("predicted GPU memory (MiB)", F.drawn_ys(data)))
    chart = page.chart({"data": data, "layout": layout}, "Predicted reserved and allocated vs the number of chunks",
                       f"{tech} at the report's size, in its colour, one line per allocator setting; black, dotted: the "
                       "predicted allocated peak. Predicted from the CPU trace, not measured on a GPU.",
                       anchor="slice backward reserved chart")
    cols = [column("conf", "PYTORCH_CUDA_ALLOC_CONF", kind="code"), column("chunks", "chunks", num=True),
            column("allocated", "GPU allocated (predicted)", num=True),
            column("reserved", "GPU reserved (predicted)", num=True),
            column("fragmentation", "reserved − allocated at the allocated peak", num=True),
            column("segments", "segments", num=True)]
    cells = [{"conf": _conf_name(r["conf"]), "chunks": str(r["chunks"]), "chunks__sort": r["chunks"],
              "allocated": fmt_mib(r["predicted_allocated_total_bytes"]),
              "allocated__sort": sort_value(r["predicted_allocated_total_bytes"]),
              "reserved": fmt_mib(r["predicted_reserved_bytes"]), "reserved__sort": sort_value(r["predicted_reserved_bytes"]),
              "fragmentation": fmt_mib(r["fragmentation_bytes"]), "fragmentation__sort": sort_value(r["fragmentation_bytes"]),
              "segments": str(r.get("segments_peak", "-")), "segments__sort": sort_value(r.get("segments_peak"))}
             for r in rows]
    return {"id": page.anchor("does reserved memory grow with the chunks"), "question": sb.get("question", ""),
            "answer": sb["answer"], "chart": chart, "table": page.table("slice backward reserved", cols, cells, rows)}


def add_cuda_to_seed_pages(ctx: dict[str, Any]) -> dict[str, Any]:
    """The predicted-on-GPU block of each seed page that has ``data/cuda-variants/<seed>.json``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", R.ResultsWarning)
        variants = load_variants(variant_files(ctx["data_dir"]))
    problems = [str(w.message) for w in caught if issubclass(w.category, R.ResultsWarning)]
    for p in problems:
        warnings.warn(p, R.ResultsWarning, stacklevel=2)
    pages = []
    for p in ctx["pages"]:
        v = variants.get(p.get("seed")) if p.get("template") == "seed.html" else None
        if v is None:
            pages.append(p)
            continue
        page = Page(p["path"])
        for used in ("measurements", "timelines", "measurement-rows"):
            page.anchor(used)
        try:
            block = _variants_block(page, v, ctx.get("colors", {}))
        except Exception as exc:  # noqa: BLE001 - one bad file must not stop the site
            problems.append(f"{v['source']}: left out ({type(exc).__name__}: {str(exc)[:200]})")
            pages.append(p)
            continue
        run = {"what": "predicted on a GPU (CPU traces replayed through the allocator model)",
               "data": f"data/cuda-variants/{v['source']}", "commit": str(v.get("memlab_commit") or "not recorded")[:12],
               "machine": f"a CPU (torch {v.get('torch') or '?'}); no GPU ran"}
        pages.append({**p, "cuda": {**block, "run": run}, "runs": [*p.get("runs", []), run],
                      "files": dict(sorted({**p.get("files", {}), **page.files}.items()))})
    return {**ctx, "pages": pages, "problems": ctx["problems"] + problems}


# -- predicted vs measured on a GPU ------------------------------------------------------------------
def _gpu_check_problems(data: dict) -> list[str]:
    if not isinstance(data.get("rows"), list):
        return ["needs rows (a list)"]
    bad = [i for i, r in enumerate(data["rows"]) if not isinstance(r, dict) or not isinstance(r.get("technique"), str)
           or not all(r.get(k) is None or _bytes(r.get(k)) for k in GPU_CHECK_FIGURES)]
    return [f"rows {bad[:5]}: need technique and byte figures >= 0 or null"] if bad else []


def load_gpu_checks(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for path, data in R.load_json_objects(paths):
        problems = _gpu_check_problems(data)
        if problems:
            warnings.warn(f"{R.shown_path(path)}: invalid GPU check ({'; '.join(problems)}); skipped", R.ResultsWarning,
                          stacklevel=2)
            continue
        out.append({**data, "source": path.name})
    return out


def fmt_pct(fraction: float | None) -> str:
    """A signed error with one decimal (``'+0.4%'``); ``'-'`` when unknown."""
    return "-" if fraction is None else f"{fraction * 100:+.1f}%"


def relative_error(pred: Any, meas: Any) -> float | None:
    """``(predicted - measured) / measured``; None unless both are byte counts and ``measured > 0``."""
    return (pred - meas) / meas if _bytes(pred) and _bytes(meas) and meas > 0 else None


def check_machine(chk: dict[str, Any]) -> str:
    """The machine a GPU check ran on (NOTE [ the machine a row ran on ] in :mod:`memlab.results`): its
    host when the file records one, the GPU's model and UUID; ``'NVIDIA H200'`` for a file with the model only."""
    facts = {k: chk.get(k) for k in ("host", "gpu_uuid", "cuda_visible_devices")}
    return R.machine_of({**facts, "gpu": chk.get("gpu") or "unknown GPU"}, "cuda")


def gpu_check_section(page: Page, checks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per technique and machine (:func:`check_machine`): the relative error of the predicted allocated and reserved peaks against the
    measured ones (worst and median over its configurations), and every row."""
    if not checks:
        return None
    per: dict[tuple[str, str], dict[str, list[float]]] = {}
    rows_cells, rows_records = [], []
    for chk in checks:
        gpu = check_machine(chk)
        for r in chk["rows"]:
            ea = relative_error(r.get("predicted_allocated_bytes"), r.get("measured_allocated_bytes"))
            er = relative_error(r.get("predicted_reserved_bytes"), r.get("measured_reserved_bytes"))
            e = per.setdefault((r["technique"], gpu), {"allocated": [], "reserved": [], "n": []})
            e["n"].append(1)
            e["allocated"] += [ea] if ea is not None else []
            e["reserved"] += [er] if er is not None else []
            rows_cells.append({
                "technique": r["technique"], "peer": False, "is_baseline": False, "note": None, "gpu": gpu,
                "params": A.param_text(r.get("params") or {}), "status": str(r.get("status") or "-"),
                **{k: fmt_mib(r.get(k)) for k in GPU_CHECK_FIGURES},
                **{f"{k}__sort": sort_value(r.get(k)) for k in GPU_CHECK_FIGURES},
                "err_a": fmt_pct(ea), "err_a__sort": sort_value(ea), "err_r": fmt_pct(er), "err_r__sort": sort_value(er)})
            rows_records.append({**{k: v for k, v in r.items()}, "gpu": chk.get("gpu"), "machine": gpu,
                                 "allocated_error": ea, "reserved_error": er, "source": chk["source"]})

    def worst(xs: list[float]) -> float | None:
        return max(xs, key=abs) if xs else None

    def median(xs: list[float]) -> float | None:
        return sorted(xs)[len(xs) // 2] if xs else None

    cols = [column("technique", "technique", kind="tech"), column("gpu", "machine (GPU)"),
            column("n", "configurations", num=True),
            column("wa", "allocated: worst error", num=True, title="(predicted − measured) / measured, the largest"),
            column("ma", "allocated: median error", num=True),
            column("wr", "reserved: worst error", num=True), column("mr", "reserved: median error", num=True)]
    cells, records = [], []
    for (tech, gpu), e in sorted(per.items()):
        vals = {"wa": worst(e["allocated"]), "ma": median(e["allocated"]), "wr": worst(e["reserved"]),
                "mr": median(e["reserved"])}
        cells.append({"technique": tech, "peer": False, "is_baseline": False, "note": None, "gpu": gpu,
                      "n": str(len(e["n"])), "n__sort": len(e["n"]),
                      **{k: fmt_pct(v) for k, v in vals.items()}, **{f"{k}__sort": sort_value(v) for k, v in vals.items()}})
        records.append({"technique": tech, "gpu": gpu, "machine": gpu, "configurations": len(e["n"]),
                        "allocated_worst_error": vals["wa"], "allocated_median_error": vals["ma"],
                        "reserved_worst_error": vals["wr"], "reserved_median_error": vals["mr"]})
    summary = page.table("gpu check error per technique", cols, cells, records)
    row_cols = [column("technique", "technique", kind="tech"), column("gpu", "machine (GPU)"), column("params", "parameters"),
                column("status", "status"),
                column("measured_allocated_bytes", "allocated: measured", num=True),
                column("predicted_allocated_bytes", "allocated: predicted", num=True),
                column("err_a", "error", num=True),
                column("measured_reserved_bytes", "reserved: measured", num=True),
                column("predicted_reserved_bytes", "reserved: predicted", num=True),
                column("err_r", "error", num=True)]
    detail = page.table("gpu check rows", row_cols, rows_cells, rows_records)
    meta = sorted({f"{check_machine(c)} (torch {c.get('torch') or '?'}, CUDA {c.get('cuda') or '?'}, "
                   f"memlab {str(c.get('memlab_commit') or '?')[:12]}; {c['source']})" for c in checks})
    return {"summary": summary, "rows": detail, "machines": meta}
