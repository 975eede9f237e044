"""Tensor-train contraction plans (issue 32): every plan's maths, the planner's memory bound, exact bytes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import memlab
import memlab.families.tensor_train.tt as tt
from memlab.families.tensor_train.tt import (BLOCKS_FIRST_FIRST, BLOCKS_LAST_FIRST, SEQUENTIAL, TTPlan, TTShape, plan_block_rows,
                                  plan_candidates, plan_contraction, plan_report, tt_contract, tt_contract_chunked)
from memlab.families.tensor_train.workload import einsum_reconstruct

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

E = 4  # float32
SWEEP = Path(__file__).resolve().parents[1] / "data" / "sweeps" / "cpu.jsonl"
SHAPES = [
    ((4, 3, 2), (2, 3, 4), 3),
    ((4, 5, 3), (3, 4, 5), 3),
    ((2, 3, 2, 2), (3, 2, 2, 2), (2, 5, 3)),
    ((6, 2), (2, 7), 5),
    ((5,), (4,), 1),
]


def _problem(shape: TTShape, batch: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    cores = [torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_() for s in shape.core_shapes]
    x = torch.randn(batch, shape.in_features, generator=g, dtype=torch.float64).requires_grad_()
    gy = torch.randn(batch, shape.out_features, generator=g, dtype=torch.float64)
    return cores, x, gy


def _check(y, x, cores, gy, want_y, want_grads):
    torch.testing.assert_close(y, want_y, rtol=1e-10, atol=1e-10)
    for got, want in zip(torch.autograd.grad(y, [x, *cores], gy), want_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("block_bytes", [1 << 20, 600])  # 600 B: row blocks of a few rows
@pytest.mark.parametrize("in_modes,out_modes,rank", SHAPES)
def test_every_plan_matches_the_dense_product(in_modes, out_modes, rank, block_bytes, monkeypatch):
    monkeypatch.setattr(tt, "ROW_BLOCK_BYTES", block_bytes)
    shape = TTShape.create(in_modes, out_modes, rank)
    cores, x, gy = _problem(shape, 13)
    want_y = x @ einsum_reconstruct(cores)
    want_grads = torch.autograd.grad(want_y, [x, *cores], gy)
    for plan in plan_candidates(shape):
        _check(tt_contract(x, cores, plan), x, cores, gy, want_y, want_grads)
        for chunk in (4, 100):  # 4 does not divide 13; 100 is one chunk
            _check(tt_contract_chunked(x, cores, chunk, plan), x, cores, gy, want_y, want_grads)
        with torch.no_grad():
            torch.testing.assert_close(tt_contract(x, cores, plan), want_y.detach(), rtol=1e-10, atol=1e-10)


def test_both_block_orders_and_x_without_grad():
    shape = TTShape.create((4, 5, 3), (3, 4, 5), 3)
    cores, x, gy = _problem(shape, 9)
    x = x.detach()
    want_y = x @ einsum_reconstruct(cores)
    want = torch.autograd.grad(want_y, cores, gy)
    for kind in (BLOCKS_FIRST_FIRST, BLOCKS_LAST_FIRST):
        for sizes in ((1, 2), (2, 1), (1, 1, 1)):
            plan = TTPlan.from_sizes(shape, sizes, kind)
            for y in (tt_contract(x, cores, plan), tt_contract_chunked(x, cores, 2, plan)):
                for got, w in zip(torch.autograd.grad(y, cores, gy), want):
                    torch.testing.assert_close(got, w, rtol=1e-10, atol=1e-10)


def test_a_retained_graph_backward_twice_recomputes_the_intermediates():
    """The backward reuses the intermediates' buffers for their gradients; a second backward through
    a retained graph recomputes them and gives the same gradients again."""
    shape = TTShape.create((4, 5, 3), (3, 4, 5), 3)
    cores, x, gy = _problem(shape, 9)
    y = tt_contract(x, cores, TTPlan.from_sizes(shape, (1, 1, 1), BLOCKS_LAST_FIRST))
    first = torch.autograd.grad(y, [x, *cores], gy, retain_graph=True)
    second = torch.autograd.grad(y, [x, *cores], gy)
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_planner_stays_within_the_one_core_at_a_time_memory():
    """For every shape and batch the chosen plan holds no more than the sequential contraction:
    training peak (as the planner counts it), what the forward keeps, and the inference peak."""
    for in_modes, out_modes, rank in SHAPES + [((10, 10, 10), (10, 10, 10), 8), ((4, 4, 4, 4), (4, 4, 4, 4), 4)]:
        shape = TTShape.create(in_modes, out_modes, rank)
        for batch in (1, 3, 16, 64, 1024):
            for recompute in (False, True):
                p = plan_contraction(shape, batch, True, recompute)
                assert p.training_elements(batch, not recompute) <= shape.sequential_training_elements(batch)
                assert p.block_elements() + p.activation_elements(batch) <= shape.factorized_activation_elements(batch)
            p = plan_contraction(shape, batch, False)
            assert p.inference_elements(batch) <= shape.factorized_inference_elements(batch)


def test_default_layer_plans_and_report():
    """10x10x10, rank 8: cores 2 and 3 merged ([800, 100]); last block first when nothing is
    recomputed, first block first for the chunked path (its recomputation is then the small
    product); one core at a time for a single row (the merged block would outweigh it)."""
    shape = TTShape.create((10, 10, 10), (10, 10, 10), 8)
    fact, chunked = plan_contraction(shape, 1024, True), plan_contraction(shape, 16, True, recompute=True)
    assert (fact.kind, fact.sizes) == (BLOCKS_LAST_FIRST, (1, 2))
    assert (chunked.kind, chunked.sizes) == (BLOCKS_FIRST_FIRST, (1, 2))
    assert plan_contraction(shape, 1, True).kind == SEQUENTIAL
    assert fact.intermediate_elements(1024) == (1024 * 10 * 8 * 100,)  # B n_1 r_1 m_2 m_3: one intermediate
    assert fact.flops(1) == 2 * (100 * 800 * 10 + 10 * 80 * 100)  # 1.76 MFLOP per row (the sequential: 1.6)
    assert plan_block_rows(fact, 4) == 32  # 32 rows of 8000 float32 intermediates = 1 MiB
    assert plan_block_rows(fact, 4, "cuda") > 10**9  # a GPU contracts all rows at once
    report = plan_report(shape, 16, True, recompute=True)
    assert report["kind"] == BLOCKS_FIRST_FIRST and report["groups"] == [[0], [1, 2]] and report["recompute"]
    assert report["block_matrix_shapes"] == [[80, 10], [800, 100]]
    assert len(report["candidates"]) == 7 and all("cost" in c and "fits" in c for c in report["candidates"])
    json.dumps(report)


def test_bad_plans_raise_clear_errors():
    shape = TTShape.create((4, 5, 3), (3, 4, 5), 3)
    other = TTShape.create((4, 5, 3), (3, 4, 5), 2)
    cores, x, _ = _problem(shape, 3)
    with pytest.raises(ValueError, match="is not a TTPlan of this TT matrix"):
        tt_contract(x, cores, TTPlan.sequential(other))
    with pytest.raises(ValueError, match=r"block sizes \(1, 1\) are not valid"):
        TTPlan.from_sizes(shape, (1, 1))
    with pytest.raises(ValueError, match="kind='sequential' is not valid"):
        TTPlan.from_sizes(shape, (1, 2), SEQUENTIAL)
    with pytest.raises(ValueError, match="batch=0 is not valid"):
        plan_contraction(shape, 0)
    with pytest.raises(ValueError, match="chunk_size=0 is not valid"):
        tt_contract_chunked(x, cores, 0)


# -- exact bytes ------------------------------------------------------------------------------------
def _measure(name, mode="train", **params):
    m = memlab.measure(name, isolate=False, iterations=1, repeats=1, check=False, time_budget=0, mode=mode, **params)
    assert m.status == "ok", m.error
    return m


def _sweep_peak(name, **params) -> int:
    for line in SWEEP.read_text().splitlines():
        row = json.loads(line)
        given = {k: v for k, v in row["params"].items() if k not in ("in_modes", "out_modes")}
        if row["technique"] == name and row["mode"] == "train" and given == params:
            return row["peak_allocated_bytes"]
    raise LookupError(f"{name} {params} not in {SWEEP}")


@pytest.mark.parametrize("batch,rows", [(64, 32), (100, 32), (7, 7)])  # 64, 100: two and four row blocks
def test_inference_peak_is_the_plan_formula(batch, rows):
    shape = TTShape.create((10, 10, 10), (10, 10, 10), 8)
    m = _measure("tt_factorized", "infer", batch=batch, rank=8)
    plan = plan_contraction(shape, batch, False)
    assert min(batch, plan_block_rows(plan, E)) == rows
    assert m.peak_allocated_bytes == plan.inference_elements(batch, plan_block_rows(plan, E)) * E
    assert m.peak_allocated_bytes == m.extra["analytic_floor_bytes_by_mode"]["infer"]
    assert m.peak_allocated_bytes <= shape.factorized_inference_elements(batch) * E


def test_sweep_point_peaks_are_pinned_and_below_the_committed_sweep():
    """B=256, r=8 (a point of the full sweep): exact training peaks, equal to the committed sweep's
    figures (data/sweeps/cpu.jsonl, re-measured with the contraction plans) and below those of the
    one-core-at-a-time contraction the sweep held before."""
    fact = _measure("tt_factorized", batch=256, rank=8)
    chunked = _measure("tt_chunked", batch=256, rank=8, chunk_size=16)
    assert fact.peak_allocated_bytes == FACTORIZED_B256 == _sweep_peak("tt_factorized", batch=256, rank=8)
    assert chunked.peak_allocated_bytes == CHUNKED_B256 == _sweep_peak("tt_chunked", batch=256, rank=8, chunk_size=16)
    assert FACTORIZED_B256 < ONE_CORE_AT_A_TIME_FACTORIZED_B256 and CHUNKED_B256 < ONE_CORE_AT_A_TIME_CHUNKED_B256
    assert fact.extra["contraction"]["kind"] == BLOCKS_LAST_FIRST
    assert chunked.extra["contraction"]["kind"] == BLOCKS_FIRST_FIRST and chunked.extra["contraction"]["recompute"]
    for m in (fact, chunked):
        assert m.peak_allocated_bytes >= m.extra["analytic_floor_bytes_by_mode"]["train"]


#: measured (CPU, float32, this torch), as the committed sweep has them since 5 Dec 2026
FACTORIZED_B256 = 10_992_000
CHUNKED_B256 = 3_257_600
#: the committed sweep's figures before the contraction plans (one core at a time)
ONE_CORE_AT_A_TIME_FACTORIZED_B256 = 25_628_800
ONE_CORE_AT_A_TIME_CHUNKED_B256 = 3_708_800


def test_block_is_view_matches_what_reshape_does():
    """The memory figures count a single core's block only when it is a copy: the model's view
    test agrees with torch's reshape for every block of every plan."""
    for in_modes, out_modes, rank in SHAPES + [((10, 10, 10), (10, 10, 10), 8), ((1, 3, 1), (2, 1, 3), 2)]:
        shape = TTShape.create(in_modes, out_modes, rank)
        cores = [torch.randn(*s) for s in shape.core_shapes]
        for plan in plan_candidates(shape)[1:]:
            for j, (block, (a, b)) in enumerate(zip(tt.tt_blocks(cores, plan), plan.groups)):
                assert tuple(block.shape) == plan.block_matrix_shapes()[j]
                if b - a == 1:
                    shares = block.untyped_storage().data_ptr() == cores[a].untyped_storage().data_ptr()
                    assert shares == plan.block_is_view(j), (shape, plan, j)


@pytest.mark.parametrize("name", ["tt_factorized", "tt_chunked"])
def test_a_micro_batch_is_described_by_the_plan_it_ran(name):
    """Under --accumulate 2 a batch of 8 runs micro-batches of 4 rows, whose contraction plan differs
    from 8 rows' (sequential against blocks): the step's description plans the rows the layer ran."""
    shape = TTShape((4, 4, 4), (4, 4, 4), (1, 4, 4, 1))
    recompute = name == "tt_chunked"
    assert tt.plan_contraction(shape, 4, True, recompute) != tt.plan_contraction(shape, 8, True, recompute)
    m = memlab.measure(name, batch=8, accumulate=2, chunk_size=8, iterations=1, repeats=1, time_budget=0,
                       in_modes=[4, 4, 4], out_modes=[4, 4, 4], rank=4) if recompute else \
        memlab.measure(name, batch=8, accumulate=2, iterations=1, repeats=1, time_budget=0,
                       in_modes=[4, 4, 4], out_modes=[4, 4, 4], rank=4)
    assert m.status == "ok", m.error
