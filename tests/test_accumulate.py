"""The training step's gradient options: ``accumulate=K`` micro-batches into ``.grad`` before one
optimizer step, and ``grads="zero"`` (gradients zeroed in place between steps, so kept allocated).

Tiny sizes, exact CPU allocation bytes (profiler replay), in-process.
"""
import numpy as np
import pytest
import torch

import memlab
from memlab.cli.common import setting_of
from memlab.cli.parser import build_parser
from memlab.measurement.inprocess import traced_steps
from memlab.measurement.micro_batches import BatchDoesNotSplit, micro_problems
from memlab.measurement.step import make_step
from memlab.measurement.step_check import ReferenceAsTechnique, StepLog

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

CPU = torch.device("cpu")
TINY = {"batch": 8, "depth": 3, "width": 4, "hidden": 8}


def _tech(name, **params):
    return memlab.get_technique(name)(**params)


def _logged_steps(technique, forward_as, steps, **options):
    """``steps`` training steps of ``forward_as`` (the technique, or its reference) on a float64 problem,
    every gradient before the optimizer and every parameter after it sampled."""
    problem = technique.build(CPU, torch.float64, 0)
    log = StepLog()
    step, _ = make_step(forward_as, problem, "train", optimizer="adam", capture=log, **options)
    for _ in range(steps):
        step()
    return log.steps()


def _assert_logs_equal(got, want, tol):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for name in b:
            assert a[name][0] == b[name][0], name
            np.testing.assert_allclose(a[name][1], b[name][1], rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("name", ["reversible", "residual"])
def test_two_micro_batches_give_the_reference_s_gradients_and_parameters(name):
    """accumulate=2: the technique's accumulated gradients and its parameters after each step equal those
    of the reference accumulated the same way (float64, three Adam steps), and, the output being per
    sample, the whole batch's gradients (micro-batches of the given upstream gradient sum to it)."""
    t = _tech(name, **TINY)
    two = _logged_steps(t, t, 3, accumulate=2)
    _assert_logs_equal(two, _logged_steps(t, ReferenceAsTechnique(t), 3, accumulate=2), 1e-11)
    assert {"output", "output:1", "grad:0", "param:0"} <= set(two[0])
    whole = _logged_steps(t, t, 1)[0]
    for key in (k for k in whole if k.startswith("grad:")):
        np.testing.assert_allclose(two[0][key][1], whole[key][1], rtol=1e-11, atol=1e-11, err_msg=key)


def test_accumulate_measures_ok_and_records_its_setting():
    """A measurement with accumulate=2 and grads=zero: every step checked against the shadow reference
    accumulating alike (ok), the row records both options, its point key holds them."""
    m = memlab.measure("reversible", **TINY, accumulate=2, grads="zero", isolate=False, iterations=2, repeats=1,
                       time_budget=0)
    assert m.status == "ok", m.error
    assert (m.accumulate, m.grads) == (2, "zero")
    assert m.setting().key()[-2:] == (2, "zero")
    assert m.extra["measured_steps_checked"] >= 2


def test_a_batch_that_does_not_split_is_refused_naming_the_batch_and_k():
    with pytest.raises(ValueError, match=r"batch=6 does not split into accumulate=4"):
        memlab.measure("reversible", **{**TINY, "batch": 6}, accumulate=4, isolate=False)
    with pytest.raises(BatchDoesNotSplit, match=r"n=37 does not split into accumulate=2"):
        memlab.measure("unchunked", n=37, d=4, hidden=8, accumulate=2, isolate=False)
    with pytest.raises(ValueError, match="mode='infer' takes neither"):
        memlab.measure("reversible", **TINY, mode="infer", accumulate=2, isolate=False)


def test_micro_batches_are_views_of_the_batch():
    """No copy: each micro-batch's input and upstream gradient share the whole batch's storage."""
    t = _tech("reversible", **TINY)
    problem = t.build(CPU, torch.float32, 0)
    parts = micro_problems(t, problem, 4)
    assert [p.inputs["x"].shape[0] for p in parts] == [2] * 4
    for k, p in enumerate(parts):
        assert p.inputs["x"].untyped_storage().data_ptr() == problem.inputs["x"].untyped_storage().data_ptr()
        assert torch.equal(p.grad_output, problem.grad_output[2 * k:2 * k + 2])


def test_zeroed_gradients_stay_allocated_between_steps():
    """grads=zero: at the start of every measured step the gradients category is exactly the parameters'
    bytes (their .grad, zeroed in place; the input's .grad is set to None, a loop's inputs being new
    every step); grads=none: nothing.  The allocated baseline counts them."""
    t = _tech("reversible", **TINY)
    zero = traced_steps(t, CPU, torch.float32, iterations=2, grads="zero")
    param_bytes = sum(p.numel() * p.element_size() for p in zero.problem.model.parameters())
    assert [c.start["gradients"] for c in zero.categories] == [param_bytes, param_bytes]
    assert [c.end["gradients"] for c in zero.categories] == [param_bytes, param_bytes]
    assert all(float(p.grad.abs().max()) == 0.0 for p in zero.problem.model.parameters())
    assert zero.problem.inputs["x"].grad is None
    none = traced_steps(t, CPU, torch.float32, iterations=2)
    assert [c.start["gradients"] for c in none.categories] == [0, 0]


def test_reversible_under_accumulation_holds_no_second_gradient_set():
    """accumulate=2, depth 4: from the second micro-batch on, .grad exists, and the reversible stack adds
    each half-step's parameter gradients into it at once (NOTE [ gradients into .grad block by block ]).
    So at the step's peak the gradients are exactly the accumulated ones: the parameters' bytes plus the
    input's gradient (x: [8, 8] float32, 256 bytes), not a second set of the parameters' bytes beside
    them, and the peak is at most plain autograd's (residual) under the same accumulation."""
    cfg = {**TINY, "depth": 4}
    rev = traced_steps(_tech("reversible", **cfg), CPU, torch.float32, iterations=2, accumulate=2)
    plain = traced_steps(_tech("residual", **cfg), CPU, torch.float32, iterations=2, accumulate=2)
    param_bytes = sum(p.numel() * p.element_size() for p in rev.problem.model.parameters())
    x_bytes = rev.problem.inputs["x"].numel() * 4
    assert x_bytes == 256
    for c in rev.categories:
        assert c.peak["gradients"] == param_bytes + x_bytes
    assert max(c.total_peak_bytes for c in rev.categories) <= min(c.total_peak_bytes for c in plain.categories)


def test_reversible_gives_gradients_to_autograd_grad_and_to_existing_grad_alike():
    """The block-by-block accumulation only where backward() executes the parameters' AccumulateGrad:
    torch.autograd.grad still returns the parameter gradients, and a backward into an existing .grad adds."""
    t = _tech("reversible", **TINY)
    p = t.build(CPU, torch.float64, 0)
    params = list(p.model.parameters())
    got = torch.autograd.grad(t.forward(p), params, p.grad_output)
    assert all(g is not None for g in got) and all(q.grad is None for q in params)
    t.forward(p).backward(p.grad_output)
    t.forward(p).backward(p.grad_output)
    for g, q in zip(got, params):
        torch.testing.assert_close(q.grad, 2 * g, rtol=1e-12, atol=1e-12)


def test_the_cli_s_gradient_options_build_the_setting():
    parser = build_parser()
    args = parser.parse_args(["measure", "reversible", "--accumulate", "4", "--grads", "zero"])
    assert (setting_of(args).accumulate, setting_of(args).grads) == (4, "zero")
    args = parser.parse_args(["sweep", "--family", "reversible", "--accumulate", "2"])
    assert setting_of(args).accumulate == 2
    with pytest.raises(ValueError, match="grads='some' is not valid"):
        setting_of(parser.parse_args(["measure", "reversible", "--grads", "some"]))


def test_a_technique_that_loses_its_figure_under_accumulation_says_why_on_its_row():
    """MemCNN frees its input's storage in forward: a micro-batch view frees the whole batch, so the
    step fails under accumulate=2, and the row carries the technique's stated reason."""
    pytest.importorskip("memcnn")
    m = memlab.measure("memcnn", **{**TINY, "x_requires_grad": False}, accumulate=2, isolate=False, check=False,
                       iterations=1, repeats=1, time_budget=0)
    assert m.status == "error" and "out of bounds" in m.error
    assert "frees the storage of its input" in m.extra["accumulation_note"]
    plain = memlab.measure("reversible", **TINY, accumulate=2, isolate=False, check=False, iterations=1,
                           repeats=1, time_budget=0)
    assert "accumulation_note" not in plain.extra


def test_a_model_file_s_scalar_loss_accumulates_to_the_whole_batch_s_gradient():
    """A model file's output is its scalar loss: each micro-batch's loss is divided by K, and the batch the
    file returned (problem.extra["batch"]) is sliced with the inputs, so two micro-batches of a mean loss
    give the whole batch's gradients (float64), and the measured row is ok."""
    from pathlib import Path

    from memlab.own_model import load_model, model_techniques

    chain = Path(__file__).resolve().parent / "models" / "chain_blocks.py"
    load_model(chain)
    t = memlab.get_technique(model_techniques(chain)["plain"])(batch=4)
    two = _logged_steps(t, t, 1, accumulate=2)[0]
    whole = _logged_steps(t, t, 1)[0]
    grads = [k for k in whole if k.startswith("grad:")]
    assert grads
    for key in grads:
        np.testing.assert_allclose(two[key][1], whole[key][1], rtol=1e-12, atol=1e-12, err_msg=key)
    m = memlab.measure(t.name, batch=4, accumulate=2, isolate=False, iterations=2, repeats=1, time_budget=0)
    assert m.status == "ok", m.error


def test_the_mse_loss_of_micro_batches_is_divided_by_k():
    """loss=mse: each micro-batch's mean is divided by K, as a user's loop divides its loss, so two
    micro-batches give the whole batch's gradients (float64)."""
    t = _tech("reversible", **TINY)
    two = _logged_steps(t, t, 1, accumulate=2, loss="mse")[0]
    whole = _logged_steps(t, t, 1, loss="mse")[0]
    for key in (k for k in whole if k.startswith("grad:")):
        np.testing.assert_allclose(two[key][1], whole[key][1], rtol=1e-11, atol=1e-11, err_msg=key)
