"""Tensor-train family: ``y = x @ W`` with W in TT format (workload ``tt_linear``).

Swept: technique x rank x batch x device.  ``dense`` does not depend on the rank and is measured
at the first rank only.  Held fixed: the workload's default modes (10, 10, 10) -> (10, 10, 10),
a 1000 x 1000 layer, and ``chunk_size=256`` rows for ``tt_chunked``.
"""
from __future__ import annotations

from . import family_grid

__all__ = ["TTLinear", "TTLinearPeers"]

#: the classes of the family's grid (``memlab/families/tensor_train/meta.py``: ``BENCHMARKS``)
globals().update(family_grid.family_benchmarks("tensor_train", __name__))
