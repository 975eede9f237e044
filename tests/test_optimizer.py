"""The optimizer and the loss are parameters of the training step: state as its own category, a
technique's own optimizer, and the upstream gradient inside the step."""
import pytest
import torch

import memlab
from memlab.cli import main
from memlab.measurement.inprocess import traced_steps

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

CPU = torch.device("cpu")
FULL = 1000 * 1000 * 4      # x, grad_output and out of the pattern workload, bytes
W = 1000 * 4                # w and its gradient
STEP = 4                    # Adam's per-parameter `step` counter: a float32 scalar tensor on CPU


def _measure(name, **kw):
    return memlab.measure(name, isolate=False, iterations=2, repeats=1, time_budget=0, **kw)


@pytest.mark.parametrize("optimizer, state, cls", [
    ("sgd", 0, "torch.optim.sgd.SGD"),
    ("sgd_momentum", W, "torch.optim.sgd.SGD"),
    ("adam", 2 * W + STEP, "torch.optim.adam.Adam"),
    ("adamw", 2 * W + STEP, "torch.optim.adamw.AdamW"),
])
def test_optimizer_state_is_its_own_category(patterns, optimizer, state, cls):
    m = _measure("pattern_broadcast_mul", optimizer=optimizer)
    assert m.status == "ok", m.error
    assert (m.optimizer, m.optimizer_class, m.loss) == (optimizer, cls, "given")
    assert m.end_by_category_bytes["optimizer_state"] == m.peak_by_category_bytes["optimizer_state"] == state
    assert m.allocated_baseline_bytes == 2 * FULL + W + state   # created at the warm-up step: baseline
    assert m.peak_allocated_bytes == 2 * FULL + W                # the step's own peak is backward's


def test_adam_state_is_two_moments_per_parameter():
    t = memlab.get_technique("tt_factorized").for_check()
    traced = traced_steps(t, CPU, torch.float32, iterations=1, optimizer="adam")
    params = list(traced.problem.model.parameters())
    assert len(params) > 1
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    assert traced.categories[0].start["optimizer_state"] == 2 * param_bytes + STEP * len(params)
    assert traced.categories[0].start["parameters"] == param_bytes


class HalfMomentum(torch.optim.Optimizer):
    """SGD with a float16 momentum buffer: half the state of ``sgd_momentum``."""

    def __init__(self, params, lr=1e-4):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "m" not in st:
                    st["m"] = torch.zeros_like(p, dtype=torch.float16)
                st["m"].mul_(0.9).add_(p.grad.to(torch.float16))
                p.add_(st["m"], alpha=-group["lr"])


def test_a_technique_supplies_its_own_optimizer(patterns):
    class OwnOptimizer(memlab.Technique):  # no name=: not registered
        """x * w, trained with its own optimizer."""

        name = "test_own_optimizer"
        workload = patterns.PatternWorkload

        def forward(self, problem):
            return problem.inputs["x"] * problem.model.w

        def make_optimizer(self, params, choice):
            return HalfMomentum(params) if choice == "sgd_momentum" else None

    m = _measure(OwnOptimizer, optimizer="sgd_momentum")
    assert m.status == "ok", m.error
    assert m.optimizer_class.endswith("HalfMomentum")
    assert m.end_by_category_bytes["optimizer_state"] == W // 2
    assert _measure(OwnOptimizer, optimizer="adam").optimizer_class == "torch.optim.adam.Adam"


def test_mse_loss_moves_the_upstream_gradient_into_the_step(patterns):
    given = _measure("pattern_broadcast_mul")
    mse = _measure("pattern_broadcast_mul", loss="mse")
    assert mse.status == "ok" and mse.loss == "mse"
    # the baseline loses exactly grad_output, in the record and in the trace
    assert given.allocated_baseline_bytes - mse.allocated_baseline_bytes == FULL
    assert (given.total_peak_bytes - given.peak_allocated_bytes) - (mse.total_peak_bytes - mse.peak_allocated_bytes) == FULL
    # at the peak (MulBackward's g * x): x and the loss's gradient for out (inputs); out, saved by
    # mse_loss; g * x and the squares' buffer the scalar loss lives in (temporaries); the loss's
    # own 4-byte gradient
    assert mse.peak_by_category_bytes == {"parameters": W, "gradients": W, "optimizer_state": 0, "inputs": 2 * FULL,
                                          "saved_activations": FULL, "temporaries": 2 * FULL + 4}
    assert mse.end_by_category_bytes["inputs"] == FULL


def test_choices_are_validated():
    with pytest.raises(ValueError, match=r"optimizer='adamx' is not valid; valid optimizers: sgd, sgd_momentum, adam, adamw"):
        memlab.measure("slice_loop", optimizer="adamx")
    with pytest.raises(ValueError, match=r"loss='ce' is not valid; valid losses: given, mse"):
        memlab.measure("slice_loop", loss="ce")


def test_cli_options_and_human_output(capsys):
    assert main(["measure", "slice_loop", "--optimizer", "adamx"]) == 2
    assert "optimizer='adamx' is not valid" in capsys.readouterr().err
    assert main(["measure", "unchunked", "--param", "n=64", "--param", "d=8", "--param", "hidden=16",
                 "--in-process", "--optimizer", "adam", "--loss", "mse", "--iterations", "1", "--repeats", "1",
                 "--time-budget", "0"]) == 0
    out = capsys.readouterr().out
    assert "total peak" in out and "optimizer adam, loss mse" in out
    assert "optimizer state" in out and "saved activations" in out


def test_choices_reach_the_isolated_worker():
    m = memlab.measure("slice_loop", n=64, d=8, hidden=16, chunk_size=16, iterations=1, repeats=1, time_budget=0,
                       check=False, optimizer="adamw", loss="mse")
    assert m.status == "ok", m.error
    assert (m.optimizer, m.loss, m.optimizer_class) == ("adamw", "mse", "torch.optim.adamw.AdamW")
    assert sum(m.peak_by_category_bytes.values()) == m.total_peak_bytes
    assert m.peak_by_category_bytes["optimizer_state"] > 0


def test_rows_from_before_the_choice_read_as_sgd_given(patterns):
    m = _measure("pattern_broadcast_mul", rows=10, cols=10)
    assert memlab.Measurement.from_json(m.to_json()) == m
    old = {k: v for k, v in m.to_dict().items()
           if k not in ("optimizer", "optimizer_class", "loss", "total_peak_bytes", "peak_by_category_bytes",
                        "end_by_category_bytes")}
    back = memlab.Measurement.from_dict(old)
    assert (back.optimizer, back.loss, back.total_peak_bytes, back.peak_by_category_bytes) == ("sgd", "given", None, {})
