"""The Choose page: which technique and knob setting fit a step in a memory budget, answered in the browser.

The committed memory models (``data/models/cpu-float32-<optimizer>.json``, NOTE [ advisor models ] in
:mod:`memlab.advisor.model`) are checked here, reduced to what the evaluation needs and embedded in the
page as JSON; ``static/choose.js`` evaluates them with plain JavaScript (BigInt bytes, no server, no
network) the way :func:`memlab.advisor.advise` does, and the originals are copied beside the page
(``models/*.json``) for download.  A test evaluates the same models in Python and in Chromium and
compares the bytes (``tests/test_site_choose.py``).

# NOTE [ the Choose page agrees with memlab advise ]
What ``choose.js`` repeats of the Python advisor, rule for rule (change both together):
* the loop of a family (:meth:`memlab.core.loops.Loop.loop_of`): read from the family's
  advisor declaration in the model file (:meth:`~memlab.core.loops.Loop.page_rule`) and
  shipped with the models, so neither this module nor the script holds a family name;
* a class per loop count (``k`` exact, else the first ``k_min <= k`` with ``m = k - k_min``), each
  piece's categories as integer polynomials (BigInt), the maximising piece (first on a tie);
* chunk sizes tried when no knob is given (:meth:`memlab.core.loops.Chunks.knob_candidates`);
* the relative time (:func:`memlab.advisor.model.predict_time`, its page-fault term on CPU only:
  :func:`memlab.advisor.model.mmapped_bytes`) in the same float operations and order, floored at the
  shipped ``time_floor`` (:func:`memlab.advisor.model.clamp_time`), rounded to 3 decimals as Python's
  ``round`` does (half to even on an exact tie); its marks (:func:`memlab.advisor.advise.time_cell`) and
  band (:func:`memlab.advisor.model.time_band`, shipped as text);
* the CUDA need (:func:`memlab.advisor.advise.cuda_need`) from the shipped :data:`CUDA_MARGIN`;
* the budget's units (:func:`memlab.advisor.advise.parse_budget`), the ranking (time, then need), the
  Pareto front, what cannot fit, and the extrapolation flags;
* for a family with a ``batch`` size, the micro-batch answer (:func:`memlab.advisor.micro.advise_micro`,
  NOTE [ micro-batches from a whole-step model ]): the low and high bounds from the pieces at B/K, the
  divisors tried, the fastest setting at the fewest K, the ranking of the exact answers and the reasons.
A family without a valid declaration (or of a loop kind the script does not know), or a model entry of
an unexpected shape, is left out of the page with a problem line (methodology page), never evaluated
wrongly.
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

from .. import results as R
from ..advisor.advise import CUDA_MARGIN, UNITS, AdviceError, advise, error_bound
from ..advisor.micro import measured_under_bytes
from ..advisor.decision import (changes_dtype, declared_not_modelled, measured_params, not_modelled,
                                registered_techniques, time_error)
from ..core.declaration import as_declaration
from ..advisor.gpu_evidence import format_gpu_evidence, gpu_evidence
from ..advisor.model import CATEGORIES, SCHEMA, chunks_timed, time_band, time_floor
from ..core.record import is_number as _num
from ..core.setting import DEFAULTS
from .figures import CATEGORY_COLORS, color_of
from .notes import CATEGORY_NAMES
from .page import Page
from .tables import column
from .text import fmt_relative

__all__ = ["PAGE_LOOP_KINDS", "loop_rule", "load_models", "compact_models", "add_choose_page", "model_files"]

#: the loop kinds ``choose.js`` evaluates (``loopOf``): ``none`` (k = 1, variables the sizes),
#: ``chunks`` (k = ceil(rows / min(knob, rows)), variables the sizes plus ``chunk`` and ``last``) and
#: ``count`` (k = (size - offset) / per, variables the other sizes) and ``chunks_of`` (each knob chunks
#: its own rows, a size or a product of sizes; variables as ``chunks``) and ``repeated`` (an outer loop
#: counted by a size around one of the others, its rule ``inner``; the size a variable too)
PAGE_LOOP_KINDS = ("none", "chunks", "count", "chunks_of", "repeated")
_MONOMIAL = re.compile(r"^(1|[a-z_]+(\*[a-z_]+)*)$")
_TIME_KEYS = ("r", "c", "o")


def model_files(data_dir: Path) -> list[Path]:
    """``<data_dir>/models/cpu-float32-*.json`` (listed, not opened)."""
    return [p for p in R.list_input_files(Path(data_dir) / "models", ".json") if p.name.startswith("cpu-float32-")]


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2 ** 53


def _spec_ok(spec: Any) -> bool:
    return isinstance(spec, dict) and all(_int(spec.get(k)) for k in ("default", "low", "high")) \
        and 1 <= spec["low"] <= spec["default"] <= spec["high"]


def _poly_ok(poly: Any, variables: set[str]) -> bool:
    return isinstance(poly, dict) and all(
        isinstance(k, str) and _MONOMIAL.match(k) and _int(c) and (k == "1" or set(k.split("*")) <= variables)
        for k, c in poly.items())


def _allocations_ok(classes: Any, variables: set[str]) -> bool:
    """Each class lists its ``allocations`` as ``[q, monomial, a, b]`` or ``[q, monomial, count polynomial]``
    (NOTE [ page faults in the time model ], NOTE [ outer loops ])."""
    return isinstance(classes, list) and bool(classes) and all(
        isinstance(c, dict) and (_int(c.get("k")) or _int(c.get("k_min"))) and isinstance(c.get("allocations"), list)
        and all(isinstance(x, list) and len(x) in (3, 4) and _poly_ok({x[1]: x[0]}, variables)
                and (_poly_ok(x[2], variables | {"m"}) if len(x) == 3 else _int(x[2]) and _int(x[3]))
                for x in c["allocations"]) for c in classes)


def _fault_ok(fault: Any, classes: list, variables: set[str]) -> bool:
    return isinstance(fault, dict) and _num(fault.get("per_byte")) and _int(fault.get("ceiling_bytes")) \
        and _allocations_ok(fault.get("baseline"), variables) and _allocations_ok(classes, variables)


def _components_ok(t: dict, sizes_and_knobs: set[str]) -> bool:
    """A ``components`` time model (NOTE [ work components ] in :mod:`memlab.advisor.fit`): ``work``
    names monomials, ``r`` and ``baseline_cost`` a number per name (``baseline_cost`` also ``"1"``)."""
    work, r, cost = t.get("work"), t.get("r"), t.get("baseline_cost")
    return isinstance(work, dict) and bool(work) and all(
        isinstance(n, str) and _poly_ok({m: 1}, sizes_and_knobs) for n, m in work.items()) \
        and isinstance(r, dict) and set(r) == set(work) and all(_num(v) for v in r.values()) \
        and isinstance(cost, dict) and set(cost) == set(work) | {"1"} and all(_num(v) for v in cost.values()) \
        and _num(t.get("c")) and _num(t.get("o")) and _chunk_terms_ok(t, sizes_and_knobs)


def _chunk_terms_ok(t: dict, sizes_and_knobs: set[str]) -> bool:
    """A time model's optional per-chunk terms (NOTE [ per-chunk costs ] in :mod:`memlab.advisor.fit`):
    ``o_scale`` a monomial of the sizes, ``r_per_chunk`` a number per work component, ``o_work`` a
    monomial of the sizes with its number ``o_work_cost``."""
    scale, split, grow = t.get("o_scale"), t.get("r_per_chunk"), t.get("o_work")
    work = t.get("work") if isinstance(t.get("work"), dict) else {}
    return (scale is None or (isinstance(scale, str) and _poly_ok({scale: 1}, sizes_and_knobs))) and (
        split is None or (isinstance(split, dict) and set(split) <= set(work) and all(_num(v) for v in split.values()))
    ) and (grow is None or (isinstance(grow, str) and _poly_ok({grow: 1}, sizes_and_knobs) and _num(t.get("o_work_cost"))))


def _entry_problem(entry: Any, variables: set[str], sizes: set[str], knobs: set[str]) -> str | None:
    """Why a model entry cannot be evaluated by the page (None when it can)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("technique"), str) or not isinstance(entry.get("label"), str):
        return "an entry without technique and label"
    if not isinstance(entry.get("knobs"), list) or not set(entry["knobs"]) <= knobs:
        return f"{entry['label']}: knobs {R.short_repr(entry.get('knobs'))} are not the family's"
    classes = entry.get("classes")
    if not isinstance(classes, list) or not classes:
        return f"{entry['label']}: no classes"
    for c in classes:
        if not isinstance(c, dict) or not (_int(c.get("k")) or _int(c.get("k_min"))):
            return f"{entry['label']}: a class without k or k_min"
        pieces = c.get("pieces")
        if not isinstance(pieces, list) or not pieces or not all(
                isinstance(p, dict) and set(p) <= set(CATEGORIES) and all(_poly_ok(q, variables | {"m"}) for q in p.values())
                for p in pieces):
            return f"{entry['label']}: a class whose pieces are not category -> integer polynomial"
    t = entry.get("time")
    if t is not None and not isinstance(t, dict):
        return f"{entry['label']}: time is not an object"
    if isinstance(t, dict) and t.get("kind") == "work" and not (
            all(_num(t.get(k)) for k in _TIME_KEYS) and _poly_ok({t.get("work"): 1}, sizes | knobs)
            and _chunk_terms_ok(t, sizes | knobs)):
        return f"{entry['label']}: a work-scaled time model without r, c, o, work, or with an o_scale or o_work " \
            "that is not a product of sizes"
    if isinstance(t, dict) and t.get("kind") == "components" and not _components_ok(t, sizes | knobs):
        return (f"{entry['label']}: a work-components time model without work, r, baseline_cost, c, o, or with an "
                "o_scale or r_per_chunk that is not a product of sizes or a number per component")
    if isinstance(t, dict) and t.get("kind") in ("work", "components") and t.get("fault") is not None and not _fault_ok(
            t["fault"], classes, variables):
        return f"{entry['label']}: a page-fault term without per_byte, ceiling_bytes, baseline and allocations"
    if isinstance(t, dict) and t.get("kind") == "constant" and not _num(t.get("a")):
        return f"{entry['label']}: a constant time model without a"
    for key in ("validated_range", "fitted_range"):
        r = entry.get(key, {})
        if not isinstance(r, dict) or not all(isinstance(v, list) and len(v) == 2 and all(map(_int, v)) for v in r.values()):
            return f"{entry['label']}: {key} is not name -> [low, high]"
    return None


def _compact_entry(entry: dict, dtype: Any = None) -> dict[str, Any]:
    t = entry.get("time") or {}
    time = {k: t[k] for k in ("kind", "a", *_TIME_KEYS, "work", "baseline_cost", "fault", "o_scale", "r_per_chunk",
                              "o_work", "o_work_cost") if k in t} \
        if t.get("kind") in ("constant", "work", "components") else None
    if time and "fault" in time:
        time["fault"] = {k: time["fault"][k] for k in ("per_byte", "ceiling_bytes", "baseline")}
    return {"technique": entry["technique"], "label": entry["label"], "fixed": entry.get("fixed") or {},
            "knobs": list(entry["knobs"]), "peer": entry.get("peer") is True, "baseline": entry.get("baseline") is True,
            "recommendable": entry.get("recommendable") is True, "classes": entry["classes"], "time": time,
            "changes_dtype": changes_dtype(entry, dtype), "time_floor": time_floor(entry) if time else None,
            "time_band": time_band(entry), "chunks_timed": chunks_timed(entry) if time else None,
            "validated_range": entry.get("validated_range", {}), "fitted_range": entry.get("fitted_range", {}),
            "error": error_bound(entry)["text"], "measured_under_bytes": measured_under_bytes(entry)}


def loop_rule(name: str, family: Any) -> tuple[dict[str, Any] | None, str | None]:
    """``(the page's loop rule, None)`` from a model file's family ``name`` (its advisor declaration),
    or ``(None, why not)``; ``order`` in the rule is how the form lists the sizes."""
    try:
        decl = as_declaration(family)
    except ValueError as exc:
        return None, str(exc)
    if decl.name != name:
        return None, f"its advisor declaration is family {decl.name!r}'s"
    if decl.loop.kind not in PAGE_LOOP_KINDS:
        return None, f"loop kind {decl.loop.kind!r} is not one the page evaluates ({', '.join(PAGE_LOOP_KINDS)})"
    return decl.loop.page_rule(decl.sizes), None


def compact_models(data: Any, name: str) -> tuple[dict[str, Any] | None, list[str]]:
    """One model file reduced to what ``choose.js`` evaluates, and the problems that left parts out."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("families"), dict):
        return None, [f"{name}: not a memlab models file of schema {SCHEMA}; left out of the Choose page"]
    if not isinstance(data.get("optimizer"), str):
        return None, [f"{name}: no optimizer named; left out of the Choose page"]
    problems, families = [], {}
    for fam, f in sorted(data["families"].items()):
        loop, why = loop_rule(fam, f)
        if loop is None:
            problems.append(f"{name}: family {fam!r}: {why}; left out of the Choose page")
            continue
        sizes, knobs = f.get("sizes") if isinstance(f, dict) else None, f.get("knobs") if isinstance(f, dict) else None
        if not (isinstance(sizes, dict) and isinstance(knobs, dict) and all(map(_spec_ok, sizes.values()))
                and all(map(_spec_ok, knobs.values())) and isinstance(f.get("entries"), list)):
            problems.append(f"{name}: family {fam!r} has malformed sizes, knobs or entries; left out")
            continue
        rule = loop["inner"] if loop["kind"] == "repeated" else loop
        need = set(loop["sizes"]) | {rule.get("rows"), loop.get("count")} - {None}
        loop_knobs = {rule["knob"]} if rule["kind"] == "chunks" else set(rule.get("knobs") or ())
        if not need <= set(sizes) or not loop_knobs <= set(knobs):
            problems.append(f"{name}: family {fam!r} lacks the sizes its loop rule needs; left out")
            continue
        variables = set(sizes) | ({"chunk", "last"} if rule["kind"] in ("chunks", "chunks_of") else set())
        entries = []
        for entry in f["entries"]:
            why = _entry_problem(entry, variables, set(sizes), set(knobs))
            if why:
                problems.append(f"{name}: family {fam!r}: {why}; entry left out of the Choose page")
            else:
                entries.append(_compact_entry(entry, data.get("dtype")))
        if entries:
            natural = [n for n in loop.get("order", ()) if n in sizes]
            families[fam] = {"order": natural + sorted(set(sizes) - set(natural)), "sizes": sizes, "knobs": knobs,
                             "workload": f.get("workload"), "workload_fixed": f.get("workload_fixed") or {},
                             "loop": loop, "entries": entries}
    if not families:
        return None, problems
    return {"optimizer": data["optimizer"], "memlab_commit": str(data.get("memlab_commit") or ""),
            "dtype": data.get("dtype"), "device": data.get("device"), "mode": data.get("mode"),
            "loss": data.get("loss"), "families": families}, problems


def _decision_inputs(compact: dict[str, Any], data_dir: Path, measured: dict[str, dict[str, Any]]) -> None:
    """Each family's time error and measured-but-not-modelled techniques (:mod:`memlab.advisor.decision`,
    as :func:`memlab.advisor.advise` reads them), added to the compact models the page ships."""
    for name, fam in compact["families"].items():
        fam["time_error"] = time_error(name, compact["optimizer"], Path(data_dir) / "models")
        fam["not_modelled"] = not_modelled(name, fam, measured.get(name, {}), registered_techniques(name),
                                           declared_not_modelled(name))


def load_models(data_dir: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str], list[str]]:
    """``(compact models by optimizer, file texts to ship by site path, problems)`` from ``data/models``."""
    models, files, problems = {}, {}, []
    measured = measured_params(Path(data_dir) / "sweeps")  # the Overview warns about its bad lines
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", R.ResultsWarning)
        loaded = R.load_json_objects(model_files(data_dir))
    problems += [str(w.message) for w in caught if issubclass(w.category, R.ResultsWarning)]
    for path, data in loaded:
        compact, why = compact_models(data, path.name)
        problems += why
        if compact is None:
            continue
        if compact["optimizer"] in models:
            problems.append(f"{path.name}: a second model file for optimizer {compact['optimizer']!r}; left out")
            continue
        _decision_inputs(compact, data_dir, measured)
        models[compact["optimizer"]] = {**compact, "file": f"models/{path.name}"}
        files[f"models/{path.name}"] = json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    return dict(sorted(models.items())), files, problems


def _ranges(r: dict[str, list[int]]) -> str:
    return ", ".join(f"{k} {lo:,}-{hi:,}" for k, (lo, hi) in sorted(r.items())) or "-"


def _time_text(t: dict | None) -> str:
    if not t:
        return "-"
    if t["kind"] == "constant":
        return f"{fmt_relative(t['a'])} at any size"
    per_chunk = f" + {t['o']:.3g} per further chunk" if t.get("o") else ""
    if t["kind"] == "components":  # NOTE [ work components ]
        def terms(coef: dict) -> str:
            return " + ".join(f"{coef[n]:.3g} {t['work'][n]}" for n in sorted(t["work"]))
        return (f"({terms(t['r'])} + {t['c']:.3g}{per_chunk}) / ({terms(t['baseline_cost'])} + "
                f"{t['baseline_cost']['1']:.3g}), ns of CPU time: technique over baseline")
    fault = t.get("fault") or {}
    if fault.get("per_byte"):
        return (f"({t['r']:.3g} {t['work']} + {t['c']:.3g}{per_chunk} + {fault['per_byte']:.3g} M) / "
                f"({t['work']} + {fault['per_byte']:.3g} M_base) on CPU, M: bytes in blocks of 32 MiB or more")
    return f"{fmt_relative(t['r'])} + ({t['c']:.3g}{per_chunk}) / {t['work']}"


def _models_table(page: Page, models: dict[str, dict[str, Any]], colors: dict[str, str]) -> dict[str, Any]:
    """One row per optimizer, family and modelled technique: knobs, validated range, error, time model."""
    cols = [column("technique", "technique", kind="tech"), column("label", "configuration", kind="code"),
            column("optimizer", "optimizer"), column("family", "family"), column("knobs", "knobs"),
            column("validated", "validated at", title="sizes of the held-out checks: beyond them a size is flagged"),
            column("error", "model error", title="held-out traces and measurements against the model"),
            column("time", "relative step model")]
    cells, records = [], []
    for opt, m in models.items():
        for fam, f in m["families"].items():
            for e in f["entries"]:
                cells.append({"optimizer": opt, "family": fam, "technique": e["technique"], "peer": e["peer"],
                              "is_baseline": e["baseline"], "note": None, "label": e["label"],
                              "knobs": ", ".join(e["knobs"]) or "-", "validated": _ranges(e["validated_range"]),
                              "error": e["error"] + ("" if e["recommendable"] else "; not recommended"),
                              "time": _time_text(e["time"]) + "; band " + e["time_band"]["text"]})
                records.append({"optimizer": opt, "family": fam, "technique": e["technique"], "label": e["label"],
                                "knobs": e["knobs"], "validated_range": e["validated_range"], "error": e["error"],
                                "recommendable": e["recommendable"], "time": e["time"]})
    return page.table("modelled techniques", cols, cells, records)


#: the page's budget before anyone types one (the form's value in ``choose.html``)
DEFAULT_BUDGET = "2GiB"


def _default_answer(data_dir: Path, family: str, optimizer: str) -> dict[str, Any] | None:
    """:func:`memlab.advisor.advise` at the page's defaults (the first family, its default sizes,
    :data:`DEFAULT_BUDGET`, CPU), its models as fitted: what the page says before its script runs.
    A model file the page reads but ``advise`` refuses (hostile input) leaves the script to answer,
    with a warning naming why."""
    try:
        a = advise(family, DEFAULT_BUDGET, [], optimizer=optimizer, models_dir=Path(data_dir) / "models",
                   sweeps_dir=Path(data_dir) / "sweeps", host=None)
    except AdviceError:  # nothing fits at the defaults: the script says so
        return None
    except Exception as exc:  # noqa: BLE001 - a malformed model file must not stop the site
        warnings.warn(f"choose.html: memlab advise at the page's defaults failed ({type(exc).__name__}: "
                      f"{R.short_repr(str(exc), 120)}); the page's script answers alone", R.ResultsWarning, stacklevel=2)
        return None
    return {"family": family, "optimizer": optimizer, "sizes": a["sizes"], "plain": a["plain"],
            "not_modelled": a["not_modelled"]}


def add_choose_page(ctx: dict[str, Any]) -> dict[str, Any]:
    """The Choose page, when ``data/models`` holds models the page can evaluate (else no page)."""
    models, files, problems = load_models(ctx["data_dir"])
    for p in problems:
        warnings.warn(p, R.ResultsWarning, stacklevel=2)
    ctx = {**ctx, "problems": ctx["problems"] + problems}
    if not models:
        return ctx
    page = Page("choose.html")
    for fixed in ("inputs", "answer", "fits", "categories", "pareto", "cannot-fit", "models", "fits-table",
                  "pareto-table", "cannot-table", "choose-extrapolation", "choose-plain", "not-modelled",
                  "micro-batches", "micro-table"):
        page.anchor(fixed)  # ids the template and the script write
    techniques = sorted({e["technique"] for m in models.values() for f in m["families"].values() for e in f["entries"]})
    app = {"models": models, "default_optimizer": DEFAULTS.optimizer if DEFAULTS.optimizer in models else next(iter(models)),
           "units": {k: v for k, v in UNITS.items()}, "cuda_margin": CUDA_MARGIN,
           "categories": list(CATEGORIES), "category_names": CATEGORY_NAMES,
           "category_colors": {c: CATEGORY_COLORS.get(c, "#444444") for c in CATEGORIES},
           "colors": {t: color_of(ctx.get("colors", {}), t) for t in techniques}}
    shipped = [{"file": m["file"], "optimizer": o} for o, m in models.items()]
    families = sorted({f for m in models.values() for f in m["families"]})
    gpu_dir = Path(ctx["data_dir"]) / "gpu-check"
    evidence = {}
    for f in families:
        found = [m["families"][f] for m in models.values() if f in m["families"]]
        techniques = sorted({e["technique"] for fam in found for e in fam["entries"]})
        evidence[f] = format_gpu_evidence(gpu_evidence(techniques, found[0]["workload_fixed"], gpu_dir),
                                          CUDA_MARGIN["fraction"])
    page.files.update(files)
    default = _default_answer(ctx["data_dir"], families[0], app["default_optimizer"])
    return {**ctx, "pages": ctx["pages"] + [page.done({
        "default_answer": default, "default_budget": DEFAULT_BUDGET,
        "template": "choose.html", "path": "choose.html", "title": "Choose a technique for your step",
        "app": json.dumps(app, sort_keys=True, separators=(",", ":"), allow_nan=False),
        "families": families, "gpu_evidence": evidence,
        "optimizers": list(models), "shipped": shipped, "models_table": _models_table(page, models, app["colors"]),
        "commits": sorted({m["memlab_commit"][:12] for m in models.values() if m["memlab_commit"]})})]}
