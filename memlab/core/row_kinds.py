"""Which kind of row a line of a results file is (torch-free, no memlab imports).

A technique sweep's row is a :class:`memlab.core.record.Measurement`; a sharded sweep's rank row
(``memlab sweep --shard-strategy``, :mod:`memlab.sharding.sweep_plan`) says ``"kind": "sharded"``.
Readers of one kind pass over the other by this test, here so that the results reader and the
sharding package need not import each other.
"""
from __future__ import annotations

from typing import Any

__all__ = ["SHARDED_KIND", "is_sharded_row"]

#: the ``kind`` of a sharded sweep's rank row
SHARDED_KIND = "sharded"


def is_sharded_row(row: Any) -> bool:
    """Whether ``row`` (a decoded JSON line) is a sharded sweep's rank row."""
    return isinstance(row, dict) and row.get("kind") == SHARDED_KIND
