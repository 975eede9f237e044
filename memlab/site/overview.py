"""The index's view of one family: its questions answered per configuration, in one section.

A family measured at several workload configurations (reversible: depth x batch x coupling) used to
give one index section each, with conflicting verdicts side by side.  Here a family is one section:
a compact table with a row per configuration (the answer to each question there), a selector
showing one configuration's detail (every technique's figures, a chart, why the winner wins), and
footnotes.  The questions are NOTE [ the overview's questions ] in :mod:`memlab.site.ranking`.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from . import ranking as A
from . import figures as F
from .notes import CATEGORY_NAMES, footnotes, why
from .page import Page
from .rows import machine_column, machine_facts
from .tables import column, sort_value
from .text import env_caption, fmt_check, fmt_mib, fmt_pct, fmt_relative, fmt_step, relative_against

__all__ = ["BUDGETS", "family_overview", "your_run"]

#: The memory budgets of "fastest within": fractions of the baseline's memory.
BUDGETS = (0.5, 0.9)
_MEASURES = {"total_peak_bytes": "total peak (baseline included)",
             "peak_allocated_bytes": "peak allocated above the step's baseline"}
_SHORT = {"total_peak_bytes": "total peak", "peak_allocated_bytes": "peak allocated"}


def _n(v: Any) -> int | float | None:
    """A sort value (:func:`memlab.site.tables.sort_value`)."""
    return sort_value(v)


def _speed_text(row: pd.Series, speed: str) -> str:
    if speed == "relative_step_time":
        return f"{row['relative_step_time']:.2f}× {relative_against(row.get('relative_to'))}"
    return f"{row['step_time_s'] * 1e3:.1f} ms median step (no relative step time recorded)"


def _varying(configs: list[dict]) -> list[str]:
    keys = sorted({k for c in configs for k in c["base"]["params"]})
    return [k for k in keys if len({repr(c["base"]["params"].get(k)) for c in configs}) > 1]


def _label(c: dict, varying: list[str], several_settings: bool, machine: bool = False) -> str:
    parts = [A.setting_text(c["setting"], machine=machine)] if several_settings else []
    parts += [f"{k}={c['base']['params'][k]}" for k in varying if k in c["base"]["params"]]
    return ", ".join(parts) or "the only configuration"


def _activation_winner(cands: pd.DataFrame, base: pd.Series) -> dict[str, Any] | None:
    best: dict[str, tuple] = {}
    for _, r in cands.iterrows():
        value, source = A.activation_bytes(r)
        if value is None:
            continue
        key = (value, r["params_key"])
        if r["technique"] not in best or key < best[r["technique"]][0]:
            best[r["technique"]] = (key, r, source)
    if not best:
        return None
    (value, _), row, source = min(best.values(), key=lambda t: (t[0], t[1]["technique"]))
    base_value, _ = A.activation_bytes(base)
    return {"row": row, "bytes": value, "source": source,
            "saving": (1 - value / base_value) if base_value else None, "base_bytes": base_value}


def _answers(c: dict, baseline: str, measure: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The answers at one configuration, and the facts the summary table shows."""
    base, cands = c["base"], c["rows"]
    entries = A.compare(cands, base, measure)
    win = entries[0]
    answers, facts = [], {"entries": entries}
    if win["row"]["technique"] == baseline:
        head = "No technique beats the baseline"
        text = f"{baseline} holds least itself ({fmt_mib(base[measure])})"
    else:
        head = "Lowest memory"
        text = (f"{fmt_mib(win['row'][measure])}, {fmt_pct(-win['saving'])} against {baseline} "
                f"({fmt_mib(base[measure])})")
    answers.append({"question": "lowest memory", "head": head,
                    "technique": None if win["row"]["technique"] == baseline else win["row"]["technique"],
                    "peer": bool(win["row"]["peer"]), "params": A.param_text(win["row"]["params"], base["params"]),
                    "text": text, "why": why(win["row"], base, measure)})
    facts["memory"] = win
    act = _activation_winner(cands, base)
    facts["activation"] = act
    if act:
        src = ("as the technique states it" if act["source"] == "stated"
               else "saved activations + temporaries at the step's peak")
        versus = (f", {fmt_pct(-act['saving'])} against {baseline} ({fmt_mib(act['base_bytes'])})"
                  if act["saving"] is not None and act["row"]["technique"] != baseline else "")
        answers.append({"question": "lowest activation memory", "head": "Lowest activation memory",
                        "technique": act["row"]["technique"], "peer": bool(act["row"]["peer"]),
                        "params": A.param_text(act["row"]["params"], base["params"]),
                        "text": f"{fmt_mib(act['bytes'])} ({src}){versus}", "why": ""})
    for budget in BUDGETS:
        found = A.fastest_within(cands, base, measure, budget)
        facts[budget] = found
        q = f"fastest within {budget:.0%} of the baseline's memory"
        if found is None:
            answers.append({"question": q, "head": f"Fastest within {budget:.0%} of the baseline's memory",
                            "technique": None, "peer": False, "params": "",
                            "text": f"no ranked measurement here holds at most {budget:.0%} of {baseline}'s "
                                    f"{fmt_mib(base[measure])} (with a step time)", "why": ""})
            continue
        row, speed = found
        share = row[measure] / base[measure]
        answers.append({"question": q, "head": f"Fastest within {budget:.0%} of the baseline's memory",
                        "technique": row["technique"], "peer": bool(row["peer"]),
                        "params": A.param_text(row["params"], base["params"]),
                        "text": f"{_speed_text(row, speed)}, holding {share:.0%} of {baseline}'s memory "
                                f"({fmt_mib(row[measure])})", "why": ""})
    return answers, facts


def _technique_table(page: Page, name: str, c: dict, facts: dict, baseline: str, measure: str,
                     notes: dict[str, dict]) -> dict[str, Any]:
    base, entries = c["base"], facts["entries"]
    has_act = any(A.activation_bytes(e["row"])[0] is not None for e in entries)
    has_rel = any(_n(e["row"]["relative_step_time"]) is not None for e in entries)
    cols = [column("technique", "technique", kind="tech"),
            column("params", "configuration", title="the technique's lowest-memory configuration here"),
            column("memory", _SHORT[measure], num=True, title=_MEASURES[measure]),
            column("saving", f"vs {baseline}", num=True, title="memory against the baseline's at this configuration")]
    if has_act:
        cols.append(column("activation", "activation memory", num=True))
    cols += [column("step", "step (median ± IQR)", num=True, kind="step")]
    if has_rel:
        cols.append(column("relative", "relative step", num=True,
                           title="the technique's step over the family baseline's step (thread CPU time): load-robust"))
    cols += [column("throughput", f"throughput vs {baseline}", num=True), machine_column(),
             column("matches", "matches reference", kind="check")]
    cells, records = [], []
    for e in entries:
        r = e["row"]
        is_base = r["technique"] == baseline
        act, _ = A.activation_bytes(r)
        cells.append({
            "technique": r["technique"], "peer": bool(r["peer"]), "is_baseline": is_base, "note": notes.get(r["technique"]),
            "params": A.param_text(r["params"], base["params"]),
            "memory": fmt_mib(r[measure]), "memory__sort": _n(r[measure]),
            "saving": "baseline" if is_base else fmt_pct(-e["saving"] if e["saving"] is not None else None),
            "saving__sort": 0.0 if is_base else (_n(-e["saving"]) if e["saving"] is not None else None),
            "activation": fmt_mib(act), "activation__sort": act,
            "step": fmt_step(r["step_time_s"], r["step_time_iqr_s"]), "step__sort": _n(r["step_time_s"]),
            "samples": len(r["step_times_s"]), "under_load": bool(r["under_load"]), "load": "",
            "relative": fmt_relative(r["relative_step_time"]), "relative__sort": _n(r["relative_step_time"]),
            "throughput": "baseline" if is_base else fmt_pct(e["throughput_ratio"] - 1 if e["throughput_ratio"] is not None else None),
            "throughput__sort": 0.0 if is_base else (_n(e["throughput_ratio"] - 1) if e["throughput_ratio"] is not None else None),
            "machine": r["machine"], "matches": fmt_check(r["check"])})
        records.append({"technique": r["technique"], "peer": bool(r["peer"]), "baseline": is_base, "params": r["params"],
                        "memory_measure": measure, "memory_bytes": r[measure], "saving": e["saving"],
                        "activation_bytes": act, "step_time_s": r["step_time_s"], "step_time_iqr_s": r["step_time_iqr_s"],
                        "relative_step_time": r["relative_step_time"], "throughput_ratio": e["throughput_ratio"],
                        "samples_per_s": r["samples_per_s"], "under_load": bool(r["under_load"]),
                        "matches_reference": r["matches_reference"], "run": r["run"], "line": r["line"],
                        "machine": r["machine"], **machine_facts(r["environment"])})
    return page.table(name, cols, cells, records)


def _chart(page: Page, family: str, label: str, c: dict, facts: dict, baseline: str, measure: str,
           colors: dict[str, str]) -> dict[str, str]:
    entries = facts["entries"]
    cats = [e["row"]["peak_by_category_bytes"] for e in entries]
    where = f"{family}, {label}"
    if all(isinstance(x, dict) and x for x in cats):
        items = [(e["row"]["technique"], bool(e["row"]["peer"]), x) for e, x in zip(entries, cats)]
        return page.chart(F.peak_by_category(items, list(CATEGORY_NAMES)),
                          f"Peak by memory category, each technique's lowest-memory configuration ({where})",
                          "Everything live at the step's peak, split by what it is: activation memory (saved "
                          "activations, temporaries) in warm colours.")
    items = [(e["row"]["technique"], e["row"]["technique"] == baseline, bool(e["row"]["peer"]), e["row"][measure])
             for e in entries]
    return page.chart(F.lowest_peaks(items, f"{_MEASURES[measure]} (MiB)", colors),
                      f"Lowest {_MEASURES[measure].split(' (')[0]} per technique ({where})",
                      f"Each technique's lowest-memory configuration; {baseline} grey; peers hatched.")


def _winner_cell(found: Any, measure: str) -> tuple[str, float | None]:
    if found is None:
        return "none", None
    row, speed = found
    text = f"{row['technique']} ({fmt_relative(row['relative_step_time']) if speed == 'relative_step_time' else fmt_step(row['step_time_s'], None)})"
    return text, _n(row[speed])


def _summary_row(c: dict, label: str, pid: str, facts: dict, baseline: str, measure: str,
                 yours: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A configuration's row of the family's summary table, and its record for the downloads."""
    mem, act = facts["memory"], facts["activation"]
    fast = {b: _winner_cell(facts[b], measure) for b in BUDGETS}
    mem_text = (f"{baseline} (nothing beats it)" if mem["row"]["technique"] == baseline
                else f"{mem['row']['technique']} {fmt_pct(-mem['saving'])}")
    cell = {
        "config": label, "config_id": pid, "machine": c["base"]["machine"], "yours": yours,
        "baseline_memory": fmt_mib(c["base"][measure]),
        "baseline_memory__sort": _n(c["base"][measure]), "memory": mem_text,
        "memory__sort": _n(-mem["saving"]) if mem["saving"] is not None else None,
        "activation": f"{act['row']['technique']} ({fmt_mib(act['bytes'])})" if act else "-",
        "activation__sort": act["bytes"] if act else None,
        **{f"fast{int(b * 100)}": fast[b][0] for b in BUDGETS},
        **{f"fast{int(b * 100)}__sort": fast[b][1] for b in BUDGETS}}
    record = {
        "setting": A.setting_text(c["setting"]), "machine": c["base"]["machine"], "params": c["base"]["params"],
        "your_run": bool(yours), "memory_measure": measure,
        "baseline_bytes": c["base"][measure], "lowest_memory_technique": mem["row"]["technique"],
        "lowest_memory_params": mem["row"]["params"], "lowest_memory_bytes": mem["row"][measure],
        "saving": mem["saving"], "lowest_activation_technique": act["row"]["technique"] if act else None,
        "lowest_activation_bytes": act["bytes"] if act else None,
        **{f"fastest_within_{int(b * 100)}pct": facts[b][0]["technique"] if facts[b] else None for b in BUDGETS},
        **{f"fastest_within_{int(b * 100)}pct_params": facts[b][0]["params"] if facts[b] else None for b in BUDGETS}}
    return cell, record


def your_run(rows: pd.DataFrame, yours: frozenset[str] | set[str]) -> str:
    """``"your run"`` when every row of a configuration comes from one of the ``yours`` files (the
    ``--run`` files of ``memlab site``, the run just made), ``"with your run"`` when some do, else ``""``."""
    if not yours or not len(rows):
        return ""
    mine = rows["source"].isin(list(yours))
    return "your run" if mine.all() else ("with your run" if mine.any() else "")


def _summary_table(page: Page, family: str, baseline: str, cells: list[dict], records: list[dict]) -> dict[str, Any]:
    """The family's summary table: a row per configuration, those of your run first (NOTE [ your run ])."""
    order = sorted(range(len(cells)), key=lambda i: not cells[i]["yours"])
    cells, records = [cells[i] for i in order], [records[i] for i in order]
    cols = [column("config", "configuration", kind="config"), machine_column(),
            column("baseline_memory", f"{baseline}", num=True, title="the baseline's memory at this configuration"),
            column("memory", "lowest memory", num=True, title="the technique holding least, and its saving"),
            column("activation", "lowest activation memory", num=True),
            *[column(f"fast{int(b * 100)}", f"fastest within {b:.0%}", num=True,
                     title=f"the fastest measurement holding at most {b:.0%} of the baseline's memory") for b in BUDGETS]]
    if not any(r["activation"] != "-" for r in cells):
        cols = [col for col in cols if col["key"] != "activation"]
    return page.table(f"{family} configurations", cols, cells, records)


# NOTE [ your run ]
# ~~~~~~~~~~~~~~~~~
# ``memlab site --run FILE`` (``make demo``) adds a sweep just made to the committed data.  Its rows
# are a configuration like any other to the ranking (compared within their machine only), but the
# reader made them a minute ago and looks for them first: a configuration holding them is marked
# "your run" (a badge in the summary table, its row first, the label of its panel) and is the panel
# shown first; one that mixes them with committed rows (same machine and parameters) says "with your
# run".  Without ``--run`` nothing is marked.  Evidence: docs/evidence/code-notes-site.md, "your run".
def family_overview(page: Page, family: str, rows: pd.DataFrame, baseline: str | None,
                    colors: dict[str, str], yours: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """The family's index section: summary table, one panel per configuration, footnotes.

    ``yours``: the ``source`` of the rows of the run just made (NOTE [ your run ]).
    """
    anchor = page.anchor(family)
    out: dict[str, Any] = {"family": family, "id": anchor, "baseline": baseline, "panels": [], "summary": None,
                           "environments": env_caption(rows), "n_not_ranked": len(A.not_ranked(rows)),
                           "verdicts": "", "notes": [], "measure": ""}
    configs = A.configurations(rows, baseline) if baseline else []
    if not configs:
        return out
    notes = footnotes(rows)
    marks = {n["technique"]: {"n": i + 1, "id": page.anchor(f"{family} note {n['technique']}")} for i, n in enumerate(notes)}
    out["notes"] = [{**n, **marks[n["technique"]]} for n in notes]
    varying = _varying(configs)
    several = len({c["setting"] for c in configs}) > 1
    machine = A.machines_apart(sorted({c["setting"] for c in configs}))  # NOTE [ the machine a row ran on ]
    summary_cells, summary_records, winners = [], [], Counter()
    for c in configs:
        measure = A.memory_measure(c["rows"])
        mine = your_run(c["rows"], yours)
        label = _label(c, varying, several, machine)
        pid = page.anchor(f"{family} {label}")
        answers, facts = _answers(c, baseline, measure)
        winners[facts["memory"]["row"]["technique"]] += 1
        out["panels"].append({
            "id": pid, "label": label, "default": c["default"], "yours": mine,
            "setting": A.setting_text(c["setting"], machine=machine),
            "params": A.param_text(c["base"]["params"]), "measure": _MEASURES[measure], "answers": answers,
            "table": _technique_table(page, f"{pid} techniques", c, facts, baseline, measure, marks),
            "chart": _chart(page, family, label, c, facts, baseline, measure, colors)})
        cell, record = _summary_row(c, label, pid, facts, baseline, measure, mine)
        summary_cells.append(cell)
        summary_records.append(record)
    out["measure"] = " or ".join(sorted({p["measure"] for p in out["panels"]}))
    out["summary"] = _summary_table(page, family, baseline, summary_cells, summary_records)
    out["verdicts"] = ", ".join(f"{t}{' (the baseline)' if t == baseline else ''} at {n}" for t, n in
                                sorted(winners.items(), key=lambda kv: (-kv[1], kv[0])))
    first_yours = next((p for p in out["panels"] if p["yours"]), None)
    if first_yours is not None:  # the run just made is what its reader looks for first
        for p in out["panels"]:
            p["default"] = p is first_yours
    if not any(p["default"] for p in out["panels"]):
        out["panels"][0]["default"] = True
    out["n_configs"] = len(configs)
    return out
