"""``LeakyCtxOutput``: a correct reversible stack that leaks (the classic ``ctx.y = y`` reference cycle).

Not registered (never listed or swept): the reversible-memory-accounting reproduction measures it
to show what memlab's leak check reports, and the tests check that the check catches it.  The class
is built on first access, so importing this module does not import torch.
"""
from __future__ import annotations

__all__ = ["LeakyCtxOutput"]


def _leaky_classes():
    import torch  # deferred: torch line

    from memlab.technique import Technique  # deferred: torch line
    from ..workload import ResidualStack  # deferred: torch line

    def couple(f, g, x1, x2):
        y1 = x1 + f(x2)
        return y1, x2 + g(y1)

    class _LeakyBlockFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, f, g, *params):
            ctx.f, ctx.g = f, g
            ctx.save_for_backward(x)
            y = torch.cat(couple(f, g, *x.detach().chunk(2, dim=1)), dim=1)
            ctx.y = y  # the bug: output -> grad_fn (this ctx) -> ctx.y -> output, freed only by gc
            return y

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            params = [*ctx.f.parameters(), *ctx.g.parameters()]
            with torch.enable_grad():
                xd = x.detach().requires_grad_()
                y = torch.cat(couple(ctx.f, ctx.g, *xd.view_as(xd).chunk(2, dim=1)), dim=1)
            dx, *dps = torch.autograd.grad(y, [xd, *params], dy)
            return (dx, None, None, *dps)

    class LeakyCtxOutput(Technique):  # no name=: never registered, never swept
        """A per-block Function that stores its output as ``ctx.y = y`` (the classic reference cycle).

        Correct values and gradients, but each step leaves every block's output [B, 2·C] alive until
        Python's cycle collector runs: ``allocated_after_step_bytes`` grows by about depth x
        [B, 2·C] bytes per step.  Measure it in-process: ``memlab.measure(LeakyCtxOutput,
        isolate=False, iterations=10, ...)``.
        """

        name = "leaky_ctx_output"
        workload = ResidualStack

        def forward(self, problem):
            x = problem.inputs["x"]
            for f, g in zip(problem.model.f, problem.model.g):
                x = _LeakyBlockFn.apply(x, f, g, *f.parameters(), *g.parameters())
            return x

    return LeakyCtxOutput


def __getattr__(name: str):
    # LeakyCtxOutput is built on first use so importing this module does not import torch
    if name == "LeakyCtxOutput":
        cls = _leaky_classes()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
