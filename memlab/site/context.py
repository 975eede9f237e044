"""Page contexts, built by small ``context -> context`` steps (see :data:`STEPS`).

The context is a dict.  :func:`load_inputs` adds the data (DataFrames and dicts from
:mod:`memlab.results`) and ``problems`` (one line per input problem, shown on the methodology
page); each later step adds one kind of page to ``context["pages"]``: a dict with ``template``,
``path`` (relative to the site root), ``title`` and what the template shows.  Charts are
``{"id", "figure"}`` with ``figure`` the canonical JSON of a plotly figure.

Only ranked rows (shown status ``ok``, see NOTE [ what the site ranks ] in :mod:`memlab.results`)
are called best or drawn; the others are listed in "Not ranked" tables with their status and reason.
A part of a page that still fails to build (an input the readers let through) is left out with a
problem line instead of stopping the site (:func:`_guarded`).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import pandas as pd

from .. import results as R
from . import analysis as A
from . import figures as F
from .text import (UNDER_LOAD, env_caption, fmt_check, fmt_load, fmt_mib, fmt_pct, fmt_rate, fmt_relative, fmt_sci,
                   fmt_step, slugs, verdict_class)

__all__ = ["STEPS", "build_context", "load_inputs", "input_files"]

Context = dict[str, Any]
T = TypeVar("T")


def input_files(results_dir: Path, data_dir: Path, extra_runs: Sequence[Path] = ()) -> list[Path]:
    """Every file the build reads (listed, not opened): asv results, sweeps, timelines, reproductions.

    A folder that cannot be listed is left out silently here; reading it warns (once).
    """
    results_dir, data_dir = Path(results_dir), Path(data_dir)
    files = [results_dir / "benchmarks.json"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", R.ResultsWarning)
        if results_dir.is_dir():
            for folder in R.list_input_files(results_dir, ""):
                files += R.list_input_files(folder, ".json") if folder.is_dir() else []
        files += R.find_sweep_files(data_dir)
        files += R.list_input_files(data_dir / "timelines", ".json")
        files += R.list_input_files(data_dir / "reproductions", ".json")
    return files + [Path(p) for p in extra_runs]


def _guarded(ctx: Context, what: str, build: Callable[[], T]) -> T | None:
    """``build()``, or None with a problem line naming ``what`` when it raises.

    A last line of defence: the readers in :mod:`memlab.results` validate every value a page uses,
    so this only fires for an input they let through; the rest of the site is still built.
    """
    try:
        return build()
    except Exception as exc:  # noqa: BLE001 - any failure of one part must not stop the site
        reason = (str(exc).splitlines() or [""])[0][:200]
        msg = f"{what}: left out, it could not be built ({type(exc).__name__}: {reason})"
        warnings.warn(msg, R.ResultsWarning, stacklevel=2)
        ctx["problems"].append(msg)
        return None


def load_inputs(ctx: Context) -> Context:
    """Read results, sweeps (plus ``extra_runs``), timelines and reproductions; collect warnings."""
    data_dir: Path = ctx["data_dir"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", R.ResultsWarning)
        runs = R.load_runs([*R.find_sweep_files(data_dir), *ctx["extra_runs"]])
        asv = R.load_asv_results(ctx["results_dir"]) if Path(ctx["results_dir"]).exists() else None
        machines = R.load_asv_machines(ctx["results_dir"]) if asv is not None else {}
        timelines = R.load_timelines(R.list_input_files(data_dir / "timelines", ".json"))
        seeds = R.load_reproductions(R.list_input_files(data_dir / "reproductions", ".json"))
        baselines = R.family_baselines(runs) if len(runs) else {}
    problems = [str(w.message) for w in caught if issubclass(w.category, R.ResultsWarning)]
    for w in caught:  # pass them on to the caller, once each
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if asv is None:
        asv = pd.DataFrame(columns=list(R.ASV_COLUMNS))
    return {**ctx, "runs": runs, "asv": asv, "machines": machines, "timelines": timelines, "seeds": seeds,
            "baselines": baselines, "problems": problems, "pages": []}


def _text(v: Any) -> str:
    """A string cell; '' for None and for pandas' missing-value NaN."""
    return "" if v is None or (isinstance(v, float) and v != v) else str(v)


def _per_step(r: Any) -> str:
    """A leak's growth per step (``'4.0 MiB per step'``); '' for other rows."""
    return f"{fmt_mib(r.leak_bytes_per_step)} per step" if r.status_shown == "leak" else ""


def _row_dict(r: Any, skip: dict | None = None) -> dict[str, Any]:
    """A measurement row as table cells (strings; the template escapes them)."""
    return {
        "technique": r.technique, "peer": bool(r.peer), "params": A.param_text(r.params, skip),
        "status": r.status_shown, "error": _text(r.reason), "per_step": _per_step(r), "device": r.device,
        "peak_allocated": fmt_mib(r.peak_allocated_bytes), "peak_reserved": fmt_mib(r.peak_reserved_bytes),
        "floor": fmt_mib(r.analytic_floor_bytes), "step": fmt_step(r.step_time_s, r.step_time_iqr_s),
        "samples": str(len(r.step_times_s)) if r.step_times_s else "", "relative": fmt_relative(r.relative_step_time),
        "under_load": bool(r.under_load), "load": fmt_load(r.load_avg_before, r.load_avg_after, r.cores),
        "throughput": fmt_rate(r.samples_per_s), "matches": fmt_check(r.check),
    }


def _not_ranked(rows: pd.DataFrame) -> list[dict[str, str]]:
    """The rows that are listed but never ranked: technique, setting, parameters, status, reason."""
    out = {}
    for r in A.not_ranked(rows).itertuples():
        out[(r.family, r.technique, r.device, r.dtype, r.mode, r.params_key, r.run, r.line)] = {
            "family": r.family, "technique": r.technique, "peer": bool(r.peer),
            "setting": " · ".join((r.device, r.dtype, r.mode)), "params": A.param_text(r.params),
            "status": r.status_shown, "reason": _text(r.reason), "per_step": _per_step(r),
            "matches": fmt_check(r.check)}
    return [out[k] for k in sorted(out, key=lambda k: (k[:5], A.sort_key(k[5]), k[6:]))]


def _chart(counter: list[int], figure: dict, caption: str = "") -> dict[str, str]:
    counter[0] += 1
    return {"id": f"chart-{counter[0]}", "figure": F.to_json(figure), "caption": caption}


def _sections(rows: pd.DataFrame) -> list[tuple[tuple[str, str, str], dict[str, Any], str | None, pd.DataFrame]]:
    """``(setting, workload config, swept parameter, rows)`` per comparable group of a family."""
    out = []
    for setting in A.settings(rows):
        out += [(setting, config, swept, group)
                for config, swept, group in A.sweep_sections(A.in_setting(rows, setting))]
    return out


def _setting_section(rows: pd.DataFrame, setting: tuple[str, str, str], config: dict, swept: str | None,
                     family: str, counter: list[int]) -> dict:
    device, dtype, mode = setting
    labels = A.line_labels(rows, swept)
    colors = F.palette(labels)
    second = "resident" if device == "cpu" else "reserved"
    head = " · ".join([family, device, dtype, mode] + ([A.param_text(config)] if config else []))
    charts = []
    ok = A.ranked(rows)
    if len(ok):
        if swept:
            charts.append(_chart(counter, F.memory_vs_param(
                rows, labels, swept, "peak_allocated_bytes", f"Peak allocated vs {swept} ({head})",
                "peak allocated (MiB)", colors, floor_column="analytic_floor_bytes"),
                "Solid: measured; dotted: the technique's analytic floor; dashed/diamonds: peers."))
            if ok["activation_peak_bytes"].notna().any():
                charts.append(_chart(counter, F.memory_vs_param(
                    rows, labels, swept, "activation_peak_bytes", f"Activation peak vs {swept} ({head})",
                    "activation peak (MiB)", colors, floor_column="expected_activation_bytes",
                    floor_name="expected"),
                    "Activation memory: bytes live above the baseline minus the parameter gradients "
                    "accumulated so far, at its highest during the step (the step peak above is dominated "
                    "by parameter gradients here). Solid: measured; dotted: the analytic expectation the "
                    "technique states; dashed/diamonds: peers."))
            if ok["peak_reserved_bytes"].notna().any():
                charts.append(_chart(counter, F.memory_vs_param(
                    rows, labels, swept, "peak_reserved_bytes", f"Peak {second} vs {swept} ({head})",
                    f"peak {second} (MiB)", colors)))
        else:
            charts.append(_chart(counter, F.memory_by_technique(rows, labels, f"Peak memory ({head})", colors)))
        if ok["step_time_s"].notna().any():
            relative = bool(ok.loc[ok["step_time_s"].notna(), "relative_step_time"].notna().all())
            what = ("Step time relative to the workload's plain reference step timed interleaved in the same "
                    "process (load-robust: compare techniques on this)" if relative else
                    "Step time in ms (no relative step time recorded: seconds depend on the machine's load)")
            caption = what + "; error bars: the interquartile range of the timed steps."
            if ok["under_load"].any():
                caption += " Ringed points were measured under load (1-minute load average above the cores)."
            fig = (F.step_vs_param(rows, labels, swept, f"Step time vs {swept} ({head})", colors) if swept
                   else F.step_by_technique(rows, labels, f"Step time ({head})", colors))
            charts.append(_chart(counter, fig, caption))
        if ok["samples_per_s"].notna().any():
            fronts = [(A.param_text(cfg), g.index) for cfg, g in A.config_groups(rows, None)]
            charts.append(_chart(counter, F.throughput_vs_peak(rows, labels, f"Throughput vs peak allocated ({head})",
                                                               colors, fronts),
                          "The grey step line is the Pareto front: no other point has less memory and more throughput"
                          + (" (one per workload configuration)." if len(fronts) > 1 else ".")
                          + " Error bars: throughput at the quartiles of the timed steps."
                          + (" Ringed points were measured under load." if ok["under_load"].any() else "")))
    fixed = _fixed_params(rows)
    table = sorted((r for r in rows.itertuples()), key=lambda r: (r.technique, A.sort_key(r.params.get(swept)) if swept else (0,), r.params_key, r.run))
    return {"device": device, "dtype": dtype, "mode": mode, "config": A.param_text(config), "swept": swept,
            "charts": charts,
            "rows": [_row_dict(r, fixed) for r in table], "environments": env_caption(rows),
            "n_not_ranked": len(rows) - len(ok),
            "second": second, "fixed": A.param_text(fixed)}


def _fixed_params(rows: pd.DataFrame) -> dict[str, Any]:
    """Parameters every row has, with one value (shown once instead of in every table row)."""
    params = list(rows["params"])
    if not params:
        return {}
    common = set.intersection(*(set(p) for p in params))
    return {k: params[0][k] for k in sorted(common) if all(p[k] == params[0][k] for p in params)}


def add_family_pages(ctx: Context) -> Context:
    """One page per family: memory vs the swept parameter, throughput vs peak, a table per setting."""
    runs = ctx["runs"]
    families = sorted(set(runs["family"])) if len(runs) else []
    paths = slugs(families, "family")
    pages = []
    for family in families:
        rows = runs[runs["family"] == family]
        counter = [0]
        sections = [_guarded(ctx, f"family {family!r}, {' · '.join(s)} {A.param_text(config)}".rstrip(),
                             lambda: _setting_section(group, s, config, swept, family, counter))
                    for s, config, swept, group in _sections(rows)]
        pages.append({"template": "family.html", "path": paths[family], "title": f"Family: {family}",
                      "family": family, "baseline": ctx["baselines"].get(family),
                      "sections": [s for s in sections if s is not None], "not_ranked": _not_ranked(rows),
                      "peers": sorted(set(rows.loc[rows["peer"], "technique"]))})
    return {**ctx, "family_paths": paths, "pages": ctx["pages"] + pages}


def _overview_entry(family: str, setting: tuple, config: dict, rows: pd.DataFrame, baseline: str | None,
                    counter: list[int]) -> dict[str, Any]:
    device, dtype, mode = setting
    entry: dict[str, Any] = {"family": family, "device": device, "dtype": dtype, "mode": mode,
                             "config": A.param_text(config),
                             "baseline": baseline, "environments": env_caption(rows), "techniques": [], "best": None,
                             "chart": None, "n_not_ranked": len(A.not_ranked(rows))}
    result = A.savings(rows, baseline) if baseline else None
    if result is None:
        return entry
    base = result["baseline"]
    entry["baseline_params"] = A.param_text(base["params"])
    entry["baseline_peak"] = fmt_mib(base["peak_allocated_bytes"])
    for e in result["techniques"]:
        r = e["row"]
        entry["techniques"].append({
            "technique": r["technique"], "peer": bool(r["peer"]), "is_baseline": r["technique"] == baseline,
            "params": A.param_text(r["params"], base["params"]), "peak": fmt_mib(r["peak_allocated_bytes"]),
            "saving": "baseline" if r["technique"] == baseline else fmt_pct(-e["saving"] if e["saving"] is not None else None),
            "throughput": "baseline" if r["technique"] == baseline else
            fmt_pct(e["throughput_ratio"] - 1 if e["throughput_ratio"] is not None else None),
            "relative": fmt_relative(r["relative_step_time"]), "step": fmt_step(r["step_time_s"], r["step_time_iqr_s"]),
            "under_load": bool(r["under_load"]),
            "matches": fmt_check(r["check"])})
    entry["best"] = entry["techniques"][0] if entry["techniques"] else None
    entry["baseline_relative"] = fmt_relative(base["relative_step_time"])
    entry["has_relative"] = any(t["relative"] != "-" for t in entry["techniques"])
    entry["any_under_load"] = any(t["under_load"] for t in entry["techniques"])
    items = [(e["row"]["technique"], e["row"]["technique"] == baseline, bool(e["row"]["peer"]),
              e["row"]["peak_allocated_bytes"]) for e in result["techniques"]]
    entry["chart"] = _chart(counter, F.lowest_peaks(items, "Lowest peak allocated per technique (" + " · ".join([family, device] + ([entry["config"]] if config else [])) + ")"))
    return entry


def _shown_path(path: str, data_dir: Path) -> str:
    """``path`` relative to the data folder's parent when inside it (``data/sweeps/x.jsonl``), else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path(data_dir).resolve().parent))
    except ValueError:
        return str(path)


def add_overview_page(ctx: Context) -> Context:
    """The index: per family and setting the best technique for memory, its saving and throughput
    cost against the baseline, where the numbers come from; links to every other page."""
    runs = ctx["runs"]
    entries, counter = [], [0]
    for family in sorted(set(runs["family"])) if len(runs) else []:
        rows = runs[runs["family"] == family]
        for s, config, _, group in _sections(rows):
            entry = _guarded(ctx, f"overview of family {family!r}, {' · '.join(s)}",
                             lambda: _overview_entry(family, s, config, group, ctx["baselines"].get(family), counter))
            if entry is not None:
                entries.append({**entry, "path": ctx["family_paths"][family]})
    seeds = [{"seed": s["seed"], "title": s["title"], "verdict": s["verdict"], "path": ctx["seed_paths"][s["seed"]],
              "verdict_class": verdict_class(s["verdict"])} for s in ctx["seeds"] if s["seed"] in ctx["seed_paths"]]
    page = {"template": "index.html", "path": "index.html", "title": "memlab results", "entries": entries,
            "seeds": seeds, "problems": ctx["problems"], "n_runs": len(runs),
            "not_ranked": _not_ranked(runs) if len(runs) else [],
            "run_files": sorted({_shown_path(p, ctx["data_dir"]) for p in runs["source"]}) if len(runs) else []}
    return {**ctx, "pages": [page] + ctx["pages"]}


def add_history_page(ctx: Context) -> Context:
    """Each asv benchmark across commits, one chart per benchmark and machine."""
    asv, counter, sections = ctx["asv"], [0], []
    for bench, frame in asv.groupby("benchmark", sort=True):
        charts = []
        for machine, mframe in frame.groupby("machine", sort=True):
            info = ctx["machines"].get(machine, {})
            desc = ", ".join(f"{k} {v}" for k, v in sorted(info.items()) if k != "machine" and v not in (None, ""))
            envs = ", ".join(sorted(set(mframe["env"].dropna())))
            chart = _guarded(ctx, f"history of {bench} on {machine}", lambda: _chart(
                counter, F.history(mframe, f"{bench} on {machine}"),
                f"machine {machine}: {desc or 'no machine.json details'}; asv environment {envs or '-'}"))
            charts += [chart] if chart else []
        sections.append({"benchmark": bench, "unit": frame["unit"].iloc[0] or "", "charts": charts,
                         "commits": int(frame["commit"].nunique())})
    page = {"template": "history.html", "path": "history.html", "title": "History (asv)", "sections": sections,
            "machines": sorted(ctx["machines"])}
    return {**ctx, "pages": ctx["pages"] + [page]}


def _timeline_label(tl: dict) -> str:
    return tl["technique"] + (f" ({A.param_text(tl['params'])})" if tl["params"] else "")


def _top_allocations(tl: dict, n: int = 5) -> list[dict[str, str]]:
    """The ``n`` call stacks that allocated the most bytes in backward (or overall)."""
    events = [e for e in tl["events"] if e["delta_bytes"] > 0]
    back = [e for e in events if e["phase"] == "backward"] or events
    totals: dict[tuple, list[int]] = {}
    for e in back:
        t = totals.setdefault((e["op"], tuple(e["stack"]), e["phase"]), [0, 0])
        t[0] += e["delta_bytes"]
        t[1] += 1
    top = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))[:n]
    return [{"op": k[0], "stack": " › ".join(k[1]), "phase": k[2], "bytes": fmt_mib(v[0]), "count": str(v[1])}
            for k, v in top]


def _timeline_section(tl: dict, counter: list[int], title: str | None = None) -> dict[str, Any]:
    label = _timeline_label(tl)
    peak = max((e["live_bytes"] for e in tl["events"]), default=0)
    return {"label": label, "device": tl["device"], "dtype": tl["dtype"], "mode": tl["mode"],
            "peak": fmt_mib(peak), "baseline": fmt_mib(tl["baseline_bytes"]), "method": tl.get("method", ""),
            "events": len(tl["events"]), "source": Path(tl["source"]).name, "top": _top_allocations(tl),
            "chart": _chart(counter, F.timeline(tl, title or f"{tl['technique']} · {tl['device']} · {tl['mode']}"))}


def add_timelines_page(ctx: Context) -> Context:
    """Memory over one step per technique, with op names on hover, grouped by family (looked up
    from the sweeps by technique name; ``other`` when unknown) with an overlay per family and setting."""
    runs = ctx["runs"]
    family_of = dict(zip(runs["technique"], runs["family"])) if len(runs) else {}
    groups: dict[tuple, list[dict]] = {}
    for tl in ctx["timelines"]:
        key = (family_of.get(tl["technique"], "other"), tl["device"], tl["dtype"], tl["mode"])
        groups.setdefault(key, []).append(tl)
    counter, families = [0], []
    for key in sorted(groups):
        tls = groups[key]
        overlay = (_guarded(ctx, f"timelines overlay {' · '.join(key)}", lambda: _chart(
            counter, F.timelines_overlay(tls, [_timeline_label(t) for t in tls],
                                         f"All {key[0]} timelines · {' · '.join(key[1:])}")))
                   if len(tls) > 1 else None)
        sections = [_guarded(ctx, f"{tl['source']}: timeline", lambda: _timeline_section(tl, counter)) for tl in tls]
        families.append({"family": key[0], "setting": " · ".join(key[1:]), "overlay": overlay,
                         "sections": [s for s in sections if s is not None]})
    page = {"template": "timelines.html", "path": "timelines.html", "title": "Timelines", "families": families}
    return {**ctx, "pages": ctx["pages"] + [page]}


def _seed_page(s: dict, path: str) -> dict[str, Any]:
    counter = [0]
    rows = s["measurements"]
    return {
        "template": "seed.html", "path": path, "title": s["title"], "seed": s["seed"],
        "claim": s["claim"], "verdict": s["verdict"], "verdict_class": verdict_class(s["verdict"]),
        "summary": s["summary"], "quick": s["quick"],
        "figure": _chart(counter, F.seed_figure(s["figure"])) if s["figure"] else None,
        "rows": [_row_dict(r) for r in rows.itertuples()],
        "environments": env_caption(rows) if len(rows) else [],
        "environment": sorted((str(k), str(v)) for k, v in s["environment"].items() if v not in (None, "")),
        "timelines": [_timeline_section(tl, counter) for tl in s["timelines"]]}


def add_seed_pages(ctx: Context) -> Context:
    """One page per seed reproduction: the claim, the verdict, the summary, the figure, the rows."""
    paths = slugs([s["seed"] for s in ctx["seeds"]], "seed")
    pages = []
    for s in ctx["seeds"]:
        page = _guarded(ctx, f"{s['source']}: reproduction page", lambda: _seed_page(s, paths[s["seed"]]))
        pages += [page] if page else []
    return {**ctx, "seed_paths": {p["seed"]: p["path"] for p in pages}, "pages": ctx["pages"] + pages}


def _tolerances(runs: pd.DataFrame) -> list[dict[str, str]]:
    """The tolerances the rows were checked against, per workload, check dtype and (rtol, atol)."""
    groups: dict[tuple, dict[str, Any]] = {}
    for r in runs.itertuples():
        c = r.check
        if c["rtol"] is None:
            continue
        g = groups.setdefault((r.workload, c["dtype"], c["schema"] >= 2, c["rtol"], c["atol"]),
                              {"techniques": set(), "rows": 0})
        g["techniques"].add(r.technique)
        g["rows"] += 1
    return [{"workload": w, "dtype": d, "rtol": fmt_sci(rt), "atol": fmt_sci(at),
             "schema": "2 (decides the verdict)" if new else "1 (the measured dtype)",
             "techniques": ", ".join(sorted(g["techniques"])), "rows": str(g["rows"])}
            for (w, d, new, rt, at), g in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0])))]


def add_methodology_page(ctx: Context) -> Context:
    """What the memory figures mean; the method strings recorded on the measurements, by device; the
    reference tolerances the rows were checked against; every input problem of this build."""
    methods: dict[tuple[str, str, str], None] = {}
    runs = ctx["runs"]
    for device, mm in zip(runs["device"], runs["memory_method"]) if len(runs) else []:
        for k, v in sorted((mm or {}).items()):
            methods[(device.split(":")[0], str(k), str(v))] = None
    page = {"template": "methodology.html", "path": "methodology.html", "title": "Methodology",
            "methods": [{"device": d, "figure": k, "method": v} for d, k, v in sorted(methods)],
            "tolerances": _tolerances(runs) if len(runs) else [], "problems": ctx["problems"]}
    return {**ctx, "pages": ctx["pages"] + [page]}


def add_nav(ctx: Context) -> Context:
    """The navigation bar every page shows."""
    nav = [("Overview", "index.html")]
    nav += [(f"Family: {f}", p) for f, p in sorted(ctx["family_paths"].items())]
    nav += [("Timelines", "timelines.html"), ("History", "history.html")]
    nav += [(f"Seed: {s}", p) for s, p in sorted(ctx["seed_paths"].items())]
    nav += [("Methodology", "methodology.html")]
    return {**ctx, "nav": [{"title": t, "path": p} for t, p in nav]}


STEPS: tuple[Callable[[Context], Context], ...] = (
    load_inputs, add_family_pages, add_seed_pages, add_history_page, add_timelines_page, add_overview_page,
    add_methodology_page, add_nav,
)


def build_context(results_dir: Path, data_dir: Path, extra_runs: Sequence[Path] = ()) -> Context:
    """Run :data:`STEPS` from the inputs; returns the final context (``pages``, ``nav``, data)."""
    ctx: Context = {"results_dir": Path(results_dir), "data_dir": Path(data_dir),
                    "extra_runs": [Path(p) for p in extra_runs]}
    for step in STEPS:
        ctx = step(ctx)
    return ctx
