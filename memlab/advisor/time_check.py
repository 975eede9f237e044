"""The advisor's relative-time column checked at held-out settings (``python -m memlab.advisor.time_check``).

Each setting below is none of the points the time model was fitted on (NOTE [ advisor time model ] in
:mod:`memlab.advisor.fit`: the family's ``time_sizes``): larger steps, other chunk counts, other shapes.
Each is measured with memlab's default timed phase (one intra-op thread, thread CPU time against the
family baseline, interleaved) and compared with :func:`memlab.advisor.model.predict_time` from the
committed models; the table is written to ``data/models/time-check-<optimizer>.json``.  The goal is
an error within :data:`GOAL` (10%) at every setting.

One measurement of a setting is not always precise to 10% on a loaded machine: single runs of the
transformer's settings, whose steps take milliseconds, can read 15-20% apart (thread CPU time still
moves with cache and memory-bandwidth contention, NOTE [ CPU time and load ]; Evidence:
docs/evidence/code-notes.md#time-check-runs).  ``--runs N`` measures every
setting N times, one pass over the settings after another, and compares the median.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import memlab
from ..core.atomic import write_text_atomic
from ..registry import family_meta
from .model import MODELS_DIR, clamp_time, load_models, predict_time, time_band
from .time_runs import fmt_error, fmt_time, measure_in_passes, median_error
from ..core.setting import DEFAULTS

__all__ = ["HELD_OUT", "GOAL", "held_out", "read_settings", "check_times", "repredict", "main"]

#: the relative error the check aims for
GOAL = 0.10


def held_out(environ=None) -> tuple[tuple[str, str, dict[str, int]], ...]:
    """``(family, entry label, parameters)`` of every family folder's held-out time settings (its
    ``meta.py``'s ``TIME_HELD_OUT``, read through the registry: :func:`memlab.registry.family_meta`),
    families by name: five or more per family, none of them a fitted time point."""
    return tuple((name, label, params) for name, meta in sorted(family_meta(environ).items())
                 for label, params in meta.time_held_out)


#: the built-in families' held-out settings (:func:`held_out`), plug-in folders' in ``MEMLAB_PLUGINS`` too
HELD_OUT: tuple[tuple[str, str, dict[str, int]], ...] = held_out()


def read_settings(path: Path) -> tuple[tuple[str, str, dict[str, int]], ...]:
    """``(family, entry label, parameters)`` rows of a settings file (``{"settings": [[family, label,
    {param: value}], ...]}``, e.g. ``data/models/unseen-settings.json``: settings chosen before they
    were measured).

    Raises:
        SystemExit: the file is missing or is not such a list, naming the file and the bad row.
    """
    try:
        rows = json.loads(Path(path).read_text())["settings"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--settings {path}: not a settings file ({exc!r}); expected "
                         '{"settings": [[family, label, {param: value}], ...]}') from None
    out = []
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and isinstance(row[1], str)
                and isinstance(row[2], dict)):
            raise SystemExit(f"--settings {path}: row {i} is {row!r}; expected [family, label, {{param: value}}]")
        out.append((row[0], row[1], dict(row[2])))
    return tuple(out)


def _entry(models: dict[str, Any], family: str, label: str) -> tuple[dict[str, Any], dict[str, Any]]:
    fam = models["families"][family]
    for entry in fam["entries"]:
        if entry["label"] == label:
            return fam, entry
    raise ValueError(f"{family}: no modelled entry {label!r}; entries: {', '.join(e['label'] for e in fam['entries'])}")


def check_times(optimizer: str = DEFAULTS.optimizer, *, measure_fn: Callable | None = None, models_dir=None,
                say: Callable[[str], None] = print, families: tuple[str, ...] | None = None,
                runs: int = 1, settings=None) -> list[dict[str, Any]]:
    """Predicted against measured relative step time at every :func:`held_out` setting (or every
    ``(family, label, params)`` of ``settings``; one row each) of ``families`` (default: every family
    listed).  Each row carries the floored prediction the advisor states (``predicted_floored``, NOTE
    [ no faster than plain unless measured so ]) and the entry's own band (``band``, NOTE [ the time band ]).  With ``runs`` > 1 every setting is measured that
    many times, one pass over the settings after another (so a stretch of heavier load falls on
    different settings), and compared with the median; each run's figure is kept (``measured_runs``).

    Raises:
        ValueError: ``runs`` < 1.
    """
    if runs < 1:
        raise ValueError(f"runs={runs!r} is out of range: expected 1 or more")
    measure_fn = measure_fn or memlab.measure
    models = load_models(optimizer, models_dir)
    settings = [(family, label, params, *_entry(models, family, label))
                for family, label, params in (held_out() if settings is None else settings)
                if families is None or family in families]

    def measure(setting):
        _family, _label, params, fam, entry = setting
        return measure_fn(entry["technique"], iterations=1, repeats=7, time_budget=1.0, check=False,
                          optimizer=optimizer, **{**fam["workload_fixed"], **entry["fixed"], **params})

    def line(setting, m, run: int) -> str:
        family, label, params = setting[:3]
        return (f"{family:10} {label:34} {json.dumps(params):70} run {run}/{runs}: measured "
                f"{fmt_time(m.relative_step_time)} ({m.status})")

    measured = measure_in_passes(settings, runs, measure, line, say)
    rows = [{**_row(family, label, params, predict_time(fam, entry, params), ms), **_stated(fam, entry, params)}
            for (family, label, params, fam, entry), ms in zip(settings, measured)]
    for r in rows:
        say(f"{r['family']:10} {r['label']:34} {json.dumps(r['params']):70} predicted {fmt_time(r['predicted'])} "
            f"measured {fmt_time(r['measured'])} ({r['status']}) error {fmt_error(r['error'])}")
    return rows


def _stated(fam: dict[str, Any], entry: dict[str, Any], params: dict) -> dict[str, Any]:
    """What the advisor states beside a setting's prediction: the floored time (NOTE [ no faster than
    plain unless measured so ]) and the entry's own band (NOTE [ the time band ])."""
    return {"predicted_floored": clamp_time(entry, predict_time(fam, entry, params))[0],
            "band": time_band(entry)["fraction"]}


def _row(family: str, label: str, params: dict, predicted: float | None, ms: list) -> dict[str, Any]:
    """One setting's row: the median of its runs' relative times (None unless every run measured one)."""
    figures = [m.relative_step_time for m in ms]
    measured, error = median_error(figures, predicted)
    statuses = sorted({m.status for m in ms})
    return {"family": family, "label": label, "params": params, "predicted": predicted, "measured": measured,
            "relative_to": ms[0].relative_to, "status": statuses[0] if len(statuses) == 1 else ",".join(statuses),
            "error": error, **({"measured_runs": figures} if len(ms) > 1 else {}),
            "load_avg": [m.load_avg_before for m in ms] + [ms[-1].load_avg_after] if len(ms) > 1
            else [ms[0].load_avg_before, ms[0].load_avg_after],
            "timing_cpu": [(getattr(m, "environment", None) or {}).get("timing_cpu") for m in ms] if len(ms) > 1
            else (getattr(ms[0], "environment", None) or {}).get("timing_cpu")}


def repredict(path: Path, models_dir=None) -> list[dict[str, Any]]:
    """Each row of the check file ``path`` predicted again by the models now in ``models_dir``, its
    measurements kept: ``predicted``, ``predicted_floored``, ``band`` and ``error`` replaced, the file
    rewritten with ``repredicted`` (which models predicted: those committed beside it).  For a time model
    refitted from its stored points (:mod:`memlab.advisor.refit_time`): the settings are none of those
    points, so the rows stay held out.  Returns the rows."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise SystemExit(f"{path}: not a time-check file; give one written by this module")
    optimizer = path.stem.rsplit("-", 1)[-1]
    models = load_models(optimizer, models_dir)
    for r in data["rows"]:
        fam, entry = _entry(models, r["family"], r["label"])
        predicted = predict_time(fam, entry, r["params"])
        r.update(predicted=predicted, **_stated(fam, entry, r["params"]),
                 error=median_error(r.get("measured_runs") or [r["measured"]], predicted)[1]
                 if r.get("measured") is not None else None)
    errors = [abs(r["error"]) for r in data["rows"] if r["error"] is not None]
    where = "data/models" if models_dir is None else str(models_dir)
    data.update(worst_abs_error=max(errors, default=None), repredicted={
        "by": "python -m memlab.advisor.time_check --repredict",
        "models": f"{where}/cpu-float32-{optimizer}.json as committed with this file"})
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data["rows"]


def _earlier_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of an earlier check file (none when there is none); a file that is not such a check
    is an error naming it, never overwritten."""
    if not path.exists():
        return []
    try:
        rows = json.loads(path.read_text())["rows"]
        if not isinstance(rows, list):
            raise TypeError("rows is not a list")
        return rows
    except (ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{path}: not a time-check file ({exc}); move it away or give --out") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memlab.advisor.time_check", description=__doc__.splitlines()[0])
    parser.add_argument("--optimizer", default=DEFAULTS.optimizer)
    parser.add_argument("--out", type=Path, default=None, help="default: data/models/time-check-<optimizer>.json")
    parser.add_argument("--family", action="append", default=None,
                        help="check only this family (repeatable); the output file keeps the other families' rows")
    parser.add_argument("--runs", type=int, default=1,
                        help="measure every setting this many times (a pass over the settings each) and compare the "
                             "median (default 1)")
    parser.add_argument("--settings", type=Path, default=None,
                        help="measure the settings of this file instead of the families' held-out ones "
                             "(e.g. data/models/unseen-settings.json; default out: time-check-<stem>-<optimizer>.json)")
    parser.add_argument("--repredict", type=Path, action="append", default=None, metavar="CHECK_FILE",
                        help="measure nothing: predict the rows of this earlier check file again from the models now "
                             "committed, keeping its measurements (after python -m memlab.advisor.refit_time; repeatable)")
    args = parser.parse_args(argv)
    if args.repredict:
        for path in args.repredict:
            rows = repredict(path)
            worst = max((abs(r["error"]) for r in rows if r["error"] is not None), default=None)
            print(f"{path}: worst |error| {'-' if worst is None else f'{100 * worst:.1f}%'} over {len(rows)} settings")
        return 0
    chosen = None if args.settings is None else read_settings(args.settings)
    known = sorted({f for f, _, _ in (held_out() if chosen is None else chosen)})
    for fam in args.family or ():
        if fam not in known:
            parser.error(f"--family {fam!r} has no held-out time settings; valid: {', '.join(known)}")
    stem = "" if args.settings is None else f"{args.settings.stem}-"
    out = args.out or MODELS_DIR / f"time-check-{stem}{args.optimizer}.json"
    if args.runs < 1:
        parser.error(f"--runs {args.runs} is out of range: expected 1 or more")
    rows = check_times(args.optimizer, families=None if args.family is None else tuple(args.family), runs=args.runs,
                       settings=chosen)
    if args.family is not None:
        rows = [r for r in _earlier_rows(out) if r.get("family") not in args.family] + rows
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    worst = max(errors, default=None)
    write_text_atomic(out, json.dumps({"goal": GOAL, "worst_abs_error": worst, "rows": rows,
                                       "cores": os.cpu_count()}, indent=1, sort_keys=True) + "\n")
    print(f"worst |error| {'-' if worst is None else f'{100 * worst:.1f}%'} over {len(errors)} settings "
          f"(goal {100 * GOAL:.0f}%); wrote {out}")
    return 0 if worst is not None and worst <= GOAL and len(errors) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
