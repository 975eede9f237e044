"""The tt-layer report's own TT layer: the cores contracted with ``x`` by one ``einsum`` per core.

The reporter's ``TTLayer`` (tt-pytorch's ``t3nsor``, ``shared/seeds/tt-layer-memory.txt``) keeps the
*transposed* TT matrix (each core ``[r, n, m, r']`` viewed as ``[r, m, n, r']``) and computes
``y = (W^T @ x^T)^T``: it walks the cores from the last to the first, contracting the running data
``[rest, n_i, r_i]`` with core ``i`` by ``einsum("aijb,rjb->ira", core_t, data)`` and making the
result contiguous before the next view.  This module re-implements that computation (same order,
same einsum equation, same views and copies; the code is memlab's) so that the seed page measures
what the user ran, beside memlab's leaner :class:`~memlab.families.tensor_train.techniques.TTFactorized`.

# NOTE [ TT report einsum backward ]
Measured on the pinned torch (CPU, exact allocation trace).  Forward: for three equal cores (modes
``d``, rank ``r``) the einsums' ``bmm`` save ``x`` as a view and the two contiguous ``B d^3 r``
intermediates, as the one-core-at-a-time contraction does (``TTPlan.sequential``: what
``tt_factorized`` ran before issue 32), plus a permuted copy of every core (``einsum`` makes the
core operand contiguous in its own order; the sequential contraction uses views).  The difference that
matters comes from the layout of the output: the layer returns the *transpose* view ``[B, M]`` of
the last einsum's ``[M, B]`` result, so the contiguous upstream gradient ``[B, M]`` reaches the
last einsum's backward as a transposed view and is copied (``B d^3`` elements) into the ``bmm``'s
layout.  That copy is live at the step's peak, the first backward node (core 1's einsum), together
with the two saved intermediates, the output, and the ``B d^3 r`` gradient of the data::

    report peak   = B d^3 (3r + 2) + d^2 (r^2 + 2r) + d^2 r      elements
    sequential    = B d^3 (3r + 1) + d^2 r^2 + d^2 r             (its peak, in its backward)
    difference    = B d^3 + 2 d^2 r                              (:func:`extra_backward_bytes`)

i.e. 4,102,400 bytes at d = 10, r = 8, B = 1024, float32 (106,531,200 against 102,428,800, the
figure ``tt_factorized`` had in the sweeps before issue 32).  ``tt_factorized`` now contracts by a
block plan (NOTE [ TT contraction plans ] in :mod:`memlab.families.tensor_train.tt`) and holds less still: its
peak is :meth:`~memlab.families.tensor_train.tt.TTPlan.training_elements`, derived for a small case in
``tests/test_seed_forms.py::test_report_form_peak_is_exact``.  The
issue that asked for this form (issue 17, part 5) expected ``B d^3 (r + 1)`` more (139,296,000
bytes); on this torch the reporter's einsum chain does not hold an extra ``B d^3 r`` copy at the
peak: each inner output gradient comes back from ``contiguous()`` already in the ``bmm``'s layout.
The report's remaining claims (activations ``B d^3 (2r + 1)``, worse than dense at ``2Br > d^3``)
hold for this form exactly as for ``tt_factorized``.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .tt import TTShape, tt_shape_of
from memlab.technique import Technique
from .workload import TTLinear
from .techniques import analytic_bytes, floor_bytes

__all__ = ["TTReportEinsum", "report_tt_matmul", "extra_backward_bytes", "REPORT_EINSUM_EQUATION"]

#: the reporter's per-core contraction: core_t [a, i (out mode), j (in mode), b] x data [rest, j, b]
REPORT_EINSUM_EQUATION = "aijb,rjb->ira"


def extra_backward_bytes(shape: TTShape, batch: int, element_size: int) -> int:
    """Bytes the report's einsum form holds at its training peak beyond the one-core-at-a-time
    contraction's (``TTPlan.sequential``, ``tt_factorized`` before issue 32).

    The copy of the transposed upstream gradient (``B * out`` elements) and the permuted copies of
    the first and last cores (``2 d^2 r`` for three equal cores): ``(B d^3 + 2 d^2 r) *
    element_size``.  Derived and checked for three cores of equal modes and rank (see NOTE [ TT
    report einsum backward ]); raises ValueError otherwise.
    """
    d, r = shape.in_modes[0], shape.ranks[1]
    if shape.n_cores != 3 or set(shape.in_modes + shape.out_modes) != {d} or set(shape.ranks[1:-1]) != {r}:
        raise ValueError(f"extra_backward_bytes: derived for three equal cores (modes d, rank r); got {shape}")
    return (batch * shape.out_features + 2 * d * d * r) * element_size


def report_tt_matmul(x: torch.Tensor, cores: Sequence[torch.Tensor]) -> torch.Tensor:
    """``x @ W`` computed as the report's layer does: ``(W^T @ x^T)^T``, one einsum per core.

    Memory: see NOTE [ TT report einsum backward ]; the result is a transposed (non-contiguous)
    view, as in the report.

    Args:
        x: [B, in_features].
        cores: ``[r_{i-1}, n_i, m_i, r_i]`` each (memlab's layout; transposed views are taken here).

    Returns:
        [B, out_features] (a transposed view of a contiguous ``[out_features, B]`` tensor).
    """
    shape = tt_shape_of(cores)
    if x.dim() != 2 or x.shape[1] != shape.in_features:
        raise ValueError(f"report_tt_matmul: x must be [batch, {shape.in_features}]; got shape {tuple(x.shape)}")
    n, r = shape.in_modes, shape.ranks
    batch = x.shape[0]
    x_t = x.t()                                        # the layer's input transpose (a view)
    data = x_t.t().reshape(-1, n[-1], 1)               # [B n_1..n_{k-1}, n_k, 1]: a view of x
    for i in reversed(range(shape.n_cores)):
        core_t = cores[i].transpose(1, 2)              # [r_{i-1}, m_i, n_i, r_i], a view
        data = torch.einsum(REPORT_EINSUM_EQUATION, core_t, data)  # [m_i, rest, r_{i-1}]
        if i > 0:
            data = data.contiguous().view(-1, n[i - 1], r[i])
    return data.view(shape.out_features, batch).t()   # [m_1..m_k, B] -> [B, out]


def _extra_or_none(shape: TTShape, batch: int, element_size: int) -> int | None:
    try:
        return extra_backward_bytes(shape, batch, element_size)
    except ValueError:
        return None


class TTReportEinsum(Technique, name="tt_report_einsum"):
    """The report's TT layer: one ``einsum`` per core on the transposed cores (``(W^T x^T)^T``).

    Same maths and the same seeded cores as ``tt_factorized``; keeps the same ``B d^3 (2r + 1)``
    activations after the forward (plus core copies), and its backward holds a ``B d^3`` copy of
    the transposed upstream gradient more (NOTE [ TT report einsum backward ]).
    """

    accumulation_note = (
        "above the dense layer with or without micro-batches: the report's einsum keeps the same "
        "B d^3 (2r + 1) intermediates as tt_factorized and a transposed copy more in backward "
        "(docs/evidence/accumulation.md)")

    workload = TTLinear
    twin = "tt_factorized"

    def forward(self, problem):
        return report_tt_matmul(problem.inputs["x"], problem.model.cores)

    def describe(self, problem, mode="train") -> dict[str, Any]:
        shape, batch = self.problem_spec.tt_shape, self.config["batch"]
        e = problem.model.cores[0].element_size()
        return {
            "path": "report_einsum",
            "einsum_equation": REPORT_EINSUM_EQUATION,
            "ranks": list(shape.ranks),
            "compression": shape.compression(),
            "analytic": {**analytic_bytes(shape, batch, e),
                         "report_extra_backward_bytes": _extra_or_none(shape, batch, e)},
            "analytic_floor_bytes_by_mode": floor_bytes("factorized", shape, batch, e),
        }
