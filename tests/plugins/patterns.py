"""Test plug-in: techniques with allocation patterns whose bytes are computed by hand, and
techniques that fail on purpose (error, OOM, crash, hang).  Loaded with memlab.load_plugin."""
import os
import signal

import torch

import memlab
from memlab import Param, Problem, Technique, Workload

ROWS, COLS = 1000, 1000          # one [ROWS, COLS] float32 tensor = 4,000,000 bytes
FULL = ROWS * COLS * 4


class Weights(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)


class PatternWorkload(Workload, name="pattern_rows", family="testing"):
    """out = x * w with x [rows, cols] (no grad) and w [cols] (a parameter)."""

    params = {"rows": Param(ROWS, low=1), "cols": Param(COLS, low=1)}
    samples_param = "rows"
    check_params = {"rows": 5, "cols": 3}

    def build(self, device, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        r, c = self.config["rows"], self.config["cols"]
        x = torch.randn(r, c, generator=g, dtype=torch.float64).to(device, dtype)
        w = torch.randn(c, generator=g, dtype=torch.float64).to(device, dtype)
        gy = torch.randn(r, c, generator=g, dtype=torch.float64).to(device, dtype)
        return Problem(model=Weights(w), inputs={"x": x}, grad_output=gy)

    def reference(self, problem):
        return problem.inputs["x"] * problem.model.w


class BroadcastMul(Technique, name="pattern_broadcast_mul"):
    """out = x * w.  Backward: grad_w = (g * x).sum(0): a [rows, cols] temporary, then [cols]."""

    workload = PatternWorkload

    def forward(self, problem):
        return problem.inputs["x"] * problem.model.w


class TwoBuffers(Technique, name="pattern_two_buffers"):
    """Inference pattern: allocate [rows, cols], then [rows/2, cols], free the first, return x*w."""

    workload = PatternWorkload

    def forward(self, problem):
        x = problem.inputs["x"]
        a = torch.ones_like(x)                 # FULL
        b = torch.ones(x.shape[0] // 2, x.shape[1], dtype=x.dtype)  # FULL / 2
        del a
        out = x * problem.model.w              # FULL
        del b
        return out


class Raises(Technique, name="pattern_raises"):
    """Fails with a ValueError inside forward."""

    workload = PatternWorkload

    def forward(self, problem):
        raise RuntimeError("deliberate failure in forward")


class OutOfMemory(Technique, name="pattern_oom"):
    """Raises the allocator's out-of-memory error."""

    workload = PatternWorkload

    def forward(self, problem):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 PiB (deliberate)")


class Crashes(Technique, name="pattern_crash"):
    """Kills its own process (as a segfault in a kernel would)."""

    workload = PatternWorkload

    def forward(self, problem):
        os._exit(3)


class Hangs(Technique, name="pattern_hang"):
    """Stops its own process so that only the parent's timeout can end it."""

    workload = PatternWorkload

    def forward(self, problem):
        os.kill(os.getpid(), signal.SIGSTOP)
        return problem.inputs["x"] * problem.model.w


class Huge(Technique, name="pattern_huge"):
    """Asks the real allocator for 256 TiB: an actual out-of-memory on CPU and CUDA."""

    workload = PatternWorkload

    def forward(self, problem):
        x = problem.inputs["x"]
        big = torch.empty(1 << 48, dtype=torch.uint8, device=x.device)
        return x * problem.model.w + big[:1].float()
