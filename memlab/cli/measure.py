"""``memlab measure``: one technique, one configuration; the record printed as a table (or JSON)."""
from __future__ import annotations

import functools
import json
import sys

from .common import UsageError, check_measured_name, measure_kwargs, model_file, parse_params, say, setting_of
from .options import MAX_SHARD_WORLD, SHARD_SIZES, SHARDED_MODELS, add_sharding_options
from ..core.params import split_params
from ..core.record import CATEGORIES, fmt_mib
from ..core.setting import DEFAULTS
from ..registry import get_technique

__all__ = ["add_parser", "precheck", "run", "measure_exit", "sharded", "sharded_sizes", "DEFAULT_WORLD"]

#: ranks of ``--shard-strategy`` without ``--world``
DEFAULT_WORLD = 2
#: measuring options a sharded step does not take, and the value each must keep: the step is one
#: float32 Adam step per rank, traced once after two warm-up steps, untimed (docs/sharding.md)
_NOT_SHARDED = (("dtype", DEFAULTS.dtype), ("mode", DEFAULTS.mode), ("loss", DEFAULTS.loss),
                ("accumulate", DEFAULTS.accumulate), ("grads", DEFAULTS.grads), ("iterations", DEFAULTS.iterations),
                ("repeats", DEFAULTS.repeats), ("time_budget", DEFAULTS.time_budget), ("threads", None),
                ("timeout", DEFAULTS.timeout), ("in_process", False), ("spawn", False), ("blocks", None),
                ("plugin", None))


def add_parser(sub, shared) -> None:
    s = sub.add_parser("measure", parents=[shared.common, shared.meas, shared.gradients, shared.sharded_model],
                       help="measure one technique")
    s.add_argument("name", nargs="?", help="technique (with --model: plain if not given); memlab list names them")
    s.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="workload/technique parameter, e.g. --param chunk_size=1000 (repeatable)")
    s.add_argument("--json", action="store_true", help="print one Measurement JSON object (bytes); with "
                                                       "--shard-strategy one JSON object per rank")
    add_sharding_options(s, f"with --shard-strategy: ranks, 1..{MAX_SHARD_WORLD} (default {DEFAULT_WORLD}); "
                            f"--param batch=G is then the global batch, a multiple of N")
    s.set_defaults(func=run, precheck=precheck)


def sharded(args) -> bool:
    """Whether ``args`` ask for a sharded step (any sharding option, or a built-in sharded model)."""
    return (args.shard_strategy != "none" or args.world is not None or args.no_reshard or args.checkpoint_blocks
            or getattr(args, "shard_model", None) is not None)


def sharded_sizes(args, worlds: list[int]) -> dict:
    """Before torch: the sharded step's ``Sizes`` keywords from ``--model`` and ``--param NAME=VALUE``
    (names of :data:`~memlab.cli.options.SHARD_SIZES`, ints), the global batch a multiple of every
    world of ``worlds``; UsageError naming the bad value and the valid ones."""
    strategy = args.shard_strategy
    if strategy == "none":
        what = "--model " + args.shard_model if getattr(args, "shard_model", None) else \
            "--no-reshard" if args.no_reshard else "--checkpoint-blocks" if args.checkpoint_blocks else "--world"
        more = {"--model": " (or a model file, *.py)",
                "--checkpoint-blocks": " (on one process: the technique checkpoint_blocks, --model FILE.py)"}
        raise UsageError(f"{what} needs --shard-strategy; valid: --shard-strategy {'|'.join(('ddp', 'zero1', 'fsdp'))}"
                         f"{more.get(what.split()[0], '')}")
    if args.no_reshard and strategy != "fsdp":
        raise UsageError(f"--no-reshard is not valid with --shard-strategy {strategy}; valid: with fsdp only")
    sizes = dict(SHARD_SIZES, model=getattr(args, "shard_model", None) or args.model or SHARDED_MODELS[0],
                 checkpoint_blocks=bool(args.checkpoint_blocks))
    for name, text in split_params(args.param or []).items():
        if name not in SHARD_SIZES:
            raise UsageError(f"--param {name} is not valid with --shard-strategy; valid: {', '.join(SHARD_SIZES)}")
        low = 0 if name == "seed" else 1
        if not text.strip().isdigit() or int(text) < low:
            raise UsageError(f"--param {name}={text} is not valid; valid: an int >= {low}")
        sizes[name] = int(text)
    if sizes["model"] == "transformer" and sizes["dim"] % sizes["heads"]:
        raise UsageError(f"--param dim={sizes['dim']} is not valid with heads={sizes['heads']}; valid: a multiple of heads")
    for n in worlds:
        if sizes["batch"] % n:
            raise UsageError(f"--param batch={sizes['batch']} is not valid at world {n}; valid: a multiple of {n} "
                             f"(the global batch is split evenly over the ranks)")
    return sizes


def _world(args) -> int:
    world = DEFAULT_WORLD if args.world is None else args.world
    if not 1 <= world <= MAX_SHARD_WORLD:
        raise UsageError(f"--world {world} is not valid; valid: 1..{MAX_SHARD_WORLD} (processes started on this host)")
    return world


def _precheck_sharded(args) -> None:
    if args.name:
        raise UsageError(f"a technique name ({args.name!r}) is not valid with --shard-strategy; valid: none (the "
                         f"sharded step is the model's own Adam step)")
    for name, default in _NOT_SHARDED:
        if getattr(args, name, default) != default:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)!r} is not valid with --shard-strategy; "
                             f"valid: its default ({default!r}): the sharded step is one float32 Adam step per rank, "
                             f"traced after two warm-up steps, untimed")
    if args.optimizer not in (DEFAULTS.optimizer, "adam"):
        raise UsageError(f"--optimizer {args.optimizer!r} is not valid with --shard-strategy; valid: adam (the sharded "
                         f"step's optimizer)")
    if args.device not in ("cpu", "cuda"):
        raise UsageError(f"--device {args.device!r} is not valid with --shard-strategy; valid: cpu (gloo) or cuda "
                         f"(NCCL, one GPU per rank)")
    sharded_sizes(args, [_world(args)])


def precheck(args) -> None:
    """Before torch: a name is given, it and each ``--param`` name exist, and the setting is valid; with
    ``--shard-strategy``, every sharding option (:func:`sharded_sizes`)."""
    if sharded(args):
        _precheck_sharded(args)
        return
    if not args.name and not args.model:
        raise UsageError("memlab measure needs a technique name (or --model FILE.py)")
    check_measured_name(args)
    setting_of(args)


def run(args) -> int:
    if sharded(args):
        return _run_sharded(args)
    from ..measurement import measure  # deferred: torch line

    model_file(args, "measure")
    cls = get_technique(args.name)
    params = parse_params(cls, args.param or [])
    m = measure(cls, **measure_kwargs(args), **params)
    if args.json:
        print(m.to_json())
        return measure_exit(m)
    print(m.summary())
    if m.peak_allocated_bytes is not None:
        _print_table(m)
    return measure_exit(m)


def _run_sharded(args) -> int:
    """``--shard-strategy``: one traced step on ``--world`` processes (memlab.sharding.run_sharded);
    each rank's lines (or JSON object); 1 when a rank's step does not match the reference."""
    from ..sharding import run_sharded  # deferred: torch line
    from ..sharding.model import Sizes  # deferred: torch line
    from ..sharding.report import measure_lines, with_collectives  # deferred: heavy, CLI startup

    world = _world(args)
    sizes = Sizes(**sharded_sizes(args, [world]))
    [rows] = run_sharded([(args.shard_strategy, not args.no_reshard)], world, sizes, args.device)
    if args.json:
        for row in rows:
            print(json.dumps(with_collectives(row)))
    else:
        print(f"{sizes.model} {rows[0]['strategy']} on {world} rank{'s' if world > 1 else ''} "
              f"({'gloo, cpu' if args.device == 'cpu' else 'nccl, cuda'}): global batch {sizes.batch} "
              f"({sizes.batch // world} per rank){'' if sizes.model == 'mlp' else f', seq {sizes.seq}'}; one "
              f"float32 Adam step per rank, every "
              f"allocation traced (exact bytes)"
              f"{'; every block checkpointed (non-reentrant torch.utils.checkpoint)' if sizes.checkpoint_blocks else ''}")
        for row in rows:
            print("\n".join(measure_lines(row)))
    bad = [r["rank"] for r in rows if not r["matches"]]
    if bad:
        say(f"memlab: {rows[0]['strategy']}: MISMATCH: rank(s) {', '.join(map(str, bad))} differ from the "
            f"single-process reference")
    return 1 if bad else 0


def _print_table(m) -> None:
    label = "resident" if m.device == "cpu" else "reserved"
    rows = [*_memory_rows(m, label), *_time_rows(m), *_verdict_rows(m)]
    for k, v in sorted(m.extra.items()):
        if isinstance(v, (int, float, str)) and not isinstance(v, bool) and k not in _not_shown_extra():
            rows.append((k, fmt_mib(v) if k.endswith("_bytes") else str(v), ""))
    w = max(len(r[0]) for r in rows)
    for k, v, note in rows:
        print(f"  {k:<{w}}  {v}  {note}".rstrip())
    print(f"  allocated: {m.memory_method.get('allocated', '')}")
    print(f"  {label}: {m.memory_method.get('reserved', '')}")


def _gradient_options(m) -> str:
    """``", accumulate 2, grads zero"``: the gradient options a row was measured with, where not the defaults."""
    return "".join(f", {k} {getattr(m, k)}" for k in ("accumulate", "grads") if getattr(m, k) != getattr(DEFAULTS, k))


def _memory_rows(m, label: str) -> list[tuple[str, str, str]]:
    return [
        ("peak allocated", fmt_mib(m.peak_allocated_bytes), "above baseline " + fmt_mib(m.allocated_baseline_bytes)),
        ("total peak", fmt_mib(m.total_peak_bytes), f"baseline included; optimizer {m.optimizer}, loss {m.loss}"
                                                      + _gradient_options(m)),
        *((f"  {k.replace('_', ' ')}", fmt_mib(m.peak_by_category_bytes[k]), "at the peak; "
           f"{fmt_mib(m.end_by_category_bytes.get(k))} after the step")
          for k in CATEGORIES if k in m.peak_by_category_bytes),
        (f"peak {label}", fmt_mib(m.peak_reserved_bytes), "above baseline " + fmt_mib(m.reserved_baseline_bytes)),
        ("allocated after step", ", ".join(fmt_mib(b) for b in m.allocated_after_step_bytes),
         "per iteration, above baseline"),
    ]


def _time_rows(m) -> list[tuple[str, str, str]]:
    """Step time with the intra-op threads of the phase that timed it (not the memory phase's)."""
    return [
        ("step time", m.step_time_text(), f"median ± interquartile range of {len(m.step_times_s)} steps, "
         f"{timed_threads_text(m)}, load {_load_text(m)}"),
        ("throughput", f"{m.samples_per_s:.1f} samples/s" if m.samples_per_s else "-", ""),
        ("FLOPs", f"{m.flops:.3e}" if m.flops is not None else "-", "per step"),
    ]


def timed_threads_text(m) -> str:
    """``1 thread`` for the timed phase (``Measurement.timing_threads``); the process's threads when an
    older record lacks it."""
    n = m.timing_threads if m.timing_threads is not None else m.environment.get("threads")
    return "? threads" if n is None else f"{n} thread{'' if n == 1 else 's'}"


@functools.cache
def _not_shown_extra() -> frozenset[str]:
    """``Measurement.extra`` keys ``memlab measure`` leaves out of its human output (``--json`` keeps
    them): the harness's own phase seconds (:data:`memlab.sweep.breakdown.PHASES`) and bookkeeping.
    Read when a measurement is printed, not when the CLI is imported: ``memlab.sweep`` imports torch,
    which ``memlab advise`` does not need."""
    from ..sweep.breakdown import PHASES  # deferred: torch line

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
                     f"max |error| vs the reference in {m.dtype} (relative {_fmt_err(m.drift_max_rel_error)}); "
                     "a number, not a verdict"))
    return rows


def measure_exit(m) -> int:
    """0 for ``ok``; 0 and one line on stderr for a row that reads ``leak_unknown`` (too few steps for a
    leak verdict: NOTE [ verdicts ] in memlab.measurement.verdict); else one line on stderr with the
    status and reason, and 1."""
    if m.verdict == "leak_unknown":
        print(f"memlab: {m.technique}: LEAK UNKNOWN: {m.reason}; not ok, never ranked", file=sys.stderr)
        return 0
    if m.status == "ok":
        return 0
    print(f"memlab: {m.technique}: {m.status.upper()}: {m.error or 'no reason recorded'}", file=sys.stderr)
    return 1
