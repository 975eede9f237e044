"""``python -m memlab.sharding --strategy ddp|zero1|fsdp [--no-reshard] --world N [--model mlp|transformer] [--json]``,
and ``python -m memlab.sharding predict ...`` (:mod:`memlab.sharding.predict_cli`).

Runs the sharded step (:mod:`memlab.sharding`) on ``N`` processes and prints one line per rank
(:func:`memlab.sharding.report.rank_line`), or with ``--json`` one JSON object per rank (the figures,
the formula and the named differences).  Exit status 1 when a rank's step does not match the
single-process reference.
"""
from __future__ import annotations

import argparse
import json
import sys

from .formulas import STRATEGIES
from .launch import MAX_WORLD, run_sharded
from .model import MODELS, Sizes
from .predict_cli import main as predict_main
from .report import rank_line, with_formula


def _model(value: str) -> str:
    if value in MODELS or value.endswith(".py"):
        return value
    raise argparse.ArgumentTypeError(f"model={value!r} is not valid; valid: {', '.join(MODELS)} or a model file (*.py)")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m memlab.sharding",
                                description="Each rank's exact peak bytes under DDP, ZeRO-1 and FSDP2.")
    p.add_argument("--strategy", choices=STRATEGIES, action="append",
                   help="repeatable; default: all three (fsdp with and without --no-reshard's setting)")
    p.add_argument("--no-reshard", action="store_true", help="fsdp: reshard_after_forward=False")
    p.add_argument("--world", type=int, default=2, help=f"ranks, 1..{MAX_WORLD} (default 2)")
    p.add_argument("--model", type=_model, action="append",
                   help="mlp, transformer or a model file (*.py, e.g. examples/gpt2.py); repeatable; default: mlp")
    p.add_argument("--dim", type=int, default=Sizes.dim, help="width D (both models)")
    p.add_argument("--hidden", type=int, default=Sizes.hidden, help="mlp: hidden width F")
    p.add_argument("--layers", type=int, default=Sizes.layers)
    p.add_argument("--batch", type=int, default=Sizes.batch, help="global rows or sequences (a multiple of --world)")
    p.add_argument("--seq", type=int, default=Sizes.seq, help="transformer: tokens per sequence T")
    p.add_argument("--vocab", type=int, default=Sizes.vocab, help="transformer: vocabulary V")
    p.add_argument("--heads", type=int, default=Sizes.heads, help="transformer: attention heads")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu: gloo; cuda: nccl (untested)")
    p.add_argument("--json", action="store_true", help="one JSON object per rank")
    return p.parse_args(argv)


def plan_of(args: argparse.Namespace) -> list[tuple[str, bool]]:
    """The ``(strategy, reshard_after_forward)`` runs the options ask for."""
    if args.strategy:
        return [(s, not args.no_reshard) for s in dict.fromkeys(args.strategy)]
    return [(s, True) for s in STRATEGIES] + [("fsdp", False)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["predict"]:
        return predict_main(argv[1:])
    args = parse(argv)
    models = [Sizes(dim=args.dim, hidden=args.hidden, layers=args.layers, batch=args.batch, model=m, seq=args.seq,
                    vocab=args.vocab, heads=args.heads) for m in dict.fromkeys(args.model or ["mlp"])]
    try:
        results = run_sharded(plan_of(args), args.world, models, args.device)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ok = True
    for rows in results:
        for row in rows:
            ok &= row["matches"]
            print(json.dumps(with_formula(row)) if args.json else rank_line(row))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
