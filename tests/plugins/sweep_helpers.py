"""Test plug-in for sweep durability: a tiny workload with a three-point grid, one technique that
is right and one that fails, so a whole sweep measures in well under a second in process."""
import torch

from memlab import Param, Problem, Technique, Workload


class _Scale(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)


class TinyWorkload(Workload, name="sweep_tiny", family="sweep_testing"):
    """out = x * w with x [n, 2] (no grad) and w [2] (a parameter)."""

    params = {"n": Param(4, low=1)}
    samples_param = "n"
    check_params = {"n": 3}

    @classmethod
    def sweep_grid(cls, quick):
        return [{"n": 2}, {"n": 3}, {"n": 4}]

    def build(self, device, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        n = self.config["n"]
        x = torch.randn(n, 2, generator=g, dtype=torch.float64).to(device, dtype)
        w = torch.randn(2, generator=g, dtype=torch.float64).to(device, dtype)
        gy = torch.randn(n, 2, generator=g, dtype=torch.float64).to(device, dtype)
        return Problem(model=_Scale(w), inputs={"x": x}, grad_output=gy)

    def reference(self, problem):
        return problem.inputs["x"] * problem.model.w


class TinyRight(Technique, name="sweep_tiny_right"):
    """out = x * w, as the reference."""

    workload = TinyWorkload

    def forward(self, problem):
        return problem.inputs["x"] * problem.model.w


class TinyFails(Technique, name="sweep_tiny_fails"):
    """Raises in forward: every point is an ``error`` row."""

    workload = TinyWorkload

    def forward(self, problem):
        raise RuntimeError("deliberate failure in forward")
