"""Tensor-train family: a dense layer and three ways to apply a TT linear layer (workload ``tt_linear``).

See the tt-layer report (``shared/seeds/tt-layer-memory.txt``): contracting the input with the cores
one at a time keeps ``B d^3 (2r + 1)`` activation elements, which outweighs the parameter saving at
transformer batch sizes; building the full weight first (the report's "naive" fix) costs about a
dense layer; running the factorized contraction over batch chunks with a recomputing backward keeps
only one chunk's intermediates.

The factorized and chunked paths contract by a plan chosen per shape and rows by a cost model,
within the one-core-at-a-time contraction's memory (NOTE [ TT contraction plans ] in
:mod:`memlab.families.tensor_train.tt`).  ``describe`` records the path that ran, the plan (``contraction``:
its blocks, products, FLOPs and every candidate's score) and the analytic sizes in bytes (the
report's formulas, :meth:`~memlab.families.tensor_train.tt.TTShape.factorized_activation_elements`).
"""
from __future__ import annotations

from typing import Any

import torch

from .tt import SEQUENTIAL, TTShape, plan_block_rows, plan_contraction, plan_report, tt_reconstruct
from .layer import TTPath
from memlab.core.params import Param
from memlab.technique import Technique
from .workload import TTLinear

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
                chunk_size: int | None = None, planned: bool = False) -> dict[str, int]:
    """What a path must hold above the baseline, per mode, in bytes (``analytic_floor_bytes_by_mode``).

    ``dense``: train = output + grad_x + grad_W (``B (in + out) + in out``), infer = output.
    ``factorized``: train = the activations the forward keeps (``B d^3 (2r+1)``; backward needs
    more), infer = ``factorized_inference_elements`` (exact for the one-core-at-a-time contraction).
    ``reconstructed``: train = dense's (one weight-sized tensor at a time), infer = output + weight.
    ``chunked``: train = output + grad_x + core-gradient accumulators + one chunk's activations,
    infer = output + one chunk's inference peak.

    With ``planned`` the factorized and chunked figures are those of the plan
    :func:`~memlab.families.tensor_train.tt.plan_contraction` picks for the mode (the rows of a chunk, or of a
    cache block of :func:`~memlab.families.tensor_train.tt.plan_block_rows`, whichever is fewer): see
    :func:`_planned_floor`.
    """
    e, b, c = element_size, batch, min(chunk_size or batch, batch)
    io = b * (shape.in_features + shape.out_features)
    out = b * shape.out_features
    if kind in ("factorized", "chunked") and planned:
        train, infer = _planned_floor(kind, shape, b, c, e)
    elif kind == "dense" or kind == "reconstructed":
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


def _planned_floor(kind: str, shape: TTShape, batch: int, chunk: int, element_size: int) -> tuple[int, int]:
    """``(train, infer)`` elements of :func:`floor_bytes` for the planned factorized or chunked path.

    factorized: train = the blocks and what the forward keeps (intermediates, output), infer =
    :meth:`~memlab.families.tensor_train.tt.TTPlan.inference_elements` (exact).  chunked: train = output +
    grad_x + core gradients + the blocks and their gradient accumulators + one row block's
    intermediates; infer = output + the blocks + one row block's intermediates.  A sequential plan
    gives the one-core-at-a-time figures.
    """
    rows = batch if kind == "factorized" else chunk
    recompute = kind == "chunked"
    train_plan, infer_plan = plan_contraction(shape, rows, True, recompute), plan_contraction(shape, rows, False)
    if kind == "factorized":
        return (train_plan.block_elements() + train_plan.activation_elements(batch),
                infer_plan.inference_elements(batch, plan_block_rows(infer_plan, element_size)))
    io, out = batch * (shape.in_features + shape.out_features), batch * shape.out_features
    if train_plan.kind == SEQUENTIAL:
        train = io + shape.param_count() + shape.factorized_activation_elements(chunk)
    else:
        block = min(chunk, plan_block_rows(train_plan, element_size))
        train = (io + shape.param_count() + 2 * train_plan.block_elements()
                 + sum(train_plan.intermediate_elements(block)))
    if infer_plan.kind == SEQUENTIAL:
        infer = out + shape.factorized_inference_elements(chunk)
    else:
        block = min(chunk, plan_block_rows(infer_plan, element_size))
        infer = out + infer_plan.block_elements() + max(infer_plan.intermediate_elements(block), default=0)
    return train, infer


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
        shape, b, chunk = self.problem_spec.tt_shape, self.config["batch"], self.config.get("chunk_size")
        out = {
            "path": None if ran is None else ran.value,
            "ranks": list(layer.tt_shape.ranks),
            "compression": shape.compression(),
            "analytic": analytic_bytes(shape, b, e, chunk),
            "analytic_floor_bytes_by_mode": floor_bytes(self.path.value, shape, b, e, chunk, planned=True),
        }
        if self.path is not TTPath.RECONSTRUCTED:
            # the rows the layer last ran: a micro-batch's under --accumulate K, whose plan can differ
            # from the whole batch's (batch 8 as 2 x 4 ran the sequential plan; 8 rows plan blocks)
            rows = b if layer.last_rows is None else layer.last_rows
            out["contraction"] = self._contraction(layer, rows if chunk is None else min(chunk, rows), mode, e)
        return out

    def _contraction(self, layer, rows: int, mode: str, element_size: int) -> dict[str, Any]:
        """``extra["contraction"]``: the plan of this mode at ``rows`` rows (:func:`plan_report`),
        checked against the plan the layer ran, with the rows of its cache blocks."""
        recompute = self.path is TTPath.CHUNKED
        plan = plan_contraction(layer.tt_shape, rows, mode == "train", recompute)
        if layer.last_plan is not None and layer.last_plan != plan:  # pragma: no cover - same function, same inputs
            raise RuntimeError(f"technique {self.name!r}: the layer ran {layer.last_plan} but describe planned {plan}")
        report = plan_report(layer.tt_shape, rows, mode == "train", recompute)
        device = layer.cores[0].device.type
        cache_rows = plan_block_rows(plan, element_size, device)
        report["block_rows"] = rows if plan.kind == SEQUENTIAL else min(rows, cache_rows)
        return report


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
    """Contract x with the cores by the planned blocks (NOTE [ TT contraction plans ]); keeps the
    plan's intermediates, at most the one-core-at-a-time contraction's B d^3 (2r+1) elements."""

    accumulation_note = (
        "above the dense layer with or without micro-batches: it keeps the contraction's B d^3 (2r + 1) "
        "intermediates for backward (NOTE [ TT contraction plans ]), more than the dense layer's input and "
        "weight gradient at the batches measured; micro-batches halve them but do not close the gap "
        "(docs/evidence/accumulation.md)")

    workload = TTLinear
    path = TTPath.FACTORIZED


class TTReconstructed(_TTTechnique, name="tt_reconstructed"):
    """Build the full weight from the cores, then one matmul; one weight-sized tensor at a time."""

    workload = TTLinear
    path = TTPath.RECONSTRUCTED


class TTChunked(_TTTechnique, name="tt_chunked"):
    """The planned contraction over row chunks (slice_accumulate, planned for a chunk's rows): one
    chunk's (or one cache block's) intermediates live."""

    workload = TTLinear
    path = TTPath.CHUNKED
    twin = "tt_factorized"
    params = {"chunk_size": CHUNK_SIZE}
    check_params = {"chunk_size": 4}
