"""Seed reproductions: one module per user report in ``shared/seeds/`` or per paper.

A reproduction belongs to the family whose techniques it measures: it is a module of that family
folder's ``reproductions/`` sub-package, ``memlab/families/<family>/reproductions/<name>.py``
(:func:`memlab.registry.reproduction_modules`; a plug-in family folder's are found the same way),
so a family folder carries its own.  This package finds and runs them; :mod:`.papers` holds the
helpers the paper pages share.

Contract of a reproduction module (auto-discovered; a name starting with ``_`` is a helper)::

    SEED = "chunked-slicing-backward-spike"   # stem of the report file in shared/seeds/
    TITLE = "For loop on slices creates multiple intermediate gradients"
    CLAIM = "one line: what the user claimed"
    SETTLES = "what the page settles"         # optional: the seed page's title, TITLE beneath it

    def reproduce(quick: bool = False) -> dict: ...

Optional hooks the general layers call (a seed's own question stays in its module, never behind a
seed-name ``if`` elsewhere)::

    def cuda_variants(confs: tuple[str, ...], quick: bool = False) -> dict: ...
        # extra keys of data/cuda-variants/<SEED>.json (memlab.cuda.variants)
    CUDA_ANSWER_TECHNIQUE = "slice_loop"   # the technique that answer is about (memlab.site.cuda)

``reproduce`` runs memlab measurements (CPU, subprocess-isolated) and returns a JSON-serialisable
dict with at least::

    {"verdict": "reproduced" | "not reproduced on this device" | "reproduced with caveat",
     "summary": "a few sentences with the numbers",
     "measurements": [Measurement.to_dict(), ...],
     "timelines": [Timeline.to_dict(), ...],          # may be empty
     "figure": {"type": "bar" | "line", "title": str, "x_label": str, "y_label": str,
                "x": [...], "series": {"name": [y values]}, "log_x": bool, "log_y": bool}}

:func:`run_all` writes ``<SEED>.json`` per module into a folder (``data/reproductions`` in the
repository), atomically, adding ``seed``, ``title``, ``claim`` and ``environment``.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Callable

from ..core.atomic import write_text_atomic
from .. import registry  # its functions are looked up when called (the tests patch them)

__all__ = ["list_reproductions", "find_reproduction", "run_all", "run_one"]


def list_reproductions() -> dict[str, ModuleType]:
    """Reproduction modules by SEED, in the order of their module names (``chen_...``, ``chunked_...``),
    of every family folder (built-in and plug-in: :func:`memlab.registry.discover` loads
    ``MEMLAB_PLUGINS`` first; imports torch).

    Raises:
        ValueError: two modules declare the same ``SEED``; the message names both.
    """
    registry.discover()
    mods: dict[str, ModuleType] = {}
    for name, _ in sorted(registry.reproduction_modules(), key=lambda m: (m[0].rsplit(".", 1)[-1], m[0])):
        mod = importlib.import_module(name)
        if not (hasattr(mod, "SEED") and hasattr(mod, "reproduce")):
            continue
        if mod.SEED in mods:
            raise ValueError(f"seed {mod.SEED!r} is declared by two reproductions: {mods[mod.SEED].__name__} and "
                             f"{name}; give one another SEED")
        mods[mod.SEED] = mod
    return mods


def find_reproduction(seed: str) -> ModuleType | None:
    """The reproduction module whose ``SEED`` is ``seed``, or None."""
    return list_reproductions().get(seed)


def run_one(mod: ModuleType, out_dir: Path, quick: bool = False) -> Path:
    import torch  # deferred: torch line

    from ..measurement.environment import environment  # deferred: torch line

    data = dict(mod.reproduce(quick=quick))
    data.update(seed=mod.SEED, title=mod.TITLE, claim=mod.CLAIM, quick=quick,
                environment=environment(torch.device("cpu")))
    path = Path(out_dir) / f"{mod.SEED}.json"
    write_text_atomic(path, json.dumps(data, sort_keys=True, indent=1))
    return path


def run_all(out_dir: Path, quick: bool = False, only: list[str] | None = None,
            progress: Callable[[str], None] = lambda s: None) -> list[Path]:
    paths = []
    for seed, mod in list_reproductions().items():
        if only and seed not in only:
            continue
        progress(f"reproducing {seed} ...")
        paths.append(run_one(mod, out_dir, quick))
    return paths
