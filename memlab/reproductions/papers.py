"""Helpers shared by the paper reproductions (in the family folders' ``reproductions/``; not a reproduction itself).

A paper page adds two optional keys to the reproduction contract (:mod:`memlab.reproductions`),
which the site renders generically:

* ``tables``: ``[{"id", "title", "columns": [str], "rows": [[cell]], "note"}]``, e.g. the paper's
  table beside memlab's; cells are strings, numbers or None;
* ``badges``: ``[{"name", "label", "text"}]``, a complexity badge per technique
  (:func:`memlab.core.complexity.badge`).
"""
from __future__ import annotations

from typing import Any, Iterable

from ..core.complexity import badge, fit_groups
from ..core.units import MiB

__all__ = ["activation", "mib", "ratio", "badges", "table", "BATCH_NOTE"]

BATCH_NOTE = ("Activation bytes are linear in the batch (every saved map is [B, C, H, W]), so the activation "
              "ratios do not depend on it; time ratios depend on it only through how well small "
              "convolutions use the CPU.")


def activation(m) -> int | None:
    """The measured activation peak (bytes): saved activations + temporaries in forward and backward."""
    return None if m is None or m.status != "ok" else m.extra.get("activation_peak_bytes")


def mib(b: int | float | None, digits: int = 2) -> float | None:
    return None if b is None else round(b / MiB, digits)


def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    return None if a is None or b in (None, 0) else round(a / b, digits)


def badges(measurements: Iterable[Any], names: Iterable[str]) -> list[dict[str, Any]]:
    """A complexity badge per technique: exponent of the activation peak against blocks (3n)."""
    rows = [m.to_dict() for m in measurements]
    fits = fit_groups(rows, x=lambda r: r["extra"]["blocks"], y=lambda r: r["extra"]["activation_peak_bytes"])
    out = []
    for name in names:
        if name in fits:
            b = badge(fits[name])
            out.append({"name": name, "label": b.label, "text": b.text, "exponent": round(fits[name].exponent, 4),
                        "r2": round(fits[name].r2, 4), "span": fits[name].span})
    return out


def table(id_: str, title: str, columns: list[str], rows: list[list[Any]], note: str = "") -> dict[str, Any]:
    return {"id": id_, "title": title, "columns": columns, "rows": rows, "note": note}


def paper_report(verdict: str, summary: list[str], measurements: Iterable[Any], tables: list[dict[str, Any]],
                 figure: dict[str, Any], **more: Any) -> dict[str, Any]:
    """A paper page's report dict (the shape every paper reproduction writes): ``verdict``, ``summary``
    lines, the ``measurements`` as dicts, no timelines, its paper-and-ours ``tables`` and ``figure``;
    ``more``: the page's own keys (``badges``, ``badge_axis``, ``loss_heads``...)."""
    return {"verdict": verdict, "summary": summary, "measurements": [m.to_dict() for m in measurements],
            "timelines": [], "tables": tables, **more, "figure": figure}
