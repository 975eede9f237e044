"""Test plug-in for tests/test_hostile_gates.py: techniques that attack memlab itself rather than
compute a wrong figure.  All solve a tiny workload, so a point costs little more than its child."""
import os
import signal

import torch

from memlab import Param, Problem, Technique, Workload

CALLS = {"forward": 0}


class _Scale(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)


class TinyWorkload(Workload, name="gates_tiny", family="gates_testing"):
    """out = x * w with x [n, 2] and w [2] (a parameter)."""

    params = {"n": Param(4, low=1)}
    samples_param = "n"
    check_params = {"n": 3}

    @classmethod
    def sweep_grid(cls, quick):
        return [{"n": 2}]

    def build(self, device, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        n = self.config["n"]
        x = torch.randn(n, 2, generator=g, dtype=torch.float64).to(device, dtype)
        w = torch.randn(2, generator=g, dtype=torch.float64).to(device, dtype)
        gy = torch.randn(n, 2, generator=g, dtype=torch.float64).to(device, dtype)
        return Problem(model=_Scale(w), inputs={"x": x}, grad_output=gy)

    def reference(self, problem):
        return problem.inputs["x"] * problem.model.w


class Right(Technique, name="gates_right"):
    """out = x * w, as the reference."""

    workload = TinyWorkload

    def forward(self, problem):
        return problem.inputs["x"] * problem.model.w


class RightOnce(Technique, name="gates_right_once"):
    """Right on its first call in a process, half the output on every later one."""

    workload = TinyWorkload

    def forward(self, problem):
        CALLS["forward"] += 1
        out = problem.inputs["x"] * problem.model.w
        return out if CALLS["forward"] == 1 else out * 0.5


class KillsParent(Technique, name="gates_kills_parent"):
    """SIGKILLs the process that started the one measuring it."""

    workload = TinyWorkload

    def forward(self, problem):
        os.kill(os.getppid(), signal.SIGKILL)
        return problem.inputs["x"] * problem.model.w
