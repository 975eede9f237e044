"""Checking a technique against its workload's reference: outputs, every gradient, and side effects.

A technique is wrong when its output or any gradient differs from the reference beyond the
tolerance, when it produces non-finite values where the reference is finite, when its output has
the wrong shape or type, or when it changes its inputs or parameters (a forward that zeroes its
weights, or edits ``x`` in place, makes the reference computed afterwards agree with it: only a
snapshot taken before the step catches that).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.setting import DEFAULTS
from ..technique import Technique
from .reference_cache import ReferenceCache

__all__ = ["Verification", "verify_technique"]


@dataclass(frozen=True)
class Verification:
    """The outcome of one reference check.

    Attributes:
        errors: max absolute error per compared tensor (``output``, ``grad:<name>``); tensors that
            could not be compared (shape, non-finite values) are absent and named in ``reason``.
        rel_errors: per tensor, max absolute error divided by the reference's max magnitude
            (a normwise relative error: stable where the reference has zeros).
        rtol, atol: the tolerance (``|a - b| <= atol + rtol * |b|`` elementwise).
        dtype: the dtype the check ran in (``float64``...).
        reason: why the technique is wrong (one line), or None when every tensor is within tolerance.
        structural: True when ``reason`` is not a mere tolerance excess: a wrong shape or type,
            non-finite values, or a changed input/parameter.  Wrong in any dtype.
    """

    errors: dict[str, float]
    rtol: float
    atol: float
    ok: bool
    rel_errors: dict[str, float] | None = None
    dtype: str = "float64"
    reason: str | None = None
    structural: bool = False
    not_compared: tuple[str, ...] = ()

    @property
    def max_abs_error(self) -> float | None:
        """Largest absolute error over compared tensors; None when some tensor could not be compared
        (wrong shape or type, non-finite values: ``not_compared`` names them, ``reason`` says why)."""
        if self.not_compared:
            return None
        return max(self.errors.values(), default=0.0)

    @property
    def max_rel_error(self) -> float | None:
        if self.not_compared:
            return None
        return max((self.rel_errors or {}).values(), default=0.0)

    @property
    def worst(self) -> str:
        """Name of the tensor with the largest absolute error (``-`` when none was compared)."""
        return max(self.errors, key=self.errors.get) if self.errors else "-"

    def line(self) -> str:
        """One line: the errors and the tolerance, then the reason when wrong."""
        err = "-" if self.max_abs_error is None else f"{self.max_abs_error:.2e}"
        rel = "-" if self.max_rel_error is None else f"{self.max_rel_error:.2e}"
        text = (f"{self.dtype}: max |error| {err} ({self.worst}), relative {rel}; "
                f"tolerance rtol={self.rtol:g} atol={self.atol:g}")
        return text if self.reason is None else f"{text}; {self.reason}"


class _Checker:
    """Accumulates per-tensor comparisons and the first reason a technique is wrong."""

    def __init__(self, rtol: float, atol: float):
        self.rtol, self.atol = rtol, atol
        self.errors: dict[str, float] = {}
        self.rel: dict[str, float] = {}
        self.reasons: list[str] = []
        self.structural = False
        self.not_compared: list[str] = []

    def fail(self, reason: str, structural: bool = True) -> None:
        self.reasons.append(reason)
        self.structural = self.structural or structural

    def compare(self, name: str, got, want) -> None:
        if want is None and got is None:
            return
        if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
            return self._uncomparable(name, f"{name} is {_kind(got)} but the reference gives {_kind(want)}")
        if got.shape != want.shape:
            return self._uncomparable(name, f"{name} has shape {tuple(got.shape)} but the reference {tuple(want.shape)}")
        g, w = got.detach().double(), want.detach().double()
        if not bool(torch.isfinite(w).all()):
            bad_ref = int((~torch.isfinite(w)).sum())
            return self._uncomparable(name, f"the reference {name} has {bad_ref} non-finite values (workload or dtype overflow)")
        if not bool(torch.isfinite(g).all()):
            bad = int((~torch.isfinite(g)).sum())
            return self._uncomparable(name, f"non-finite values in {name} ({bad} of {g.numel()} NaN/inf; the reference is finite)")
        if not g.numel():
            self.errors[name], self.rel[name] = 0.0, 0.0
            return
        diff = (g - w).abs()
        err = float(diff.max())
        allowed = w.abs()
        scale = float(allowed.max())
        self.errors[name] = err
        self.rel[name] = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
        # torch.allclose's test for finite values, |a - b| <= atol + rtol * |b|, on the difference above
        if not bool((diff <= allowed.mul_(self.rtol).add_(self.atol)).all()):
            self.fail(f"{name} differs from the reference by up to {err:.3g} (outside tolerance)", structural=False)

    def _uncomparable(self, name: str, reason: str) -> None:
        self.not_compared.append(name)
        self.fail(reason)

    def result(self, dtype: str) -> Verification:
        reason = "; ".join(self.reasons[:3]) if self.reasons else None
        return Verification(dict(self.errors), self.rtol, self.atol, not self.reasons, dict(self.rel), dtype,
                            reason, self.structural, tuple(self.not_compared))


def _kind(x) -> str:
    return f"a tensor of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__


def _snapshot(problem) -> dict[str, tuple[str, torch.Tensor, torch.Tensor]]:
    """``label -> (live tensor, clone)`` for every input and parameter (what a step must not change)."""
    snap = {}
    for n, t in problem.inputs.items():
        snap[f"input {n!r}"] = (t, t.detach().clone())
    for n, p in problem.model.named_parameters():
        snap[f"parameter {n!r}"] = (p, p.detach().clone())
    return snap


def _changed(snap, *, exact: bool, rtol: float, atol: float, skip_freed: bool) -> list[str]:
    """Labels whose tensor no longer equals its snapshot.

    ``exact`` compares bit for bit (after forward nothing may change); otherwise within tolerance
    (after backward, a reversible peer may have rebuilt an input it freed, with rounding drift).
    Tensors whose storage was freed (a MemCNN-style technique restores them in backward) are
    skipped when ``skip_freed``, and reported as freed otherwise.
    """
    out = []
    for label, (live, before) in snap.items():
        if live.untyped_storage().nbytes() < before.numel() * before.element_size():
            if not skip_freed:
                out.append(f"{label} (its storage was freed and not restored)")
            continue
        now = live.detach()
        # bit for bit first (one pass, and what almost every technique leaves); then within tolerance
        same = torch.equal(now, before) or (not exact and torch.allclose(now.double(), before.double(), rtol=rtol,
                                                                           atol=atol, equal_nan=True))
        if not same:
            out.append(label)
    return out


def verify_technique(technique: Technique, device: torch.device, dtype: torch.dtype, *,
                     mode: str = DEFAULTS.mode, seed: int = DEFAULTS.seed,
                     cache: ReferenceCache | None = None) -> Verification:
    """Compare ``technique.forward`` with the workload reference on one seeded problem.

    In ``train`` mode the gradients of every parameter and grad-requiring input (the ``.grad`` that
    ``output.backward(problem.grad_output)`` leaves, as in a training step) are compared too; in
    ``infer`` mode both run under ``no_grad``.  The reference runs first, on the problem as built
    (its ``.grad`` cleared again), so what the technique does to the problem cannot move it.
    Inputs and parameters are snapshotted first: any change by the forward (bit for bit), or left
    after backward (beyond tolerance), is a failure.  A tensor passes when ``|a - b| <= atol + rtol
    * |b|`` elementwise (``torch.allclose``), with ``(rtol, atol) = technique.tolerance(dtype)``.
    Exceptions from the technique propagate.  ``cache``: where the reference's output and gradients
    are shared with the other checks of a sweep (:mod:`memlab.measurement.reference_cache`).
    """
    dtype_name = str(dtype).replace("torch.", "")
    rtol, atol = technique.tolerance(dtype_name)
    problem = technique.build(device, dtype, seed)
    check = _Checker(rtol, atol)
    snap = _snapshot(problem)
    ident = (dtype, device, mode, seed)

    if mode == "infer":
        with torch.no_grad():
            ref, _ = _reference(technique, problem, [], cache, ident)
            out = technique.forward(problem)
            _report_changes(check, snap, "forward", exact=True)
        check.compare("output", out, ref)
        return check.result(dtype_name)

    names = [f"grad:{n}" for n, p in problem.model.named_parameters() if p.requires_grad]
    names += [f"grad:{n}" for n, t in problem.inputs.items() if t.requires_grad]
    leaves = problem.leaves()
    ref, ref_grads = _reference(technique, problem, leaves, cache, ident)
    ref = ref.detach()
    out = technique.forward(problem)
    _report_changes(check, snap, "forward", exact=True)
    if not isinstance(out, torch.Tensor) or (leaves and not out.requires_grad):
        check.compare("output", out, ref)
        if isinstance(out, torch.Tensor):
            check.fail("output does not require grad: no gradient reaches the parameters or inputs")
        return check.result(dtype_name)
    if out.shape != problem.grad_output.shape:
        check.compare("output", out, ref)
        return check.result(dtype_name)
    grads = _step_grads(out, leaves, problem.grad_output)
    _report_changes(check, snap, "backward", exact=False)
    check.compare("output", out.detach(), ref)
    for name, g, r in zip(names, grads, ref_grads):
        check.compare(name, g, r)
    return check.result(dtype_name)


def _reference(technique: Technique, problem, leaves: list[torch.Tensor], cache: ReferenceCache | None,
               ident: tuple) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """The workload reference's output and the leaves' gradients (``[]`` without leaves) on the
    problem as built: from ``cache`` when it holds them, else computed (and stored there)."""
    key = cache.key(technique, *ident) if cache is not None else None
    found = cache.load(key, ident[1], len(leaves)) if key else None
    if found is not None:
        return found
    ref = technique.reference(problem)
    grads = _step_grads(ref, leaves, problem.grad_output) if leaves else []
    if key:
        cache.store(key, ref, grads)
    return ref, grads


def _report_changes(check: _Checker, snap, phase: str, *, exact: bool) -> None:
    changed = _changed(snap, exact=exact, rtol=check.rtol, atol=check.atol, skip_freed=phase == "forward")
    if changed:
        check.fail(f"{phase} modified {', '.join(changed[:3])}" + (f" and {len(changed) - 3} more" if len(changed) > 3 else ""))


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
