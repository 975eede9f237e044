"""The words around a sharded answer (``memlab advise --shard-strategy``): what one sample is, what
the fit rests on, how its held-out checks came out; torch-free."""
from __future__ import annotations

from fractions import Fraction

__all__ = ["unit_of", "fit_text", "check_lines", "doubts"]


def unit_of(row: dict) -> str:
    """What one sample of the per-rank batch is, from a row's sizes: ``rows of width 32`` (mlp) or
    ``sequences of 16 tokens`` (the transformer, a model file: the seq its runs took)."""
    sizes = row["sizes"]
    if sizes.get("model") == "mlp":
        return f"rows of width {sizes['dim']}"
    return f"sequences of {sizes['seq']} tokens"


def fit_text(f, label: str, rows: list[dict], source: str, ans: dict) -> str:
    """One line: the fit worlds with their per-rank batches, where the rows came from, whether every
    category of the phase that peaks reproduced its fit points exactly, and how far b reaches beyond
    the fitted batches."""
    pts = sorted({(r["world"], r["batch_per_rank"]) for r in rows})
    used = [(n, b) for n, b in pts if n > 1 or not label.startswith("fsdp")]
    phase = ans["at_b"]["phase"]
    fits = f.categories[label][phase]
    inexact = {c: [str(x) for x in cf.residuals if x] for c, cf in fits.items() if not cf.exact}
    exact = (f"every category of {phase}, the peak's phase, reproduces its fit points to the byte" if not inexact
             else f"NOT exact in {phase}, the peak's phase: residuals (bytes) {inexact}")
    most = max(b for _, b in used)
    reach = ans["batch_per_rank"] / most if most else 0
    far = f"; b is {reach:,.0f}x the largest fitted per-rank batch: the affine fit extrapolated" if reach > 2 else ""
    return (f"N = {', '.join(f'{n} (b = {b})' for n, b in used)}, rows from {source}; {exact}{far}")


def check_lines(checks: list[dict]) -> list[str]:
    """One line per held-out world: every rank's measured peak (less DDP's rebuild leftover) minus
    the prediction."""
    out = []
    for n in sorted({c["world"] for c in checks}):
        diffs = [Fraction(c["diff"]) for c in checks if c["world"] == n]
        if not any(diffs):
            out.append(f"checked at N = {n}: all {len(diffs)} ranks measured = predicted, to the byte")
        else:
            lo, hi = min(diffs), max(diffs)
            out.append(f"checked at N = {n}: measured - predicted {float(lo):+,.0f}..{float(hi):+,.0f} B per rank")
    return out or ["no held-out check (--check-worlds none, or no rows there)"]


def doubts(f, label: str, ans: dict, checks: list[dict]) -> list[str]:
    """Why the answer is not to be trusted, one line each (none: every category of the peak's phase
    fitted exactly, every held-out rank predicted to the byte, no category predicted negative)."""
    out = []
    phase = ans["at_b"]["phase"]
    inexact = [c for c, cf in f.categories[label][phase].items() if not cf.exact]
    if inexact:
        out.append(f"the fit of {phase} (the peak's phase) is not exact in {', '.join(inexact)}: the buffers "
                   f"at its highest point differ between the fit points")
    missed = sorted({c["world"] for c in checks if Fraction(c["diff"])})
    if missed:
        out.append(f"the held-out check at N = {', '.join(map(str, missed))} missed")
    negative = [c for c, v in ans["at_b"].items() if c not in ("peak", "phase", "rank") and v < 0]
    if negative:
        out.append(f"{', '.join(negative)} predicted negative at b: the fit does not hold there")
    return out
