"""Chunking family: ``y = (x @ w1) @ w2`` (workload ``chained_matmul``) over row-chunk sizes.

Swept: technique x chunk_size x device.  ``unchunked`` has no chunk size and is measured once
(at the first chunk_size).  Held fixed: n=2000 rows, d=256, hidden=1024 (the [2000, 1024] float32
hidden activation is 7.8 MiB); chunk sizes 2000, 500, 200 are 1, 4 and 10 chunks.
"""
from __future__ import annotations

from . import family_grid

__all__ = ["ChainedMatmul"]

#: the classes of the family's grid (``memlab/families/chunking/meta.py``: ``BENCHMARKS``)
globals().update(family_grid.family_benchmarks("chunking", __name__))
