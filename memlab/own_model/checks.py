"""``memlab advise --model`` checked beyond what it measured: predictions at 4x and 10x the largest
batch the fit measured, against :func:`memlab.measure` at those batches, for every modelled technique.

::

    python -m memlab.own_model.checks examples/resnet50.py [--vary batch|micro_batches] [--factors 4,10]
                                  [--optimizer sgd] [--models DIR] [--out data/model-files]

Writes ``<out>/<stem>-<optimizer>.json``: the model file's fitted models as ``memlab advise`` caches
them (:func:`memlab.own_model.advice.fitted_family`) and a ``beyond`` list, one row per technique and
factor (``batch``, predicted and measured total peak and categories in bytes, the error, the
measured and predicted relative step time, the measurement's load).  The site's model pages
(:mod:`memlab.site.models_page`) read these files; nothing else does.

``--vary micro_batches`` checks ``advise --model FILE --vary micro_batches`` (:func:`check_micro`): K
micro-batches (K in :data:`MICRO_PARTS`) of ``factor * MEASURED_MAX`` samples each, predicted from the
model of two micro-batches plus the whole batch's inputs, against ``memlab.measure(..., accumulate=K)``,
bytes in total and by category; written to ``<out>/micro_batches/<stem>-<optimizer>.json`` (beside the
model pages' files, which the pages do not read).

The largest batch the fit measured is :data:`MEASURED_MAX` (the held-out range, the time batches and
the traced values: 8); the checks run at ``factor * MEASURED_MAX`` with every other size at its
default.  A measurement is an ordinary isolated ``memlab.measure`` (its memory phase at the fork
server's default threads, its timed phase at one thread), without the float64 check (the fit's
held-out measurements ran it at small batches).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import memlab
from .advice import (HELD_OUT, MICRO_BATCHES, MICRO_TRACED, TIME_BATCHES, TRACE_VALUES, fitted_family, load_model_path,
                     micro_declaration, model_declaration, predict_micro)
from ..advisor.model import CATEGORIES, clamp_time, predict, predict_time, time_band
from ..core.atomic import write_text_atomic
from ..core.setting import DEFAULTS, OPTIMIZERS
from ..registry import get_technique

__all__ = ["MEASURED_MAX", "MICRO_PARTS", "check_beyond", "check_micro", "write_checks", "main"]

#: the largest batch a fit measures or traces (held-out measurements, time batches, trace values)
MEASURED_MAX = max(HELD_OUT[1], *TIME_BATCHES, *TRACE_VALUES)


def check_beyond(model, *, vary: Sequence[str] = ("batch",), factors: Sequence[int] = (4, 10),
                 optimizer: str = DEFAULTS.optimizer, cache_root: Path | None = None,
                 say: Callable[[str], None] = print,
                 measure_fn: Callable | None = None, threads: int | None = None) -> dict[str, Any]:
    """The fitted models of ``model`` (fitted now or read from the cache) and, per modelled technique
    and factor, the predicted and measured peak at ``factor * MEASURED_MAX`` samples.

    Args:
        threads: the memory phase's intra-op threads (None: the default, one per core; the traces run
            at one: a convolution's oneDNN scratch depends on the threads).

    Returns:
        the cached fit document (``families``, ``model_file``...) with ``beyond`` (rows, module doc),
        ``measured_max``, ``factors``, ``cached`` and ``fit_path``.
    """
    decl = model_declaration(model, vary)
    fam, path, cached = fitted_family(model, decl, optimizer, cache_root=cache_root, say=say)
    doc = json.loads(Path(path).read_text())
    held = {s: get_technique(decl.entries[0].technique).all_params()[s].default for s in decl.sizes[1:]}
    measure_fn = measure_fn or memlab.measure
    rows = []
    for entry in fam["entries"]:
        for factor in factors:
            p = {**held, decl.sizes[0]: factor * MEASURED_MAX}
            pred = predict(fam, entry, p)
            t, floored = clamp_time(entry, predict_time(fam, entry, p))  # as advise --model answers it
            started = time.perf_counter()
            m = measure_fn(entry["technique"], iterations=1, repeats=1, time_budget=0, check=False,
                           optimizer=optimizer, threads=threads, **p)
            row = {**_measured_row(entry["technique"], factor, p, pred, m, started),
                   "predicted_relative_step_time": t, "predicted_time_floored": floored, "time_band": time_band(entry)}
            say(f"  {row['kind']} {decl.sizes[0]}={p[decl.sizes[0]]} ({factor}x): " + _said(row))
            rows.append(row)
    return {**doc, "beyond": rows, "measured_max": MEASURED_MAX, "factors": list(factors), "cached": cached,
            "fit_path": str(path), "vary": list(decl.sizes), "threads": threads}


#: the micro-batch counts :func:`check_micro` measures (K = 1 is the batch model: :func:`check_beyond`)
MICRO_PARTS = (2, 4)


def check_micro(model, *, others: Sequence[str] = (), factors: Sequence[int] = (4,),
                parts: Sequence[int] = MICRO_PARTS, optimizer: str = DEFAULTS.optimizer,
                cache_root: Path | None = None, say: Callable[[str], None] = print,
                measure_fn: Callable | None = None, threads: int | None = None) -> dict[str, Any]:
    """``advise --model FILE --vary micro_batches`` checked beyond what it fitted: per technique of the
    micro-batch model (NOTE [ the micro-batch model ] in :mod:`memlab.own_model.advice`), factor and
    micro-batch count K of ``parts``, the prediction of K micro-batches of ``factor * MEASURED_MAX``
    samples each (:func:`~memlab.own_model.advice.predict_micro`) against ``memlab.measure(...,
    accumulate=K)`` at that whole batch, bytes in total and by category.

    Args:
        others: the sizes varied after the batch (``seq``), held at their defaults.

    Returns:
        the micro-batch model's cached fit document with ``beyond`` (the rows of :func:`check_beyond`
        plus ``accumulate`` and ``micro_batch``), ``measured_max``, ``factors``, ``parts``, ``cached``,
        ``fit_path`` and ``vary`` (``["micro_batches", *others]``).
    """
    whole_decl, micro_decl = model_declaration(model, ("batch", *others)), micro_declaration(model, others)
    whole, _path, _cached = fitted_family(model, whole_decl, optimizer, cache_root=cache_root, say=say)
    micro, path, cached = fitted_family(model, micro_decl, optimizer, cache_root=cache_root, say=say,
                                        accumulate=MICRO_TRACED)
    held = {s: get_technique(micro_decl.entries[0].technique).all_params()[s].default for s in micro_decl.sizes[1:]}
    ones = {e["technique"]: e for e in whole["entries"]}
    measure_fn = measure_fn or memlab.measure
    rows = []
    for entry in micro["entries"]:
        models = {"whole": {"decl": whole_decl, "entry": ones.get(entry["technique"])},
                  "micro": {"decl": micro_decl, "entry": entry}}
        for factor, k in ((f, k) for f in factors for k in parts):
            p = {**held, "batch": k * factor * MEASURED_MAX}
            pred = predict_micro(models["whole"], models["micro"], p, k)
            started = time.perf_counter()
            m = measure_fn(entry["technique"], iterations=1, repeats=1, time_budget=0, check=False,
                           optimizer=optimizer, threads=threads, accumulate=k, **p)
            row = {**_measured_row(entry["technique"], factor, p, pred, m, started), "accumulate": k,
                   "micro_batch": factor * MEASURED_MAX}
            say(f"  {row['kind']} batch={p['batch']} as {k} x {row['micro_batch']} ({factor}x): " + _said(row))
            rows.append(row)
    return {**json.loads(Path(path).read_text()), "beyond": rows, "measured_max": MEASURED_MAX,
            "factors": list(factors), "parts": list(parts), "cached": cached, "fit_path": str(path),
            "vary": [MICRO_BATCHES, *others], "threads": threads}


def _measured_row(technique: str, factor: int, params: dict[str, int], pred, m, started: float) -> dict[str, Any]:
    """One check row: the technique, its kind, the factor and params, the predicted peak (bytes, total
    and by category) and what the measurement ``m`` gave (its error in bytes, whether every category is
    exact, its relative time, load and threads), or its error; ``seconds`` since ``started``."""
    row = {"technique": technique, "kind": get_technique(technique).kind, "factor": factor, "params": params,
           "status": m.status, "predicted_total_peak_bytes": pred["total_peak_bytes"],
           "predicted_peak_by_category_bytes": pred["peak_by_category_bytes"],
           "seconds": round(time.perf_counter() - started, 1)}
    if m.status != "ok":
        return {**row, "error": m.error}
    err = pred["total_peak_bytes"] - m.total_peak_bytes
    row.update(measured_total_peak_bytes=m.total_peak_bytes,
               measured_peak_by_category_bytes=dict(m.peak_by_category_bytes),
               error_bytes=err, rel_error=abs(err) / m.total_peak_bytes if m.total_peak_bytes else 0.0,
               categories_exact=all(pred["peak_by_category_bytes"][c] == m.peak_by_category_bytes.get(c, 0)
                                    for c in CATEGORIES),
               measured_relative_step_time=m.relative_step_time, load_avg=m.load_avg_before,
               threads=(m.environment or {}).get("threads"),
               blocks={k: m.extra[k] for k in ("blocks", "block_count", "block_type", "blocks_found_by",
                                               "segments") if k in (m.extra or {})})
    return row


def _said(row: dict[str, Any]) -> str:
    """``predicted N B, measured M B, error +E B (x%) (s s)``: one check row as its progress line says it."""
    ok = row["status"] == "ok"
    return (f"predicted {row['predicted_total_peak_bytes']} B, measured {row.get('measured_total_peak_bytes', row['status'])}"
            + (f", error {row['error_bytes']:+d} B ({100 * row['rel_error']:.3f}%)" if ok else "")
            + f" ({row['seconds']} s)")


def write_checks(doc: dict[str, Any], out_dir: Path, repo_root: Path | None = None, suffix: str = "") -> Path:
    """Write ``doc`` to ``<out_dir>/<stem>-<optimizer><suffix>.json`` (sorted keys; the model file's path made
    relative to ``repo_root`` when inside it, so the file reads the same on every checkout), keeping the
    ``notes`` of the file it replaces (``{"<technique> <size>=<n>": why a check is not exact}``)."""
    from .workload import stem_of  # deferred: torch line

    doc = dict(doc)
    doc.pop("fit_path", None)
    root = Path(repo_root or Path(__file__).resolve().parents[2])  # memlab/own_model/checks.py -> the checkout
    mf = Path(doc["model_file"])
    if root in mf.parents:
        doc["model_file"] = mf.relative_to(root).as_posix()
    path = Path(out_dir) / f"{stem_of(mf)}-{doc['optimizer']}{suffix}.json"
    if path.is_file() and "notes" not in doc:  # the notes written by hand (why a check is not exact) stay
        with contextlib.suppress(ValueError, OSError):
            doc["notes"] = json.loads(path.read_text()).get("notes") or {}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memlab.own_model.checks", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the model file")
    ap.add_argument("--vary", default="batch", help="the sizes the models vary, batch first (batch or batch,seq); "
                    f"{MICRO_BATCHES} (or {MICRO_BATCHES},seq): K micro-batches (K in {MICRO_PARTS}) of each factor "
                    "times the largest fitted batch, against memlab measure --accumulate K")
    ap.add_argument("--factors", default="4,10", help="multiples of the largest measured batch to check")
    ap.add_argument("--optimizer", default=DEFAULTS.optimizer, choices=OPTIMIZERS)
    ap.add_argument("--models", type=Path, default=None, help="the fit cache (default: memlab advise's)")
    ap.add_argument("--threads", type=int, default=None, help="the memory phase's threads (default: one per core)")
    ap.add_argument("--out", type=Path, default=Path("data/model-files"), help="folder of the written JSON")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    vary = [v.strip() for v in args.vary.split(",")]
    common = dict(factors=[int(f) for f in args.factors.split(",")], optimizer=args.optimizer,
                  cache_root=args.models, say=lambda s: print(s, flush=True), threads=args.threads)
    micro = vary[0] == MICRO_BATCHES
    doc = check_micro(args.model, others=vary[1:], **common) if micro else check_beyond(args.model, vary=vary, **common)
    # the micro-batch checks go beside the model pages' files, not among them (a page per file there)
    out = args.out / MICRO_BATCHES if micro else args.out
    path = write_checks(doc, out, suffix="" if args.threads is None else f"-threads{args.threads}")
    print(f"memlab: wrote {path} ({time.perf_counter() - started:.0f} s; {load_model_path(args.model)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
