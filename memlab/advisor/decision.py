"""The decision an answer leads with: does the plain step fit, what a technique would buy, which
settings tie on time, and which measured techniques the models leave out (torch-free).

:func:`memlab.advisor.advise` and the site's Choose page (:mod:`memlab.site.choose`, whose script
``choose.js`` repeats :func:`order_fits` and :func:`plain_verdict` rule for rule) both answer from
here.

# NOTE [ plain fits first ]
An answer says first whether the family's plain step (its baseline entry, relative time 1 by
definition) fits the budget.  When it does, plain is the first choice ("no technique needed") and
the line after says what a technique would buy, if anything: the most headroom (the smallest need,
among those within the time error of plain's time when there are such), and speed only where a
technique is predicted faster than plain by more than the time model's error.  When it
does not, the first choice is the fastest setting that fits.  Settings whose predicted relative times
differ by less than that error are ties: one rank (a group starts at its fastest setting and holds
every setting within the error of it), listed within it as predicted, fastest first: ordering a tie by
need instead picked settings the sweeps measured 10-13% slower than the fastest that fits.  The error is the family's held-out
time checks (``data/models/time-check-<optimizer>.json`` and every ``time-check-<settings>-<optimizer>.json``
of unseen settings beside it, :mod:`memlab.advisor.time_check`: the largest relative error of that
family's rows in any of them, else the held-out file's worst), since the fit records only its own
points' error (each setting's own band, NOTE [ the time band ] in :mod:`memlab.advisor.model`, is
shown beside it).  What a technique buys is backed only by times its model measured the like of: a
setting with more chunks than its time points had is not offered for headroom or speed (the sweeps
measured such settings up to 18% slower than predicted, 40% before the per-chunk n*d term:
docs/evidence/time-model-bias.md).  On
``--device cuda`` the time is still the CPU-measured ratio: it is marked "relative time measured on
CPU", and a technique that changes the step's dtype (:attr:`memlab.Technique.changes_dtype`: autocast
to bfloat16, whose CPU slowdown is a GPU's speed-up) is listed unranked by time.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..core.record import is_number
from .model import MODELS_DIR
from ..registry import builtin_families, plugin_families, read_family_meta
from ..results import list_input_files, ranking_status, sweep_records

__all__ = ["SWEEPS_DIR", "MEASURED_STATUSES", "time_error", "changes_dtype", "order_fits", "plain_verdict", "measured_params",
           "registered_techniques", "not_modelled", "fixed_selection", "declared_not_modelled"]

#: the ranking statuses (:func:`memlab.results.ranking_status`) of a row whose bytes and time were
#: measured and checked: ``ok``, and ``leak unknown`` (too few steps for a leak verdict, which says
#: nothing of the step's peak or time)
MEASURED_STATUSES = ("ok", "leak unknown")
#: the committed sweeps the site's Overview ranks (``data/sweeps``)
SWEEPS_DIR = Path(__file__).resolve().parents[2] / "data" / "sweeps"


def time_error(family: str, optimizer: str, models_dir: Path | None = None) -> dict[str, Any]:
    """The relative error of ``family``'s predicted times: ``{"fraction", "text"}`` (fraction None
    when no held-out time check was recorded: then no setting ties with another), over the held-out
    check ``time-check-<optimizer>.json`` and the checks of unseen settings beside it
    (``time-check-<settings>-<optimizer>.json``): every setting in them is none of the fit's points."""
    directory = Path(models_dir or MODELS_DIR)
    path = directory / f"time-check-{optimizer}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"fraction": None, "text": f"no held-out time check ({path.name}): times are not grouped into ties"}
    files = [(path.name, data)]
    for other in sorted(directory.glob(f"time-check-*-{optimizer}.json")):
        try:
            files.append((other.name, json.loads(other.read_text())))
        except (OSError, ValueError):
            continue  # an unreadable unseen check adds nothing; the held-out one still speaks
    signed = [r["error"] for _, doc in files for r in ((doc.get("rows") if isinstance(doc, dict) else None) or [])
              if isinstance(r, dict) and r.get("family") == family and r.get("status") == "ok" and is_number(r.get("error"))]
    errors = [abs(e) for e in signed]
    if errors:
        under = sum(e < 0 for e in signed)
        return {"fraction": round(max(errors), 4), "under": under, "checks": len(signed),
                "text": f"±{100 * max(errors):.1f}%: the largest error of {len(errors)} held-out {family} time checks "
                        f"({under} predicted faster than measured, {len(signed) - under} slower)"}
    worst = data.get("worst_abs_error") if isinstance(data, dict) else None
    if is_number(worst):
        return {"fraction": round(abs(worst), 4),
                "text": f"±{100 * abs(worst):.1f}%: the largest error of the held-out time checks ({family} has none)"}
    return {"fraction": None, "text": f"{path.name} records no error: times are not grouped into ties"}


def changes_dtype(entry: Mapping[str, Any], dtype: str | None) -> bool:
    """Whether ``entry``'s step runs in another dtype than the models' (``entry["changes_dtype"]``, as
    :attr:`memlab.Technique.changes_dtype` says and a fit records; for a file fitted before that, a
    technique or a model file's kind named for autocast; or a fixed ``dtype``)."""
    own = entry.get("dtype") or (entry.get("fixed") or {}).get("dtype")
    named = str(entry.get("technique", "")).rsplit("__", 1)[-1].startswith("autocast")
    return bool(entry.get("changes_dtype")) or named or (own is not None and own != dtype)


def _tie_key(c: Mapping[str, Any]) -> tuple:
    return (not c.get("time_ranked", True) or c["relative_step_time"] is None, c["relative_step_time"] or 0,
            c["need_bytes"])


def _tied(t: float | None, lead: float | None, error: float | None) -> bool:
    return t is not None and lead is not None and abs(t - lead) <= (error or 0) * max(t, lead)


def order_fits(fits: list[dict[str, Any]], error: float | None) -> list[dict[str, Any]]:
    """``fits`` in the answer's order with their ``rank`` (NOTE [ plain fits first ]): the plain step
    first when it fits, tied (rank 1) with every setting within ``error`` of its time 1, then groups of
    tied times, each still by predicted time, then need; a setting without a ranked time last, rank
    None.  Returns new dicts."""
    def ranked(c: Mapping[str, Any]) -> float | None:
        return c["relative_step_time"] if c.get("time_ranked", True) else None

    plain = [c for c in fits if c.get("baseline")][:1]
    rest = sorted((c for c in fits if not any(c is p for p in plain)), key=_tie_key)
    with_plain = [c for c in rest if plain and _tied(ranked(c), 1.0, error)]
    out = [dict(c, rank=1) for c in plain + with_plain]
    group: list[dict[str, Any]] = []
    lead = None
    taken = {id(c) for c in with_plain}
    for c in (c for c in rest if id(c) not in taken):
        t = ranked(c)
        if not _tied(t, lead, error):
            out += group
            group, lead = [], t
        group.append(dict(c, rank=None if t is None else len(out) + 1))
    return out + group


def _setting(c: Mapping[str, Any]) -> str:
    knobs = " ".join(f"{k}={v}" for k, v in c["knobs"].items())
    return c["label"] + (f" {knobs} ({c['chunks']} chunk{'' if c['chunks'] == 1 else 's'})" if knobs else "")


def plain_verdict(candidates: Iterable[Mapping[str, Any]], fits: list[Mapping[str, Any]], budget: int,
                  error: float | None, need: str, fmt: Callable[[float], str],
                  larger: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The answer's first lines: ``{"plain_fits", "label", "need_bytes", "text", "buys"}`` from the
    candidates, the ordered ``fits`` (:func:`order_fits`) and what a technique buys in size
    (:func:`memlab.advisor.advise.larger_size`); None for a family without a baseline entry."""
    plain = next((c for c in candidates if c.get("baseline")), None)
    if plain is None:
        return None
    first = fits[0] if fits else None
    if plain["need_bytes"] > budget or not plain["recommendable"]:
        text = (f"plain ({plain['label']}) does not fit: {need} {fmt(plain['need_bytes'])} of {fmt(budget)}"
                + (f"; first choice: {_setting(first)}, {need} {fmt(first['need_bytes'])}, "
                   f"{_times(first['relative_step_time'])} plain's time" if first else ""))
        return {"plain_fits": False, "label": plain["label"], "need_bytes": plain["need_bytes"], "text": text,
                "buys": None}
    text = f"plain ({plain['label']}) fits: {need} {fmt(plain['need_bytes'])} of {fmt(budget)}; no technique needed"
    smaller = [c for c in fits if not c.get("baseline") and c["need_bytes"] < plain["need_bytes"]]
    cheap = [c for c in smaller if _trusted(c) and _tied(c["relative_step_time"], 1.0, error)]
    small = min(cheap or smaller, key=lambda c: (c["need_bytes"], _tie_key(c))) if smaller else None
    buys = ["headroom: none needs less than plain" if small is None else
            f"headroom: {_setting(small)} needs {fmt(small['need_bytes'])} (headroom {fmt(budget - small['need_bytes'])}"
            f", plain's {fmt(budget - plain['need_bytes'])}), {_times(small['relative_step_time'])} plain's time"]
    timed = [c for c in fits if not c.get("baseline") and _trusted(c) and c["relative_step_time"] is not None]
    fast = min(timed, key=_tie_key) if timed else None
    buys.append(f"speed: {_setting(fast)}, {_times(fast['relative_step_time'])} plain's time"
                if fast is not None and fast["relative_step_time"] < 1 - (error or 0)
                else "speed: none predicted faster than plain beyond the time error")
    if larger:
        buys.append(f"a larger {larger['size']}: {larger['technique']} with {_setting(larger['setting'])} "
                    f"({need} {fmt(larger['setting']['need_bytes'])}; plain up to {larger['plain']})")
    bought = small is not None or bool(larger) or (fast is not None and fast["relative_step_time"] < 1 - (error or 0))
    return {"plain_fits": True, "label": plain["label"], "need_bytes": plain["need_bytes"], "text": text,
            "buys": "a technique would buy " + "; ".join(buys) if bought else None}


def _trusted(c: Mapping[str, Any]) -> bool:
    """Whether a setting's time may back what a technique buys: ranked by time, and with no more chunks
    than its time model measured (beyond them the sweeps measured slower than predicted:
    docs/evidence/time-model-bias.md)."""
    return c.get("time_ranked", True) and not c.get("chunks_timed")


def _times(t: float | None) -> str:
    return "time not predicted:" if t is None else f"about {t:.2f}x"


def measured_params(sweeps_dir: Path | None = None, warn: Callable[[str], None] = lambda _: None
                    ) -> dict[str, dict[str, dict[str, Any]]]:
    """Every technique of every family measured ``ok`` on CPU in the sweeps the site's Overview ranks
    (``data/sweeps/*.jsonl``): ``{family: {technique: {"peer": bool, "params": [each row's]}}}``; read
    as hostile input (:mod:`memlab.results`, each bad line one ``warn``)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for path in list_input_files(Path(sweeps_dir) if sweeps_dir is not None else SWEEPS_DIR, ".jsonl"):
        for _, rec in sweep_records(path, warn):
            if rec.get("device") == "cpu" and ranking_status(rec)[0] in MEASURED_STATUSES:
                tech = out.setdefault(rec["family"], {}).setdefault(rec["technique"], {"peer": False, "params": []})
                tech["peer"] = tech["peer"] or rec.get("peer") is True
                tech["params"].append(dict(rec.get("params") or {}))
    return {f: dict(sorted(t.items())) for f, t in sorted(out.items())}


def registered_techniques(family: str) -> list[str]:
    """The built-in techniques of ``family``, from its folder's ``meta.py`` (every technique there has a
    colour), read without torch (:func:`memlab.registry.read_family_meta`)."""
    return sorted(t for name, folder in builtin_families() if name == family
                  for t in read_family_meta(name, folder).colors)


def _shown(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def declared_not_modelled(family: str) -> dict[str, str]:
    """``{technique: why it is not modelled}`` as the family's advisor declaration says it (a
    ``not_modelled = {...}`` literal in the ``AdvisorModel`` subclass of its folder's ``workload.py``, a
    built-in or a plug-in folder), read with :mod:`ast` (no import, no torch); empty for a family that
    declares none.

    Raises:
        ValueError: ``not_modelled`` there is not a literal mapping of technique name to text.
    """
    for name, folder in [*builtin_families(), *plugin_families()]:
        path = Path(folder) / "workload.py"
        if name != family or not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", getattr(b, "attr", None)) == "AdvisorModel"
                                                       for b in node.bases):
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["not_modelled"]:
                        value = ast.literal_eval(stmt.value)
                        if not (isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                                for k, v in value.items())):
                            raise ValueError(f"{path}: not_modelled={value!r} must map technique names to reasons")
                        return dict(value)
    return {}


def not_modelled(family: str, fam: Mapping[str, Any], measured: Mapping[str, Mapping[str, Any]],
                 registered: Iterable[str] = (), declared: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each technique of the family (``registered``: :func:`registered_techniques`, and those
    ``measured``: one family's of :func:`measured_params`), or parameter setting the sweeps ran one at,
    that no model entry of ``fam`` covers, with the reason: ``{"technique", "params", "reason"}``; a
    technique the family's declaration names (``declared``: :func:`declared_not_modelled`) has that
    reason first."""
    entries = fam["entries"]
    declared = declared or {}
    out = []
    unmeasured = {"peer": False, "params": [], "unmeasured": True}
    for tech, seen in sorted({**{t: unmeasured for t in registered}, **measured}.items()):
        mine, rows = [e for e in entries if e["technique"] == tech], seen["params"]
        if not mine:
            why = ([declared[tech]] if tech in declared else [f"the {family} advisor model declares no entry"]) + [
                "no ok CPU measurement in data/sweeps"] * bool(seen.get("unmeasured")) + ["a peer library's implementation, measured beside memlab's"] * bool(
                seen["peer"]) + ["its step runs in another dtype than the models' float32"] * (
                changes_dtype({"technique": tech}, None) and tech not in declared)
            out.append({"technique": tech, "params": {}, "reason": "; ".join(why)})
            continue
        keys = sorted({k for e in mine for k in e["fixed"]})
        missed = sorted({tuple((k, r.get(k)) for k in keys) for r in rows
                         if not any(all(r.get(k) == v for k, v in e["fixed"].items()) for e in mine)}, key=str)
        for combo in missed:
            have = "; ".join(", ".join(f"{k}={_shown(v)}" for k, v in e["fixed"].items()) for e in mine)
            ran = ", ".join(f"{k}={_shown(v)}" for k, v in combo)
            out.append({"technique": tech, "params": dict(combo),
                        "reason": f"modelled only with {have}; measured (as it runs by default) with {ran}"})
    return out


def fixed_selection(fam: Mapping[str, Any], family: str, key: str, value: Any) -> list[dict[str, Any]]:
    """The entries left when ``--param key=value`` names a fixed parameter of some entries' labels
    (``slice_accumulate[backward=manual]``): those that fix it to ``value`` and those that do not fix it.

    Raises:
        ValueError: no entry fixes ``key`` to ``value`` (one line naming the values modelled).
    """
    fixing = [e for e in fam["entries"] if key in e["fixed"]]
    if not any(e["fixed"][key] == value for e in fixing):
        have = ", ".join(sorted({f"{e['label']}" for e in fixing}))
        raise ValueError(f"the {family} models cover {key} only as in {have} (got {key}={_shown(value)})")
    return [e for e in fam["entries"] if e["fixed"].get(key, value) == value]
