"""Safe file writes: atomic replacement, durable appends, and an exclusive writer's lock.

* :func:`write_text_atomic` -- a reader sees the old file or the new one, never half of one.
* :func:`append_line_durable` -- one line appended in one ``write(2)`` call and fsync'd; a failed
  write is cut back off, so the file never keeps half a line.
* :func:`lock_exclusive` -- a non-blocking ``flock`` on an open file; :class:`FileLocked` names the
  process that holds it.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import IO, Union

__all__ = ["write_text_atomic", "append_line_durable", "lock_exclusive", "FileLocked"]


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync it, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def append_line_durable(f: Union[int, IO], line: str) -> int:
    """Append one line (newline added) at the end of a file and push it to disk at once.

    The encoded line (UTF-8) goes out in one ``os.write`` call, so a concurrent reader never sees
    a line split by this process's buffering.  Should the kernel accept only part of it (a disk
    filling up), the rest is retried; if that, or the fsync, raises OSError, the file is truncated
    back to its size before the call and the error re-raised: the file ends with a complete line.

    Args:
        f: an open file descriptor, or a file object (flushed first, then written through its
            descriptor).  Its position must be at the end of the file (append mode, or only ever
            appended to).
        line: the text; a trailing newline is replaced by exactly one.

    Returns:
        bytes written.
    """
    if not isinstance(f, int):
        f.flush()
        f = f.fileno()
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    start = _end_offset(f)
    written = 0
    try:
        while written < len(data):
            written += os.write(f, data[written:])
        os.fsync(f)
    except OSError:
        if written and start is not None:
            _truncate_quietly(f, start)
        raise
    return written


def _end_offset(fd: int) -> int | None:
    """Size of the file in bytes (where the next append lands); None for a pipe or a terminal."""
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    except OSError:
        return None


def _truncate_quietly(fd: int, size: int) -> None:
    """Cut the file back to ``size`` bytes and fsync; failures are ignored (the caller is failing)."""
    try:
        os.ftruncate(fd, size)
        os.lseek(fd, size, os.SEEK_SET)
        os.fsync(fd)
    except OSError:
        pass


class FileLocked(Exception):
    """Another process holds the exclusive lock on ``path``; ``pid`` is that process (None: unknown)."""

    def __init__(self, path: str, pid: int | None):
        self.path, self.pid = path, pid
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(f"{path} is locked by another process ({holder})")


def lock_exclusive(fd: int, path: str) -> None:
    """Take an exclusive, non-blocking ``flock`` on the open file ``fd`` (held until it is closed).

    The lock is advisory: it stops every memlab writer of the same file (whatever path names it:
    a symlink or ``./`` spelling reach the same inode), not other programs.

    Raises:
        FileLocked: another open file holds the lock; its ``pid`` is read from ``/proc/locks``
            (Linux), else None.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise FileLocked(path, _flock_holder(fd)) from None


def _flock_holder(fd: int) -> int | None:
    """The pid holding a ``flock`` on ``fd``'s inode, from ``/proc/locks``; None when unknown.

    A line reads ``1: FLOCK  ADVISORY  WRITE 1234 fe:00:2146560 0 EOF``: pid, then the device's
    major:minor in hex and the inode number.  Lines with ``->`` are waiters, not holders.
    """
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    holders = [line.split() for line in lines]
    holders = [f for f in holders if len(f) >= 6 and f[1] == "FLOCK" and f[4].isdigit()]
    exact = [int(f[4]) for f in holders if f[5] == inode]
    # overlay file systems lock the inode underneath, whose device differs from what fstat says
    same_inode = {int(f[4]) for f in holders if f[5].rsplit(":", 1)[-1] == str(st.st_ino)}
    if exact:
        return exact[0]
    return same_inode.pop() if len(same_inode) == 1 else None
