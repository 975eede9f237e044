"""Checking a technique against its workload's reference: outputs and every gradient."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..technique import Technique

__all__ = ["Verification", "verify_technique"]


@dataclass(frozen=True)
class Verification:
    """Max absolute error per tensor (``output``, ``grad:<name>``), the tolerance and the verdict."""

    errors: dict[str, float]
    rtol: float
    atol: float
    ok: bool

    @property
    def max_abs_error(self) -> float:
        return max(self.errors.values(), default=0.0)


def verify_technique(technique: Technique, device: torch.device, dtype: torch.dtype, *,
                     mode: str = "train", seed: int = 0) -> Verification:
    """Compare ``technique.forward`` with the workload reference on one seeded problem.

    In ``train`` mode the gradients of every parameter and grad-requiring input (the ``.grad`` that
    ``output.backward(problem.grad_output)`` leaves, as in a training step) are compared too; in
    ``infer`` mode both run under ``no_grad``.
    A tensor passes when ``|a - b| <= atol + rtol * |b|`` elementwise (``torch.allclose``).
    """
    dtype_name = str(dtype).replace("torch.", "")
    rtol, atol = technique.workload.tolerances.get(dtype_name, (1e-3, 1e-3))
    problem = technique.build(device, dtype, seed)
    errors: dict[str, float] = {}
    ok = True

    def compare(name: str, got: torch.Tensor | None, want: torch.Tensor | None) -> None:
        nonlocal ok
        if got is None or want is None:
            errors[name] = float("inf") if (got is None) != (want is None) else 0.0
            ok = ok and errors[name] == 0.0
            return
        if got.shape != want.shape:
            errors[name] = float("inf")
            ok = False
            return
        g, w = got.detach().double(), want.detach().double()
        errors[name] = float((g - w).abs().max()) if g.numel() else 0.0
        ok = ok and bool(torch.allclose(g, w, rtol=rtol, atol=atol))

    if mode == "infer":
        with torch.no_grad():
            out = technique.forward(problem)
            ref = technique.reference(problem)
        compare("output", out, ref)
        return Verification(errors, rtol, atol, ok)

    names = [f"grad:{n}" for n, p in problem.model.named_parameters() if p.requires_grad]
    names += [f"grad:{n}" for n, t in problem.inputs.items() if t.requires_grad]
    leaves = problem.leaves()
    out = technique.forward(problem)
    grads = _step_grads(out, leaves, problem.grad_output)
    out = out.detach()
    ref = technique.reference(problem)
    ref_grads = _step_grads(ref, leaves, problem.grad_output)
    compare("output", out, ref.detach())
    for name, g, r in zip(names, grads, ref_grads):
        compare(name, g, r)
    return Verification(errors, rtol, atol, ok)


def _step_grads(out: torch.Tensor, leaves: list[torch.Tensor], grad_output: torch.Tensor) -> list[torch.Tensor | None]:
    """The leaves' gradients as a training step leaves them: ``out.backward(grad_output)``, then ``.grad``.

    Not ``torch.autograd.grad``: a technique that writes ``.grad`` itself (MemCNN sets an input's
    ``.grad`` by hand and so doubles a leaf input's gradient; RevLib accumulates parameter gradients
    inside its backward) must be checked on what training actually sees, and MemCNN refuses
    ``autograd.grad`` altogether.  ``.grad`` is None before and after.
    """
    if not leaves:
        return []
    for t in leaves:
        t.grad = None
    out.backward(grad_output)
    grads = [t.grad for t in leaves]
    for t in leaves:
        t.grad = None
    return grads
