"""``memlab advise``: which technique and knob setting fit a step in a memory budget, and how slow they are.

Answers from the committed models (:mod:`memlab.advisor.model`) without measuring and without torch;
``verify`` measures the first recommendation.
"""
from __future__ import annotations

import difflib
import os
import re
import sys
from typing import Any, Mapping, Sequence

import memlab
from ..core.host import describe, kernel_host
from ..core.params import Param, split_params
from ..core.record import Category
from ..core.setting import DEFAULTS, Setting
from ..core.units import MiB
from .decision import (changes_dtype, declared_not_modelled, fixed_selection, measured_params, not_modelled,
                       order_fits, plain_verdict, registered_techniques, time_error)
from ..core.declaration import as_declaration
from .gpu_evidence import format_gpu_evidence, gpu_evidence
from .model import (CATEGORIES, chunks_timed, clamp_time, load_models, models_path, predict, predict_time,
                    time_band)
from ..registry import builtin_families, get_technique, list_advisors, list_families

__all__ = ["AdviceError", "parse_budget", "parse_params", "knob_settings", "models_for", "read_query", "advise", "larger_size", "format_advice", "format_verify", "verify", "cuda_need",
           "fmt_bytes", "format_categories", "error_bound", "bounded_reading", "CUDA_MARGIN", "MAX_BUDGET_BYTES",
           "UNITS", "time_note", "time_fields", "time_cell"]

GiB = 1024 * MiB
#: the caching allocator's margin over the exact allocated peak when no CUDA model is fitted (NOTE in
#: :func:`cuda_need`): 10% + 64 MiB, plus cuBLAS (8 MiB + 128 KiB) and cuBLASLt (1 MiB) workspaces
CUDA_MARGIN = {"fraction": 0.10, "fixed_bytes": 64 * MiB, "workspace_bytes": 4096 * 1024 * 2 + 16 * 1024 * 8 + MiB}


class AdviceError(ValueError):
    """Bad input or a budget nothing meets: one line for the user (exit status 2)."""


UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": MiB, "mb": 10**6, "mib": MiB,
          "g": GiB, "gb": 10**9, "gib": GiB, "t": 1024 * GiB, "tb": 10**12, "tib": 1024 * GiB}


#: the largest budget read: 1 YiB (2**80 bytes), far beyond any machine, still a float's exact power
#: of two (the Choose page refuses the same: choose.js)
MAX_BUDGET_BYTES = 2**80


def parse_budget(text: str) -> int:
    """``'2GiB'``, ``'1.5 GB'``, ``'512MiB'``, ``'3e9'`` -> bytes (K/M/G/T alone are binary).

    Raises AdviceError (one line naming the text and the valid range) for anything that is not a
    size, or a size under 1 byte or over :data:`MAX_BUDGET_BYTES` (``1e400GiB`` included).
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in UNITS:
        raise AdviceError(f"--budget {text!r} is not a memory size; expected 1 byte to 1 YiB, written e.g. "
                          f"2GiB, 1.5GB, 512MiB or bytes")
    value = float(m.group(1)) * UNITS[unit]  # inf for 1e400: refused below, never int()ed
    if not 1 <= value <= MAX_BUDGET_BYTES:
        raise AdviceError(f"--budget {text!r} is out of range: expected 1 byte to 1 YiB ({MAX_BUDGET_BYTES} bytes)")
    return int(value)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GiB:
        return f"{sign}{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{sign}{n / MiB:.1f} MiB"
    return f"{sign}{n / 1024:.1f} KiB" if n >= 1024 else f"{sign}{n:.0f} B"  # --budget 10KiB is not "0.0 MiB"


def cuda_need(total: int) -> int:
    """Bytes to reserve on a GPU for a step whose exact allocated peak is ``total``.

    The models are of exact allocated bytes (CPU; CUDA allocates the same tensors, rounded to 512 B).
    The caching allocator reserves more (2 MiB / 20 MiB segments, block rounding, fragmentation), which
    is not a polynomial of the sizes, so it is a stated margin here: :data:`CUDA_MARGIN`.  The CUDA
    context (hundreds of MiB, outside the allocator) is not included.
    """
    return int(total * (1 + CUDA_MARGIN["fraction"])) + CUDA_MARGIN["fixed_bytes"] + CUDA_MARGIN["workspace_bytes"]


def parse_params(fam: Mapping[str, Any], family: str, pairs: Sequence[str]) -> tuple[dict, list[str], list[dict]]:
    """``(sizes and knobs given or defaulted, notes, the entries selected)``: a parameter an entry's label
    fixes (``slice_accumulate[backward=manual]``: ``--param backward=manual``) selects the entries that fix
    it so and those that do not fix it."""
    specs = {**fam["sizes"], **fam["knobs"]}
    fixed = fam["workload_fixed"]
    labelled = {k: v for e in fam["entries"] for k, v in e["fixed"].items()}
    valid = sorted({*specs, *fixed, *labelled})
    out: dict[str, Any] = {}
    entries = list(fam["entries"])
    try:
        given = split_params(pairs)
    except ValueError as exc:  # a malformed or repeated --param
        raise AdviceError(str(exc)) from None
    for key, text in given.items():
        if key in fixed:
            value = Param(fixed[key]).parse(key, text.strip())
            if value != fixed[key]:
                raise AdviceError(f"the {family} models cover {key}={fixed[key]!r} only (got {value!r})")
            continue
        if key in labelled and key not in specs:
            try:
                chosen = fixed_selection({**fam, "entries": entries}, family, key,
                                         Param(labelled[key]).parse(key, text.strip()))
            except ValueError as exc:
                raise AdviceError(str(exc)) from None
            entries = chosen
            continue
        if key not in specs:
            raise AdviceError(f"family {family!r} has no parameter {key!r}; valid parameters: {', '.join(valid)}")
        s = specs[key]
        out[key] = Param(s["default"], low=s["low"], high=s["high"]).parse(key, text.strip())
    notes = []
    for size, s in fam["sizes"].items():
        if size not in out:
            out[size] = s["default"]
            notes.append(f"{size}={s['default']} (default)")
    return out, notes, entries


def _not_modelled(family: str, fitted: list[str], optimizer: str) -> str:
    """One line for a family the model file lacks: not a family, declares no model, or not fitted.

    A name that is no built-in family's folder, with no plug-in named, is refused from the folder scan
    alone; otherwise this error path reads the registry (and so imports the families' modules, torch
    with them).
    """
    where = f"modelled families ({optimizer}): {', '.join(fitted) or 'none'}"
    plugins_possible = bool(os.environ.get("MEMLAB_PLUGINS")) or "torch" in sys.modules
    known = {name for name, _folder in builtin_families()} if not plugins_possible else set(list_families())
    if family not in known:
        near = difflib.get_close_matches(family, sorted(known | set(fitted)), n=1)
        return f"unknown family {family!r}{f' (did you mean {near[0]!r}?)' if near else ''}; {where}"
    if family not in list_advisors():
        return (f"family {family!r} declares no advisor model; {where} (declare one beside its workload: "
                f"class M(memlab.AdvisorModel, family={family!r}))")
    return f"family {family!r} is declared but not fitted; {where} (fit it: memlab advise --fit --family {family})"


def error_bound(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The model error of one entry as its held-out checks found it: bytes, fraction and a text."""
    measured = [r for r in entry.get("held_out_measured", []) if r.get("status") == "ok"]
    traced = entry.get("held_out_traced", {})
    worst = entry.get("max_abs_error_bytes")
    rel = entry.get("max_rel_error")
    text = (f"exact on {len(measured)} measured + {traced.get('points', 0)} traced held-out" if worst == 0
            else f"±{100 * (rel or 0):.2f}% (max {worst} B) on {len(measured)} measured held-out")
    if worst is None:  # a reduced fit: no held-out measurement (its traced held-out checks, if any, said)
        off = traced.get("max_abs_error_bytes")
        text = "no measured held-out check in the fit" + (
            f"; {traced['points']} traced held-out, at most {off:,} B off" if traced.get("points") and off is not None
            else "")
    return {"max_abs_error_bytes": worst, "max_rel_error": rel, "measured_points": len(measured),
            "traced_points": traced.get("points", 0), "text": text}


def bounded_reading(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """The events of ``entry``'s traced step that are no polynomial of the sizes and are read as bounds
    (NOTE [ polynomial allocations ] in :mod:`memlab.advisor.trace`): allocations (and their frees) at
    their largest traced size, frees of memory allocated before the step (``read: smallest``) at their
    smallest; from its classes' ``bounded`` records; None when there are none.

    Returns:
        ``allocations`` and ``early_frees`` (how many), ``ops`` (which, by phase), ``at_most_bytes`` (the
        allocations' largest sizes and the early frees' spreads, summed: the most the predicted peak is
        overstated by while each stays within its traced sizes), ``traced_spread_bytes`` (the spreads
        summed: the most at the traced sizes) and ``text``; for the class with the largest
        ``at_most_bytes``.  Records without
        ``sign`` (a fit before it was recorded, which read every such event at its largest, early frees
        too) bound nothing: the numbers are None and the text says so.
    """
    records = [b for c in entry.get("classes", []) for b in c.get("bounded", [])]
    if any("sign" not in b for b in records):
        n = len(records)
        return {"allocations": None, "early_frees": None, "at_most_bytes": None, "traced_spread_bytes": None,
                "ops": _ops(records), "text": f"{n} event{'s' if n != 1 else ''} no polynomial of the sizes (kernel scratch), read at the "
                        f"largest traced size by a fit that did not record allocations apart from frees of memory "
                        f"allocated before the step: not a bound (a free so read understates); refit to bound it"}
    best = None
    for c in entry.get("classes", []):
        allocs = [b for b in c.get("bounded", []) if b["sign"] > 0]
        early = [b for b in c.get("bounded", []) if b.get("read") == "smallest"]
        if allocs or early:
            found = (sum(b["bytes"] for b in allocs) + sum(b["spread_bytes"] for b in early), len(allocs), len(early),
                     sum(b["spread_bytes"] for b in allocs + early), _ops(allocs + early))
            best = found if best is None else max(best, found)
    if best is None:
        return None
    total, n, frees, spread, ops = best
    what = " and ".join([f"{n} allocation{'s' if n != 1 else ''}"] * bool(n)
                        + [f"{frees} free{'s' if frees != 1 else ''} of memory allocated before the step"] * bool(frees))
    what += f" ({ops})"
    read = ("read at the smallest traced size" if not n else
            "read at the largest traced size" + (" (the frees at the smallest)" if frees else ""))
    text = (f"{what}, no polynomial of the sizes (kernel scratch), {read}: the peak overstated by at most "
            f"{fmt_bytes(total)} ({total:,} B; {spread:,} B at the traced sizes)")
    return {"allocations": n, "early_frees": frees, "at_most_bytes": total, "traced_spread_bytes": spread,
            "ops": ops, "text": text}


def _ops(records: Sequence[Mapping[str, Any]]) -> str:
    """``'aten::mm in backward; an unnamed op in forward'``: the ops of ``bounded`` records by phase."""
    phases: dict[str, set[str]] = {}
    for b in records:
        phases.setdefault(b["phase"], set()).add("an unnamed op" if b["op"] in ("?", "") else b["op"])
    return "; ".join(f"{', '.join(sorted(ops))} in {phase}" for phase, ops in sorted(phases.items()))


def _extrapolation(fam: Mapping[str, Any], sizes: Mapping[str, int]) -> list[dict[str, Any]]:
    out = []
    for size in fam["sizes"]:
        highs = [e["validated_range"][size][1] for e in fam["entries"] if size in e.get("validated_range", {})]
        if highs and sizes[size] > min(highs):
            hi = min(highs)
            out.append({"param": size, "value": sizes[size], "validated_max": hi,
                        "factor": round(sizes[size] / hi, 1)})
    return out


def advise(family: str, budget: int | str, params: Sequence[str] = (), *, optimizer: str = DEFAULTS.optimizer,
           device: str = "cpu", models_dir=None, gpu_check_dir=None, sweeps_dir=None,
           host: Mapping[str, Any] | None | str = "here") -> dict[str, Any]:
    """Every modelled technique and knob setting predicted to fit ``budget`` bytes, ranked.

    Returns a JSON-ready dict: ``plain`` (whether the family's plain step fits and what a technique
    would buy: NOTE [ plain fits first ] in :mod:`memlab.advisor.decision`), ``fits`` (the plain step
    first when it fits, then by predicted relative step time, times within ``time_error`` tied at one
    ``rank``; each with its ``time_band``, NOTE [ the time band ] in :mod:`memlab.advisor.model`),
    ``pareto`` (settings no other beats on both the need and the time),
    ``cannot_fit`` (with the smallest need each reaches), ``not_modelled`` (the techniques the sweeps
    under ``sweeps_dir``, default ``data/sweeps``, measured that no entry covers, with the reason),
    ``extrapolation`` and ``notes``; for ``device="cuda"`` also ``gpu_evidence``: what the GPU-check
    tables under ``gpu_check_dir`` (default ``data/gpu-check``) measured for this family
    (:mod:`memlab.advisor.gpu_evidence`).  ``host``: the kernel record the models are held for
    (:func:`memlab.model.load_models`; ``"here"``: this machine's, None: as fitted).

    Raises:
        AdviceError: unknown family, parameter, device or optimizer; unparsable budget; nothing fits.
    """
    q = read_query(family, budget, params, optimizer, device, models_dir, host)
    models, fam, decl, budget_bytes = q["models"], q["fam"], q["decl"], q["budget_bytes"]
    chosen, notes, entries, sizes = q["chosen"], q["notes"], q["entries"], q["sizes"]
    selected = {**fam, "entries": entries}
    candidates = _candidates(decl, selected, chosen, sizes, budget_bytes, device, models.get("dtype"))
    usable = [c for c in candidates if c["recommendable"]]
    terr = time_error(family, optimizer, models_dir)
    fits = order_fits([c for c in usable if c["fits"]], terr["fraction"])
    if not fits:
        raise _nothing_fits(family, budget_bytes, sizes, optimizer, device, usable or candidates)
    need = "peak" if device == "cpu" else "CUDA need"
    larger = larger_size(decl, selected, chosen, sizes, budget_bytes, device) if fits[0].get("baseline") else None
    return {
        "family": family, "sizes": sizes, "budget_bytes": budget_bytes, "optimizer": optimizer, "device": device,
        "workload_fixed": fam["workload_fixed"],
        "models": str(models_path(optimizer, models_dir)), "memlab_commit": models.get("memlab_commit"),
        "time_refitted": bool(fam.get("time_refitted")),
        "dtype": models.get("dtype"),
        "plain": plain_verdict(candidates, fits, budget_bytes, terr["fraction"], need, fmt_bytes, larger),
        "fits": fits, "time_error": terr, "time_measured_on": "cpu",
        "pareto": _pareto(usable), "cannot_fit": _cannot_fit(candidates), "notes": notes,
        "not_modelled": not_modelled(family, fam, measured_params(sweeps_dir).get(family, {}),
                                     registered_techniques(family), declared_not_modelled(family)),
        "extrapolation": _extrapolation(fam, sizes), "kernel_warning": kernel_warning(family, fam),
        "cuda_margin": CUDA_MARGIN if device == "cuda" else None,
        "gpu_evidence": gpu_evidence([e.technique for e in decl.entries], decl.workload_fixed, gpu_check_dir) if device == "cuda" else None,
        "time_note": time_note(terr["text"], device, any(c["chunks_timed"] for c in candidates)),
    }


def read_query(family: str, budget: int | str, params: Sequence[str], optimizer: str, device: str, models_dir,
               host) -> dict[str, Any]:
    """A question to the family models, checked: ``models`` (of ``optimizer``, held for ``host``), ``fam``
    (the family's part), ``decl``, ``budget_bytes``, ``chosen`` (sizes and knobs given or defaulted),
    ``notes``, ``entries`` (those ``params`` select) and ``sizes``.

    Raises:
        AdviceError: a bad device, budget, family or parameter (one line naming it and the valid ones).
    """
    if device not in ("cpu", "cuda"):
        raise AdviceError(f"--device {device!r} is not valid; valid: cpu, cuda")
    budget_bytes = parse_budget(budget) if isinstance(budget, str) else int(budget)
    models = models_for(family, optimizer, models_dir, host)
    fam = models["families"][family]
    decl = as_declaration(fam)
    chosen, notes, entries = parse_params(fam, family, params)
    sizes = {s: chosen[s] for s in fam["sizes"]}
    try:
        decl.loop.check(sizes)
    except ValueError as exc:
        raise AdviceError(f"--param {exc}") from None
    return {"models": models, "fam": fam, "decl": decl, "budget_bytes": budget_bytes, "chosen": chosen,
            "notes": notes, "entries": entries, "sizes": sizes}


def models_for(family: str, optimizer: str, models_dir, host) -> dict[str, Any]:
    """The models of ``optimizer`` held for ``host`` (:func:`advise`), which must model ``family``."""
    try:
        models = load_models(optimizer, models_dir, host=kernel_host() if host == "here" else host)
    except ValueError as exc:
        raise AdviceError(str(exc)) from None
    if family not in models["families"]:
        raise AdviceError(_not_modelled(family, sorted(models["families"]), optimizer))
    return models


def _nothing_fits(family: str, budget_bytes: int, sizes: Mapping[str, int], optimizer: str, device: str,
                  pool: Sequence[Mapping[str, Any]]) -> AdviceError:
    """The error when no recommendable setting fits: the smallest need among ``pool``."""
    best = min(pool, key=lambda c: c["need_bytes"])
    knob = "".join(f" {k}={v}" for k, v in best["knobs"].items())
    return AdviceError(
        f"no modelled {family} technique fits {fmt_bytes(budget_bytes)} at "
        f"{' '.join(f'{k}={v}' for k, v in sizes.items())} ({optimizer}, {device}); the smallest predicted "
        f"{'peak' if device == 'cpu' else 'CUDA need'} is {fmt_bytes(best['need_bytes'])} ({best['label']}{knob})")


def time_note(error_text: str, device: str, beyond_timed: bool = False) -> str:
    """What the time column is, and on which device it was measured (the answer's closing line);
    ``beyond_timed``: some setting has more chunks than its time model measured."""
    return ("relative step time (technique step / the family baseline's step, thread CPU time at one "
            "thread) from a model r + (c + (k - 1) * o) / W fitted by least squares to measurements at several "
            "sizes per family (W: the step's work, k: chunks, o: a further chunk's cost, growing with the sizes where "
            "a family declares it: NOTE [ per-chunk costs ]; memlab.advisor.fit.time_model), or for a family whose "
            "work has named components a ratio of the technique's and the baseline's costs summed over them "
            "(NOTE [ work components ]), on CPU with the page faults of blocks glibc maps afresh on every step "
            "(NOTE [ page faults in the time model ]); each setting's own band is its fit's largest residual "
            "(NOTE [ the time band ]), no setting is predicted faster than plain beyond what was measured "
            "(NOTE [ no faster than plain unless measured so ]); the family's held-out error "
            + error_text + ("; a setting with more chunks than its time points measured is predicted too fast "
                            "(docs/evidence/time-model-bias.md)" if beyond_timed else "")
            + ("" if device == "cpu" else "; relative time measured on CPU: a GPU's ratio can differ, "
               "and a technique that changes the dtype is not ranked by it"))


def kernel_warning(family: str, fam: Mapping[str, Any]) -> str | None:
    """One line when ``fam`` (as :func:`load_models` holds it for this host) was fitted on other CPU kernels
    than this machine's and its bytes depend on them (NOTE [ host-dependent bytes ] in :mod:`memlab.core.host`),
    else None."""
    other = fam.get("other_kernels")
    if not other:
        return None
    return (f"the {family} model was fitted on {describe(other['fitted'])}; this CPU runs {describe(other['here'])}, "
            f"whose oneDNN convolutions allocate other bytes: the peaks below may be off here; refit on this machine "
            f"with memlab advise --fit --family {family} --models DIR and pass --models DIR")


def _candidates(decl, fam: dict[str, Any], chosen: dict[str, int], sizes: dict[str, int], budget_bytes: int,
                device: str, dtype: str | None = None) -> list[dict[str, Any]]:
    """Every entry at every knob setting searched (a knob given is held), with its predicted need and time."""
    candidates = []
    for entry in fam["entries"]:
        for knobs in knob_settings(decl, fam, entry, chosen, sizes):
            p = {**sizes, **knobs}
            pred = predict(decl, entry, p)
            need = pred["total_peak_bytes"] if device == "cpu" else cuda_need(pred["total_peak_bytes"])
            candidates.append({
                "technique": entry["technique"], "label": entry["label"], "fixed": entry["fixed"], "knobs": knobs,
                "params": {**entry["fixed"], **p}, "total_peak_bytes": pred["total_peak_bytes"],
                "peak_by_category_bytes": pred["peak_by_category_bytes"], "need_bytes": need,
                "headroom_bytes": budget_bytes - need, "fits": need <= budget_bytes,
                "chunks": pred["k"], "recommendable": entry.get("recommendable", False),
                "error_bound": error_bound(entry), "baseline": entry.get("baseline") is True,
                **time_fields(decl, entry, p, device, pred["k"], dtype),
            })
    return candidates


def time_fields(decl, entry: Mapping[str, Any], params: Mapping[str, int], device: str, k: int,
                dtype: str | None) -> dict[str, Any]:
    """One setting's time: ``relative_step_time`` (floored: NOTE [ no faster than plain unless measured
    so ], 3 decimals), ``time_floored``, ``time_band`` (:func:`memlab.advisor.model.time_band`),
    ``chunks_timed`` (the most chunks the entry's time points measured, when ``k`` is more: the time
    extrapolates the per-chunk cost, else None) and ``time_ranked`` (False on ``device="cuda"`` for a
    technique that changes the dtype: its CPU ratio says nothing of a GPU's)."""
    t, floored = clamp_time(entry, predict_time(decl, entry, params, device))
    timed = chunks_timed(entry)
    return {"relative_step_time": None if t is None else round(t, 3), "time_floored": floored,
            "time_band": time_band(entry), "chunks_timed": timed if timed is not None and k > timed else None,
            "time_ranked": device == "cpu" or not changes_dtype(entry, dtype)}


def knob_settings(decl, fam: Mapping[str, Any], entry: Mapping[str, Any], chosen: Mapping[str, int],
              sizes: Mapping[str, int]) -> list[dict[str, int]]:
    """The knob settings of ``entry`` searched at ``sizes`` (a knob given is held)."""
    settings: list[dict[str, int]] = [{}]
    for knob in entry["knobs"]:
        if knob in chosen:
            settings = [{knob: chosen[knob]}]
        else:
            spec = fam["knobs"][knob]
            settings = [{knob: c} for c in decl.knob_candidates(sizes, int(spec["low"]), int(spec["high"]), knob)]
    return settings


def _largest(ok, low: int, high: int) -> int | None:
    """The largest value from ``low`` to ``high`` at which ``ok`` holds, by doubling then halving (the
    need grows with a size); None when it does not hold at ``low``.  choose.js probes the same values."""
    if not ok(low):
        return None
    good = low
    while True:
        nxt = min(high, good * 2)
        if nxt == good:
            return good
        if not ok(nxt):
            bad = nxt
            break
        good = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good


def larger_size(decl, fam: Mapping[str, Any], chosen: Mapping[str, int], sizes: Mapping[str, int], budget: int,
                device: str) -> dict[str, Any] | None:
    """What a technique buys in size (NOTE [ plain fits first ]): the largest ``batch`` (else the loop's
    rows) at which the plain step fits ``budget`` and at which a recommendable technique does, with the
    setting that needs least there; None when no technique reaches further (or no such size).  A setting
    with more chunks than its entry's time points measured (:func:`~memlab.advisor.model.chunks_timed`)
    is not counted: its bytes are exact but its time is unknown, and the size reached through it was a
    step of a million one-row chunks."""
    rule = fam["declaration"]["loop"]
    rule = rule.get("inner", rule)
    name = "batch" if "batch" in fam["sizes"] else rule.get("rows")
    plain = next((e for e in fam["entries"] if e.get("baseline")), None)
    if name not in fam["sizes"] or plain is None:
        return None

    def needs(entries, v):
        at = {**sizes, name: v}
        for e in entries:
            timed = chunks_timed(e)
            for knobs in knob_settings(decl, fam, e, chosen, at):
                pred = predict(decl, e, {**at, **knobs})
                if timed is not None and pred["k"] > timed:
                    continue
                total = pred["total_peak_bytes"]
                yield (total if device == "cpu" else cuda_need(total)), e, knobs, pred["k"]

    others = [e for e in fam["entries"] if not e.get("baseline") and e.get("recommendable")]
    high = int(fam["sizes"][name]["high"])
    top = _largest(lambda v: next(needs([plain], v))[0] <= budget, sizes[name], high)
    reach = _largest(lambda v: any(n <= budget for n, *_ in needs(others, v)), sizes[name], high)
    if top is None or reach is None or reach <= top:
        return None
    need, e, knobs, k = min(needs(others, reach), key=lambda x: x[0])
    return {"size": name, "plain": top, "technique": reach,
            "setting": {"label": e["label"], "knobs": knobs, "chunks": k, "need_bytes": need}}


def _cannot_fit(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each entry no setting of which fits (or not recommendable), with the smallest need it reaches."""
    cannot = []
    for label in dict.fromkeys(c["label"] for c in candidates):
        mine = [c for c in candidates if c["label"] == label]
        if not any(c["fits"] for c in mine) or not mine[0]["recommendable"]:
            best = min(mine, key=lambda c: c["need_bytes"])
            cannot.append({"label": label, "smallest_need_bytes": best["need_bytes"], "knobs": best["knobs"],
                           "chunks": best["chunks"], "recommendable": best["recommendable"]})
    return cannot


def _pareto(usable: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The settings no other beats on both the need and the time, by need."""
    timed = [c for c in usable if c["relative_step_time"] is not None]
    pareto = [c for c in timed if not any(
        o["need_bytes"] <= c["need_bytes"] and o["relative_step_time"] <= c["relative_step_time"]
        and (o["need_bytes"], o["relative_step_time"]) != (c["need_bytes"], c["relative_step_time"]) for o in timed)]
    return sorted({(c["label"], tuple(sorted(c["knobs"].items()))): c for c in pareto}.values(),
                  key=lambda c: c["need_bytes"])


def format_categories(c: Mapping[str, Any]) -> str:
    """One answer's peak by category as one short line (``params 12.9 MiB  saved 7.2 GiB ...``; zero
    categories left out), read from ``c["peak_by_category_bytes"]``."""
    return "  ".join(f"{Category(k).short} {fmt_bytes(c['peak_by_category_bytes'][k])}" for k in CATEGORIES
                     if c["peak_by_category_bytes"].get(k))


def _plural(n: Any, word: str) -> str:
    """``'1 chunk'``, ``'3 chunks'``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def _knobs(c: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in c["knobs"].items()) + (f" ({_plural(c['chunks'], 'chunk')})" if c["knobs"] else "")


def _time(c: Mapping[str, Any]) -> str:
    t = c["relative_step_time"]
    return "-" if t is None else f"~{t:.2f}x" if t < 10 else f"~{t:.0f}x"


def time_cell(c: Mapping[str, Any]) -> str:
    """A setting's time as the answers print it: the prediction and its marks (floored at a measured
    ratio, more chunks than were timed, not ranked for its dtype)."""
    marks = (["floored: no faster than measured"] * bool(c.get("time_floored"))
             + [f"{c.get('chunks')} chunks, {c.get('chunks_timed')} timed: likely slower"] * bool(c.get("chunks_timed"))
             + ["dtype: not ranked"] * (not c.get("time_ranked", True)))
    return _time(c) + (f" ({'; '.join(marks)})" if marks else "")


def format_advice(a: Mapping[str, Any], limit: int | None = 15) -> str:
    """The advice as text: ranked fits (each with its categories), the Pareto front, what cannot fit."""
    need = "peak" if a["device"] == "cpu" else "CUDA need"
    lines = [a["plain"]["text"]] + ([a["plain"]["buys"]] if a["plain"] and a["plain"]["buys"] else []) \
        if a.get("plain") else []
    defaulted = {n.split("=", 1)[0] for n in a["notes"]}  # "hidden=1024 (default)"
    lines += [f"memlab advise: {a['family']} "
              f"{' '.join(f'{k}={v}' + (' (default)' if k in defaulted else '') for k, v in a['sizes'].items())}, budget "
             f"{fmt_bytes(a['budget_bytes'])}, optimizer {a['optimizer']}, device {a['device']}",
             f"models: {a['models']} (memlab {str(a['memlab_commit'])[:12]}, {a['dtype']}, exact CPU bytes; "
             f"nothing measured{'; time models refitted from their stored points' if a.get('time_refitted') else ''})"]
    if a.get("kernel_warning"):
        lines.append("warning: " + a["kernel_warning"])
    by_reason: dict[str, list[str]] = {}  # the family's techniques no entry covers, one line per reason
    for x in a.get("not_modelled") or []:
        setting = ", ".join(f"{k}={v}" for k, v in x["params"].items())
        by_reason.setdefault(x["reason"], []).append(x["technique"] + (f" [{setting}]" if setting else ""))
    lines += [f"not modelled: {', '.join(names)}: {why}" for why, names in by_reason.items()]
    if a["device"] == "cuda":
        m = a["cuda_margin"]
        lines.append(f"CUDA need = exact peak x {1 + m['fraction']:.2f} + {fmt_bytes(m['fixed_bytes'])} "
                     f"caching-allocator "
                     f"margin + {fmt_bytes(m['workspace_bytes'])} cuBLAS/cuBLASLt workspaces (a stated margin, not a "
                     f"fitted reserved model); the CUDA context is not included")
        lines += format_gpu_evidence(a.get("gpu_evidence") or [], m["fraction"])
    shown = a["fits"] if limit is None else a["fits"][:limit]
    err = (a.get("time_error") or {}).get("fraction")
    lines += ["", f"Fits ({_plural(len(a['fits']), 'setting')}, plain first when it fits, then by predicted relative "
              f"step time" + (f", times within ±{100 * err:.1f}% tied at one rank" if err else "")
              + (f"; first {len(shown)}, --all for every one" if len(shown) < len(a["fits"]) else "") + "):"]
    rows = [("#", "technique", "setting", need, "headroom",
             "time" if a["device"] == "cpu" else "relative time measured on CPU", "time error", "bytes error")]
    for c in shown:
        rows.append((str(c.get("rank") or "-"), c["label"], _knobs(c) or "-", fmt_bytes(c["need_bytes"]),
                     fmt_bytes(c["headroom_bytes"]), time_cell(c), (c.get("time_band") or {}).get("text", "-"),
                     c["error_bound"]["text"]))
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    for j, r in enumerate(rows):
        lines.append("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
        if j:
            lines.append(" " * (widths[0] + 2) + format_categories(shown[j - 1]))
    front = a["pareto"] if len(a["pareto"]) > 1 else []  # one setting is no front (the site lists none either)
    if limit is not None and len(front) > limit:  # evenly spaced along the front, both ends kept
        front = [front[round(i * (len(front) - 1) / (limit - 1))] for i in range(limit)]
    lines += ["", f"Pareto front ({need} vs relative time, {_plural(len(a['pareto']), 'setting')}"
              + (f", {len(front)} shown" if len(front) < len(a["pareto"]) else "") + "; * fits):"] if front else []
    for c in front:
        lines.append(f"  {'*' if c['fits'] else ' '} {fmt_bytes(c['need_bytes']):>11}  {_time(c):>7}  "
                     f"{c['label']} {_knobs(c)}".rstrip())
    if a["cannot_fit"]:
        lines += ["", "Cannot fit at any setting:"]
        for c in a["cannot_fit"]:
            why = "" if c["recommendable"] else " (not recommended: a held-out measurement was not ok)"
            knob = f" at {_knobs(c)}" if c["knobs"] else ""
            lines.append(f"  {c['label']}: smallest {need} {fmt_bytes(c['smallest_need_bytes'])}{knob}{why}")
    lines += ["", "Time: " + a["time_note"] + "."]
    return "\n".join(lines)


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def verify(a: Mapping[str, Any], measure_fn=None) -> dict[str, Any]:
    """Measure the first recommendation (CPU, isolated) when it fits in this machine's available memory.

    A micro-batched answer (``--vary micro_batches``: ``accumulate`` among its ``params``, ``batch`` the
    whole batch) is measured as that many micro-batches accumulated (``memlab measure --accumulate K``);
    a family's answer at the models' fixed workload settings (``a["workload_fixed"]``).

    Returns ``{"measured": bool, ...}`` with predicted and measured total peak, categories (bytes) and
    relative step time and the micro-batches measured (``accumulate``), or the reason it was not measured.
    """
    first = a["fits"][0]
    avail = _available_bytes()
    want = int(first["total_peak_bytes"] * 1.5) + 512 * MiB
    if avail is not None and want > avail:
        return {"measured": False, "reason": f"needs about {fmt_bytes(want)} and this machine has "
                f"{fmt_bytes(avail)} available", "setting": first}
    if measure_fn is None:
        measure_fn = memlab.measure

    cls = get_technique(first["technique"])
    # a micro-batched answer carries accumulate=K among its params: measured as K micro-batches; the family's
    # fixed workload settings are the models', not always the technique's defaults (resnet's image 8, not 32)
    step, given = Setting.split(first["params"])
    fixed = {k: v for k, v in {**a.get("workload_fixed", {}), **given}.items() if k in cls.all_params()}
    m = measure_fn(first["technique"], iterations=2, repeats=3, time_budget=0, check=False,
                   optimizer=a["optimizer"], **step, **fixed)
    out = {"measured": True, "setting": first, "status": m.status, "error": m.error,
           "accumulate": step.get("accumulate", DEFAULTS.accumulate),
           "predicted_total_peak_bytes": first["total_peak_bytes"], "measured_total_peak_bytes": m.total_peak_bytes,
           "predicted_by_category_bytes": first["peak_by_category_bytes"],
           "measured_by_category_bytes": dict(m.peak_by_category_bytes),
           "predicted_relative_step_time": first["relative_step_time"],
           "measured_relative_step_time": m.relative_step_time, "budget_bytes": a["budget_bytes"]}
    if a["device"] == "cuda" and m.predicted_cuda:
        out["predicted_cuda_reserved_bytes"] = m.predicted_cuda.get("reserved_peak_bytes")
    out["fits_budget"] = m.status == "ok" and (m.total_peak_bytes or 0) <= a["budget_bytes"]
    return out


def format_verify(v: Mapping[str, Any]) -> str:
    c = v["setting"]
    micro = f" {c['size']} x {c['micro_batch']} (--accumulate {c['size']})" if "micro_batch" in c else ""
    head = f"verify #1 {c['label']} {_knobs(c)}".rstrip() + micro
    if not v["measured"]:
        return f"{head}: not measured: {v['reason']}"
    if v["status"] != "ok":
        return f"{head}: measurement {v['status'].upper()}: {v['error']}"
    p, m = v["predicted_total_peak_bytes"], v["measured_total_peak_bytes"]
    lines = [f"{head}: predicted {fmt_bytes(p)} ({p} B), measured {fmt_bytes(m)} ({m} B), error {p - m:+d} B; "
             f"{'fits' if v['fits_budget'] else 'DOES NOT FIT'} the budget {fmt_bytes(v['budget_bytes'])}"]
    for k in CATEGORIES:
        a, b = v["predicted_by_category_bytes"].get(k, 0), v["measured_by_category_bytes"].get(k, 0)
        lines.append(f"  {k:<18} predicted {fmt_bytes(a):>11}  measured {fmt_bytes(b):>11}")
    t0, t1 = v["predicted_relative_step_time"], v["measured_relative_step_time"]
    lines.append(f"  relative step time predicted {'-' if t0 is None else f'~{t0:.2g}x'}, measured "
                 f"{'-' if t1 is None else f'{t1:.2g}x'}")
    if "predicted_cuda_reserved_bytes" in v:
        lines.append(f"  CUDA reserved predicted from this run's trace: "
                     f"{fmt_bytes(v['predicted_cuda_reserved_bytes'])} "
                     f"(advisor's CUDA need {fmt_bytes(c['need_bytes'])})")
    return "\n".join(lines)
