"""Sweeps never lose a row: the --out lock, torn lines, a full disk, a closed stdout, exit status.

Most tests run ``memlab.cli.main`` in process with ``memlab.sweep.measure`` replaced by a fake that
returns a row at once (status chosen per point), so only the file handling is exercised; two run
the real CLI in a subprocess whose stdout (and stderr) is closed before it starts measuring.
"""
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import memlab
import memlab.core.atomic
import memlab.sweep.run
from memlab.core.atomic import append_line_durable
from memlab.cli import main
from memlab.core.record import Measurement
from memlab.sweep import SweepOutputBusy, open_sweep_output
from process_checks import HANG_GUARD_S

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

HELPERS = Path(__file__).parent / "plugins" / "sweep_helpers.py"
SWEEP = ["sweep", "--plugin", str(HELPERS), "--technique", "sweep_tiny_right", "--iterations", "1", "--repeats", "1"]
ROOT = Path(__file__).resolve().parents[1]


def _row(name: str, n: int, status: str = "ok") -> Measurement:
    return Measurement(technique=name, workload="sweep_tiny", family="sweep_testing", params={"n": n},
                       device="cpu", dtype="float32", mode="train", status=status,
                       error=None if status == "ok" else f"fake {status}", peak_allocated_bytes=64,
                       allocated_after_step_bytes=(0, 0, 0))  # three steps: fewer read leak unknown


@pytest.fixture
def fake(monkeypatch):
    """Replace measurement by a fake; ``fake.statuses[n]`` picks a point's status, ``fake.calls`` logs them."""
    memlab.load_plugin(HELPERS)

    class Fake:
        statuses: dict[int, str] = {}
        calls: list[int] = []

        def __call__(self, name, *, device, dtype, mode, **kw):
            n = kw["n"]
            self.calls.append(n)
            return _row(name, n, self.statuses.get(n, "ok"))

    f = Fake()
    f.statuses, f.calls = {}, []
    monkeypatch.setattr(memlab.sweep.run, "measure", f)
    return f


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _ns(path: Path) -> list[int]:
    """The ``n`` of every row; fails if any line is not a whole Measurement."""
    return [Measurement.from_dict(json.loads(line)).params["n"] for line in _lines(path)]


def _memlab_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("memlab:")]


# -- the lock --------------------------------------------------------------------------------------
HOLD_LOCK = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
             "fcntl.flock(fd, fcntl.LOCK_EX)\n"
             "print('locked', flush=True)\n"
             "sys.stdin.read()\n")


def test_second_sweep_refuses_a_locked_file_naming_the_holder_pid(fake, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    out.write_bytes(b"rows of the first sweep\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        assert main([*SWEEP, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.strip() == (f"memlab: error: {out} is being written by another sweep (pid {holder.pid}); "
                               f"wait for it or use another --out")
        assert out.read_bytes() == b"rows of the first sweep\n"  # not truncated, nothing appended
        assert fake.calls == []
    finally:
        holder.stdin.close()
        holder.wait(timeout=HANG_GUARD_S)
    assert main([*SWEEP, "--out", str(out)]) == 0  # the holder is gone, so is its lock
    assert _ns(out) == [2, 3, 4]


def test_one_file_under_two_names_is_still_one_lock(tmp_path):
    real = tmp_path / "real.jsonl"
    link = tmp_path / "link.jsonl"
    with open_sweep_output(real, append=False) as first:
        link.symlink_to(real)
        with pytest.raises(SweepOutputBusy, match=rf"\(pid {os.getpid()}\); wait for it or use another --out"):
            open_sweep_output(link, append=True)
        first.append(_row("sweep_tiny_right", 2))
    with open_sweep_output(link, append=True) as second:  # released on close
        second.append(_row("sweep_tiny_right", 3))
    assert _ns(real) == [2, 3]


# -- torn and corrupt lines ------------------------------------------------------------------------
@pytest.mark.parametrize("fragment", [b'{"technique": "sweep_tiny_right", "wo', b'\xff\xfe{"techn'],
                         ids=["no-newline", "no-newline-not-utf8"])
@pytest.mark.parametrize("flag", ["--resume", "--append"])
def test_torn_last_line_is_cut_with_a_warning_and_measured_again(fake, tmp_path, capsys, fragment, flag):
    out = tmp_path / "torn.jsonl"
    whole = "".join(_row("sweep_tiny_right", n).to_json() + "\n" for n in (2, 3)).encode()
    out.write_bytes(whole + fragment)
    assert main([*SWEEP, "--out", str(out), flag]) == 0
    err = capsys.readouterr().err
    assert f"memlab: warning: {out}:3: incomplete last line ({len(fragment)} bytes) removed" in err
    assert fake.calls == ([4] if flag == "--resume" else [2, 3, 4])
    assert out.read_bytes().startswith(whole)
    assert _ns(out) == ([2, 3, 4] if flag == "--resume" else [2, 3, 2, 3, 4])


@pytest.mark.parametrize("last, why", [(b'{"technique": "sweep_ti\n', "not JSON"),
                                       (b'\xff\xfe{"technique": 1}\n', "not UTF-8")], ids=["not-json", "not-utf8"])
@pytest.mark.parametrize("flag", ["--resume", "--append"])
def test_complete_last_line_is_never_cut(fake, tmp_path, capsys, last, why, flag):
    """A last line that ends with its newline was written whole: kept, reported as FILE:LINE, and its
    point (unknown: it cannot be read) counts as not measured."""
    out = tmp_path / "complete.jsonl"
    whole = "".join(_row("sweep_tiny_right", n).to_json() + "\n" for n in (2, 3)).encode()
    out.write_bytes(whole + last)
    assert main([*SWEEP, "--out", str(out), flag]) == 0
    err = capsys.readouterr().err
    assert f"memlab: warning: {out}:3: last line is complete but {why}; kept" in err
    assert "incomplete last line" not in err
    if flag == "--resume":
        assert f"memlab: warning: {out}:3: " in err.split("kept", 1)[1]  # and not counted as measured
    assert fake.calls == ([4] if flag == "--resume" else [2, 3, 4])
    lines = _lines(out)
    assert b"".join(lines[:3]) == whole + last and len(lines) == (4 if flag == "--resume" else 6)


def test_corrupt_middle_line_is_reported_and_kept(fake, tmp_path, capsys):
    out = tmp_path / "mid.jsonl"
    garbage = b"\xff\xfe not json at all\n"
    out.write_bytes(_row("sweep_tiny_right", 2).to_json().encode() + b"\n" + garbage
                    + _row("sweep_tiny_right", 3).to_json().encode() + b"\n")
    assert main([*SWEEP, "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"memlab: warning: {out}:2: not UTF-8 (byte 0xff at column 1); line skipped; not counted as measured" \
        in err.splitlines() and "incomplete last line" not in err
    assert fake.calls == [4]
    lines = _lines(out)
    assert len(lines) == 4 and lines[1] == garbage


def test_whole_row_lacking_only_its_newline_is_kept(fake, tmp_path, capsys):
    out = tmp_path / "nonl.jsonl"
    out.write_text(_row("sweep_tiny_right", 2).to_json())
    assert main([*SWEEP, "--out", str(out), "--resume"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert fake.calls == [3, 4] and _ns(out) == [2, 3, 4]


def _bad_figures(row: Measurement, figures: str) -> str:
    """``row`` as a JSON line whose figures the site refuses (an ``ok`` status it does not deserve)."""
    d = row.to_dict()
    if figures == "nan-peak":
        d["peak_allocated_bytes"] = float("nan")
    elif figures == "negative-peak":
        d["peak_allocated_bytes"] = -64
    elif figures == "text-peak":
        d["peak_allocated_bytes"] = "64"
    else:  # one tensor's error beyond its tolerance (rtol=1e-9, atol=1e-9), yet status ok
        d.update(max_abs_error=1e-3, max_rel_error=1e-3, tolerance=[1e-9, 1e-9], matches_reference=True,
                 errors_by_tensor={"output": 1e-3, "grad:w": 0.0})
    return json.dumps(d)


@pytest.mark.parametrize("figures", ["nan-peak", "negative-peak", "text-peak", "error-beyond-tolerance"])
def test_resume_measures_an_ok_row_with_invalid_figures_again(fake, tmp_path, capsys, figures):
    out = tmp_path / "bad.jsonl"
    bad = _bad_figures(_row("sweep_tiny_right", 3), figures)
    out.write_text(_row("sweep_tiny_right", 2).to_json() + "\n" + bad + "\n")
    assert main([*SWEEP, "--out", str(out), "--resume"]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("memlab: warning: ")]
    assert len(warned) == 1 and warned[0].startswith(f"memlab: warning: {out}:2: invalid measurement (")
    assert warned[0].endswith("; skipped; not counted as measured")
    assert fake.calls == [3, 4]
    assert _lines(out)[1] == (bad + "\n").encode()  # the bad row stays; the new one follows


# -- writes: one call per row, a full disk -------------------------------------------------------
class _Disk:
    """Stands in for ``os`` inside memlab.core.atomic: ``write`` stores at most ``room`` more bytes, then
    raises OSError(``code``); with ``fail='fsync'`` every fsync raises instead."""

    def __init__(self, room=None, code=errno.ENOSPC, fail="write"):
        self.room, self.code, self.fail, self.writes = room, code, fail, 0

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        self.writes += 1
        if self.room is not None and self.room <= 0:
            raise OSError(self.code, os.strerror(self.code))
        n = os.write(fd, bytes(data) if self.room is None else bytes(data[:self.room]))
        if self.room is not None:
            self.room -= n
        return n

    def fsync(self, fd):
        if self.fail == "fsync":
            raise OSError(self.code, os.strerror(self.code))
        os.fsync(fd)


def test_append_line_durable_writes_each_row_in_one_call(tmp_path, monkeypatch):
    disk = _Disk()
    monkeypatch.setattr(memlab.core.atomic, "os", disk)
    fd = os.open(tmp_path / "a.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        sizes = [append_line_durable(fd, line) for line in ('{"a": 1}', '{"b": "é"}\n', "{}")]
    finally:
        os.close(fd)
    assert disk.writes == 3 and sizes == [9, 12, 3]
    assert (tmp_path / "a.jsonl").read_text(encoding="utf-8") == '{"a": 1}\n{"b": "é"}\n{}\n'


ROW_BYTES = len(_row("sweep_tiny_right", 2).to_json()) + 1


@pytest.mark.parametrize("disk, message, rows", [
    (_Disk(room=ROW_BYTES + ROW_BYTES // 2), "disk full writing {out} after 1 row; rerun with --resume", 1),
    (_Disk(room=0, code=errno.EIO), "Input/output error writing {out} after 0 rows; rerun with --resume", 0),
    (_Disk(code=errno.ENOSPC, fail="fsync"), "disk full writing {out} after 0 rows; rerun with --resume", 0),
], ids=["enospc-mid-row", "eio", "enospc-at-fsync"])
def test_write_failure_is_one_line_exit_1_and_the_file_stays_whole(fake, tmp_path, capsys, monkeypatch,
                                                                    disk, message, rows):
    out = tmp_path / "full.jsonl"
    monkeypatch.setattr(memlab.core.atomic, "os", disk)
    assert main([*SWEEP, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert _memlab_lines(err) == ["memlab: " + message.format(out=out)]
    assert "Traceback" not in err
    assert _ns(out) == [2, 3, 4][:rows]
    assert out.read_bytes().endswith(b"\n") or out.stat().st_size == 0
    monkeypatch.setattr(memlab.core.atomic, "os", os)  # space again: --resume finishes the sweep
    assert main([*SWEEP, "--out", str(out), "--resume"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert _ns(out) == [2, 3, 4]


# -- exit status, summary, bad --out ---------------------------------------------------------------
@pytest.mark.parametrize("statuses, code, summary", [
    ({}, 0, "memlab: 3 points: 3 ok"),
    ({3: "mismatch", 4: "error"}, 1, "memlab: 3 points: 1 ok, 1 mismatch, 1 error"),
    ({2: "leak"}, 1, "memlab: 3 points: 2 ok, 1 leak"),
])
def test_exit_status_and_count_per_status(fake, tmp_path, capsys, statuses, code, summary):
    out = tmp_path / "s.jsonl"
    fake.statuses = statuses
    assert main([*SWEEP, "--out", str(out)]) == code
    captured = capsys.readouterr()
    assert _memlab_lines(captured.err)[-1] == summary
    assert "wrote 3 measurement(s)" in captured.out
    assert [Measurement.from_json(line).status for line in _lines(out)] == [statuses.get(n, "ok") for n in (2, 3, 4)]


def _bad_out(tmp_path, kind):
    if kind == "directory":
        return tmp_path, "is a directory; give a file path such as"
    if kind == "under-a-file":
        (tmp_path / "plain").write_text("")
        return tmp_path / "plain" / "x.jsonl", "cannot write --out"
    os.mkfifo(tmp_path / "fifo.jsonl")
    return tmp_path / "fifo.jsonl", "is not a regular file"


@pytest.mark.parametrize("kind", ["directory", "under-a-file", "fifo"])
def test_bad_out_is_one_line_exit_2(fake, tmp_path, capsys, kind):
    path, words = _bad_out(tmp_path, kind)
    assert main([*SWEEP, "--out", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("memlab: error: ") and str(path) in err and words in err
    assert fake.calls == []


@pytest.mark.parametrize("flag", [None, "--append", "--resume"])
def test_out_symlinked_to_a_file_that_is_not_a_sweep_is_refused(fake, tmp_path, capsys, flag):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a sweep\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(notes)
    assert main([*SWEEP, "--out", str(link), *([flag] if flag else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"memlab: error: --out {link} is a symbolic link to {notes}, which is not a memlab sweep file; "
                   f"refused rather than {'replaced' if flag is None else 'appended to'}: give another --out")
    assert notes.read_text() == "my notes, not a sweep\n" and fake.calls == []


@pytest.mark.parametrize("target", ["sweep", "empty", "missing"])
def test_out_symlinked_to_a_sweep_an_empty_or_no_file_is_used(fake, tmp_path, capsys, target):
    real = tmp_path / "real.jsonl"
    if target == "sweep":
        real.write_text(_row("sweep_tiny_right", 2).to_json() + "\n")
    elif target == "empty":
        real.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert main([*SWEEP, "--out", str(link), "--resume"]) == 0
    assert "error" not in capsys.readouterr().err
    assert _ns(real) == [2, 3, 4] and link.is_symlink()


# -- a reader that goes away ------------------------------------------------------------------------
@pytest.mark.parametrize("technique, close_stderr, code, summary", [
    ("sweep_tiny_right", False, 0, "memlab: 3 points: 3 leak unknown"),  # one measured step: NOTE [ verdicts ]
    ("sweep_tiny_fails", True, 1, None),
], ids=["stdout-closed", "stdout-and-stderr-closed"])
def test_closed_stdout_never_stops_the_sweep(tmp_path, technique, close_stderr, code, summary):
    out, err_file = tmp_path / "piped.jsonl", tmp_path / "stderr.txt"
    argv = [sys.executable, "-m", "memlab", "sweep", "--plugin", str(HELPERS), "--technique", technique,
            "--in-process", "--iterations", "1", "--repeats", "1", "--out", str(out)]
    with open(err_file, "wb") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE if close_stderr else err)
        proc.stdout.close()  # like `| head -1` having read its line and gone
        if close_stderr:
            proc.stderr.close()
        assert proc.wait(timeout=HANG_GUARD_S) == code
    assert _ns(out) == [2, 3, 4]
    assert {Measurement.from_json(line).status for line in _lines(out)} == {"ok" if code == 0 else "error"}
    if summary:
        text = err_file.read_text()
        assert _memlab_lines(text)[-1] == summary
        assert "Traceback" not in text and "Exception ignored" not in text and "BrokenPipe" not in text
