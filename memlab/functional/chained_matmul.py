"""The chained matmul ``(x @ w1) @ w2`` as a per-row function, with a hand-written chunk backward.

:func:`chained_matmul` is the per-row function; :func:`chained_matmul_chunk_vjp` is its per-chunk
backward for :func:`~memlab.functional.slice_accumulate.slice_accumulate` that keeps at most ONE
[rows, hidden] tensor alive at a time and writes every gradient in place::

    h   = x_c @ w1            # [c, hidden]  recomputed
    gw2 += h.T @ g_c          # addmm_ into the accumulator; h freed here
    gh  = g_c @ w2.T          # [c, hidden]
    gw1 += x_c.T @ gh         # addmm_
    gx_c = gh @ w1.T          # mm(out=) straight into rows [s, e) of grad_x

The autograd recomputation (slice_accumulate's default) holds ``h`` and ``gh`` together, the chunk's
output [c, d] and a [d, hidden] + [hidden, d] temporary per chunk before adding them.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

__all__ = ["chained_matmul", "chained_matmul_chunk_vjp"]


def chained_matmul(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """``(x @ w1) @ w2``: [rows, d] @ [d, hidden] @ [hidden, d] -> [rows, d]."""
    return (x @ w1) @ w2


def chained_matmul_chunk_vjp(x_chunk: torch.Tensor, grad_chunk: torch.Tensor, params: Sequence[torch.Tensor],
                             grad_x_chunk: Optional[torch.Tensor],
                             grad_params: Sequence[Optional[torch.Tensor]]) -> None:
    """Backward of :func:`chained_matmul` for one chunk, in place (a ``slice_accumulate`` ``chunk_vjp``).

    Args:
        x_chunk: [c, d] rows of x.
        grad_chunk: [c, d] rows of the output gradient.
        params: ``(w1 [d, hidden], w2 [hidden, d])``.
        grad_x_chunk: [c, d] view of the preallocated x gradient to overwrite, or None.
        grad_params: ``(gw1 [d, hidden] | None, gw2 [hidden, d] | None)`` accumulators to add into.

    Peak temporaries: one [c, hidden] tensor (``h``, then ``gh``).
    """
    w1, w2 = params
    gw1, gw2 = grad_params
    with torch.no_grad():
        if gw2 is not None:
            h = x_chunk @ w1
            gw2.addmm_(h.mT, grad_chunk)
            del h
        if gw1 is None and grad_x_chunk is None:
            return
        gh = grad_chunk @ w2.mT
        if gw1 is not None:
            gw1.addmm_(x_chunk.mT, gh)
        if grad_x_chunk is not None:
            torch.mm(gh, w1.mT, out=grad_x_chunk)
