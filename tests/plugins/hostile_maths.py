"""Test plug-in: techniques that compute the wrong thing, or hold memory they should not, each in a
way that a check comparing only the output with a reference computed afterwards would miss or
mis-report.  All solve the chained matmul workload ``y = (x @ w1) @ w2``."""
import torch

from memlab import Technique
from memlab.families.chunking.workload import ChainedMatmul

LEAK_BYTES = 4 * 1024 * 1024     # one float32 tensor of 1 Mi elements, kept per step
_leaked: list[torch.Tensor] = []


def _plain(problem):
    m = problem.model
    return (problem.inputs["x"] @ m.w1) @ m.w2


class _Hostile(Technique):
    workload = ChainedMatmul
    check_params = {"n": 37, "d": 8, "hidden": 16}


class WrongValues(_Hostile, name="hostile_wrong_values"):
    """Scales the output by 1.01: every output and gradient is off by 1%."""

    def forward(self, problem):
        return _plain(problem) * 1.01


class NaNOutput(_Hostile, name="hostile_nan"):
    """One NaN in the output (and so in every gradient)."""

    def forward(self, problem):
        y = _plain(problem)
        mask = torch.zeros_like(y)
        mask[0, 0] = float("nan")
        return y + mask


class WrongShape(_Hostile, name="hostile_wrong_shape"):
    """Drops the last row of the output."""

    def forward(self, problem):
        return _plain(problem)[:-1]


class ReturnsNone(_Hostile, name="hostile_none"):
    """Computes the output and returns None."""

    def forward(self, problem):
        _plain(problem)
        return None


class Raises(_Hostile, name="hostile_raises"):
    """Raises in forward, with a multi-line message."""

    def forward(self, problem):
        raise ValueError("deliberate failure in forward\nsecond line that must not be printed")


class MutatesInput(_Hostile, name="hostile_mutates_input"):
    """Doubles ``x`` in place, then computes with the doubled ``x`` and halves the result: the
    output is right this step, but the caller's data is changed (a reference computed after the
    forward would agree with it)."""

    def forward(self, problem):
        with torch.no_grad():
            problem.inputs["x"].mul_(2)
        return _plain(problem) / 2


class ZeroesWeights(_Hostile, name="hostile_zero_weights"):
    """Zeroes ``w1`` in forward: output zero, and the reference computed afterwards agrees."""

    def forward(self, problem):
        with torch.no_grad():
            problem.model.w1.zero_()
        return _plain(problem)


class Leaks(_Hostile, name="hostile_leak"):
    """Right output; keeps a 4 MiB tensor alive per step in a module-level list."""

    def forward(self, problem):
        _leaked.append(torch.ones(LEAK_BYTES // 4))
        return _plain(problem)


class FreesInput(_Hostile, name="hostile_frees_input"):
    """Right output and gradients, no leak: frees the caller's ``x`` storage in forward (as MemCNN
    does) and restores it bit for bit when backward starts.  The first free of each measurement
    hits storage allocated before the measured steps."""

    check_params = {"n": 37, "d": 8, "hidden": 16, "x_requires_grad": False}

    def forward(self, problem):
        x, m = problem.inputs["x"], problem.model
        keep = x.detach().clone()
        nbytes = x.untyped_storage().nbytes()
        y = (keep @ m.w1) @ m.w2
        x.untyped_storage().resize_(0)

        def restore(grad):
            with torch.no_grad():
                x.untyped_storage().resize_(nbytes)
                x.copy_(keep)
            return grad

        if y.requires_grad:
            y.register_hook(restore)
        else:
            restore(None)
        return y
