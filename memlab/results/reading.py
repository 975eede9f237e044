"""Reading result files as hostile input: the one way every results reader opens a file.

A path is opened only when it is a regular file, at most :data:`MAX_FILE_BYTES` bytes are read, JSON
nesting is bounded (:data:`MAX_JSON_DEPTH`), a number outside float range parses as
:class:`OutOfRange`, JSON Lines are decoded line by line, and every problem is one
:class:`ResultsWarning` naming the file (and line): see NOTE [ hostile input files ].  Imports
neither torch nor pandas.
"""
from __future__ import annotations

import codecs
import errno
import itertools
import json
import math
import os
import re
import stat
import sys
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator

#: Deepest JSON nesting read (memlab writes at most 5 levels); deeper files are refused unparsed.
MAX_JSON_DEPTH = 64
#: Largest file read, in bytes.
MAX_FILE_BYTES = 256 * 2**20
#: Problems warned about one by one per file; the rest are counted in one more warning.
PROBLEMS_PER_FILE = 5


class ResultsWarning(UserWarning):
    """A results file (or one line of it) was malformed and skipped; the message names it."""


def warn_results(msg: str) -> None:
    warnings.warn(msg, ResultsWarning, stacklevel=3)


# NOTE [ hostile input files ]
# The site is built from whatever lies in results/ and data/, so every reader expects the worst:
# * A path is stat()ed first and only a regular file is opened: a FIFO would block for ever, a device
#   may never end.  It is then opened non-blocking and checked again with fstat (it may have been
#   swapped in between).  Dangling and looping symbolic links are named as such.  At most
#   MAX_FILE_BYTES are read.
# * JSON nesting is measured before parsing (json.loads recurses: 100,000 "[" raise RecursionError)
#   and a file nested deeper than MAX_JSON_DEPTH is refused unparsed.
# * A number outside float range (an integer of 400 digits, 1e999) parses as OutOfRange, which no
#   validator accepts.  NaN/Infinity are accepted only where a non-finite value means something:
#   asv's skipped benchmarks, and the error of a technique whose output is non-finite (shown as wrong).
# * JSON Lines are split on b"\n" and decoded line by line: one bad byte costs one line, not the file.
# * Every problem is one ResultsWarning naming the file (and line); after PROBLEMS_PER_FILE problems
#   in one file, one more warning counts the rest.  Paths are shown with undecodable bytes replaced
#   and control characters escaped, so each warning stays one printable line.
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
#: A JSON string (possessive: no backtracking on a long or unterminated one).
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
FAILED = object()  # a file that could not be read or parsed (JSON null is None)


class OutOfRange:
    """A JSON number outside float range: kept only to name it in a warning, never a valid value."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        shown = self.text if len(self.text) <= 12 else f"{self.text[:10]}... ({len(self.text)} digits)"
        return f"{shown}, outside float range"


def _parse_int(text: str) -> int | OutOfRange:
    if len(text) > 310:  # float's maximum has 309 digits; int() would also refuse > 4300
        return OutOfRange(text)
    value = int(text)
    return value if abs(value) <= sys.float_info.max else OutOfRange(text)


def _parse_float(text: str) -> float | OutOfRange:
    value = float(text)
    return value if math.isfinite(value) else OutOfRange(text)


def json_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings (no recursion, linear time)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    steps = map({"[": 1, "{": 1, "]": -1, "}": -1}.__getitem__, brackets)
    return max(itertools.accumulate(steps, initial=0))


def loads(text: str) -> Any:
    """JSON with bounded nesting and out-of-range numbers as :class:`OutOfRange`.

    Raises:
        ValueError: a one-line reason (nesting, syntax, size).
    """
    depth = json_depth(text)
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
    return CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr`` of a value, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class FileProblems:
    """The problems of one file: a warning each for the first :data:`PROBLEMS_PER_FILE`, then one count."""

    def __init__(self, path: Path):
        self.name, self.count = shown_path(path), 0

    def __call__(self, msg: str, line: int | None = None) -> None:
        self.count += 1
        if self.count <= PROBLEMS_PER_FILE:
            warn_results(f"{self.name}:{line}: {msg}" if line is not None else f"{self.name}: {msg}")

    def __enter__(self) -> "FileProblems":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.count > PROBLEMS_PER_FILE:
            warn_results(f"... and {self.count - PROBLEMS_PER_FILE} more problem(s) in {self.name}")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def stat_problem(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symbolic link loop; skipped"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return "dangling symbolic link (its target does not exist); skipped"
    return f"cannot read ({exc.strerror or exc}); skipped"


def _read_bytes(path: Path, report: FileProblems) -> bytes | None:
    """The bytes of a regular file; None (reported) for anything else, which is never opened."""
    try:
        st = os.stat(path)
    except OSError as exc:
        report(stat_problem(path, exc))
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


def read_json(path: Path, report: FileProblems) -> Any:
    """One JSON document, or :data:`FAILED` (reported)."""
    data = _read_bytes(path, report)
    if data is None:
        return FAILED
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        report(_utf8_problem(data, exc, line_start) + "; file skipped", data.count(b"\n", 0, exc.start) + 1)
        return FAILED
    try:
        return loads(text)
    except ValueError as exc:
        report(f"{exc}; skipped")
        return FAILED


def read_jsonl(path: Path, report: FileProblems) -> Iterator[tuple[int, Any]]:
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
            yield number, loads(line)
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
        warn_results(f"{shown_path(folder)}: cannot list this folder ({exc.strerror or exc}); its files are left out")
        return []
    return [folder / n for n in sorted(names) if n.endswith(suffix)]


def bad_numbers(value: Any, where: str) -> Iterator[str]:
    """A problem for each number outside float range or NaN/Infinity inside ``value`` (at ``where``)."""
    if isinstance(value, OutOfRange) or (isinstance(value, float) and not math.isfinite(value)):
        yield f"field {where!r} must be a finite number, got {value!r}"
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from bad_numbers(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from bad_numbers(v, f"{where}[{i}]")


def json_files(paths: Iterable[Path | str]) -> Iterator[tuple[Path, Any, FileProblems]]:
    """``(path, parsed JSON, its problem report)`` for each file that parses (NOTE [ hostile input
    files ]); the report stays open while the caller checks the data."""
    for path in map(Path, paths):
        with FileProblems(path) as report:
            data = read_json(path, report)
            if data is not FAILED:
                yield path, data, report


def load_json_objects(paths: Iterable[Path | str], *,
                      not_object: str = "not a JSON object; skipped") -> list[tuple[Path, dict[str, Any]]]:
    """``(path, object)`` for each file that is one JSON object, read as defensively as every input
    (NOTE [ hostile input files ]); any other file is warned about (ResultsWarning, ``not_object``
    for valid JSON of another type) and left out."""
    out = []
    for path, data, report in json_files(paths):
        if not isinstance(data, dict):
            report(not_object)
            continue
        out.append((path, data))
    return out
