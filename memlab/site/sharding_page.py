"""The Sharding page: each rank's peak under DDP, ZeRO-1 and FSDP2 against the world size N (issue 48).

Drawn from ``data/sharding/*.jsonl`` (one JSON object per rank per run, as
:func:`memlab.sharding.worker.run_strategy` writes it; data/sharding/README.md), one part per file.
Per strategy: a chart of the largest rank's peak (bytes, drawn in MiB) against N, measured and
predicted by the torch-free fit of :mod:`memlab.sharding.predict` (fitted on the runs at
:data:`FIT_WORLDS`, as ``python -m memlab.sharding predict``'s default ``--fit``, or as
:data:`FIT_PLANS` says for a file docs/sharding.md fits otherwise; the other N are checked), with
the ZeRO paper's model-state bytes (:func:`memlab.sharding.formulas.zero_model_state`); and a table
per file: measured and predicted peak, their difference (bytes, exact), the formula's model state
and the largest rank's peak by category (bytes).  Nothing is run here: no torch.

A sharded sweep's rows (``memlab sweep --shard-strategy ... --out FILE``; ``"kind": "sharded"``:
:mod:`memlab.sharding.sweep_plan`) given to ``memlab site --run FILE`` are drawn the same way, one part
per model and sizes of each file, fitted on every N the sweep ran (so none is checked: the part says
so); every table names the machine the ranks ran on.

FSDP on one rank is a different program (its shards are whole, it gathers nothing), which the fit
leaves out (NOTE [ the per-rank peak as a function of N ] in :mod:`memlab.sharding.predict`): its
N = 1 runs are shown measured, not predicted.  A file that cannot be read or fitted is left out with
a problem line (methodology page); no file, no page.
"""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

from .. import results as R
from ..core.record import CATEGORIES
from ..core.units import MiB
from ..sharding.formulas import zero_model_state
from ..sharding.predict import base_strategy, check, fit
from ..sharding.sweep_plan import is_sharded_row
from . import figures as F
from .notes import CATEGORY_NAMES
from .page import Page
from .tables import column

__all__ = ["FOLDER", "PATH", "FIT_WORLDS", "FIT_PLANS", "sharding_files", "load_sharding_rows", "load_sweep_rows",
           "model_points", "strategy_figure", "sharding_page", "add_sharding_page"]

#: the folder under the data directory
FOLDER = "sharding"
#: the page's path in the site
PATH = "sharding.html"
#: the worlds the fit takes where a file has them (``python -m memlab.sharding predict``'s default ``--fit``)
FIT_WORLDS = (1, 3, 6, 8)
#: files fitted otherwise: (its worlds the fit takes, other files whose rows it also takes, why), as
#: docs/sharding.md#prediction and tests/test_sharding_predict.py fit them
FIT_PLANS = {"gpt2-tiny-g24.jsonl": ((1, 3, 6), ("gpt2-tiny-g32-fsdp-n8.jsonl",),
                                     "N = 8 is left out of the fit and shown as checked: at 3 sequences per rank the "
                                     "backward phase's highest point moves to a later point of backward, a second point "
                                     "inside one phase that the fit does not split; FSDP, fitted at N >= 2 only, takes "
                                     "N = 8 at global batch 32 (4 sequences per rank) as its third point "
                                     "(docs/sharding.md#prediction)")}
#: trace styles of a chart: (name, colour, mode, marker symbol, dash)
_STYLES = {"measured": ("measured (largest rank)", F.NEUTRAL_COLOR, "lines+markers", "circle", "solid"),
           "fit": ("predicted at a fitted N", "#1f77b4", "markers", "circle-open", "solid"),
           "checked": ("predicted at a checked N", "#d62728", "markers", "x", "solid"),
           "formula": ("model state by the ZeRO formula", "#2ca02c", "lines+markers", "square-open", "dot")}


def sharding_files(data_dir: Path) -> list[Path]:
    """``<data_dir>/sharding/*.jsonl`` (listed, not opened)."""
    return R.list_input_files(Path(data_dir) / FOLDER, ".jsonl")


def load_sharding_rows(data_dir: Path) -> tuple[list[tuple[Path, list[dict]]], list[str]]:
    """``([(path, per-rank rows)], problems)``: the readable files, sorted by name."""
    out, problems = [], []
    for path in sharding_files(data_dir):
        try:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, ValueError) as exc:
            problems.append(f"sharding/{path.name}: unreadable ({type(exc).__name__}); left out of the Sharding page")
            continue
        if not rows or not all(isinstance(r, dict) and {"strategy", "world", "rank", "peak_bytes"} <= set(r) for r in rows):
            problems.append(f"sharding/{path.name}: not per-rank rows of memlab.sharding; left out of the Sharding page")
            continue
        out.append((path, rows))
    return out, problems


def _sweep_groups(path: Path, problems: list[str]) -> list[list[dict]]:
    """A ``--run`` file's sharded rows, one list per (model, sizes); none when its first line is not a
    sharded sweep's row (a technique sweep: the other pages read it, and name its problems).  In a
    sharded sweep's file, a line that is not a rank row is one problem, ``FILE:LINE``."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError:
        return []  # the sweep reader names why (memlab.results.load_runs)
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    groups: dict[str, list[dict]] = {}
    for n, line in numbered:
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            row = None
        if not is_sharded_row(row):
            if groups:  # only a sharded sweep's file is this page's to judge
                problems.append(f"{R.shown_path(path)}:{n}: not a rank row of a sharded sweep; left out of the "
                                f"Sharding page")
                continue
            return []
        groups.setdefault(json.dumps([row.get("model"), row.get("sizes")], sort_keys=True), []).append(row)
    return list(groups.values())


def load_sweep_rows(paths: list[Path]) -> tuple[list[tuple[Path, list[dict]]], list[str]]:
    """``([(path, rows of one model and sizes)], problems)`` of the sharded sweep files among ``paths``
    (``memlab site --run``), in the order given; the other files are left to the other pages."""
    out, problems = [], []
    for path in paths:
        out += [(Path(path), rows) for rows in _sweep_groups(path, problems)]
    return out, problems


def _num(x: int | float | Fraction) -> int | float:
    x = Fraction(x)
    return int(x) if x.denominator == 1 else float(x)


def _fmt(x: int | float | None) -> str:
    """Bytes in full: ``1,234,567`` (a fraction of a byte, as a formula's Ψ/N gives, to one decimal)."""
    if x is None:
        return "-"
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.1f}"


def _groups(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """Rows by (strategy, world), in file order of strategies and ascending worlds."""
    out: dict[tuple[str, int], list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["world"], r["rank"])):
        out.setdefault((r["strategy"], r["world"]), []).append(r)
    order = list(dict.fromkeys(r["strategy"] for r in rows))
    return dict(sorted(out.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])))


def _role(strategy: str, world: int, fit_worlds: list[int]) -> str:
    """``fit``, ``checked`` or ``not predicted`` (FSDP on one rank)."""
    if base_strategy(strategy) == "fsdp" and world == 1:
        return "not predicted"
    return "fit" if world in fit_worlds else "checked"


def _point(strategy: str, world: int, ranks: list[dict], checks: dict[tuple, dict], role: str) -> dict[str, Any]:
    """One (strategy, N): the largest measured rank, the largest predicted peak, the per-rank
    differences (measured less leftover minus predicted, bytes) and the formula's model state."""
    top = max(ranks, key=lambda r: (r["peak_bytes"], -r["rank"]))
    mine = [checks[(strategy, world, r["rank"])] for r in ranks] if role != "not predicted" else []
    formula = zero_model_state(base_strategy(strategy), int(top["psi"]), world)
    return {"strategy": strategy, "world": world, "batch_per_rank": top.get("batch_per_rank"), "role": role,
            "measured": top["peak_bytes"], "measured_rank": top["rank"],
            "predicted": max((c["predicted"] for c in mine), default=None),
            "diffs": {c["rank"]: _num(c["diff"]) for c in mine},
            "leftover": {c["rank"]: c["leftover"] for c in mine if c["leftover"]},
            "formula": _num(Fraction(formula.total).limit_denominator(world)),
            "categories": {c: top["peak"].get(c) for c in CATEGORIES},
            "machine": ", ".join(sorted({str(r.get("machine") or "not recorded") for r in ranks}))}


def model_points(rows: list[dict], plan: tuple[int, ...] = FIT_WORLDS, extra: list[dict] = ()) -> dict[str, Any]:
    """One file's rows fitted (on its worlds in ``plan``, all of them if none is, and the ``extra``
    rows) and checked: ``points`` (:func:`_point` per strategy and N), ``fit_worlds``,
    ``checked_worlds`` and ``inexact`` (the fitted categories no count set reproduced to the byte)."""
    worlds = sorted({r["world"] for r in rows})
    fit_worlds = [n for n in worlds if n in plan] or worlds
    f = fit([r for r in rows if r["world"] in fit_worlds] + list(extra))
    groups = _groups(rows)
    roles = {key: _role(*key, fit_worlds) for key in groups}
    predicted = [r for key, ranks in groups.items() if roles[key] != "not predicted" for r in ranks]
    checks = {(c["strategy"], c["world"], c["rank"]): c for c in check(f, predicted)}
    inexact = [f"{label} {phase} {c}" for label, phases in f.categories.items() for phase, cats in phases.items()
               for c, cf in cats.items() if not cf.exact]
    return {"points": [_point(s, n, ranks, checks, roles[(s, n)]) for (s, n), ranks in groups.items()],
            "fit_worlds": fit_worlds, "checked_worlds": [n for n in worlds if n not in fit_worlds], "inexact": inexact}


def _trace(kind: str, points: list[dict], key: str) -> dict[str, Any]:
    name, color, mode, symbol, dash = _STYLES[kind]
    values = [p[key] for p in points]
    return {"type": "scatter", "mode": mode, "name": F.esc(name), "x": [p["world"] for p in points],
            "y": [float(v) / MiB for v in values], "customdata": values,
            "text": [f"N={p['world']}: {_fmt(v)} B" for p, v in zip(points, values)], "hoverinfo": "text+name",
            "line": {"color": color, "dash": dash}, "marker": {"color": color, "symbol": symbol, "size": 10}}


def strategy_figure(points: list[dict]) -> dict[str, Any]:
    """One strategy's chart: the largest rank's measured and predicted peak (MiB; ``customdata`` the
    bytes) against N, predicted points at fitted and checked N told apart, and the ZeRO formula's
    model state."""
    data = [_trace("measured", points, "measured")]
    for role in ("fit", "checked"):
        mine = [p for p in points if p["role"] == role]
        if mine:
            data.append(_trace(role, mine, "predicted"))
    data.append(_trace("formula", points, "formula"))
    layout = F.chart_layout(F.chart_axis("world size N (ranks)", kind="linear"),
                            F.chart_axis("per-rank peak, largest rank (MiB)", kind="linear"))
    layout["xaxis"].update(tickmode="array", tickvals=[p["world"] for p in points], tickformat="d")
    return {"data": data, "layout": layout}


def _diff_text(p: dict) -> tuple[str, int | float | None]:
    """The difference cell: 0 when every rank is exact, else the largest on a rank (bytes)."""
    if p["role"] == "not predicted":
        return "-", None
    rank, d = max(p["diffs"].items(), key=lambda kv: (abs(kv[1]), -kv[0]))
    text = "0 on every rank" if d == 0 else f"{d:+,} (rank {rank})"
    if p["leftover"]:
        text += f"; measured less {', '.join(f'{b:,} B on rank {r}' for r, b in p['leftover'].items())} (DDP's rebuild leftover)"
    return text, d


def _table_row(p: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the table row, its download record) of one strategy and N."""
    diff, d = _diff_text(p)
    row = {"machine": p["machine"], "strategy": p["strategy"], "world": str(p["world"]), "world__sort": p["world"],
           "b": str(p["batch_per_rank"]), "b__sort": p["batch_per_rank"], "role": p["role"],
           "measured": _fmt(p["measured"]), "measured__sort": p["measured"],
           "predicted": _fmt(p["predicted"]), "predicted__sort": p["predicted"], "diff": diff, "diff__sort": d,
           "formula": _fmt(p["formula"]), "formula__sort": p["formula"]}
    for c in CATEGORIES:
        row[c], row[f"{c}__sort"] = _fmt(p["categories"][c]), p["categories"][c]
    record = {"machine": p["machine"], "strategy": p["strategy"], "world": p["world"], "batch_per_rank": p["batch_per_rank"], "role": p["role"],
              "measured_peak_bytes": p["measured"], "measured_peak_rank": p["measured_rank"],
              "predicted_peak_bytes": p["predicted"], "diff_bytes_by_rank": p["diffs"],
              "rebuild_leftover_bytes_by_rank": p["leftover"], "zero_formula_model_state_bytes": p["formula"],
              **{f"{c}_bytes": p["categories"][c] for c in CATEGORIES}}
    return row, record


def _table(page: Page, name: str, points: list[dict]) -> dict[str, Any]:
    cols = [column("machine", "machine", title="the host the ranks ran on (its name as the rows record it)"),
            column("strategy", "strategy", kind="code"), column("world", "N", num=True),
            column("b", "per-rank batch", num=True),
            column("role", "N in the fit", title="fit: a world the fit took; checked: predicted from the others"),
            column("measured", "measured peak (B)", num=True, title="the largest rank's peak, bytes"),
            column("predicted", "predicted peak (B)", num=True, title="the largest predicted rank's peak, bytes"),
            column("diff", "difference (B)", num=True,
                   title="measured less DDP's rebuild leftover, minus predicted, per rank: the largest"),
            column("formula", "ZeRO model state (B)", num=True,
                   title="the ZeRO paper's 2Ψ+2Ψ+KΨ in float32 (4Ψ+4Ψ+8Ψ), sharded as the strategy shards it")]
    cols += [column(c, f"{CATEGORY_NAMES.get(c, c)} (B)", num=True, title="the largest rank at its peak, bytes")
             for c in CATEGORIES]
    rows, records = zip(*(_table_row(p) for p in points))
    return page.table(name, cols, list(rows), list(records))


def _summary(points: list[dict]) -> str:
    """One line: whether every checked rank was predicted to the byte, and where not (bytes)."""
    checked = [p for p in points if p["role"] == "checked"]
    if not checked:
        return "no N checked (every world of this file is a fit world)"
    missed = [p for p in checked if any(p["diffs"].values())]
    if not missed:
        return "every checked rank predicted to the byte"
    exact = ", ".join(f"{p['strategy']} N={p['world']}" for p in checked if p not in missed) or "no checked N"
    off = ", ".join(f"{p['strategy']} N={p['world']}" for p in missed)
    worst, strategy, world = max(((d, p["strategy"], p["world"]) for p in missed for d in p["diffs"].values()),
                                 key=lambda t: abs(t[0]))
    return (f"every rank predicted to the byte at {exact}; not every rank at {off} "
            f"(largest difference {worst:+,} B, {strategy} N={world})")


def _section(page: Page, path: Path, rows: list[dict], others: dict[str, list[dict]],
             sweep: bool = False) -> dict[str, Any]:
    """One file's part of the page: its charts (one per strategy) and its table (``others``: every
    file's rows by name, for :data:`FIT_PLANS`); ``sweep``: one model and sizes of a sharded sweep's
    ``--run`` file, fitted on every N it ran."""
    plan, extra, why = FIT_PLANS.get(path.name, (FIT_WORLDS, (), "")) if not sweep else \
        (tuple(sorted({r["world"] for r in rows})), (), "")
    extra = [n for n in extra if n in others]
    fitted = model_points(rows, plan, [r for n in extra for r in others[n]])
    points = fitted["points"]
    batch = (rows[0].get("sizes") or {}).get("batch")
    heading = f"{rows[0].get('model', path.stem)} · {path.name}" + (f" (sweep, global batch {batch})" if sweep else "")
    anchor = page.anchor(f"{path.stem} {rows[0].get('model')} g{batch}" if sweep else path.stem)
    charts = []
    for strategy in dict.fromkeys(p["strategy"] for p in points):
        mine = [p for p in points if p["strategy"] == strategy]
        charts.append(page.chart(strategy_figure(mine), f"{strategy}: per-rank peak vs N",
                                 "Largest rank's peak per N (hover for the bytes): measured (solid), predicted by the "
                                 "fit (open circles at the N it was fitted on, crosses at the N it predicts), and the "
                                 "ZeRO paper's model state (dotted; parameters, gradients and Adam state only).",
                                 anchor=f"{anchor} {strategy}"))
    sizes, model = rows[0].get("sizes") or {}, str(rows[0].get("model"))
    file = R.shown_path(path) if sweep else f"data/{FOLDER}/{path.name}"
    fit_n, check_n = (",".join(map(str, fitted[k])) for k in ("fit_worlds", "checked_worlds"))
    command = "" if extra else (f"python -m memlab.sharding predict --rows {file} --model {model} "
                                f"--fit {fit_n} --check {check_n or fit_n}")
    return {"command": command,"id": anchor, "heading": heading, "file": file, "model": model,
            "psi": f"{rows[0].get('psi', 0):,}", "global_batch": sizes.get("batch"),
            "sizes": ", ".join(f"{k}={v}" for k, v in sizes.items() if k not in ("model", "batch")),
            "fit_worlds": ", ".join(map(str, fitted["fit_worlds"])),
            "checked_worlds": ", ".join(map(str, fitted["checked_worlds"])), "inexact": fitted["inexact"],
            "extra": [f"data/{FOLDER}/{n}" for n in extra], "plan_note": why,
            "summary": _summary(points), "charts": charts, "table": _table(page, f"{anchor} peaks", points)}


def sharding_page(files: list[tuple[Path, list[dict]]],
                  sweeps: list[tuple[Path, list[dict]]] = ()) -> tuple[dict[str, Any] | None, list[str]]:
    """(the page context, problems) from ``[(path, rows)]`` of ``data/sharding`` and of sharded sweeps
    (:func:`load_sweep_rows`); no page when no part builds."""
    page, sections, problems = Page(PATH), [], []
    others = {path.name: rows for path, rows in files}
    for path, rows, sweep in [(p, r, False) for p, r in files] + [(p, r, True) for p, r in sweeps]:
        try:
            sections.append(_section(page, path, rows, others, sweep))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            where = R.shown_path(path) if sweep else f"sharding/{path.name}"
            problems.append(f"{where}: left out of the Sharding page ({type(exc).__name__}: {exc})"[:300])
    if not sections:
        return None, problems
    return page.done({"template": "sharding.html", "path": PATH, "title": "Sharding", "sections": sections,
                      "folder": f"data/{FOLDER}", "fit_default": ", ".join(map(str, FIT_WORLDS))}), problems


def add_sharding_page(ctx: dict[str, Any]) -> dict[str, Any]:
    """The Sharding page when ``data/sharding`` or a ``--run`` file of a sharded sweep has a usable part
    (``ctx["sharding_path"]`` its path for the navigation, else None)."""
    files, problems = load_sharding_rows(ctx["data_dir"])
    sweeps, unread = load_sweep_rows(ctx.get("extra_runs", []))
    page, more = sharding_page(files, sweeps)
    return {**ctx, "pages": ctx["pages"] + ([page] if page else []), "sharding_path": PATH if page else None,
            "problems": ctx["problems"] + problems + unread + more}
