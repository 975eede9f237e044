"""One colour per technique, a function of its name (NOTE [ one visual language ] in
:mod:`memlab.site.figures`).

A family's techniques have fixed colours, declared in its folder's ``meta.py`` (``COLORS``: a name of
:data:`NAMED` per technique, the baseline "baseline" grey, the others distinct within the family) and
read through the registry without importing torch (:func:`memlab.registry.family_meta`):
:data:`BUILTIN_COLORS` for the built-in families, and a plug-in family folder's in ``MEMLAB_PLUGINS``.
Any other name (a one-file plug-in's, a test's) takes one of :data:`HASHED_COLORS`, chosen by a stable
hash of the name, so it never moves a built-in's colour, never takes one of them and is never the
baselines' grey.  The same name has the same colour on every page of every build, whatever else the
build reads.
"""
from __future__ import annotations

import functools
import hashlib
import os
from typing import Iterable

from ..registry import builtin_families, family_meta, read_family_meta

__all__ = ["BASELINE_COLOR", "BUILTIN_COLORS", "HASHED_COLORS", "NAMED", "PALETTE", "technique_color",
           "technique_colors"]

#: The no-savings baseline of a family, on every chart.
BASELINE_COLOR = "#7f7f7f"
_BLUE, _RED, _GREEN, _ORANGE, _PURPLE, _BROWN = "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"
#: three more for the family with nine techniques beside its baseline (transformer)
_NAVY, _TEAL, _GOLD = "#08306b", "#006d5b", "#b8860b"
#: and four for its peers (torchtune, cut-cross-entropy, Hugging Face GPT-2 with and without checkpointing)
_PLUM, _CRIMSON, _FOREST, _SIENNA = "#762a83", "#a50f15", "#00441b", "#a6611a"
#: the colours a family's ``meta.py`` names
NAMED: dict[str, str] = {
    "baseline": BASELINE_COLOR, "blue": _BLUE, "red": _RED, "green": _GREEN, "orange": _ORANGE, "purple": _PURPLE,
    "brown": _BROWN, "navy": _NAVY, "teal": _TEAL, "gold": _GOLD, "plum": _PLUM, "crimson": _CRIMSON,
    "forest": _FOREST, "sienna": _SIENNA,
}


def _colors_of(metas) -> dict[str, str]:
    """``{technique: colour}`` the families' ``meta.py`` declare.

    Raises:
        ValueError: a colour that is not a name of :data:`NAMED`; the message names the family.
    """
    out = {}
    for meta in metas:
        for technique, name in meta.colors.items():
            if name not in NAMED:
                raise ValueError(f"family {meta.name!r} ({meta.folder}/meta.py): colour {name!r} of {technique!r} "
                                 f"is not one of {', '.join(NAMED)}")
            out[technique] = NAMED[name]
    return out


#: memlab's own techniques (and the reproductions' own), from the built-in families' ``meta.py``
BUILTIN_COLORS: dict[str, str] = _colors_of(read_family_meta(n, f) for n, f in builtin_families())
#: Colours for every other technique: none a built-in's, none grey.
HASHED_COLORS = ("#e377c2", "#17becf", "#bcbd22", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173",
                 "#3182bd", "#e6550d")
#: Every colour a technique may take but the baselines' grey (the browser test: no other series in one).
PALETTE = (_BLUE, _RED, _GREEN, _ORANGE, _PURPLE, _BROWN, _NAVY, _TEAL, _GOLD, _PLUM, _CRIMSON, _FOREST,
           _SIENNA) + HASHED_COLORS


@functools.lru_cache(maxsize=8)
def _declared(plugins: str) -> dict[str, str]:
    """The colours every family folder declares, the plug-in folders of ``plugins`` (``MEMLAB_PLUGINS``) too."""
    return _colors_of(family_meta({"MEMLAB_PLUGINS": plugins}).values())


def technique_color(name: str) -> str:
    """``name``'s colour: its fixed one when its family folder declares one (built in, or a plug-in
    family folder in ``MEMLAB_PLUGINS``), else one of :data:`HASHED_COLORS` by a stable hash of the
    name (sha256: the same in every process, unlike ``hash()``)."""
    if name in BUILTIN_COLORS:
        return BUILTIN_COLORS[name]
    declared = _declared(os.environ.get("MEMLAB_PLUGINS", ""))
    if name in declared:
        return declared[name]
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()
    return HASHED_COLORS[int.from_bytes(digest[:4], "big") % len(HASHED_COLORS)]


def technique_colors(names: Iterable[str]) -> dict[str, str]:
    """``{name: technique_color(name)}`` for every name, in sorted order."""
    return {n: technique_color(n) for n in sorted(set(names))}
