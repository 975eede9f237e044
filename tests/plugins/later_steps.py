"""Test plug-in: techniques that are right on their first step and wrong, or leaking, afterwards;
and one whose own optimizer makes a wrong update.  All solve the chained matmul workload
``y = (x @ w1) @ w2``; each is correct on a fresh problem, so the float64 check passes them."""
import torch

from memlab import Technique
from memlab.families.chunking.workload import ChainedMatmul

LEAK_BYTES = 64 * 1024          # one float32 tensor of 16 Ki elements, kept at every other step
_kept: list[torch.Tensor] = []


def _plain(problem, w1=None):
    m = problem.model
    return (problem.inputs["x"] @ (m.w1 if w1 is None else w1)) @ m.w2


class _LaterSteps(Technique):
    workload = ChainedMatmul
    check_params = {"n": 37, "d": 8, "hidden": 16}


class StaleWeightCache(_LaterSteps, name="later_stale_weights"):
    """Caches ``w1``'s values at its first step and keeps computing with them (gradients still flow
    to ``w1``): right once, then one optimizer update behind at every step."""

    def forward(self, problem):
        m = problem.model
        stale = problem.extra.setdefault("w1_seen", m.w1.detach().clone())
        return _plain(problem, m.w1 + (stale - m.w1.detach()))


class DoubledAfterFirst(_LaterSteps, name="later_doubled"):
    """Right on a problem's first step, doubled output from the second on (a buffer reused wrongly)."""

    def forward(self, problem):
        calls = problem.extra["calls"] = problem.extra.get("calls", 0) + 1
        y = _plain(problem)
        return y if calls == 1 else 2 * y


class AlternatingLeak(_LaterSteps, name="later_alternating_leak"):
    """Right every time, but keeps a tensor alive at every other step: live bytes 0, 1, 1, 2, 2, ..."""

    def forward(self, problem):
        calls = problem.extra["calls"] = problem.extra.get("calls", 0) + 1
        if calls % 2 == 0:
            _kept.append(torch.zeros(LEAK_BYTES // 4))
        return _plain(problem)


_UPDATES = {"count": 0}


class _SharedScheduleSGD(torch.optim.Optimizer):
    """SGD whose learning rate follows a schedule counted in a module global: every instance in the
    process advances it, so the update depends on what other optimizers did (state shared between
    instances), not only on this one's parameters, gradients and state."""

    def __init__(self, params, lr=1e-4):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        _UPDATES["count"] += 1
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"] * _UPDATES["count"])


class WrongOwnOptimizer(_LaterSteps, name="later_wrong_optimizer"):
    """Computes the plain product, but supplies an optimizer whose update depends on a global count."""

    def forward(self, problem):
        return _plain(problem)

    def make_optimizer(self, params, choice):
        return _SharedScheduleSGD(params)


class WrongFromFifth(_LaterSteps, name="later_wrong_from_fifth"):
    """Right on a problem's first four steps, an output off by 1% from the fifth on."""

    def forward(self, problem):
        calls = problem.extra["calls"] = problem.extra.get("calls", 0) + 1
        y = _plain(problem)
        return y if calls < 5 else 1.01 * y
