"""Chunking family: ways to compute ``y = (x @ w1) @ w2`` over row chunks of x.

See the chunked-slicing report and NOTE [ slice_backward spike ] in
:mod:`memlab.functional.slice_accumulate`: a Python loop over slices lowers the forward peak, but
autograd keeps every chunk's hidden for backward and ``slice_backward`` allocates a full-size zero
gradient per slice of x.  Every technique here reports the analytic floor of NOTE [ chained-matmul
analytic floor ] (:mod:`memlab.families.chunking.workload`) in ``describe()`` so that the measured peak
can be shown as a ratio to it.
"""
from __future__ import annotations

import functools
from typing import Any, Literal

import torch
from torch.utils.checkpoint import checkpoint

from .chained_matmul import (chained_matmul, chained_matmul_chunk_vjp, chained_matmul_in_tiles,
                                        chained_matmul_into, chained_matmul_scratch, hidden_tiles)
from memlab.functional.slice_accumulate import chunk_bounds as _bounds
from memlab.functional.slice_accumulate import slice_accumulate
from memlab.core.params import Param
from memlab.technique import Technique, TechniqueUnavailable
from .workload import ChainedMatmul, analytic_floor

__all__ = ["Unchunked", "SliceLoop", "VmapChunk", "EinsumChunk", "CheckpointChunk", "SliceAccumulate"]

CHUNK_SIZE = Param(2500, low=1, high=10_000_000, doc="rows of x per chunk (the last may be shorter)")
#: for the automatic reference check (n=37 there): 5 does not divide 37, so the last chunk is short
CHECK_CHUNK = {"chunk_size": 5}

SliceAccumulateBackward = Literal["manual", "autograd"]
EINSUM_EQUATION = "bi,ij,jk->bk"


class _ChainedMatmulTechnique(Technique):
    """Shared by the family (not registered): reports the analytic floor.

    ``describe`` states the floor of the mode it is given (the measured step's); both modes' floors
    are always included as well.
    """

    workload = ChainedMatmul

    def chunk_rows(self) -> int | None:
        return self.config.get("chunk_size")

    def forward(self, problem):
        m = problem.model
        return self._compute(problem.inputs["x"], m.w1, m.w2)

    def _compute(self, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def describe(self, problem, mode="train") -> dict[str, Any]:
        floor = analytic_floor(self.problem_spec.config, self.chunk_rows(), problem.inputs["x"].element_size())
        n = self.problem_spec.config["n"]
        c = floor.chunk_rows
        return {**floor.to_extra(mode), "num_chunks": -(-n // c)}


class Unchunked(_ChainedMatmulTechnique, name="unchunked"):
    """The reference: one (x @ w1) @ w2 over all rows; saves the full [n, hidden] activation."""

    baseline = True

    def _compute(self, x, w1, w2):
        return chained_matmul(x, w1, w2)


class SliceLoop(_ChainedMatmulTechnique, name="slice_loop"):
    """The report's loop: ``y[st:ed] = (x[st:ed] @ w1) @ w2`` into an empty y.

    Forward holds one chunk's hidden [chunk, hidden] at a time but autograd saves each chunk's
    hidden for backward, and each ``x[st:ed]`` slice's backward allocates a zero-filled
    gradient the size of x (``slice_backward``).
    """

    params = {"chunk_size": CHUNK_SIZE}
    check_params = CHECK_CHUNK
    accumulation_note = (
        "its chunks' weight gradients are summed as backward goes, so two copies of them are live at its "
        "peak with or without micro-batches; plain autograd holds two copies only once .grad exists, and "
        "then the slice-backward spike (a zero-filled gradient of the whole micro-batch input per slice) "
        "outweighs the saved activations the loop avoids (docs/evidence/accumulation.md)")

    def _compute(self, x, w1, w2):
        c = self.config["chunk_size"]
        y = x.new_empty(x.shape[0], w2.shape[1])
        for st, ed in _bounds(x.shape[0], c):
            y[st:ed] = (x[st:ed] @ w1) @ w2
        return y


class VmapChunk(_ChainedMatmulTechnique, name="vmap_chunk"):
    """``torch.func.vmap(f, in_dims=(0, None, None), chunk_size=c)`` over rows of x.

    vmap runs ``f`` on chunks of ``c`` rows and concatenates the outputs; under autograd every
    chunk's hidden is saved for backward, so training keeps the full [n, hidden] anyway.
    """

    params = {"chunk_size": CHUNK_SIZE}
    check_params = CHECK_CHUNK

    def _compute(self, x, w1, w2):
        def row(xr, a, b):  # [d] -> [d]
            return (xr @ a) @ b

        return torch.func.vmap(row, in_dims=(0, None, None), chunk_size=self.config["chunk_size"])(x, w1, w2)


class EinsumChunk(_ChainedMatmulTechnique, name="einsum_chunk"):
    """The chunk loop over ``torch.einsum("bi,ij,jk->bk", x[st:ed], w1, w2)`` into an empty y.

    With opt_einsum, torch picks the contraction order: for these shapes it forms ``w1 @ w2`` [d, d]
    first and never builds a [chunk, hidden] hidden (a different, cheaper computation of the same
    maths).  ``opt_einsum=False`` turns it off for this call (left-to-right order, as the report
    intended).  ``describe`` records whether opt_einsum was available and enabled and the path.
    """

    params = {
        "chunk_size": CHUNK_SIZE,
        "opt_einsum": Param(True, doc="let opt_einsum choose the contraction order (False: left to right)"),
    }
    check_params = CHECK_CHUNK

    def check_available(self, device):
        super().check_available(device)
        if self.config["opt_einsum"] and not torch.backends.opt_einsum.is_available():
            raise TechniqueUnavailable(
                "einsum_chunk with opt_einsum=True needs the opt-einsum package (pip install opt-einsum); "
                "pass opt_einsum=False for the left-to-right order"
            )

    def _compute(self, x, w1, w2):
        c = self.config["chunk_size"]
        y = x.new_empty(x.shape[0], w2.shape[1])
        with torch.backends.opt_einsum.flags(enabled=self.config["opt_einsum"]):
            if self.config["opt_einsum"] and not torch.backends.opt_einsum.enabled:
                raise TechniqueUnavailable("opt_einsum requested but torch.backends.opt_einsum is not enabled")
            for st, ed in _bounds(x.shape[0], c):
                y[st:ed] = torch.einsum(EINSUM_EQUATION, x[st:ed], w1, w2)
        return y

    def describe(self, problem, mode="train"):
        out = super().describe(problem, mode)
        cfg = self.problem_spec.config
        used = bool(self.config["opt_einsum"] and torch.backends.opt_einsum.is_available())
        out.update(
            opt_einsum_available=bool(torch.backends.opt_einsum.is_available()),
            opt_einsum_enabled=bool(self.config["opt_einsum"]),
            opt_einsum_used=used,
            opt_einsum_strategy=torch.backends.opt_einsum.strategy if used else None,
            einsum_equation=EINSUM_EQUATION,
        )
        if used:
            import opt_einsum  # deferred: optional dependency

            c = min(self.config["chunk_size"], cfg["n"])
            path, _ = opt_einsum.contract_path(
                EINSUM_EQUATION, (c, cfg["d"]), (cfg["d"], cfg["hidden"]), (cfg["hidden"], cfg["d"]),
                shapes=True, optimize=torch.backends.opt_einsum.strategy)
            out["einsum_path"] = [list(p) for p in path]
            out["contraction_order"] = "x @ (w1 @ w2)" if list(path[0]) == [1, 2] else "(x @ w1) @ w2"
        else:
            out["einsum_path"] = None
            out["contraction_order"] = "(x @ w1) @ w2"
        return out


class CheckpointChunk(_ChainedMatmulTechnique, name="checkpoint_chunk"):
    """``torch.utils.checkpoint`` (non-reentrant) per chunk, outputs concatenated with ``torch.cat``.

    Saves only each chunk's inputs (the ``x[st:ed]`` view, w1, w2) and recomputes the chunk's hidden
    in backward; the slice of x still goes through ``slice_backward`` (one x-sized gradient per
    chunk) and ``torch.cat`` briefly holds the chunk outputs and y together.
    """

    params = {"chunk_size": CHUNK_SIZE}
    check_params = CHECK_CHUNK

    def _compute(self, x, w1, w2):
        c = self.config["chunk_size"]
        outs = [checkpoint(chained_matmul, x[st:ed], w1, w2, use_reentrant=False)
                for st, ed in _bounds(x.shape[0], c)]
        return torch.cat(outs)


class SliceAccumulate(_ChainedMatmulTechnique, name="slice_accumulate"):
    """The fix the report asks for: :func:`~memlab.functional.slice_accumulate.slice_accumulate`.

    Forward: the chunk loop under ``no_grad``, saving only x, w1, w2.  Backward: per chunk,
    recompute and write the chunk's x-gradient into one preallocated ``grad_x``, adding grad_w1 /
    grad_w2 into one accumulator each.  ``backward="manual"`` (default) uses
    :func:`~memlab.families.chunking.chained_matmul.chained_matmul_chunk_vjp` (one [chunk, hidden] tensor at
    a time, gradients written in place) and writes each chunk's output straight into ``y``, the
    hidden of every chunk going into one [chunk, hidden] workspace per loop (NOTE [ chunk scratch ]:
    no allocation per chunk).  On a CPU, where a small chunk's products would each stream whole
    [d, hidden] matrices, the manual path takes the same workspace as ``k`` times the rows by
    ``1/k`` of the hidden columns (NOTE [ hidden tiles ]: ``extra`` records ``hidden_tiles``,
    ``rows_per_pass`` and ``passes``; the bytes are those of [chunk, hidden]).
    ``backward="autograd"`` is the generic path any per-row function gets
    (recompute under autograd: hidden and its gradient together, plus per-chunk weight-gradient
    temporaries; each chunk's output copied into ``y``).
    """

    params = {
        "chunk_size": CHUNK_SIZE,
        "backward": Param("manual", choices=("manual", "autograd"),
                          doc="per-chunk backward: hand-written in place, or autograd recomputation"),
    }
    check_params = CHECK_CHUNK

    def _compute(self, x, w1, w2):
        kind: SliceAccumulateBackward = self.config["backward"]
        if kind == "autograd":
            return slice_accumulate(chained_matmul, x, w1, w2, chunk_size=self.config["chunk_size"])
        k, rows = self._passes(x, w1)
        tile = w1.shape[1] // k  # the same workspace bytes as [chunk, hidden]: NOTE [ hidden tiles ]
        return slice_accumulate(chained_matmul if k == 1 else chained_matmul_in_tiles(tile), x, w1, w2,
                                chunk_size=rows, chunk_vjp=chained_matmul_chunk_vjp, chunk_forward=chained_matmul_into,
                                scratch=functools.partial(chained_matmul_scratch, tile=tile))

    def _passes(self, x: torch.Tensor, w1: torch.Tensor) -> tuple[int, int]:
        """``(k, rows)``: the hidden tiles of a pass of the manual path (NOTE [ hidden tiles ]; 1 for the
        autograd path) and the rows of a pass (``k`` chunks)."""
        n, (d, hidden) = x.shape[0], w1.shape
        chunk = min(self.config["chunk_size"], n)
        if self.config["backward"] != "manual":
            return 1, chunk
        k = hidden_tiles(n, d, hidden, chunk, x.element_size(), x.device.type)
        return k, k * chunk

    def describe(self, problem, mode="train"):
        x = problem.inputs["x"]
        k, rows = self._passes(x, problem.model.w1)
        return {**super().describe(problem, mode), "backward_path": self.config["backward"], "hidden_tiles": k,
                "rows_per_pass": rows, "passes": -(-x.shape[0] // rows)}
