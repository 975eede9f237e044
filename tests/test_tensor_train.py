"""Tensor-train family: maths against a dense layer, the layer module, bad input, exact memory."""
from __future__ import annotations

import itertools

import pytest
import torch

import memlab
from memlab.families.tensor_train.tt import (BLOCKS_FIRST_FIRST, TTShape, plan_block_rows, plan_contraction, tt_contract,
                                  tt_linear_reconstructed, tt_reconstruct, tt_shape_of, tt_svd)
from memlab.families.tensor_train.layer import TensorTrainLinear, TTPath
from memlab.measurement.verify import verify_technique
from memlab.families.tensor_train.workload import TTLinear, einsum_reconstruct

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

TT_TECHNIQUES = ("tt_factorized", "tt_reconstructed", "tt_chunked")
CPU = torch.device("cpu")

# (in_modes, out_modes, rank): equal modes, unequal modes, 4 cores, 2 cores, 1 core, per-boundary ranks
SHAPES = [
    ((3, 3, 3), (3, 3, 3), 1),
    ((3, 3, 3), (3, 3, 3), 4),
    ((4, 5, 3), (3, 4, 5), 3),
    ((2, 3, 2, 2), (3, 2, 2, 2), 2),
    ((2, 3, 2, 2), (3, 2, 2, 2), (2, 5, 3)),
    ((6, 2), (2, 7), 5),
    ((5,), (4,), 1),
]


def naive_matrix(cores):
    """W [in, out] entry by entry from the TT definition (tiny sizes only)."""
    s = tt_shape_of(cores)
    w = torch.zeros(s.in_features, s.out_features, dtype=cores[0].dtype)
    for ii in itertools.product(*map(range, s.in_modes)):
        for jj in itertools.product(*map(range, s.out_modes)):
            v = torch.ones(1, 1, dtype=cores[0].dtype)
            for c, i, j in zip(cores, ii, jj):
                v = v @ c[:, i, j, :]
            row = col = 0
            for i, n in zip(ii, s.in_modes):
                row = row * n + i
            for j, m in zip(jj, s.out_modes):
                col = col * m + j
            w[row, col] = v[0, 0]
    return w


def random_cores(shape: TTShape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_() for s in shape.core_shapes]


# -- maths ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("in_modes,out_modes,rank", SHAPES[:4])
def test_reconstruct_matches_definition(in_modes, out_modes, rank):
    cores = random_cores(TTShape.create(in_modes, out_modes, rank))
    want = naive_matrix([c.detach() for c in cores])
    torch.testing.assert_close(tt_reconstruct(cores).detach(), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(einsum_reconstruct(cores).detach(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("in_modes,out_modes,rank", SHAPES)
@pytest.mark.parametrize("path", list(TTPath))
def test_every_path_matches_dense_layer(in_modes, out_modes, rank, path):
    """Outputs and gradients (x and every core) equal a dense layer holding the reconstructed weight."""
    shape = TTShape.create(in_modes, out_modes, rank)
    layer = TensorTrainLinear(in_modes, out_modes, rank, path=path, chunk_size=3, dtype=torch.float64)
    x = torch.randn(11, shape.in_features, dtype=torch.float64, requires_grad=True)
    g = torch.randn(11, shape.out_features, dtype=torch.float64)
    y = layer(x)
    got = torch.autograd.grad(y, [x, *layer.cores], g)
    ref = torch.nn.functional.linear(x, einsum_reconstruct(layer.cores).t())
    want = torch.autograd.grad(ref, [x, *layer.cores], g)
    assert layer.last_path is path
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ("dense",) + TT_TECHNIQUES)
@pytest.mark.parametrize("cfg", [
    dict(batch=13, rank=2, in_modes=(3, 3, 3), out_modes=(3, 3, 3)),
    dict(batch=9, rank=3, in_modes=(2, 3, 2, 2), out_modes=(3, 2, 2, 2)),
])
def test_techniques_match_reference(name, cfg):
    extra = {"chunk_size": 4} if name == "tt_chunked" else {}
    tech = memlab.get_technique(name)(**cfg, **extra)
    for mode in ("train", "infer"):
        v = verify_technique(tech, CPU, torch.float64, mode=mode)
        assert v.ok, (mode, v.errors)


def test_functions_without_grad_and_single_core():
    shape = TTShape.create((4, 3), (2, 5), 2)
    cores = [c.detach() for c in random_cores(shape)]
    x = torch.randn(5, 12, dtype=torch.float64)
    w = tt_reconstruct(cores)
    torch.testing.assert_close(tt_contract(x, cores), x @ w)
    torch.testing.assert_close(tt_linear_reconstructed(x, cores), x @ w)


def test_tt_svd_exact_at_full_rank_and_caps_ranks():
    w = torch.randn(12, 10, dtype=torch.float64)
    cores = tt_svd(w, (3, 4), (2, 5), 1000)
    assert tt_shape_of(cores).ranks == (1, 6, 1)  # capped at min(3*2, 4*5)
    torch.testing.assert_close(tt_reconstruct(cores), w)
    # a TT matrix of rank 2 is recovered exactly by a rank-2 TT-SVD
    tt = [c.detach() for c in random_cores(TTShape.create((2, 3, 2), (3, 2, 2), 2))]
    exact = tt_reconstruct(tt)
    torch.testing.assert_close(tt_reconstruct(tt_svd(exact, (2, 3, 2), (3, 2, 2), 2)), exact)


def test_analytic_formulas_three_equal_cores():
    for d, r, b in ((10, 8, 4096), (4, 3, 7)):
        s = TTShape.create((d, d, d), (d, d, d), r)
        assert s.param_count() == d**2 * (r**2 + 2 * r)
        assert s.dense_param_count() == d**6
        assert s.factorized_activation_elements(b) == b * d**3 * (2 * r + 1)
        assert s.factorized_inference_elements(b) == 2 * b * d**3 * r
        assert s.reconstructed_elements(b) == d**6 + b * d**3


# -- the layer module ----------------------------------------------------------------------------
def test_layer_parameters_move_and_are_seen():
    layer = TensorTrainLinear((2, 3), (3, 2), 2, bias=True)
    assert [n for n, _ in layer.named_parameters()] == ["core0", "core1", "bias"]
    assert set(layer.state_dict()) == {"core0", "core1", "bias"}
    layer = layer.to(torch.float64)
    assert all(p.dtype == torch.float64 for p in layer.parameters())
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    before = [p.detach().clone() for p in layer.parameters()]
    layer(torch.randn(4, 6, dtype=torch.float64)).sum().backward()
    opt.step()
    assert all(not torch.equal(a, p) for a, p in zip(before, layer.parameters()))
    y = layer(torch.randn(2, 5, 6, dtype=torch.float64))  # leading dims kept
    assert y.shape == (2, 5, 6)
    clone = TensorTrainLinear((2, 3), (3, 2), 2, bias=True, dtype=torch.float64)
    clone.load_state_dict(layer.state_dict())
    torch.testing.assert_close(clone.weight(), layer.weight())


def test_from_dense_layer_equals_dense_linear():
    dense = torch.nn.Linear(12, 6, dtype=torch.float64)
    layer = TensorTrainLinear.from_dense(dense.weight, (3, 4), (2, 3), 100, bias=dense.bias,
                                         path=TTPath.RECONSTRUCTED)
    assert layer.tt_shape.ranks == (1, 6, 1)
    x = torch.randn(5, 12, dtype=torch.float64)
    torch.testing.assert_close(layer(x), dense(x))
    torch.testing.assert_close(layer.weight(), dense.weight)


def test_path_is_explicit():
    layer = TensorTrainLinear((2, 2), (2, 2), 1, path="chunked")
    assert layer.path is TTPath.CHUNKED
    with pytest.raises(ValueError, match=r"path='chunked' needs chunk_size"):
        layer(torch.randn(3, 4))
    with pytest.raises(ValueError, match=r"path='fast' is not valid; valid paths: factorized, reconstructed"):
        layer.path = "fast"
    with pytest.raises(ValueError, match=r"chunk_size=0 is not valid"):
        layer.chunk_size = 0


# -- bad input -----------------------------------------------------------------------------------
def test_bad_shapes_raise_clear_errors():
    with pytest.raises(ValueError, match=r"rank=0 is not valid: a TT rank must be an int >= 1"):
        TensorTrainLinear((10, 10), (10, 10), 0)
    with pytest.raises(ValueError, match=r"every TT rank must be >= 1, got -1"):
        TTShape.create((2, 2, 2), (2, 2, 2), (2, -1))
    with pytest.raises(ValueError, match=r"3 cores need 2 inner ranks"):
        TTShape.create((2, 2, 2), (2, 2, 2), (2,))
    with pytest.raises(ValueError, match=r"in_modes=\(10, 0, 10\) is not valid: every mode must be a positive int"):
        TensorTrainLinear((10, 0, 10), (10, 10, 10), 2)
    with pytest.raises(ValueError, match=r"out_modes=\(-2, 5\) is not valid"):
        TTShape.create((2, 5), (-2, 5), 1)
    with pytest.raises(ValueError, match=r"must have the same length"):
        TTShape.create((2, 5), (10,), 1)
    with pytest.raises(ValueError, match=r"in_features=1024 does not match the product of in_modes=\(10, 10, 10\) \(= 1000\)"):
        TensorTrainLinear((10, 10, 10), (10, 10, 10), 2, in_features=1024)
    with pytest.raises(ValueError, match=r"weight shape \(6, 12\) does not match out_modes=\(2, 2\) \(product 4\)"):
        TensorTrainLinear.from_dense(torch.randn(6, 12), (3, 4), (2, 2), 2)
    with pytest.raises(ValueError, match=r"tt_svd: matrix shape \(12, 5\) does not match"):
        tt_svd(torch.randn(12, 5), (3, 4), (2, 3), 2)
    with pytest.raises(ValueError, match=r"expects inputs \[\.\.\., 12\]"):
        TensorTrainLinear((3, 4), (2, 3), 2)(torch.randn(5, 10))
    with pytest.raises(ValueError, match=r"TT cores 0 and 1 do not chain: rank 2 vs 3"):
        tt_shape_of([torch.randn(1, 2, 2, 2), torch.randn(3, 2, 2, 1)])


def test_workload_params_raise_clear_errors():
    with pytest.raises(ValueError, match=r"rank=0 is out of range: expected integer in \[1, 4096\]"):
        memlab.get_technique("tt_factorized")(rank=0)
    with pytest.raises(ValueError, match=r"in_modes=\(10, 0, 10\) is out of range"):
        memlab.get_technique("tt_factorized")(in_modes=(10, 0, 10))
    with pytest.raises(ValueError, match=r"must have the same length"):
        memlab.get_technique("dense")(in_modes=(10, 100), out_modes=(10, 10, 10))


# -- exact memory --------------------------------------------------------------------------------
SMALL = dict(rank=3, in_modes=(4, 5, 3), out_modes=(3, 4, 5))  # 60 -> 60, cores (1,4,3,3)(3,5,4,3)(3,3,5,1)
SMALL_SHAPE = TTShape.create(SMALL["in_modes"], SMALL["out_modes"], SMALL["rank"])
E = 4  # float32


def _peak(name, mode="train", **kw):
    m = memlab.measure(name, isolate=False, iterations=1, repeats=1, time_budget=0, check=False, mode=mode,
                       **SMALL, **kw)
    assert m.status == "ok", m.error
    return m


def test_factorized_activations_equal_formula():
    """Live bytes at the end of the forward: exactly the plan's blocks, intermediates and output
    (the first-block-first plan [1], [2, 3] here: 53,520 B), below the one-core-at-a-time
    contraction's B * sum_i |T_i| * 4 (77,568 B, NOTE [ TT factorized activations ])."""
    b = 64
    tl = memlab.timeline("tt_factorized", isolate=False, batch=b, **SMALL)
    end_of_forward = [e.live_bytes for e in tl.events if e.phase == "forward"][-1]
    plan = plan_contraction(SMALL_SHAPE, b, True)
    assert (plan.kind, plan.sizes) == (BLOCKS_FIRST_FIRST, (1, 2))
    assert end_of_forward == (plan.block_elements() + plan.activation_elements(b)) * E == 53520
    assert end_of_forward < SMALL_SHAPE.factorized_activation_elements(b) * E == 77568


def test_inference_peaks_equal_formulas():
    b = 64
    fact = _peak("tt_factorized", "infer", batch=b)
    plan = plan_contraction(SMALL_SHAPE, b, False)
    assert fact.peak_allocated_bytes == plan.inference_elements(b, plan_block_rows(plan, E)) * E == 53520
    assert fact.peak_allocated_bytes < SMALL_SHAPE.factorized_inference_elements(b) * E == 69120
    assert fact.extra["analytic_floor_bytes_by_mode"]["infer"] == fact.peak_allocated_bytes
    assert fact.extra["contraction"]["kind"] == plan.kind and fact.extra["contraction"]["mode"] == "infer"
    assert _peak("dense", "infer", batch=b).peak_allocated_bytes == b * 60 * E


def test_training_peaks_dense_chunked_reconstructed():
    b, c = 64, 8
    io = 60 + 60
    dense = _peak("dense", batch=b)
    # dense: output + grad_x + grad_W
    assert dense.peak_allocated_bytes == b * io * E + 60 * 60 * E
    fact_c = _peak("tt_factorized", batch=c).peak_allocated_bytes
    fact_b = _peak("tt_factorized", batch=b).peak_allocated_bytes
    chunked = _peak("tt_chunked", batch=b, chunk_size=c)
    # chunked = output + grad_x + core-gradient accumulators + one chunk's factorized step
    assert chunked.peak_allocated_bytes == b * io * E + SMALL_SHAPE.param_count() * E + fact_c
    assert fact_b - chunked.peak_allocated_bytes == (fact_b - fact_c) - b * io * E - SMALL_SHAPE.param_count() * E
    assert chunked.extra["path"] == "chunked"
    # reconstructed: never a second weight-sized tensor on top of what dense holds
    recon = _peak("tt_reconstructed", batch=b)
    assert dense.peak_allocated_bytes < recon.peak_allocated_bytes < dense.peak_allocated_bytes + 60 * 60 * E
    assert recon.extra["path"] == "reconstructed"
    assert recon.extra["analytic"]["factorized_activation_bytes"] == 77568
    # the floors the site draws: exact for dense; measured never below any floor
    assert dense.extra["analytic_floor_bytes_by_mode"]["train"] == dense.peak_allocated_bytes
    for m in (dense, chunked, recon):
        assert m.peak_allocated_bytes >= m.extra["analytic_floor_bytes_by_mode"]["train"]


# -- optional comparators --------------------------------------------------------------------------
def test_peers_unavailable_without_tensorly_torch(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tltorch", None)  # import raises ImportError
    tech = memlab.get_technique("tltorch_blocktt_factorized")(**TTLinear.check_params)
    assert tech.peer
    with pytest.raises(memlab.TechniqueUnavailable, match=r"pip install 'memlab\[peers\]'"):
        tech.check_available(CPU)


@pytest.mark.parametrize("name", ["tltorch_blocktt_factorized", "tltorch_blocktt_reconstructed"])
def test_peers_match_reference(name):
    pytest.importorskip("tltorch")
    tech = memlab.get_technique(name)(batch=7, rank=3, in_modes=(2, 3, 2), out_modes=(3, 2, 2))
    for mode in ("train", "infer"):
        v = verify_technique(tech, CPU, torch.float64, mode=mode)
        assert v.ok, (mode, v.errors)
