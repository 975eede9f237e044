"""Deep-network family (workload ``resnet``): the complexity of activation memory in depth.

A change in a technique's complexity (sqrt(n) checkpointing turning linear, RevNet keeping a
per-unit tensor) is a regression that a single-depth memory figure can hide behind a constant.
``track_activation_exponent`` measures the activation peak (``extra["activation_peak_bytes"]``,
exact on CPU) at three depths spanning 16x in blocks and reports the fitted log-log exponent
(:func:`memlab.core.complexity.fit_exponent`): ~0.5 for ``resnet_checkpoint_sqrt``, 0 for ``revnet``,
~1 for the plain ``resnet`` beside them.

Swept: technique.  Held fixed (cheap: a few seconds per technique): basic blocks, depths 26, 98,
386 (n = 4, 16, 64; 12 to 192 blocks), batch 1, width 2, 8x8 inputs, CPU (the exponent comes from
exact bytes; a device would only add allocator rounding).
"""
from __future__ import annotations

from . import family_grid

__all__ = ["ResNetComplexity"]

#: the classes of the family's grid (``memlab/families/resnet/meta.py``: ``BENCHMARKS``)
globals().update(family_grid.family_benchmarks("resnet", __name__))
