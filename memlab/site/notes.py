"""What the overview says beside a winner: one line on why it wins, and footnotes a figure needs.

Pure functions of measurement rows (pandas Series from :func:`memlab.results.load_runs`), returning
plain text (the templates escape it).  Memory in MiB as the tables show it.
"""
from __future__ import annotations

from typing import Iterable

import pandas as pd

from ..core.record import CATEGORY_LABELS, Category
from ..core.record import fmt_mib as _mib
from ..core.record import is_number as _num
from ..registry import family_meta

__all__ = ["CATEGORY_NAMES", "why", "footnotes"]

#: How the memory categories read in text (:class:`memlab.core.record.Category`'s labels).
CATEGORY_NAMES = dict(CATEGORY_LABELS)
#: Categories an activation-memory technique does not change.
_FIXED = tuple(c.value for c in Category if not c.activation)


def _cats(row: pd.Series) -> dict[str, int] | None:
    cats = row["peak_by_category_bytes"]
    return cats if isinstance(cats, dict) and cats else None


def why(winner: pd.Series, base: pd.Series, measure: str) -> str:
    """One line saying why ``winner`` holds least memory at its configuration, or why nothing beats
    the baseline (``winner`` is the baseline's row).

    With memory categories on both rows: the category that shrank most (or, for the baseline, the
    largest category no activation technique changes).  Without (older rows): the gradients' share
    of the baseline's peak when nothing wins, else the bytes saved and the activation peak where
    the rows state it.
    """
    w, b = winner[measure], base[measure]
    if not (_num(w) and _num(b)):
        return ""
    same = winner["technique"] == base["technique"]
    wc, bc = _cats(winner), _cats(base)
    if wc and bc:
        if same:
            name, size = max(((c, bc.get(c, 0)) for c in bc), key=lambda kv: (kv[1], kv[0]))
            fixed = name in _FIXED
            return (f"{CATEGORY_NAMES.get(name, name)} are the largest part of the baseline's peak "
                    f"({_mib(size)} of {_mib(b)})" + ("; no technique here changes them." if fixed else
                                                       "; no technique here holds less of them."))
        drops = {c: bc.get(c, 0) - wc.get(c, 0) for c in set(bc) | set(wc)}
        name = max(drops, key=lambda c: (drops[c], c))
        return (f"{CATEGORY_NAMES.get(name, name)} shrank most: {_mib(bc.get(name, 0))} → {_mib(wc.get(name, 0))} "
                f"at the peak ({_mib(b)} → {_mib(w)} in all).")
    grads = base["grad_bytes"]
    if same:
        if _num(grads) and grads >= 0.5 * b:
            return (f"parameter and input gradients ({_mib(grads)}) are {grads / b:.0%} of the baseline's peak "
                    f"({_mib(b)}): a technique that saves activations cannot shrink them.")
        return f"no technique here holds less than the baseline's {_mib(b)} at its peak."
    line = f"its peak holds {_mib(b - w)} less than the baseline's ({_mib(b)} → {_mib(w)})"
    wa, ba = winner["activation_peak_bytes"], base["activation_peak_bytes"]
    if _num(wa) and _num(ba):
        line += f"; activation peak {_mib(ba)} → {_mib(wa)}"
    return line + "."


def _matches(row, when: tuple[str, ...]) -> bool:
    """True when ``row`` (a named tuple of a rows frame) has one of ``when``: ``"extra.KEY"`` truthy or
    ``"params.KEY"`` True; an empty ``when`` matches every row."""
    for key in when:
        where, _, name = key.partition(".")
        values = getattr(row, where, None)
        value = values.get(name) if isinstance(values, dict) else None
        if (value is True) if where == "params" else bool(value):
            return True
    return not when


def _note(rows: pd.DataFrame, technique: str, note: dict) -> str | None:
    """The text of one ``SITE_NOTES`` entry (:class:`memlab.registry.FamilyMeta`) for ``rows``: None when
    no row of ``technique`` matches its ``when``; each ``{KEY}`` of its text is the first matching row's
    ``extra[KEY]`` that is set, else its ``fill[KEY]``."""
    used = [r for r in rows.itertuples() if r.technique == technique and _matches(r, note["when"])]
    if not used:
        return None
    text = note["text"]
    for key, default in note["fill"].items():
        value = next((r.extra.get(key) for r in used if isinstance(r.extra, dict) and r.extra.get(key)), default)
        text = text.replace("{" + key + "}", str(value))
    return text


def footnotes(rows: pd.DataFrame, shown: Iterable[str] | None = None) -> list[dict[str, str]]:
    """``[{"technique", "text"}]``: the notes the family folders' ``meta.py`` declare (``SITE_NOTES``,
    :func:`memlab.registry.family_meta`: built-in and ``MEMLAB_PLUGINS`` folders) for techniques in
    ``rows`` (all of them, or those in ``shown``), in a fixed order: by family, then as declared."""
    shown = set(rows["technique"]) if shown is None else set(shown)
    out = []
    for meta in family_meta().values():
        for technique, note in meta.site_notes.items():
            if technique in shown:
                text = _note(rows, technique, note)
                if text:
                    out.append({"technique": technique, "text": text})
    return out
