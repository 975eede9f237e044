"""What a sharded sweep prints: a progress line per finished run (with its ETA), the table of its runs,
and the count of runs by outcome.  Reads rank rows only (bytes as ints), no torch."""
from __future__ import annotations

from typing import Any, Iterable

from ..sharding.sweep_plan import run_key

__all__ = ["Eta", "by_run", "run_summary", "progress_line", "format_table", "outcome_counts"]


class Eta:
    """Seconds a sharded sweep has left: each run costs about its world size N (N processes start,
    each runs the reference and the step), so the seconds per rank of the finished runs times the
    ranks of those left.  An estimate for a progress line, never a published figure."""

    def __init__(self, runs: Iterable[Any]):
        self.left = {r.key(): r.world for r in runs}
        self.ranks_done, self.seconds = 0, 0.0

    def finished(self, run: Any, seconds: float) -> float:
        """Record ``run`` as finished after ``seconds``; the seconds left."""
        self.ranks_done += self.left.pop(run.key(), run.world)
        self.seconds += max(0.0, float(seconds))
        return self.seconds / max(self.ranks_done, 1) * sum(self.left.values())


def run_summary(rows: list[dict]) -> dict[str, Any]:
    """One run's rank rows as one line of the table: its key, the per-rank peak's smallest and largest
    (bytes), how many ranks, and whether every rank matched the single-process reference."""
    peaks = [int(r["peak_bytes"]) for r in rows]
    model, strategy, world, batch, checkpointed = run_key(rows[0])
    return {"model": model, "strategy": strategy + ("+ckpt" if checkpointed else ""), "world": world,
            "batch_per_rank": batch // world,
            "peak_min": min(peaks), "peak_max": max(peaks), "ranks": len(rows),
            "matches": all(r.get("matches") is True for r in rows), "machine": rows[0].get("machine")}


def by_run(rows: Iterable[dict]) -> dict[tuple, list[dict]]:
    """Rank rows grouped by their run (:func:`~memlab.sharding.sweep_plan.run_key`), in first-seen order."""
    runs: dict[tuple, list[dict]] = {}
    for r in rows:
        runs.setdefault(run_key(r), []).append(r)
    return runs


def _peaks(s: dict[str, Any]) -> str:
    return f"{s['peak_min']:,}" if s["peak_min"] == s["peak_max"] else f"{s['peak_min']:,}..{s['peak_max']:,}"


def _left(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def progress_line(done: int, total: int, run: Any, rows: list[dict] | None, error: str | None, seconds: float,
                  eta: float) -> str:
    """``[k/n] mlp ddp N=2 (G=16): peak 401,234..401,298 B, ok (3.2 s, ETA 20 s)``; a failed run names
    its error."""
    head = f"[{done}/{total}] {run.model} {run.label}{'+ckpt' if run.checkpoint_blocks else ''} N={run.world} (G={run.batch})"
    if rows is None:
        return f"{head}: FAILED: {error} ({seconds:.1f} s, ETA {_left(eta)})"
    s = run_summary(rows)
    check = "ok" if s["matches"] else "MISMATCH"
    return f"{head}: peak {_peaks(s)} B, {check} ({seconds:.1f} s, ETA {_left(eta)})"


def format_table(rows: list[dict]) -> str:
    """The runs of ``rows`` (rank rows of any number of runs), one line each in first-seen order:
    model, strategy, N, per-rank batch, the per-rank peak's range (bytes), ranks, the reference check,
    and the machine."""
    lines = [run_summary(rs) for rs in by_run(rows).values()]
    head = ("model", "strategy", "N", "batch/rank", "per-rank peak (B) min..max", "ranks", "check", "machine")
    cells = [[s["model"], s["strategy"], str(s["world"]), str(s["batch_per_rank"]), _peaks(s), str(s["ranks"]),
              "ok" if s["matches"] else "MISMATCH", str(s["machine"])] for s in lines]
    width = [max(len(c[i]) for c in [list(head), *cells]) for i in range(len(head))]
    right = {2, 3, 4, 5}
    return "\n".join("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, width))).rstrip()
                     for row in [list(head), *cells])


def outcome_counts(rows: list[dict], failed: int, planned: int) -> str:
    """``8 of 8 runs: 8 ok`` (``MISMATCH``: a rank's step differed from the reference; ``failed``:
    the run raised, no row written)."""
    runs = by_run(rows)
    ok = sum(all(r.get("matches") is True for r in rs) for rs in runs.values())
    parts = [f"{ok} ok"] + ([f"{len(runs) - ok} MISMATCH"] if len(runs) > ok else []) + \
        ([f"{failed} failed"] if failed else [])
    return f"{len(runs) + failed} of {planned} runs: " + ", ".join(parts)
