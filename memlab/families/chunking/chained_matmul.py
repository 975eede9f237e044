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

# NOTE [ hidden tiles ]
At a small chunk every product of the chunk streams a whole [d, hidden] weight or gradient
accumulator (1 MiB each for d = 256, hidden = 1024) for a few rows: four of them per chunk, none
left in a 1 MiB L2 by the time the next chunk needs it.  The same workspace bytes can instead hold
``[k c, hidden / k]``: ``k`` times the rows, ``1/k`` of the hidden columns.  A pass over ``k c``
rows then walks the hidden dimension in ``k`` tiles; each tile's products touch ``[d, hidden / k]``
slices of ``w1``, ``w2`` and both accumulators, which fit the cache together, over ``k`` times as
many rows.  The output and ``grad_x`` rows of the pass are summed over the tiles (``addmm_`` into
their rows of the preallocated ``y`` and ``grad_x``).  Bytes: the workspace is ``c * hidden``
elements either way, the pass's output rows ``[k c, d]`` are no more than that (``k d <= hidden`` is
required), so no peak grows (the committed sweep's figures are compared in tests).
:func:`hidden_tiles` picks ``k``: 1 off the CPU, when the four full weights already fit
:data:`CACHE_BYTES`, or when fewer than four passes would remain; else the smallest divisor of
``hidden`` whose tiles fit.  At chunk 40 (issue 32; n = 4000, d = 256, hidden = 1024) tiles of
k = 2, 4 or 8 bring the relative step time from above the FLOP limit (7/6 = 1.167) to below it;
at larger chunks they change it little.  Evidence: docs/evidence/code-notes.md#hidden-tiles

The autograd recomputation (slice_accumulate's default) holds ``h`` and ``gh`` together, the chunk's
output [c, d] and a [d, hidden] + [hidden, d] temporary per chunk before adding them.

:func:`chained_matmul_into` is the in-place forward (``chunk_forward``) and
:func:`chained_matmul_scratch` the workspace both reuse: ``h`` and ``gh`` are written into one
[c, hidden] tensor allocated once per loop (NOTE [ chunk scratch ] in
:mod:`memlab.functional.slice_accumulate`), so a chunk allocates nothing.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional, Sequence

import torch

__all__ = ["chained_matmul", "chained_matmul_chunk_vjp", "chained_matmul_into", "chained_matmul_scratch",
           "chained_matmul_in_tiles", "hidden_tiles", "CACHE_BYTES"]

#: the per-core cache the hidden tiles are sized for (NOTE [ hidden tiles ]): this CPU's 1 MiB L2.  A
#: constant, not read from the machine, so the schedule (and every timeline) is the same everywhere
CACHE_BYTES = 1 << 20
#: a pass of ``k c`` rows leaves at least this many passes (NOTE [ hidden tiles ])
MIN_PASSES = 4


def chained_matmul(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """``(x @ w1) @ w2``: [rows, d] @ [d, hidden] @ [hidden, d] -> [rows, d]."""
    return (x @ w1) @ w2


def hidden_tiles(n: int, d: int, hidden: int, chunk_rows: int, element_size: int, device_type: str) -> int:
    """``k``, the hidden tiles of a pass of ``k * chunk_rows`` rows (NOTE [ hidden tiles ]); 1: whole rows.

    ``k`` divides ``hidden`` (the workspace keeps ``chunk_rows * hidden`` elements exactly), ``k d <=
    hidden`` (a pass's output rows are no larger than the workspace) and at least :data:`MIN_PASSES`
    passes remain.  1 off the CPU (a GPU wants the widest products) and when the four [d, hidden]
    matrices a chunk touches fit :data:`CACHE_BYTES` already.
    """
    if device_type != "cpu" or 4 * d * hidden * element_size <= CACHE_BYTES:
        return 1
    for k in range(2, hidden // max(d, 1) + 1):
        if k * chunk_rows * MIN_PASSES > n:
            break
        if hidden % k == 0 and 4 * d * (hidden // k) * element_size <= CACHE_BYTES:
            return k
    return 1


def chained_matmul_scratch(rows: int, x: torch.Tensor, params: Sequence[torch.Tensor],
                           tile: Optional[int] = None) -> torch.Tensor:
    """The workspace of :func:`chained_matmul_into` and :func:`chained_matmul_chunk_vjp`: one
    [rows, tile] tensor (a ``slice_accumulate`` ``scratch``; ``tile`` hidden columns, default all of
    them; bind it with ``functools.partial``)."""
    return x.new_empty(rows, params[0].shape[1] if tile is None else tile)


def _rows_of(scratch: Optional[torch.Tensor], rows: int) -> Optional[torch.Tensor]:
    return None if scratch is None else scratch[:rows]


def _tiles(hidden: int, scratch: Optional[torch.Tensor]) -> list[slice]:
    """The hidden columns of each tile: as wide as ``scratch`` (all of them without one)."""
    width = hidden if scratch is None else scratch.shape[1]
    return [slice(j, min(j + width, hidden)) for j in range(0, hidden, width)]


def chained_matmul_in_tiles(tile: int) -> Callable[..., torch.Tensor]:
    """:func:`chained_matmul` computed ``tile`` hidden columns at a time (one [rows, tile] hidden at
    once, the output summed over the tiles): the first chunk of a tiled ``slice_accumulate``, whose
    output gives ``y``'s shape."""
    return functools.partial(_chained_matmul_tiled, tile=tile)


def _chained_matmul_tiled(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, tile: int) -> torch.Tensor:
    out = x.new_empty(x.shape[0], w2.shape[1])
    chained_matmul_into(x, (w1, w2), out, x.new_empty(x.shape[0], min(tile, w1.shape[1])))
    return out


def chained_matmul_into(x_chunk: torch.Tensor, params: Sequence[torch.Tensor], out: torch.Tensor,
                        scratch: Optional[torch.Tensor] = None) -> None:
    """``out = (x_chunk @ w1) @ w2`` in place (a ``slice_accumulate`` ``chunk_forward``): the hidden
    goes into ``scratch`` ([rows or more, tile], :func:`chained_matmul_scratch`) when given, one tile
    of ``tile`` hidden columns at a time when it is narrower than ``hidden`` (NOTE [ hidden tiles ])."""
    w1, w2 = params
    buf = _rows_of(scratch, x_chunk.shape[0])
    for i, cols in enumerate(_tiles(w1.shape[1], scratch)):
        h = torch.mm(x_chunk, w1[:, cols], out=None if buf is None else buf[:, :cols.stop - cols.start])
        if i == 0:
            torch.mm(h, w2[cols], out=out)
        else:
            out.addmm_(h, w2[cols])


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
        scratch: [c or more, tile] workspace (:func:`chained_matmul_scratch`) that takes ``gh``,
            then ``h``, one tile of hidden columns at a time when ``tile < hidden`` (NOTE [ hidden
            tiles ]: ``grad_x_chunk`` and the accumulators are then summed over the tiles); None:
            each is a new [c, hidden] tensor.

    Peak temporaries: one [c, hidden] tensor (``gh``, then ``h``); none with ``scratch``.
    """
    w1, w2 = params
    gw1, gw2 = grad_params
    rows = _rows_of(scratch, x_chunk.shape[0])
    with torch.no_grad():
        for i, cols in enumerate(_tiles(w1.shape[1], scratch)):
            buf = None if rows is None else rows[:, :cols.stop - cols.start]
            if gw1 is not None or grad_x_chunk is not None:
                gh = torch.mm(grad_chunk, w2[cols].mT, out=buf)
                if gw1 is not None:
                    gw1[:, cols].addmm_(x_chunk.mT, gh)
                if grad_x_chunk is not None and i == 0:
                    torch.mm(gh, w1[:, cols].mT, out=grad_x_chunk)
                elif grad_x_chunk is not None:
                    grad_x_chunk.addmm_(gh, w1[:, cols].mT)
                del gh
            if gw2 is not None:
                gw2[cols].addmm_(torch.mm(x_chunk, w1[:, cols], out=buf).mT, grad_chunk)
