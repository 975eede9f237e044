"""Tables as data: columns, cells with a numeric sort value, and the rows as CSV and JSON downloads.

A table is ``{"id", "columns", "rows", "csv", "json", "files"}``:

* ``columns``: ``{"key", "label", "title", "num", "kind"}``; ``num`` columns sort as numbers (each
  cell's ``<key>__sort`` value: bytes, seconds, a ratio; ``None`` sorts last), ``kind`` tells the
  template how to draw a cell (``text``, ``code``, ``tech``, ``status``, ``step``, ``check``).
* ``rows``: one dict per table row with the cells' text (the template escapes it) and what special
  cells need (``peer``, ``is_baseline``, ``under_load``...).
* ``files``: ``{relative path: text}`` of the downloads (``tables/<page>--<id>.csv`` and ``.json``),
  one record per table row in the table's order, with raw values (bytes, seconds) rather than the
  formatted text.  Written beside the pages by :mod:`memlab.site.render`; no network.

Same rows, same bytes: keys keep their order, JSON is sorted and indented, CSV uses ``\\n``.
"""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Sequence

__all__ = ["column", "table", "to_csv", "to_json", "clean", "sort_value"]


def column(key: str, label: str, *, num: bool = False, kind: str = "text", title: str = "") -> dict[str, Any]:
    """A column: ``key`` in each row, ``label`` in the header, ``title`` its tooltip."""
    return {"key": key, "label": label, "num": num, "kind": kind, "title": title}


def sort_value(v: Any) -> int | float | None:
    """A cell's numeric sort value: a finite number (whole numbers as int, so ``data-sort`` reads
    ``13631488``), or None (sorts last)."""
    if v is None or isinstance(v, (bool, str)):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return int(f) if f.is_integer() and abs(f) < 2 ** 53 else f


def clean(v: Any) -> Any:
    """A JSON-safe value: NaN/Infinity and pandas' missing values -> None, numpy scalars -> Python,
    tuples -> lists, dict keys -> strings."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (int, float)):
        try:
            v = v.item()
        except (TypeError, ValueError):
            return str(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, int):
        return v
    return str(v)


def _csv_cell(v: Any) -> str:
    v = clean(v)
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    return str(v)


def to_csv(records: Sequence[dict[str, Any]]) -> str:
    """Records as CSV: a header of every key (first-seen order), one line per record."""
    keys: dict[str, None] = {}
    for r in records:
        keys.update(dict.fromkeys(r))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(keys))
    for r in records:
        writer.writerow([_csv_cell(r.get(k)) for k in keys])
    return out.getvalue()


def to_json(records: Sequence[dict[str, Any]]) -> str:
    """Records as a JSON array (sorted keys, one level of indentation, no NaN)."""
    return json.dumps([clean(r) for r in records], sort_keys=True, indent=1, allow_nan=False,
                      ensure_ascii=False) + "\n"


def table(page_path: str, table_id: str, columns: list[dict[str, Any]], rows: list[dict[str, Any]],
          records: list[dict[str, Any]]) -> dict[str, Any]:
    """A table of ``page_path`` (``family-x.html``) with id ``table_id`` and its downloads.

    Raises:
        ValueError: ``rows`` and ``records`` differ in length (a download must hold the table's rows).
    """
    if len(rows) != len(records):
        raise ValueError(f"table {table_id!r}: {len(rows)} rows but {len(records)} download records")
    stem = page_path[:-5] if page_path.endswith(".html") else page_path
    base = f"tables/{stem}--{table_id}"
    return {"id": table_id, "columns": columns, "rows": rows, "csv": f"{base}.csv", "json": f"{base}.json",
            "files": {f"{base}.csv": to_csv(records), f"{base}.json": to_json(records)}}
