"""What the overview says beside a winner: one line on why it wins, and footnotes a figure needs.

Pure functions of measurement rows (pandas Series from :func:`memlab.results.load_runs`), returning
plain text (the templates escape it).  Memory in MiB as the tables show it.
"""
from __future__ import annotations

from typing import Iterable

import pandas as pd

from ..record import CATEGORY_LABELS, Category
from ..record import fmt_mib as _mib
from ..record import is_number as _num

__all__ = ["CATEGORY_NAMES", "why", "footnotes"]

#: How the memory categories read in text (:class:`memlab.record.Category`'s labels).
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


def _einsum(rows: pd.DataFrame) -> str | None:
    used = [r for r in rows.itertuples() if r.technique == "einsum_chunk"
            and (r.extra.get("opt_einsum_used") or r.params.get("opt_einsum") is True)]
    if not used:
        return None
    order = next((r.extra.get("contraction_order") for r in used if r.extra.get("contraction_order")), "x @ (w1 @ w2)")
    return (f"einsum_chunk with opt_einsum: opt_einsum reorders the contraction to {order}, computing w1 @ w2 "
            "(a [d, d] matrix) first instead of the [n, hidden] hidden layer, so its memory and speed reflect that "
            "reordering, not chunking; rows with opt_einsum=False contract in the written order.")


def _memcnn(rows: pd.DataFrame) -> str | None:
    if not (rows["technique"] == "memcnn").any():
        return None
    return ("memcnn (peer): MemCNN 1.5.2's InvertibleModuleWrapper returns the input's gradient doubled when the "
            "input requires grad (a known defect; parameter gradients are right), so its rows fail the reference "
            "check and are listed under Not ranked, never called best.")


_NOTES = (("einsum_chunk", _einsum), ("memcnn", _memcnn))


def footnotes(rows: pd.DataFrame, shown: Iterable[str] | None = None) -> list[dict[str, str]]:
    """``[{"technique", "text"}]``: the known notes for techniques in ``rows`` (all of them, or those in
    ``shown``), in a fixed order."""
    shown = set(rows["technique"]) if shown is None else set(shown)
    out = []
    for technique, note in _NOTES:
        if technique in shown:
            text = note(rows)
            if text:
                out.append({"technique": technique, "text": text})
    return out
