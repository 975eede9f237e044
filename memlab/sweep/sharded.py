"""``memlab sweep --shard-strategy S1,S2 --world N1,N2 [--model M] [--batch G]``: a sweep of the sharded
step (:mod:`memlab.sharding`) over models, strategies and world sizes, each run's rank rows written
as the run finishes.

The plan is :func:`memlab.sharding.sweep_plan.plan_runs`; each run is one call of
:func:`memlab.sharding.launch.run_sharded` (its N ranks in one process group), here or as one Ray
task (:mod:`.sharded_ray`).  The rows go through the same locked, durable output as a technique
sweep (NOTE [ sweep output ]: one write and fsync per row, a torn tail cut, a file of measured rows
never replaced without ``--force``); a run that raises writes no row, is named, and the sweep goes
on.  ``--shard i/n`` takes part i of the plan by the partition of :mod:`.shard` (a run costs about
its N: NOTE [ shard partition ]), each row carrying the plan's record; ``--resume`` skips the runs
whose every rank has a row in ``--out``.  Exit status: 0 when every rank of every run matched its
reference, 1 when one did not or a run failed, 130/143 on an interrupt/SIGTERM (finished rows kept).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..results import sweep_records
from ..sharding.sweep_plan import SHARDED_KIND, ShardedRun, finished_runs
from ..sharding.sweep_run import run_one
from .output import SweepOutput, SweepWriteFailed, open_sweep_output, say, sharded_rows
from .progress import Terminated, sigterm_as_interrupt
from .shard import parse_shard, select_shard, shard_record, summarise
from .sharded_report import Eta, format_table, outcome_counts, progress_line

__all__ = ["ShardedSweep", "run_cost", "shard_of", "execute", "run_sharded_sweep"]


@dataclass(frozen=True)
class ShardedSweep:
    """A sharded sweep's plan and options: ``runs`` (:class:`ShardedRun` s), ``device`` (cpu: gloo,
    cuda: nccl), ``out`` (JSON Lines, or None: the table only), ``append``/``force``/``resume`` as a
    technique sweep takes them, ``shard`` (``"i/n"`` or None), ``executor`` (local or ray) and
    ``address`` (a Ray cluster; None: a local Ray instance)."""

    runs: tuple[ShardedRun, ...]
    device: str = "cpu"
    out: str | None = None
    append: bool = False
    force: bool = False
    resume: bool = False
    shard: str | None = None
    executor: str = "local"
    address: str | None = None


def run_cost(run: ShardedRun) -> tuple[str, float]:
    """``(model, N)``: a run's cost for the shard partition, its world size within each model."""
    return run.model, float(run.world)


def shard_of(runs: list[ShardedRun], text: str, device: str) -> tuple[list[ShardedRun], dict[str, Any]]:
    """``--shard i/n``: this shard's runs (plan order) and the record each of its rows carries (every
    planned run named, so that ``memlab merge`` names the missing ones).  ValueError for a bad ``text``."""
    index, count = parse_shard(text)
    checkpointed = {"checkpoint_blocks": True} if any(r.checkpoint_blocks for r in runs) else {}
    record = shard_record(index, count, runs, {"kind": SHARDED_KIND, "device": device, **checkpointed},
                          {"runs": [r.plan_key() for r in runs]})
    mine = select_shard(runs, index, count, run_cost)
    share = summarise(runs, count, run_cost).shares[index - 1]
    say(f"memlab: shard {index}/{count}: {len(mine)} of {len(runs)} runs ({100 * share:.1f}% of the plan's "
        f"ranks; plan {record['plan']})")
    return mine, record


def execute(runs: list[ShardedRun], device: str, executor: str = "local", address: str | None = None,
            shard: dict[str, Any] | None = None) -> Iterator[tuple[ShardedRun, list[dict] | None, str | None, float]]:
    """Yield ``(run, rank rows or None, error or None, seconds)`` as the runs finish, here one at a time
    or on Ray (:func:`memlab.sweep.sharded_ray.run_on_ray`)."""
    if executor == "ray":
        from .sharded_ray import run_on_ray  # deferred: optional dependency

        yield from run_on_ray(runs, device, address, shard)
        return
    for run in runs:
        started = time.perf_counter()
        try:
            rows, error = run_one(run, device, "local", shard), None
        except Exception as exc:  # noqa: BLE001 - a failed run is named and the sweep goes on
            rows, error = None, f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1][:300]}"
        yield run, rows, error, time.perf_counter() - started


def _left(runs: list[ShardedRun], out: SweepOutput) -> list[ShardedRun]:
    """``--resume``: the runs ``out`` holds no complete set of rank rows for."""
    done = finished_runs(sharded_rows(out.path, say))
    left = [r for r in runs if r.key() not in done]
    say(f"memlab: resuming {out.path}: {len(runs) - len(left)} of {len(runs)} run(s) already finished")
    return left


def _check_kind(out: SweepOutput) -> None:
    """A file of a technique sweep's rows is not continued with sharded rows (ValueError)."""
    technique_rows = sum(1 for _ in sweep_records(out.path, lambda _msg: None))
    if technique_rows:
        raise ValueError(f"--out {out.path} holds {technique_rows} row(s) of a technique sweep; a sharded sweep "
                         f"(--shard-strategy) writes its own file: give another --out")


def _loop(sweep: ShardedSweep, runs: list[ShardedRun], out: SweepOutput | None, shard: dict | None,
          rows: list[dict]) -> int:
    """Run ``runs``, write and collect their rows (into ``rows``), print a line per run; the failed count."""
    eta, failed = Eta(runs), 0
    for done, (run, mine, error, seconds) in enumerate(execute(runs, sweep.device, sweep.executor, sweep.address,
                                                               shard), 1):
        for row in mine or []:
            if out is not None:
                out.append_row(row)
            rows.append(row)
        failed += mine is None
        say(progress_line(done, len(runs), run, mine, error, seconds, eta.finished(run, seconds)))
    return failed


def run_sharded_sweep(sweep: ShardedSweep, show: Callable[[str], None] = print) -> int:
    """Run ``sweep`` (module docstring); the table and the count of outcomes go to ``show``, the
    progress to stderr.  Raises ValueError (a bad ``--shard`` or ``--out``) and SweepOutputBusy before
    anything runs."""
    runs, shard = list(sweep.runs), None
    if sweep.shard:
        runs, shard = shard_of(runs, sweep.shard, sweep.device)
    planned = len(runs)
    rows: list[dict] = []
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open_sweep_output(sweep.out, append=sweep.append or sweep.resume,
                                                    replace=sweep.force, warn=say)) if sweep.out else None
        stack.callback(sigterm_as_interrupt())
        try:
            if out is not None:
                _check_kind(out)
                runs = _left(runs, out) if sweep.resume else runs
            failed = _loop(sweep, runs, out, shard, rows)
        except KeyboardInterrupt as exc:
            stopped = "terminated" if isinstance(exc, Terminated) else "interrupted"
            say(f"\nmemlab: {stopped}; {len(rows)} rank row(s) kept" + (f" in {sweep.out}" if sweep.out else ""))
            return 143 if isinstance(exc, Terminated) else 130
        except SweepWriteFailed as exc:
            say(f"memlab: {exc}")
            return 1
    if rows:
        show(format_table(rows))
    if sweep.out:
        show(f"wrote {len(rows)} rank row(s) of {len(runs) - failed} run(s) to {sweep.out}")
    say("memlab: " + (outcome_counts(rows, failed, planned) if runs else
                      f"nothing left to run: every planned run already has its rows in {sweep.out}"))
    return 0 if not failed and all(r.get("matches") is True for r in rows) else 1
