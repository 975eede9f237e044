"""``memlab`` command line: argument parsing and exit codes only; the work happens elsewhere.

Exit status: 0 success, 1 a measurement was not ``ok`` (mismatch, leak, oom or error) or a
reference check failed,
2 bad input (unknown technique, parameter out of range, unknown device...).
``sweep``: 1 when any point's row is not ``ok`` (every row is still written; a count per status
ends stderr) or a row could not be written (disk full: "rerun with --resume"); 2 when ``--out`` is
unusable (a directory, not writable, a symbolic link to a file that is not a memlab sweep) or another
sweep holds its lock (the message names its pid),
and then nothing was written.  A closed stdout (``| head``) never stops a sweep.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

__all__ = ["main"]


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _parse_params(cls, pairs: Sequence[str]) -> dict[str, Any]:
    from .params import split_params

    specs = cls.all_params()
    out: dict[str, Any] = {}
    for key, text in split_params(pairs).items():  # a malformed or repeated --param: ValueError, exit 2
        if key not in specs:
            raise UsageError(f"technique {cls.name!r} has no parameter {key!r}; valid parameters: {', '.join(sorted(specs))}")
        out[key] = specs[key].parse(key, text)
    return out


#: the longest --timeout: a week (select() and the clocks behind it overflow long before inf)
MAX_TIMEOUT_S = 7 * 24 * 3600


def _timeout_seconds(text: str) -> float:
    """argparse ``type=`` of every ``--timeout``: seconds, finite, > 0 and at most :data:`MAX_TIMEOUT_S`."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value <= MAX_TIMEOUT_S:  # NaN fails the comparison too
        raise argparse.ArgumentTypeError(f"{text!r} is not valid: expected seconds > 0 and <= {MAX_TIMEOUT_S} "
                                         f"(a week)")
    return value


class _OneLineParser(argparse.ArgumentParser):
    """A parser whose errors (bad value, unknown option, missing argument) are one line on stderr,
    exit status 2, like every other bad input (the usage is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(2, f"memlab: error: {message}; see {self.prog} --help\n")


def _model_file(args, command: str) -> None:
    """``--model FILE.py``: point ``args`` at the model file's family (:mod:`memlab.own_model`)."""
    if getattr(args, "model", None):
        from .own_model import apply_model_args

        apply_model_args(args, command)


def _load_plugins(args) -> None:
    if not args.plugin:  # the registry imports torch: commands that need no technique stay fast
        return
    from .registry import load_plugin

    for p in args.plugin:
        load_plugin(p)


def _cmd_list(args) -> int:
    from .registry import get_technique, list_techniques

    names = list_techniques(args.family)
    if args.json:
        rows = []
        for n in names:
            c = get_technique(n)
            rows.append({"name": n, "family": c.family(), "workload": c.workload.name, "summary": c.summary(),
                         "baseline": c.baseline, "peer": c.peer, "twin": c.twin,
                         "tolerance": {dt: list(c.tolerance(dt)) for dt in ("float64", "float32", "bfloat16", "float16")},
                         "params": {k: {"default": p.default, "valid": p.describe_range(), "doc": p.doc}
                                    for k, p in sorted(c.all_params().items())}})
        print(json.dumps(rows, indent=1, sort_keys=True, default=list))
        return 0
    by_family: dict[str, list[str]] = {}
    for n in names:
        by_family.setdefault(get_technique(n).family(), []).append(n)
    for fam in sorted(by_family):
        print(f"{fam}:")
        for n in by_family[fam]:
            c = get_technique(n)
            tags = "".join([" [baseline]" if c.baseline else "", " [peer]" if c.peer else ""])
            print(f"  {n}{tags} (workload {c.workload.name}): {c.summary()}")
            for k, p in sorted(c.all_params().items()):
                print(f"      {k} = {p.default!r:<12} {p.describe_range()}{'  - ' + p.doc if p.doc else ''}")
    return 0


def _measure_kwargs(args) -> dict[str, Any]:
    from .measurement.step import LOSSES, OPTIMIZERS, check_choice

    check_choice("optimizer", args.optimizer, OPTIMIZERS)  # up front, before a sweep opens its file
    check_choice("loss", args.loss, LOSSES)
    from .measurement.inprocess import check_threads

    check_threads(args.threads)
    return {"threads": args.threads, "optimizer": args.optimizer, "loss": args.loss,
            "device": args.device, "dtype": args.dtype, "mode": args.mode, "iterations": args.iterations,
            "repeats": args.repeats, "timeout": args.timeout,
            "isolate": False if args.in_process else ("spawn" if args.spawn else True),
            "time_budget": args.time_budget}


def _cmd_measure(args) -> int:
    from .measurement import measure
    from .record import CATEGORIES, fmt_mib
    from .registry import get_technique

    _model_file(args, "measure")
    if not args.name:
        raise UsageError("memlab measure needs a technique name (or --model FILE.py)")
    cls = get_technique(args.name)
    params = _parse_params(cls, args.param or [])
    m = measure(cls, **_measure_kwargs(args), **params)
    if args.json:
        print(m.to_json())
        return _measure_exit(m)
    print(m.summary())
    if m.peak_allocated_bytes is not None:
        label = "resident" if m.device == "cpu" else "reserved"
        rows = [
            ("peak allocated", fmt_mib(m.peak_allocated_bytes), "above baseline " + fmt_mib(m.allocated_baseline_bytes)),
            ("total peak", fmt_mib(m.total_peak_bytes), f"baseline included; optimizer {m.optimizer}, loss {m.loss}"),
            *((f"  {k.replace('_', ' ')}", fmt_mib(m.peak_by_category_bytes[k]), "at the peak; "
               f"{fmt_mib(m.end_by_category_bytes.get(k))} after the step")
              for k in CATEGORIES if k in m.peak_by_category_bytes),
            (f"peak {label}", fmt_mib(m.peak_reserved_bytes), "above baseline " + fmt_mib(m.reserved_baseline_bytes)),
            ("allocated after step", ", ".join(fmt_mib(b) for b in m.allocated_after_step_bytes), "per iteration, above baseline"),
            ("step time", m.step_time_text(), f"median ± interquartile range of {len(m.step_times_s)} steps, "
             f"{m.environment.get('threads', '?')} threads, load {_load_text(m)}"),
            ("throughput", f"{m.samples_per_s:.1f} samples/s" if m.samples_per_s else "-", ""),
            ("FLOPs", f"{m.flops:.3e}" if m.flops is not None else "-", "per step"),
            *_verdict_rows(m),
        ]
        for k, v in sorted(m.extra.items()):
            if isinstance(v, (int, float, str)) and not isinstance(v, bool) and k not in _not_shown_extra():
                rows.append((k, fmt_mib(v) if k.endswith("_bytes") else str(v), ""))
        w = max(len(r[0]) for r in rows)
        for k, v, note in rows:
            print(f"  {k:<{w}}  {v}  {note}".rstrip())
        print(f"  allocated: {m.memory_method.get('allocated', '')}")
        print(f"  {label}: {m.memory_method.get('reserved', '')}")
    return _measure_exit(m)


@functools.cache
def _not_shown_extra() -> frozenset[str]:
    """``Measurement.extra`` keys ``memlab measure`` leaves out of its human output (``--json`` keeps
    them): the harness's own phase seconds (:data:`memlab.sweep.breakdown.PHASES`) and bookkeeping.
    Read when a measurement is printed, not when the CLI is imported: ``memlab.sweep`` imports torch
    (1.7 s of CPU), which ``memlab advise`` does not need."""
    from .sweep.breakdown import PHASES

    return frozenset(k for k, _ in PHASES) | {"predict_cuda_s", "baseline", "twin"}


def _load_text(m) -> str:
    def one(x):
        return "?" if x is None else f"{x:.2f}"

    return f"{one(m.load_avg_before)} -> {one(m.load_avg_after)} on {m.environment.get('cores', '?')} cores"


def _fmt_err(x) -> str:
    return "-" if x is None else f"{x:.2e}"


def _verdict_rows(m) -> list[tuple[str, str, str]]:
    """The reference check as table rows: the float64 verdict with its tolerance, the dtype drift."""
    if m.matches_reference is None:
        return [("matches reference", "not checked", "")]
    rtol, atol = m.tolerance or (None, None)
    rows = [("matches reference", "yes" if m.matches_reference else "NO",
             f"{m.check_dtype or m.dtype}: max |error| {_fmt_err(m.max_abs_error)}, relative {_fmt_err(m.max_rel_error)}; "
             f"tolerance rtol={rtol:g} atol={atol:g}" if rtol is not None else "")]
    if m.drift_max_abs_error is not None or (m.check_dtype and m.check_dtype != m.dtype):
        rows.append((f"{m.dtype} drift", _fmt_err(m.drift_max_abs_error),
                     f"max |error| vs the reference in {m.dtype} (relative {_fmt_err(m.drift_max_rel_error)}); a number, not a verdict"))
    return rows


def _measure_exit(m) -> int:
    """0 for ``ok``; else one line on stderr with the status and reason, and 1."""
    if m.status == "ok":
        return 0
    print(f"memlab: {m.technique}: {m.status.upper()}: {m.error or 'no reason recorded'}", file=sys.stderr)
    return 1


def _say(text: str) -> None:
    """One line to stderr.  A closed stderr is ignored: messages must never stop a sweep."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _print_or_drop(text: str) -> None:
    """Print to stdout.  A reader that went away (``| head -1``) is not an error: the text is
    dropped and stdout is pointed at /dev/null, so exiting prints no "Exception ignored" either."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()


def _stdout_to_devnull() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real descriptor behind sys.stdout
        sys.stdout = open(os.devnull, "w")


def _unmeasured(points, out, args) -> list:
    """``--resume``: the points ``out`` holds no ok row for (its unreadable lines are warned about)."""
    from .sweep import already_measured, is_done

    done = already_measured(out.path, args.device, args.dtype, args.mode, warn=_say, optimizer=args.optimizer,
                            loss=args.loss)
    left = [p for p in points if not is_done(p, done)]
    _say(f"memlab: resuming {out.path}: {len(points) - len(left)} of {len(points)} point(s) already measured")
    return left


def _cmd_sweep(args) -> int:
    from .measurement import prepare
    from .sweep import (SweepOutputBusy, SweepWriteFailed, format_table, not_ok_lines, open_sweep_output, plan_sweep,
                        run_sweep, status_summary)

    from .sweep import parse_grid
    from .sweep.progress import Progress, Terminated, sigterm_as_interrupt

    _model_file(args, "sweep")
    try:
        points = plan_sweep(args.family, quick=args.quick, techniques=args.technique,
                            grid=parse_grid(args.grid or []), defaults=args.defaults)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not points:
        raise UsageError("nothing to sweep: no technique matches")
    if args.resume and not args.out:
        raise UsageError("--resume needs --out FILE (the sweep to continue)")
    kw = _measure_kwargs(args)
    device, dtype, mode = kw.pop("device"), kw.pop("dtype"), kw.pop("mode")
    row_extra = None
    if args.shard:
        points, row_extra = _shard_of(points, args, device, dtype, mode)
    prepare(points[0].technique, {}, device, dtype, mode)  # validate device/dtype/mode before starting
    from .sweep import check_jobs

    check_jobs(args.jobs, device)
    _check_executor(args)
    try:
        out = open_sweep_output(args.out, append=args.append or args.resume, warn=_say) if args.out else None
    except SweepOutputBusy as exc:
        raise UsageError(str(exc)) from None
    rows = []
    restore = sigterm_as_interrupt()
    started = time.perf_counter()
    try:
        if args.resume:
            points = _unmeasured(points, out, args)
        progress = Progress(points=points, jobs=args.jobs)
        for m in run_sweep(points, out, device=device, dtype=dtype, mode=mode, progress=progress, warn=_say,
                           jobs=args.jobs, row_extra=row_extra, executor=args.executor, ray_address=args.address,
                           **kw):
            rows.append(m)
    except KeyboardInterrupt as exc:
        _say(f"\nmemlab: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}; {len(rows)} finished "
             f"measurement(s) kept" + (f" in {args.out}" if args.out else ""))
        return 143 if isinstance(exc, Terminated) else 130
    except SweepWriteFailed as exc:
        _say(f"memlab: {exc}")
        return 1
    finally:
        restore()
        if out is not None:
            out.close()
    if not points:
        _say(f"memlab: nothing left to measure: every planned point already has an ok row in {args.out}"
             if args.resume else "memlab: nothing measured")
        return 0
    if rows:
        _print_or_drop(format_table(rows))
    if rows and rows[0].device == "cpu":
        _print_or_drop("\nCPU: allocated = exact live-tensor bytes above the baseline (profiler allocation events); "
                       "resident = process VmHWM during one step minus VmRSS before it (no caching allocator on CPU).")
    if rows:
        from .sweep.breakdown import time_breakdown

        _print_or_drop("\n" + time_breakdown([m.to_dict() for m in rows], time.perf_counter() - started,
                                              args.jobs))
    if args.out:
        _print_or_drop(f"wrote {len(rows)} measurement(s) to {args.out}")
    _say("memlab: " + status_summary(rows, len(points)))
    for line in not_ok_lines(rows):
        _say("  " + line)
    return 0 if all(m.status == "ok" for m in rows) else 1


def _check_executor(args) -> None:
    """``--executor ray`` needs ray installed and ``--jobs 1``; ``--address`` needs ``--executor ray``."""
    if args.executor == "ray":
        from .sweep.ray_executor import ray_available

        why = ray_available()
        if why:
            raise UsageError(why)
        if args.jobs != 1:
            raise UsageError(f"--jobs {args.jobs} with --executor ray: Ray runs as many points at once as the cluster "
                             "has CPUs (--threads per point) or GPUs (one per point) for; leave --jobs at 1")
    elif args.address:
        raise UsageError(f"--address {args.address!r} needs --executor ray")


def _plan_args(args) -> dict[str, Any]:
    """The arguments that make a sweep's plan (recorded in a shard's rows so that a merge can rebuild it)."""
    return {"family": args.family, "quick": bool(args.quick), "technique": args.technique, "grid": args.grid or [],
            "defaults": bool(args.defaults), "plugins": [str(Path(p).resolve()) for p in args.plugin or []]}


def _shard_of(points, args, device, dtype, mode):
    """``--shard i/n``: this shard's points and the record each of its rows carries."""
    from .sweep.shard import parse_shard, select_shard, shard_record, summarise

    try:
        index, count = parse_shard(args.shard)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    setting = {"device": device, "dtype": dtype, "mode": mode, "optimizer": args.optimizer, "loss": args.loss}
    record = shard_record(index, count, points, setting, _plan_args(args))
    summary = summarise(points, count)
    mine = select_shard(points, index, count)
    _say(f"memlab: shard {index}/{count}: {len(mine)} of {len(points)} points "
         f"({100 * summary.shares[index - 1]:.1f}% of the plan's estimated work; plan {record['plan']})")
    return mine, {"sweep_shard": record}


def _replan(plan_args: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(technique, resolved params)`` of the plan a shard records (for naming missing points)."""
    import json as _json

    from .registry import get_technique, load_plugin
    from .sweep import parse_grid, plan_sweep

    for path in plan_args.get("plugins") or []:
        load_plugin(path)
    points = plan_sweep(plan_args.get("family"), quick=plan_args.get("quick", False),
                        techniques=plan_args.get("technique"), grid=parse_grid(plan_args.get("grid") or []),
                        defaults=plan_args.get("defaults", False))
    return [(p.technique, _json.loads(_json.dumps(get_technique(p.technique).resolve(p.params), default=list)))
            for p in points]


def _cmd_merge(args) -> int:
    from .sweep.merge import MergeConflict, merge_shards

    if Path(args.out).exists() and not args.force:
        raise UsageError(f"{args.out} exists; give a new file, or --force to replace it")
    try:
        report = merge_shards(args.out, args.shards, replan=_replan)
    except (MergeConflict, OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(report.text(args.out))
    for line in report.problems:
        _say(f"memlab: warning: {line}")
    return 0 if report.complete else 1


def _cmd_timeline(args) -> int:
    from .atomic import write_text_atomic
    from .measurement import timeline
    from .record import fmt_mib
    from .registry import get_technique

    cls = get_technique(args.name)
    params = _parse_params(cls, args.param or [])
    tl = timeline(cls, device=args.device, dtype=args.dtype, mode=args.mode, isolate=not args.in_process, **params)
    text = json.dumps(tl.to_dict(), sort_keys=True)
    if args.out:
        write_text_atomic(args.out, text)
        print(f"wrote {len(tl.events)} events to {args.out}; peak {fmt_mib(tl.peak_bytes)} above baseline")
        return 0
    if args.json:
        print(text)
        return 0
    for e in tl.events:
        print(f"{e.phase:<9} {e.delta_bytes / 2**20:+9.1f} MiB  live {fmt_mib(e.live_bytes):>11}  {' > '.join(e.stack) or e.op}")
    print(f"peak {fmt_mib(tl.peak_bytes)} above baseline {fmt_mib(tl.baseline_bytes)}")
    return 0


def _cmd_timelines(args) -> int:
    from .atomic import write_text_atomic
    from .measurement import timeline
    from .record import fmt_mib
    from .registry import get_technique, list_families, list_techniques

    if args.family is not None and args.family not in list_families():
        raise UsageError(f"unknown family {args.family!r}; available: {', '.join(list_families())}")
    out_dir = Path(args.out_dir)
    names = [n for n in list_techniques(args.family) if not get_technique(n).peer or args.peers]
    for i, name in enumerate(names, 1):
        try:
            tl = timeline(name, device=args.device, dtype=args.dtype, mode=args.mode)
        except Exception as exc:  # noqa: BLE001 - one failure must not lose the others
            print(f"[{i}/{len(names)}] {name}: FAILED {exc}", file=sys.stderr)
            continue
        path = out_dir / f"{get_technique(name).family()}-{name}-{args.mode}.json"
        write_text_atomic(path, json.dumps(tl.to_dict(), sort_keys=True))
        print(f"[{i}/{len(names)}] {name}: {len(tl.events)} events, peak {fmt_mib(tl.peak_bytes)} -> {path}", file=sys.stderr)
    return 0


def _cmd_check(args) -> int:
    from .checks import iter_checks
    from .registry import get_technique

    _model_file(args, "check")
    for n in args.name or []:
        get_technique(n)
    outcomes = []
    for outcome in iter_checks(args.name or None, isolate=True, timeout=args.timeout):  # a child per technique
        print(outcome.line(), flush=True)
        outcomes.append(outcome)
    bad = list(dict.fromkeys(o.name for o in outcomes if o.verdict in ("FAIL", "ERROR")))
    if bad:
        checked = len({o.name for o in outcomes})
        print(f"memlab: {len(bad)} of {checked} techniques failed the reference check: {', '.join(bad)}",
              file=sys.stderr)
    return 1 if bad else 0


def _cmd_reproduce(args) -> int:
    from .reproductions import list_reproductions, run_all

    known = list_reproductions()
    for s in args.only or []:
        if s not in known:
            raise UsageError(f"unknown seed {s!r}; available: {', '.join(sorted(known))}")
    paths = run_all(Path(args.out), quick=args.quick, only=args.only, progress=lambda s: print(s, file=sys.stderr))
    for p in paths:
        print(f"wrote {p}")
    return 0


def _cmd_bench_harness(args) -> int:
    from .harness import load_robustness, overhead, report

    if args.load_processes is not None and not 1 <= args.load_processes <= 64:
        raise UsageError(f"--load-processes {args.load_processes} is not valid: expected 1 to 64")
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.limits:  # relative time beside the FLOP ratio per technique (memlab/limits.py), nothing else
        from .limits import limits_table, measure_limits

        print(limits_table(measure_limits(progress=say)))
        return 0
    over = overhead(progress=say)
    load = [] if args.no_load else load_robustness(load_processes=args.load_processes, progress=say)
    print(report(over, load))
    return 0


def _cmd_compare(args) -> int:
    from .sweep.compare import compare_sweeps

    for path in (args.old, args.new):
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such sweep file")
    result = compare_sweeps(args.old, args.new)
    for line in result.problems:
        print(f"memlab: warning: {line}", file=sys.stderr)
    for diff in result.differences[:args.limit]:
        print(diff)
    if len(result.differences) > args.limit:
        print(f"... and {len(result.differences) - args.limit} more")
    print(result.summary())
    return 0 if result.identical else 1


def _cmd_advise(args) -> int:
    """Rank the modelled techniques and knob settings that fit ``--budget`` (from data/models, no
    measurement, no torch); ``--verify`` measures the first; ``--fit`` rebuilds the models.  Bad input
    and a budget nothing meets are one line each, exit 2 (see ``main``)."""
    from .advisor import AdviceError, advise, format_advice, format_verify, verify

    models_dir = Path(args.models) if args.models else None
    if args.model:
        return _advise_model(args, models_dir)
    if args.fit:
        from .advisor import fit_all
        from .advisor.fit import OPTIMIZERS_FITTED, declaration_of
        from .advisor.model import MODELS_DIR

        if args.family:
            try:
                declaration_of(args.family)
            except ValueError as exc:  # a family that declares no advisor model: one line, exit 2
                raise UsageError(str(exc)) from None
        optimizers = [args.optimizer] if args.optimizer else list(OPTIMIZERS_FITTED)
        for path in fit_all(models_dir or MODELS_DIR, optimizers, [args.family] if args.family else None,
                            say=_say):
            print(path)
        return 0
    if not args.family or not args.budget:
        raise UsageError("memlab advise needs --family and --budget (or --fit)")
    try:
        a = advise(args.family, args.budget, args.param or [], optimizer=args.optimizer or "sgd",
                   device=args.device, models_dir=models_dir)
    except AdviceError as exc:
        raise UsageError(str(exc)) from None
    for x in a["extrapolation"]:
        _say(f"memlab: warning: {x['param']}={x['value']} is {x['factor']}x beyond the validated range "
             f"({x['param']} <= {x['validated_max']}); predicted by extrapolating the exact model")
    checked = verify(a) if args.verify else None
    if args.json:
        print(json.dumps({**a, "verify": checked}, indent=1, sort_keys=True))
    else:
        _print_or_drop(format_advice(a, limit=None if args.all else 15))
        if checked is not None:
            _print_or_drop("\n" + format_verify(checked))
    if checked is not None and checked["measured"] and not checked["fits_budget"]:
        return 1
    return 0


def _advise_model(args, cache_root) -> int:
    """``memlab advise --model FILE``: the largest ``--vary`` size per technique (memlab.model_advice)."""
    from .advisor import format_verify, verify
    from .model_advice import advise_model, format_model_advice
    from .params import split_params

    if args.fit or args.family:
        raise UsageError("--model fits its own models (cached); leave out --fit and --family")
    if not args.budget:
        raise UsageError("memlab advise --model needs --budget (e.g. --budget 24GiB)")
    a = advise_model(args.model, args.budget, vary=[v.strip() for v in args.vary.split(",")],
                     params=split_params(args.param or []), optimizer=args.optimizer or "sgd", device=args.device,
                     cache_root=cache_root, say=_say)
    if args.verify:  # the answer may come from the index, without the model file: register its techniques
        from .own_model import load_model

        load_model(args.model)
    checked = verify(a) if args.verify else None
    if args.json:
        print(json.dumps({**a, "verify": checked}, indent=1, sort_keys=True))
    else:
        _print_or_drop(format_model_advice(a))
        if checked is not None:
            _print_or_drop("\n" + format_verify(checked))
    return 1 if checked is not None and checked["measured"] and not checked["fits_budget"] else 0


def _cmd_site(args) -> int:
    """Build the site; each input problem is one ``memlab: warning:`` line on stderr (and on the
    methodology page).  A refused ``--out`` is the ValueError's one line, exit 2 (see ``main``), and so
    is a ``--results`` or ``--data`` folder that does not exist."""
    import warnings

    from .results import ResultsWarning
    from .site import build_site

    for option, folder in (("--results", args.results), ("--data", args.data)):
        if not Path(folder).is_dir():  # a mistyped folder would build an empty site
            raise UsageError(f"{option} {folder}: no such folder" if not Path(folder).exists()
                             else f"{option} {folder} is not a folder")
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResultsWarning)
            index = build_site(Path(args.results), Path(args.data), Path(args.out),
                               extra_runs=[Path(p) for p in args.run or []])
    except OSError as exc:  # e.g. no permission to write beside --out, disk full
        raise UsageError(f"cannot write the site to {args.out}: {exc.strerror or exc}") from None
    finally:
        problems = [w for w in caught if issubclass(w.category, ResultsWarning)]
        for w in problems:
            print(f"memlab: warning: {w.message}", file=sys.stderr)
        for w in caught:
            if not issubclass(w.category, ResultsWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    print(Path(index).resolve())
    if problems:
        print(f"memlab: {len(problems)} input problem(s) left out of the site; listed on "
              f"{Path(index).resolve().parent / 'methodology.html'}", file=sys.stderr)
    return 0


def _shared_options() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser]:
    """The option groups several commands take: ``--plugin``; the measuring options; ``--model``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--plugin", action="append", metavar="FILE.py",
                        help="a Python file defining memlab.Technique subclasses (repeatable)")
    meas = argparse.ArgumentParser(add_help=False)
    meas.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    meas.add_argument("--dtype", default="float32", help="float32, float64, bfloat16, float16 (default float32)")
    meas.add_argument("--mode", default="train", help="train (forward+backward+SGD step) or infer (no_grad forward)")
    meas.add_argument("--iterations", type=int, default=5, help="allocation-measured steps (default 5)")
    meas.add_argument("--optimizer", default="sgd", metavar="NAME",
                      help="training step's optimizer: sgd, sgd_momentum, adam or adamw (default sgd)")
    meas.add_argument("--loss", default="given", metavar="NAME",
                      help="given (backward from the workload's preallocated upstream gradient, default) or mse "
                           "(mse_loss(output, 0): its gradient is allocated inside the step)")
    meas.add_argument("--repeats", type=int, default=5, help="timed steps; the median is reported (default 5)")
    meas.add_argument("--timeout", type=_timeout_seconds, default=900.0, help="seconds per isolated measurement (default 900)")
    meas.add_argument("--time-budget", type=float, default=2.0, metavar="SECONDS",
                      help="keep timing steps (after --repeats) until their IQR is within 5%% of the median "
                           "or this many seconds pass (default 2)")
    meas.add_argument("--threads", type=int, default=None, metavar="N",
                      help="torch intra-op threads per measurement (default: one per core). 1 keeps the "
                           "relative step time load-robust on a shared machine")
    meas.add_argument("--in-process", action="store_true", help="measure in this process instead of a fresh subprocess")
    meas.add_argument("--spawn", action="store_true",
                      help="a fresh Python process per measurement instead of a child forked from the warm "
                           "server (the default for CPU; CUDA always spawns)")

    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--model", metavar="FILE.py", help="your own model: a file defining build() -> nn.Module, "
                       "batch(size) -> tensors and optionally loss(output, batch); technique names are then "
                       "plain, checkpoint_blocks, checkpoint_sqrt, selective_checkpoint, autocast_bf16, "
                       "offload_activations (see README, 'Your own model')")
    model.add_argument("--blocks", metavar="PATH", help="with --model: the dotted path of the nn.ModuleList/"
                       "nn.Sequential of repeated blocks (default: guessed)")
    return common, meas, model


def _add_measuring(sub, common, meas, model) -> None:
    """list, measure, sweep, merge."""
    s = sub.add_parser("list", parents=[common], help="list techniques, their workload and parameters")
    s.add_argument("--family")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_list)

    s = sub.add_parser("measure", parents=[common, meas, model], help="measure one technique")
    s.add_argument("name", nargs="?", help="technique (with --model: plain if not given)")
    s.add_argument("--param", action="append", metavar="NAME=VALUE", help="workload/technique parameter (repeatable)")
    s.add_argument("--json", action="store_true", help="print one Measurement JSON object (bytes)")
    s.set_defaults(func=_cmd_measure)

    s = sub.add_parser("sweep", parents=[common, meas, model], help="measure every technique of a family over its grid")
    s.add_argument("--family")
    s.add_argument("--technique", action="append", help="restrict to these techniques (repeatable)")
    s.add_argument("--quick", action="store_true", help="small grid (about a minute per family on 2 cores)")
    s.add_argument("--grid", action="append", metavar="NAME=V1,V2,...",
                   help="sweep these values of any workload or technique parameter (repeatable: the cross "
                        "product) instead of the workload's grid, e.g. --grid chunk_size=100,1000 --grid n=5000")
    s.add_argument("--defaults", action="store_true", help="each technique's default configuration only "
                                                           "(e.g. with --optimizer adam)")
    s.add_argument("--out", help="JSON Lines file; each measurement is written as soon as it finishes")
    s.add_argument("--append", action="store_true", help="append to --out instead of replacing it")
    s.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="measure N points at once (CPU only), each child with cores/N threads unless --threads "
                        "is given; memory figures are unchanged, times become N-way shared (default 1)")
    s.add_argument("--resume", action="store_true", help="skip points --out already holds with a finished status "
                   "(ok, mismatch, leak) at the same device, dtype, mode, optimizer and loss; append the rest")
    s.add_argument("--shard", metavar="I/N", help="measure only shard I of N (1-based): a deterministic part of the "
                   "plan balanced by the points' sizes, the same on every host; put the pieces together with "
                   "memlab merge")
    s.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: measure here (--jobs at once); ray: each point a Ray task on a cluster, rows written "
                        "here (pip install 'memlab[cluster]')")
    s.add_argument("--address", help="with --executor ray: the cluster to join (auto, or ray://HOST:PORT); default: "
                                     "start a local Ray instance")
    s.set_defaults(func=_cmd_sweep)

    s = sub.add_parser("merge", help="put the shard files of a sweep (or any sweep files) into one file: refuses two "
                                      "different exact figures for one point, names missing shards and points "
                                      "(exit 1 if any is missing)")
    s.add_argument("out", metavar="OUT.jsonl")
    s.add_argument("shards", metavar="SHARD.jsonl", nargs="+")
    s.add_argument("--force", action="store_true", help="replace OUT if it exists")
    s.set_defaults(func=_cmd_merge)


def _add_recording(sub, common, meas, model) -> None:
    """timeline, timelines, check, reproduce, site."""
    s = sub.add_parser("timeline", parents=[common, meas], help="allocated bytes over one step, event by event")
    s.add_argument("name")
    s.add_argument("--param", action="append", metavar="NAME=VALUE")
    s.add_argument("--json", action="store_true")
    s.add_argument("--out", help="write the Timeline JSON here")
    s.set_defaults(func=_cmd_timeline)

    s = sub.add_parser("timelines", parents=[common, meas], help="write one timeline per technique (default parameters)")
    s.add_argument("--family")
    s.add_argument("--peers", action="store_true", help="include peer comparators")
    s.add_argument("--out-dir", default="data/timelines")
    s.set_defaults(func=_cmd_timelines)

    s = sub.add_parser("check", parents=[common, model], help="check techniques against their workload reference (float64, CPU)")
    s.add_argument("name", nargs="*")
    s.add_argument("--timeout", type=_timeout_seconds, default=300.0, metavar="SECONDS",
                   help="seconds each technique's check (its own child process) may take before it is killed "
                        "and reported as ERROR, at most a week (default 300)")
    s.set_defaults(func=_cmd_check)

    s = sub.add_parser("reproduce", parents=[common], help="re-run the seed-report reproductions")
    s.add_argument("--out", default="data/reproductions")
    s.add_argument("--quick", action="store_true")
    s.add_argument("--only", action="append", metavar="SEED")
    s.set_defaults(func=_cmd_reproduce)

    s = sub.add_parser("site", parents=[common], help="build the static results site")
    s.add_argument("--results", default="results", help="asv results directory (default results)")
    s.add_argument("--data", default="data", help="memlab data directory (sweeps, timelines, reproductions)")
    s.add_argument("--out", default="html", help="output directory (default html)")
    s.add_argument("--run", action="append", metavar="FILE.jsonl", help="extra sweep JSON Lines file (repeatable)")
    s.set_defaults(func=_cmd_site)


def _add_answering(sub, common) -> None:
    """advise, compare, bench-harness."""
    s = sub.add_parser("advise", parents=[common], help="which technique and knob setting fit a memory budget, "
                                                       "ranked by predicted relative step time (from data/models)")
    s.add_argument("--family", help="technique family with an advisor model (memlab.AdvisorModel, declared beside "
                                    "its workload); with --fit: fit only this family")
    s.add_argument("--budget", help="memory budget: 2GiB, 1.5GB, 512MiB or bytes")
    s.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="workload size or knob (repeatable); a knob given is held, else its settings are searched")
    s.add_argument("--optimizer", default=None, metavar="NAME", help="sgd (default) or adam")
    s.add_argument("--device", default="cpu", help="cpu (exact peak) or cuda (peak plus a stated allocator margin)")
    s.add_argument("--json", action="store_true", help="print the advice as JSON (bytes)")
    s.add_argument("--all", action="store_true", help="list every fitting setting, not the first 15")
    s.add_argument("--verify", action="store_true", help="measure the first recommendation when it fits this "
                                                          "machine's available memory; exit 1 if it overflows the budget")
    s.add_argument("--fit", action="store_true", help="rebuild the models (traces + held-out measurements, minutes)")
    s.add_argument("--models", metavar="DIR", help="models directory (default data/models; with --model: the cache "
                                                   "of fitted model files, default ~/.cache/memlab/advise)")
    s.add_argument("--model", metavar="FILE.py", help="a model file (build/batch): fit its techniques' models (cached) "
                                                      "and answer the largest --vary size each fits in --budget")
    s.add_argument("--vary", default="batch", metavar="SIZES",
                   help="with --model: the sizes the models vary, batch first (batch, or batch,seq); the answer "
                        "searches the first")
    s.set_defaults(func=_cmd_advise)

    s = sub.add_parser("compare", help="compare the exact memory figures of two sweep files point by point "
                                        "(exit 1 if any byte differs)")
    s.add_argument("old", metavar="OLD.jsonl")
    s.add_argument("new", metavar="NEW.jsonl")
    s.add_argument("--limit", type=int, default=50, help="differences to print (default 50)")
    s.set_defaults(func=_cmd_compare)

    s = sub.add_parser("bench-harness", help="the harness's own overhead per point (spawn vs fork server) and "
                                             "how a CPU load moves absolute vs relative step times")
    s.add_argument("--no-load", action="store_true", help="skip the load experiment")
    s.add_argument("--load-processes", type=int, default=None,
                   help="busy loops for the load experiment (default: three per core)")
    s.add_argument("--limits", action="store_true",
                   help="instead: each technique's relative step time beside its FLOP ratio (its time limit)")
    s.set_defaults(func=_cmd_bench_harness)


def _parser() -> argparse.ArgumentParser:
    common, meas, model = _shared_options()
    p = _OneLineParser(prog="memlab", description="Honest memory numbers for memory-saving PyTorch techniques.",
                       parents=[common])
    sub = p.add_subparsers(dest="command", required=True)
    _add_measuring(sub, common, meas, model)
    _add_recording(sub, common, meas, model)
    _add_answering(sub, common)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .errors import TechniqueUnavailable

    try:
        _load_plugins(args)
        return args.func(args)
    except (UsageError, ValueError, TechniqueUnavailable, FileNotFoundError, ImportError) as exc:
        print(f"memlab: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
