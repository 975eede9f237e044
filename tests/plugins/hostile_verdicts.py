"""Test plug-in for tests/test_hostile_verdicts.py: a technique right in every output that keeps 1 MiB
alive on every other call, the leak that two measured steps cannot tell from none (issue 46, case 2)."""
import torch

from memlab import Param, Problem, Technique, Workload

KEPT: list[torch.Tensor] = []
CALLS = {"forward": 0}


class _Weight(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)


class ScaleWorkload(Workload, name="verdicts_tiny", family="verdicts_testing"):
    """out = x * w with x [n, 3] and w [3] (a parameter)."""

    params = {"n": Param(4, low=1)}
    samples_param = "n"

    @classmethod
    def sweep_grid(cls, quick):
        return [{"n": 4}]

    def build(self, device, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        x, w, gy = (torch.randn(*shape, generator=g, dtype=torch.float64).to(device, dtype)
                    for shape in ((self.config["n"], 3), (3,), (self.config["n"], 3)))
        return Problem(model=_Weight(w), inputs={"x": x}, grad_output=gy)

    def reference(self, problem):
        return problem.inputs["x"] * problem.model.w


class LeaksEveryOtherStep(Technique, name="verdicts_leaks_every_other_step"):
    """out = x * w, as the reference; every other call keeps a 1 MiB tensor alive for good."""

    workload = ScaleWorkload

    def forward(self, problem):
        CALLS["forward"] += 1
        if CALLS["forward"] % 2:
            KEPT.append(torch.zeros(2**20, dtype=torch.uint8))
        return problem.inputs["x"] * problem.model.w


class Level(Technique, name="verdicts_level"):
    """out = x * w, as the reference, and nothing kept."""

    workload = ScaleWorkload

    def forward(self, problem):
        return problem.inputs["x"] * problem.model.w
