"""Test plug-in: techniques that attack the measurement subprocess itself (signals, a hang with a
grandchild, non-UTF-8 output).  Each runs on a tiny workload, so the subprocess costs little more
than its torch import.  Loaded with memlab.load_plugin."""
import os
import signal
import subprocess
import sys
import threading

import torch

from memlab import Param, Problem, Technique, Workload

#: When set, the hanging technique writes the pid of the process it started to this file.
PIDFILE_ENV = "MEMLAB_TEST_HOSTILE_PIDFILE"


class Scale(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)


class TinyWorkload(Workload, name="hostile_tiny", family="testing"):
    """out = x * w with x [rows, cols] and w [cols] (a parameter); 4 x 3 by default."""

    params = {"rows": Param(4, low=1), "cols": Param(3, low=1)}
    samples_param = "rows"
    check_params = {"rows": 4, "cols": 3}

    def build(self, device, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        r, c = self.config["rows"], self.config["cols"]
        x = torch.randn(r, c, generator=g, dtype=torch.float64).to(device, dtype)
        w = torch.randn(c, generator=g, dtype=torch.float64).to(device, dtype)
        gy = torch.randn(r, c, generator=g, dtype=torch.float64).to(device, dtype)
        return Problem(model=Scale(w), inputs={"x": x}, grad_output=gy)

    def reference(self, problem):
        return problem.inputs["x"] * problem.model.w


class Segfaults(Technique, name="hostile_segfault"):
    """Dies by SIGSEGV in forward, as a bad kernel would."""

    workload = TinyWorkload

    def forward(self, problem):
        os.kill(os.getpid(), signal.SIGSEGV)


class Aborts(Technique, name="hostile_abort"):
    """Calls abort() (SIGABRT), as a failed C++ assertion would."""

    workload = TinyWorkload

    def forward(self, problem):
        os.abort()


class KillsItself(Technique, name="hostile_sigkill"):
    """Dies by SIGKILL with little memory in use: a ``kill -9``, not the out-of-memory killer."""

    workload = TinyWorkload

    def forward(self, problem):
        os.kill(os.getpid(), signal.SIGKILL)


class HangsWithChild(Technique, name="hostile_hang"):
    """Starts a process that waits forever, then waits forever itself (blocked, no CPU used)."""

    workload = TinyWorkload

    def forward(self, problem):
        child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
        pidfile = os.environ.get(PIDFILE_ENV)
        if pidfile:
            with open(pidfile + ".tmp", "w") as f:
                f.write(str(child.pid))
            os.replace(pidfile + ".tmp", pidfile)
        threading.Event().wait()


class BinaryStdout(Technique, name="hostile_binary_stdout"):
    """Correct maths, but writes bytes that are not UTF-8 to stdout and stderr."""

    workload = TinyWorkload

    def forward(self, problem):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            stream.buffer.write(b"\xff\xfe not utf-8 \xc3\x28\n")
            stream.buffer.flush()
        return problem.inputs["x"] * problem.model.w
