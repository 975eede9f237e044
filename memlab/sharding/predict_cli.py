"""``python -m memlab.sharding predict``: fit each rank's peak from runs at some world sizes, check
the prediction against runs at others, and tabulate it for large N (:mod:`memlab.sharding.predict`).

    python -m memlab.sharding predict --model transformer --fit 1,3,6,8 --check 2,4
    python -m memlab.sharding predict --rows data/sharding/transformer-b24.jsonl --fit 1,3,6,8 --check 2,4

Runs the worlds it needs (or reads ``--rows``: JSON Lines of per-rank rows, as ``--save`` writes
them), prints the fit (counts and constants per strategy and category), every checked rank's
measured and predicted peak and their difference in bytes, and the table.  Exit status 1 when a
checked rank's peak differs from its prediction, 2 on a bad option value.
"""
from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from pathlib import Path

from ..core.atomic import write_text_atomic
from .formulas import STRATEGIES
from .model import MODELS, Sizes
from .predict import check, fit, predict_rank
from .sweep_plan import parse_worlds

__all__ = ["main", "parse", "table"]

#: world sizes of the large-N table (per-rank batch fixed)
TABLE_WORLDS = (8, 16, 32, 64, 128, 256, 512, 1024)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m memlab.sharding predict",
                                description="Fit each rank's peak as a function of N; predict other N.")
    p.add_argument("--model", default="transformer", help=f"{', '.join(MODELS)} or a model file (*.py)")
    p.add_argument("--seq", type=int, default=Sizes.seq, help="tokens per sequence (transformer; a model file's batch(seq=))")
    p.add_argument("--batch", type=int, default=24, help="global batch G (a multiple of every world; default 24)")
    p.add_argument("--fit", default="1,3,6,8", help="worlds to fit on (default 1,3,6,8)")
    p.add_argument("--check", default="2,4", help="worlds to predict and compare (default 2,4)")
    p.add_argument("--strategy", choices=STRATEGIES, action="append", help="repeatable; default all three")
    p.add_argument("--rows", type=Path, action="append", help="read per-rank rows (JSON Lines) instead of running")
    p.add_argument("--save", type=Path, help="write the rows run here (JSON Lines)")
    p.add_argument("--table-batch", type=int, default=1, help="per-rank batch of the large-N table (default 1)")
    p.add_argument("--json", action="store_true", help="one JSON object: fit, checks, table")
    return p.parse_args(argv)


def _rows(args, needed: list[int]) -> list[dict]:
    if args.rows:
        rows = [json.loads(line) for f in args.rows for line in f.read_text(encoding="utf-8").splitlines() if line]
        labels = set(args.strategy or STRATEGIES)
        return [r for r in rows if r["world"] in needed and r["model"] == args.model and r["strategy"] in labels]
    from .launch import run_sharded  # deferred: torch line

    sizes = Sizes(model=args.model, batch=args.batch, seq=args.seq)
    plan = [(s, True) for s in (args.strategy or STRATEGIES)]
    rows = [row for n in needed for per in run_sharded(plan, n, sizes) for row in per]
    if args.save:
        write_text_atomic(args.save, "".join(json.dumps(r) + "\n" for r in rows))
    return rows


def table(f, labels: list[str], per_rank_batch: int, ns=TABLE_WORLDS) -> list[dict]:
    """Per label and N: the predicted peak's largest and smallest rank (bytes) at ``per_rank_batch``,
    and rank 0's categories."""
    out = []
    for label in labels:
        for n in ns:
            ranks = [predict_rank(f, label, n, r, per_rank_batch) for r in range(n)]
            peaks = [p["peak"] for p in ranks]
            out.append({"strategy": label, "world": n, "max_rank_peak": _num(max(peaks)),
                        "min_rank_peak": _num(min(peaks)),
                        "rank0": {c: v if c == "phase" else _num(v) for c, v in ranks[0].items()}})
    return out


def _num(x: Fraction):
    return int(x) if x.denominator == 1 else float(x)


def _fit_json(f) -> dict:
    return {label: {phase: {c: {"c0": str(cf.c0), "c1": str(cf.c1), "counts": cf.counts, "exact": cf.exact,
                                "residuals": [str(r) for r in cf.residuals if r], "alternatives": cf.alternatives}
                            for c, cf in cats.items()} for phase, cats in phases.items()}
            for label, phases in f.categories.items()}


def _print(fitj: dict, checks: list[dict], tab: list[dict]) -> None:
    for label, phases in fitj.items():
        for phase, cats in phases.items():
            for c, cf in cats.items():
                alts = cf["alternatives"]
                alt = f"; also exact: {alts[:3]}{' and %d more' % (len(alts) - 3) if len(alts) > 3 else ''}" if alts else ""
                ex = "exact" if cf["exact"] else f"NOT exact, residuals {cf['residuals']}"
                print(f"fit {label} {phase} {c}: {cf['c0']} + {cf['c1']}·b + {cf['counts']} ({ex}{alt})")
    for ch in checks:
        left = f" (less {ch['leftover']:,} B rebuild leftover)" if ch["leftover"] else ""
        print(f"check {ch['strategy']} N={ch['world']} rank {ch['rank']}: measured {ch['measured']:,}{left} predicted "
              f"{ch['predicted']:,} diff {_num(Fraction(ch['diff'])):+,} (peak in {ch['phase']}, "
              f"predicted in {ch['predicted_phase']})")
    for t in tab:
        r0 = " ".join(f"{c} {v:,}" for c, v in t["rank0"].items() if c not in ("peak", "phase"))
        r0 += f", in {t['rank0']['phase']}"
        print(f"table {t['strategy']} N={t['world']}: per-rank peak {t['min_rank_peak']:,}..{t['max_rank_peak']:,} B"
              f" (rank 0: {r0})")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        fit_n, check_n = parse_worlds(args.fit, "--fit"), parse_worlds(args.check, "--check")
        if args.table_batch < 1:
            raise ValueError(f"table-batch={args.table_batch} is not valid; valid: an int >= 1")
        rows = _rows(args, sorted(set(fit_n) | set(check_n)))
        f = fit([r for r in rows if r["world"] in fit_n])
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    checks = check(f, [r for r in rows if r["world"] in check_n])
    for ch in checks:
        ch["diff"] = str(ch["diff"])
    tab = table(f, list(f.categories), args.table_batch)
    if args.json:
        print(json.dumps({"fit": _fit_json(f), "checks": checks, "table": tab}))
    else:
        _print(_fit_json(f), checks, tab)
    return 0 if checks and all(Fraction(ch["diff"]) == 0 for ch in checks) else 1
