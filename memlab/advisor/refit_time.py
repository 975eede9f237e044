"""Refit a model file's time models from the time points it stores, measuring nothing.

``python -m memlab.advisor.refit_time [--family NAME] [--optimizer OPT] [DIR]`` (default ``data/models``)
reads ``cpu-float32-<optimizer>.json`` and, for each family (or only ``--family``), puts the registered
declaration in the file and refits every entry's time model from its stored points with the fit's own
code, in the fit's order: each entry's model (:func:`memlab.advisor.fit.time_model`), the baseline's
pooled cost of a family of work components, then the page-fault term
(:func:`memlab.advisor.fit.fault_term`).  Memory models, held-out rows and every measured figure are
left as they are; the file is rewritten in the fit's layout, so the diff is the time models, the
declaration and, on a family whose time models changed, ``time_refitted`` (:data:`REFIT_NOTE`).
Deterministic and idempotent: a family whose models the refit reproduces is written back unchanged.

Use it when the time model's form changes and its points stay valid (NOTE [ per-chunk costs ] in
:mod:`memlab.advisor.fit`: a per-chunk size term fitted to the points already measured).  The
declaration's workload, sizes, fixed parameters and entries must equal what the file was fitted with
(:func:`memlab.advisor.migrate.mismatch`), and its time sizes and chunk counts too: the points must be
the ones the declaration would measure, else the family is left alone and the difference is named.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.atomic import write_text_atomic
from ..core.declaration import Declaration
from ..core.setting import DEFAULTS
from .fit import declaration_of, fault_term, pooled_baseline_cost, time_model
from .migrate import mismatch
from .model import MODELS_DIR, models_path

__all__ = ["REFIT_NOTE", "refit_family", "refit_file", "main"]

#: what a refitted family records (``families.<name>.time_refitted``): the same every time, so a second
#: refit changes nothing; the commit that refitted it is the file's git history
REFIT_NOTE = ("time models refitted from the stored time points by python -m memlab.advisor.refit_time; the points "
              "were measured by the fit at the file's memlab_commit")


def _time_points_differ(decl: Declaration, fam: Mapping[str, Any]) -> str | None:
    """How the file's time points' declaration differs from ``decl``'s (None: the same)."""
    stored = fam.get("declaration") or {}
    for key, mine in (("time_sizes", [dict(p) for p in decl.time_sizes]), ("time_chunks", list(decl.time_chunks)),
                      ("time_only_sizes", [dict(p) for p in decl.time_only_sizes]), ("work", decl.to_json()["work"])):
        if (stored.get(key) or ([] if key != "work" else None)) != mine:
            return f"{key} {stored.get(key)!r} in the file, {mine!r} declared: the stored points are not the declared ones"
    return None


def refit_family(decl: Declaration, fam: dict[str, Any], *, say: Callable[[str], None] = print) -> str | None:
    """Refit ``fam`` (one family of a model file) in place from its stored time points under ``decl``;
    None when done, else why it was left alone."""
    why = mismatch(decl, fam) or _time_points_differ(decl, fam)
    if why:
        return why
    entries = fam["entries"]
    before = json.dumps([e.get("time") for e in entries], sort_keys=True)
    for e in entries:
        points = (e.get("time") or {}).get("points")
        if points:
            for p in points:  # fault_term derives these again at the family's page-fault cost
                p.pop("mmap_bytes", None)
                p.pop("baseline_mmap_bytes", None)
            entry = decl.entry(e["label"])
            e["time"] = time_model(decl.for_entry(entry), entry, points)
    pooled_baseline_cost(decl, entries, say=say)
    fault_term(decl, entries, say=say)
    fam["declaration"] = decl.to_json()
    if json.dumps([e.get("time") for e in entries], sort_keys=True) != before:
        fam["time_refitted"] = REFIT_NOTE  # only where a time model changed: a refit of a refit adds nothing
    return None


def refit_file(path: Path, families: tuple[str, ...] | None = None, *,
               declaration_for: Callable[[str], Declaration] = declaration_of,
               say: Callable[[str], None] = print) -> dict[str, str]:
    """Refit ``path``'s families (or ``families``) and rewrite it when any was refitted; returns
    ``{family: why it was left alone}``.

    Raises:
        ValueError: a family named in ``families`` that the file does not hold.
    """
    data = json.loads(path.read_text())
    held = data.get("families") or {}
    unknown = sorted(set(families or ()) - set(held))
    if unknown:
        raise ValueError(f"{path}: no family {', '.join(map(repr, unknown))}; it holds {', '.join(sorted(held))}")
    left: dict[str, str] = {}
    for name in families or sorted(held):
        say(f"{path.name}: {name}")
        why = refit_family(declaration_for(name), held[name], say=lambda s: say("  " + s))
        if why:
            left[name] = why
            say(f"  left alone: {why}")
    if len(left) < len(families or held):
        write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memlab.advisor.refit_time", description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=MODELS_DIR)
    parser.add_argument("--optimizer", action="append", default=None,
                        help=f"the model file's optimizer (repeatable; default: {DEFAULTS.optimizer} and adam)")
    parser.add_argument("--family", action="append", default=None, help="refit only this family (repeatable)")
    args = parser.parse_args(argv)
    status = 0
    for optimizer in args.optimizer or [DEFAULTS.optimizer, "adam"]:
        path = models_path(optimizer, args.directory)
        if not path.exists():
            parser.error(f"no model file {path}")
        try:
            left = refit_file(path, tuple(args.family) if args.family else None)
        except ValueError as exc:
            parser.error(str(exc))
        status = status or int(bool(left))
    return status


if __name__ == "__main__":
    sys.exit(main())
