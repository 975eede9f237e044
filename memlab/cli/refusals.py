"""How long bad input takes to be refused: ``make bench-cli`` (``python -m memlab.cli.refusals [RUNS]``).

A benchmark, not a test: it prints wall seconds per case (a fresh ``python -m memlab`` each run, Python's
own start included and printed for scale); the tests assert what matters instead, that each refusal
happens before torch is imported (``tests/test_cli_fast.py``).
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

__all__ = ["REFUSALS", "time_refusals"]

#: bad input this benchmark times: each must be answered with exit status 2 before torch is imported
REFUSALS = (
    ("measure", "slice-loop"),
    ("sweep", "--family", "chunk"),
    ("measure", "slice_loop", "--param", "chunksize=1000"),
    ("measure", "slice_loop", "--param", "chunk_size", "1000"),
    ("check", "slice_loop", "no_such_technique"),
    ("measure", "--model", "no_such_model.py"),
)


def time_refusals(runs: int) -> str:
    """A table: each of :data:`REFUSALS` run ``runs`` times as ``python -m memlab ...``, wall seconds
    from start to exit (median, min-max), its exit status and the start of its one line."""
    lines = [f"bad input refused by a fresh `python -m memlab` ({runs} run(s) each; wall seconds, median "
             f"[min-max]; a Python start alone: {_median_text(_wall(['-c', 'pass'], runs)[0])})"]
    for argv in REFUSALS:
        times, code, err = _wall(["-m", "memlab", *argv], runs)
        message = err.strip().splitlines()[0] if err.strip() else ""
        lines.append(f"  memlab {' '.join(argv):<48} {_median_text(times)}  exit {code}  "
                     f"{message[:90]}{'...' if len(message) > 90 else ''}")
    return "\n".join(lines)


def _wall(args: list[str], runs: int) -> tuple[list[float], int, str]:
    times, code, err = [], 0, ""
    for _ in range(runs):
        started = time.perf_counter()
        p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600)
        times.append(time.perf_counter() - started)
        code, err = p.returncode, p.stderr
    return times, code, err


def _median_text(times: list[float]) -> str:
    return f"{statistics.median(times):.2f} s [{min(times):.2f}-{max(times):.2f}]"


if __name__ == "__main__":
    print(time_refusals(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
