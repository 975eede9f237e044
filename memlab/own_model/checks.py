"""``memlab advise --model`` checked beyond what it measured: predictions at 4x and 10x the largest
batch the fit measured, against :func:`memlab.measure` at those batches, for every modelled technique.

::

    python -m memlab.own_model.checks examples/resnet50.py [--vary batch] [--factors 4,10]
                                  [--optimizer sgd] [--models DIR] [--out data/model-files]

Writes ``<out>/<stem>-<optimizer>.json``: the model file's fitted models as ``memlab advise`` caches
them (:func:`memlab.own_model.advice.fitted_family`) and a ``beyond`` list, one row per technique and
factor (``batch``, predicted and measured total peak and categories in bytes, the error, the
measured and predicted relative step time, the measurement's load).  The site's model pages
(:mod:`memlab.site.models_page`) read these files; nothing else does.

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
from .advice import HELD_OUT, TIME_BATCHES, TRACE_VALUES, fitted_family, load_model_path, model_declaration
from ..advisor.model import CATEGORIES, clamp_time, predict, predict_time, time_band
from ..core.atomic import write_text_atomic
from ..core.setting import DEFAULTS, OPTIMIZERS
from ..registry import get_technique

__all__ = ["MEASURED_MAX", "check_beyond", "write_checks", "main"]

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
            row = {"technique": entry["technique"], "kind": get_technique(entry["technique"]).kind, "factor": factor,
                   "params": p, "status": m.status, "predicted_total_peak_bytes": pred["total_peak_bytes"],
                   "predicted_peak_by_category_bytes": pred["peak_by_category_bytes"],
                   "predicted_relative_step_time": t, "predicted_time_floored": floored,
                   "time_band": time_band(entry),
                   "seconds": round(time.perf_counter() - started, 1)}
            if m.status == "ok":
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
            else:
                row["error"] = m.error
            say(f"  {row['kind']} {decl.sizes[0]}={p[decl.sizes[0]]} ({factor}x): predicted "
                f"{pred['total_peak_bytes']} B, measured {row.get('measured_total_peak_bytes', m.status)}"
                + (f", error {row['error_bytes']:+d} B ({100 * row['rel_error']:.3f}%)" if m.status == "ok" else "")
                + f" ({row['seconds']} s)")
            rows.append(row)
    return {**doc, "beyond": rows, "measured_max": MEASURED_MAX, "factors": list(factors), "cached": cached,
            "fit_path": str(path), "vary": list(decl.sizes), "threads": threads}


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
    ap.add_argument("--vary", default="batch", help="the sizes the models vary, batch first (batch or batch,seq)")
    ap.add_argument("--factors", default="4,10", help="multiples of the largest measured batch to check")
    ap.add_argument("--optimizer", default=DEFAULTS.optimizer, choices=OPTIMIZERS)
    ap.add_argument("--models", type=Path, default=None, help="the fit cache (default: memlab advise's)")
    ap.add_argument("--threads", type=int, default=None, help="the memory phase's threads (default: one per core)")
    ap.add_argument("--out", type=Path, default=Path("data/model-files"), help="folder of the written JSON")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    doc = check_beyond(args.model, vary=[v.strip() for v in args.vary.split(",")],
                       factors=[int(f) for f in args.factors.split(",")], optimizer=args.optimizer,
                       cache_root=args.models, say=lambda s: print(s, flush=True), threads=args.threads)
    path = write_checks(doc, args.out, suffix="" if args.threads is None else f"-threads{args.threads}")
    print(f"memlab: wrote {path} ({time.perf_counter() - started:.0f} s; {load_model_path(args.model)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
