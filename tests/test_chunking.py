"""Chunking family: every technique computes the reference; exact CPU memory properties (bytes).

Memory on CPU is exact (profiler allocation replay), so the assertions below are equalities or
bounds that cannot be noise.  Sizes are small (n=2000, d=64, hidden=256, float32: x is 512000 bytes,
one [500, 256] hidden chunk 512000 bytes).
"""
from __future__ import annotations

import pytest
import torch

import memlab
from memlab.families.chunking.reproductions._slice_backward import slice_backward_allocations, slice_backward_lifetimes
from memlab.families.chunking.workload import ChainedMatmul, analytic_floor

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

CPU = torch.device("cpu")
SMALL = dict(n=2000, d=64, hidden=256)
E = 4  # float32 bytes
X_BYTES = 2000 * 64 * E
CHUNKED = ["slice_loop", "vmap_chunk", "einsum_chunk", "checkpoint_chunk", "slice_accumulate"]
VARIANTS = [("slice_accumulate", {"backward": "autograd"}), ("einsum_chunk", {"opt_einsum": False})]


def test_family_is_registered():
    assert set(memlab.list_techniques("chunking")) >= {"unchunked", *CHUNKED}


@pytest.mark.parametrize("name,extra", [(n, {}) for n in CHUNKED] + VARIANTS)
@pytest.mark.parametrize("chunk_size", [1, 5, 37, 64])  # 5 does not divide 37; 64 > n
@pytest.mark.parametrize("x_requires_grad", [True, False])
def test_matches_reference_outputs_and_all_grads(name, extra, chunk_size, x_requires_grad):
    t = memlab.get_technique(name)(n=37, d=8, hidden=16, chunk_size=chunk_size,
                                    x_requires_grad=x_requires_grad, **extra)
    for mode in ("train", "infer"):
        v = memlab.verify_technique(t, CPU, torch.float64, mode=mode)
        assert v.ok, (mode, v.errors)
        expected = {"output"} | ({"grad:w1", "grad:w2"} if mode == "train" else set())
        if mode == "train" and x_requires_grad:
            expected.add("grad:x")
        assert set(v.errors) == expected


def test_float32_default_size_within_workload_tolerance():
    t = memlab.get_technique("einsum_chunk")(n=3000, chunk_size=700)  # opt_einsum reassociates
    v = memlab.verify_technique(t, CPU, torch.float32)
    assert v.ok, v.errors


def test_chunk_size_is_validated():
    with pytest.raises(ValueError, match=r"chunk_size=0 is out of range"):
        memlab.get_technique("slice_accumulate")(chunk_size=0)
    with pytest.raises(ValueError, match=r"backward='fast' is out of range: expected one of 'manual', 'autograd'"):
        memlab.get_technique("slice_accumulate")(backward="fast")


def _measure(name, mode="train", **kw):
    m = memlab.measure(name, isolate=False, iterations=1, repeats=1, time_budget=0, mode=mode, check=False,
                       **SMALL, **kw)
    assert m.status == "ok", m.error
    return m


def _peak(name, mode="train", **kw) -> int:
    """Peak allocated bytes above the baseline of one step (timeline: cheaper than a measurement)."""
    return memlab.timeline(name, isolate=False, mode=mode, **{**SMALL, **kw}).peak_bytes


def _floor(mode="train", chunk_size=None, x_requires_grad=True, **size) -> int:
    return analytic_floor({**SMALL, **size, "x_requires_grad": x_requires_grad}, chunk_size, E).bytes_for(mode)


def test_describe_reports_floor_for_the_measured_mode():
    train = _measure("slice_accumulate", chunk_size=500)
    infer = _measure("slice_accumulate", mode="infer", chunk_size=500)
    assert train.peak_allocated_bytes == train.extra["analytic_floor_bytes"]
    floor = analytic_floor({**SMALL, "x_requires_grad": True}, 500, E)
    assert train.extra["analytic_floor_mode"] == "train"
    assert train.extra["analytic_floor_bytes"] == floor.train_bytes == 2 * X_BYTES + 2 * 64 * 256 * E + 500 * 256 * E
    assert infer.extra["analytic_floor_mode"] == "infer"
    assert infer.extra["analytic_floor_bytes"] == floor.infer_bytes == X_BYTES + 500 * 256 * E
    assert train.extra["analytic_floor_bytes_by_mode"] == {"train": floor.train_bytes, "infer": floor.infer_bytes}
    assert train.extra["backward_path"] == "manual"
    assert train.extra["num_chunks"] == 4


def test_describe_is_told_the_mode_and_remembers_nothing():
    """The floor follows the ``mode`` argument, whatever ran before (no state from the last forward)."""
    t = memlab.get_technique("slice_loop")(chunk_size=500, **SMALL)
    problem = t.build(CPU, torch.float32, 0)
    with torch.no_grad():
        t.forward(problem)  # an inference forward last: describe(problem, "train") still says train
    floor = analytic_floor({**SMALL, "x_requires_grad": True}, 500, E)
    assert t.describe(problem, "train")["analytic_floor_bytes"] == floor.train_bytes
    assert t.describe(problem, "infer")["analytic_floor_bytes"] == floor.infer_bytes
    assert t.describe(problem)["analytic_floor_mode"] == "train"


def test_einsum_records_opt_einsum():
    t = memlab.get_technique("einsum_chunk")(chunk_size=500, **SMALL)
    m = t.describe(t.build(CPU, torch.float32, 0))
    assert m["opt_einsum_available"] == torch.backends.opt_einsum.is_available()
    assert m["opt_einsum_used"] == torch.backends.opt_einsum.is_available()
    if m["opt_einsum_used"]:
        assert m["contraction_order"] == "x @ (w1 @ w2)"
    t = memlab.get_technique("einsum_chunk")(chunk_size=500, opt_einsum=False, **SMALL)
    off = t.describe(t.build(CPU, torch.float32, 0))
    assert off["opt_einsum_used"] is False and off["contraction_order"] == "(x @ w1) @ w2"


@pytest.mark.parametrize("x_requires_grad", [True, False])
def test_slice_accumulate_training_peak_equals_the_floor_for_any_number_of_chunks(x_requires_grad):
    """Stated bound: exactly the analytic floor (0 bytes over) with the hand-written backward."""
    for c in ((2000, 300, 100) if x_requires_grad else (500, 100)):
        peak = _peak("slice_accumulate", chunk_size=c, x_requires_grad=x_requires_grad)
        assert peak == _floor(chunk_size=c, x_requires_grad=x_requires_grad), c
        # flat in #chunks: what is above one chunk's hidden does not depend on the chunk size
        assert peak - c * 256 * E == (2 if x_requires_grad else 1) * X_BYTES + 2 * 64 * 256 * E


def test_slice_accumulate_generic_backward_is_bounded():
    """The autograd recomputation adds the chunk's hidden gradient, its output and one weight-sized
    temporary per weight: at most 2 * [c, hidden] + [c, d] + grad_w1 + grad_w2 over the floor."""
    c = 500
    floor = _floor(chunk_size=c)
    assert floor < _peak("slice_accumulate", chunk_size=c, backward="autograd") <= floor + (
        2 * c * 256 + c * 64 + 2 * 64 * 256) * E


def test_slice_accumulate_is_below_slice_loop_by_at_least_the_saved_activations():
    c = 500
    loop = _peak("slice_loop", chunk_size=c)
    acc = _peak("slice_accumulate", chunk_size=c)
    saved_hidden_but_one_chunk = (2000 - c) * 256 * E
    assert loop - acc >= saved_hidden_but_one_chunk


def test_vmap_chunk_saves_every_chunks_hidden_in_training():
    """Every chunk's hidden is saved: the peak holds the whole [n, hidden] plus y, for any chunk size."""
    for c in (500, 250):
        assert _peak("vmap_chunk", chunk_size=c) >= 2000 * 256 * E + X_BYTES
    # inference: the chunk outputs and their concatenation are live together (2 x y)
    assert _peak("vmap_chunk", mode="infer", chunk_size=250) == 2 * X_BYTES


def test_inference_peaks():
    """Under no_grad the chunk loop reaches the infer floor plus at most one chunk output [c, d]."""
    for name in ("slice_loop", "slice_accumulate", "checkpoint_chunk"):
        floor = _floor("infer", chunk_size=500)
        assert floor <= _peak(name, mode="infer", chunk_size=500) <= floor + 500 * 64 * E + 8192, name


@pytest.mark.parametrize("chunk_size,chunks", [(500, 4), (300, 7), (2000, 1)])
def test_slice_loop_allocates_one_x_sized_slice_backward_per_chunk(chunk_size, chunks):
    tl = memlab.timeline("slice_loop", isolate=False, chunk_size=chunk_size, **SMALL)
    a = slice_backward_allocations(tl)
    assert a.count == chunks
    assert a.sizes == (X_BYTES,) * chunks
    # the backward of y[st:ed] = ... (CopySlices) clones a y-sized gradient per chunk as well
    assert a.copy_slices_sizes.count(X_BYTES) == (chunks if chunks > 1 else 0)
    lt = slice_backward_lifetimes("slice_loop", chunk_size=chunk_size, **SMALL)
    assert lt.count == chunks and lt.sizes == a.sizes
    assert lt.max_alive == min(chunks, 2)  # running sum + the newest one, see NOTE [ slice_backward accumulation ]
    assert lt.freed_in_phase.count("optimizer") == 1  # the first becomes x.grad


def test_slice_accumulate_has_no_slice_backward():
    tl = memlab.timeline("slice_accumulate", isolate=False, chunk_size=500, **SMALL)
    assert slice_backward_allocations(tl).count == 0


def test_sweep_grid():
    quick = ChainedMatmul.sweep_grid(True)
    assert quick == [{"n": 2000, "d": 128, "hidden": 512, "chunk_size": 200}]  # n/10
    chunks = {c["chunk_size"] for c in ChainedMatmul.sweep_grid(False)}
    n = ChainedMatmul.params["n"].default
    assert {n, n // 4, n // 10, n // 100} <= chunks
