"""The model pages: one page per real model file checked by :mod:`memlab.own_model.checks`.

Each ``data/model-files/<stem>-<optimizer>.json`` holds a model file's fitted memory models (as
``memlab advise --model`` caches them) and the checks beyond the measured batches (predicted vs
measured at 4x and 10x).  Its page shows, technique by technique: the largest batch predicted to fit
GPUs of :data:`GPU_BUDGETS_GIB` (the CUDA need of :func:`memlab.advisor.advise.cuda_need`), the
relative step time there, the peak by memory category at one batch, and the checks.  Everything is
evaluated from the JSON (:func:`memlab.advisor.model.predict`): no torch, no measuring.

A file that is not such a document (another schema, no family, no ``beyond`` rows) is left out with
a problem line on the methodology page.  A technique whose traced step has allocations that are no
polynomial of the sizes, read as upper bounds, is listed with how many and by how many bytes at most
(:func:`memlab.advisor.advise.bounded_reading`).  A document's ``notes`` (``{"<technique> <size>=<n>": why}``,
written by hand beside the rows and kept by :func:`memlab.own_model.checks.write_checks`) say why a check
is not exact; the page lists them under the checks.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from .. import results as R
from ..advisor.advise import bounded_reading, cuda_need, error_bound, fmt_bytes
from ..core.declaration import as_declaration
from ..advisor.model import CATEGORIES, SCHEMA, predict, predict_time
from ..advisor.trace import BOUND_FRACTION
from ..own_model.advice import largest_fitting
from ..core.record import fmt_mib, is_number
from ..core.setting import DEFAULTS
from . import figures as F
from .notes import CATEGORY_NAMES
from .page import Page
from .tables import column
from .text import fmt_relative

__all__ = ["GPU_BUDGETS_GIB", "model_check_files", "load_model_checks", "model_page", "add_model_pages"]

#: the GPU memory sizes the pages answer for (GiB): the common 16, 24, 40 and 80 GiB cards
GPU_BUDGETS_GIB = (16, 24, 40, 80)
_GiB = 1 << 30
#: the folder under the data directory
FOLDER = "model-files"


def model_check_files(data_dir: Path) -> list[Path]:
    """``<data_dir>/model-files/*.json`` (listed, not opened)."""
    return R.list_input_files(Path(data_dir) / FOLDER, ".json")


def _problem(doc: Any) -> str | None:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        return f"not a memlab model-file check of schema {SCHEMA}"
    fams = doc.get("families")
    if not isinstance(fams, dict) or len(fams) != 1:
        return "no single fitted family"
    fam = next(iter(fams.values()))
    try:
        as_declaration(fam)
    except ValueError as exc:
        return str(exc)
    if not isinstance(fam.get("entries"), list) or not fam["entries"]:
        return "no modelled technique"
    if not isinstance(doc.get("beyond"), list):
        return "no checks beyond the measured batches (run python -m memlab.own_model.checks)"
    return None


def load_model_checks(data_dir: Path) -> tuple[list[tuple[Path, dict[str, Any]]], list[str]]:
    """``([(path, document)], problems)``: the readable check files, sorted by name."""
    docs, problems = [], []
    for path in model_check_files(data_dir):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: unreadable ({type(exc).__name__}); left out of the model pages")
            continue
        why = _problem(doc)
        if why:
            problems.append(f"{path.name}: {why}; left out of the model pages")
            continue
        docs.append((path, doc))
    return docs, problems


def _kind(technique: str) -> str:
    return technique.split("__", 1)[-1]


def _held(fam: dict[str, Any], decl) -> dict[str, int]:
    return {s: fam["sizes"][s]["default"] for s in decl.sizes[1:]}


def _budget_table(page: Page, fam: dict, decl, held: dict, colors: dict) -> tuple[dict, list[dict]]:
    """Technique by technique: the largest batch per GPU size and the predicted relative time there."""
    size = decl.sizes[0]
    rows, records, answers = [], [], []
    for entry in fam["entries"]:
        def need(n, entry=entry):
            return cuda_need(predict(fam, entry, {**held, size: n})["total_peak_bytes"])
        row = {"technique": entry["technique"], "peer": False, "is_baseline": bool(entry.get("baseline"))}
        rec = {"technique": entry["technique"], "kind": _kind(entry["technique"])}
        for gib in GPU_BUDGETS_GIB:
            n = largest_fitting(need, gib * _GiB) if entry.get("recommendable", True) else None
            t = predict_time(fam, entry, {**held, size: n}) if n else None
            row[f"b{gib}"] = f"{n:,}" if n else "does not fit"
            row[f"b{gib}__sort"] = n
            row[f"t{gib}"] = fmt_relative(t)
            row[f"t{gib}__sort"] = t
            rec[f"largest_{size}_{gib}GiB"] = n
            rec[f"relative_step_time_{gib}GiB"] = None if t is None else round(t, 3)
            if gib == 24:
                answers.append((entry, n))
        bound = error_bound(entry)
        if not bound["measured_points"] and not bound["traced_points"]:
            bound["text"] = "traced model, no held-out check in the fit (see the checks below)"
        row["error"] = bound["text"]
        rec["model_error"] = bound
        rows.append(row)
        records.append(rec)
    cols = [column("technique", "technique", kind="tech")]
    for gib in GPU_BUDGETS_GIB:
        cols += [column(f"b{gib}", f"{gib} GiB: {size}", num=True,
                        title=f"the largest {size} whose predicted CUDA need fits {gib} GiB"),
                 column(f"t{gib}", "time", num=True, title=f"predicted relative step time (technique / plain) at that {size}")]
    cols.append(column("error", "model error", title="held-out checks of the fit (measured and traced)"))
    return page.table("largest batch per GPU", cols, rows, records), answers


def _category_part(page: Page, fam: dict, decl, held: dict, at: int) -> tuple[dict, dict]:
    """Stacked bars and a table of each technique's predicted peak by category at ``size = at``."""
    size = decl.sizes[0]
    items, rows, records = [], [], []
    for entry in fam["entries"]:
        pred = predict(fam, entry, {**held, size: at})
        cats = pred["peak_by_category_bytes"]
        items.append((entry["technique"], False, cats))
        row = {"technique": entry["technique"], "peer": False, "is_baseline": bool(entry.get("baseline")),
               "total": fmt_mib(pred["total_peak_bytes"]), "total__sort": pred["total_peak_bytes"]}
        for c in CATEGORIES:
            row[c], row[f"{c}__sort"] = fmt_mib(cats[c]), cats[c]
        rows.append(row)
        records.append({"technique": entry["technique"], size: at, **held, "total_peak_bytes": pred["total_peak_bytes"],
                        **{f"{c}_bytes": cats[c] for c in CATEGORIES}})
    chart = page.chart(F.peak_by_category(items, list(CATEGORY_NAMES)), f"Peak by memory category at {size} {at}",
                       f"Predicted by the fitted models (exact CPU bytes of a float32 training step) at {size}={at}"
                       + "".join(f", {k}={v}" for k, v in held.items()) + "; hover for the bytes.")
    cols = [column("technique", "technique", kind="tech"), column("total", "total peak", num=True)]
    cols += [column(c, CATEGORY_NAMES[c], num=True) for c in CATEGORIES]
    return chart, page.table(f"peak by category at {size} {at}", cols, rows, records)


def _checks_table(page: Page, doc: dict, size: str) -> tuple[dict, str]:
    """Predicted vs measured at the checked factors; and a one-line summary of the worst error."""
    rows, records, worst = [], [], None
    for r in doc["beyond"]:
        ok = r.get("status") == "ok" and is_number(r.get("measured_total_peak_bytes"))
        rel = r.get("rel_error") if ok else None
        if is_number(rel):
            worst = rel if worst is None else max(worst, rel)
        p = r.get("params") or {}
        rows.append({"technique": r.get("technique", "?"), "peer": False, "factor": f"{r.get('factor')}x",
                     "factor__sort": r.get("factor"), "size": f"{p.get(size, '-')}", "size__sort": p.get(size),
                     "predicted": fmt_bytes(r["predicted_total_peak_bytes"]) if is_number(r.get("predicted_total_peak_bytes")) else "-",
                     "predicted__sort": r.get("predicted_total_peak_bytes"),
                     "measured": fmt_bytes(r["measured_total_peak_bytes"]) if ok else r.get("status", "-"),
                     "measured__sort": r.get("measured_total_peak_bytes") if ok else None,
                     "error": (f"{r['error_bytes']:+,d} B ({100 * rel:.3f}%)" if ok else "-"), "error__sort": rel,
                     "cats": ("exact" if r.get("categories_exact") else "differ") if ok else "-",
                     "time": f"{fmt_relative(r.get('measured_relative_step_time'))} / {fmt_relative(r.get('predicted_relative_step_time'))}",
                     "time__sort": r.get("measured_relative_step_time")})
        records.append(r)
    cols = [column("technique", "technique", kind="tech"), column("factor", "beyond", num=True),
            column("size", size, num=True), column("predicted", "predicted peak", num=True),
            column("measured", "memlab measure", num=True), column("error", "error (predicted - measured)", num=True),
            column("cats", "categories", title="every category's bytes at the peak predicted exactly"),
            column("time", "time measured / predicted", num=True,
                   title="relative step time (technique / plain, thread CPU time at one thread)")]
    line = "no check measured" if worst is None else ("every prediction exact to the byte" if worst == 0
                                                      else f"largest error {100 * worst:.3f}%")
    return page.table("predictions beyond the measured batches", cols, rows, records), line


def model_page(doc: dict[str, Any], path: str, colors: dict[str, str]) -> dict[str, Any]:
    """The page context of one check document (see the module doc)."""
    page = Page(path)
    name, fam = next(iter(doc["families"].items()))
    decl = as_declaration(fam)
    size, held = decl.sizes[0], _held(fam, decl)
    base = next((e for e in fam["entries"] if e.get("baseline")), fam["entries"][0])
    at = max(doc.get("factors") or [10]) * int(doc.get("measured_max") or 8)
    params = predict(fam, base, {**held, size: 1})["peak_by_category_bytes"]["parameters"]
    budgets, _ = _budget_table(page, fam, decl, held, colors)
    chart, cats = _category_part(page, fam, decl, held, at)
    checks, worst = _checks_table(page, doc, size)
    stem = name.split(":", 1)[-1]
    return page.done({
        "template": "model.html", "path": path, "title": f"Model: {stem}",
        "model_file": doc.get("model_file", ""), "family": name, "optimizer": doc.get("optimizer", DEFAULTS.optimizer),
        "size": size, "held": ", ".join(f"{k}={v}" for k, v in held.items() if v is not None and str(v).strip()),
        "parameter_bytes": fmt_mib(params),
        "trace_values": ", ".join(map(str, decl.trace_values)), "measured_max": doc.get("measured_max"),
        "factors": ", ".join(f"{f}x" for f in doc.get("factors") or []), "worst": worst,
        "budgets_gib": list(GPU_BUDGETS_GIB), "budgets": budgets, "chart": chart, "categories": cats,
        "at": at, "checks": checks, "not_modelled": list(fam.get("not_modelled", [])),
        "bounded": [{"technique": e["technique"], "why": b["text"]} for e in fam["entries"]
                    if (b := bounded_reading(e))], "bound_fraction": f"{BOUND_FRACTION:.0%}",
        "check_notes": [{"row": k, "why": str(v)} for k, v in sorted((doc.get("notes") or {}).items())],
        "reduced": str(fam.get("reduced_fit") or ""),
        "fit_seconds": doc.get("fit_seconds"), "commit": str(doc.get("memlab_commit") or "")[:12],
    })


def add_model_pages(ctx: dict[str, Any]) -> dict[str, Any]:
    """A page per check file of ``data/model-files`` (``model-<stem>-<optimizer>.html``); their paths
    in ``ctx["model_paths"]`` (``{title: path}``) for the navigation."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        docs, problems = load_model_checks(ctx["data_dir"])
    pages, paths = [], {}
    for file, doc in docs:
        path = f"model-{file.stem}.html"
        try:
            page = model_page(doc, path, ctx.get("colors", {}))
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"{file.name}: left out of the model pages ({type(exc).__name__}: {exc})"[:300])
            continue
        pages.append(page)
        default = page["optimizer"] == DEFAULTS.optimizer
        paths[page["title"] if default else f"{page['title']} ({page['optimizer']})"] = path
    return {**ctx, "pages": ctx["pages"] + pages, "model_paths": paths, "problems": ctx["problems"] + problems}
