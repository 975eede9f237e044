"""Measurement rows as tables: the cells a page shows and the raw records its downloads hold.

A measurement table lists what the rows have: a mode column only where both modes appear, the
machine always (NOTE [ the machine a row ran on ] in :mod:`memlab.results`), a run column (run file,
commit, load) only where the rows come from several runs, total peak, analytic floor and activation
peak only where some row has them.  Numeric cells sort by the raw
figure (bytes, seconds, ratio); the download holds the raw figures of the same rows in the same order.
"""
from __future__ import annotations

import re
from typing import Any

import pandas as pd

from . import ranking as A
from .page import Page
from .tables import column, sort_value
from .text import fmt_check, fmt_load, fmt_mib, fmt_rate, fmt_relative, fmt_step

__all__ = ["measurement_table", "not_ranked_table", "not_ranked_groups", "run_identity", "several_runs", "setting_of",
           "machine_column", "machine_facts", "MACHINE_TITLE"]


def _text(v: Any) -> str:
    """A string cell; '' for None and for pandas' missing-value NaN."""
    return "" if v is None or (isinstance(v, float) and v != v) else str(v)


def _n(v: Any) -> int | float | None:
    """A sort value (:func:`memlab.site.tables.sort_value`)."""
    return sort_value(v)


def run_identity(r: Any) -> tuple[str, str, str]:
    """``(run file, machine, commit)`` of a row."""
    env = r.environment or {}
    return (r.run, r.machine, str(env.get("git_commit") or "")[:7])


def several_runs(rows: pd.DataFrame) -> bool:
    """Whether ``rows`` come from more than one run (file, machine or commit)."""
    return len({run_identity(r) for r in rows.itertuples()}) > 1


def setting_of(r: Any) -> tuple[str, ...]:
    return tuple(getattr(r, c) for c in A.SETTING)


def _per_step(r: Any) -> str:
    """A leak's growth per step (``'4.0 MiB per step'``); '' for other rows."""
    return f"{fmt_mib(r.leak_bytes_per_step)} per step" if r.status_shown == "leak" else ""


def _run_text(r: Any) -> str:
    """Run file · commit · load average (the machine has its own column)."""
    run, _, commit = run_identity(r)
    load = fmt_load(r.load_avg_before, r.load_avg_after, r.cores)
    return " · ".join(p for p in (run, commit, "" if load == "-" else load) if p)


#: The machine column's tooltip.
MACHINE_TITLE = ("the machine the row ran on: host, CPU or GPU model, and which GPU (its UUID); rows recorded "
                 "before memlab kept the host are named by the model alone. Rows of two machines are never "
                 "compared, ranked or averaged together")


def machine_column() -> dict[str, Any]:
    """The machine column every measurement table has."""
    return column("machine", "machine", title=MACHINE_TITLE)


def machine_facts(env: dict | None) -> dict[str, Any]:
    """The host facts a download keeps beside the machine label: host, GPU UUID and index, the
    ``CUDA_VISIBLE_DEVICES`` entry the row was pinned to (None where not recorded)."""
    env = env or {}
    return {k: env.get(k) for k in ("host", "gpu_uuid", "gpu_index", "cuda_visible_devices")}


def _record(r: Any) -> dict[str, Any]:
    """A row's raw figures for the downloads (bytes, seconds, samples/s)."""
    env = r.environment or {}
    return {
        "technique": r.technique, "peer": bool(r.peer), "family": r.family, "workload": r.workload,
        "device": r.device, "dtype": r.dtype, "mode": r.mode, "optimizer": r.optimizer, "loss": r.loss,
        "params": r.params, "status": r.status_shown, "reason": r.reason,
        "peak_allocated_bytes": r.peak_allocated_bytes, "total_peak_bytes": r.total_peak_bytes,
        "peak_reserved_bytes": r.peak_reserved_bytes, "analytic_floor_bytes": r.analytic_floor_bytes,
        "predicted_cuda_allocated_bytes": r.predicted_cuda_allocated_bytes,
        "predicted_cuda_reserved_bytes": r.predicted_cuda_reserved_bytes,
        "predicted_cuda_fragmentation_bytes": r.predicted_cuda_fragmentation_bytes,
        "activation_peak_bytes": r.activation_peak_bytes, "peak_by_category_bytes": r.peak_by_category_bytes,
        "step_time_s": r.step_time_s, "step_time_iqr_s": r.step_time_iqr_s, "step_times_s": list(r.step_times_s),
        "relative_step_time": r.relative_step_time, "reference_step_time_s": r.reference_step_time_s,
        "samples_per_s": r.samples_per_s, "load_avg_before": r.load_avg_before, "load_avg_after": r.load_avg_after,
        "cores": r.cores, "under_load": bool(r.under_load), "matches_reference": r.matches_reference,
        "check_dtype": r.check["dtype"], "max_abs_error": r.max_abs_error, "schema": r.schema,
        "run": r.run, "source": r.source, "line": r.line, "machine": r.machine, **machine_facts(env),
        "git_commit": env.get("git_commit"), "torch": env.get("torch"),
    }


def _any(rows: pd.DataFrame, column: str) -> bool:
    return bool(len(rows)) and bool(rows[column].notna().any())


def measurement_table(page: Page, name: str, rows: pd.DataFrame, *, skip: dict | None = None,
                      notes: dict[str, dict] | None = None, baseline: str | None = None) -> dict[str, Any]:
    """A table of measurement rows (in the order given); ``skip`` parameters are left out of the
    parameters column (shown once above the table), ``notes`` maps a technique to its footnote
    (``{"n", "id"}``), ``baseline`` marks that technique's rows."""
    notes = notes or {}
    cells = [_measurement_cell(r, notes.get(r.technique), skip, baseline) for r in rows.itertuples()]
    records = [_record(r) for r in rows.itertuples()]
    return page.table(name, _measurement_columns(rows), cells, records)


def _measurement_columns(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The columns of :func:`measurement_table`: those every table has, and the optional ones (mode,
    total peak, predicted GPU bytes, floor, activation peak, run) where some row has a value."""
    devices = set(rows["device"]) if len(rows) else set()
    second = "resident" if devices <= {"cpu"} else ("reserved" if not any(d == "cpu" for d in devices)
                                                   else "reserved/resident")
    cols = [column("technique", "technique", kind="tech")]
    if len(rows) and rows["mode"].nunique() > 1:
        cols.append(column("mode", "mode"))
    cols += [column("params", "parameters"), column("status", "status", kind="status"),
             column("peak_allocated", "peak allocated", num=True,
                    title="highest bytes of live tensors during one step, above the step's baseline")]
    if _any(rows, "total_peak_bytes"):
        cols.append(column("total_peak", "total peak", num=True, title="everything live at the step's peak, baseline included"))
    cols.append(column("peak_reserved", f"peak {second}", num=True))
    if _any(rows, "predicted_cuda_reserved_bytes"):  # NOTE [ predicted CUDA memory ]: never measured, always said
        cols += [column("gpu_allocated", "GPU allocated (predicted)", num=True,
                        title="predicted max_memory_allocated() of this step on a GPU, baseline included: PyTorch's "
                              "caching allocator modelled on this row's exact CPU allocation trace"),
                 column("gpu_reserved", "GPU reserved (predicted)", num=True,
                        title="predicted max_memory_reserved() of this step on a GPU (default PYTORCH_CUDA_ALLOC_CONF); "
                              "the CUDA context and cuBLAS/cuDNN workspaces are not included")]
    if _any(rows, "analytic_floor_bytes"):
        cols.append(column("floor", "analytic floor", num=True, title="the technique's stated floor for this step"))
    if _any(rows, "activation_peak_bytes"):
        cols.append(column("activation", "activation peak", num=True))
    cols += [column("step", "step (median ± IQR)", num=True, kind="step",
                    title="median ± interquartile range of the timed steps, ms"),
             column("relative", "relative step", num=True,
                    title="the technique's step over the family baseline's step, timed interleaved in the "
                          "same process: load-robust"),
             column("throughput", "samples/s", num=True)]
    cols.append(machine_column())
    if several_runs(rows):
        cols.append(column("run", "run", kind="run", title="run file · commit · load average"))
    cols.append(column("matches", "matches reference", kind="check"))
    return cols


def _measurement_cell(r: Any, note: dict | None, skip: dict | None, baseline: str | None) -> dict[str, Any]:
    """One row (a ``rows.itertuples()`` tuple) of :func:`measurement_table`: bytes shown in MiB, times
    in ms, each with its ``__sort`` number."""
    return {"technique": r.technique, "peer": bool(r.peer), "is_baseline": r.technique == baseline,
            "note": note, "mode": r.mode, "params": A.param_text(r.params, skip),
            "status": r.status_shown, "error": _text(r.reason) or _accumulation_text(r), "per_step": _per_step(r),
            "peak_allocated": fmt_mib(r.peak_allocated_bytes), "peak_allocated__sort": _n(r.peak_allocated_bytes),
            "total_peak": fmt_mib(r.total_peak_bytes), "total_peak__sort": _n(r.total_peak_bytes),
            "peak_reserved": fmt_mib(r.peak_reserved_bytes), "peak_reserved__sort": _n(r.peak_reserved_bytes),
            "gpu_allocated": fmt_mib(r.predicted_cuda_allocated_bytes),
            "gpu_allocated__sort": _n(r.predicted_cuda_allocated_bytes),
            "gpu_reserved": fmt_mib(r.predicted_cuda_reserved_bytes), "gpu_reserved__sort": _n(r.predicted_cuda_reserved_bytes),
            "floor": fmt_mib(r.analytic_floor_bytes), "floor__sort": _n(r.analytic_floor_bytes),
            "activation": fmt_mib(r.activation_peak_bytes), "activation__sort": _n(r.activation_peak_bytes),
            "step": fmt_step(r.step_time_s, r.step_time_iqr_s), "step__sort": _n(r.step_time_s),
            "samples": len(r.step_times_s), "under_load": bool(r.under_load),
            "load": fmt_load(r.load_avg_before, r.load_avg_after, r.cores),
            "relative": fmt_relative(r.relative_step_time), "relative__sort": _n(r.relative_step_time),
            "throughput": fmt_rate(r.samples_per_s), "throughput__sort": _n(r.samples_per_s),
            "machine": r.machine, "run": _run_text(r), "matches": fmt_check(r.check)}


def _accumulation_text(r: Any) -> str:
    """Why the technique's peak exceeds its family baseline's when ``.grad`` exists before backward
    (its ``accumulation_note``, recorded only for rows with micro-batches accumulated or gradients
    zeroed: issue 44), or ``""``."""
    note = (r.extra or {}).get("accumulation_note") if isinstance(r.extra, dict) else None
    return f"above the baseline with gradients kept: {note}" if isinstance(note, str) and note else ""


def not_ranked_table(page: Page, name: str, rows: pd.DataFrame, with_family: bool = False) -> dict[str, Any]:
    """The rows that are listed but never ranked: technique, setting, parameters, status, reason."""
    bad = A.not_ranked(rows)
    order = sorted(bad.itertuples(), key=lambda r: (r.family, r.technique, setting_of(r), A.sort_key(r.params_key),
                                                   r.run, r.line))
    cols = ([column("family", "family")] if with_family else []) + [
        column("technique", "technique", kind="tech"), column("setting", "setting"), column("params", "parameters"),
        column("status", "status", kind="status"), column("reason", "reason"), machine_column()]
    if several_runs(bad):
        cols.append(column("run", "run", kind="run", title="run file · commit · load average"))
    cols.append(column("matches", "matches reference", kind="check"))
    cells = [{"family": r.family, "technique": r.technique, "peer": bool(r.peer), "is_baseline": False, "note": None,
              "setting": A.setting_text(setting_of(r)), "params": A.param_text(r.params), "status": r.status_shown,
              "error": "", "reason": _text(r.reason), "per_step": _per_step(r), "machine": r.machine,
              "run": _run_text(r), "matches": fmt_check(r.check)} for r in order]
    return page.table(name, cols, cells, [_record(r) for r in order])


def _reason_kind(reason: Any) -> str:
    """A reason with its numbers blanked: rows failing the same way (a peer's known defect at every
    size) share it."""
    return re.sub(r"[-+]?\d[\d.,]*(e[-+]?\d+)?", "#", _text(reason))


def not_ranked_groups(page: Page, name: str, rows: pd.DataFrame) -> dict[str, Any]:
    """The rows that are never ranked, one table row per family, technique, status, kind of reason
    (:func:`_reason_kind`) and machine with its count: a peer's known defect is one row per machine,
    not one per size.  The reason, parameters and check shown are the first row's; the family page
    lists every row."""
    bad = A.not_ranked(rows)
    order = sorted(bad.itertuples(), key=lambda r: (r.family, r.technique, setting_of(r), A.sort_key(r.params_key),
                                                   r.run, r.line))
    groups: dict[tuple, list] = {}
    for r in order:
        groups.setdefault((r.family, r.technique, r.status_shown, _reason_kind(r.reason), r.machine), []).append(r)
    cols = [column("family", "family"), column("technique", "technique", kind="tech"),
            column("status", "status", kind="status"), machine_column(), column("count", "rows", num=True),
            column("settings", "settings"), column("params", "parameters (first row)"),
            column("reason", "reason (first row)"), column("matches", "matches reference (first row)", kind="check")]
    cells, records = [], []
    for (family, tech, status, _, machine), group in groups.items():
        first = group[0]
        settings = sorted({A.setting_text(setting_of(r)) for r in group})
        cells.append({"family": family, "technique": tech, "peer": bool(first.peer), "is_baseline": False, "note": None,
                      "status": status, "error": "", "per_step": _per_step(first), "machine": machine,
                      "count": str(len(group)),
                      "count__sort": len(group), "settings": "; ".join(settings),
                      "params": A.param_text(first.params) + (f" (and {len(group) - 1} more)" if len(group) > 1 else ""),
                      "reason": _text(first.reason), "matches": fmt_check(first.check)})
        records.append({**_record(first), "rows": len(group), "settings": settings,
                        "params_of_every_row": [r.params for r in group]})
    return page.table(name, cols, cells, records)
