"""memlab sweep files (JSON Lines of ``Measurement.to_dict()``): each record validated, then one row.

:func:`validate_measurement` checks a record field by field, as the kind each field declares
(:class:`~memlab.core.record.FieldKind`) says; :func:`ranking_status` is the site's verdict (NOTE [ what
the site ranks ]); :func:`machine_of` the machine a row ran on; :func:`load_runs` the DataFrame of
rows (columns :data:`RUN_COLUMNS`; bytes, seconds, samples/s) and :func:`sweep_records` the records
``memlab sweep --resume`` counts, without pandas.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from ..core.record import (MODES, SCHEMA_VERSION, STATUSES, FieldKind, Measurement, Status, activation_figures,
                           analytic_floor, fields_of_kind, is_under_load, row_reason, row_status)
from ..core.record import is_number as _is_number
from ..core.row_kinds import is_sharded_row
from .reading import (CONTROL_CHARS, FileProblems, bad_numbers, list_input_files, read_jsonl, short_repr, shown_path,
                      warn_results)

if TYPE_CHECKING:  # pandas is imported by the loaders that build frames: the sweep's --resume reads rows
    import pandas as pd  # with this module where only the core (no pandas) is installed

# The record's schema is declared once, on :class:`~memlab.core.record.Measurement`; the reader derives
# the fields it checks from the kind each field declares (:class:`~memlab.core.record.FieldKind`).
_FIELDS = {f.name: f for f in dataclasses.fields(Measurement)}
_REQUIRED_STR = fields_of_kind(FieldKind.KEY)
#: Bytes and counts: finite numbers >= 0 or null.
_INT_FIELDS = fields_of_kind(FieldKind.COUNT)
#: Errors against the reference: NaN/Infinity allowed (a non-finite output is shown as wrong).
_ERROR_FIELDS = fields_of_kind(FieldKind.ERROR)
#: Signed figures: a finite number or null.
_SIGNED_FIELDS = fields_of_kind(FieldKind.SIGNED)
#: Seconds, samples/s, a ratio of step times and load averages: finite numbers >= 0 or null.
_FLOAT_FIELDS = fields_of_kind(FieldKind.FIGURE)
_LIST_FIELDS = fields_of_kind(FieldKind.SERIES)
#: Bytes by memory category (:class:`~memlab.core.record.Category`).
_CATEGORY_FIELDS = fields_of_kind(FieldKind.CATEGORIES)
#: The training step's optimizer and loss, with the value rows from before the choice existed carry
#: (the record's defaults).
_STEP_FIELDS = {n: _FIELDS[n].default for n in fields_of_kind(FieldKind.CHOICE)}
#: ``predicted_cuda`` figures the site shows (bytes: the step's predicted ``max_memory_allocated()`` and
#: ``max_memory_reserved()``, baseline included, and reserved - allocated when allocated peaks), as
#: ``predicted_cuda_<name>`` columns; see NOTE [ predicted CUDA memory ] in memlab.cuda_replay.prediction.
_PREDICTED_CUDA = {"allocated_bytes": "allocated_peak_total_bytes", "reserved_bytes": "reserved_peak_bytes",
                   "fragmentation_bytes": "fragmentation_at_peak_bytes"}
#: The record's fields, and ``baseline``, which rows from before ``extra["baseline"]`` carried.
_KNOWN_FIELDS = frozenset(_FIELDS) | {"baseline"}

#: Columns of :func:`load_runs` (one row per measurement).
RUN_COLUMNS = (
    "run", "source", "line", "technique", "workload", "family", "device", "dtype", "mode", *_STEP_FIELDS, "status",
    "error", "peer", "baseline", "relative_to", "params", "params_key", *_INT_FIELDS, *_FLOAT_FIELDS, *_ERROR_FIELDS,
    "step_times_s", "step_time_q1_s", "step_time_q3_s", "cores", "threads", "under_load", *_CATEGORY_FIELDS,
    "matches_reference", "check_dtype", "tolerance", "leak_bytes_per_step", "schema", "status_shown", "reason",
    "check", "analytic_floor_bytes", "activation_peak_bytes", "expected_activation_bytes",
    "extra", "environment", "machine", "memory_method", *(f"predicted_cuda_{k}" for k in _PREDICTED_CUDA),
)


def canonical_params(params: Mapping[str, Any]) -> str:
    """The parameters as one canonical string (sorted JSON), for grouping and sorting."""
    return json.dumps(dict(params), sort_keys=True, default=str)


def _optional(rec: dict, key: str, ok: Callable[[Any], bool], what: str) -> list[str]:
    v = rec.get(key)
    return [] if v is None or ok(v) else [f"field {key!r} must be {what} or null, got {short_repr(v)}"]


def _is_error_size(v: Any) -> bool:
    """An error against the reference: >= 0, NaN or Infinity (a non-finite output)."""
    return isinstance(v, float | int) and not isinstance(v, bool) and (math.isnan(v) or v >= 0)


def validate_measurement(rec: Any) -> list[str]:
    """Problems with one ``Measurement.to_dict()`` record; an empty list when it is usable.

    Checks: a JSON object; the identity fields are non-empty strings; ``status`` one of
    :data:`STATUSES` and ``mode`` train/infer; ``params``, ``extra``, ``environment``,
    ``memory_method`` are objects holding no number outside float range and no NaN; byte and time
    figures are finite, non-negative numbers or null; errors against the reference are numbers
    >= 0 (NaN/Infinity allowed: a non-finite output) or null; ``error`` and ``check_dtype`` strings,
    ``matches_reference`` and ``peer`` booleans, ``tolerance`` a pair of numbers; an ``ok`` row has
    ``peak_allocated_bytes`` and no recorded error that proves its reference check failed (NOTE
    [ error beyond tolerance ]).
    """
    if not isinstance(rec, dict):
        return [f"expected a JSON object, got {type(rec).__name__}"]
    problems = _identity_problems(rec) + _figure_problems(rec) + _nested_problems(rec)
    if rec.get("status") == "ok" and rec.get("peak_allocated_bytes") is None:
        problems.append("status 'ok' but peak_allocated_bytes is null")
    beyond = None if problems else (_beyond_tolerance(rec) or _errors_disagree(rec))
    return problems + ([beyond] if beyond else [])


def _errors_disagree(rec: dict) -> str | None:
    """Why ``max_abs_error`` is not the largest of ``errors_by_tensor`` (both finite), or None: memlab
    writes the one as the maximum of the other, so a row where they differ was not written by it."""
    worst, errors = rec.get("max_abs_error"), list((rec.get("errors_by_tensor") or {}).values())
    if not _is_number(worst) or not errors or not all(_is_number(e) for e in errors):
        return None
    largest = max(errors)
    if abs(worst - largest) <= 1e-12 * max(abs(worst), abs(largest)):
        return None
    return (f"max_abs_error {worst:.6g} is not the largest error of errors_by_tensor ({largest:.6g}): "
            f"the two disagree")


def _identity_problems(rec: dict) -> list[str]:
    """The record's identity: its key strings, status and mode, and which fields are objects."""
    problems = []
    for key in _REQUIRED_STR:
        if not isinstance(rec.get(key), str) or not rec.get(key):
            problems.append(f"field {key!r} must be a non-empty string, got {short_repr(rec.get(key))}")
    if not isinstance(rec.get("params"), dict):
        problems.append(f"field 'params' must be an object, got {short_repr(rec.get('params'))}")
    for key in ("extra", "environment", "memory_method", "errors_by_tensor"):
        if rec.get(key) is not None and not isinstance(rec[key], dict):
            problems.append(f"field {key!r} must be an object, got {type(rec[key]).__name__}")
    if isinstance(rec.get("status"), str) and rec["status"] not in STATUSES:
        problems.append(f"status={short_repr(rec['status'])} is not one of {STATUSES}")
    if isinstance(rec.get("mode"), str) and rec["mode"] not in MODES:
        problems.append(f"mode={short_repr(rec['mode'])} is not one of {MODES}")
    return problems


def _figure_problems(rec: dict) -> list[str]:
    """Each top-level field checked as its kind (:class:`~memlab.core.record.FieldKind`) says."""
    problems = []
    for key in _INT_FIELDS + _FLOAT_FIELDS:
        problems += _optional(rec, key, lambda v: _is_number(v) and v >= 0, "a finite number >= 0")
    for key in _ERROR_FIELDS:
        problems += _optional(rec, key, _is_error_size, "a number >= 0 (NaN: non-finite output)")
    for key in _SIGNED_FIELDS:
        problems += _optional(rec, key, _is_number, "a finite number")
    for key in ("error", "check_dtype", *_STEP_FIELDS):
        problems += _optional(rec, key, lambda v: isinstance(v, str), "a string")
    for key in _CATEGORY_FIELDS:
        problems += _optional(rec, key, lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and _is_number(b) and b >= 0 for k, b in v.items()),
            "an object of category -> bytes (numbers >= 0)")
    for key in ("matches_reference", "peer"):
        problems += _optional(rec, key, lambda v: isinstance(v, bool), "true/false")
    problems += _optional(rec, "baseline", lambda v: isinstance(v, (bool, str)), "true/false or a name")
    problems += _optional(rec, "schema", lambda v: isinstance(v, int) and not isinstance(v, bool)
                          and 1 <= v <= SCHEMA_VERSION, f"a schema this memlab reads (1 to {SCHEMA_VERSION})")
    problems += _optional(rec, "tolerance", lambda v: isinstance(v, list) and len(v) == 2 and
                          all(_is_number(x) and x >= 0 for x in v), "[rtol, atol] (numbers >= 0)")
    for key in _LIST_FIELDS:
        problems += _optional(rec, key, lambda v: isinstance(v, list) and all(map(_is_number, v)),
                              "a list of finite numbers")
    return problems


def _nested_problems(rec: dict) -> list[str]:
    """Inside the objects: errors by tensor, numbers out of range, the predicted CUDA figures shown."""
    problems = []
    if isinstance(rec.get("errors_by_tensor"), dict):
        bad = [k for k, v in rec["errors_by_tensor"].items() if v is not None and not _is_error_size(v)]
        if bad:
            problems.append(f"field 'errors_by_tensor' has non-numeric errors for {short_repr(sorted(bad))}")
    for key in ("params", "extra", "environment", "memory_method"):
        if isinstance(rec.get(key), dict):
            bad = list(itertools.islice(bad_numbers(rec[key], key), 3))
            problems += bad
    pc = rec.get("predicted_cuda")
    if pc is not None and not isinstance(pc, dict):
        problems.append(f"field 'predicted_cuda' must be an object, got {type(pc).__name__}")
    elif pc is not None:
        for key in _PREDICTED_CUDA.values():
            problems += [f"predicted_cuda: {p}" for p in _optional(pc, key, lambda v: _is_number(v) and v >= 0,
                                                                   "a finite number >= 0")]
    return problems


# NOTE [ error beyond tolerance ]
# An ``ok`` row passed its reference check: every element satisfied |a - b| <= atol + rtol * |b|
# (memlab.measurement.verify), so each tensor's max error err_t is at most atol + rtol * scale_t, its
# reference's max magnitude.  A row records err_t per tensor (``errors_by_tensor``), the largest
# (``max_abs_error``) and the largest err_t / scale_t (``max_rel_error``), not each scale_t.  A row is
# invalid when its figures prove a failed check, which they can in two cases only:
# * rtol == 0: max_abs_error > atol;
# * one tensor has a nonzero error: it holds both maxima, so its scale is max_abs_error /
#   max_rel_error (0 when the relative error is infinite) and max_abs_error > atol + rtol * scale.
# With errors in several tensors no scale is known and the row's own verdict stands: the rule never
# rejects a row whose check passed (every ok row of data/sweeps passes it; a test keeps it so).  The
# bound has a relative slack of _TOLERANCE_SLACK for the scale's rounding.  A row whose
# ``matches_reference`` is false is not invalid: it says it failed (ranking_status shows that).
_TOLERANCE_SLACK = 1e-6


def _beyond_tolerance(rec: dict) -> str | None:
    """Why an ``ok`` row's recorded error proves its check failed, or None (NOTE [ error beyond tolerance ])."""
    worst, rel, tol = rec.get("max_abs_error"), rec.get("max_rel_error"), rec.get("tolerance")
    errors = list((rec.get("errors_by_tensor") or {}).values())
    if rec["status"] not in (Status.OK, Status.LEAK_UNKNOWN) or rec.get("matches_reference") is False or not tol \
            or not _is_number(worst):
        return None
    rtol, atol = tol
    nonzero = [e for e in errors if e != 0]
    if rtol == 0:
        allowed = atol
    elif nonzero == [worst] and isinstance(rel, (int, float)) and rel > 0:  # NaN fails `rel > 0`
        allowed = atol + (rtol * worst / rel if math.isfinite(rel) else 0.0)
    else:
        return None
    if worst <= allowed * (1 + _TOLERANCE_SLACK):
        return None
    return (f"status 'ok' but max_abs_error {worst:.3g} exceeds its tolerance (rtol={rtol:g}, atol={atol:g} "
            f"allow {allowed:.3g} here): the reference check failed")


def _non_finite(rec: dict) -> bool:
    sizes = [rec.get(k) for k in _ERROR_FIELDS] + list((rec.get("errors_by_tensor") or {}).values())
    return any(isinstance(v, float) and not math.isfinite(v) for v in sizes)


# NOTE [ what the site ranks ]
# Only a row the site shows as ``ok`` is ranked, called best, drawn in a chart or on a Pareto front;
# every other row is listed with its status and reason ("Not ranked").  From a valid record:
# * status mismatch/leak/oom/error: shown as it is, with the record's one-line reason;
# * status ok but an error against the reference is NaN/Infinity: "mismatch", "non-finite values
#   in output" (older rows wrote NaN errors with status ok);
# * status ok, matches_reference false: schema >= 2 decided it in float64 -> "mismatch"; a schema-1
#   row decided it in the measured dtype, where a correct reversible stack drifts by ~1e-6 and a
#   wrong technique (MemCNN's doubled input gradient) fails alike: memlab cannot tell which, so the
#   row is "unverified" ("verified in float32 only (schema 1); re-measure") unless it was measured
#   in float64, where it is a mismatch;
# * status ok, matches_reference missing: "unverified" (no reference check recorded);
# * status ok with a field this memlab does not know: "unverified" (a newer memlab, or a hand-made row:
#   its figures may mean something else); a schema newer than this memlab's is an invalid row;
# * status ok over fewer measured steps than a leak verdict needs: "leak unknown", with its reason
#   ("leak unknown: 2 steps measured, 3 needed"; memlab.core.record.row_status, NOTE [ verdicts ] in
#   memlab.measurement.verdict); a row that holds the status ``leak_unknown`` reads so as well.
def ranking_status(rec: Mapping[str, Any]) -> tuple[str, str | None]:
    """``(status the site shows, reason)`` of a valid record; only ``"ok"`` is ranked.

    See NOTE [ what the site ranks ].  The shown status is one of :data:`STATUSES` (``leak_unknown`` as
    its label, ``"leak unknown"``) or ``"unverified"``; the reason is None for ``ok``.
    """
    status = rec["status"]
    if status not in (Status.OK, Status.LEAK_UNKNOWN):  # a row that holds leak_unknown is checked as ok is
        return status, rec.get("error") or "no reason recorded"
    if _non_finite(rec):
        return "mismatch", "non-finite values in output"
    match = rec.get("matches_reference")
    if match is False and ((rec.get("schema") or 1) >= 2 or rec["dtype"] == "float64"):
        return "mismatch", "outputs or gradients differ from the reference beyond the tolerance"
    unknown = sorted(set(rec) - _KNOWN_FIELDS)
    if unknown:
        return "unverified", (f"unknown field(s) {short_repr(', '.join(map(shown_path, unknown)))}: not a row this "
                              f"memlab wrote; re-measure")
    if row_status(rec) == Status.LEAK_UNKNOWN:
        return Status.LEAK_UNKNOWN.label, row_reason(rec)[:300]
    if match is True:
        return "ok", None
    if match is None:
        return "unverified", "no reference check recorded; re-measure"
    return "unverified", f"verified in {rec['dtype']} only (schema 1); re-measure"


def _check(rec: dict) -> dict[str, Any]:
    """The reference check as the site states it: verdict, dtype, error sizes, tolerance, drift."""
    schema = rec.get("schema") or 1
    dtype = rec.get("check_dtype") or rec["dtype"]
    tol = rec.get("tolerance")
    drift = schema >= 2 and dtype != rec["dtype"] and (
        rec.get("drift_max_abs_error") is not None or rec.get("drift_max_rel_error") is not None)
    return {"matches": rec.get("matches_reference"), "dtype": dtype, "schema": schema,
            "max_abs": rec.get("max_abs_error"), "max_rel": rec.get("max_rel_error"),
            "rtol": tol[0] if tol else None, "atol": tol[1] if tol else None, "non_finite": _non_finite(rec),
            "at_check_config": (rec.get("extra") or {}).get("verdict_config") == "check",
            "drift_dtype": rec["dtype"] if drift else None,
            "drift_abs": rec.get("drift_max_abs_error") if drift else None,
            "drift_rel": rec.get("drift_max_rel_error") if drift else None}


def _quartiles(samples: Any) -> tuple[float | None, float | None]:
    """First and third quartiles of the step samples (as memlab computes the IQR: ``statistics.quantiles``,
    inclusive); None under two samples."""
    if not isinstance(samples, list) or len(samples) < 2:
        return None, None
    q1, _, q3 = statistics.quantiles([float(x) for x in samples], n=4, method="inclusive")
    return q1, q3


def _count(v: Any) -> int | None:
    """A positive whole number from the environment (cores, threads); None otherwise."""
    return int(v) if _is_number(v) and v >= 1 and float(v).is_integer() else None


# NOTE [ step times on the site ]
# A row's step time is the median of its samples with their interquartile range (q1 and q3 from the
# samples, ``statistics.quantiles(..., method="inclusive")`` as memlab records the IQR; the record's
# own IQR when it has no samples).  ``relative_step_time`` (schema 2: the technique's step over the
# workload's plain reference step timed interleaved in the same process) is the figure to compare
# techniques by; seconds are the raw figure.  A row is measured *under load* when the 1-minute load
# average before or after its timed steps exceeded 1.25 x the cores it could run on (NOTE [ under
# load ] in memlab.core.record: a full-machine sweep's own jobs keep the load at about the cores).
def _timing(rec: dict, env: dict) -> dict[str, Any]:
    samples = rec.get("step_times_s") or []
    q1, q3 = _quartiles(samples)
    iqr = rec.get("step_time_iqr_s")
    cores = _count(env.get("cores"))
    loads = [x for x in (rec.get("load_avg_before"), rec.get("load_avg_after")) if _is_number(x)]
    return {"step_times_s": tuple(float(x) for x in samples), "step_time_q1_s": q1, "step_time_q3_s": q3,
            "step_time_iqr_s": iqr if iqr is not None else (q3 - q1 if q1 is not None else None),
            "cores": cores, "threads": _count(env.get("threads")),
            "under_load": is_under_load(loads, cores)}


# NOTE [ the machine a row ran on ]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A sweep sharded over hosts (``--shard``, ``memlab merge``), run on a Ray cluster or with one GPU per
# worker holds rows of several machines in one file.  Bytes are exact on every machine, but a step
# time, a CUDA allocator's reserved memory or a oneDNN scratch buffer is the machine's, so the site
# never ranks, draws or compares rows of two machines together: a row's machine is part of its setting
# (``memlab.site.ranking.SETTING``) and every table and download names it.
# The machine is what the row records, as one label that is also its key: the host
# (``environment.host``), then the device's model (the GPU's for a CUDA row, else the CPU's), then for
# a CUDA row which GPU: ``GPU-`` and the first 8 hex digits of its UUID, else the
# ``CUDA_VISIBLE_DEVICES`` entry it was pinned to, else its index (two GPUs of one model on one host are
# two machines).  Rows from before memlab recorded the host (every committed row up to issue 31) are
# named by the model alone ('AMD EPYC', 'NVIDIA H200'): rows of two such hosts with one model cannot
# be told apart from their records, and are not.
def _fact(env: Mapping[str, Any], key: str) -> str:
    """An environment fact as one short printable line ('' when missing)."""
    v = env.get(key)
    if v is None or isinstance(v, (dict, list)) or (isinstance(v, str) and not v.strip()):
        return ""
    text = CONTROL_CHARS.sub(" ", str(v)).strip()
    return text if len(text) <= 60 else text[:57] + "..."


def machine_of(env: Mapping[str, Any] | None, device: str) -> str:
    """The machine a row ran on (NOTE [ the machine a row ran on ]): ``'AMD EPYC'`` (no host
    recorded), ``'node-3 · AMD EPYC'``, ``'node-3 · NVIDIA H200 · GPU-5d1c2a3b'``."""
    env = env if isinstance(env, Mapping) else {}
    cuda = str(device).startswith("cuda")
    model = (_fact(env, "gpu") if cuda else "") or _fact(env, "cpu") or _fact(env, "platform") or "unknown machine"
    which = ""
    if cuda:
        uuid = re.sub(r"^GPU-", "", _fact(env, "gpu_uuid"))
        which = (f"GPU-{uuid[:8]}" if uuid else f"GPU {_fact(env, 'cuda_visible_devices')}"
                 if _fact(env, "cuda_visible_devices") else f"cuda:{_fact(env, 'gpu_index')}"
                 if _fact(env, "gpu_index") else "")
    return " · ".join(p for p in (_fact(env, "host"), model, which) if p)


def measurement_row(rec: dict, run: str, source: str, line: int) -> dict[str, Any]:
    extra = rec.get("extra") or {}
    env = rec.get("environment") or {}
    baseline = rec.get("baseline", extra.get("baseline"))
    activation_peak, expected_activation = activation_figures(extra, rec["technique"])
    shown, reason = ranking_status(rec)
    return {
        "run": run, "source": source, "line": line,
        **{k: rec[k] for k in _REQUIRED_STR},
        "error": rec.get("error"),
        "peer": bool(rec.get("peer", False)),
        "baseline": baseline if isinstance(baseline, (bool, str)) else None,
        # the technique the relative step time was timed against (issue 24: the family baseline); None
        # in rows from before memlab recorded it, which were timed against the workload's reference
        "relative_to": rec.get("relative_to") if isinstance(rec.get("relative_to"), str) else None,
        "params": dict(rec["params"]),
        "params_key": canonical_params(rec["params"]),
        **{k: rec.get(k) for k in _INT_FIELDS + _FLOAT_FIELDS + _ERROR_FIELDS},
        **{k: rec.get(k) or default for k, default in _STEP_FIELDS.items()},
        "accumulate": rec.get("accumulate") or _FIELDS["accumulate"].default,  # 1 in rows from before it
        **_timing(rec, env),
        **{k: {str(c): int(b) for c, b in sorted(rec[k].items())} if rec.get(k) else None for k in _CATEGORY_FIELDS},
        "matches_reference": rec.get("matches_reference"),
        "check_dtype": rec.get("check_dtype"),
        "tolerance": tuple(rec["tolerance"]) if rec.get("tolerance") else None,
        "leak_bytes_per_step": rec.get("leak_bytes_per_step"),
        "schema": rec.get("schema") or 1,
        "status_shown": shown, "reason": reason, "check": _check(rec),
        "analytic_floor_bytes": analytic_floor(extra, rec["mode"]),
        "activation_peak_bytes": activation_peak,
        "expected_activation_bytes": expected_activation,
        "extra": extra,
        "environment": env,
        "machine": machine_of(env, rec["device"]),
        "memory_method": rec.get("memory_method") or {},
        **{f"predicted_cuda_{k}": (rec.get("predicted_cuda") or {}).get(v) for k, v in _PREDICTED_CUDA.items()},
    }


def _valid_records(path: Path, report: Callable[..., None]) -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` of each valid measurement in a sweep file; every other line is reported."""
    for number, rec in read_jsonl(path, report):
        if is_sharded_row(rec):
            continue  # a sharded sweep's rank row (memlab sweep --shard-strategy): the Sharding page reads it
        problems = validate_measurement(rec)
        if problems:
            report(f"invalid measurement ({'; '.join(problems)}); skipped", number)
            continue
        yield number, rec


def sweep_records(path: Path | str, warn: Callable[[str], None]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` of each measurement in the sweep file ``path`` that the site would
    read (:func:`validate_measurement`): what ``memlab sweep --resume`` counts as measured.

    Each unreadable line or invalid record is one call ``warn("FILE:LINE: why; skipped")``, as
    :func:`load_runs` warns about it; no limit per file.  Needs no pandas.
    """
    name = shown_path(path)

    def report(msg: str, line: int | None = None) -> None:
        warn(f"{name}:{line}: {msg}" if line is not None else f"{name}: {msg}")

    yield from _valid_records(Path(path), report)


def load_runs(paths: Iterable[Path | str]) -> pd.DataFrame:
    """Read memlab sweep files (JSON Lines of ``Measurement.to_dict()``) into one DataFrame.

    Args:
        paths: ``.jsonl`` files; read in the order given.  ``run`` is the file's stem, ``source``
            its path as given, ``line`` the 1-based line number.

    Returns:
        one row per valid measurement, columns :data:`RUN_COLUMNS` (bytes, seconds, samples/s);
        ``params``, ``extra``, ``environment`` hold dicts.  ``baseline`` is the record's own
        ``baseline`` (or ``extra["baseline"]``) or None.  ``status_shown`` and ``reason`` are the
        site's verdict (:func:`ranking_status`), ``check`` the reference check's numbers.
        ``step_time_q1_s``/``step_time_q3_s`` are the quartiles of ``step_times_s``, ``cores`` and
        ``threads`` come from the environment, ``under_load`` is True when a load average exceeded
        1.25 x the cores (NOTE [ step times on the site ]); ``optimizer`` and ``loss`` default to ``sgd`` and
        ``given`` (rows from before the choice); the ``*_by_category_bytes`` columns hold dicts or None.

    Warns:
        ResultsWarning: per file that is not a readable regular file, line that is not UTF-8 or
        not valid JSON (e.g. a truncated last line) and invalid record (naming the file, line and
        problem), and once per file with unknown fields; at most :data:`PROBLEMS_PER_FILE` per file
        and then one count.
    """
    import pandas as pd  # deferred: torch line

    rows = []
    for path in map(Path, paths):
        unknown: set[str] = set()
        with FileProblems(path) as report:
            for number, rec in _valid_records(path, report):
                unknown |= set(rec) - _KNOWN_FIELDS
                rows.append(measurement_row(rec, shown_path(path.stem), shown_path(path), number))
            if unknown:
                report(f"unknown measurement field(s) ignored: {', '.join(sorted(map(shown_path, unknown)))}")
    frame = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    return frame.astype({"peer": bool, "line": int, "under_load": bool}) if len(frame) else frame


def find_sweep_files(data_dir: Path | str) -> list[Path]:
    """``<data_dir>/sweeps/*.jsonl``, sorted by name (of any kind: :func:`load_runs` checks each)."""
    return list_input_files(Path(data_dir) / "sweeps", ".jsonl")


def family_baselines(runs: pd.DataFrame) -> dict[str, str]:
    """The baseline technique of each family present in ``runs``.

    Rows whose ``baseline`` is True name their own technique (a technique's ``baseline = True``,
    which every measurement records in ``extra["baseline"]``: declared once, on the technique); a
    string ``baseline`` names the baseline technique.  Families with no such row are absent.
    Conflicting claims warn and the first name in sorted order wins.
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
            warn_results(f"family {family!r}: several techniques claim to be the baseline "
                  f"({', '.join(sorted(claimed))}); using {sorted(claimed)[0]!r}")
        if claimed:
            out[family] = sorted(claimed)[0]
    return out
