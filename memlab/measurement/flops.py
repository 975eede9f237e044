"""FLOPs of one step: ``torch.utils.flop_counter.FlopCounterMode`` plus the matrix products it misses.

What is counted: every op torch's own counter counts (``mm``, ``addmm``, ``bmm``, ``baddbmm``,
convolutions, attention kernels, ... and their ``out=`` overloads, which share the op's packet),
plus these matrix products that the pinned torch (2.13) counts as 0:

* in-place variants, counted like their out-of-place twin: ``addmm_``, ``baddbmm_``, ``addbmm_``,
  ``addmv_``, ``addr_``; and ``_addmm_activation`` (fused ``addmm`` + ReLU/GELU) like ``addmm``;
* products absent from its registry (with their ``out=`` and in-place overloads): ``addbmm``,
  ``mv``, ``addmv``, ``dot``, ``vdot``, ``addr``.

``matmul``, ``linear``, ``einsum``, ``tensordot``, ``inner`` and ``linalg.multi_dot`` are not ops
of their own here: they decompose into the ops above (e.g. ``matmul`` of [m, k] @ [k] into
``mv``, [k] @ [k] into ``dot``) and are counted through them.

Convention (the one ``FlopCounterMode`` uses): a product of [m, k] @ [k, n] is ``2 * m * k * n``
FLOPs (one multiply and one add per term, i.e. ``2 * k`` rather than ``2 * k - 1`` per output
element); the ``beta * self`` addend, ``alpha`` scaling, bias additions and every elementwise op are
not counted.  So a batched product is ``2 * b * m * k * n``, a matrix-vector product ``2 * m * k``,
a dot product of length-k vectors ``2 * k`` and ``addr``'s outer product of an m- and an n-vector
``2 * m * n`` (a product with k = 1).  ``torch.outer`` / ``ger`` decompose into an elementwise
``mul`` and, like every elementwise op, count 0.

# NOTE [ in-place products were missing ]
``FlopCounterMode`` keys its formulas by ``OpOverloadPacket``: ``aten.mm.out`` shares
``aten.mm``'s packet and is counted, but ``aten.addmm_`` is a packet of its own with no formula,
so an in-place product counted 0.  Techniques that accumulate gradients in place (e.g.
``slice_accumulate``'s hand-written chunk backward, ``gw += x_c.T @ gh`` as ``addmm_``, or the
tensor-train backward's ``baddbmm_``) were therefore under-counted: ``slice_accumulate`` was
reported at 0.83x the FLOPs of ``unchunked`` while it really does 7/6 of them (one extra forward).
This module extends the counter through its ``custom_mapping`` argument (one counter at a time),
never by editing torch's global ``flop_registry``; an op the installed torch already counts keeps
torch's formula.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils.flop_counter import FlopCounterMode, flop_registry

__all__ = ["count_step_flops", "make_flop_counter", "extra_flop_formulas"]

aten = torch.ops.aten


def _product_flops(m: int, k: int, n: int, batch: int = 1) -> int:
    """FLOPs of ``batch`` products [m, k] @ [k, n]: ``2 * batch * m * k * n`` (FlopCounterMode's rule)."""
    return 2 * batch * m * k * n


# Shape formulas: ``custom_mapping`` wraps them so that every tensor argument arrives as its shape;
# the leading positional arguments follow the op's schema, the rest (beta, alpha, out) is ignored.

def _addbmm_flops(self_shape, batch1_shape, batch2_shape, *args, out_shape=None, **kwargs) -> int:
    """``addbmm(self, b1 [b, m, k], b2 [b, k, n])``: ``2 * b * m * k * n`` FLOPs (sum over b not counted)."""
    b, m, k = batch1_shape
    _, _, n = batch2_shape
    return _product_flops(m, k, n, batch=b)


def _mv_flops(mat_shape, vec_shape, *args, out_shape=None, **kwargs) -> int:
    """``mv(mat [m, k], vec [k])``: ``2 * m * k`` FLOPs."""
    m, k = mat_shape
    return _product_flops(m, k, 1)


def _addmv_flops(self_shape, mat_shape, vec_shape, *args, out_shape=None, **kwargs) -> int:
    """``addmv(self, mat [m, k], vec [k])``: as :func:`_mv_flops`, ``2 * m * k`` FLOPs."""
    return _mv_flops(mat_shape, vec_shape)


def _dot_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """``dot`` / ``vdot`` of two length-k vectors: ``2 * k`` FLOPs."""
    (k,) = a_shape
    return _product_flops(1, k, 1)


def _addr_flops(self_shape, vec1_shape, vec2_shape, *args, out_shape=None, **kwargs) -> int:
    """``addr(self, vec1 [m], vec2 [n])``: the outer product as [m, 1] @ [1, n], ``2 * m * n`` FLOPs."""
    (m,) = vec1_shape
    (n,) = vec2_shape
    return _product_flops(m, 1, n)


#: Out-of-place products missing from the pinned torch's registry, with their shape formulas.
_NEW_PRODUCTS: dict[Any, Callable[..., int]] = {
    aten.addbmm: _addbmm_flops,
    aten.mv: _mv_flops,
    aten.addmv: _addmv_flops,
    aten.dot: _dot_flops,
    aten.vdot: _dot_flops,
    aten.addr: _addr_flops,
}

#: Ops counted exactly like another op (their out-of-place twin): same arguments, same result shape.
_SAME_AS: dict[Any, Any] = {
    aten.addmm_: aten.addmm,
    aten.baddbmm_: aten.baddbmm,
    aten.addbmm_: aten.addbmm,
    aten.addmv_: aten.addmv,
    aten.addr_: aten.addr,
    aten._addmm_activation: aten.addmm,
}


def _delegate_to(formula: Callable[..., int]) -> Callable[..., int]:
    """Pass the raw arguments (tensors, ``out_val``) to one of torch's registered formulas.

    Torch's registered formulas already turn tensors into shapes themselves, so the delegate is
    marked ``_get_raw`` to keep ``FlopCounterMode`` from wrapping it a second time.
    """

    def count(*args, **kwargs) -> int:
        return formula(*args, **kwargs)

    count._get_raw = True  # type: ignore[attr-defined]  # FlopCounterMode's marker for raw formulas
    return count


def extra_flop_formulas() -> dict[Any, Callable[..., int]]:
    """The ``custom_mapping`` for ``FlopCounterMode``: a formula for each product torch counts as 0.

    Only ops absent from the installed torch's ``flop_registry`` are included, so an op torch
    learns to count later keeps torch's formula.

    Returns:
        ``{OpOverloadPacket: formula}``; a formula returns FLOPs (``2 * m * k * n`` per
        [m, k] @ [k, n] product, see the module docstring).
    """
    mapping: dict[Any, Callable[..., int]] = {
        packet: formula for packet, formula in _NEW_PRODUCTS.items() if packet not in flop_registry
    }
    for packet, twin in _SAME_AS.items():
        if packet in flop_registry:
            continue
        mapping[packet] = mapping[twin] if twin in mapping else _delegate_to(flop_registry[twin])
    return mapping


def make_flop_counter() -> FlopCounterMode:
    """A silent ``FlopCounterMode`` that also counts the products in :func:`extra_flop_formulas`.

    Use it as a context manager, then read ``get_total_flops()`` (FLOPs) or ``get_flop_counts()``
    (FLOPs per op packet).  Not reentrant, like ``FlopCounterMode``.
    """
    return FlopCounterMode(display=False, custom_mapping=extra_flop_formulas())


def count_step_flops(step: Callable[[], None]) -> int:
    """Run ``step()`` once and return the FLOPs it performed.

    FLOPs as ``FlopCounterMode`` counts them (``2 * m * k * n`` per [m, k] @ [k, n] product,
    elementwise ops 0), with in-place and ``out=`` matrix products counted too; see the module
    docstring and NOTE [ in-place products were missing ].  Warm the step up first if its first
    call differs from later ones (e.g. an optimizer creating its state).

    Args:
        step: a callable running one step, e.g. the ``step`` of
            :func:`~memlab.measurement.step.make_step`.

    Returns:
        FLOPs (floating-point operations, not per second) of that one call.
    """
    counter = make_flop_counter()
    with counter:
        step()
    return int(counter.get_total_flops())
