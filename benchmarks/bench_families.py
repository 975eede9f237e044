"""Built-in families without a ``bench_<family>.py`` of their own: their classes, from their grids.

A family folder added to ``memlab/families/`` declares its asv grid in its ``meta.py``
(``BENCHMARKS``; ``family_grid.py`` says what a spec holds) and is benchmarked here, under its
classes' names, with no edit to any existing file.  The families present when the suite began keep
their ``bench_<family>.py`` module, under whose name asv files their history.
"""
from __future__ import annotations

from . import family_grid

__all__: list[str] = []

for _family in family_grid.unclaimed_families():
    _classes = family_grid.family_benchmarks(_family, __name__)
    globals().update(_classes)
    __all__ += list(_classes)
