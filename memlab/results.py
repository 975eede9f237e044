"""Reading results from disk into tidy pandas DataFrames, validating loudly.

Four inputs, four loaders (none imports torch; the site runs on them alone):

* :func:`load_runs` -- memlab sweep files (JSON Lines, one ``Measurement.to_dict()`` per line)
  -> one row per measurement.
* :func:`load_asv_results` -- an asv 0.6 results tree (``benchmarks.json``,
  ``<machine>/machine.json``, ``<machine>/<commit>-<env>.json``) -> one row per benchmark,
  parameter combination, machine and commit.
* :func:`load_timelines` -- ``Timeline.to_dict()`` JSON files -> validated dicts.
* :func:`load_reproductions` -- seed-reproduction JSON files (contract in
  :mod:`memlab.reproductions`) -> validated dicts.

A file or line that is malformed or partial (a truncated last line, a missing field, a wrong type)
never stops the others: it is skipped with a :class:`ResultsWarning` that names the file (and line).

Memory columns are bytes, time columns seconds, throughput samples/s.
"""
from __future__ import annotations

import ast
import itertools
import json
import math
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from .analytic import activation_figures, analytic_floor

__all__ = [
    "ResultsWarning", "FAMILY_BASELINES", "RUN_COLUMNS", "ASV_COLUMNS", "VERDICTS",
    "load_runs", "find_sweep_files", "load_asv_results", "load_asv_machines", "load_timelines",
    "load_reproductions", "validate_measurement", "family_baselines", "canonical_params",
]

#: The no-savings baseline technique of each family, used only when the measurements do not say
#: (``extra["baseline"]``: ``True`` on the baseline's rows, or the baseline's name).  The one place.
FAMILY_BASELINES: dict[str, str] = {"chunking": "unchunked", "tensor_train": "dense", "reversible": "residual"}

VERDICTS = ("reproduced", "not reproduced on this device", "reproduced with caveat")
_STATUSES = ("ok", "oom", "error")
_MODES = ("train", "infer")

_REQUIRED_STR = ("technique", "workload", "family", "device", "dtype", "mode", "status")
_INT_FIELDS = ("peak_allocated_bytes", "allocated_baseline_bytes", "peak_reserved_bytes",
               "reserved_baseline_bytes", "device_used_bytes", "samples_per_step", "flops",
               "param_count", "param_bytes", "grad_bytes")
_FLOAT_FIELDS = ("step_time_s", "samples_per_s", "max_abs_error")
_KNOWN_FIELDS = frozenset(_REQUIRED_STR + _INT_FIELDS + _FLOAT_FIELDS + (
    "params", "error", "allocated_after_step_bytes", "peak_allocated_per_iteration_bytes", "step_times_s",
    "errors_by_tensor", "tolerance", "matches_reference", "peer", "memory_method", "extra", "environment",
    "schema", "baseline"))

#: Columns of :func:`load_runs` (one row per measurement).
RUN_COLUMNS = (
    "run", "source", "line", "technique", "workload", "family", "device", "dtype", "mode", "status",
    "error", "peer", "baseline", "params", "params_key", *_INT_FIELDS, *_FLOAT_FIELDS,
    "matches_reference", "analytic_floor_bytes", "activation_peak_bytes", "expected_activation_bytes",
    "extra", "environment", "memory_method",
)

#: Columns of :func:`load_asv_results` (one row per benchmark x parameter combination x commit).
ASV_COLUMNS = ("machine", "commit", "date_ms", "env", "benchmark", "type", "unit", "params", "params_key",
               "value", "source")


class ResultsWarning(UserWarning):
    """A results file (or one line of it) was malformed and skipped; the message names it."""


def _warn(msg: str) -> None:
    warnings.warn(msg, ResultsWarning, stacklevel=3)


def canonical_params(params: Mapping[str, Any]) -> str:
    """The parameters as one canonical string (sorted JSON), for grouping and sorting."""
    return json.dumps(dict(params), sort_keys=True, default=str)


# -- memlab sweep runs -----------------------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def validate_measurement(rec: Any) -> list[str]:
    """Problems with one ``Measurement.to_dict()`` record; an empty list when it is usable.

    Checks: a JSON object; the identity fields are strings; ``status`` is ok/oom/error and ``mode``
    train/infer; ``params``, ``extra``, ``environment`` are objects; byte and time figures are
    finite, non-negative numbers or null; an ``ok`` row has ``peak_allocated_bytes``.
    """
    if not isinstance(rec, dict):
        return [f"expected a JSON object, got {type(rec).__name__}"]
    problems = []
    for key in _REQUIRED_STR:
        if not isinstance(rec.get(key), str) or not rec.get(key):
            problems.append(f"field {key!r} must be a non-empty string, got {rec.get(key)!r}")
    if not isinstance(rec.get("params"), dict):
        problems.append(f"field 'params' must be an object, got {rec.get('params')!r}")
    for key in ("extra", "environment", "memory_method"):
        if rec.get(key) is not None and not isinstance(rec[key], dict):
            problems.append(f"field {key!r} must be an object, got {type(rec[key]).__name__}")
    if rec.get("status") not in _STATUSES:
        problems.append(f"status={rec.get('status')!r} is not one of {_STATUSES}")
    if rec.get("mode") not in _MODES:
        problems.append(f"mode={rec.get('mode')!r} is not one of {_MODES}")
    for key in _INT_FIELDS + _FLOAT_FIELDS:
        v = rec.get(key)
        if v is not None and not (_is_number(v) and v >= 0):
            problems.append(f"field {key!r} must be a finite number >= 0 or null, got {v!r}")
    if rec.get("status") == "ok" and rec.get("peak_allocated_bytes") is None:
        problems.append("status 'ok' but peak_allocated_bytes is null")
    return problems


def _analytic_floor(rec: dict) -> float | None:
    """``extra``'s analytic floor for the row's mode (see :func:`memlab.analytic.analytic_floor`)."""
    return analytic_floor(rec.get("extra"), rec["mode"])


def _row(rec: dict, run: str, source: str, line: int) -> dict[str, Any]:
    extra = rec.get("extra") or {}
    baseline = rec.get("baseline", extra.get("baseline"))
    activation_peak, expected_activation = activation_figures(extra, rec["technique"])
    row = {
        "run": run, "source": source, "line": line,
        **{k: rec[k] for k in _REQUIRED_STR},
        "error": rec.get("error"),
        "peer": bool(rec.get("peer", False)),
        "baseline": baseline,
        "params": dict(rec["params"]),
        "params_key": canonical_params(rec["params"]),
        **{k: rec.get(k) for k in _INT_FIELDS + _FLOAT_FIELDS},
        "matches_reference": rec.get("matches_reference"),
        "analytic_floor_bytes": _analytic_floor(rec),
        "activation_peak_bytes": activation_peak,
        "expected_activation_bytes": expected_activation,
        "extra": extra,
        "environment": rec.get("environment") or {},
        "memory_method": rec.get("memory_method") or {},
    }
    return row


def _read_jsonl(path: Path) -> Iterable[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _warn(f"{path}: cannot read ({exc}); skipped")
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            _warn(f"{path}:{number}: not valid JSON ({exc.msg}; a truncated line?); skipped")


def load_runs(paths: Iterable[Path | str]) -> pd.DataFrame:
    """Read memlab sweep files (JSON Lines of ``Measurement.to_dict()``) into one DataFrame.

    Args:
        paths: ``.jsonl`` files; read in the order given.  ``run`` is the file's stem, ``source``
            its path as given, ``line`` the 1-based line number.

    Returns:
        one row per valid measurement, columns :data:`RUN_COLUMNS` (bytes, seconds, samples/s);
        ``params``, ``extra``, ``environment`` hold dicts.  ``baseline`` is the record's own
        ``baseline`` (or ``extra["baseline"]``) or None.

    Warns:
        ResultsWarning: per unreadable file, invalid JSON line (e.g. a truncated last line) or
        invalid record (naming the file, line and problem), and once per file with unknown fields.
    """
    rows = []
    for path in map(Path, paths):
        unknown: set[str] = set()
        for number, rec in _read_jsonl(path):
            problems = validate_measurement(rec)
            if problems:
                _warn(f"{path}:{number}: invalid measurement ({'; '.join(problems)}); skipped")
                continue
            unknown |= set(rec) - _KNOWN_FIELDS
            rows.append(_row(rec, path.stem, str(path), number))
        if unknown:
            _warn(f"{path}: unknown measurement field(s) ignored: {', '.join(sorted(unknown))}")
    frame = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    return frame.astype({"peer": bool, "line": int}) if len(frame) else frame


def find_sweep_files(data_dir: Path | str) -> list[Path]:
    """``<data_dir>/sweeps/*.jsonl``, sorted by name."""
    return sorted((Path(data_dir) / "sweeps").glob("*.jsonl"))


def family_baselines(runs: pd.DataFrame) -> dict[str, str]:
    """The baseline technique of each family present in ``runs``.

    Order of evidence: rows whose ``baseline`` is True name their own technique; a string
    ``baseline`` names the baseline technique; otherwise :data:`FAMILY_BASELINES`.  Families
    with no evidence and no mapping are absent.  Conflicting claims warn and the first name in
    sorted order wins.
    """
    out: dict[str, str] = {}
    for family, rows in runs.groupby("family", sort=True):
        claimed = set()
        for tech, flag in zip(rows["technique"], rows["baseline"]):
            if flag is True:
                claimed.add(tech)
            elif isinstance(flag, str) and flag:
                claimed.add(flag)
        if len(claimed) > 1:
            _warn(f"family {family!r}: several techniques claim to be the baseline "
                  f"({', '.join(sorted(claimed))}); using {sorted(claimed)[0]!r}")
        if claimed:
            out[family] = sorted(claimed)[0]
        elif family in FAMILY_BASELINES:
            out[family] = FAMILY_BASELINES[family]
    return out


# -- asv results -----------------------------------------------------------------------------------
def _load_json(path: Path) -> Any:
    """JSON (asv writes NaN/Infinity, which Python's json accepts); None with a warning on failure."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _warn(f"{path}: cannot read JSON ({exc}); skipped")
        return None


def _param_value(text: Any) -> Any:
    """asv stores parameter values as their repr (``"'cpu'"``, ``"2500"``); parse literals."""
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def load_asv_machines(results_dir: Path | str) -> dict[str, dict[str, Any]]:
    """``machine.json`` of every machine folder under ``results_dir``, by machine name."""
    out = {}
    for path in sorted(Path(results_dir).glob("*/machine.json")):
        data = _load_json(path)
        if data is None:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("machine"), str):
            _warn(f"{path}: not an asv machine.json (no 'machine' name); skipped")
            continue
        out[data["machine"]] = {k: v for k, v in sorted(data.items()) if k != "version"}
    return out


def _asv_benchmarks(results_dir: Path) -> dict[str, dict[str, Any]]:
    path = results_dir / "benchmarks.json"
    if not path.exists():
        _warn(f"{path}: missing; parameter names and units of the asv benchmarks are unknown")
        return {}
    data = _load_json(path)
    if not isinstance(data, dict):
        if data is not None:
            _warn(f"{path}: not a JSON object; parameter names and units are unknown")
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _asv_rows(path: Path, machine: str, data: dict, benchmarks: dict) -> list[dict[str, Any]]:
    columns = data["result_columns"]
    if "result" not in columns or "params" not in columns:
        raise ValueError("result_columns lacks 'result' or 'params'")
    i_res, i_par = columns.index("result"), columns.index("params")
    rows = []
    for name, values in sorted(data["results"].items()):
        if not isinstance(values, list) or len(values) <= i_res:
            _warn(f"{path}: benchmark {name!r} has no result; skipped")
            continue
        result = values[i_res]
        param_lists = values[i_par] if len(values) > i_par and values[i_par] else []
        result = result if isinstance(result, list) else [result]
        combos = list(itertools.product(*param_lists)) if param_lists else [()]
        if len(combos) != len(result):
            _warn(f"{path}: benchmark {name!r} has {len(result)} results for {len(combos)} parameter "
                  "combinations; skipped")
            continue
        meta = benchmarks.get(name, {})
        names = meta.get("param_names") or [f"param{i}" for i in range(len(param_lists))]
        if len(names) != len(param_lists):
            _warn(f"{path}: benchmark {name!r} has {len(param_lists)} parameter lists but benchmarks.json "
                  f"names {len(names)}; skipped")
            continue
        for combo, value in zip(combos, result):
            if not _is_number(value):
                continue  # asv's NaN/null: skipped (NotImplementedError) or failed
            params = {n: _param_value(v) for n, v in zip(names, combo)}
            rows.append({"machine": machine, "commit": data["commit_hash"], "date_ms": data.get("date"),
                         "env": data.get("env_name"), "benchmark": name, "type": meta.get("type"),
                         "unit": meta.get("unit"), "params": params, "params_key": canonical_params(params),
                         "value": float(value), "source": str(path)})
    return rows


def load_asv_results(results_dir: Path | str) -> pd.DataFrame:
    """Read an asv 0.6 results tree into one row per benchmark, parameters, machine and commit.

    Reads ``results_dir/benchmarks.json`` for parameter names, ``type`` and ``unit``, and every
    ``results_dir/<machine>/*.json`` except ``machine.json`` (asv's columnar format,
    ``api_version`` 2: ``result_columns`` names the columns of each ``results[benchmark]`` row;
    ``result`` holds one value per combination of ``params`` in ``itertools.product`` order).
    Values asv stored as NaN or null (skipped or failed benchmarks) are left out.

    Returns:
        columns :data:`ASV_COLUMNS`; ``params`` holds dicts of parsed values, ``date_ms`` the
        commit date (ms since the epoch), ``value`` the number in ``unit``.

    Warns:
        ResultsWarning: naming each unreadable or malformed file or benchmark entry.
    """
    root = Path(results_dir)
    if not root.is_dir():
        _warn(f"{root}: no asv results directory; the history is empty")
        return pd.DataFrame(columns=list(ASV_COLUMNS))
    benchmarks = _asv_benchmarks(root)
    rows: list[dict[str, Any]] = []
    for machine_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(p for p in machine_dir.glob("*.json") if p.name != "machine.json")
        if not files:
            continue
        if not (machine_dir / "machine.json").exists():
            _warn(f"{machine_dir}: no machine.json; its results are loaded without machine details")
        for path in files:
            data = _load_json(path)
            if data is None:
                continue
            try:
                if not isinstance(data.get("results"), dict) or not isinstance(data.get("commit_hash"), str):
                    raise ValueError("no 'results' object or 'commit_hash'")
                if data.get("version") not in (None, 2):
                    raise ValueError(f"asv results api_version {data.get('version')!r} is not 2")
                name = (data.get("params") or {}).get("machine") or machine_dir.name
                rows.extend(_asv_rows(path, name, data, benchmarks))
            except (ValueError, TypeError, AttributeError) as exc:
                _warn(f"{path}: not an asv 0.6 results file ({exc}); skipped")
    return pd.DataFrame(rows, columns=list(ASV_COLUMNS))


# -- timelines and reproductions -------------------------------------------------------------------
_EVENT_KEYS = ("op", "stack", "phase", "delta_bytes", "live_bytes")


def _timeline_problems(data: Any) -> list[str]:
    if not isinstance(data, dict):
        return [f"expected a JSON object, got {type(data).__name__}"]
    problems = []
    for key in ("technique", "device", "dtype", "mode"):
        if not isinstance(data.get(key), str):
            problems.append(f"field {key!r} must be a string")
    if not isinstance(data.get("params"), dict):
        problems.append("field 'params' must be an object")
    if not _is_number(data.get("baseline_bytes")):
        problems.append("field 'baseline_bytes' must be a number")
    events = data.get("events")
    if not isinstance(events, list):
        return problems + ["field 'events' must be a list"]
    for i, e in enumerate(events):
        if not isinstance(e, dict) or any(k not in e for k in _EVENT_KEYS):
            problems.append(f"event {i} lacks one of {_EVENT_KEYS}")
            break
        if not (_is_number(e["delta_bytes"]) and _is_number(e["live_bytes"])) or not isinstance(e["stack"], list):
            problems.append(f"event {i} has non-numeric bytes or a non-list stack")
            break
    return problems


def load_timelines(paths: Iterable[Path | str]) -> list[dict[str, Any]]:
    """Read ``Timeline.to_dict()`` JSON files (a file may also hold a list of them).

    Returns:
        validated timeline dicts in file order, each with ``source`` (the path) added.

    Warns:
        ResultsWarning: naming each unreadable or malformed file (or list item).
    """
    out = []
    for path in map(Path, paths):
        data = _load_json(path)
        if data is None:
            continue
        items = data if isinstance(data, list) else [data]
        for i, item in enumerate(items):
            where = f"{path}" if len(items) == 1 else f"{path}[{i}]"
            problems = _timeline_problems(item)
            if problems:
                _warn(f"{where}: invalid timeline ({'; '.join(problems)}); skipped")
                continue
            out.append({**item, "source": str(path)})
    return out


def _figure_problems(fig: Any) -> list[str]:
    if fig is None:
        return []
    if not isinstance(fig, dict):
        return ["'figure' must be an object"]
    if fig.get("type") not in ("bar", "line"):
        return [f"figure type {fig.get('type')!r} is not 'bar' or 'line'"]
    x, series = fig.get("x"), fig.get("series")
    if not isinstance(x, list) or not isinstance(series, dict):
        return ["figure needs a list 'x' and an object 'series'"]
    bad = [k for k, v in series.items() if not isinstance(v, list) or len(v) != len(x)]
    return [f"figure series {', '.join(map(repr, sorted(bad)))} do not match x in length"] if bad else []


def load_reproductions(paths: Iterable[Path | str]) -> list[dict[str, Any]]:
    """Read seed-reproduction JSON files (see :mod:`memlab.reproductions` for the contract).

    Returns:
        validated dicts sorted by ``seed`` (the file stem when absent), with ``source`` added and
        ``measurements`` replaced by a DataFrame of the valid ones (as :func:`load_runs` rows).

    Warns:
        ResultsWarning: naming each unreadable or malformed file, and each invalid measurement.
    """
    out = []
    for path in map(Path, paths):
        data = _load_json(path)
        if data is None:
            continue
        if not isinstance(data, dict):
            _warn(f"{path}: a reproduction must be a JSON object; skipped")
            continue
        problems = []
        for key in ("title", "claim", "summary"):
            if not isinstance(data.get(key), str):
                problems.append(f"field {key!r} must be a string")
        if data.get("verdict") not in VERDICTS:
            problems.append(f"verdict {data.get('verdict')!r} is not one of {VERDICTS}")
        if not isinstance(data.get("measurements", []), list) or not isinstance(data.get("timelines", []), list):
            problems.append("'measurements' and 'timelines' must be lists")
        problems += _figure_problems(data.get("figure"))
        if problems:
            _warn(f"{path}: invalid reproduction ({'; '.join(problems)}); skipped")
            continue
        rows = []
        for i, rec in enumerate(data.get("measurements", [])):
            bad = validate_measurement(rec)
            if bad:
                _warn(f"{path}: measurement {i} invalid ({'; '.join(bad)}); left out")
                continue
            rows.append(_row(rec, path.stem, str(path), i))
        timelines = []
        for i, t in enumerate(data.get("timelines", [])):
            bad = _timeline_problems(t)
            if bad:
                _warn(f"{path}: timeline {i} invalid ({'; '.join(bad)}); left out")
                continue
            timelines.append({**t, "source": str(path)})
        seed = data.get("seed") if isinstance(data.get("seed"), str) and data.get("seed") else path.stem
        out.append({**data, "seed": seed, "source": str(path), "timelines": timelines,
                    "measurements": pd.DataFrame(rows, columns=list(RUN_COLUMNS))})
    return sorted(out, key=lambda d: d["seed"])
