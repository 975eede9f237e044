"""The sweep's output file: locked, one whole fsync'd row at a time, torn tails cut, never a complete
line removed (NOTE [ sweep output ]); and reading a sweep file back."""
from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from ..core.atomic import FileLocked, append_line_durable, lock_exclusive
from ..core.record import Measurement
from ..results import sweep_records
from ..sharding.sweep_plan import is_sharded_row

__all__ = ["SweepOutput", "open_sweep_output", "SweepOutputBusy", "SweepWriteFailed", "read_jsonl", "torn_tail",
           "say", "sharded_rows"]

# NOTE [ sweep output ]
# A sweep's --out file is only ever written by the sweep that holds its lock, one whole row at a time:
# * open_sweep_output opens the file without truncating it, takes a non-blocking flock on it (a second
#   sweep on the same file is refused, naming the holder's pid) and only then truncates it (a fresh
#   run) or repairs its tail (--append / --resume);
# * a torn last line (a killed run, a full disk: no final newline and not a whole JSON object) is
#   reported as FILE:LINE and cut off, so its point counts as not measured and is measured again.
#   A complete line (it ends with its newline: one write(2) put it there whole) is never removed: a
#   last one that is not a row (not UTF-8, not JSON) is reported as FILE:LINE and kept, and --resume
#   counts its point as not measured, like an unreadable line elsewhere;
# * --out that is a symbolic link to an existing file that is not a memlab sweep file (empty, or
#   its first line a row memlab.results reads) is refused: it would replace or extend that file;
# * a fresh run (neither --append nor --resume) over a file that holds measured rows (rows
#   memlab.results reads) is refused unless --force: nothing measured is replaced by accident;
# * each row is one write(2) call plus fsync (memlab.core.atomic.append_line_durable); a write that fails
#   half-way is cut back off, so after any OSError the file still ends with a complete row and the
#   sweep stops with SweepWriteFailed ("disk full writing FILE after N rows; rerun with --resume").



def say(text: str) -> None:
    """One line to stderr; a closed stderr is ignored (the sweep goes on without its messages)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def read_jsonl(path: str | os.PathLike, warn: Callable[[str], None] | None = None) -> list[Measurement]:
    """Measurements from a JSON Lines file.

    A line that is not UTF-8, not JSON (or nested too deeply) or not a Measurement is skipped with
    a warning ``FILE:LINE: skipped unreadable measurement (reason)``; the other lines are kept.
    """
    out = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                out.append(Measurement.from_dict(json.loads(raw.decode("utf-8"))))
            except (ValueError, TypeError, RecursionError) as exc:
                if warn is not None:
                    warn(f"{path}:{lineno}: skipped unreadable measurement ({str(exc)[:120]})")
    return out



class SweepOutputBusy(Exception):
    """Another sweep holds the output file's lock; the message is the one line to show."""


class SweepWriteFailed(Exception):
    """A row could not be written (disk full, I/O error); the file still ends with a whole row.

    Attributes: ``path``, ``rows`` (rows this sweep wrote before the failure), ``cause`` (the OSError).
    """

    def __init__(self, path: str, rows: int, cause: OSError):
        self.path, self.rows, self.cause = path, rows, cause
        reason = "disk full" if cause.errno == errno.ENOSPC else (cause.strerror or str(cause))
        super().__init__(f"{reason} writing {path} after {rows} row{'' if rows == 1 else 's'}; rerun with --resume")


class SweepOutput:
    """A sweep's JSON Lines file, opened by :func:`open_sweep_output` and locked until :meth:`close`.

    ``rows_written``: rows this sweep appended.  Use as a context manager.
    """

    def __init__(self, path: str, fd: int):
        self.path, self._fd, self.rows_written = path, fd, 0

    def append(self, m: Measurement) -> None:
        """Append ``m`` as one line, fsync'd.  Raises :class:`SweepWriteFailed` on any OSError."""
        try:
            append_line_durable(self._fd, m.to_json())
        except OSError as exc:
            raise SweepWriteFailed(self.path, self.rows_written, exc) from None
        self.rows_written += 1

    def append_row(self, row: dict[str, Any]) -> None:
        """Append ``row`` (a JSON-ready dict: a sharded sweep's rank row) as one line, fsync'd.  Raises
        :class:`SweepWriteFailed` on any OSError."""
        try:
            append_line_durable(self._fd, json.dumps(row))
        except OSError as exc:
            raise SweepWriteFailed(self.path, self.rows_written, exc) from None
        self.rows_written += 1

    def close(self) -> None:
        """Close the file, which releases the lock.  Closing twice is a no-op."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "SweepOutput":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_sweep_output(path: str | os.PathLike, *, append: bool, replace: bool = False,
                      warn: Callable[[str], None] | None = None) -> SweepOutput:
    """Open ``path`` for a sweep, exclusively: locked, then emptied (``append=False``) or repaired.

    Emptying a file that holds measured rows needs ``replace`` (``--force``); without it the file
    is left as it was and ValueError says how to keep it (``--append``, ``--resume``).

    With ``append`` the rows already there are kept, and a torn last line is cut off with one
    line to ``warn`` naming ``FILE:LINE`` (a complete last line that is not a row is kept and
    reported; see NOTE [ sweep output ]).  Folders above ``path`` are created.  Nothing is
    written or truncated unless the lock was taken.

    Raises:
        ValueError: ``path`` is a directory or not a regular file, a symbolic link to an existing
            file that is not a memlab sweep file, holds measured rows and neither ``append`` nor
            ``replace`` was given, or cannot be opened for writing (the message names the path and
            the system's reason).
        SweepOutputBusy: another sweep holds the lock (the message names its pid).
    """
    path = str(path)
    warn = warn or say
    if os.path.isdir(path):
        raise ValueError(f"--out {path} is a directory; give a file path such as {os.path.join(path, 'sweep.jsonl')}")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ValueError(f"--out {path} is not a regular file; give a file path such as sweep.jsonl")
    if os.path.islink(path) and os.path.exists(path) and not _is_sweep_file(path):
        raise ValueError(f"--out {path} is a symbolic link to {os.path.realpath(path)}, which is not a memlab "
                         f"sweep file; refused rather than {'appended to' if append else 'replaced'}: give "
                         f"another --out")
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ValueError(f"cannot write --out {path}: {exc.strerror or exc}") from None
    try:
        lock_exclusive(fd, path)
        if append:
            _cut_torn_tail(fd, path, warn)
        else:
            _refuse_to_replace(fd, path, replace)
            os.ftruncate(fd, 0)
    except FileLocked as exc:
        os.close(fd)
        holder = f"pid {exc.pid}" if exc.pid is not None else "pid unknown"
        raise SweepOutputBusy(f"{path} is being written by another sweep ({holder}); "
                              f"wait for it or use another --out") from None
    except OSError as exc:
        os.close(fd)
        raise ValueError(f"cannot write --out {path}: {exc.strerror or exc}") from None
    except ValueError:
        os.close(fd)
        raise
    return SweepOutput(path, fd)


def _refuse_to_replace(fd: int, path: str, replace: bool) -> None:
    """ValueError (one line: how to keep the rows) when the locked file ``fd`` holds measured rows and
    ``replace`` was not asked for (NOTE [ sweep output ])."""
    if replace or not os.fstat(fd).st_size:
        return

    rows = sum(1 for _ in sweep_records(path, lambda _msg: None)) + len(sharded_rows(path))
    if rows:
        raise ValueError(f"--out {path} holds {rows} measured row{'' if rows == 1 else 's'}; give --resume to "
                         f"continue it, --append to add to it, or --force to replace it")


def sharded_rows(path: str | os.PathLike, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The rank rows of a sharded sweep (:func:`memlab.sharding.sweep_plan.is_sharded_row`) in the file at
    ``path``, in file order; a line that is not JSON is one call ``warn("FILE:LINE: ...")`` and left out,
    as is a row of another kind."""
    with open(path, "rb") as f:
        lines = [(lineno, raw) for lineno, raw in enumerate(f, 1) if raw.strip()]
    rows = []
    for lineno, raw in lines:
        try:
            row = json.loads(raw)
        except (ValueError, RecursionError):  # not UTF-8 is a ValueError too
            if warn is not None:
                warn(f"{path}:{lineno}: not a JSON row; skipped")
            continue
        if is_sharded_row(row):
            rows.append(row)
    return rows


def _is_sweep_file(path: str) -> bool:
    """True for an empty file or one whose first non-blank line is a row the site reads, or a sharded
    sweep's row."""
    if sharded_rows(path)[:1]:
        return True
    problems: list[str] = []
    next(sweep_records(path, problems.append), None)  # a bad first line is reported before any row
    return not problems


def _cut_torn_tail(fd: int, path: str, warn: Callable[[str], None]) -> None:
    """Truncate an incomplete last line off the open file ``fd``, with one warning naming FILE:LINE;
    a complete last line that is not a row is kept, with one warning naming FILE:LINE."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0) if size else b""
    torn = torn_tail(data)
    if torn is None:
        if data and not data.endswith(b"\n"):  # a whole row that lacks only its newline: keep it
            append_line_durable(fd, "")
        elif data:
            _report_unreadable_last_line(data, path, warn)
        return
    offset, lineno = torn
    os.ftruncate(fd, offset)
    os.fsync(fd)
    warn(f"memlab: warning: {path}:{lineno}: incomplete last line ({len(data) - offset} bytes) removed; "
         f"its point will be measured again")


def _report_unreadable_last_line(data: bytes, path: str, warn: Callable[[str], None]) -> None:
    """Warn (naming FILE:LINE) when the complete last line of ``data`` is neither blank nor JSON."""
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    last = data[start:-1]
    if not last.strip() or _json_kind(last) is not None:
        return
    try:
        last.decode("utf-8")
        why = "not JSON"
    except UnicodeDecodeError:
        why = "not UTF-8"
    lineno = data.count(b"\n", 0, start) + 1
    warn(f"memlab: warning: {path}:{lineno}: last line is complete but {why}; kept "
         f"(only a torn line, one without its newline, is removed)")


def torn_tail(data: bytes) -> tuple[int, int] | None:
    """``(byte offset, line number)`` of a torn last line of JSON Lines ``data``; None if whole.

    Torn: the last line lacks its newline and is not a whole JSON object.  A line that ends with
    its newline is complete, whatever it holds, and never torn.
    """
    if not data or data.endswith(b"\n"):
        return None
    start = data.rfind(b"\n") + 1
    if _json_kind(data[start:]) == "object":
        return None
    return start, data.count(b"\n", 0, start) + 1


def _json_kind(raw: bytes) -> str | None:
    """``'object'`` or ``'other'`` for valid JSON in ``raw`` (UTF-8); None when it is not valid JSON."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return "object" if isinstance(value, dict) else "other"
