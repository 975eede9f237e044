"""Row-chunked evaluation of a per-row function whose backward never builds a full-size temporary.

``slice_accumulate(fn, x, *params, chunk_size=c)`` computes ``cat([fn(x[s:e], *params) ...])`` over
row chunks of ``x`` (dim 0) and differentiates it chunk by chunk.

# NOTE [ slice_backward spike ]
Writing ``y[s:e] = fn(x[s:e], w)`` in a Python loop lowers the forward peak, but autograd saves every
chunk's intermediates for backward (so the training peak does not drop) and the backward of each
``x[s:e]`` slice (``SliceBackward0`` -> ``aten::slice_backward``) allocates a zero-filled gradient the
size of the whole ``x`` and copies the chunk's gradient into it; those full-size gradients are then
summed into ``x.grad``.  Here the loop lives inside one autograd node instead: forward runs under
``no_grad`` and saves only ``x`` and ``params``; backward recomputes one chunk at a time with grad
enabled, writes that chunk's input gradient straight into rows ``[s, e)`` of ONE preallocated
``grad_x`` and adds the chunk's parameter gradients into one accumulator per parameter.  Live memory
in backward is therefore: the output, ``grad_x``, the parameter accumulators and one chunk's
recomputed graph (its intermediates, its gradients and the chunk's parameter-gradient temporaries).

# NOTE [ chunk scratch ]
At small chunks (n/100) the per-chunk cost that is not FLOPs shows: a fresh [chunk, hidden] tensor
per product (160 KB at c=40, hidden=1024: above glibc's initial 128 KiB mmap threshold), a chunk
output that is copied into ``y``, and the Python loop around them.  A ``scratch`` function lets the
hand-written per-chunk forward and backward write their chunk-sized temporaries into ONE workspace
allocated once per loop (``torch.mm(..., out=scratch[:rows])``) instead: the same bytes at the peak
(the workspace is the one [chunk, ...] tensor that was live at a time), no allocation per chunk.
The forward loop allocates its workspace after ``y`` (from the first chunk, computed by ``fn``
itself) and frees it at the loop's end; the backward allocates its own after ``grad_x`` and the
parameter accumulators and frees it before returning, so nothing is kept between the two.

What it buys is small (issue 32; n=4000, d=256, hidden=1024, c=40): a few per cent of the step
in-process, the workspace and in-place forward first, the backward's order
(:func:`~memlab.families.chunking.chained_matmul.chained_matmul_chunk_vjp`) next, and less than the scatter
of memlab's own timing (``memlab bench-harness --limits``' point).  What remains is in the products
themselves: nearly all of the step is ``mm``/``addmm_``, little of it the loop, and the chunked
products of 40 rows run slower than the unchunked ones (each call streams a 1 MiB weight or
accumulator for 40 rows, from L3: this CPU's L2 is 1 MiB per core).  The chained matmul's manual
path now spends the same workspace on more rows and fewer hidden columns per product (NOTE [
hidden tiles ] in :mod:`memlab.families.chunking.chained_matmul`).  Evidence:
docs/evidence/code-notes.md#chunk-scratch
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import torch

__all__ = ["slice_accumulate", "ChunkVJP", "ChunkForward", "ChunkScratch", "chunk_bounds", "check_chunk_size"]

#: ``chunk_vjp(x_chunk, grad_chunk, params, grad_x_chunk, grad_params) -> None``: writes the chunk's
#: input gradient into ``grad_x_chunk`` (a [rows, ...] view of the preallocated ``grad_x``; None when
#: ``x`` needs no gradient) and ADDS each parameter's gradient into ``grad_params[i]`` (None where
#: that parameter needs no gradient).  Called with grad mode disabled.  With a ``scratch`` function
#: (:data:`ChunkScratch`) it is also given the workspace as keyword ``scratch``.
ChunkVJP = Callable[
    [torch.Tensor, torch.Tensor, Sequence[torch.Tensor], Optional[torch.Tensor], Sequence[Optional[torch.Tensor]]],
    None,
]

#: ``chunk_forward(x_chunk, params, out_chunk) -> None``: writes ``fn(x_chunk, *params)`` into
#: ``out_chunk`` (rows ``[s, e)`` of the preallocated output) instead of returning a new tensor that
#: the loop then copies.  Used for every chunk after the first (whose output gives the shape).  With a
#: ``scratch`` function it is also given the workspace as keyword ``scratch``.
ChunkForward = Callable[[torch.Tensor, Sequence[torch.Tensor], torch.Tensor], None]

#: ``scratch(rows, x, params) -> workspace``: the temporaries ``chunk_forward`` and ``chunk_vjp`` reuse for
#: every chunk of one loop, for chunks of at most ``rows`` rows (a tensor, or a tuple of them; the
#: callbacks slice what a shorter last chunk needs).  Called once per loop (forward, backward); see
#: NOTE [ chunk scratch ].
ChunkScratch = Callable[[int, torch.Tensor, Sequence[torch.Tensor]], object]


@dataclass(frozen=True)
class _Spec:
    """Settings of one call, passed to the autograd Function as a single argument."""

    fn: Callable[..., torch.Tensor]
    chunk_size: int
    chunk_vjp: Optional[ChunkVJP]
    chunk_forward: Optional[ChunkForward] = None
    scratch: Optional[ChunkScratch] = None

    def workspace(self, x: torch.Tensor, params: Sequence[torch.Tensor]) -> dict:
        """The keyword arguments the callbacks get: ``{"scratch": workspace}`` or none (NOTE [ chunk scratch ])."""
        if self.scratch is None:
            return {}
        return {"scratch": self.scratch(min(self.chunk_size, x.shape[0]), x, params)}


def chunk_bounds(n: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run of ``chunk_size`` rows out of ``n``; the last may be shorter.

    Example::

        list(chunk_bounds(5, 2))  # [(0, 2), (2, 4), (4, 5)]
    """
    for s in range(0, n, chunk_size):
        yield s, min(s + chunk_size, n)


def check_chunk_size(chunk_size: object) -> int:
    """``chunk_size`` if it is an int >= 1 (rows per chunk).

    Raises:
        TypeError: not an int (a bool is not).
        ValueError: below 1.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"slice_accumulate: chunk_size must be an int >= 1, got {chunk_size!r}")
    if chunk_size < 1:
        raise ValueError(f"slice_accumulate: chunk_size={chunk_size} is not valid; expected an int >= 1")
    return chunk_size


def _checked_chunk(out: object, rows: int, s: int, e: int) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"slice_accumulate: fn must return a Tensor, got {type(out).__name__} for rows [{s}, {e})")
    if out.dim() < 1 or out.shape[0] != rows:
        raise ValueError(
            f"slice_accumulate: fn must return [rows, ...] for rows [{s}, {e}) ({rows} rows); "
            f"got shape {tuple(out.shape)} (fn must act on each row independently)"
        )
    return out


def _forward_loop(spec: _Spec, x: torch.Tensor, params: Sequence[torch.Tensor]) -> torch.Tensor:
    """The chunk loop without autograd: y [N, ...] preallocated from the first chunk's shape; later
    chunks are written in place by ``spec.chunk_forward`` when there is one."""
    n = x.shape[0]
    y: Optional[torch.Tensor] = None
    work: Optional[dict] = None
    for s, e in chunk_bounds(n, spec.chunk_size):
        if y is not None and spec.chunk_forward is not None:
            if work is None:  # after y and the first chunk's output: NOTE [ chunk scratch ]
                work = spec.workspace(x, params)
            spec.chunk_forward(x[s:e], params, y[s:e], **work)
            continue
        out = _checked_chunk(spec.fn(x[s:e], *params), e - s, s, e)
        if y is None:
            y = out.new_empty((n, *out.shape[1:]))
        elif out.shape[1:] != y.shape[1:] or out.dtype != y.dtype:
            raise ValueError(
                f"slice_accumulate: fn returned {tuple(out.shape)} {out.dtype} for rows [{s}, {e}) but "
                f"[rows, {', '.join(map(str, y.shape[1:]))}] {y.dtype} for the first chunk"
            )
        y[s:e].copy_(out)
        del out
    assert y is not None  # n >= 1 is checked by the public function
    return y


def _autograd_chunk_vjp(fn):
    """The default per-chunk backward: recompute ``fn`` on the chunk with autograd and differentiate."""

    def vjp(x_chunk, grad_chunk, params, grad_x_chunk, grad_params):
        want_x = grad_x_chunk is not None
        with torch.enable_grad():
            xc = x_chunk.detach().requires_grad_(want_x)
            ps = [p.detach().requires_grad_(g is not None) for p, g in zip(params, grad_params)]
            out = fn(xc, *ps)
            inputs = ([xc] if want_x else []) + [p for p, g in zip(ps, grad_params) if g is not None]
            grads = torch.autograd.grad(out, inputs, grad_chunk, allow_unused=True)
            del out
        k = 0
        if want_x:
            if grads[0] is None:
                grad_x_chunk.zero_()
            else:
                grad_x_chunk.copy_(grads[0])
            k = 1
        for acc in grad_params:
            if acc is None:
                continue
            if grads[k] is not None:
                acc.add_(grads[k])
            k += 1

    return vjp


class _SliceAccumulate(torch.autograd.Function):
    """Private: forward = chunk loop under no_grad; backward = chunk loop of recompute + accumulate."""

    @staticmethod
    def forward(ctx, spec: _Spec, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        ctx.spec = spec
        ctx.save_for_backward(x, *params)
        return _forward_loop(spec, x, params)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y: torch.Tensor):
        spec: _Spec = ctx.spec
        x, *params = ctx.saved_tensors
        need_x = ctx.needs_input_grad[1]
        need_p = ctx.needs_input_grad[2:]
        grad_x = torch.empty_like(x, memory_format=torch.contiguous_format) if need_x else None
        grad_params = [torch.zeros_like(p) if need else None for p, need in zip(params, need_p)]
        if spec.chunk_vjp is None:
            vjp, work = _autograd_chunk_vjp(spec.fn), {}
        else:
            vjp, work = spec.chunk_vjp, spec.workspace(x, params)
        for s, e in chunk_bounds(x.shape[0], spec.chunk_size):
            vjp(x[s:e], grad_y[s:e], params, None if grad_x is None else grad_x[s:e], grad_params, **work)
        del work
        return (None, grad_x, *grad_params)


def slice_accumulate(fn: Callable[..., torch.Tensor], x: torch.Tensor, *params: torch.Tensor, chunk_size: int,
                     chunk_vjp: Optional[ChunkVJP] = None, chunk_forward: Optional[ChunkForward] = None,
                     scratch: Optional[ChunkScratch] = None) -> torch.Tensor:
    """``torch.cat([fn(x[s:e], *params) for each row chunk])`` with a backward that never holds more
    than one chunk's graph and never allocates a full-size gradient per chunk.

    Memory/compute trade-off: forward runs ``fn`` chunk by chunk under ``no_grad`` and saves only
    ``x`` and ``params`` (no activation); backward runs ``fn`` again on each chunk (one extra forward
    in total), writes that chunk's gradient into rows ``[s, e)`` of one preallocated ``grad_x`` (only
    when ``x`` requires grad) and adds the chunk's parameter gradients into one zero-initialised
    accumulator per grad-requiring parameter.  See NOTE [ slice_backward spike ].  Without grad (no
    input requires it or grad mode is off) it is just the chunk loop.

    Args:
        fn: per-row function ``fn(x_chunk [rows, ...], *params) -> [rows, ...]``; rows must be
            independent (row ``i`` of the output depends only on row ``i`` of ``x``).
        x: [N, ...] input, chunked along dim 0; may or may not require grad.
        *params: tensors passed whole to every call (weights); each may or may not require grad.
        chunk_size: rows per chunk, >= 1 (keyword-only); the last chunk may be shorter and
            ``chunk_size >= N`` is a single chunk.
        chunk_vjp: optional hand-written per-chunk backward (see :data:`ChunkVJP`) that writes the
            chunk's input gradient in place and accumulates parameter gradients in place; the
            default recomputes ``fn`` with autograd and adds its gradients (one parameter-sized
            temporary per parameter per chunk).
        chunk_forward: optional in-place form of ``fn`` (see :data:`ChunkForward`) that writes a
            chunk's output straight into its rows of ``y`` (no per-chunk output and copy).
        scratch: optional workspace builder (see :data:`ChunkScratch`) for ``chunk_forward`` and
            ``chunk_vjp``: their chunk-sized temporaries in one tensor per loop instead of one
            allocation per chunk (NOTE [ chunk scratch ]); the default recomputation ignores it.

    Returns:
        y: [N, ...] equal to ``torch.cat([fn(x[s:e], *params) ...])``.

    Raises:
        ValueError: ``chunk_size`` < 1, ``x`` with no rows, or ``fn`` returning the wrong rows.
        TypeError: ``x`` or a param is not a Tensor, or ``chunk_size`` is not an int.

    Example:
        >>> f = lambda xc, w1, w2: (xc @ w1) @ w2
        >>> y = slice_accumulate(f, x, w1, w2, chunk_size=2500)   # [10000, 256] -> [10000, 256]
        >>> y.backward(grad_y)   # x.grad, w1.grad, w2.grad; peak holds one [2500, 1024] hidden
    """
    check_chunk_size(chunk_size)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"slice_accumulate: x must be a Tensor, got {type(x).__name__}")
    if x.dim() < 1 or x.shape[0] < 1:
        raise ValueError(f"slice_accumulate: x must have at least one row along dim 0, got shape {tuple(x.shape)}")
    for i, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"slice_accumulate: params[{i}] must be a Tensor, got {type(p).__name__}")
    if scratch is not None and not callable(scratch):
        raise TypeError(f"slice_accumulate: scratch must be callable (rows, x, params) -> workspace, got {scratch!r}")
    spec = _Spec(fn, chunk_size, chunk_vjp, chunk_forward, scratch)
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in (x, *params)):
        with torch.no_grad():
            return _forward_loop(spec, x, params)
    return _SliceAccumulate.apply(spec, x, *params)
