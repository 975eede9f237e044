"""``memlab advise``: which technique and knob setting fit a memory budget (from the fitted models,
no torch); ``--verify`` measures the first answer, ``--fit`` rebuilds the models, ``--model FILE`` fits
a model file's own."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import UsageError, print_or_drop, say
from .measure import sharded, sharded_sizes
from .options import MAX_SHARD_WORLD, ModelOrBuiltin, add_sharding_options, timeout_seconds
from ..core.params import split_params
from ..core.setting import DEFAULTS
from ..sharding.sweep_plan import parse_worlds

__all__ = ["add_parser", "run", "precheck", "MAX_ADVISE_WORLD", "SHARDED_FIT_WORLDS"]

#: the largest ``--world`` answered with ``--shard-strategy`` (memlab.sharding.advise.MAX_TARGET_WORLD)
MAX_ADVISE_WORLD = 1024
#: the worlds a sharded answer is fitted at by default: per strategy (FSDP on one rank gathers nothing,
#: a different program: its fit takes N >= 2), and the held-out world it is checked at
SHARDED_FIT_WORLDS = {"ddp": "1,3,6", "zero1": "1,3,6", "fsdp": "2,3,6"}
SHARDED_CHECK_WORLDS = "4"
#: the global batch of the runs a sharded answer is fitted on, unless --param batch=G (a multiple of
#: every fit and check world: 1, 2, 3, 4, 6, 8)
SHARDED_FIT_BATCH = 24


def add_parser(sub, shared) -> None:
    s = sub.add_parser("advise", parents=[shared.common], help="which technique and knob setting fit a memory budget: "
                                                              "whether the plain step fits, then the settings by "
                                                              "predicted relative step time (from data/models)")
    s.add_argument("--family", help="technique family with an advisor model (memlab.AdvisorModel, declared beside "
                                    "its workload); with --fit: fit only this family")
    s.add_argument("--budget", help="memory budget: 2GiB, 1.5GB, 512MiB or bytes")
    s.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="workload size or knob (repeatable); a knob given is held, else its settings are searched")
    s.add_argument("--optimizer", default=None, metavar="NAME", help=f"{DEFAULTS.optimizer} (default) or adam")
    s.add_argument("--device", default="cpu", help="cpu (exact peak, the default) or cuda (peak plus a stated "
                                                   "allocator margin)")
    s.add_argument("--json", action="store_true", help="print the advice as JSON (bytes)")
    s.add_argument("--all", action="store_true", help="list every fitting setting, not the first 15")
    s.add_argument("--verify", action="store_true", help="measure the first recommendation when it fits this "
                                                          "machine's available memory; exit 1 if it overflows the budget")
    s.add_argument("--fit", action="store_true", help="rebuild the models (traces + held-out measurements, minutes)")
    s.add_argument("--models", metavar="DIR", help="models directory (default data/models; with --model: the cache "
                                                   "of fitted model files, default ~/.cache/memlab/advise)")
    s.add_argument("--model", metavar="FILE.py", action=ModelOrBuiltin,
                   help="a model file (build/batch): fit its techniques' models (cached) and answer the largest "
                        "--vary size each fits in --budget, plain first, then by predicted relative step time; "
                        "with --shard-strategy also mlp or transformer (the largest per-rank batch at --world N)")
    s.add_argument("--timeout", type=timeout_seconds, default=DEFAULTS.timeout, metavar="SECONDS",
                   help=f"with --model: seconds loading and checking the model file may take (a child process, "
                        f"killed then; default {DEFAULTS.timeout:g})")
    s.add_argument("--vary", default="batch", metavar="SIZES",
                   help="with --model: the sizes the models vary, batch first (batch, or batch,seq; default "
                        "batch); the answer searches the first; micro_batches (or micro_batches,seq): the fewest "
                        "micro-batches the batch of --param batch=B fits in (--accumulate K); with --family: "
                        "batch (the default) or micro_batches, for a family with a batch size")
    add_sharding_options(s, f"with --shard-strategy: the ranks to answer for, 1..{MAX_ADVISE_WORLD} (fsdp 2..; "
                            f"required): the answer is the largest per-rank batch whose predicted peak fits "
                            f"--budget on every rank")
    s.add_argument("--fit-worlds", metavar="N,N,...", help=f"with --shard-strategy: the worlds (1..{MAX_SHARD_WORLD}) "
                   f"the per-rank peak is fitted at (default {SHARDED_FIT_WORLDS['ddp']} for ddp and zero1, "
                   f"{SHARDED_FIT_WORLDS['fsdp']} for fsdp), run at global batch --param batch=G (default "
                   f"{SHARDED_FIT_BATCH}) and cached, or read from --rows")
    s.add_argument("--check-worlds", metavar="N,N,...", help=f"with --shard-strategy: held-out worlds whose measured "
                   f"peaks are compared with the fit's prediction (default {SHARDED_CHECK_WORLDS}; none: no check)")
    s.add_argument("--rows", action="append", metavar="FILE.jsonl",
                   help="with --shard-strategy: per-rank rows to fit on instead of running (JSON Lines, as "
                        "python -m memlab.sharding predict --save writes them: data/sharding/); repeatable")
    s.set_defaults(func=run, precheck=precheck)


def _worlds(option: str, text: str) -> list[int]:
    """:func:`memlab.sharding.sweep_plan.parse_worlds` of ``option``'s value (``none`` for
    --check-worlds), its ValueError a UsageError."""
    try:
        return parse_worlds(text, option, none_ok=option == "--check-worlds")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _sharded_setup(args) -> dict:
    """Before torch: every sharded option checked; ``{budget, label, fit, check, sizes}`` (``sizes``
    None with --rows)."""
    from ..advisor import AdviceError, parse_budget  # deferred: heavy, CLI startup

    strategy = args.shard_strategy
    if strategy == "none":
        sharded_sizes(args, [])   # refuses: a sharding option without --shard-strategy
    for name, bad in (("--family", args.family), ("--fit", args.fit), ("--verify", args.verify), ("--all", args.all),
                      ("--vary", args.vary != "batch" and args.vary)):
        if bad:
            raise UsageError(f"{name} is not valid with --shard-strategy; valid: --model, --world, --budget, "
                             f"--fit-worlds, --check-worlds, --rows, --param, --models, --json")
    if args.optimizer not in (None, "adam"):
        raise UsageError(f"--optimizer {args.optimizer} is not valid with --shard-strategy; valid: adam (the sharded "
                         f"runs' step)")
    if args.device not in ("cpu", "cuda"):
        raise UsageError(f"--device {args.device} is not valid with --shard-strategy; valid: cpu (exact bytes) or "
                         f"cuda (those plus the advisor's stated allocator margin)")
    if not args.budget:
        raise UsageError("memlab advise --shard-strategy needs --budget (e.g. --budget 80GiB)")
    if strategy != "none" and (args.world is None or not (2 if strategy == "fsdp" else 1) <= args.world <= MAX_ADVISE_WORLD):
        raise UsageError(f"--world {args.world} is not valid with --shard-strategy {strategy}; valid: "
                         f"{2 if strategy == 'fsdp' else 1}..{MAX_ADVISE_WORLD} (required)")
    fit_n = _worlds("--fit-worlds", args.fit_worlds or SHARDED_FIT_WORLDS.get(strategy, "1"))
    check_n = _worlds("--check-worlds", args.check_worlds or SHARDED_CHECK_WORLDS)
    if args.rows and args.param:
        raise UsageError("--param is not valid with --rows; valid: one of them (the rows carry their own sizes)")
    params = [f"batch={SHARDED_FIT_BATCH}"] if not any(p.startswith("batch=") for p in args.param or []) else []
    sizes = sharded_sizes(_with_params(args, [*(args.param or []), *params]), [] if args.rows else fit_n + check_n)
    try:
        budget = parse_budget(args.budget)
    except AdviceError as exc:
        raise UsageError(str(exc)) from None
    label = f"{strategy}(keep)" if args.no_reshard else strategy
    return {"budget": budget, "label": label, "fit": fit_n, "check": check_n, "sizes": None if args.rows else sizes}


def _with_params(args, params: list[str]) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "param": params})


def precheck(args) -> None:
    """Before torch: with ``--shard-strategy``, every sharded option (:func:`_sharded_setup`); without
    it, no sharded-only option is given."""
    if sharded(args):
        _sharded_setup(args)
        return
    for name in ("fit_worlds", "check_worlds", "rows"):
        if getattr(args, name):
            raise UsageError(f"--{name.replace('_', '-')} needs --shard-strategy; valid: --shard-strategy ddp|zero1|fsdp")


def run(args) -> int:
    """Rank the modelled techniques and knob settings that fit ``--budget`` (from data/models, no
    measurement, no torch); ``--verify`` measures the first; ``--fit`` rebuilds the models.  Bad input
    and a budget nothing meets are one line each, exit 2 (see ``main``)."""
    from ..advisor import AdviceError, advise, verify  # deferred: heavy, CLI startup

    models_dir = Path(args.models) if args.models else None
    if sharded(args):
        return _advise_sharded(args, models_dir)
    if args.model:
        return _advise_model(args, models_dir)
    if args.fit:
        return _fit(args, models_dir)
    if not args.family or not args.budget:
        raise UsageError("memlab advise needs --family and --budget (or --fit)")
    if args.vary.split(",")[0].strip() != "batch":
        return _advise_micro(args, models_dir)
    try:
        a = advise(args.family, args.budget, args.param or [], optimizer=args.optimizer or DEFAULTS.optimizer,
                   device=args.device, models_dir=models_dir)
    except AdviceError as exc:
        raise UsageError(str(exc)) from None
    for x in a["extrapolation"]:
        say(f"memlab: warning: {x['param']}={x['value']} is {x['factor']}x beyond the validated range "
            f"({x['param']} <= {x['validated_max']}); predicted by extrapolating the exact model")
    checked = verify(a) if args.verify else None
    from ..advisor import format_advice  # deferred: heavy, CLI startup

    return _answer(args, a, checked, lambda: format_advice(a, limit=None if args.all else 15))


def _answer(args, a, checked, text) -> int:
    """Print advice ``a`` (JSON, or ``text()``) with its verification; 1 when the verified answer
    overflowed the budget."""
    from ..advisor import format_verify  # deferred: heavy, CLI startup

    if args.json:
        print(json.dumps({**a, "verify": checked}, indent=1, sort_keys=True))
    else:
        print_or_drop(text())
        if checked is not None:
            print_or_drop("\n" + format_verify(checked))
    return 1 if checked is not None and checked["measured"] and not checked["fits_budget"] else 0


def _fit(args, models_dir) -> int:
    """``--fit``: rebuild the models of ``--family`` (or of every family) for the optimizers fitted."""
    from ..advisor import fit_all  # deferred: heavy, CLI startup
    from ..advisor.fit import OPTIMIZERS_FITTED, declaration_of  # deferred: heavy, CLI startup
    from ..advisor.model import MODELS_DIR  # deferred: heavy, CLI startup

    if args.family:
        try:
            declaration_of(args.family)
        except ValueError as exc:  # a family that declares no advisor model: one line, exit 2
            raise UsageError(str(exc)) from None
    optimizers = [args.optimizer] if args.optimizer else list(OPTIMIZERS_FITTED)
    for path in fit_all(models_dir or MODELS_DIR, optimizers, [args.family] if args.family else None, say=say):
        print(path)
    return 0


def _advise_model(args, cache_root) -> int:
    """``memlab advise --model FILE``: the largest ``--vary`` size per technique (memlab.own_model.advice)."""
    from ..advisor import verify  # deferred: heavy, CLI startup
    from ..own_model.advice import advise_model, format_model_advice  # deferred: heavy, CLI startup

    if args.fit or args.family:
        raise UsageError("--model fits its own models (cached); leave out --fit and --family")
    if not args.budget:
        raise UsageError("memlab advise --model needs --budget (e.g. --budget 24GiB)")
    a = advise_model(args.model, args.budget, vary=[v.strip() for v in args.vary.split(",")],
                     params=split_params(args.param or []), optimizer=args.optimizer or DEFAULTS.optimizer,
                     device=args.device, cache_root=cache_root, say=say,
                     load_timeout=args.timeout)
    if args.verify:  # the answer may come from the index, without the model file: register its techniques
        from ..own_model import load_model  # deferred: torch line

        load_model(args.model)
    checked = verify(a) if args.verify else None
    return _answer(args, a, checked, lambda: format_model_advice(a))


def _advise_micro(args, models_dir) -> int:
    """``memlab advise --family F --vary micro_batches``: the fewest micro-batches of ``--param batch``
    each technique fits in (memlab.advisor.micro); ``--verify`` measures the first ranked answer."""
    from ..advisor import AdviceError, verify  # deferred: heavy, CLI startup
    from ..advisor.micro import MICRO_BATCHES, advise_micro, format_micro_advice  # deferred: heavy, CLI startup

    if [v.strip() for v in args.vary.split(",")] != [MICRO_BATCHES]:
        raise UsageError(f"--vary {args.vary!r} is not valid with --family; valid: batch (the default) or "
                         f"{MICRO_BATCHES}")
    try:
        a = advise_micro(args.family, args.budget, args.param or [], optimizer=args.optimizer or DEFAULTS.optimizer,
                         device=args.device, models_dir=models_dir)
    except AdviceError as exc:
        raise UsageError(str(exc)) from None
    checked = verify(a) if args.verify and a["fits"] else None
    return _answer(args, a, checked, lambda: format_micro_advice(a))


def _advise_sharded(args, cache_root) -> int:
    """``--shard-strategy``: the largest per-rank batch at ``--world`` N whose predicted per-rank peak
    fits ``--budget`` (memlab.sharding.advise), fitted on rows read or run (and cached)."""
    from ..sharding.advise import (allocated_budget, answer_json, format_answer,  # deferred: heavy, CLI startup
                                   largest_batch)
    from ..sharding.advise_rows import cached_rows, read_rows  # deferred: heavy, CLI startup
    from ..sharding.advise_text import check_lines, doubts, fit_text, unit_of  # deferred: heavy, CLI startup
    from ..sharding.predict import check, fit  # deferred: heavy, CLI startup

    q = _sharded_setup(args)
    model = getattr(args, "shard_model", None) or args.model or "mlp"
    worlds = sorted(set(q["fit"]) | set(q["check"]))
    if args.rows:
        rows = [r for r in read_rows([Path(p) for p in args.rows], model, q["label"], args.checkpoint_blocks)
                if r["world"] in worlds]
    else:
        rows = cached_rows(q["sizes"], q["label"], worlds, cache_root, say)
    fit_rows = [r for r in rows if r["world"] in q["fit"]]
    f = fit(fit_rows)
    checks = check(f, [r for r in rows if r["world"] in q["check"]])
    allocated = allocated_budget(q["budget"], args.device)
    if allocated < 1:
        from ..advisor.advise import cuda_need  # deferred: heavy, CLI startup

        raise UsageError(f"--budget {args.budget} is not valid with --device {args.device}: the stated allocator "
                         f"margin alone needs {cuda_need(0):,} B; valid: a larger budget")
    ans = largest_batch(f, q["label"], args.world, allocated)
    source = ", ".join(args.rows) if args.rows else "runs here (cached)"
    bad = sorted({(r["world"], r["rank"]) for r in rows if not r.get("matches", False)})
    why = doubts(f, q["label"], ans, checks) + ([f"the step of (world, rank) {bad} differs from the single-process "
                                                  f"reference (MISMATCH)"] if bad else [])
    if args.json:
        print(json.dumps({**answer_json(ans), "device": args.device, "device_budget_bytes": q["budget"],
                          "model": model, "checkpoint_blocks": args.checkpoint_blocks, "unit": unit_of(fit_rows[0]), "fit_worlds": q["fit"],
                          "checks": [{**c, "diff": str(c["diff"])} for c in checks], "rows": source, "doubts": why}))
    else:
        shown = f"{model}, every block checkpointed," if args.checkpoint_blocks else model
        print_or_drop(format_answer(ans, shown, unit_of(fit_rows[0]), fit_text(f, q["label"], fit_rows, source, ans),
                                    check_lines(checks), device=args.device, budget=q["budget"]))
    for line in why:
        say(f"memlab: {q['label']}: not to be trusted: {line}")
    return 1 if why else 0 if ans["batch_per_rank"] else 2
