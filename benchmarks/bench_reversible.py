"""Reversible family: a stack of additive coupling blocks (workload ``residual_stack``).

Swept: technique x depth x batch x device.  Held fixed: width=128 channels per half, hidden=256,
additive coupling, MLP blocks.
"""
from __future__ import annotations

from . import family_grid

__all__ = ["ResidualStack", "ResidualStackPeers"]

#: the classes of the family's grid (``memlab/families/reversible/meta.py``: ``BENCHMARKS``)
globals().update(family_grid.family_benchmarks("reversible", __name__))
