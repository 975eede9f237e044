"""``memlab sweep``: every technique of a family over its grid, each row written as it finishes.

Exit status: 1 when any point's row is not ``ok`` (every row is still written; a count per status
ends stderr) or a row could not be written (disk full: "rerun with --resume"); 2 when ``--out`` is
unusable (a directory, not writable, a symbolic link to a file that is not a memlab sweep, a file of
measured rows without ``--force``, ``--append`` or ``--resume``) or another
sweep holds its lock (the message names its pid), and then nothing was written; 130/143 on an
interrupt/SIGTERM, the finished rows kept.  A closed stdout (``| head``) never stops a sweep.
With ``--shard-strategy`` it sweeps the sharded step instead (:mod:`memlab.sweep.sharded`: models,
strategies and world sizes; exit 1 when a rank's step did not match its reference or a run failed).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from . import names
from .common import UsageError, check_file, measure_kwargs, model_file, print_or_drop, say, setting_of
from .options import CHECKPOINT_BLOCKS_HELP
from ..core.setting import DEFAULTS
from ..sharding.sweep_plan import BUILTIN_MODELS, DEFAULT_BATCH, MAX_WORLD, plan_from_options

__all__ = ["add_parser", "precheck", "run", "plan_args"]


class _ModelOption(argparse.Action):
    """``--model``: a model file (``args.model``, whose existence is checked before anything runs) or,
    with ``--shard-strategy``, a built-in model of the sharded step; every value in ``args.shard_models``."""

    def __call__(self, parser, namespace, value, option_string=None):
        namespace.shard_models = [*(getattr(namespace, "shard_models", None) or []), value]
        if value not in BUILTIN_MODELS:
            setattr(namespace, self.dest, value)


def add_parser(sub, shared) -> None:
    s = sub.add_parser("sweep", parents=[shared.common, shared.meas, shared.gradients],
                       help="measure every technique of a family over its grid")
    s.add_argument("--model", action=_ModelOption, metavar="FILE.py", help="your own model: a file defining build() "
                   "and batch(size) (memlab measure --help); with --shard-strategy also mlp or transformer, the "
                   "sharded step's built-in models (repeatable; default mlp)")
    s.add_argument("--blocks", metavar="PATH", help="with --model FILE.py: the dotted path of its nn.ModuleList/"
                   "nn.Sequential of repeated blocks (default: guessed)")
    s.add_argument("--shard-strategy", metavar="S1,S2,...", help="sweep the sharded step on N processes instead of "
                   "techniques (docs/sharding.md): comma-separated ddp, zero1, fsdp, fsdp_keep (FSDP2 without "
                   "reshard-after-forward); one row per rank; with --world, --model, --batch")
    s.add_argument("--world", metavar="N1,N2,...", help=f"with --shard-strategy: the world sizes (ranks, "
                                                        f"1..{MAX_WORLD}), e.g. 1,2,4")
    s.add_argument("--batch", type=int, metavar="G", help=f"with --shard-strategy: the global batch (rows or "
                   f"sequences) split evenly over the ranks: a multiple of every --world (default {DEFAULT_BATCH})")
    s.add_argument("--checkpoint-blocks", action="store_true", help=CHECKPOINT_BLOCKS_HELP)
    s.add_argument("--family", help="the family to sweep (default: every family); memlab list names them")
    s.add_argument("--technique", action="append", help="restrict to these techniques (repeatable)")
    s.add_argument("--quick", action="store_true", help="small grid (about a minute per family on 2 cores)")
    s.add_argument("--grid", action="append", metavar="NAME=V1,V2,...",
                   help="sweep these values of any workload or technique parameter (repeatable: the cross "
                        "product) instead of the workload's grid, e.g. --grid chunk_size=100,1000 --grid n=5000")
    s.add_argument("--defaults", action="store_true", help="each technique's default configuration only "
                                                           "(e.g. with --optimizer adam)")
    s.add_argument("--out", help="JSON Lines file; each measurement is written as soon as it finishes "
                                 "(default: none, the table only)")
    s.add_argument("--append", action="store_true", help="append to --out instead of replacing it")
    s.add_argument("--force", action="store_true", help="replace an --out that holds measured rows (without "
                                                        "--force, --append or --resume such a file is refused)")
    s.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="measure N points at once (1 to 64; default 1): on CPU each child with cores/N threads "
                        "unless --threads is given, times N-way shared; with --device cuda one worker on each of "
                        "N visible GPUs; memory figures are unchanged")
    s.add_argument("--resume", action="store_true", help="skip points --out already holds with a finished status "
                   "(ok, mismatch, leak) at the same device, dtype, mode, optimizer and loss; append the rest")
    s.add_argument("--shard", metavar="I/N", help="measure only shard I of N (1-based): a deterministic part of the "
                   "plan balanced by the points' sizes, the same on every host; put the pieces together with "
                   "memlab merge")
    s.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local (default): measure here (--jobs at once); ray: each point a Ray task on a cluster, "
                        "rows written here (pip install 'memlab[cluster]')")
    s.add_argument("--address", help="with --executor ray: the cluster to join (auto, or ray://HOST:PORT); default: "
                                     "start a local Ray instance")
    s.set_defaults(func=run, precheck=precheck, shard_models=None)


#: a technique sweep's options that a sharded sweep refuses: (attribute, option, the value when not given)
_TECHNIQUE_ONLY = (("family", "--family", None), ("technique", "--technique", None), ("grid", "--grid", None),
                   ("quick", "--quick", False), ("defaults", "--defaults", False), ("jobs", "--jobs", 1),
                   ("blocks", "--blocks", None), ("plugin", "--plugin", None), ("in_process", "--in-process", False),
                   ("spawn", "--spawn", False),
                   *((f, f"--{f.replace('_', '-')}", getattr(DEFAULTS, f)) for f in (
                       "dtype", "mode", "optimizer", "loss", "accumulate", "grads", "iterations", "repeats",
                       "threads", "timeout", "time_budget")))


def _sharded_runs(args) -> list | None:
    """The runs of the sharded sweep ``args`` ask for (None: a technique sweep), checked before torch."""
    builtin = [m for m in args.shard_models or [] if m in BUILTIN_MODELS]
    if args.shard_strategy is None:
        given = [o for o, v in (("--world", args.world), ("--batch", args.batch)) if v is not None]
        given += ["--checkpoint-blocks"] if args.checkpoint_blocks else []
        given += [f"--model {m}" for m in builtin]
        if given:
            raise UsageError(f"{given[0]} needs --shard-strategy (a sweep of the sharded step); a technique "
                             f"sweep's --model is a model file (FILE.py)")
        return None
    for attr, option, unset in _TECHNIQUE_ONLY:
        if getattr(args, attr) != unset:
            raise UsageError(f"{option} does not apply with --shard-strategy: the sharded step is one float32 Adam "
                             f"step per rank, traced exactly (docs/sharding.md); leave {option} out")
    runs = plan_from_options(args.shard_strategy, args.world, args.batch, args.shard_models or [], args.device,
                             args.checkpoint_blocks)
    for m in {r.model for r in runs} - set(BUILTIN_MODELS):
        check_file("model file", m)
    if args.resume and not args.out:
        raise UsageError("--resume needs --out FILE (the sweep to continue)")
    return runs


def precheck(args) -> None:
    """Before torch: the setting; when every technique is built in, the family, the techniques and the
    ``--grid`` names, refused in the order :func:`memlab.sweep.plan_sweep` refuses them; a sharded
    sweep's strategies, worlds, batch and models."""
    setting_of(args)
    if _sharded_runs(args) is not None:
        return
    if not names.applies(args.plugin, args.model):
        return
    names.check_family(args.family)
    if args.grid and args.defaults:
        return  # plan_sweep's own words
    index = names.builtin_index()
    chosen = args.technique if args.technique is not None else [
        n for n in sorted(index) if args.family is None or index[n].family == args.family]
    for name in chosen:
        names.check_technique(name)
    keys = [spec.partition("=")[0].strip() for spec in args.grid or [] if "=" in spec]
    for name in chosen:
        if args.family is None or index[name].family == args.family:
            names.check_params(name, keys)


def run(args) -> int:
    runs = _sharded_runs(args)
    if runs is not None:
        return _run_sharded(args, runs)
    from ..measurement import prepare  # deferred: torch line
    from ..sweep import check_jobs  # deferred: torch line

    model_file(args, "sweep")
    kw = measure_kwargs(args)
    setting = kw.pop("setting")
    points = _plan(args, setting)
    if args.resume and not args.out:
        raise UsageError("--resume needs --out FILE (the sweep to continue)")
    row_extra = None
    if args.shard:
        points, row_extra = _shard_of(points, args, setting)
    prepare(points[0].technique, {}, setting.device, setting.dtype, setting.mode)  # validated before starting
    check_jobs(args.jobs, setting.device)
    _check_executor(args)
    return _measure_points(args, points, {**kw, "row_extra": row_extra})


def _run_sharded(args, runs: list) -> int:
    """The sharded sweep (:func:`memlab.sweep.sharded.run_sharded_sweep`)."""
    from ..sweep import SweepOutputBusy  # deferred: torch line
    from ..sweep.sharded import ShardedSweep, run_sharded_sweep  # deferred: torch line

    _check_executor(args)
    sweep = ShardedSweep(tuple(runs), args.device, args.out, args.append, args.force, args.resume, args.shard,
                         args.executor, args.address)
    try:
        return run_sharded_sweep(sweep, print_or_drop)
    except SweepOutputBusy as exc:
        raise UsageError(str(exc)) from None


def _plan(args, setting) -> list:
    from ..sweep import parse_grid, plan_sweep  # deferred: torch line

    try:
        points = plan_sweep(args.family, quick=args.quick, techniques=args.technique,
                            grid=parse_grid(args.grid or []), defaults=args.defaults, setting=setting)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not points:
        raise UsageError("nothing to sweep: no technique matches")
    return points


def _measure_points(args, points, kw: dict[str, Any]) -> int:
    """Run ``points`` into ``--out`` (opened here, closed on every path) and report them."""
    from ..sweep import SweepOutputBusy, SweepWriteFailed, open_sweep_output, run_sweep  # deferred: torch line
    from ..sweep.progress import Progress, Terminated, sigterm_as_interrupt  # deferred: torch line

    try:
        out = open_sweep_output(args.out, append=args.append or args.resume, replace=args.force,
                                warn=say) if args.out else None
    except SweepOutputBusy as exc:
        raise UsageError(str(exc)) from None
    rows = []
    restore = sigterm_as_interrupt()
    started = time.perf_counter()
    try:
        if args.resume:
            points = _unmeasured(points, out, args)
        progress = Progress(points=points, jobs=args.jobs)
        for m in run_sweep(points, out, progress=progress, warn=say, jobs=args.jobs, executor=args.executor,
                           ray_address=args.address, **kw):
            rows.append(m)  # one at a time: an interrupt keeps the count of those finished
    except KeyboardInterrupt as exc:
        say(f"\nmemlab: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}; {len(rows)} finished "
            f"measurement(s) kept" + (f" in {args.out}" if args.out else ""))
        return 143 if isinstance(exc, Terminated) else 130
    except SweepWriteFailed as exc:
        say(f"memlab: {exc}")
        return 1
    finally:
        restore()
        if out is not None:
            out.close()
    return _report(args, points, rows, time.perf_counter() - started)


def _report(args, points, rows, elapsed: float) -> int:
    """The table, the time breakdown and the status counts; 0 when every row is ``ok``."""
    if not points:
        say(f"memlab: nothing left to measure: every planned point already has an ok row in {args.out}"
            if args.resume else "memlab: nothing measured")
        return 0
    from ..sweep import format_table, not_ok_lines, status_summary  # deferred: torch line

    if rows:
        from ..sweep.breakdown import time_breakdown  # deferred: torch line

        print_or_drop(format_table(rows))
        if rows[0].device == "cpu":
            print_or_drop("\nCPU: allocated = exact live-tensor bytes above the baseline (profiler allocation "
                          "events); resident = process VmHWM during one step minus VmRSS before it (no caching "
                          "allocator on CPU).")
        print_or_drop("\n" + time_breakdown([m.to_dict() for m in rows], elapsed, args.jobs))
    if args.out:
        print_or_drop(f"wrote {len(rows)} measurement(s) to {args.out}")
    say("memlab: " + status_summary(rows, len(points)))
    for line in not_ok_lines(rows):
        say("  " + line)
    return 0 if all(m.status == "ok" for m in rows) else 1


def _unmeasured(points, out, args) -> list:
    """``--resume``: the points ``out`` holds no finished row for, by :meth:`memlab.core.setting.Point.key`
    (its unreadable lines are warned about)."""
    from ..sweep import finished_keys, is_done  # deferred: torch line

    done = finished_keys(out.path, warn=say, iterations=args.iterations)  # leak unknown: memlab.sweep.resume
    left = [p for p in points if not is_done(p, done)]
    say(f"memlab: resuming {out.path}: {len(points) - len(left)} of {len(points)} point(s) already measured")
    return left


def _check_executor(args) -> None:
    """``--executor ray`` needs ray installed and ``--jobs 1``; ``--address`` needs ``--executor ray``."""
    if args.executor == "ray":
        from ..sweep.ray_executor import ray_available  # deferred: torch line

        why = ray_available()
        if why:
            raise UsageError(why)
        if args.jobs != 1:
            raise UsageError(f"--jobs {args.jobs} with --executor ray: Ray runs as many points at once as the cluster "
                             "has CPUs (--threads per point) or GPUs (one per point) for; leave --jobs at 1")
    elif args.address:
        raise UsageError(f"--address {args.address!r} needs --executor ray")


def plan_args(args) -> dict[str, Any]:
    """The arguments that make a sweep's plan (recorded in a shard's rows so that a merge can rebuild it)."""
    return {"family": args.family, "quick": bool(args.quick), "technique": args.technique, "grid": args.grid or [],
            "defaults": bool(args.defaults), "plugins": [str(Path(p).resolve()) for p in args.plugin or []]}


def _shard_of(points, args, setting):
    """``--shard i/n``: this shard's points and the record each of its rows carries."""
    from ..sweep.shard import parse_shard, select_shard, shard_record, summarise  # deferred: torch line

    try:
        index, count = parse_shard(args.shard)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    identity = {k: getattr(setting, k) for k in ("device", "dtype", "mode", "optimizer", "loss")}
    # the gradient options only where set: a default sweep's plan digest is what it was before they existed
    identity.update({k: getattr(setting, k) for k in ("accumulate", "grads") if getattr(setting, k) != getattr(
        DEFAULTS, k)})
    record = shard_record(index, count, points, identity, plan_args(args))
    summary = summarise(points, count)
    mine = select_shard(points, index, count)
    say(f"memlab: shard {index}/{count}: {len(mine)} of {len(points)} points "
        f"({100 * summary.shares[index - 1]:.1f}% of the plan's estimated work; plan {record['plan']})")
    return mine, {"sweep_shard": record}
