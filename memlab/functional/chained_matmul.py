"""The chained matmul ``(x @ w1) @ w2`` as a per-row function, with a hand-written chunk backward.

:func:`chained_matmul` is the per-row function; :func:`chained_matmul_chunk_vjp` is its per-chunk
backward for :func:`~memlab.functional.slice_accumulate.slice_accumulate` that keeps at most ONE
[rows, hidden] tensor alive at a time and writes every gradient in place::

    gh  = g_c @ w2.T          # [c, hidden]
    gw1 += x_c.T @ gh         # addmm_ into the accumulator
    gx_c = gh @ w1.T          # mm(out=) straight into rows [s, e) of grad_x; gh freed here
    h   = x_c @ w1            # [c, hidden]  recomputed
    gw2 += h.T @ g_c          # addmm_

(``h`` last, right after ``gx_c``: the two products that read ``w1`` follow one another, so the
second finds the 1 MiB weight of the default workload still in this CPU's 1 MiB L2 more often; a
few per cent at chunk n/100, issue 32.)

The autograd recomputation (slice_accumulate's default) holds ``h`` and ``gh`` together, the chunk's
output [c, d] and a [d, hidden] + [hidden, d] temporary per chunk before adding them.

:func:`chained_matmul_into` is the in-place forward (``chunk_forward``) and
:func:`chained_matmul_scratch` the workspace both reuse: ``h`` and ``gh`` are written into one
[c, hidden] tensor allocated once per loop (NOTE [ chunk scratch ] in
:mod:`memlab.functional.slice_accumulate`), so a chunk allocates nothing.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

__all__ = ["chained_matmul", "chained_matmul_chunk_vjp", "chained_matmul_into", "chained_matmul_scratch"]


def chained_matmul(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """``(x @ w1) @ w2``: [rows, d] @ [d, hidden] @ [hidden, d] -> [rows, d]."""
    return (x @ w1) @ w2


def chained_matmul_scratch(rows: int, x: torch.Tensor, params: Sequence[torch.Tensor]) -> torch.Tensor:
    """The workspace of :func:`chained_matmul_into` and :func:`chained_matmul_chunk_vjp`: one
    [rows, hidden] tensor (a ``slice_accumulate`` ``scratch``)."""
    return x.new_empty(rows, params[0].shape[1])


def _rows_of(scratch: Optional[torch.Tensor], rows: int) -> Optional[torch.Tensor]:
    return None if scratch is None else scratch[:rows]


def chained_matmul_into(x_chunk: torch.Tensor, params: Sequence[torch.Tensor], out: torch.Tensor,
                        scratch: Optional[torch.Tensor] = None) -> None:
    """``out = (x_chunk @ w1) @ w2`` in place (a ``slice_accumulate`` ``chunk_forward``): the hidden
    goes into ``scratch`` ([rows or more, hidden], :func:`chained_matmul_scratch`) when given."""
    w1, w2 = params
    torch.mm(torch.mm(x_chunk, w1, out=_rows_of(scratch, x_chunk.shape[0])), w2, out=out)


def chained_matmul_chunk_vjp(x_chunk: torch.Tensor, grad_chunk: torch.Tensor, params: Sequence[torch.Tensor],
                             grad_x_chunk: Optional[torch.Tensor],
                             grad_params: Sequence[Optional[torch.Tensor]],
                             scratch: Optional[torch.Tensor] = None) -> None:
    """Backward of :func:`chained_matmul` for one chunk, in place (a ``slice_accumulate`` ``chunk_vjp``).

    Args:
        x_chunk: [c, d] rows of x.
        grad_chunk: [c, d] rows of the output gradient.
        params: ``(w1 [d, hidden], w2 [hidden, d])``.
        grad_x_chunk: [c, d] view of the preallocated x gradient to overwrite, or None.
        grad_params: ``(gw1 [d, hidden] | None, gw2 [hidden, d] | None)`` accumulators to add into.
        scratch: [c or more, hidden] workspace (:func:`chained_matmul_scratch`) that takes ``gh``,
            then ``h``; None: each is a new tensor.

    Peak temporaries: one [c, hidden] tensor (``gh``, then ``h``); none with ``scratch``.
    """
    w1, w2 = params
    gw1, gw2 = grad_params
    buf = _rows_of(scratch, x_chunk.shape[0])
    with torch.no_grad():
        if gw1 is not None or grad_x_chunk is not None:
            gh = torch.mm(grad_chunk, w2.mT, out=buf)
            if gw1 is not None:
                gw1.addmm_(x_chunk.mT, gh)
            if grad_x_chunk is not None:
                torch.mm(gh, w1.mT, out=grad_x_chunk)
            del gh
        if gw2 is not None:
            gw2.addmm_(torch.mm(x_chunk, w1, out=buf).mT, grad_chunk)
