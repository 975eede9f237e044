"""Techniques for gradients and optimizer state, as options of the training step (issue 44, item 3):
``adafactor`` (factored second moments), ``<optimizer>_in_backward`` (each parameter stepped in its
post-accumulate-grad hook, its gradient freed at once) and micro-batches (``accumulate=K``: a batch
of B as K micro-batches of B/K).

Exact CPU allocation bytes (profiler replay), in-process, tiny sizes but one: the in-backward peak
needs gradients that dominate the step (docstring of that test).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import memlab
from memlab.core.setting import OPTIMIZERS, STEPPED_OPTIMIZERS, Setting, in_backward
from memlab.measurement.inprocess import traced_steps
from memlab.measurement.step import make_step
from memlab.measurement.step_check import StepLog
from memlab.own_model import measure_model

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

CPU = torch.device("cpu")
TINY = {"batch": 8, "depth": 3, "width": 4, "hidden": 8}
CHAIN = Path(__file__).parent / "models" / "chain_blocks.py"
STEP = 4  # every torch.optim step counter: a float32 0-d tensor on the CPU
QUICK = {"isolate": False, "iterations": 2, "repeats": 1, "time_budget": 0}


def _state(traced) -> int:
    return traced.categories[0].start["optimizer_state"]


# -- adafactor -------------------------------------------------------------------------------------
def adafactor_state_bytes(params) -> int:
    """torch.optim.Adafactor's state, from the parameters' shapes (torch/optim/_adafactor.py): for a
    parameter of two or more dimensions a row factor (its shape, last dimension 1) and a column factor
    (its shape, second-to-last dimension 1), for a vector a full second moment, all in its dtype; and a
    ``step`` counter each."""
    total = 0
    for p in params:
        if p.dim() > 1:
            elements = p.numel() // p.shape[-1] + p.numel() // p.shape[-2]
        else:
            elements = p.numel()
        total += elements * p.element_size() + STEP
    return total


@pytest.mark.parametrize("name, params", [("tt_factorized", None), ("residual", TINY)])
def test_adafactor_state_is_the_factored_size_to_the_byte(name, params):
    """4-D tensor-train cores; 2-D weights and 1-D biases of a residual stack."""
    cls = memlab.get_technique(name)
    t = cls.for_check() if params is None else cls(**params)
    traced = traced_steps(t, CPU, torch.float32, iterations=1, optimizer="adafactor")
    params = list(traced.problem.model.parameters())
    dims = {p.dim() for p in params}
    assert dims & {1} or dims & {3, 4}  # vectors, or more than two dimensions: not just matrices
    assert type(traced.optimizer) is torch.optim.Adafactor
    want = adafactor_state_bytes(params)
    assert _state(traced) == want
    full = sum(2 * p.numel() * p.element_size() + STEP for p in params)  # Adam's two full moments
    assert want < full


def test_adafactor_measures_ok_with_its_state_in_the_row():
    m = memlab.measure("residual", **TINY, optimizer="adafactor", **QUICK)
    assert m.status == "ok", m.error
    assert (m.optimizer, m.optimizer_class) == ("adafactor", "torch.optim.Adafactor")
    t = memlab.get_technique("residual")(**TINY)
    want = adafactor_state_bytes(t.build(CPU, torch.float32, 0).model.parameters())
    assert m.end_by_category_bytes["optimizer_state"] == m.peak_by_category_bytes["optimizer_state"] == want


# -- the optimizer in backward ---------------------------------------------------------------------
def test_every_optimizer_has_an_in_backward_choice():
    assert set(OPTIMIZERS) == set(STEPPED_OPTIMIZERS) | {f"{o}_in_backward" for o in STEPPED_OPTIMIZERS}
    assert in_backward("adam_in_backward") == ("adam", True) and in_backward("adam") == ("adam", False)


@pytest.mark.parametrize("change, message", [
    ({"accumulate": 2}, r"accumulate=2 is not valid with optimizer='adam_in_backward': it updates each parameter "
                        r"and frees its gradient as soon as backward produces it, so no \.grad is left to accumulate"),
    ({"grads": "zero"}, r"grads='zero' is not valid with optimizer='adam_in_backward': it frees each gradient in "
                        r"backward"),
])
def test_in_backward_refuses_what_it_cannot_do(change, message):
    with pytest.raises(ValueError, match=message):
        Setting(optimizer="adam_in_backward", **change).validate()
    with pytest.raises(ValueError, match=message):
        memlab.measure("residual", **TINY, optimizer="adam_in_backward", **change, isolate=False)


def _logged(name, optimizer, steps=3):
    """``steps`` float64 training steps of technique ``name``: every gradient and parameter sampled."""
    t = memlab.get_technique(name)(**TINY)
    log = StepLog()
    step, _ = make_step(t, t.build(CPU, torch.float64, 0), "train", optimizer=optimizer, capture=log)
    for _ in range(steps):
        step()
    return log.steps()


@pytest.mark.parametrize("name", ["residual", "reversible"])
@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adam", "adafactor"])
def test_in_backward_gives_the_plain_step_s_gradients_and_parameters(name, optimizer):
    """Each parameter's update is its optimizer's, on the same gradient, only earlier: three float64
    steps give the plain step's gradients (sampled in the hooks) and parameters."""
    plain, hooked = _logged(name, optimizer), _logged(name, f"{optimizer}_in_backward")
    for a, b in zip(hooked, plain):
        assert a.keys() == b.keys() and any(k.startswith("param:") for k in b)
        for key in b:
            assert a[key][0] == b[key][0], key
            np.testing.assert_allclose(a[key][1], b[key][1], rtol=1e-12, atol=1e-12, err_msg=key)


def test_in_backward_measures_ok_against_its_shadow_reference():
    m = memlab.measure("reversible", **TINY, optimizer="adam_in_backward", **QUICK)
    assert m.status == "ok", m.error
    assert m.optimizer == "adam_in_backward" and m.extra["measured_steps_checked"] >= 2
    plain = memlab.measure("reversible", **TINY, optimizer="adam", **QUICK)
    assert m.end_by_category_bytes["optimizer_state"] == plain.end_by_category_bytes["optimizer_state"]


DEEP = '''
import torch
from torch import nn

W, L = 256, 256


def build():
    return nn.Sequential(*(nn.Linear(W, W, bias=False) for _ in range(L)))


def batch(size):
    return torch.randn(size, W)
'''


def test_in_backward_lowers_the_peak_by_the_gradient_bytes(tmp_path):
    """L = 256 bias-free W x W linear layers (W = 256) at batch 1, ``sgd_momentum``: gradients dominate.

    Plain: backward leaves every weight's gradient live, G = L * W^2 * 4 bytes (64 MiB), and the
    ``foreach=False`` momentum step updates in place (allocates nothing), so the peak is G and a few
    [1, W] tensors.  In backward: each gradient is freed as soon as its layer's update is done, so at
    most one W x W gradient (G / L) is live, beside the saved [1, W] inputs of the layers not reached
    yet ((L - 1) * W * 4 = about G / W).  The peak drops by G (1 - 1/L - 1/W), 0.992 G: within 1% of G."""
    path = tmp_path / "deep_linear.py"
    path.write_text(DEEP)
    runs = {o: measure_model(path, "plain", batch=1, optimizer=o, check=False, **QUICK)
            for o in ("sgd_momentum", "sgd_momentum_in_backward")}
    plain, hooked = runs["sgd_momentum"], runs["sgd_momentum_in_backward"]
    assert plain.status == hooked.status == "ok", (plain.error, hooked.error)
    grads = 256 * 256 * 256 * 4
    assert plain.grad_bytes == grads
    assert plain.peak_by_category_bytes["gradients"] == grads
    assert hooked.peak_by_category_bytes["gradients"] == 256 * 256 * 4  # one layer's
    assert abs((plain.peak_allocated_bytes - hooked.peak_allocated_bytes) - grads) <= 0.01 * grads
    assert hooked.end_by_category_bytes["optimizer_state"] == plain.end_by_category_bytes["optimizer_state"] == grads


class _HandSetGrad(torch.autograd.Function):
    """``x * w`` whose backward writes ``w.grad`` itself (as RevLib does) and returns no gradient for w."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gw = (g * x).sum(0)
        w.grad = gw if w.grad is None else w.grad + gw
        return g * w, None


def test_a_gradient_set_by_hand_is_stepped_after_backward(patterns):
    """No AccumulateGrad, so no hook: the step after backward updates that parameter, once."""

    class HandSet(memlab.Technique):  # no name=: not registered
        """x * w, w's gradient written by hand."""

        name = "test_hand_set_grad"
        workload = patterns.PatternWorkload

        def forward(self, problem):
            return _HandSetGrad.apply(problem.inputs["x"], problem.model.w)

    t = HandSet(rows=16, cols=8)
    runs = {}
    for optimizer in ("adam", "adam_in_backward"):
        log = StepLog()
        step, _ = make_step(t, t.build(CPU, torch.float64, 0), "train", optimizer=optimizer, capture=log)
        for _ in range(2):
            step()
        runs[optimizer] = log.steps()
    for a, b in zip(runs["adam_in_backward"], runs["adam"]):
        for key in b:
            np.testing.assert_array_equal(a[key][1], b[key][1], err_msg=key)


# -- micro-batches: accumulate=K splits the batch B into K micro-batches of B/K -----------------------
@pytest.mark.parametrize("grads", ["zero", "none"])
def test_four_micro_batches_have_the_quarter_batch_s_activation_peak_and_the_whole_gradients(grads):
    """``accumulate=4`` at batch 16 against batch 4 in one pass, on a model file (inputs need no grad).

    With the gradients kept between steps (``grads="zero"``) both backwards add into an existing
    ``.grad``, and everything but the inputs is equal at the peak, to the byte: the saved activations
    and temporaries of one micro-batch of 4 (the activation peak of batch 4) and the gradients of every
    parameter; the inputs are the whole batch (micro-batches are views of it).  With ``grads="none"``
    the first micro-batch's backward creates ``.grad`` and the other three add into it: the activation
    peak is the one of batch 4 adding into ``.grad`` (the ``grads="zero"`` figure above)."""
    quarter = measure_model(CHAIN, "plain", batch=4, grads="zero", **QUICK)
    whole = measure_model(CHAIN, "plain", batch=16, accumulate=4, grads=grads, **QUICK)
    assert quarter.status == whole.status == "ok", (quarter.error, whole.error)
    assert whole.extra["activation_peak_bytes"] == quarter.extra["activation_peak_bytes"] > 0
    q, w = quarter.peak_by_category_bytes, whole.peak_by_category_bytes
    for category in ("parameters", "gradients", "saved_activations", "temporaries"):
        assert w[category] == q[category], category
    assert w["gradients"] == quarter.param_bytes  # every parameter's gradient
    x = 4 * 32 * 4  # batch(4): [4, 32] float32; the loss's 0-d upstream gradient is 4 bytes
    assert (q["inputs"], w["inputs"]) == (x + 4, 4 * x + 4)
