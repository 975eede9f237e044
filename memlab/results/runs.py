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

Every file is read as hostile (see NOTE [ hostile input files ]): a file, line or value that is
malformed, partial, of the wrong type, out of range or not a regular file never stops the others:
it is left out with one :class:`ResultsWarning` that names the file (and line).

Each measurement row also carries the site's verdict (see NOTE [ what the site ranks ]): only rows
whose ``status_shown`` is ``ok`` are ever ranked, called best or drawn.

Memory columns are bytes, time columns seconds, throughput samples/s; step times carry their spread and
the load-robust relative step time (see NOTE [ step times on the site ]).
"""
from __future__ import annotations

import ast
import codecs
import dataclasses
import errno
import itertools
import json
import math
import os
import re
import stat
import statistics
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from ..record import (MODES, STATUSES, VERDICTS, FieldKind, Measurement, activation_figures, analytic_floor,
                     fields_of_kind, is_under_load)
from ..record import is_number as _is_number

if TYPE_CHECKING:  # pandas is imported by the loaders that build frames: the sweep's --resume reads rows
    import pandas as pd  # with this module where only the core (no pandas) is installed

__all__ = [
    "ResultsWarning", "RUN_COLUMNS", "ASV_COLUMNS", "VERDICTS", "STATUSES",
    "MAX_JSON_DEPTH", "MAX_FILE_BYTES", "PROBLEMS_PER_FILE",
    "load_runs", "find_sweep_files", "list_input_files", "load_asv_results", "load_asv_machines",
    "load_timelines", "load_reproductions", "validate_measurement", "ranking_status", "family_baselines",
    "canonical_params", "load_json_objects", "sweep_records", "machine_of", "shown_path", "short_repr",
]

#: Deepest JSON nesting read (memlab writes at most 5 levels); deeper files are refused unparsed.
MAX_JSON_DEPTH = 64
#: Largest file read, in bytes.
MAX_FILE_BYTES = 256 * 2**20
#: Problems warned about one by one per file; the rest are counted in one more warning.
PROBLEMS_PER_FILE = 5

# The record's schema is declared once, on :class:`~memlab.record.Measurement`; the reader derives
# the fields it checks from the kind each field declares (:class:`~memlab.record.FieldKind`).
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
#: Bytes by memory category (:class:`~memlab.record.Category`).
_CATEGORY_FIELDS = fields_of_kind(FieldKind.CATEGORIES)
#: The training step's optimizer and loss, with the value rows from before the choice existed carry
#: (the record's defaults).
_STEP_FIELDS = {n: _FIELDS[n].default for n in fields_of_kind(FieldKind.CHOICE)}
#: Fields of the record the site does not read (so it does not check them either).
_UNREAD_FIELDS = ("optimizer_class",)
#: ``predicted_cuda`` figures the site shows (bytes: the step's predicted ``max_memory_allocated()`` and
#: ``max_memory_reserved()``, baseline included, and reserved - allocated when allocated peaks), as
#: ``predicted_cuda_<name>`` columns; see NOTE [ predicted CUDA memory ] in memlab.cuda.prediction.
_PREDICTED_CUDA = {"allocated_bytes": "allocated_peak_total_bytes", "reserved_bytes": "reserved_peak_bytes",
                   "fragmentation_bytes": "fragmentation_at_peak_bytes"}
#: The record's fields, and ``baseline``, which rows from before ``extra["baseline"]`` carried.
_KNOWN_FIELDS = frozenset(_FIELDS) | {"baseline"}

#: Columns of :func:`load_runs` (one row per measurement).
RUN_COLUMNS = (
    "run", "source", "line", "technique", "workload", "family", "device", "dtype", "mode", *_STEP_FIELDS, "status",
    "error", "peer", "baseline", "params", "params_key", *_INT_FIELDS, *_FLOAT_FIELDS, *_ERROR_FIELDS,
    "step_times_s", "step_time_q1_s", "step_time_q3_s", "cores", "threads", "under_load", *_CATEGORY_FIELDS,
    "matches_reference", "check_dtype", "tolerance", "leak_bytes_per_step", "schema", "status_shown", "reason",
    "check", "analytic_floor_bytes", "activation_peak_bytes", "expected_activation_bytes",
    "extra", "environment", "machine", "memory_method", *(f"predicted_cuda_{k}" for k in _PREDICTED_CUDA),
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


# -- reading files defensively ---------------------------------------------------------------------
# NOTE [ hostile input files ]
# The site is built from whatever lies in results/ and data/, so every reader expects the worst:
# * A path is stat()ed first and only a regular file is opened: a FIFO would block for ever, a device
#   may never end.  It is then opened non-blocking and checked again with fstat (it may have been
#   swapped in between).  Dangling and looping symbolic links are named as such.  At most
#   MAX_FILE_BYTES are read.
# * JSON nesting is measured before parsing (json.loads recurses: 100,000 "[" raise RecursionError)
#   and a file nested deeper than MAX_JSON_DEPTH is refused unparsed.
# * A number outside float range (an integer of 400 digits, 1e999) parses as _OutOfRange, which no
#   validator accepts.  NaN/Infinity are accepted only where a non-finite value means something:
#   asv's skipped benchmarks, and the error of a technique whose output is non-finite (shown as wrong).
# * JSON Lines are split on b"\n" and decoded line by line: one bad byte costs one line, not the file.
# * Every problem is one ResultsWarning naming the file (and line); after PROBLEMS_PER_FILE problems
#   in one file, one more warning counts the rest.  Paths are shown with undecodable bytes replaced
#   and control characters escaped, so each warning stays one printable line.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: A JSON string (possessive: no backtracking on a long or unterminated one).
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_FAILED = object()  # a file that could not be read or parsed (JSON null is None)


class _OutOfRange:
    """A JSON number outside float range: kept only to name it in a warning, never a valid value."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        shown = self.text if len(self.text) <= 12 else f"{self.text[:10]}... ({len(self.text)} digits)"
        return f"{shown}, outside float range"


def _parse_int(text: str) -> int | _OutOfRange:
    if len(text) > 310:  # float's maximum has 309 digits; int() would also refuse > 4300
        return _OutOfRange(text)
    value = int(text)
    return value if abs(value) <= sys.float_info.max else _OutOfRange(text)


def _parse_float(text: str) -> float | _OutOfRange:
    value = float(text)
    return value if math.isfinite(value) else _OutOfRange(text)


def _json_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings (no recursion, linear time)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    steps = map({"[": 1, "{": 1, "]": -1, "}": -1}.__getitem__, brackets)
    return max(itertools.accumulate(steps, initial=0))


def _loads(text: str) -> Any:
    """JSON with bounded nesting and out-of-range numbers as :class:`_OutOfRange`.

    Raises:
        ValueError: a one-line reason (nesting, syntax, size).
    """
    depth = _json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested {depth} levels deep (memlab reads at most {MAX_JSON_DEPTH})")
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except (RecursionError, MemoryError, ValueError) as exc:  # pragma: no cover - guarded above
        raise ValueError(f"not readable JSON ({type(exc).__name__})") from None


def shown_path(path: Any) -> str:
    """A path as one printable line: undecodable bytes replaced, control characters escaped."""
    text = os.fsencode(path).decode("utf-8", "replace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr`` of a value, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _FileProblems:
    """The problems of one file: a warning each for the first :data:`PROBLEMS_PER_FILE`, then one count."""

    def __init__(self, path: Path):
        self.name, self.count = shown_path(path), 0

    def __call__(self, msg: str, line: int | None = None) -> None:
        self.count += 1
        if self.count <= PROBLEMS_PER_FILE:
            _warn(f"{self.name}:{line}: {msg}" if line is not None else f"{self.name}: {msg}")

    def __enter__(self) -> "_FileProblems":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.count > PROBLEMS_PER_FILE:
            _warn(f"... and {self.count - PROBLEMS_PER_FILE} more problem(s) in {self.name}")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _stat_problem(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symbolic link loop; skipped"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return "dangling symbolic link (its target does not exist); skipped"
    return f"cannot read ({exc.strerror or exc}); skipped"


def _read_bytes(path: Path, report: _FileProblems) -> bytes | None:
    """The bytes of a regular file; None (reported) for anything else, which is never opened."""
    try:
        st = os.stat(path)
    except OSError as exc:
        report(_stat_problem(path, exc))
        return None
    if not stat.S_ISREG(st.st_mode):
        report(f"{_kind(st.st_mode)}, not a regular file; skipped without opening it")
        return None
    if st.st_size > MAX_FILE_BYTES:
        report(f"{st.st_size} bytes, more than the {MAX_FILE_BYTES} memlab reads; skipped")
        return None
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):  # swapped since the stat above
                report(f"{_kind(mode)}, not a regular file; skipped")
                return None
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        report(f"cannot read ({exc.strerror or exc}); skipped")
        return None
    if len(data) > MAX_FILE_BYTES:
        report(f"more than the {MAX_FILE_BYTES} bytes memlab reads; skipped")
        return None
    return data


def _utf8_problem(data: bytes, exc: UnicodeDecodeError, offset: int = 0) -> str:
    return f"not UTF-8 (byte 0x{data[exc.start]:02x} at column {exc.start - offset + 1})"


def _read_json(path: Path, report: _FileProblems) -> Any:
    """One JSON document, or :data:`_FAILED` (reported)."""
    data = _read_bytes(path, report)
    if data is None:
        return _FAILED
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        report(_utf8_problem(data, exc, line_start) + "; file skipped", data.count(b"\n", 0, exc.start) + 1)
        return _FAILED
    try:
        return _loads(text)
    except ValueError as exc:
        report(f"{exc}; skipped")
        return _FAILED


def _read_jsonl(path: Path, report: _FileProblems) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` per non-empty line; a bad line is reported and skipped, not the file."""
    data = _read_bytes(path, report)
    if data is None:
        return
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            report(_utf8_problem(raw, exc) + "; line skipped", number)
            continue
        try:
            yield number, _loads(line)
        except ValueError as exc:
            reason = str(exc)
            if reason.startswith("not valid JSON"):
                reason = reason.replace(" at line 1 column", " at column")[:-1] + "; a truncated line?)"
            report(f"{reason}; line skipped", number)


def list_input_files(folder: Path | str, suffix: str) -> list[Path]:
    """The entries of ``folder`` whose names end with ``suffix``, sorted by name, of any kind.

    The readers check each (a FIFO, a directory or a broken link named ``*.json`` is reported when
    read, never opened).  No folder: an empty list; a folder that cannot be listed: a warning too.
    """
    folder = Path(folder)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno == errno.ENOENT:  # pragma: no cover - FileNotFoundError above
            return []
        _warn(f"{shown_path(folder)}: cannot list this folder ({exc.strerror or exc}); its files are left out")
        return []
    return [folder / n for n in sorted(names) if n.endswith(suffix)]


def _bad_numbers(value: Any, where: str) -> Iterator[str]:
    """A problem for each number outside float range or NaN/Infinity inside ``value`` (at ``where``)."""
    if isinstance(value, _OutOfRange) or (isinstance(value, float) and not math.isfinite(value)):
        yield f"field {where!r} must be a finite number, got {value!r}"
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _bad_numbers(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _bad_numbers(v, f"{where}[{i}]")


# -- memlab sweep runs -----------------------------------------------------------------------------
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
    beyond = None if problems else _beyond_tolerance(rec)
    return problems + ([beyond] if beyond else [])


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
    """Each top-level field checked as its kind (:class:`~memlab.record.FieldKind`) says."""
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
    problems += _optional(rec, "schema", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                          "a positive integer")
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
            bad = list(itertools.islice(_bad_numbers(rec[key], key), 3))
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
    if rec["status"] != "ok" or rec.get("matches_reference") is False or not tol or not _is_number(worst):
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
# * status ok, matches_reference missing: "unverified" (no reference check recorded).
def ranking_status(rec: Mapping[str, Any]) -> tuple[str, str | None]:
    """``(status the site shows, reason)`` of a valid record; only ``"ok"`` is ranked.

    See NOTE [ what the site ranks ].  The shown status is one of :data:`STATUSES` or
    ``"unverified"``; the reason is None for ``ok``.
    """
    status = rec["status"]
    if status != "ok":
        return status, rec.get("error") or "no reason recorded"
    if _non_finite(rec):
        return "mismatch", "non-finite values in output"
    match = rec.get("matches_reference")
    if match is True:
        return "ok", None
    if match is None:
        return "unverified", "no reference check recorded; re-measure"
    if (rec.get("schema") or 1) >= 2 or rec["dtype"] == "float64":
        return "mismatch", "outputs or gradients differ from the reference beyond the tolerance"
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
# load ] in memlab.record: a full-machine sweep's own jobs keep the load at about the cores).
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
    text = _CONTROL.sub(" ", str(v)).strip()
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


def _row(rec: dict, run: str, source: str, line: int) -> dict[str, Any]:
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
        "params": dict(rec["params"]),
        "params_key": canonical_params(rec["params"]),
        **{k: rec.get(k) for k in _INT_FIELDS + _FLOAT_FIELDS + _ERROR_FIELDS},
        **{k: rec.get(k) or default for k, default in _STEP_FIELDS.items()},
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
    for number, rec in _read_jsonl(path, report):
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
    import pandas as pd

    rows = []
    for path in map(Path, paths):
        unknown: set[str] = set()
        with _FileProblems(path) as report:
            for number, rec in _valid_records(path, report):
                unknown |= set(rec) - _KNOWN_FIELDS
                rows.append(_row(rec, shown_path(path.stem), shown_path(path), number))
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
            _warn(f"family {family!r}: several techniques claim to be the baseline "
                  f"({', '.join(sorted(claimed))}); using {sorted(claimed)[0]!r}")
        if claimed:
            out[family] = sorted(claimed)[0]
    return out


# -- asv results -----------------------------------------------------------------------------------
def _param_value(text: Any) -> Any:
    """asv stores parameter values as their repr (``"'cpu'"``, ``"2500"``); parse literals."""
    if isinstance(text, _OutOfRange):
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
                _warn(f"{shown_path(path)}: {_stat_problem(path, exc)}")
    return out


def load_asv_machines(results_dir: Path | str) -> dict[str, dict[str, Any]]:
    """``machine.json`` of every machine folder under ``results_dir``, by machine name."""
    out = {}
    for folder in _dirs(Path(results_dir)):
        path = folder / "machine.json"
        if not os.path.lexists(path):
            continue
        with _FileProblems(path) as report:
            data = _read_json(path, report)
            if data is _FAILED:
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
        _warn(f"{shown_path(path)}: missing; parameter names and units of the asv benchmarks are unknown")
        return {}
    out = {}
    with _FileProblems(path) as report:
        data = _read_json(path, report)
        if data is _FAILED:
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
              report: _FileProblems) -> list[dict[str, Any]]:
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
    with _FileProblems(path) as report:
        data = _read_json(path, report)
        if data is _FAILED:
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
    import pandas as pd

    root = Path(results_dir)
    if not os.path.isdir(root):
        _warn(f"{shown_path(root)}: no asv results directory; the history is empty")
        return pd.DataFrame(columns=list(ASV_COLUMNS))
    benchmarks = _asv_benchmarks(root)
    rows: list[dict[str, Any]] = []
    for folder in _dirs(root):
        files = [p for p in list_input_files(folder, ".json") if p.name != "machine.json"]
        if not files:
            continue
        if not os.path.lexists(folder / "machine.json"):
            _warn(f"{shown_path(folder)}: no machine.json; its results are loaded without machine details")
        for path in files:
            rows.extend(_asv_file(path, folder, benchmarks))
    return pd.DataFrame(rows, columns=list(ASV_COLUMNS))


# -- timelines and reproductions -------------------------------------------------------------------
_EVENT_KEYS = ("op", "stack", "phase", "delta_bytes", "live_bytes")


def _event_problem(i: int, e: Any) -> str | None:
    if not isinstance(e, dict) or any(k not in e for k in _EVENT_KEYS):
        return f"event {i} lacks one of {_EVENT_KEYS}"
    if not (_is_number(e["delta_bytes"]) and _is_number(e["live_bytes"])):
        return f"event {i} has non-numeric bytes"
    if not isinstance(e["stack"], list) or not all(isinstance(s, str) for s in e["stack"]):
        return f"event {i} has a stack that is not a list of strings"
    if not isinstance(e["op"], str) or not isinstance(e["phase"], str):
        return f"event {i} has an 'op' or 'phase' that is not a string"
    return None


def _timeline_problems(data: Any) -> list[str]:
    if not isinstance(data, dict):
        return [f"expected a JSON object, got {type(data).__name__}"]
    problems = []
    for key in ("technique", "device", "dtype", "mode"):
        if not isinstance(data.get(key), str):
            problems.append(f"field {key!r} must be a string")
    if not isinstance(data.get("params"), dict):
        problems.append("field 'params' must be an object")
    else:
        problems += itertools.islice(_bad_numbers(data["params"], "params"), 3)
    if not _is_number(data.get("baseline_bytes")):
        problems.append(f"field 'baseline_bytes' must be a number, got {short_repr(data.get('baseline_bytes'))}")
    if data.get("method") is not None and not isinstance(data["method"], str):
        problems.append("field 'method' must be a string")
    events = data.get("events")
    if not isinstance(events, list):
        return problems + ["field 'events' must be a list"]
    bad = next((p for p in map(_event_problem, range(len(events)), events) if p), None)
    return problems + ([bad] if bad else [])


def load_timelines(paths: Iterable[Path | str]) -> list[dict[str, Any]]:
    """Read ``Timeline.to_dict()`` JSON files (a file may also hold a list of them).

    Returns:
        validated timeline dicts in file order, each with ``source`` (the path) added.

    Warns:
        ResultsWarning: naming each unreadable or malformed file (or list item).
    """
    out = []
    for path, data, report in _json_files(paths):
        items = data if isinstance(data, list) else [data]
        for i, item in enumerate(items):
            problems = _timeline_problems(item)
            if problems:
                where = "" if len(items) == 1 else f"item {i}: "
                report(f"{where}invalid timeline ({'; '.join(problems)}); skipped")
                continue
            out.append({**item, "source": shown_path(path)})
    return out


def _json_files(paths: Iterable[Path | str]) -> Iterator[tuple[Path, Any, _FileProblems]]:
    """``(path, parsed JSON, its problem report)`` for each file that parses (NOTE [ hostile input
    files ]); the report stays open while the caller checks the data."""
    for path in map(Path, paths):
        with _FileProblems(path) as report:
            data = _read_json(path, report)
            if data is not _FAILED:
                yield path, data, report


def _figure(fig: Any, report: _FileProblems) -> dict[str, Any] | None:
    """A reproduction's figure spec, checked; None (reported) when it cannot be drawn.

    Values that are null or NaN in a series are drawn as gaps (NaN is reported).
    """
    if fig is None:
        return None
    problem = None
    if not isinstance(fig, dict):
        problem = "'figure' must be an object"
    elif fig.get("type") not in ("bar", "line"):
        problem = f"figure type {short_repr(fig.get('type'))} is not 'bar' or 'line'"
    elif not isinstance(fig.get("x"), list) or not isinstance(fig.get("series"), dict):
        problem = "figure needs a list 'x' and an object 'series'"
    elif not all(isinstance(v, str) or _is_number(v) for v in fig["x"]):
        problem = "figure 'x' values must be strings or finite numbers"
    else:
        bad = [k for k, v in fig["series"].items() if not isinstance(v, list) or len(v) != len(fig["x"])
               or not all(y is None or isinstance(y, float) and math.isnan(y) or _is_number(y) for y in v)]
        if bad:
            problem = f"figure series {short_repr(sorted(bad))} do not match x in length or hold non-numbers"
    if problem:
        report(f"{problem}; figure left out")
        return None
    gaps = sorted(k for k, v in fig["series"].items() if any(isinstance(y, float) for y in v if not _is_number(y)))
    if gaps:
        report(f"figure series {short_repr(gaps)} hold NaN values; drawn as gaps")
    text = {k: fig[k] if isinstance(fig.get(k), str) else "" for k in ("title", "x_label", "y_label")}
    return {"type": fig["type"], "x": fig["x"], **text, "log_x": fig.get("log_x") is True,
            "log_y": fig.get("log_y") is True,
            "series": {k: [y if _is_number(y) else None for y in v] for k, v in fig["series"].items()}}


def load_json_objects(paths: Iterable[Path | str], *,
                      not_object: str = "not a JSON object; skipped") -> list[tuple[Path, dict[str, Any]]]:
    """``(path, object)`` for each file that is one JSON object, read as defensively as every input
    (NOTE [ hostile input files ]); any other file is warned about (ResultsWarning, ``not_object``
    for valid JSON of another type) and left out."""
    out = []
    for path, data, report in _json_files(paths):
        if not isinstance(data, dict):
            report(not_object)
            continue
        out.append((path, data))
    return out


def load_reproductions(paths: Iterable[Path | str]) -> list[dict[str, Any]]:
    """Read seed-reproduction JSON files (see :mod:`memlab.reproductions` for the contract).

    Returns:
        validated dicts sorted by ``seed`` (the file stem when absent), with ``source`` added,
        ``figure`` checked (None when it cannot be drawn) and ``measurements`` replaced by a
        DataFrame of the valid ones (as :func:`load_runs` rows).  A second file with a seed
        already read is left out.

    Warns:
        ResultsWarning: naming each unreadable or malformed file, and each invalid measurement.
    """
    import pandas as pd

    out, seen = [], set()
    for path, data in load_json_objects(paths, not_object="a reproduction must be a JSON object; skipped"):
        with _FileProblems(path) as report:
            problems = [f"field {key!r} must be a string" for key in ("title", "claim", "summary")
                        if not isinstance(data.get(key), str)]
            if data.get("verdict") not in VERDICTS:
                problems.append(f"verdict {short_repr(data.get('verdict'))} is not one of {VERDICTS}")
            if not isinstance(data.get("measurements", []), list) or not isinstance(data.get("timelines", []), list):
                problems.append("'measurements' and 'timelines' must be lists")
            if problems:
                report(f"invalid reproduction ({'; '.join(problems)}); skipped")
                continue
            seed = data.get("seed") if isinstance(data.get("seed"), str) and data.get("seed") else shown_path(path.stem)
            if seed in seen:
                report(f"seed {seed!r} was already read from another file; skipped")
                continue
            seen.add(seed)
            rows = []
            for i, rec in enumerate(data.get("measurements", [])):
                bad = validate_measurement(rec)
                if bad:
                    report(f"measurement {i} invalid ({'; '.join(bad)}); left out")
                    continue
                rows.append(_row(rec, shown_path(path.stem), shown_path(path), i))
            timelines = []
            for i, t in enumerate(data.get("timelines", [])):
                bad = _timeline_problems(t)
                if bad:
                    report(f"timeline {i} invalid ({'; '.join(bad)}); left out")
                    continue
                timelines.append({**t, "source": shown_path(path)})
            env = data.get("environment")
            out.append({**data, "seed": seed, "source": shown_path(path), "timelines": timelines,
                        "quick": data.get("quick") is True, "figure": _figure(data.get("figure"), report),
                        "environment": env if isinstance(env, dict) else {},
                        "measurements": pd.DataFrame(rows, columns=list(RUN_COLUMNS))})
    return sorted(out, key=lambda d: d["seed"])
