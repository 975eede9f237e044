"""Deep-network family (workload ``resnet``): the complexity of activation memory in depth.

A change in a technique's complexity (sqrt(n) checkpointing turning linear, RevNet keeping a
per-unit tensor) is a regression that a single-depth memory figure can hide behind a constant.
``track_activation_exponent`` measures the activation peak (``extra["activation_peak_bytes"]``,
exact on CPU) at three depths spanning 16x in blocks and reports the fitted log-log exponent
(:func:`memlab.complexity.fit_exponent`): ~0.5 for ``resnet_checkpoint_sqrt``, 0 for ``revnet``,
~1 for the plain ``resnet`` beside them.

Swept: technique.  Held fixed (cheap: a few seconds per technique): basic blocks, depths 26, 98,
386 (n = 4, 16, 64; 12 to 192 blocks), batch 1, width 2, 8x8 inputs, CPU (the exponent comes from
exact bytes; a device would only add allocator rounding).
"""
from __future__ import annotations

__all__ = ["ResNetComplexity", "TECHNIQUES", "DEPTHS"]

TECHNIQUES = ["resnet", "resnet_checkpoint_sqrt", "revnet", "resnet_checkpoint_block", "revnet_nosave",
              "revnet_autograd"]
DEPTHS = (26, 98, 386)
FIXED = {"block": "basic", "batch": 1, "width": 2, "image": 8}


class ResNetComplexity:
    """Log-log exponent of activation memory against depth, per technique (CPU, exact bytes)."""

    params = [TECHNIQUES, ["cpu"]]
    param_names = ["technique", "device"]
    timeout = 600
    version = "1"

    def setup(self, technique, device):
        import memlab

        if technique not in memlab.list_techniques():
            raise NotImplementedError(f"technique {technique!r} is not in this memlab version")
        self.technique, self.device = technique, device

    def track_activation_exponent(self, technique, device):
        import memlab
        from memlab.complexity import fit_exponent

        blocks, peaks = [], []
        for depth in DEPTHS:
            m = memlab.measure(technique, device=device, isolate=False, iterations=1, repeats=1, time_budget=0,
                               check=False, depth=depth, **FIXED)
            if m.status != "ok":
                raise RuntimeError(f"{technique} depth={depth}: {m.status} ({m.error})")
            blocks.append(m.extra["blocks"])
            peaks.append(m.extra["activation_peak_bytes"])
        return round(fit_exponent(blocks, peaks).exponent, 3)

    track_activation_exponent.unit = "exponent"
