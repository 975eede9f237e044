"""``memlab advise --model``'s relative-time column checked beyond the batches it timed.

::

    python -m memlab.own_model.time_check examples/gpt2.py [--factors 4,10] [--runs 3]
                                      [--optimizer sgd] [--models DIR] [--out data/model-files]

For every modelled technique but the baseline and each factor, the relative step time the answer
states (:func:`memlab.advisor.model.predict_time`, floored as ``advise`` floors it) against the
median of ``runs`` measurements (memlab.measure's default timed phase: one intra-op thread, thread
CPU time, interleaved with the baseline, its default repeats and budget) at ``factor *``
:data:`memlab.own_model.checks.MEASURED_MAX` samples, one pass over the settings after another so
that a stretch of heavier load falls on different settings.  The check passes where the error is
within :data:`GOAL` or inside the entry's own band (NOTE [ the time band ]).

Writes ``<out>/<stem>-time-check-<optimizer>.json`` (rows: technique, batch, predicted, band, every
run's figure and load, the median, the error, ``within``).  The bytes are checked by
:mod:`memlab.own_model.checks`; this module measures time only, so its figures depend on the host's
load: run it on idle cores and state the load (the rows carry it).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import memlab
from .advice import fitted_family, model_declaration
from .checks import MEASURED_MAX
from ..advisor.model import clamp_time, predict_time, time_band
from ..advisor.time_runs import fmt_error, fmt_time, measure_in_passes, median_error
from ..core.atomic import write_text_atomic
from ..core.setting import DEFAULTS, OPTIMIZERS

__all__ = ["GOAL", "check_times", "main"]

#: the relative error the time column is held to (or the entry's own band, where wider)
GOAL = 0.10


def _settings(fam: dict, sizes: Sequence[str], held: dict, factors: Sequence[int]) -> list[dict[str, Any]]:
    """One row per (factor, non-baseline entry): its parameters and the answer's prediction."""
    rows = []
    for factor in factors:
        for entry in fam["entries"]:
            if entry.get("baseline"):
                continue
            p = {**held, sizes[0]: factor * MEASURED_MAX}
            t, floored = clamp_time(entry, predict_time(fam, entry, p))
            band = time_band(entry)
            rows.append({"technique": entry["technique"], "factor": factor, "params": p, "predicted": t,
                         "floored": floored, "band": band["fraction"], "band_text": band["text"],
                         "measured_runs": [], "load_avg": []})
    return rows


def _verdict(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its median, error ((predicted - median) / median) and ``within`` (the goal or band)."""
    median, error = median_error(row["measured_runs"], row["predicted"])
    allowed = max(GOAL, row["band"] or 0.0)
    return {**row, "measured": median, "error": error, "within": error is not None and abs(error) <= allowed}


def check_times(model, *, factors: Sequence[int] = (4, 10), runs: int = 3, optimizer: str = DEFAULTS.optimizer,
                cache_root: Path | None = None, say: Callable[[str], None] = print,
                measure_fn: Callable | None = None) -> dict[str, Any]:
    """The rows of the module doc for ``model`` (fitted now, or read from the cache), and the fit's path.

    Raises:
        ValueError: ``runs`` < 1 or a factor < 1.
    """
    if runs < 1 or not factors or min(factors) < 1:
        raise ValueError(f"runs={runs!r}, factors={list(factors)!r}: expected runs >= 1 and factors >= 1")
    decl = model_declaration(model, ("batch",))
    fam, path, cached = fitted_family(model, decl, optimizer, cache_root=cache_root, say=say)
    held = {s: decl.time_sizes[0][s] for s in decl.sizes[1:]}
    rows = _settings(fam, decl.sizes, held, factors)
    measure_fn = measure_fn or memlab.measure

    def measure(row):
        return measure_fn(row["technique"], iterations=1, check=False, optimizer=optimizer, **row["params"])

    def line(row, m, run: int) -> str:
        return (f"run {run}/{runs} {row['technique']} {json.dumps(row['params'])}: "
                f"{fmt_time(m.relative_step_time)} ({m.status})")

    measured = measure_in_passes(rows, runs, measure, line, say)
    rows = [_verdict({**row, "measured_runs": [m.relative_step_time for m in ms],
                      "load_avg": [m.load_avg_before for m in ms]}) for row, ms in zip(rows, measured)]
    return {"model_file": str(model), "optimizer": optimizer, "goal": GOAL, "runs": runs,
            "factors": list(factors), "measured_max": MEASURED_MAX, "fit_cached": cached, "rows": rows,
            "time_sizes": [dict(p) for p in decl.time_sizes],
            "time_only_sizes": [dict(p) for p in decl.time_only_sizes]}


def _line(r: dict[str, Any]) -> str:
    return (f"{r['technique']:28} {json.dumps(r['params']):16} predicted {r['predicted']:.3f}"
            f"{' (floored)' if r['floored'] else ''} band {r['band_text']}; measured {fmt_time(r['measured'])} "
            f"error {fmt_error(r['error'])} {'ok' if r['within'] else 'OUTSIDE'}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memlab.own_model.time_check", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the model file")
    ap.add_argument("--factors", default="4,10", help=f"multiples of the largest measured batch ({MEASURED_MAX})")
    ap.add_argument("--runs", type=int, default=3, help="measurements per setting, compared by their median")
    ap.add_argument("--optimizer", default=DEFAULTS.optimizer, choices=OPTIMIZERS)
    ap.add_argument("--models", type=Path, default=None, help="the fit cache (default: memlab advise's)")
    ap.add_argument("--out", type=Path, default=Path("data/model-files"), help="folder of the written JSON")
    args = ap.parse_args(argv)
    try:
        factors = [int(f) for f in args.factors.split(",")]
    except ValueError:
        ap.error(f"--factors {args.factors!r}: expected integers >= 1 separated by commas, e.g. 4,10")
    if args.runs < 1 or min(factors) < 1:
        ap.error(f"--runs {args.runs} / --factors {args.factors}: expected integers >= 1")
    started = time.perf_counter()
    doc = check_times(args.model, factors=factors, runs=args.runs, optimizer=args.optimizer,
                      cache_root=args.models, say=lambda s: print(s, flush=True))
    for r in doc["rows"]:
        print(_line(r))
    out = args.out / f"{Path(args.model).stem}-time-check-{args.optimizer}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    bad = sum(not r["within"] for r in doc["rows"])
    print(f"memlab: {len(doc['rows']) - bad} of {len(doc['rows'])} within {100 * GOAL:.0f}% or their band; "
          f"wrote {out} ({time.perf_counter() - started:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
