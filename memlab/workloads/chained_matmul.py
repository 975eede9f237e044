"""Chained matmul ``y = (x @ w1) @ w2``: the workload of the chunked-slicing report.

Shapes: ``x`` [n, d], ``w1`` [d, hidden], ``w2`` [hidden, d], ``y`` [n, d].  The hidden activation
``x @ w1`` is [n, hidden]; it is what chunking over rows tries not to hold in full.
"""
from __future__ import annotations

import torch

from ..params import Param
from ..workload import Problem, Workload
from .seeding import seeded_randn

__all__ = ["ChainedMatmul", "MatmulWeights"]


class MatmulWeights(torch.nn.Module):
    """Holds ``w1`` [d, hidden] and ``w2`` [hidden, d] as parameters."""

    def __init__(self, w1: torch.Tensor, w2: torch.Tensor):
        super().__init__()
        self.w1 = torch.nn.Parameter(w1)
        self.w2 = torch.nn.Parameter(w2)


class ChainedMatmul(Workload, name="chained_matmul", family="chunking"):
    """y = (x @ w1) @ w2 with x [n, d], w1 [d, hidden], w2 [hidden, d]."""

    params = {
        "n": Param(10000, low=1, high=10_000_000, doc="rows of x (samples per step)"),
        "d": Param(256, low=1, high=1_000_000, doc="features of x and y"),
        "hidden": Param(1024, low=1, high=1_000_000, doc="width of the hidden activation x @ w1"),
        "x_requires_grad": Param(True, doc="whether x is a leaf that needs a gradient"),
    }
    samples_param = "n"
    check_params = {"n": 37, "d": 8, "hidden": 16}

    @classmethod
    def sweep_grid(cls, quick):
        if quick:
            return [{"n": 4000, "chunk_size": c} for c in (4000, 1000, 400)]
        return [{"chunk_size": c} for c in (10000, 2500, 1000, 500, 250, 100)]

    def build(self, device, dtype, seed):
        c = self.config
        g = torch.Generator().manual_seed(seed)
        x = seeded_randn(g, c["n"], c["d"], device=device, dtype=dtype)
        w1 = seeded_randn(g, c["d"], c["hidden"], device=device, dtype=dtype, scale=c["d"] ** -0.5)
        w2 = seeded_randn(g, c["hidden"], c["d"], device=device, dtype=dtype, scale=c["hidden"] ** -0.5)
        grad_y = seeded_randn(g, c["n"], c["d"], device=device, dtype=dtype)
        x.requires_grad_(c["x_requires_grad"])
        return Problem(model=MatmulWeights(w1, w2), inputs={"x": x}, grad_output=grad_y)

    def reference(self, problem):
        m = problem.model
        return (problem.inputs["x"] @ m.w1) @ m.w2
