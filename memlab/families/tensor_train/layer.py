"""``TensorTrainLinear``: a linear layer whose weight is a tensor train, with an explicit forward path.

The cores are ``nn.Parameter``s registered on the module (``core0``, ``core1``, ...), so
``.to(device)``, ``.to(dtype)``, ``state_dict()`` and optimizers see them: the tt-layer report's
second complaint (TT objects left behind by ``model.to(device)``) cannot happen.

The forward path is a :class:`TTPath` chosen at construction (or later by assigning ``.path``).
It never falls back to another path; the path of the last forward is kept in ``last_path``.
"""
from __future__ import annotations

import enum
import math
from typing import Sequence

import torch
from torch import nn

from .tt import (TTPlan, TTShape, plan_contraction, tt_contract, tt_contract_chunked,
                             tt_linear_reconstructed, tt_reconstruct, tt_shape_of, tt_svd)

__all__ = ["TensorTrainLinear", "TTPath"]


class TTPath(str, enum.Enum):
    """How :class:`TensorTrainLinear` computes ``x @ W``.

    FACTORIZED: contract ``x`` with the cores block by block, the blocks (groups of consecutive
        cores) chosen per shape and batch by a cost model within the memory of the one-core-at-a-time
        contraction (NOTE [ TT contraction plans ]; the plan of the last forward is ``last_plan``).
    RECONSTRUCTED: build the dense-size weight from the cores, then one matmul; at most one
        weight-sized tensor live (see NOTE [ TT reconstructed backward ]).
    CHUNKED: the factorized contraction over row chunks of ``x`` with a recompute-per-chunk
        backward (``slice_accumulate``, planned for the chunk's rows); keeps one chunk's
        intermediates at a time.
    """

    FACTORIZED = "factorized"
    RECONSTRUCTED = "reconstructed"
    CHUNKED = "chunked"


class TensorTrainLinear(nn.Module):
    """``y = x @ W (+ bias)`` with ``W`` [in_features, out_features] stored as TT cores.

    Args:
        in_modes: input modes, ``prod(in_modes) == in_features``.
        out_modes: output modes, as many as ``in_modes``.
        rank: TT rank(s) >= 1 (one int for every boundary, or ``len(in_modes) - 1`` ints).
        path: a :class:`TTPath` (or its string value); never changes silently.
        chunk_size: rows per chunk for ``TTPath.CHUNKED`` (int >= 1); required for that path only.
        bias: add a learnable bias [out_features] (zeros).
        in_features, out_features: optional; when given they must equal the modes' products.
        device, dtype: where the cores live.

    Cores are initialised with i.i.d. normal entries scaled so that ``W``'s entries have variance
    ``1 / in_features``; use :meth:`from_dense` to start from a dense weight (TT-SVD).

    Example:
        >>> layer = TensorTrainLinear((10, 10, 10), (10, 10, 10), rank=8)   # 1000 -> 1000, 1440 params
        >>> y = layer(torch.randn(4096, 1000))                               # [4096, 1000]
    """

    def __init__(self, in_modes: Sequence[int], out_modes: Sequence[int], rank: int | Sequence[int], *,
                 path: TTPath | str = TTPath.FACTORIZED, chunk_size: int | None = None, bias: bool = False,
                 in_features: int | None = None, out_features: int | None = None,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        shape = TTShape.create(in_modes, out_modes, rank)
        for name, given, have, modes in (("in_features", in_features, shape.in_features, shape.in_modes),
                                          ("out_features", out_features, shape.out_features, shape.out_modes)):
            if given is not None and given != have:
                raise ValueError(
                    f"{name}={given} does not match the product of {name[:-9]}_modes={modes} (= {have}); "
                    f"choose modes whose product is {given}"
                )
        self.tt_shape = shape
        self.path = path
        self.chunk_size = chunk_size
        self.last_path: TTPath | None = None
        self.last_plan: TTPlan | None = None
        #: the rows of the last forward's input (a micro-batch's under accumulation, not the batch's)
        self.last_rows: int | None = None
        k = shape.n_cores
        std = (1.0 / (shape.in_features * max(1, math.prod(shape.ranks[1:-1])))) ** (1.0 / (2 * k))
        for i, s in enumerate(shape.core_shapes):
            self.register_parameter(f"core{i}", nn.Parameter(torch.randn(*s, device=device, dtype=dtype) * std))
        self.bias = nn.Parameter(torch.zeros(shape.out_features, device=device, dtype=dtype)) if bias else None

    # -- settings ------------------------------------------------------------------------------
    @property
    def path(self) -> TTPath:
        return self._path

    @path.setter
    def path(self, value: TTPath | str) -> None:
        try:
            self._path = TTPath(value)
        except ValueError:
            raise ValueError(
                f"path={value!r} is not valid; valid paths: {', '.join(p.value for p in TTPath)}"
            ) from None

    @property
    def chunk_size(self) -> int | None:
        return self._chunk_size

    @chunk_size.setter
    def chunk_size(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"chunk_size={value!r} is not valid: expected an int >= 1 (rows per chunk) or None")
        self._chunk_size = value

    @property
    def cores(self) -> list[nn.Parameter]:
        """The cores ``[r_{i-1}, n_i, m_i, r_i]`` in order (the registered parameters)."""
        return [getattr(self, f"core{i}") for i in range(self.tt_shape.n_cores)]

    @property
    def in_features(self) -> int:
        return self.tt_shape.in_features

    @property
    def out_features(self) -> int:
        return self.tt_shape.out_features

    # -- construction from a dense weight ----------------------------------------------------------
    @classmethod
    def from_dense(cls, weight: torch.Tensor, in_modes: Sequence[int], out_modes: Sequence[int],
                   rank: int | Sequence[int], *, bias: torch.Tensor | None = None,
                   path: TTPath | str = TTPath.FACTORIZED, chunk_size: int | None = None) -> "TensorTrainLinear":
        """A layer approximating ``nn.Linear`` weight ``weight`` [out_features, in_features] by TT-SVD.

        Ranks the weight cannot use are capped (see :func:`~memlab.families.tensor_train.tt.tt_svd`); the
        layer's ``tt_shape.ranks`` shows the ranks used.  Exact when ``rank`` reaches the weight's
        TT ranks.

        Raises:
            ValueError: bad modes or rank, or ``weight`` whose shape is not
                ``[prod(out_modes), prod(in_modes)]``.
        """
        shape = TTShape.create(in_modes, out_modes, rank)
        if weight.dim() != 2 or tuple(weight.shape) != (shape.out_features, shape.in_features):
            raise ValueError(
                f"from_dense: weight shape {tuple(weight.shape)} does not match out_modes={shape.out_modes} "
                f"(product {shape.out_features}) x in_modes={shape.in_modes} (product {shape.in_features}); "
                f"expected nn.Linear layout [{shape.out_features}, {shape.in_features}]"
            )
        cores = tt_svd(weight.detach().t(), shape.in_modes, shape.out_modes, shape.ranks[1:-1])
        used = tt_shape_of(cores)
        layer = cls(used.in_modes, used.out_modes, list(used.ranks[1:-1]), path=path, chunk_size=chunk_size,
                    bias=bias is not None, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            for p, c in zip(layer.cores, cores):
                p.copy_(c)
            if bias is not None:
                layer.bias.copy_(bias)
        return layer

    def weight(self) -> torch.Tensor:
        """The reconstructed weight in ``nn.Linear`` layout [out_features, in_features] (autograd)."""
        return tt_reconstruct(self.cores).t()

    # -- forward -------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[..., in_features] -> [..., out_features] along ``self.path``."""
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"TensorTrainLinear expects inputs [..., {self.in_features}] (in_modes={self.tt_shape.in_modes}); "
                f"got shape {tuple(x.shape)}"
            )
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        path, cores, plan = self.path, self.cores, None
        grad = torch.is_grad_enabled() and (x2.requires_grad or any(c.requires_grad for c in cores))
        if path is TTPath.FACTORIZED:
            plan = plan_contraction(self.tt_shape, max(1, x2.shape[0]), grad)
            y = tt_contract(x2, cores, plan)
        elif path is TTPath.RECONSTRUCTED:
            y = tt_linear_reconstructed(x2, cores)
        elif path is TTPath.CHUNKED:
            if self.chunk_size is None:
                raise ValueError("path='chunked' needs chunk_size (rows per chunk, an int >= 1); got None")
            plan = plan_contraction(self.tt_shape, max(1, min(self.chunk_size, x2.shape[0])), grad, recompute=True)
            y = tt_contract_chunked(x2, cores, self.chunk_size, plan)
        else:  # pragma: no cover - the enum is closed
            raise ValueError(f"unknown path {path!r}")
        self.last_plan, self.last_rows = plan, x2.shape[0]
        self.last_path = path
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        s = self.tt_shape
        extra = f", chunk_size={self.chunk_size}" if self.path is TTPath.CHUNKED else ""
        return (f"in_modes={s.in_modes}, out_modes={s.out_modes}, ranks={s.ranks}, path={self.path.value}{extra}, "
                f"bias={self.bias is not None}")

