"""Add each family's advisor declaration, and the kernels it holds for, to model files fitted before either.

``python -m memlab.advisor.migrate [DIR]`` (default ``data/models``) reads every
``cpu-float32-*.json``, and for each family without a ``declaration`` writes the registered one
(:meth:`memlab.core.declaration.Declaration.to_json`) beside the fitted numbers, which are left
as they are: the file is rewritten in the fit's own layout (``json.dumps(indent=1, sort_keys=True)``)
so the diff is the added declarations only.  Deterministic and idempotent (a second run changes
nothing).  The declaration must describe what was fitted: its workload, sizes, fixed parameters and
entries (labels, fixed parameters, knobs) must equal the file's, else the file is left alone and the
mismatch is named.

A family fitted before models recorded their kernels gets ``host_dependent`` (whether its step runs
oneDNN kernels, from a trace) and ``kernel_host`` (NOTE [ host-dependent bytes ] in :mod:`memlab.core.host`).
The kernels recorded are this process's, so run the migration only on a host where the model is exact
(``tests/test_advisor_stale.py`` passes): that is the evidence that it holds for this host's kernels.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.atomic import write_text_atomic
from ..core.declaration import Declaration
from .model import MODELS_DIR
from ..core.setting import DEFAULTS
from .fit import declaration_of as fitted_declaration_of
from .fit import kernels_of

__all__ = ["migrate_file", "migrate_dir", "mismatch"]


def mismatch(decl: Declaration, fam: Mapping[str, Any]) -> str | None:
    """How ``decl`` differs from what the model file's family ``fam`` was fitted with (None: agrees)."""
    if fam.get("workload") != decl.workload:
        return f"workload {fam.get('workload')!r} in the file, {decl.workload!r} declared"
    if set(fam.get("sizes") or {}) != set(decl.sizes):
        return f"sizes {sorted(fam.get('sizes') or {})} in the file, {list(decl.sizes)} declared"
    as_json = decl.to_json()  # the file's values are JSON's: a mode tuple reads back as a list
    if dict(fam.get("workload_fixed") or {}) != as_json["workload_fixed"]:
        return f"workload_fixed {fam.get('workload_fixed')!r} in the file, {dict(decl.workload_fixed)!r} declared"
    fitted = [(e.get("label"), e.get("technique"), dict(e.get("fixed") or {}), list(e.get("knobs") or []))
              for e in fam.get("entries") or []]
    declared = [(e.label, j["technique"], j["fixed"], j["knobs"]) for e, j in zip(decl.entries, as_json["entries"])]
    if fitted != declared:
        return f"entries {[f[0] for f in fitted]} in the file, {[d[0] for d in declared]} declared"
    return None


def migrate_file(path: Path, declaration_of: Callable[[str], Declaration],
                 kernels: Callable[[Declaration, str], dict[str, Any]] | None = None) -> list[str]:
    """Add the missing declarations (and, with ``kernels``, the missing kernel records: ``name (kernels)``)
    to one model file; return the families added.

    Raises:
        ValueError: a family whose registered declaration does not describe its fitted models.
    """
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    added = []
    for name, fam in sorted(data.get("families", {}).items()):
        if "host_dependent" not in fam and kernels is not None:
            fam.update(kernels(declaration_of(name), data.get("optimizer", DEFAULTS.optimizer)))
            added.append(f"{name} (kernels)")
        if "declaration" in fam:
            continue
        decl = declaration_of(name)
        why = mismatch(decl, fam)
        if why:
            raise ValueError(f"{path}: family {name!r} was fitted with another declaration ({why}); refit it with "
                             f"memlab advise --fit --family {name}")
        fam["declaration"] = decl.to_json()
        added.append(name)
    if added:
        write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return added


def migrate_dir(directory: Path = MODELS_DIR, declaration_of: Callable[[str], Declaration] | None = None
                ) -> dict[str, list[str]]:
    """:func:`migrate_file` on every ``cpu-float32-*.json`` under ``directory``: ``{file name: families added}``."""
    if declaration_of is None:
        declaration_of = fitted_declaration_of
    return {p.name: migrate_file(p, declaration_of, kernels_of)
            for p in sorted(Path(directory).glob("cpu-float32-*.json"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memlab.advisor.migrate", description=__doc__.split("\n")[0])
    parser.add_argument("directory", nargs="?", default=str(MODELS_DIR), help="models directory (default data/models)")
    args = parser.parse_args(argv)
    try:
        done = migrate_dir(Path(args.directory))
    except ValueError as exc:
        print(f"memlab: {exc}", file=sys.stderr)
        return 2
    for name, families in done.items():
        print(f"{name}: {'added ' + ', '.join(families) if families else 'nothing to add'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
