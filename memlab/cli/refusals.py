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

from .names import builtin_index

__all__ = ["refusals", "time_refusals"]


def refusals() -> tuple[tuple[str, ...], ...]:
    """The bad input this benchmark times (argv tuples), each to be answered with exit status 2 before
    torch is imported: a misspelt technique, a truncated family, a misspelt and a malformed parameter,
    an unknown name beside a known one, a missing model file.

    The technique is a real one, taken from the name index at run time (no technique is named here:
    issue 42): the first, by name, of the first family, by name, with a parameter spelt with ``_``.

    Raises:
        ValueError: no built-in technique has such a parameter (the message names the families).
    """
    index = builtin_index()
    found = sorted((info.family, name, sorted(p for p in info.params or () if "_" in p)) for name, info in index.items())
    try:
        family, name, params = next(f for f in found if f[2])
    except StopIteration:
        raise ValueError(f"no built-in technique has a parameter spelt with '_' (families: "
                         f"{', '.join(sorted({f[0] for f in found})) or '(none)'})") from None
    param = params[0]
    return (
        ("measure", name.replace("_", "-")),
        ("sweep", "--family", family[:max(1, len(family) - 3)]),
        ("measure", name, "--param", f"{param.replace('_', '')}=1000"),
        ("measure", name, "--param", param, "1000"),
        ("check", name, "no_such_technique"),
        ("measure", "--model", "no_such_model.py"),
    )


def time_refusals(runs: int) -> str:
    """A table: each of :func:`refusals` run ``runs`` times as ``python -m memlab ...``, wall seconds
    from start to exit (median, min-max), its exit status and the start of its one line."""
    lines = [f"bad input refused by a fresh `python -m memlab` ({runs} run(s) each; wall seconds, median "
             f"[min-max]; a Python start alone: {_median_text(_wall(['-c', 'pass'], runs)[0])})"]
    for argv in refusals():
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
