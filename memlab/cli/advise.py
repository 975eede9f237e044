"""``memlab advise``: which technique and knob setting fit a memory budget (from the fitted models,
no torch); ``--verify`` measures the first answer, ``--fit`` rebuilds the models, ``--model FILE`` fits
a model file's own."""
from __future__ import annotations

import json
from pathlib import Path

from .common import UsageError, print_or_drop, say
from .options import timeout_seconds
from ..core.params import split_params
from ..core.setting import DEFAULTS

__all__ = ["add_parser", "run"]


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
    s.add_argument("--model", metavar="FILE.py", help="a model file (build/batch): fit its techniques' models (cached) "
                                                      "and answer the largest --vary size each fits in --budget, "
                                                      "plain first, then by predicted relative step time")
    s.add_argument("--timeout", type=timeout_seconds, default=DEFAULTS.timeout, metavar="SECONDS",
                   help=f"with --model: seconds loading and checking the model file may take (a child process, "
                        f"killed then; default {DEFAULTS.timeout:g})")
    s.add_argument("--vary", default="batch", metavar="SIZES",
                   help="with --model: the sizes the models vary, batch first (batch, or batch,seq; default "
                        "batch); the answer searches the first; micro_batches (or micro_batches,seq): the fewest "
                        "micro-batches the batch of --param batch=B fits in (--accumulate K); with --family: "
                        "batch (the default) or micro_batches, for a family with a batch size")
    s.set_defaults(func=run)


def run(args) -> int:
    """Rank the modelled techniques and knob settings that fit ``--budget`` (from data/models, no
    measurement, no torch); ``--verify`` measures the first; ``--fit`` rebuilds the models.  Bad input
    and a budget nothing meets are one line each, exit 2 (see ``main``)."""
    from ..advisor import AdviceError, advise, verify  # deferred: heavy, CLI startup

    models_dir = Path(args.models) if args.models else None
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
