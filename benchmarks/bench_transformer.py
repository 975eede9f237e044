"""Transformer family (workload ``transformer``): one training step per technique, and the seq exponent.

``Transformer``: technique x seq x device, the five memory and time figures of
:class:`common.MemlabBenchmark` for a small decoder-only LM (2 layers, hidden 64, 4 heads, vocab 2048,
batch 2: a step of well under a second on one core at seq 256).  ``TransformerComplexity``: the fitted
log-log exponent of the exact activation peak against ``seq`` (:func:`memlab.core.complexity.fit_exponent`)
at seq 128, 256, 512 with heads 8 of size 2, so that the T² terms dominate the eager step: ~2 for
``eager_attention`` and ``sdpa_math``, ~1 for ``chunked_attention``; ``sdpa_flash`` (this CPU build's
flash kernel) sizes its backward scratch by seq blocks, so its exponent is not a clean 1 (NOTE [ SDPA on
this CPU build ] in memlab/families/transformer/techniques.py).  A complexity regression (a path that
starts materialising the [T, T] scores) moves the exponent by ~1, which a single-seq figure can hide.
"""
from __future__ import annotations

from . import family_grid

__all__ = ["Transformer", "TransformerPeers", "TransformerComplexity"]

#: the classes of the family's grid (``memlab/families/transformer/meta.py``: ``BENCHMARKS``)
globals().update(family_grid.family_benchmarks("transformer", __name__))
