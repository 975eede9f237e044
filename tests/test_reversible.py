"""Reversible family: same maths as `residual`, activation peak flat in depth, no leak, FLOPs, errors.

Small sizes, exact CPU allocation bytes (profiler replay), in-process (``isolate=False``).
"""
import pytest
import torch

import memlab
from activation_reference import activation_peak
from memlab.families.reversible.reproductions._leaky_ctx import LeakyCtxOutput
from memlab.functional.reversible import (Coupling, check_invertibility, couple, residual_stack, reversible_stack,
                                          reversible_stack_inverse, uncouple)
from memlab.measurement.step import make_step
from memlab.families.reversible.workload import ResidualStack

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

CPU = torch.device("cpu")
SMALL = {"batch": 8, "width": 8, "hidden": 16}
CONV = {"block": "conv", "batch": 2, "width": 2, "hidden": 3, "spatial": 4}
FAMILY = ["residual", "checkpoint_block", "reversible", "reversible_nosave"]


def _tech(name, **params):
    return memlab.get_technique(name)(**params)


def _activation(name, **params):
    t = _tech(name, **params)
    problem = t.build(CPU, torch.float32, 0)
    step, _ = make_step(t, problem, "train")
    step()  # warm-up, as a measurement does
    return activation_peak(t, problem)["activation_peak_bytes"]


# -- same maths ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FAMILY[1:])
@pytest.mark.parametrize("config", [
    {"coupling": "additive"}, {"coupling": "affine"}, {**CONV, "coupling": "additive"}, {**CONV, "coupling": "affine"},
], ids=["mlp-additive", "mlp-affine", "conv-additive", "conv-affine"])
def test_gradients_equal_residual_float64(name, config):
    t = _tech(name, depth=6, **{**SMALL, **config})
    v = memlab.verify_technique(t, CPU, torch.float64)
    assert v.ok, v.errors
    assert v.max_abs_error < 1e-12
    assert "grad:x" in v.errors and "grad:f.0.0.weight" in v.errors


def test_reversible_matches_residual_with_autograd_grad_too():
    t = _tech("reversible", depth=3, **SMALL)
    p = t.build(CPU, torch.float64, 0)
    leaves = p.leaves()
    got = torch.autograd.grad(t.forward(p), leaves, p.grad_output)
    want = torch.autograd.grad(t.reference(p), leaves, p.grad_output)
    assert max(float((a - b).abs().max()) for a, b in zip(got, want)) < 1e-12


@pytest.mark.parametrize("coupling", ["additive", "affine"])
def test_invertibility_checker(coupling):
    p = _tech("residual", depth=8, coupling=coupling, **SMALL).build(CPU, torch.float64, 0)
    report = check_invertibility(p.inputs["x"], list(p.model.f), list(p.model.g), coupling=coupling)
    assert report.max_abs_error < 1e-12 and report.depth == 8 and report.coupling == coupling
    y = residual_stack(p.inputs["x"], list(p.model.f), list(p.model.g), coupling=coupling)
    x = reversible_stack_inverse(y, list(p.model.f), list(p.model.g), coupling=coupling)
    torch.testing.assert_close(x, p.inputs["x"].detach())


def test_invertibility_checker_flags_a_non_invertible_block():
    p = _tech("residual", depth=2, **SMALL).build(CPU, torch.float64, 0)
    f = [torch.nn.Sequential(m, torch.nn.Dropout(0.5)) for m in p.model.f]  # random: not invertible
    torch.manual_seed(0)
    assert check_invertibility(p.inputs["x"], f, list(p.model.g)).max_abs_error > 1e-3



@pytest.mark.parametrize("coupling", list(Coupling))
def test_coupling_rule_saves_what_it_states(coupling):
    """Each coupling object's saved-tensor statement, counted: plain autograd over one coupling saves
    ``rule.saved_bytes(half)`` bytes of storages other than its inputs' (additive nothing, affine x and
    s), and ``uncouple`` inverts ``couple``."""
    rule = coupling.rule
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    fo = torch.randn(4, 3 * rule.fo_channels, dtype=torch.float64, requires_grad=True)
    storages = {}

    def pack(t):
        storages.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = couple(x, fo, coupling)
    new = {k: n for k, n in storages.items() if k != fo.untyped_storage().data_ptr()}
    assert sum(new.values()) == rule.saved_bytes(x.nbytes), (coupling, rule.saved_for_backward, new)
    torch.testing.assert_close(uncouple(y, fo, coupling), x, rtol=1e-14, atol=1e-14)
    z = y.detach().clone()
    rule.uncouple_(z, fo.detach())
    rule.couple_(z, fo.detach())
    torch.testing.assert_close(z, y.detach(), rtol=1e-14, atol=1e-14)
    assert coupling.out_channels(5) == 5 * rule.fo_channels

# -- bad input ------------------------------------------------------------------------------------

def test_odd_channel_count_is_a_clear_error():
    f = g = [torch.nn.Identity()]
    with pytest.raises(ValueError, match=r"odd channel count x.shape\[1\]=7"):
        reversible_stack(torch.zeros(2, 7), f, g)
    with pytest.raises(ValueError, match="odd channel count"):
        residual_stack(torch.zeros(2, 5, 3, 3), f, g)


def test_depth_below_one_is_a_clear_error():
    with pytest.raises(ValueError, match=r"depth=0 blocks; a stack needs depth >= 1"):
        reversible_stack(torch.zeros(2, 4), [], [])
    with pytest.raises(ValueError, match=r"depth=0 is out of range: expected integer in \[1, 4096\]"):
        _tech("reversible", depth=0)
    with pytest.raises(ValueError, match="2 F blocks but 1 G blocks"):
        reversible_stack(torch.zeros(2, 4), [torch.nn.Identity()] * 2, [torch.nn.Identity()])


def test_unknown_coupling_is_a_clear_error():
    with pytest.raises(ValueError, match="coupling='additve' is not valid; valid couplings: 'additive', 'affine'"):
        reversible_stack(torch.zeros(2, 4), [torch.nn.Identity()], [torch.nn.Identity()], coupling="additve")
    with pytest.raises(ValueError, match="coupling='additve' is out of range"):
        _tech("reversible", coupling="additve")


# -- memory ---------------------------------------------------------------------------------------

def test_reversible_activation_peak_is_flat_in_depth():
    shallow, deep = _activation("reversible", depth=4, **SMALL), _activation("reversible", depth=64, **SMALL)
    assert deep <= 1.05 * shallow, (shallow, deep)


def test_residual_and_twin_grow_with_depth_and_reversible_saves():
    x_bytes = SMALL["batch"] * 2 * SMALL["width"] * 4
    for name in ("residual", "reversible_nosave", "checkpoint_block"):
        a4, a16 = _activation(name, depth=4, **SMALL), _activation(name, depth=16, **SMALL)
        assert a16 - a4 >= 12 * x_bytes, (name, a4, a16)  # each keeps at least a block's halves
    # below its twin: tests/test_families.py (every technique with a twin); below checkpointing here
    assert _activation("reversible", depth=16, **SMALL) < _activation("checkpoint_block", depth=16, **SMALL)


def test_twin_costs_exactly_the_block_snapshots():
    rev, twin = _activation("reversible", depth=5, **SMALL), _activation("reversible_nosave", depth=5, **SMALL)
    x_bytes = SMALL["batch"] * 2 * SMALL["width"] * 4
    assert twin - rev == 5 * x_bytes


@pytest.mark.parametrize("name", ["residual", "reversible"])
def test_activation_peak_meets_analytic_expectation(name):
    m = memlab.measure(name, isolate=False, iterations=2, repeats=1, time_budget=0, depth=8, batch=64, width=32,
                       hidden=64)
    expected = m.extra["expected_activation_bytes"][name]
    assert m.matches_reference
    assert 0.9 * expected <= m.extra["activation_peak_bytes"] <= 1.1 * expected, (m.extra, expected)


# -- leaks ----------------------------------------------------------------------------------------

def _growth(m) -> int:
    """Bytes allocated_after_step varies over the measured iterations (0: no leak)."""
    after = m.allocated_after_step_bytes
    assert len(after) == 10
    return max(after) - min(after)


def test_reversible_does_not_leak_and_the_check_catches_a_ctx_cycle():
    cfg = dict(depth=4, **SMALL)
    m = memlab.measure("reversible", isolate=False, iterations=10, repeats=1, time_budget=0, **cfg)
    assert m.status == "ok" and _growth(m) == 0
    leaky = memlab.measure(LeakyCtxOutput, isolate=False, iterations=10, repeats=1, **cfg)
    assert leaky.status == "leak" and leaky.matches_reference
    assert _growth(leaky) > 0 and leaky.leak_bytes_per_step > 0
    assert "per step" in leaky.error
    assert leaky.allocated_after_step_bytes[-1] > leaky.allocated_after_step_bytes[0]


# -- compute --------------------------------------------------------------------------------------

def _flops(name, **params):
    from torch.utils.flop_counter import FlopCounterMode

    t = _tech(name, **params)
    step, _ = make_step(t, t.build(CPU, torch.float32, 0), "train")
    counter = FlopCounterMode(display=False)
    with counter:
        step()
    return counter.get_total_flops()


@pytest.mark.parametrize("config", [{}, CONV], ids=["mlp", "conv"])
def test_reversible_flops_at_most_4_thirds_of_residual(config):
    cfg = {"depth": 3, **SMALL, **config}
    base = _flops("residual", **cfg)
    for name in ("reversible", "reversible_nosave"):
        assert _flops(name, **cfg) <= 1.34 * base


# -- peers (optional) -----------------------------------------------------------------------------

def _peer(name):
    t = _tech(name, depth=3, **SMALL)
    try:
        t.check_available(CPU)
    except memlab.TechniqueUnavailable as exc:
        pytest.skip(str(exc))
    return t


def test_memcnn_doubled_input_gradient_is_exposed():
    t = _peer("memcnn")
    v = memlab.verify_technique(t, CPU, torch.float64)
    assert not v.ok
    bad = {k for k, e in v.errors.items() if e > 1e-12}
    assert bad == {"grad:x"}
    p = t.build(CPU, torch.float64, 0)
    t.forward(p).backward(p.grad_output)
    got = p.inputs["x"].grad.clone()
    p.inputs["x"].grad = None
    t.reference(p).backward(p.grad_output)
    torch.testing.assert_close(got, 2 * p.inputs["x"].grad)


def test_revlib_matches_and_reversible_is_not_above_it():
    t = _peer("revlib")
    assert memlab.verify_technique(t, CPU, torch.float64).ok
    assert _activation("reversible", depth=8, **SMALL) <= _activation("revlib", depth=8, **SMALL)


def test_peers_refuse_affine_coupling():
    for name in ("memcnn", "revlib"):
        with pytest.raises(memlab.TechniqueUnavailable, match="additive coupling only|needs"):
            _tech(name, coupling="affine", **SMALL).check_available(CPU)


# -- sweep grid -----------------------------------------------------------------------------------

def test_full_sweep_grid_spans_depths_4_to_64():
    """(Every grid is valid for every technique: tests/test_families.py, for every family.)"""
    assert {c["depth"] for c in ResidualStack.sweep_grid(False)} >= {4, 64}


@pytest.mark.parametrize("coupling", ["additive", "affine"])
@pytest.mark.parametrize("name", ["residual", "checkpoint_block", "reversible", "reversible_nosave"])
def test_each_further_block_costs_exactly_the_expected_bytes(name, coupling):
    """The expectation's per-block part is exact: 4 more blocks add 4 times it, to the byte (affine
    couplings save their scale s; checkpointing stashes the CPU RNG state per block)."""
    def measured(depth):
        m = memlab.measure(name, isolate=False, iterations=1, repeats=1, time_budget=0, check=False,
                           depth=depth, batch=64, width=32, hidden=64, coupling=coupling)
        return m.extra["activation_peak_bytes"], m.extra["expected_activation_bytes"][name]
    (a4, e4), (a8, e8) = measured(4), measured(8)
    assert a8 - a4 == e8 - e4, (a4, a8, e4, e8)
