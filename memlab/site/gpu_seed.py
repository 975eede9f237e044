"""Measured on a real GPU, on the seed pages: each seed configuration that a ``make gpu-check`` table
holds, its allocated peak measured on the GPU beside the prediction from its CPU trace.

The seed pages otherwise show CUDA figures predicted by :mod:`memlab.cuda_replay.model`; where a GPU has
measured the same configuration, the reader sees both and the error, so a prediction the GPU
contradicts is never left standing alone.  A configuration matches when its technique, parameters,
mode and optimizer equal a CPU float32 measurement of the seed (the configurations
:func:`memlab.cuda.gpu_check.configurations` takes from the seeds).
"""
from __future__ import annotations

import warnings
from typing import Any

from .. import results as R
from . import ranking as A
from ..cuda.gpu_check import config_key
from .cuda import check_machine, fmt_pct, gpu_check_files, load_gpu_checks, relative_error
from .page import Page
from .tables import column, sort_value
from .text import fmt_mib

__all__ = ["add_gpu_measured_to_seed_pages"]


def _key(technique: Any, params: Any, mode: Any, optimizer: Any) -> str:
    return config_key({"technique": technique, "params": params, "mode": mode, "optimizer": optimizer})


def _seed_keys(seed: dict[str, Any]) -> set[str]:
    rows = seed["measurements"]
    if not len(rows):
        return set()
    cpu = rows[(rows["device"] == "cpu") & (rows["dtype"] == "float32")]
    return {_key(r.technique, r.params, r.mode, r.optimizer) for r in cpu.itertuples()}


def _block(page: Page, rows: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    cols = [column("technique", "technique", kind="tech"), column("params", "parameters"), column("mode", "mode"),
            column("gpu", "machine (GPU)"), column("status", "status", kind="status"),
            column("measured", "allocated peak, measured", num=True,
                   title="max_memory_allocated() during the step minus memory_allocated() before it"),
            column("predicted", "allocated peak, predicted", num=True, title="memlab.cuda_replay.model on the CPU trace"),
            column("err", "error", num=True, title="(predicted − measured) / measured")]
    cells, records = [], []
    for gpu, r in rows:
        meas, pred = r.get("measured_allocated_bytes"), r.get("predicted_allocated_bytes")
        err = relative_error(pred, meas)
        cells.append({"technique": r["technique"], "peer": False, "is_baseline": False, "note": None,
                      "params": A.param_text(r.get("params") or {}), "mode": str(r.get("mode", "train")), "gpu": gpu,
                      "status": str(r.get("status") or "-"), "per_step": None, "error": r.get("error") or None, "measured": fmt_mib(meas), "measured__sort": sort_value(meas),
                      "predicted": fmt_mib(pred), "predicted__sort": sort_value(pred),
                      "err": fmt_pct(err), "err__sort": sort_value(err)})
        records.append({**r, "gpu": gpu, "machine": gpu, "allocated_error": err})
    errors = [e for e in (rec["allocated_error"] for rec in records) if e is not None]
    return {"id": page.anchor("measured-on-a-gpu"), "table": page.table("gpu measured vs predicted", cols, cells, records),
            "worst": fmt_pct(max(errors, key=abs)) if errors else None, "n": len(rows)}


def add_gpu_measured_to_seed_pages(ctx: dict[str, Any]) -> dict[str, Any]:
    """Each seed page with configurations a GPU check measured gets ``gpu_measured``: the table of
    those rows (problems with the files are reported by the methodology page's GPU-check section)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", R.ResultsWarning)
        checks = load_gpu_checks(gpu_check_files(ctx["data_dir"]))
    if not checks:
        return ctx
    seeds = {s["seed"]: s for s in ctx["seeds"]}
    pages = []
    for p in ctx["pages"]:
        seed = seeds.get(p.get("seed")) if p.get("template") == "seed.html" else None
        keys = _seed_keys(seed) if seed is not None else set()
        used = [chk for chk in checks if any(_key(r.get("technique"), r.get("params"), r.get("mode", "train"),
                                                   r.get("optimizer")) in keys for r in chk["rows"])]
        rows = [(check_machine(chk), r) for chk in used for r in chk["rows"]
                if _key(r.get("technique"), r.get("params"), r.get("mode", "train"), r.get("optimizer")) in keys]
        if not rows:
            pages.append(p)
            continue
        page = Page(p["path"])
        block = _block(page, rows)
        block["sources"] = sorted({chk["source"] for chk in used})
        runs = [{"what": "measured on a GPU (make gpu-check)", "data": f"data/gpu-check/{chk['source']}",
                 "commit": str(chk.get("memlab_commit") or "not recorded")[:12], "machine": check_machine(chk)}
                for chk in sorted(used, key=lambda c: c["source"])]
        block["runs"] = runs
        pages.append({**p, "gpu_measured": block, "runs": [*p.get("runs", []), *runs],
                      "files": dict(sorted({**p.get("files", {}), **page.files}.items()))})
    return {**ctx, "pages": pages}
