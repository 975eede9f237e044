"""One page being built: unique anchors for permalinks, charts, tables and the files beside it.

Every section, chart and table of a page gets an ``id`` made from its heading (lower case, ``a-z0-9_-``),
unique within the page (``-2``, ``-3`` ... on a repeat), so a link to ``page.html#id`` survives a
rebuild from the same data.  Charts are ``{"id", "title", "caption", "figure"}`` (``figure`` the
canonical JSON; a figure that would draw nothing has ``absent``, the reason shown in its place);
tables come from :func:`memlab.site.tables.table` and their downloads are collected in
:attr:`Page.files` (written beside the pages by :mod:`memlab.site.render`).
"""
from __future__ import annotations

import re
from typing import Any

from . import figures as F
from .tables import table

__all__ = ["Page", "slug"]


def slug(text: str, limit: int = 100) -> str:
    """``text`` as an anchor: lower case, runs of other characters as ``-``, at most ``limit`` long."""
    return re.sub(r"[^a-z0-9_]+", "-", str(text).lower()).strip("-")[:limit].strip("-") or "x"


class Page:
    """Anchors, charts and tables of the page at ``path`` (``family-x.html``)."""

    def __init__(self, path: str):
        self.path = path
        self.files: dict[str, str] = {}
        self._ids: set[str] = set()

    def anchor(self, text: str) -> str:
        """A new id for ``text``, unique on this page."""
        base = slug(text)
        out, k = base, 2
        while out in self._ids:
            out, k = f"{base}-{k}", k + 1
        self._ids.add(out)
        return out

    def chart(self, figure: dict, title: str, caption: str = "", anchor: str | None = None,
              absent: str = "") -> dict[str, str]:
        """A chart headed ``title`` (HTML, with a permalink; plotly draws no title).

        A figure that draws nothing (:func:`memlab.site.figures.draws_data`: every series empty or 0)
        is not drawn: the chart is ``{"id", "title", "absent", "caption": "", "figure": ""}``, where
        ``absent`` is one line saying why (the caller's, else a general one), shown in its place.
        """
        chart_id = self.anchor(anchor or title)
        if not F.draws_data(figure):
            why = absent or "every series in it is empty or 0 here, so there is nothing to draw."
            return {"id": chart_id, "title": title, "caption": "", "figure": "", "absent": why}
        return {"id": chart_id, "title": title, "caption": caption, "figure": F.to_json(F.fit_legend(figure))}

    def table(self, name: str, columns: list[dict[str, Any]], rows: list[dict[str, Any]],
              records: list[dict[str, Any]]) -> dict[str, Any]:
        """A table (see :mod:`memlab.site.tables`) whose CSV and JSON downloads go beside this page."""
        t = table(self.path, self.anchor(name), columns, rows, records)
        self.files.update(t.pop("files"))
        return t

    def done(self, page: dict[str, Any]) -> dict[str, Any]:
        """``page`` with the files collected here."""
        return {**page, "files": dict(sorted(self.files.items()))}
