"""The seed reports' own code paths: the TT report's einsum layer and the split-based checkpoint.

Same maths (float64 reference, train and infer), and the exact peak each form's NOTE derives, against
its leaner twin, at small sizes (CPU allocation tracking is exact).
"""
from __future__ import annotations

import pytest
import torch

import memlab
from memlab.families.tensor_train.tt import BLOCKS_FIRST_FIRST, TTPlan, TTShape, plan_contraction, tt_contract
from memlab.measurement.alloc_trace import iteration_stats, trace_allocations
from memlab.families.chunking.split import split_saving_bytes
from memlab.families.tensor_train.report import extra_backward_bytes, report_tt_matmul

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)



def peak(name: str, **params) -> int:
    """Exact training peak above the baseline: the highest live bytes of one traced step."""
    return max(e.live_bytes for e in memlab.timeline(name, **params).events)

# The float64 reference checks (train and infer) of both techniques run in tests/test_reference_all.py.


def test_report_form_is_the_reports_einsum_chain():
    """Unequal modes and ranks: the einsum chain gives x @ W with a transposed-view output."""
    g = torch.Generator().manual_seed(0)
    shape = TTShape.create((2, 3, 4), (3, 2, 2), (2, 5))
    cores = [torch.randn(*s, generator=g, dtype=torch.float64) for s in shape.core_shapes]
    x = torch.randn(7, shape.in_features, generator=g, dtype=torch.float64)
    w = torch.einsum("aijb,bklc,cmnd->ikmjln", *cores).reshape(shape.in_features, shape.out_features)
    y = report_tt_matmul(x, cores)
    assert not y.is_contiguous() and y.t().is_contiguous()
    torch.testing.assert_close(y, x @ w, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"report_tt_matmul: x must be \[batch, 24\]"):
        report_tt_matmul(x[:, :5], cores)


def _sequential_peak(b: int, d: int, r: int) -> int:
    """Exact training peak (bytes above what the step starts with) of the one-core-at-a-time
    contraction (:meth:`TTPlan.sequential`, what ``tt_factorized`` ran before issue 32): x, the cores
    and the upstream gradient exist before the step, as in the technique's workload."""
    shape = TTShape.create((d,) * 3, (d,) * 3, r)
    g = torch.Generator().manual_seed(0)
    cores = [torch.randn(*s, generator=g).requires_grad_() for s in shape.core_shapes]
    x = torch.randn(b, shape.in_features, generator=g).requires_grad_()
    gy = torch.randn(b, shape.out_features, generator=g)
    plan = TTPlan.sequential(shape)

    def step():
        tt_contract(x, cores, plan).backward(gy)
        for t in (x, *cores):
            t.grad = None

    events, windows = trace_allocations(step, torch.device("cpu"), 1)
    return iteration_stats(events, windows).peaks[0]


def test_report_form_peak_is_exact():
    """B=64, d=4, r=2, float32 (e = 4 bytes), three equal cores.

    The report's form (NOTE [ TT report einsum backward ]) holds ``B d^3 + 2 d^2 r`` elements more
    than the one-core-at-a-time contraction, whose peak (in its backward: T_1, T_2, the output, the
    gradient of T_2, the last and middle cores' gradients) is ``B d^3 (3r + 1) + d^2 r^2 + d^2 r``.

    ``tt_factorized`` now contracts by a block plan (NOTE [ TT contraction plans ]); at this size
    the planner picks first block first, blocks [core 1] and [cores 2, 3]: core 1 is used as a view
    ``[d r, d]``, cores 2-3 are merged into one ``[r d^2, d^2]`` block (``r d^4`` elements, a copy),
    and the forward keeps ONE intermediate ``T_1 = [B, d r, d^2]`` (``B d^3 r``) and the output
    (``B d^3``).  Its backward allocates both block gradients (``d^2 r + r d^4``, zeroed
    accumulators), writes the gradient of ``T_1`` into ``T_1``'s own buffer, and then the input
    gradient (``B d^3``) while everything else is still held: that is the peak::

        block + T_1 + y + block gradients + grad_x
        = r d^4 + B d^3 r + B d^3 + (d^2 r + r d^4) + B d^3
        = B d^3 (r + 2) + 2 r d^4 + r d^2                     elements

    (:meth:`TTPlan.training_elements`; the batched core-1 gradient's ``[B, d r, d]`` temporary,
    ``B d^2 r``, is freed before ``grad_x`` exists).  Below the sequential peak here by
    ``B d^3 (2r - 1) + d^2 r^2 - 2 r d^4``.
    """
    b, d, r = 64, 4, 2
    size = dict(batch=b, rank=r, in_modes=(d,) * 3, out_modes=(d,) * 3)
    shape = TTShape.create((d,) * 3, (d,) * 3, r)
    rep, fac = peak("tt_report_einsum", **size), peak("tt_factorized", **size)
    e = 4
    assert rep == (b * d**3 * (3 * r + 2) + d * d * (r * r + 2 * r) + d * d * r) * e
    seq = _sequential_peak(b, d, r)
    assert seq == (b * d**3 * (3 * r + 1) + d * d * r * r + d * d * r) * e
    extra = extra_backward_bytes(shape, b, e)
    assert rep - seq == extra == 16_640
    plan = plan_contraction(shape, b, True)
    assert (plan.kind, plan.sizes) == (BLOCKS_FIRST_FIRST, (1, 2))
    assert fac == (b * d**3 * (r + 2) + 2 * r * d**4 + r * d * d) * e == plan.training_elements(b) * e == 69_760
    assert fac < seq


def test_extra_backward_bytes_refuses_unequal_cores():
    with pytest.raises(ValueError, match="three equal cores"):
        extra_backward_bytes(TTShape.create((2, 3, 4), (3, 2, 2), 2), 8, 4)


def test_split_checkpoint_peak_below_slice_checkpoint():
    """n=2000, d=64, c=500: split saves one chunk's gradient (c d x 4 bytes) plus at most one
    saved RNG state per chunk (see NOTE [ split vs slice checkpoint ])."""
    n, d, hidden, c = 2000, 64, 128, 500
    size = dict(n=n, d=d, hidden=hidden, chunk_size=c)
    saving = peak("checkpoint_chunk", **size) - peak("checkpoint_split_chunk", **size)
    chunk_grad = split_saving_bytes(n, d, c, 4)
    assert chunk_grad == c * d * 4
    rng_state = torch.get_rng_state().numel()
    assert chunk_grad <= saving <= chunk_grad + (n // c) * rng_state, (saving, chunk_grad, rng_state)
    assert split_saving_bytes(n, d, n, 4) == 0
