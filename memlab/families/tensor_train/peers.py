"""Optional comparators: tensorly-torch's ``FactorizedLinear`` with ``factorization='BlockTT'``.

Installed with ``pip install 'memlab[peers]'`` (tensorly-torch, tensorly and ``packaging``, which
tensorly-torch imports without declaring it).  Without them these techniques raise
:class:`~memlab.technique.TechniqueUnavailable` with that hint; nothing else is measured instead.

The tensorly-torch layer holds the same seeded TT as the ``tt_linear`` problem: its factor ``i`` is
our core ``i`` with the two mode axes swapped (``[r, m_i, n_i, r']``).  ``implementation=
'factorized'`` contracts the input and all factors in ONE ``einsum`` (whose order opt_einsum
chooses); ``'reconstructed'`` builds the matrix with ``to_matrix()`` and calls ``F.linear``.  The
reference is the workload's: the dense weight reconstructed from the layer's own factors by one
plain einsum, so gradients with respect to the factors are compared.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from memlab.technique import Technique, TechniqueUnavailable
from .workload import TTLinear, einsum_reconstruct
from .techniques import analytic_bytes

__all__ = ["TltorchBlockTTFactorized", "TltorchBlockTTReconstructed"]

INSTALL_HINT = "install the optional comparators with: pip install 'memlab[peers]' (tensorly-torch tensorly packaging)"


def _tltorch():
    try:
        import tltorch  # deferred: optional dependency
    except ImportError as exc:
        raise TechniqueUnavailable(f"tensorly-torch is not importable ({exc}); {INSTALL_HINT}") from None
    return tltorch


class _TltorchBlockTT(Technique):
    """Shared: build tensorly-torch's layer from the seeded problem's cores."""

    peer = True
    implementation: str

    def check_available(self, device):
        super().check_available(device)
        _tltorch()

    def build(self, device, dtype, seed=0):
        tltorch = _tltorch()
        problem = self.problem_spec.build(device, dtype, seed)
        shape = self.problem_spec.tt_shape
        layer = tltorch.FactorizedLinear(shape.in_modes, shape.out_modes, bias=False, factorization="BlockTT",
                                         rank=list(shape.ranks), implementation=self.implementation,
                                         device=device, dtype=dtype)
        factors = list(layer.weight.factors)
        if len(factors) != shape.n_cores:  # pragma: no cover - guards a tensorly-torch layout change
            raise TechniqueUnavailable(f"tensorly-torch BlockTT made {len(factors)} factors for {shape.n_cores} cores")
        with torch.no_grad():
            for f, core in zip(factors, problem.model.cores):
                f.copy_(core.permute(0, 2, 1, 3))
        problem.model = layer
        return problem

    def forward(self, problem):
        return problem.model(problem.inputs["x"])

    def reference(self, problem):
        cores = [f.permute(0, 2, 1, 3) for f in problem.model.weight.factors]
        return F.linear(problem.inputs["x"], einsum_reconstruct(cores).t())

    def describe(self, problem, mode="train") -> dict[str, Any]:
        import tltorch  # deferred: optional dependency

        e = problem.inputs["x"].element_size()
        return {"path": f"tltorch BlockTT implementation={self.implementation}",
                "tltorch_version": getattr(tltorch, "__version__", None),
                "compression": self.problem_spec.tt_shape.compression(),
                "analytic": analytic_bytes(self.problem_spec.tt_shape, self.config["batch"], e)}


class TltorchBlockTTFactorized(_TltorchBlockTT, name="tltorch_blocktt_factorized"):
    """tensorly-torch FactorizedLinear(BlockTT, implementation='factorized'): one einsum over x and the factors."""

    accumulation_note = (
        "above the dense layer with or without micro-batches: tensorly-torch's one einsum over x and the "
        "factors keeps its contraction intermediates for backward (docs/evidence/accumulation.md)")

    workload = TTLinear
    implementation = "factorized"


class TltorchBlockTTReconstructed(_TltorchBlockTT, name="tltorch_blocktt_reconstructed"):
    """tensorly-torch FactorizedLinear(BlockTT, implementation='reconstructed'): to_matrix() then F.linear."""

    accumulation_note = (
        "above the dense layer with or without micro-batches: to_matrix() builds a full weight-sized "
        "tensor on top of the cores and their gradients, so its step holds what the dense layer holds "
        "and more (docs/evidence/accumulation.md)")

    workload = TTLinear
    implementation = "reconstructed"
