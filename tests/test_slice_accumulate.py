"""memlab.functional.slice_accumulate: same maths as the unchunked function, exact memory behaviour."""
from __future__ import annotations

import pytest
import torch

from memlab.families.chunking.chained_matmul import (chained_matmul, chained_matmul_chunk_vjp, chained_matmul_into,
                                              chained_matmul_scratch)
from memlab.functional.slice_accumulate import slice_accumulate
from memlab.measurement.alloc_trace import iteration_stats, trace_allocations

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)


def tanh_chain(xc, w1, w2):
    return torch.tanh(xc @ w1) @ w2


def _problem(n=37, d=8, hidden=16, out=5, x_grad=True, w2_grad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64).requires_grad_(x_grad)
    w1 = torch.randn(d, hidden, generator=g, dtype=torch.float64).requires_grad_(True)
    w2 = torch.randn(hidden, out, generator=g, dtype=torch.float64).requires_grad_(w2_grad)
    gy = torch.randn(n, out, generator=g, dtype=torch.float64)
    return x, w1, w2, gy


def _grads(y, leaves, gy):
    return torch.autograd.grad(y, leaves, gy)


@pytest.mark.parametrize("chunk_size", [1, 5, 37, 100])  # 5 does not divide 37; 100 >= N
@pytest.mark.parametrize("x_grad", [True, False])
@pytest.mark.parametrize("w2_grad", [True, False])
def test_matches_unchunked_function_and_grads(chunk_size, x_grad, w2_grad):
    x, w1, w2, gy = _problem(x_grad=x_grad, w2_grad=w2_grad)
    leaves = [t for t in (x, w1, w2) if t.requires_grad]
    y = slice_accumulate(tanh_chain, x, w1, w2, chunk_size=chunk_size)
    ref = tanh_chain(x, w1, w2)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    for got, want in zip(_grads(y, leaves, gy), _grads(ref, leaves, gy)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("chunk_size", [3, 37])
@pytest.mark.parametrize("x_grad", [True, False])
def test_hand_written_chunk_vjp_matches(chunk_size, x_grad):
    x, w1, w2, gy = _problem(out=8, x_grad=x_grad)
    leaves = [t for t in (x, w1, w2) if t.requires_grad]
    y = slice_accumulate(chained_matmul, x, w1, w2, chunk_size=chunk_size, chunk_vjp=chained_matmul_chunk_vjp)
    ref = chained_matmul(x, w1, w2)
    torch.testing.assert_close(y, ref)
    for got, want in zip(_grads(y, leaves, gy), _grads(ref, leaves, gy)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_multi_dim_rows_and_param_without_grad():
    x = torch.randn(10, 3, 4, dtype=torch.float64, requires_grad=True)
    scale = torch.randn(4, dtype=torch.float64)  # no grad

    def fn(xc, s):  # [rows, 3, 4] -> [rows, 3]
        return (xc * s).sum(-1)

    y = slice_accumulate(fn, x, scale, chunk_size=3)
    torch.testing.assert_close(y, fn(x, scale))
    (gx,) = torch.autograd.grad(y, [x], torch.ones_like(y))
    torch.testing.assert_close(gx, scale.expand(10, 3, 4))


def test_without_grad_is_a_plain_loop():
    x, w1, w2, _ = _problem()
    with torch.no_grad():
        y = slice_accumulate(tanh_chain, x, w1, w2, chunk_size=4)
    assert y.grad_fn is None and not y.requires_grad
    torch.testing.assert_close(y, tanh_chain(x, w1, w2).detach())


@pytest.mark.parametrize("bad", [0, -3])
def test_chunk_size_below_one_is_a_value_error_naming_it(bad):
    x, w1, w2, _ = _problem()
    with pytest.raises(ValueError, match=rf"chunk_size={bad} is not valid; expected an int >= 1"):
        slice_accumulate(tanh_chain, x, w1, w2, chunk_size=bad)


def test_bad_arguments():
    x, w1, w2, _ = _problem()
    with pytest.raises(TypeError, match=r"chunk_size must be an int >= 1, got 2.5"):
        slice_accumulate(tanh_chain, x, w1, w2, chunk_size=2.5)
    with pytest.raises(TypeError, match=r"params\[1\] must be a Tensor, got float"):
        slice_accumulate(tanh_chain, x, w1, 1.0, chunk_size=2)
    with pytest.raises(ValueError, match=r"at least one row"):
        slice_accumulate(tanh_chain, x[:0], w1, w2, chunk_size=2)
    with pytest.raises(ValueError, match=r"fn must return \[rows, \.\.\.\] for rows \[0, 4\)"):
        slice_accumulate(lambda xc, a, b: (xc @ a @ b).sum(0, keepdim=True), x, w1, w2, chunk_size=4)


def _traced_peak(fn) -> int:
    events, windows = trace_allocations(fn, torch.device("cpu"), 1)
    return iteration_stats(events, windows).peaks[0]


def test_backward_holds_one_chunk_not_one_x_sized_gradient_per_chunk():
    """Exact bytes (float32): with the hand-written chunk backward, the step's peak is the output,
    grad_x, both weight gradients and ONE [chunk, hidden] tensor, for every number of chunks."""
    n, d, hidden = 600, 16, 64
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g).requires_grad_()
    w1 = torch.randn(d, hidden, generator=g).requires_grad_()
    w2 = torch.randn(hidden, d, generator=g).requires_grad_()
    gy = torch.randn(n, d, generator=g)

    def step(c):
        def run():
            y = slice_accumulate(chained_matmul, x, w1, w2, chunk_size=c, chunk_vjp=chained_matmul_chunk_vjp)
            y.backward(gy)
            del y
            x.grad = w1.grad = w2.grad = None
        return run

    e = 4
    fixed = (n * d) * 2 * e + 2 * d * hidden * e  # y, grad_x, grad_w1, grad_w2
    for c in (600, 150, 7, 1):
        assert _traced_peak(step(c)) == fixed + min(c, n) * hidden * e


def _chained_into(xc, params, out):
    torch.mm(xc @ params[0], params[1], out=out)


@pytest.mark.parametrize("chunk_size", [1, 5, 37])
def test_chunk_forward_writes_in_place_same_values(chunk_size):
    x, w1, w2, gy = _problem(out=8)
    leaves = [x, w1, w2]
    y = slice_accumulate(chained_matmul, x, w1, w2, chunk_size=chunk_size, chunk_vjp=chained_matmul_chunk_vjp,
                         chunk_forward=_chained_into)
    ref = chained_matmul(x, w1, w2)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    for got, want in zip(_grads(y, leaves, gy), _grads(ref, leaves, gy)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    with torch.no_grad():
        torch.testing.assert_close(slice_accumulate(chained_matmul, x, w1, w2, chunk_size=chunk_size,
                                                    chunk_forward=_chained_into), ref.detach())


def test_chunk_forward_drops_the_per_chunk_output_from_the_forward_peak():
    """Exact bytes (float32, no grad): the loop holds y, one chunk's hidden and (without chunk_forward)
    the chunk's output before it is copied into y; with chunk_forward only the first chunk's output."""
    n, d, hidden, c = 600, 16, 64, 50
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = torch.randn(n, d, generator=g), torch.randn(d, hidden, generator=g), torch.randn(hidden, d, generator=g)

    def run(**kw):
        def step():
            with torch.no_grad():
                slice_accumulate(chained_matmul, x, w1, w2, chunk_size=c, **kw)
        return step

    e = 4
    assert _traced_peak(run()) == (n * d + c * hidden + c * d) * e
    assert _traced_peak(run(chunk_forward=_chained_into)) == (n * d + c * hidden) * e


def _chain_step(c, n=600, d=16, hidden=64, **kw):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g).requires_grad_()
    w1 = torch.randn(d, hidden, generator=g).requires_grad_()
    w2 = torch.randn(hidden, d, generator=g).requires_grad_()
    gy = torch.randn(n, d, generator=g)

    def run():
        y = slice_accumulate(chained_matmul, x, w1, w2, chunk_size=c, chunk_vjp=chained_matmul_chunk_vjp, **kw)
        y.backward(gy)
        del y
        x.grad = w1.grad = w2.grad = None
    return run


SCRATCH = dict(chunk_forward=chained_matmul_into, scratch=chained_matmul_scratch)


@pytest.mark.parametrize("chunk_size", [1, 5, 37, 100])
@pytest.mark.parametrize("x_grad", [True, False])
def test_scratch_same_values(chunk_size, x_grad):
    x, w1, w2, gy = _problem(out=8, x_grad=x_grad)
    leaves = [t for t in (x, w1, w2) if t.requires_grad]
    y = slice_accumulate(chained_matmul, x, w1, w2, chunk_size=chunk_size, chunk_vjp=chained_matmul_chunk_vjp,
                         **SCRATCH)
    ref = chained_matmul(x, w1, w2)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    for got, want in zip(_grads(y, leaves, gy), _grads(ref, leaves, gy)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_scratch_keeps_the_training_peak_and_allocates_nothing_per_chunk():
    """NOTE [ chunk scratch ], exact bytes (float32): the peak is the same as without the workspace
    (output, grad_x, both weight gradients and ONE [chunk, hidden] tensor), and the step allocates a
    fixed number of tensors whatever the number of chunks: the first chunk's hidden and output
    (computed by ``fn``), y, the forward's workspace (only with a second chunk), grad_x, two weight
    gradients and the backward's workspace: 8 (7 for a single chunk)."""
    n, d, hidden, e = 600, 16, 64, 4
    fixed = (n * d) * 2 * e + 2 * d * hidden * e
    counts = {}
    for c in (600, 150, 7, 1):
        events, windows = trace_allocations(_chain_step(c, **SCRATCH), torch.device("cpu"), 1)
        assert iteration_stats(events, windows).peaks[0] == fixed + min(c, n) * hidden * e
        assert _traced_peak(_chain_step(c)) == fixed + min(c, n) * hidden * e
        counts[c] = sum(1 for ev in events if ev.delta_bytes > 0)
    assert counts == {600: 7, 150: 8, 7: 8, 1: 8}


def test_scratch_forward_peak_is_output_and_one_hidden():
    """Exact bytes (float32, no grad): with the in-place forward and its workspace the loop holds y
    and one [chunk, hidden] tensor (the chunk output that the copy needed is gone)."""
    n, d, hidden, c = 600, 16, 64, 50
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = torch.randn(n, d, generator=g), torch.randn(d, hidden, generator=g), torch.randn(hidden, d, generator=g)

    def step():
        with torch.no_grad():
            slice_accumulate(chained_matmul, x, w1, w2, chunk_size=c, **SCRATCH)

    assert _traced_peak(step) == (n * d + c * hidden) * 4


def test_scratch_must_be_callable():
    x, w1, w2, _ = _problem()
    with pytest.raises(TypeError, match="slice_accumulate: scratch must be callable"):
        slice_accumulate(chained_matmul, x, w1, w2, chunk_size=4, scratch=3)


@pytest.mark.parametrize("tile", [1, 3, 4, 16])  # 3 does not divide hidden=16: a narrower last tile
@pytest.mark.parametrize("chunk_size", [5, 37])
@pytest.mark.parametrize("x_grad", [True, False])
def test_hidden_tiles_same_values(tile, chunk_size, x_grad):
    """NOTE [ hidden tiles ]: the forward and the chunk backward walked in tiles of hidden columns
    (the workspace as narrow as a tile, the output, grad_x and accumulators summed over tiles) give
    the unchunked values and gradients (float64)."""
    import functools

    from memlab.families.chunking.chained_matmul import chained_matmul_in_tiles
    x, w1, w2, gy = _problem(out=8, x_grad=x_grad)
    leaves = [t for t in (x, w1, w2) if t.requires_grad]
    y = slice_accumulate(chained_matmul_in_tiles(tile), x, w1, w2, chunk_size=chunk_size,
                         chunk_vjp=chained_matmul_chunk_vjp, chunk_forward=chained_matmul_into,
                         scratch=functools.partial(chained_matmul_scratch, tile=tile))
    ref = chained_matmul(x, w1, w2)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    for got, want in zip(_grads(y, leaves, gy), _grads(ref, leaves, gy)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_hidden_tiles_plan():
    """k divides hidden, k d <= hidden, at least four passes, only on a CPU and only where the four
    [d, hidden] matrices of a chunk exceed the cache."""
    from memlab.families.chunking.chained_matmul import CACHE_BYTES, hidden_tiles
    assert hidden_tiles(4000, 256, 1024, 40, 4, "cpu") == 4        # four 1 MiB matrices -> 256-column tiles
    assert hidden_tiles(4000, 256, 1024, 40, 4, "cuda") == 1
    assert hidden_tiles(4000, 256, 1024, 40, 8, "cpu") == 1         # float64 would need k = 8 > hidden / d
    assert hidden_tiles(10000, 256, 1024, 1000, 4, "cpu") == 1      # k = 4 would leave fewer than 4 passes
    assert hidden_tiles(4000, 64, 1024, 40, 4, "cpu") == 1          # 1 MiB in all: fits the cache already
    assert 4 * 64 * 1024 * 4 == CACHE_BYTES
    for n, d, hidden, c in ((100000, 128, 3000, 10), (100000, 300, 2048, 7), (5000, 512, 4096, 1)):
        k = hidden_tiles(n, d, hidden, c, 4, "cpu")
        assert hidden % k == 0 and k * d <= hidden and (k == 1 or 4 * k * c <= n)


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_hidden_tiles_keep_every_exact_figure(mode, monkeypatch):
    """The tiled technique (k = 2 at n=64, d=128, hidden=1024, chunk 8) against the same technique in
    whole rows of hidden: every exact figure identical (the workspace holds chunk * hidden elements
    either way)."""
    import memlab
    from memlab.sweep.compare import EXACT_FIELDS
    from memlab.families.chunking import techniques as chunking

    def figures():
        m = memlab.measure("slice_accumulate", n=64, d=128, hidden=1024, chunk_size=8, mode=mode, repeats=1,
                           time_budget=0.01, isolate=False)
        return m, {f: getattr(m, f) for f in EXACT_FIELDS}

    tiled, tiled_figures = figures()
    assert tiled.extra["hidden_tiles"] == 2 and tiled.extra["passes"] == 4
    monkeypatch.setattr(chunking, "hidden_tiles", lambda *a: 1)
    whole, whole_figures = figures()
    assert whole.extra["hidden_tiles"] == 1 and whole.extra["passes"] == 8
    assert tiled_figures == whole_figures
