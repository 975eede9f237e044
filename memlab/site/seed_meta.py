"""What each reproduction module says about its own page, read from the module's source.

A reproduction module (:mod:`memlab.reproductions`: a module of a family folder's ``reproductions/``,
:func:`memlab.registry.reproduction_folders`) names its page: ``SEED`` (the report it
reproduces), ``TITLE`` (the report's own title), optionally ``SETTLES`` (what the page settles: the
seed page's title, with the report's title beneath) and ``CUDA_ANSWER_TECHNIQUE``.  The site reads
these string constants with :mod:`ast` instead of importing the modules: a reproduction module may
import torch (``tt_layer_memory`` does), and the site never does.  Only top-level assignments of a
string literal count; a module that cannot be parsed gives nothing.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

from ..registry import reproduction_folders

__all__ = ["FIELDS", "seed_metadata", "page_titles"]

#: the module constants the site reads
FIELDS = ("SEED", "TITLE", "SETTLES", "CUDA_ANSWER_TECHNIQUE")


def _constants(path: Path) -> dict[str, str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return {}
    out = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name in FIELDS and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out[name] = node.value.value
    return out


@functools.lru_cache(maxsize=4)
def _all(folders: tuple[str, ...]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for path in sorted(p for folder in folders for p in Path(folder).glob("*.py")):
        if path.name.startswith("_"):
            continue
        consts = _constants(path)
        if consts.get("SEED"):
            out.setdefault(consts["SEED"], consts)
    return out


def _folders(folder: Path | None) -> tuple[str, ...]:
    """``folder``, or every family folder's reproductions (built-in and ``MEMLAB_PLUGINS``)."""
    return (str(folder),) if folder is not None else tuple(str(f) for _, f in reproduction_folders())


def seed_metadata(seed: str, folder: Path | None = None) -> dict[str, str]:
    """The :data:`FIELDS` the module whose ``SEED`` is ``seed`` assigns (``{}`` when none does), among
    the modules of ``folder`` (default: every family folder's ``reproductions/``)."""
    return dict(_all(_folders(folder)).get(seed, {}))


def page_titles(seed: str, report_title: str, folder: Path | None = None) -> tuple[str, str]:
    """``(title, beneath)`` of a seed page: what it settles and the report's title (``report_title``,
    from the reproduction file) when the module says what it settles; else the report's title alone
    and ``""``."""
    settles = seed_metadata(seed, folder).get("SETTLES", "").strip()
    if not settles or settles == report_title:
        return report_title, ""
    return settles, report_title
