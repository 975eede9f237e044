"""memlab.measurement.flops: in-place and out= matrix products are counted like their out-of-place
twins, and the FLOP ratios of issue 24 hold exactly (slice_accumulate 7/6 of unchunked,
checkpoint_block 5/4 of residual).

FLOPs follow FlopCounterMode's convention: 2 * m * k * n per [m, k] @ [k, n] product, elementwise
ops (bias adds, ReLU, optimizer updates) 0.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from memlab import get_technique
from memlab.measurement.flops import count_step_flops, extra_flop_formulas, make_flop_counter
from memlab.measurement.step import make_step

CPU = torch.device("cpu")
M, K, N, B = 3, 4, 5, 2  # product [M, K] @ [K, N], batches of B


def _operands() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    return {"a": randn(M, K), "b": randn(K, N), "c": randn(M, N), "v": randn(K), "w": randn(M), "u": randn(N),
            "b1": randn(B, M, K), "b2": randn(B, K, N), "b3": randn(B, M, N)}


def _flops(fn) -> int:
    """FLOPs of ``fn(operands)``, operands built (and cloned for in-place ops) outside the count."""
    t = _operands()
    clones = {k + "_": t[k].clone() for k in ("c", "w", "b3")}  # targets of the in-place calls
    outs = {"out_mn": torch.empty(M, N), "out_bmn": torch.empty(B, M, N), "out_m": torch.empty(M),
            "out_0": torch.empty(())}
    return count_step_flops(lambda: fn({**t, **clones, **outs}))


#: (op, out-of-place call, in-place / out= / fused calls that must count the same, FLOPs expected)
TWINS = [
    ("mm", lambda t: torch.mm(t["a"], t["b"]),
     [lambda t: torch.mm(t["a"], t["b"], out=t["out_mn"])], 2 * M * K * N),
    ("addmm", lambda t: torch.addmm(t["c"], t["a"], t["b"]),
     [lambda t: t["c_"].addmm_(t["a"], t["b"]), lambda t: torch.addmm(t["c"], t["a"], t["b"], out=t["out_mn"]),
      lambda t: torch.ops.aten._addmm_activation(t["c"], t["a"], t["b"])], 2 * M * K * N),
    ("bmm", lambda t: torch.bmm(t["b1"], t["b2"]),
     [lambda t: torch.bmm(t["b1"], t["b2"], out=t["out_bmn"])], 2 * B * M * K * N),
    ("baddbmm", lambda t: torch.baddbmm(t["b3"], t["b1"], t["b2"]),
     [lambda t: t["b3_"].baddbmm_(t["b1"], t["b2"]),
      lambda t: torch.baddbmm(t["b3"], t["b1"], t["b2"], out=t["out_bmn"])], 2 * B * M * K * N),
    ("addbmm", lambda t: torch.addbmm(t["c"], t["b1"], t["b2"]),
     [lambda t: t["c_"].addbmm_(t["b1"], t["b2"]),
      lambda t: torch.addbmm(t["c"], t["b1"], t["b2"], out=t["out_mn"])], 2 * B * M * K * N),
    ("mv", lambda t: torch.mv(t["a"], t["v"]),
     [lambda t: torch.mv(t["a"], t["v"], out=t["out_m"]), lambda t: torch.matmul(t["a"], t["v"])], 2 * M * K),
    ("addmv", lambda t: torch.addmv(t["w"], t["a"], t["v"]),
     [lambda t: t["w_"].addmv_(t["a"], t["v"]), lambda t: torch.addmv(t["w"], t["a"], t["v"], out=t["out_m"])],
     2 * M * K),
    ("dot", lambda t: torch.dot(t["v"], t["v"]),
     [lambda t: torch.dot(t["v"], t["v"], out=t["out_0"]), lambda t: torch.vdot(t["v"], t["v"]),
      lambda t: torch.matmul(t["v"], t["v"]), lambda t: torch.inner(t["v"], t["v"])], 2 * K),
    ("addr", lambda t: torch.addr(t["c"], t["w"], t["u"]),
     [lambda t: t["c_"].addr_(t["w"], t["u"]), lambda t: torch.addr(t["c"], t["w"], t["u"], out=t["out_mn"])],
     2 * M * N),
    ("matmul", lambda t: torch.matmul(t["a"], t["b"]),
     [lambda t: torch.matmul(t["a"], t["b"], out=t["out_mn"]), lambda t: t["a"] @ t["b"],
      lambda t: torch.matmul(t["b1"][0], t["b2"][0])], 2 * M * K * N),
]


@pytest.mark.parametrize("op,out_of_place,variants,expected", TWINS, ids=[c[0] for c in TWINS])
def test_variants_count_like_their_out_of_place_twin(op, out_of_place, variants, expected):
    assert _flops(out_of_place) == expected
    for i, variant in enumerate(variants):
        assert _flops(variant) == expected, f"{op} variant {i}"


def test_torch_counter_is_extended_per_counter_not_globally():
    """custom_mapping only: torch's registry is untouched and a plain FlopCounterMode is unchanged."""
    keys = set(flop_registry)
    extra = extra_flop_formulas()
    assert torch.ops.aten.addmm_ in extra and not set(extra) & keys
    make_flop_counter()
    assert set(flop_registry) == keys
    c = torch.zeros(M, N)
    plain = FlopCounterMode(display=False)
    with plain:
        c.addmm_(torch.ones(M, K), torch.ones(K, N))
    assert plain.get_total_flops() == (2 * M * K * N if torch.ops.aten.addmm_ in keys else 0)


# -- issue 24 acceptance ----------------------------------------------------------------------------

def _step_flops(name: str, optimizer: str = "sgd", **params) -> int:
    """FLOPs of one warmed-up training step of technique ``name`` on CPU float32."""
    t = get_technique(name)(**params)
    step, _ = make_step(t, t.build(CPU, torch.float32, 0), "train", optimizer=optimizer)
    step()  # warm-up (optimizer state, lazy init)
    return count_step_flops(step)


CHAIN = {"n": 40, "d": 8, "hidden": 16}
#: FLOPs of one [n, d] @ [d, hidden] product (every product of (x @ w1) @ w2 and its backward has it)
CHAIN_UNIT = 2 * CHAIN["n"] * CHAIN["d"] * CHAIN["hidden"]


@pytest.mark.parametrize("chunk_size", [40, 20, 10, 4, 7], ids=lambda c: f"{-(-40 // c)}chunks")
def test_slice_accumulate_is_7_6_of_unchunked(chunk_size):
    """unchunked: forward 2 products + backward 4 (grad_w2, grad_h, grad_w1, grad_x) = 6 units;
    slice_accumulate (manual backward): forward 2 + recompute h 1 + the same 4 (two as addmm_, one
    as mm(out=)) = 7 units, at any chunk count (FLOPs are linear in rows; 7 leaves a short chunk)."""
    f_un = _step_flops("unchunked", **CHAIN)
    f_sa = _step_flops("slice_accumulate", chunk_size=chunk_size, **CHAIN)
    assert f_un == 6 * CHAIN_UNIT
    assert f_sa == 7 * CHAIN_UNIT
    assert 6 * f_sa == 7 * f_un


@pytest.mark.parametrize("x_grad,backward,units,base_units", [
    (False, "manual", 6, 5),  # no grad_x product on either side
    (True, "autograd", 8, 6),  # generic path recomputes the whole chunk (2 products), then 4
    (False, "autograd", 7, 5),
])
def test_slice_accumulate_other_paths(x_grad, backward, units, base_units):
    f_un = _step_flops("unchunked", x_requires_grad=x_grad, **CHAIN)
    f_sa = _step_flops("slice_accumulate", chunk_size=10, backward=backward, x_requires_grad=x_grad, **CHAIN)
    assert (f_un, f_sa) == (base_units * CHAIN_UNIT, units * CHAIN_UNIT)


def test_optimizer_adds_no_flops():
    """Optimizer updates are elementwise, hence 0 FLOPs under this convention: the ratios above do
    not depend on the optimizer."""
    counts = {opt: _step_flops("unchunked", optimizer=opt, **CHAIN) for opt in ("sgd", "sgd_momentum", "adamw")}
    assert set(counts.values()) == {6 * CHAIN_UNIT}


REV = {"depth": 3, "batch": 4, "width": 8, "hidden": 16}


@pytest.mark.parametrize("block", ["mlp", "conv"])
def test_checkpoint_block_is_5_4_of_residual(block):
    """residual: per coupling block F and G are 2 products each (Linear or 3x3 conv, bias not
    counted): forward 4 + backward 8 (input and weight gradient of each) = 12 units.
    checkpoint_block recomputes the block in backward, but non-reentrant checkpoint stops early once
    every saved tensor is back: with additive coupling nothing saves the output of G's last product,
    so only 3 of the 4 are recomputed: 15 units = 5/4 (4/3 with early stop disabled or with affine
    coupling, whose sigmoid saves that output)."""
    params = {**REV, "block": block, "spatial": 4}
    spatial_terms = 1 if block == "mlp" else 9 * params["spatial"] ** 2  # 3x3 kernel over H x W
    unit = 2 * REV["batch"] * REV["width"] * REV["hidden"] * spatial_terms
    f_res = _step_flops("residual", **params)
    f_cb = _step_flops("checkpoint_block", **params)
    assert f_res == 12 * REV["depth"] * unit
    assert f_cb == 15 * REV["depth"] * unit
    assert 4 * f_cb == 5 * f_res
