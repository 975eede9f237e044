"""A sweep's progress line on stderr (with its ETA) and SIGTERM handled as Ctrl-C, for ``memlab sweep``.

The command line parses and calls; what a running sweep shows and how it stops cleanly lives here.
"""
from __future__ import annotations

import signal
import sys
import threading
import time

from .eta import Eta, size_of
from ..core.record import fmt_mib
from ..registry import get_technique

__all__ = ["Progress", "Terminated", "sigterm_as_interrupt", "sweep_eta"]


def sweep_eta(points, jobs: int) -> Eta:
    """An :class:`~memlab.sweep.eta.Eta` over the planned ``points`` (each sized by its workload's parameters)."""
    def describe(point):
        cls = get_technique(point.technique)
        return cls.workload.name, size_of(cls(**point.params).config, cls.workload.params)

    return Eta(points, describe, jobs)


class Progress:
    """A one-line progress bar on stderr (a line per item when stderr is not a terminal).

    Writing to a closed stderr stops the bar, never the sweep.
    """

    def __init__(self, stream=None, points=None, jobs: int = 1):
        self.stream = stream if stream is not None else sys.stderr
        # the ETA scales each remaining point by its size (memlab.sweep.eta); without the plan, the
        # mean time per finished point
        self.eta = sweep_eta(points, jobs) if points else None
        try:
            self.tty = self.stream.isatty()
        except (OSError, ValueError):
            self.tty = False
        self.started = None
        self.broken = False

    def __call__(self, done, total, point, m, seconds) -> None:
        if self.started is None:
            self.started = time.perf_counter()
        params = " ".join(f"{k}={v}" for k, v in sorted(point.params.items()))
        width = 20
        filled = int(width * done / max(total, 1))
        bar = "#" * filled + "-" * (width - filled)
        if m is None and done < total and seconds == 0.0:
            if self.tty:
                self._write("\r\033[K" + f"[{bar}] {done}/{total} measuring {point.technique} {params}")
            return
        elapsed = time.perf_counter() - self.started
        if self.eta is not None:
            self.eta.finished(point, seconds)
            eta = self.eta.seconds_left()
        else:
            eta = elapsed / done * (total - done) if done else 0
        result = "skipped" if m is None else (fmt_mib(m.peak_allocated_bytes) if m.status == "ok" else m.status.upper())
        left = f"{eta:.0f} s" if eta < 120 else f"{eta / 60:.0f} min"
        line = f"[{bar}] {done}/{total} {point.technique} {params}: {result} ({seconds:.1f} s, ETA {left})"
        self._write(("\r\033[K" if self.tty else "") + line + "\n")

    def _write(self, text: str) -> None:
        if self.broken:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.broken = True


class Terminated(KeyboardInterrupt):
    """SIGTERM during a sweep, raised like Ctrl-C so that the same clean-up runs."""


def sigterm_as_interrupt():
    """Make SIGTERM raise :class:`Terminated` in this (main) thread; returns the function that
    restores the previous handler.  A sweep's children lead their own sessions, so a ``kill`` of the
    sweep reaches none of them: without this the measurements went on, orphaned, after the sweep died."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)
