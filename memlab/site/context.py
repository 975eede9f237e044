"""Page contexts, built by small ``context -> context`` steps (see :data:`STEPS`).

The context is a dict.  :func:`load_inputs` adds the data (DataFrames and dicts from
:mod:`memlab.results`) and ``problems`` (one line per input problem, shown on the methodology
page); each later step adds one kind of page to ``context["pages"]``: a dict with ``template``,
``path`` (relative to the site root), ``title``, ``files`` (its table downloads) and what the
template shows.  Charts, tables and anchors come from :class:`memlab.site.page.Page`; colours from
``context["colors"]`` (one per technique, see NOTE [ one visual language ] in :mod:`memlab.site.figures`).

Only ranked rows (shown status ``ok``, see NOTE [ what the site ranks ] in :mod:`memlab.results`)
are called best or drawn; the others are listed in "Not ranked" tables with their status and reason.
A part of a page that still fails to build (an input the readers let through) is left out with a
problem line instead of stopping the site (:func:`_guarded`).
"""
from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import pandas as pd

from .. import results as R
from ..core.record import UNDER_LOAD_FACTOR
from . import ranking as A
from . import figures as F
from . import cuda as C
from .choose import add_choose_page, load_models, model_files
from .complexity import axes_text, family_badges, reproduction_extras
from .notes import CATEGORY_NAMES, footnotes
from .overview import family_overview
from .page import Page
from .rows import measurement_table, not_ranked_groups, not_ranked_table
from .tables import column
from .gpu_seed import add_gpu_measured_to_seed_pages
from .seed_meta import page_titles
from .models_page import add_model_pages, model_check_files
from .sharding_page import add_sharding_page, sharding_files
from .text import env_caption, fmt_mib, fmt_sci, slugs, verdict_class, summary_items
from .history_page import history_page

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
        files += model_files(data_dir) + C.variant_files(data_dir) + C.gpu_check_files(data_dir)
        files += model_check_files(data_dir) + sharding_files(data_dir)
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


def add_colors(ctx: Context) -> Context:
    """One colour per technique for every page, a function of its name alone
    (:mod:`memlab.site.colors`): every technique the build names (sweeps, reproductions, timelines,
    the Choose page's models) gets the colour it has in every other build."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the readers' problems are reported where each page is built
        models = load_models(ctx["data_dir"])[0]
    names = set(ctx["runs"]["technique"]) if len(ctx["runs"]) else set()
    for s in ctx["seeds"]:
        names |= set(s["measurements"]["technique"]) if len(s["measurements"]) else set()
        names |= {t["technique"] for t in s["timelines"]}
    names |= {tl["technique"] for tl in ctx["timelines"]}
    names |= {e["technique"] for m in models.values() for f in m["families"].values() for e in f["entries"]}
    return {**ctx, "colors": F.technique_colors(names)}


def _sections(rows: pd.DataFrame) -> list[tuple[tuple[str, ...], dict[str, Any], str | None, pd.DataFrame, list[str]]]:
    """``(setting, workload config, swept parameter, rows, split by)`` per comparable group of a family
    (NOTE [ a section's x-axis ] in :mod:`memlab.site.ranking`)."""
    out = []
    for setting in A.settings(rows):
        same = A.in_setting(rows, setting)
        out += [(setting, config, swept, group, [k for k in A.split_by(same, swept) if k in config])
                for config, swept, group in A.sweep_sections(same)]
    return out


def _fixed_params(rows: pd.DataFrame) -> dict[str, Any]:
    """Parameters every row has, with one value (shown once instead of in every table row)."""
    params = list(rows["params"])
    if not params:
        return {}
    common = set.intersection(*(set(p) for p in params))
    return {k: params[0][k] for k in sorted(common) if all(p[k] == params[0][k] for p in params)}


def _note_marks(page: Page, notes: list[dict[str, str]]) -> tuple[list[dict], dict[str, dict]]:
    marks = {n["technique"]: {"n": i + 1, "id": page.anchor(f"note {n['technique']}")} for i, n in enumerate(notes)}
    return [{**n, **marks[n["technique"]]} for n in notes], marks


def _line_caption(fig: dict, floor: str) -> str:
    """What a line chart's styles mean, for the styles it draws only: solid (measured), dotted
    (``floor``: an expectation), dashed with open markers (peers), dash-dotted (one measurement
    without the swept parameter, drawn across the range)."""
    traces = fig["data"]
    dashes = {(t.get("line") or {}).get("dash") for t in traces if any(y is not None for y in t.get("y", []))}
    parts = ["Solid: measured"]
    parts += [f"dotted: {floor}"] if "dot" in dashes else []
    parts += ["dashed with open markers: peers"] if "dash" in dashes else []
    parts += ["dash-dotted: one measurement without this parameter (a baseline), drawn across the range"] if "dashdot" in dashes else []
    return "; ".join(parts) + "."


def _category_chart(page: Page, rows: pd.DataFrame, heading: str) -> dict | None:
    """Stacked bars of each technique's lowest-peak row by memory category, when every ranked row has them."""
    ok = A.ranked(rows)
    if not len(ok) or not ok["peak_by_category_bytes"].map(lambda c: isinstance(c, dict) and bool(c)).all():
        return None
    measure = A.memory_measure(ok)
    best = ok.sort_values([measure, "params_key"], kind="stable").groupby("technique", sort=False).head(1)
    items = [(r.technique, bool(r.peer), r.peak_by_category_bytes) for r in best.itertuples()]
    return page.chart(F.peak_by_category(items, list(CATEGORY_NAMES)), "Peak by memory category",
                      "Each technique's lowest-memory measurement in this section, everything live at its step's "
                      "peak split by category (activation memory in warm colours); hover for the bytes.",
                      anchor=f"{heading} categories")


def _setting_section(page: Page, rows: pd.DataFrame, setting: tuple, config: dict, swept: str | None,
                     colors: dict[str, str], marks: dict[str, dict], baseline: str | None,
                     split: Sequence[str] = (), by_in_heading: bool = False, machine: bool = False) -> dict:
    """One section of a family page: the rows of one setting (and workload configuration), their charts
    (memory, step time, throughput, categories, predicted CUDA) and their table."""
    heading = (A.setting_text(setting, machine=machine) + (f" · {A.param_text(config)}" if config else "")
               + (f" · by {swept}" if swept and by_in_heading else ""))
    anchor = page.anchor(heading)
    variants = A.line_variants(rows, swept)
    devices = set(rows["device"])
    second = "resident" if devices == {"cpu"} else "reserved"
    charts = []
    ok = A.ranked(rows)

    def chart(fig: dict, title: str, caption: str = "", absent: str = "") -> None:
        charts.append(page.chart(fig, title, caption, anchor=f"{heading} {title}", absent=absent))

    if len(ok):
        _memory_charts(chart, rows, ok, variants, swept, second, colors)
        _step_time_chart(chart, rows, ok, variants, swept, colors)
        _throughput_chart(chart, rows, ok, variants, colors)
        cats = _category_chart(page, rows, heading)
        charts += [cats] if cats else []
        gpu = C.predicted_chart(page, rows, variants, swept, colors, heading)
        charts += [gpu] if gpu else []
    fixed = _fixed_params(rows)
    return {"id": anchor, "heading": heading, "config": A.param_text(config), "swept": swept, "charts": charts,
            "machine": setting[A.SETTING.index("machine")],
            "table": measurement_table(page, f"{heading} measurements", _table_order(rows, swept), skip=fixed,
                                       notes=marks, baseline=baseline),
            "environments": env_caption(rows), "n_not_ranked": len(rows) - len(ok), "second": second,
            "fixed": A.param_text(fixed), "mixed_threads": mixed_threads(rows), "split_by": list(split)}


def _memory_charts(chart: Callable[..., None], rows: pd.DataFrame, ok: pd.DataFrame, variants: Any,
                   swept: str | None, second: str, colors: dict[str, str]) -> None:
    """The memory charts of a section, through ``chart(fig, title, caption, absent)``: peak allocated,
    activation peak and peak ``second`` (resident or reserved, MiB) against the swept parameter, or
    one bar chart per configuration when nothing is swept."""
    if not swept:
        chart(F.memory_by_technique(rows, variants, colors), "Peak memory per configuration",
              "Coloured bars: peak allocated (one colour per technique, peers hatched); "
              + (f"grey bars: peak {second}." if F.draws_second_bars(rows) else
                 f"no peak {second} bars: it is 0 in every row (the memory the step needed was already "
                 "reserved before it, from the warm-up step; the tables give each row's figure)."))
        return
    fig = F.memory_vs_param(rows, variants, swept, "peak_allocated_bytes", "peak allocated (MiB)", colors,
                            floor_column="analytic_floor_bytes")
    chart(fig, f"Peak allocated vs {swept}", _line_caption(fig, "the technique's analytic floor")
          + " One colour per technique, its configurations told apart by marker (hover for which).")
    if ok["activation_peak_bytes"].notna().any():
        fig = F.memory_vs_param(rows, variants, swept, "activation_peak_bytes", "activation peak (MiB)", colors,
                                floor_column="expected_activation_bytes", floor_name="expected")
        chart(fig, f"Activation peak vs {swept}",
              "Activation memory: bytes live above the baseline minus the parameter gradients accumulated so "
              "far, at its highest during the step (the step peak above is dominated by parameter gradients "
              "here). " + _line_caption(fig, "the analytic expectation the technique states"))
    if ok["peak_reserved_bytes"].notna().any():
        chart(F.memory_vs_param(rows, variants, swept, "peak_reserved_bytes", f"peak {second} (MiB)", colors),
              f"Peak {second} vs {swept}",
              absent=f"peak {second} is 0 in every row (the memory the step needed was already {second} "
                     "before it, from the warm-up step); the table gives each row's figure.")


def _step_time_chart(chart: Callable[..., None], rows: pd.DataFrame, ok: pd.DataFrame, variants: Any,
                     swept: str | None, colors: dict[str, str]) -> None:
    """A section's step time chart (relative to the family baseline where every timed row has it, else
    ms), against the swept parameter or per configuration; none when no row was timed."""
    timed = ok[ok["step_time_s"].notna()]
    if not len(timed):
        return
    relative = bool(timed["relative_step_time"].notna().all())
    what = ("Step time relative to the family baseline's step timed interleaved in the same "
            "process (load-robust: compare techniques on this)" if relative else
            "Step time in ms (no relative step time recorded: seconds depend on the machine's load)")
    caption = what + "; error bars: the interquartile range of the timed steps."
    if ok["under_load"].any():
        caption += (" Ringed points were measured under load (1-minute load average above "
                    f"{UNDER_LOAD_FACTOR:g} x the cores).")
    chart(F.step_vs_param(rows, variants, swept, colors) if swept else F.step_by_technique(rows, variants, colors),
          f"Step time vs {swept}" if swept else "Step time per configuration", caption)


def _throughput_chart(chart: Callable[..., None], rows: pd.DataFrame, ok: pd.DataFrame, variants: Any,
                      colors: dict[str, str]) -> None:
    """A section's throughput (samples/s) against peak allocated, with one Pareto front per workload
    configuration of two or more points; none when no row has a throughput."""
    if not ok["samples_per_s"].notna().any():
        return
    fronts = [(A.param_text(cfg), g.index) for cfg, g in A.config_groups(rows, None)]
    fig = F.throughput_vs_peak(rows, variants, colors, fronts)
    drawn = sum(1 for t in fig["data"] if str(t.get("name", "")).startswith("Pareto front"))
    chart(fig, "Throughput vs peak allocated",
          ("The grey step line is the Pareto front: no other point has less memory and more throughput"
           + (f" ({drawn} fronts, one per workload configuration with two or more points, told apart by dash)."
              if drawn > 1 else ".") if drawn else "No Pareto front: no workload configuration has two points.")
          + " Error bars: throughput at the quartiles of the timed steps."
          + (" Ringed points were measured under load." if ok["under_load"].any() else ""))


def _table_order(rows: pd.DataFrame, swept: str | None) -> pd.DataFrame:
    """``rows`` in table order: by technique, the swept parameter's value, the parameters, the run."""
    keys = {i: (r.technique, A.sort_key(r.params.get(swept)) if swept else (0,), r.params_key, r.run)
            for i, r in zip(rows.index, rows.itertuples())}
    return rows.loc[sorted(rows.index, key=keys.__getitem__)]


def mixed_threads(rows: pd.DataFrame) -> list[int]:
    """The distinct intra-op thread counts of the CPU rows, when there is more than one (else ``[]``).

    On CPU the exact allocated peak of a convolution depends on the threads (oneDNN's scratch memory
    is per thread: the resnet check configuration holds 86,864 B at one thread and 111,464 B at two),
    and step times do too, so a section that mixes them compares unlike with unlike and says so.
    """
    cpu = rows[(rows["device"] == "cpu") & rows["threads"].notna()]
    counts = sorted({int(t) for t in cpu["threads"]})
    return counts if len(counts) > 1 else []


def _family_page(ctx: Context, family: str, path: str) -> dict[str, Any]:
    rows = ctx["runs"][ctx["runs"]["family"] == family]
    page = Page(path)
    page.anchor("not-ranked-measurements")  # the section id the template writes by hand
    page.anchor("complexity")  # likewise (the complexity badges)
    baseline = ctx["baselines"].get(family)
    notes, marks = _note_marks(page, footnotes(rows))
    bad = A.not_ranked(rows)
    not_ranked = not_ranked_table(page, "not ranked rows", rows) if len(bad) else None
    parts = _sections(rows)
    shared = Counter((s, A.param_text(config)) for s, config, *_ in parts)
    machine = A.machines_apart(A.settings(rows))  # NOTE [ the machine a row ran on ]: a section per machine
    sections = [_guarded(ctx, f"family {family!r}, {A.setting_text(s, machine=machine)} {A.param_text(config)}".rstrip(),
                         lambda: _setting_section(page, group, s, config, swept, ctx["colors"], marks, baseline,
                                                  split, shared[(s, A.param_text(config))] > 1, machine))
                for s, config, swept, group, split in parts]
    badges = _guarded(ctx, f"family {family!r}: complexity badges", lambda: family_badges(rows)) or []
    return page.done({"template": "family.html", "path": path, "title": f"Family: {family}", "family": family,
                      "baseline": baseline, "machines": sorted(set(rows["machine"])) if machine else [], "sections": [s for s in sections if s is not None],
                      "not_ranked": not_ranked, "n_bad": len(bad), "notes": notes,
                      "peers": sorted(set(rows.loc[rows["peer"], "technique"])),
                      "complexity": badges, "complexity_axes": axes_text(badges) if badges else ""})


def add_family_pages(ctx: Context) -> Context:
    """One page per family: per setting and configuration, memory and step time against the swept
    parameter, throughput vs peak, memory by category, a table; the rows not ranked; footnotes."""
    runs = ctx["runs"]
    families = sorted(set(runs["family"])) if len(runs) else []
    paths = slugs(families, "family")
    pages = [_family_page(ctx, family, paths[family]) for family in families]
    return {**ctx, "family_paths": paths, "pages": ctx["pages"] + pages}


def _shown_path(path: str, data_dir: Path) -> str:
    """``path`` relative to the data folder's parent when inside it (``data/sweeps/x.jsonl``), else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path(data_dir).resolve().parent))
    except ValueError:
        return str(path)


def add_overview_page(ctx: Context) -> Context:
    """The index: per family one section answering its questions per configuration (NOTE [ the
    overview's questions ]), where the numbers come from; links to every other page."""
    runs = ctx["runs"]
    page = Page("index.html")
    for fixed in ("data-problems", "not-ranked", "reports"):
        page.anchor(fixed)  # section ids the template writes by hand
    entries, yours = [], frozenset(R.shown_path(p) for p in ctx["extra_runs"])  # NOTE [ your run ]
    for family in sorted(set(runs["family"])) if len(runs) else []:
        rows = runs[runs["family"] == family]
        entry = _guarded(ctx, f"overview of family {family!r}",
                         lambda: family_overview(page, family, rows, ctx["baselines"].get(family), ctx["colors"], yours))
        if entry is not None:
            entries.append({**entry, "path": ctx["family_paths"][family]})
    seeds = [{"seed": s["seed"], **dict(zip(("title", "report_title"), page_titles(s["seed"], s["title"]))),
              "verdict": s["verdict"], "path": ctx["seed_paths"][s["seed"]],
              "verdict_class": verdict_class(s["verdict"])} for s in ctx["seeds"] if s["seed"] in ctx["seed_paths"]]
    not_ranked = not_ranked_groups(page, "not ranked rows", runs) if len(A.not_ranked(runs)) else None
    index = page.done({"template": "index.html", "path": "index.html", "title": "memlab results", "entries": entries,
                       "seeds": seeds, "problems": ctx["problems"], "n_runs": len(runs), "not_ranked": not_ranked,
                       "n_bad": len(A.not_ranked(runs)) if len(runs) else 0,
                       "run_files": sorted({_shown_path(p, ctx["data_dir"]) for p in runs["source"]}) if len(runs) else []})
    return {**ctx, "pages": [index] + ctx["pages"]}


def add_history_page(ctx: Context) -> Context:
    """The asv history: per machine its measured commits and a chart per benchmark (failures marked,
    version bumps and unmeasured commits shown), and the regressions view (every step change of an
    exact memory value, every failure onset); see :mod:`memlab.site.history_page`."""
    page = history_page(ctx, lambda what, build: _guarded(ctx, what, build))
    return {**ctx, "pages": ctx["pages"] + [page]}


def _timeline_label(tl: dict) -> str:
    return tl["technique"] + (f" ({A.param_text(tl['params'])})" if tl["params"] else "")


def _top_allocations(page: Page, tl: dict, name: str, n: int = 5, machine: str = "") -> dict[str, Any]:
    """The ``n`` call stacks that allocated the most bytes in backward (or overall), as a table; with a
    machine column when ``machine`` is known (a seed page's timelines: its reproduction's; a timeline
    file records none)."""
    events = [e for e in tl["events"] if e["delta_bytes"] > 0]
    back = [e for e in events if e["phase"] == "backward"] or events
    totals: dict[tuple, list[int]] = {}
    for e in back:
        t = totals.setdefault((e["op"], tuple(e["stack"]), e["phase"]), [0, 0])
        t[0] += e["delta_bytes"]
        t[1] += 1
    top = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))[:n]
    cols = [column("op", "op", kind="code"), column("stack", "call stack", kind="code"), column("phase", "phase"),
            column("bytes", "allocated", num=True), column("count", "events", num=True)]
    where = {"machine": machine} if machine else {}
    cols += [column("machine", "machine")] if machine else []
    cells = [{"op": k[0], "stack": " › ".join(k[1]), "phase": k[2], "bytes": fmt_mib(v[0]), "bytes__sort": v[0],
              "count": str(v[1]), "count__sort": v[1], **where} for k, v in top]
    records = [{"op": k[0], "stack": list(k[1]), "phase": k[2], "allocated_bytes": v[0], "events": v[1], **where}
               for k, v in top]
    return page.table(name, cols, cells, records)


def _timeline_section(page: Page, tl: dict, colors: dict[str, str], machine: str = "") -> dict[str, Any]:
    label = _timeline_label(tl)
    heading = f"{label} · {tl['device']} · {tl['dtype']} · {tl['mode']}"
    anchor = page.anchor(heading)
    peak = max((e["live_bytes"] for e in tl["events"]), default=0)
    return {"id": anchor, "label": label, "device": tl["device"], "dtype": tl["dtype"], "mode": tl["mode"],
            "peak": fmt_mib(peak), "baseline": fmt_mib(tl["baseline_bytes"]), "method": tl.get("method", ""),
            "events": len(tl["events"]), "source": Path(tl["source"]).name,
            "top": _top_allocations(page, tl, f"{heading} top allocations", machine=machine),
            "chart": page.chart(F.timeline(tl, F.color_of(colors, tl["technique"])), "Live memory over one step",
                                anchor=f"{heading} chart")}


def add_timelines_page(ctx: Context) -> Context:
    """Memory over one step per technique, with op names on hover, grouped by family (looked up
    from the sweeps by technique name; ``other`` when unknown) with an overlay per family and setting."""
    runs = ctx["runs"]
    family_of = dict(zip(runs["technique"], runs["family"])) if len(runs) else {}
    groups: dict[tuple, list[dict]] = {}
    for tl in ctx["timelines"]:
        key = (family_of.get(tl["technique"], "other"), tl["device"], tl["dtype"], tl["mode"])
        groups.setdefault(key, []).append(tl)
    page, families = Page("timelines.html"), []
    for key in sorted(groups):
        tls = groups[key]
        anchor = page.anchor(" ".join(key))
        overlay = None
        if len(tls) > 1:
            overlay = _guarded(ctx, f"timelines overlay {' · '.join(key)}", lambda: page.chart(
                F.timelines_overlay(tls, [_timeline_label(t) for t in tls], ctx["colors"]),
                f"All {key[0]} timelines · {' · '.join(key[1:])}",
                "One colour per technique (as on every page); x is the fraction of each step's allocation events."))
        sections = [_guarded(ctx, f"{tl['source']}: timeline", lambda: _timeline_section(page, tl, ctx["colors"]))
                    for tl in tls]
        families.append({"id": anchor, "family": key[0], "setting": " · ".join(key[1:]), "overlay": overlay,
                         "sections": [s for s in sections if s is not None]})
    return {**ctx, "pages": ctx["pages"] + [page.done({"template": "timelines.html", "path": "timelines.html",
                                                        "title": "Timelines", "families": families})]}


def _short_commit(commit: Any) -> str:
    """A commit as the site shows it (12 hex digits, ``+dirty`` kept); ``'not recorded'`` when missing."""
    text = str(commit or "")
    return (text[:12] + ("+dirty" if text.endswith("+dirty") else "")) if text else "not recorded"


def _seed_run(s: dict) -> dict[str, str]:
    """The reproduction's own run (its rows, figure and timelines), for the list of the runs a seed page
    shows (NOTE [ a page's runs ])."""
    rows, env = s["measurements"], s["environment"]
    commits = sorted({_short_commit((e or {}).get("git_commit")) for e in rows["environment"]}) if len(rows) else []
    machines = sorted(set(rows["machine"])) if len(rows) else []
    return {"what": "the reproduction: claim, figure, measurements and timelines", "data": f"data/reproductions/{Path(s['source']).name}",
            "commit": ", ".join(commits) or _short_commit(env.get("git_commit")),
            "machine": ", ".join(machines) or R.machine_of(env, "cpu")}


# NOTE [ a page's runs ]
# ~~~~~~~~~~~~~~~~~~~~~~~
# A page shows one run's rows unless it says otherwise (issue 29).  A seed page is built from up to
# three files written at different commits, on different machines: the reproduction (memlab reproduce),
# the CUDA prediction (make cuda-variants: CPU traces replayed through the allocator model) and the
# GPU check (make gpu-check, on a GPU host).  Each step that adds a block adds its run to the page's
# ``runs`` (what, data file, memlab commit, machine); the page lists them at the top when there are
# several, and each block names its own.
def _seed_page(s: dict, path: str, colors: dict[str, str]) -> dict[str, Any]:
    page = Page(path)
    for fixed in ("measurements", "timelines"):
        page.anchor(fixed)  # section ids the template writes by hand
    rows = s["measurements"]
    run = _seed_run(s)
    figure = None
    if s["figure"]:
        techniques = sorted({t["technique"] for t in s["timelines"]} | (set(rows["technique"]) if len(rows) else set()))
        figure = page.chart(F.seed_figure(s["figure"], colors, techniques),
                            s["figure"]["title"] or "The figure that settles it")
    title, report_title = page_titles(s["seed"], s["title"])
    return page.done({
        "template": "seed.html", "path": path, "title": title, "report_title": report_title, "seed": s["seed"],
        "runs": [run],
        "claim": s["claim"], "verdict": s["verdict"], "verdict_class": verdict_class(s["verdict"]),
        "summary": s["summary"], "summary_items": summary_items(s["summary"]), "quick": s["quick"], "figure": figure,
        "table": measurement_table(page, "measurement rows", rows, skip=_fixed_params(rows)) if len(rows) else None,
        "fixed": A.param_text(_fixed_params(rows)) if len(rows) else "",
        "environments": env_caption(rows) if len(rows) else [],
        "environment": sorted((str(k), str(v)) for k, v in s["environment"].items() if v not in (None, "")),
        "timelines": [_timeline_section(page, tl, colors, run["machine"]) for tl in s["timelines"]],
        **reproduction_extras(page, s, run["machine"])})


def add_seed_pages(ctx: Context) -> Context:
    """One page per seed reproduction: the claim, the verdict, the summary, the figure, the rows."""
    paths = slugs([s["seed"] for s in ctx["seeds"]], "seed")
    pages = []
    for s in ctx["seeds"]:
        page = _guarded(ctx, f"{s['source']}: reproduction page", lambda: _seed_page(s, paths[s["seed"]], ctx["colors"]))
        pages += [page] if page else []
    return {**ctx, "seed_paths": {p["seed"]: p["path"] for p in pages}, "pages": ctx["pages"] + pages}


def _tolerances(page: Page, runs: pd.DataFrame) -> dict[str, Any]:
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
    items = sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0])))
    cols = [column("workload", "workload", kind="code"), column("dtype", "checked in"),
            column("rtol", "rtol", num=True), column("atol", "atol", num=True), column("schema", "record schema"),
            column("techniques", "techniques"), column("rows", "measurements", num=True)]
    cells = [{"workload": w, "dtype": d, "rtol": fmt_sci(rt), "rtol__sort": rt, "atol": fmt_sci(at), "atol__sort": at,
              "schema": "2 (decides the verdict)" if new else "1 (the measured dtype)",
              "techniques": ", ".join(sorted(g["techniques"])), "rows": str(g["rows"]), "rows__sort": g["rows"]}
             for (w, d, new, rt, at), g in items]
    records = [{"workload": w, "check_dtype": d, "rtol": rt, "atol": at, "schema": 2 if new else 1,
                "techniques": sorted(g["techniques"]), "measurements": g["rows"]} for (w, d, new, rt, at), g in items]
    return page.table("tolerances", cols, cells, records)


def add_methodology_page(ctx: Context) -> Context:
    """What the memory and time figures mean; the method strings recorded on the measurements, by
    device; the reference tolerances the rows were checked against; every input problem of this build."""
    methods: dict[tuple[str, str, str], None] = {}
    runs, page = ctx["runs"], Page("methodology.html")
    for device, mm in zip(runs["device"], runs["memory_method"]) if len(runs) else []:
        for k, v in sorted((mm or {}).items()):
            methods[(device.split(":")[0], str(k), str(v))] = None
    cols = [column("device", "device"), column("figure", "figure"), column("method", "how it was measured")]
    items = sorted(methods)
    method_table = page.table("method strings", cols, [{"device": d, "figure": k, "method": v} for d, k, v in items],
                              [{"device": d, "figure": k, "method": v} for d, k, v in items]) if items else None
    for fixed in ("verdicts", "data-problems", "step-times", "predicted-on-gpu", "gpu-check"):
        page.anchor(fixed)  # ids the template writes by hand
    tolerances = _tolerances(page, runs) if len(runs) else None
    with warnings.catch_warnings(record=True) as caught:  # predicted vs measured on a GPU (make gpu-check)
        warnings.simplefilter("always", R.ResultsWarning)
        gpu_check = C.gpu_check_section(page, C.load_gpu_checks(C.gpu_check_files(ctx["data_dir"])))
    for w in caught:
        ctx["problems"].append(str(w.message))
        warnings.warn(str(w.message), R.ResultsWarning, stacklevel=2)
    return {**ctx, "pages": ctx["pages"] + [page.done({
        "template": "methodology.html", "path": "methodology.html", "title": "Methodology",
        "methods": method_table, "tolerances": tolerances if tolerances and tolerances["rows"] else None,
        "gpu_check": gpu_check,
        "problems": ctx["problems"]})]}


def add_footer(ctx: Context) -> Context:
    """Where the data comes from, for every page's footer: machines, torch versions, memlab commits."""
    envs = [(env or {}, device) for env, device in zip(ctx["runs"]["environment"], ctx["runs"]["device"])]
    for s in ctx["seeds"]:
        envs += [(s["environment"], "cpu")] + [(e or {}, d) for e, d in zip(s["measurements"]["environment"],
                                                                           s["measurements"]["device"])]
    cores: dict[str, set] = {}
    for e, d in envs:
        if e:
            cores.setdefault(R.machine_of(e, d), set()).update([e["cores"]] if e.get("cores") else [])
    machines = {m + (f" ({', '.join(map(str, sorted(c)))} cores)" if c else "") for m, c in cores.items()}
    machines |= {f"{m} (asv)" for m in ctx["machines"]}
    torch = {str(e["torch"]) for e, _ in envs if e.get("torch")}
    commits = {str(e["git_commit"])[:12] for e, _ in envs if e.get("git_commit")}
    commits |= {str(c)[:12] for c in ctx["asv"]["commit"]} if len(ctx["asv"]) else set()
    return {**ctx, "footer": {"machines": sorted(machines), "torch": sorted(torch), "commits": sorted(commits)}}


def add_nav(ctx: Context) -> Context:
    """The navigation bar every page shows."""
    nav = [("Overview", "index.html")]
    nav += [("Choose", "choose.html")] if any(p["path"] == "choose.html" for p in ctx["pages"]) else []
    nav += [(f"Family: {f}", p) for f, p in sorted(ctx["family_paths"].items())]
    nav += sorted(ctx.get("model_paths", {}).items())
    nav += [("Sharding", ctx["sharding_path"])] if ctx.get("sharding_path") else []
    nav += [("Timelines", "timelines.html"), ("History", "history.html")]
    nav += [(f"Seed: {s}", p) for s, p in sorted(ctx["seed_paths"].items())]
    nav += [("Methodology", "methodology.html")]
    return {**ctx, "nav": [{"title": t, "path": p} for t, p in nav]}


STEPS: tuple[Callable[[Context], Context], ...] = (
    load_inputs, add_colors, add_family_pages, add_seed_pages, C.add_cuda_to_seed_pages,
    add_gpu_measured_to_seed_pages, add_history_page, add_timelines_page, add_overview_page, add_choose_page,
    add_model_pages, add_sharding_page,
    add_methodology_page, add_footer, add_nav,
)


def build_context(results_dir: Path, data_dir: Path, extra_runs: Sequence[Path] = ()) -> Context:
    """Run :data:`STEPS` from the inputs; returns the final context (``pages``, ``nav``, ``footer``, data)."""
    ctx: Context = {"results_dir": Path(results_dir), "data_dir": Path(data_dir),
                    "extra_runs": [Path(p) for p in extra_runs]}
    for step in STEPS:
        ctx = step(ctx)
    return ctx
