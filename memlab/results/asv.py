"""asv 0.6 results trees (``benchmarks.json``, ``<machine>/machine.json``,
``<machine>/<commit>-<env>.json``) -> one row per benchmark, parameter combination, machine and commit
(:func:`load_asv_results`, columns :data:`ASV_COLUMNS`), and each machine's details
(:func:`load_asv_machines`).  Every file is read through :mod:`memlab.results.reading`."""
from __future__ import annotations

import ast
import itertools
import math
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.record import is_number as _is_number
from .reading import (FAILED, FileProblems, OutOfRange, list_input_files, read_json, short_repr, shown_path,
                      stat_problem, warn_results)
from .runs import canonical_params

if TYPE_CHECKING:
    import pandas as pd

#: Columns of :func:`load_asv_results` (one row per benchmark x parameter combination x commit).
ASV_COLUMNS = ("machine", "commit", "date_ms", "env", "benchmark", "type", "unit", "params", "params_key",
               "value", "source")


def _param_value(text: Any) -> Any:
    """asv stores parameter values as their repr (``"'cpu'"``, ``"2500"``); parse literals."""
    if isinstance(text, OutOfRange):
        return repr(text)
    if not isinstance(text, str):
        return text
    if len(text) > 1000:
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


def _dirs(root: Path) -> list[Path]:
    """Sub-folders of ``root`` (symbolic links to folders included), sorted; loops are reported."""
    out = []
    for path in list_input_files(root, ""):
        try:
            if stat.S_ISDIR(os.stat(path).st_mode):
                out.append(path)
        except OSError as exc:
            if os.path.islink(path):
                warn_results(f"{shown_path(path)}: {stat_problem(path, exc)}")
    return out


def load_asv_machines(results_dir: Path | str) -> dict[str, dict[str, Any]]:
    """``machine.json`` of every machine folder under ``results_dir``, by machine name."""
    out = {}
    for folder in _dirs(Path(results_dir)):
        path = folder / "machine.json"
        if not os.path.lexists(path):
            continue
        with FileProblems(path) as report:
            data = read_json(path, report)
            if data is FAILED:
                continue
            if not isinstance(data, dict) or not isinstance(data.get("machine"), str) or not data["machine"]:
                report("not an asv machine.json (no 'machine' name); skipped")
                continue
            out[data["machine"]] = {k: v if isinstance(v, (str, int, float, bool)) or v is None else short_repr(v)
                                    for k, v in sorted(data.items()) if k != "version"}
    return out


def _asv_benchmarks(results_dir: Path) -> dict[str, dict[str, Any]]:
    """``benchmarks.json``: per benchmark its ``param_names`` (list of str), ``type`` and ``unit`` (str)."""
    path = results_dir / "benchmarks.json"
    if not os.path.lexists(path):
        warn_results(f"{shown_path(path)}: missing; parameter names and units of the asv benchmarks are unknown")
        return {}
    out = {}
    with FileProblems(path) as report:
        data = read_json(path, report)
        if data is FAILED:
            return {}
        if not isinstance(data, dict):
            report("not a JSON object; parameter names and units are unknown")
            return {}
        for name, meta in sorted(data.items()):
            if not isinstance(meta, dict):
                continue  # "version": 2
            clean: dict[str, Any] = {}
            names = meta.get("param_names")
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                clean["param_names"] = names
            elif names is not None:
                report(f"benchmark {name!r}: 'param_names' is not a list of strings ({short_repr(names)}); "
                       "parameters are named by position")
            for key in ("type", "unit"):
                v = meta.get(key)
                if isinstance(v, str):
                    clean[key] = v
                elif v is not None:
                    report(f"benchmark {name!r}: {key!r} is not a string ({short_repr(v)}); shown as unknown")
            out[name] = clean
    return out


def _asv_rows(machine: str, data: dict, benchmarks: dict, source: str,
              report: FileProblems) -> list[dict[str, Any]]:
    columns = data.get("result_columns")
    if not isinstance(columns, list) or "result" not in columns:
        report("no 'result_columns' list naming 'result' (not an asv 0.6 results file); skipped")
        return []
    i_res = columns.index("result")
    i_par = columns.index("params") if "params" in columns else None
    date = data.get("date")
    if date is not None and not _is_number(date):
        report(f"'date' is not a number ({short_repr(date)}); shown without a date")
        date = None
    env = data.get("env_name") if isinstance(data.get("env_name"), str) else None
    rows = []
    for name, values in sorted(data["results"].items()):
        if not isinstance(values, list) or len(values) <= i_res:
            report(f"benchmark {name!r} has no result; skipped")
            continue
        result = values[i_res]
        param_lists = values[i_par] if i_par is not None and len(values) > i_par and values[i_par] else []
        if not isinstance(param_lists, list) or not all(isinstance(p, list) for p in param_lists):
            report(f"benchmark {name!r}: its parameters are not lists of values; skipped")
            continue
        if result is None:
            continue  # asv writes one null when every combination failed (memlab.site.history reads those)
        result = result if isinstance(result, list) else [result]
        combos = math.prod(len(p) for p in param_lists)
        if combos != len(result):
            report(f"benchmark {name!r} has {len(result)} results for {combos} parameter combinations; skipped")
            continue
        meta = benchmarks.get(name, {})
        names = meta.get("param_names") or [f"param{i}" for i in range(len(param_lists))]
        if len(names) != len(param_lists):
            report(f"benchmark {name!r} has {len(param_lists)} parameter lists but benchmarks.json "
                   f"names {len(names)}; skipped")
            continue
        for combo, value in zip(itertools.product(*param_lists), result):
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue  # asv's NaN/null: skipped (NotImplementedError) or failed
            if not _is_number(value):
                report(f"benchmark {name!r}: value {short_repr(value)} is not a finite number; left out")
                continue
            params = {n: _param_value(v) for n, v in zip(names, combo)}
            rows.append({"machine": machine, "commit": data["commit_hash"], "date_ms": date, "env": env,
                         "benchmark": name, "type": meta.get("type"), "unit": meta.get("unit"), "params": params,
                         "params_key": canonical_params(params), "value": float(value), "source": source})
    return rows


def _asv_file(path: Path, folder: Path, benchmarks: dict) -> list[dict[str, Any]]:
    with FileProblems(path) as report:
        data = read_json(path, report)
        if data is FAILED:
            return []
        problem = None
        if not isinstance(data, dict):
            problem = "not a JSON object"
        elif not isinstance(data.get("results"), dict) or not isinstance(data.get("commit_hash"), str) \
                or not data["commit_hash"]:
            problem = "no 'results' object or 'commit_hash'"
        elif data.get("version") not in (None, 2):
            problem = f"asv results api_version {short_repr(data.get('version'))} is not 2"
        if problem:
            report(f"not an asv 0.6 results file ({problem}); skipped")
            return []
        params = data.get("params")
        machine = params.get("machine") if isinstance(params, dict) else None
        machine = machine if isinstance(machine, str) and machine else shown_path(folder.name)
        return _asv_rows(machine, data, benchmarks, shown_path(path), report)


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
    import pandas as pd  # deferred: torch line

    root = Path(results_dir)
    if not os.path.isdir(root):
        warn_results(f"{shown_path(root)}: no asv results directory; the history is empty")
        return pd.DataFrame(columns=list(ASV_COLUMNS))
    benchmarks = _asv_benchmarks(root)
    rows: list[dict[str, Any]] = []
    for folder in _dirs(root):
        files = [p for p in list_input_files(folder, ".json") if p.name != "machine.json"]
        if not files:
            continue
        if not os.path.lexists(folder / "machine.json"):
            warn_results(f"{shown_path(folder)}: no machine.json; its results are loaded without machine details")
        for path in files:
            rows.extend(_asv_file(path, folder, benchmarks))
    return pd.DataFrame(rows, columns=list(ASV_COLUMNS))
