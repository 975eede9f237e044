"""Tensor-train family: a dense layer and three ways to apply a TT linear layer (workload ``tt_linear``).

See the tt-layer report (``shared/seeds/tt-layer-memory.txt``): contracting the input with the cores
one at a time keeps ``B d^3 (2r + 1)`` activation elements, which outweighs the parameter saving at
transformer batch sizes; building the full weight first (the report's "naive" fix) costs about a
dense layer; running the factorized contraction over batch chunks with a recomputing backward keeps
only one chunk's intermediates.

``describe`` records the path that ran and the analytic sizes in bytes (see
:meth:`~memlab.functional.tt.TTShape.factorized_activation_elements`).
"""
from __future__ import annotations

from typing import Any

import torch

from ..functional.tt import TTShape, tt_reconstruct
from ..layers.tt_linear import TTPath
from ..params import Param
from ..technique import Technique
from ..workloads.tt_linear import TTLinear

__all__ = ["Dense", "TTFactorized", "TTReconstructed", "TTChunked", "analytic_bytes", "floor_bytes"]

CHUNK_SIZE = Param(16, low=1, high=10_000_000, doc="rows of x per chunk (the last may be shorter)")


def analytic_bytes(shape: TTShape, batch: int, element_size: int, chunk_size: int | None = None) -> dict[str, int]:
    """The tt-layer report's formulas for one configuration, in bytes.

    Keys:
        tt_param_bytes: cores, ``sum r_{i-1} n_i m_i r_i`` elements (``d^2 (r^2 + 2r)`` for 3 cores).
        dense_param_bytes: the dense weight, ``in * out`` elements (``d^6``).
        dense_activation_bytes: the output ``batch * out`` (``B d^3``).
        factorized_activation_bytes: what the factorized forward keeps, output included
            (``B d^3 (2r + 1)``).
        factorized_inference_bytes: the factorized forward's peak under no_grad (``2 B d^3 r``).
        reconstructed_bytes: dense-size weight + dense activations (``d^6 + B d^3``).
        chunk_activation_bytes: one chunk's factorized activations (``c d^3 (2r + 1)``), when
            ``chunk_size`` is given.
    """
    e = element_size
    out = {
        "tt_param_bytes": shape.param_count() * e,
        "dense_param_bytes": shape.dense_param_count() * e,
        "dense_activation_bytes": batch * shape.out_features * e,
        "factorized_activation_bytes": shape.factorized_activation_elements(batch) * e,
        "factorized_inference_bytes": shape.factorized_inference_elements(batch) * e,
        "reconstructed_bytes": shape.reconstructed_elements(batch) * e,
    }
    if chunk_size is not None:
        out["chunk_activation_bytes"] = shape.factorized_activation_elements(min(chunk_size, batch)) * e
    return out


def floor_bytes(kind: str, shape: TTShape, batch: int, element_size: int,
                chunk_size: int | None = None) -> dict[str, int]:
    """What a path must hold above the baseline, per mode, in bytes (``analytic_floor_bytes_by_mode``).

    ``dense``: train = output + grad_x + grad_W (``B (in + out) + in out``), infer = output.
    ``factorized``: train = the activations the forward keeps (``B d^3 (2r+1)``; backward needs
    more), infer = ``factorized_inference_elements`` (exact for :func:`tt_contract`).
    ``reconstructed``: train = dense's (one weight-sized tensor at a time), infer = output + weight.
    ``chunked``: train = output + grad_x + core-gradient accumulators + one chunk's activations,
    infer = output + one chunk's inference peak.
    """
    e, b, c = element_size, batch, min(chunk_size or batch, batch)
    io = b * (shape.in_features + shape.out_features)
    out = b * shape.out_features
    if kind == "dense" or kind == "reconstructed":
        train = io + shape.dense_param_count()
        infer = out + (shape.dense_param_count() if kind == "reconstructed" else 0)
    elif kind == "factorized":
        train, infer = shape.factorized_activation_elements(b), shape.factorized_inference_elements(b)
    elif kind == "chunked":
        train = io + shape.param_count() + shape.factorized_activation_elements(c)
        infer = out + shape.factorized_inference_elements(c)
    else:
        raise ValueError(f"kind={kind!r} is not valid; valid: dense, factorized, reconstructed, chunked")
    return {"train": train * e, "infer": infer * e}


class _TTTechnique(Technique):
    """Shared: set the layer's path at build, record the path that ran and the formulas."""

    path: TTPath

    def build(self, device, dtype, seed=0):
        problem = self.problem_spec.build(device, dtype, seed)
        problem.model.path = self.path
        problem.model.chunk_size = self.config.get("chunk_size")
        return problem

    def forward(self, problem):
        return problem.model(problem.inputs["x"])

    def describe(self, problem, mode="train") -> dict[str, Any]:
        layer = problem.model
        ran = layer.last_path
        if ran is not None and ran is not self.path:  # pragma: no cover - the layer never switches
            raise RuntimeError(f"technique {self.name!r} asked for path {self.path.value} but {ran.value} ran")
        e = layer.cores[0].element_size()
        return {
            "path": None if ran is None else ran.value,
            "ranks": list(layer.tt_shape.ranks),
            "compression": self.problem_spec.tt_shape.compression(),
            "analytic": analytic_bytes(self.problem_spec.tt_shape, self.config["batch"], e, self.config.get("chunk_size")),
            "analytic_floor_bytes_by_mode": floor_bytes(self.path.value, self.problem_spec.tt_shape,
                                                        self.config["batch"], e, self.config.get("chunk_size")),
        }


class Dense(Technique, name="dense"):
    """nn.Linear holding the reconstructed weight: the baseline (weight in*out, activations B*out)."""

    workload = TTLinear
    baseline = True

    def build(self, device, dtype, seed=0):
        problem = self.problem_spec.build(device, dtype, seed)
        shape = self.problem_spec.tt_shape
        dense = torch.nn.Linear(shape.in_features, shape.out_features, bias=False, device=device, dtype=dtype)
        with torch.no_grad():
            dense.weight.copy_(tt_reconstruct(problem.model.cores).t())
        problem.model = dense
        return problem

    def forward(self, problem):
        return problem.model(problem.inputs["x"])

    def describe(self, problem, mode="train") -> dict[str, Any]:
        e = problem.model.weight.element_size()
        shape, b = self.problem_spec.tt_shape, self.config["batch"]
        return {"path": "dense", "compression": 1.0, "analytic": analytic_bytes(shape, b, e),
                "analytic_floor_bytes_by_mode": floor_bytes("dense", shape, b, e)}


class TTFactorized(_TTTechnique, name="tt_factorized"):
    """Contract x with one core at a time (plain autograd); keeps B d^3 (2r+1) activation elements."""

    workload = TTLinear
    path = TTPath.FACTORIZED


class TTReconstructed(_TTTechnique, name="tt_reconstructed"):
    """Build the full weight from the cores, then one matmul; one weight-sized tensor at a time."""

    workload = TTLinear
    path = TTPath.RECONSTRUCTED


class TTChunked(_TTTechnique, name="tt_chunked"):
    """The factorized contraction over row chunks (slice_accumulate): one chunk's intermediates live."""

    workload = TTLinear
    path = TTPath.CHUNKED
    twin = "tt_factorized"
    params = {"chunk_size": CHUNK_SIZE}
    check_params = {"chunk_size": 4}
