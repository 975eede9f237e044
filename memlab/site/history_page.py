"""The History page: per machine its measured commits on main and one chart per benchmark, the
commits measured off main listed apart (NOTE [ the main line ] in :mod:`memlab.site.history`), and
the regressions view (every step change of an exact memory value, every failure onset).

Built by :func:`memlab.site.context.add_history_page`; the logic is :mod:`memlab.site.history`,
the chart :mod:`memlab.site.history_chart`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from . import history as H
from .history_chart import history_figure
from .page import Page
from .tables import column

__all__ = ["history_page", "Guard"]

#: ``guard(what, build)``: ``build()``, or None with a problem line naming ``what`` when it raises
Guard = Callable[[str, Callable[[], Any]], Any]


def _machine_caption(info: dict[str, Any], name: str) -> str:
    desc = ", ".join(f"{k} {v}" for k, v in sorted(info.items()) if k != "machine" and v not in (None, ""))
    return f"machine {name}: {desc or 'no machine.json details'}"


def _chart(page: Page, bench: str, machine: str, frames: tuple, order: Sequence[H.Commit], ctx: dict,
           guard: Guard) -> dict | None:
    """One benchmark's chart on one machine, with its caption."""
    values, fails = frames
    exact = any(H.is_exact_memory(bench, u, p) for u, p in zip(values["unit"], values["params"]))
    commits = len(set(values["commit"]) | set(fails["commit"]))
    versions = H.version_starts([values, fails], order)
    caption = (f"{commits} of the machine's {len(order)} measured commit(s) hold this benchmark"
               + (f", {fails['commit'].nunique()} with a failure (x)" if len(fails) else "")
               + (f"; version changes at {', '.join(c.short for c, _ in versions)}" if versions else "")
               + f"; {'exact: every change is listed in the regressions view' if exact else 'not exact (not in the regressions view)'}"
               + f"; asv environment {', '.join(sorted(set(values['env'].dropna()))) or '-'}")
    return guard(f"history of {bench} on {machine}", lambda: page.chart(
        history_figure(values, order, ctx["colors"], failures=fails, gaps=H.history_gaps(order), versions=versions),
        f"{bench} on {machine}", caption))


def _machine_section(page: Page, machine: str, frames: tuple, main: H.MainLine, ctx: dict, guard: Guard) -> dict:
    """A machine's part of the page: its commits on main (with the gaps), a chart per benchmark, and
    the commits it measured off main, listed apart (NOTE [ the main line ])."""
    values, fails = (f[f["machine"] == machine] for f in frames)
    apart = H.off_line((values, fails), main)
    if main.line:
        on = {sha for sha, _ in main.line}
        values, fails = values[values["commit"].isin(on)], fails[fails["commit"].isin(on)]
    order = H.machine_order(values, fails, machine, list(main.line))
    benches = sorted(set(values["benchmark"]) | set(fails["benchmark"]), key=H.benchmark_order)
    charts = [_chart(page, b, machine, (values[values["benchmark"] == b], fails[fails["benchmark"] == b]), order,
                     ctx, guard) for b in benches]
    gaps = H.history_gaps(order)
    return {"id": page.anchor(f"machine {machine}"), "machine": machine, "order": order,
            "caption": _machine_caption(ctx["machines"].get(machine, {}), machine),
            "commits": [{"short": c.short, "subject": c.subject, "known": c.index is not None} for c in order],
            "first": order[0].short if order else "", "last": order[-1].short if order else "",
            "gaps": len(gaps), "unmeasured": sum(n for _, n in gaps), "charts": [c for c in charts if c], "apart": apart,
            "changes": H.step_changes(values, order), "failures": H.failure_onsets(values, fails, order)}


_CHANGE_COLUMNS = [
    column("after", "changed in", kind="code", title="the first measured commit with the new value"),
    column("subject", "its subject"), column("range", "range", kind="code", title="previous measured commit .. this one"),
    column("machine", "machine"), column("benchmark", "benchmark", kind="code"),
    column("technique", "technique", kind="tech"), column("config", "parameters"),
    column("before", "before (bytes)", num=True), column("after_bytes", "after (bytes)", num=True),
    column("factor", "factor", num=True, title="after / before")]


def _change_row(c: dict[str, Any]) -> tuple[dict, dict]:
    a, b = c["before"], c["after"]
    span = f"{a.short}..{b.short}" + (f" ({c['between']} commits)" if c["between"] not in (None, 1) else "")
    factor = "from 0" if c["factor"] is None else f"{c['factor']:.2f}×"
    row = {"after": b.short, "subject": b.subject or "(not in this repository)", "range": span, "machine": c["machine"],
           "benchmark": c["benchmark"].split(".", 1)[-1], "technique": c["technique"] or "-", "peer": False,
           "config": ", ".join(f"{k}={v}" for k, v in c["params"].items()),
           "before": f"{c['before_value']:,.0f}", "before__sort": c["before_value"],
           "after_bytes": f"{c['after_value']:,.0f}", "after_bytes__sort": c["after_value"],
           "factor": factor, "factor__sort": c["factor"]}
    record = {"before_commit": a.hash, "after_commit": b.hash, "subject": b.subject, "commits_in_range": c["between"],
              "machine": c["machine"], "benchmark": c["benchmark"], "technique": c["technique"], "params": c["params"],
              "before_bytes": c["before_value"], "after_bytes": c["after_value"], "factor": c["factor"]}
    return row, record


_FAILURE_COLUMNS = [
    column("failed_at", "failed at", kind="code", title="the first measured commit where it failed"),
    column("subject", "its subject"),
    column("last_good", "last good", kind="code", title="the last measured commit where it had a value"),
    column("machine", "machine"), column("benchmark", "benchmark", kind="code"),
    column("technique", "technique", kind="tech"), column("config", "parameters"),
    column("failed_commits", "measured commits failed", num=True, title="consecutive measured commits, from this one"),
    column("fixed_at", "next value at", kind="code", title="the next measured commit with a value, if any")]


def _failure_row(f: dict[str, Any]) -> tuple[dict, dict]:
    good, fixed = f["last_good"], f["fixed_at"]
    row = {"failed_at": f["failed_at"].short, "subject": f["failed_at"].subject or "(not in this repository)",
           "last_good": good.short if good else "none", "machine": f["machine"],
           "benchmark": f["benchmark"].split(".", 1)[-1], "technique": f["technique"] or "-", "peer": False,
           "config": ", ".join(f"{k}={v}" for k, v in f["params"].items()),
           "failed_commits": str(f["failed_commits"]), "failed_commits__sort": f["failed_commits"],
           "fixed_at": fixed.short if fixed else "still failing"}
    record = {"failed_commit": f["failed_at"].hash, "subject": f["failed_at"].subject,
              "last_good_commit": good.hash if good else None, "last_good_value": f["last_good_value"],
              "machine": f["machine"], "benchmark": f["benchmark"], "technique": f["technique"], "params": f["params"],
              "measured_commits_failed": f["failed_commits"], "next_value_commit": fixed.hash if fixed else None,
              "error": f["error"] or None}
    return row, record


def _table(page: Page, name: str, columns: list, items: list, to_row: Callable) -> dict | None:
    if not items:
        return None
    pairs = [to_row(i) for i in items]
    return page.table(name, columns, [p[0] for p in pairs], [p[1] for p in pairs])


def _factors(g: dict[str, Any]) -> str:
    if g["factors"] is None:
        return "from 0"
    lo, hi = (f"{f:.2f}×" for f in g["factors"])
    return lo if lo == hi else f"{lo} to {hi}"


def _summary(changes: list[dict], onsets: list[dict]) -> list[dict[str, Any]]:
    """One line per machine and commit: its step changes, then its failure onsets, in history order."""
    items = [{"kind": "change", "commit": g["after"], "machine": g["machine"], "before": g["before"].short,
              "count": g["count"], "techniques": ", ".join(g["techniques"]), "factors": _factors(g)}
             for g in H.changes_by_commit(changes)]
    items += [{"kind": "failure", "commit": g["failed_at"], "machine": g["machine"], "count": g["count"],
               "benchmarks": ", ".join(g["benchmarks"]), "techniques": ", ".join(g["techniques"]),
               "last_good": g["last_good"].short if g["last_good"] else None} for g in H.failures_by_commit(onsets)]
    items.sort(key=lambda i: (i["machine"], i["commit"].position, i["kind"]))
    return [{**i, "after": i["commit"].short, "subject": i["commit"].subject} for i in items]


def _frames(ctx: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The values (with ``version``) and the failures of ``ctx``'s asv results."""
    asv = ctx["asv"]
    results = Path(ctx["results_dir"])
    outcomes = H.load_outcomes(results) if results.is_dir() else H.Outcomes(pd.DataFrame(columns=list(H.FAILURE_COLUMNS)))
    values = H.with_versions(asv if asv is not None else pd.DataFrame(columns=["machine", "commit", "benchmark"]),
                             outcomes.versions)
    return values, outcomes.failures


def history_page(ctx: dict[str, Any], guard: Guard) -> dict[str, Any]:
    """The History page's template data (``history.html``): a section per machine, the regressions view.

    ``ctx`` is the site build's context (``asv``, ``results_dir``, ``machines``, ``colors``).
    """
    page = Page("history.html")
    values, fails = guard("the asv failures and versions", lambda: _frames(ctx)) or (ctx["asv"], pd.DataFrame(
        columns=list(H.FAILURE_COLUMNS)))
    if "version" not in values:
        values = H.with_versions(values, {})
    machines = sorted(set(values["machine"]) | set(fails["machine"]))
    main = H.main_line(ctx["results_dir"], H.main_branch(ctx["results_dir"])) if machines else H.MainLine()
    sections = [_machine_section(page, m, (values, fails), main, ctx, guard) for m in machines]
    changes = sorted((c for s in sections for c in s["changes"]),
                     key=lambda c: (c["machine"], c["after"].position, c["benchmark"], c["technique"]))
    onsets = [f for s in sections for f in s["failures"]]
    return page.done({
        "template": "history.html", "path": "history.html", "title": "History (asv)", "sections": sections,
        "machines": machines, "ordered_by_git": bool(main.line), "summary": _summary(changes, onsets),
        "regressions": _table(page, "memory step changes", _CHANGE_COLUMNS, changes, _change_row),
        "failures": _table(page, "failures", _FAILURE_COLUMNS, onsets, _failure_row),
        "regressions_id": page.anchor("regressions"), "n_changes": len(changes), "n_failures": len(onsets)})
