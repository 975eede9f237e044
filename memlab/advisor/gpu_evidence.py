"""What a real GPU said about the figures the advisor's CUDA need is built on (torch-free).

``memlab advise --device cuda`` turns a model's exact CPU peak into a CUDA need with a stated margin
(:data:`memlab.advisor.advise.CUDA_MARGIN`).  That is only as good as "CUDA allocates the same
tensors as the CPU trace says".  ``make gpu-check`` (:mod:`memlab.cuda.gpu_check`) measured exactly that
on a GPU: for each configuration, ``measured_allocated_bytes`` (``max_memory_allocated()`` during
the step minus ``memory_allocated()`` before it) beside ``cpu_peak_allocated_bytes`` (the same step's
exact CPU figure, the quantity the models are fitted to).  This module summarises those rows for the
techniques of one advisor family, so the advice can say how far the GPU was from the CPU figure, on
which GPU, over how many configurations, instead of leaving the margin unexamined.

A table that cannot be read is left out with its reason; it never stops the advice.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.record import is_number

__all__ = ["GPU_CHECK_DIR", "gpu_evidence", "format_gpu_evidence"]

GPU_CHECK_DIR = Path(__file__).resolve().parents[2] / "data" / "gpu-check"


def _bytes(v: Any) -> bool:
    return is_number(v) and v > 0


def _in_family(row: Mapping[str, Any], techniques: set[str], fixed: Mapping[str, Any]) -> bool:
    params = row.get("params") or {}
    return (row.get("technique") in techniques and isinstance(params, dict)
            and all(params.get(k, v) == v for k, v in fixed.items()))


def gpu_evidence(techniques: Iterable[str], fixed: Mapping[str, Any],
                 directory: str | Path | None = None) -> list[dict[str, Any]]:
    """One summary per GPU-check table under ``directory`` (default ``data/gpu-check``) that measured
    the modelled ``techniques`` of a family at its ``fixed`` workload settings (e.g. MLP blocks): its
    declaration's entries and ``workload_fixed``.

    Each: ``file``, ``gpu``, ``torch``, ``configurations`` (rows with status ok and both figures),
    ``exact`` (rows where the two are equal to the byte), ``min_excess`` / ``max_excess`` (the
    measured GPU figure over the CPU figure, as a fraction of the CPU figure: 0.026 = 2.6% more on
    the GPU), ``not_ok`` (rows of the family that did not measure); or ``file`` and ``problem``.
    """
    techniques = set(techniques)
    folder = Path(directory) if directory is not None else GPU_CHECK_DIR
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            table = json.loads(path.read_text(encoding="utf-8"))
            rows = table["rows"]
            if not isinstance(rows, list):
                raise TypeError("'rows' is not a list")
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            out.append({"file": str(path), "problem": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        mine = [r for r in rows if isinstance(r, dict) and _in_family(r, techniques, fixed)]
        if not mine:
            continue
        pairs = [(r["measured_allocated_bytes"], r["cpu_peak_allocated_bytes"]) for r in mine
                 if r.get("status") == "ok" and _bytes(r.get("measured_allocated_bytes"))
                 and _bytes(r.get("cpu_peak_allocated_bytes"))]
        excess = [(gpu - cpu) / cpu for gpu, cpu in pairs]
        out.append({"file": str(path), "gpu": str(table.get("gpu") or "unknown GPU"), "torch": table.get("torch"),
                    "configurations": len(pairs), "exact": sum(gpu == cpu for gpu, cpu in pairs),
                    "min_excess": min(excess) if excess else None, "max_excess": max(excess) if excess else None,
                    "not_ok": len(mine) - len(pairs)})
    return out


def _pct(x: float) -> str:
    """A signed percentage to 0.1%; no "-0.0%" for a tiny negative value."""
    return "0.0%" if abs(x) < 0.0005 else f"{x:+.1%}"


def format_gpu_evidence(evidence: list[Mapping[str, Any]], margin_fraction: float) -> list[str]:
    """Lines for ``memlab advise --device cuda``: per table, how far the GPU's allocated peak was from
    the exact CPU figure, against the margin the CUDA need adds."""
    if not evidence:
        return ["not yet checked on a GPU for this family (make gpu-check on a CUDA machine writes data/gpu-check)"]
    lines = []
    for e in evidence:
        name = Path(e["file"]).name
        if "problem" in e:
            lines.append(f"GPU check {name} left out: {e['problem']}")
            continue
        if not e["configurations"]:
            lines.append(f"GPU check {name} ({e['gpu']}): no configuration of this family measured ok")
            continue
        lo, hi = e["min_excess"], e["max_excess"]
        verdict = ("within" if hi <= margin_fraction else "BEYOND")
        lines.append(f"checked on {e['gpu']} (data/gpu-check/{name}, torch {e['torch'] or '?'}): the GPU's allocated "
                     f"peak was {_pct(lo)} to {_pct(hi)} off the exact CPU figure at {e['configurations']} "
                     f"configuration(s) of this family ({e['exact']} to the byte), {verdict} the "
                     f"{margin_fraction:.0%} margin" + (f"; {e['not_ok']} did not measure" if e["not_ok"] else ""))
    return lines
