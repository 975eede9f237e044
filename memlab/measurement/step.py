"""One training or inference step of a technique, with phase markers for the profiler.

``train``: forward, backward from the chosen ``loss``, the chosen ``optimizer``'s ``step()``, then
every leaf's ``.grad`` set to None (``grads="none"``, the default).  So between steps only the
baseline (parameters, inputs, upstream gradient, optimizer state) is live, and a step's peak covers
activations, gradients and temporaries.  The gradient options (:class:`memlab.core.setting.Setting`):
    ``accumulate=K``: ``K`` forward/backward passes over micro-batches of ``1/K`` of the batch, their
        gradients accumulated into ``.grad``, then one optimizer step (NOTE [ micro-batches of a
        problem ] in :mod:`memlab.measurement.micro_batches`): from the second micro-batch on, every
        backward adds into a ``.grad`` that already exists.
    ``grads="zero"``: after the optimizer step the parameters' ``.grad`` are zeroed in place
        (``zero_grad(set_to_none=False)``), so they are live between steps, part of the baseline,
        and every backward adds into them; a grad-requiring input's ``.grad`` is still set to None
        (a loop's inputs are new every step).
``infer``: forward under ``torch.no_grad()``; the output is dropped at the end of the step.

Losses (:data:`LOSSES`):
    ``given``: ``output.backward(problem.grad_output)``, the workload's seeded upstream gradient,
        preallocated and part of the baseline (memlab's figures before the loss choice existed).
    ``mse``: ``mse_loss(output.float(), zeros).backward()``, the mean squared error against a zero
        target (one zero broadcast, no target tensor): the loss's elementwise square (forward) and
        the upstream gradient (backward) are allocated inside the step, as in a user's training
        loop; the measurement then drops ``problem.grad_output``.  (ATen's ``mse_loss`` returns the
        scalar loss in the storage of the elementwise squares, so one output-sized temporary
        lives until backward ends: measured, as a user's loop would pay it.)
Optimizers (:data:`OPTIMIZERS`), all ``foreach=False`` (one parameter at a time, deterministic):
    ``sgd`` (no state), ``sgd_momentum`` (momentum 0.9: one buffer per parameter), ``adam`` and
    ``adamw`` (``exp_avg`` and ``exp_avg_sq`` per parameter and a scalar ``step`` tensor),
    ``adafactor`` (``torch.optim.Adafactor``, Shazeer & Stern 2018: per parameter of two or more
    dimensions a row and a column second moment, the parameter's shape with its last, resp.
    second-to-last, dimension 1; per vector a full one; and a scalar float32 ``step`` tensor), created
    at the first step.  A technique may supply its own (:meth:`memlab.Technique.make_optimizer`).
    Each also as ``<name>_in_backward``: every parameter stepped in backward as soon as its gradient is
    accumulated, the gradient freed at once (:class:`~memlab.measurement.in_backward.InBackward`,
    NOTE [ optimizer in backward ] in :mod:`memlab.core.setting`).
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch.profiler import record_function

from ..core.setting import (DEFAULTS, GRADS, LOSSES, MODES, OPTIMIZERS, STEPPED_OPTIMIZERS, check_choice,
                            check_in_backward, in_backward)
from ..technique import Technique
from ..workload import Problem
from .in_backward import InBackward
from .micro_batches import micro_problems

__all__ = ["make_step", "make_optimizer", "step_optimizer", "MODES", "PHASES", "OPTIMIZERS", "LOSSES", "OptimizerName", "LossName",
           "check_choice"]

PHASES = ("forward", "backward", "optimizer")
OptimizerName = str  # one of OPTIMIZERS (memlab.core.setting)
LossName = str  # one of LOSSES (memlab.core.setting)
LEARNING_RATE = 1e-4
MOMENTUM = 0.9


def make_optimizer(name: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """The optimizer ``name`` (one of :data:`STEPPED_OPTIMIZERS`) over ``params``, learning rate 1e-4."""
    check_choice("optimizer", name, STEPPED_OPTIMIZERS)
    if name == "sgd":
        return torch.optim.SGD(params, lr=LEARNING_RATE, foreach=False)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=LEARNING_RATE, momentum=MOMENTUM, foreach=False)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=LEARNING_RATE, foreach=False)
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, lr=LEARNING_RATE, foreach=False)


def step_optimizer(technique: Technique, choice: OptimizerName | torch.optim.Optimizer,
                   params: list[torch.Tensor]) -> torch.optim.Optimizer | InBackward | None:
    """The optimizer a training step over ``params`` uses: ``choice`` itself when it is an instance;
    for a name (one of :data:`OPTIMIZERS`) the technique's own (:meth:`~memlab.Technique.make_optimizer`,
    asked with the name) or memlab's; for an ``_in_backward`` name an :class:`InBackward` with one such
    optimizer per parameter (NOTE [ optimizer in backward ]).  None without parameters."""
    if isinstance(choice, torch.optim.Optimizer):
        return choice
    check_choice("optimizer", choice, OPTIMIZERS)
    if not params:
        return None
    built, stepped_in_backward = in_backward(choice)
    if stepped_in_backward:
        return InBackward(params, [_one_optimizer(technique, choice, built, [p]) for p in params])
    return _one_optimizer(technique, choice, built, params)


def _one_optimizer(technique: Technique, choice: str, built: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    own = getattr(technique, "make_optimizer", None)
    opt = own(params, choice) if own is not None else None
    return opt if opt is not None else make_optimizer(built, params)


def make_step(technique: Technique, problem: Problem, mode: str, *,
              optimizer: OptimizerName | torch.optim.Optimizer = DEFAULTS.optimizer,
              loss: LossName = DEFAULTS.loss, accumulate: int = DEFAULTS.accumulate, grads: str = DEFAULTS.grads,
              capture=None) -> tuple[Callable[..., None], torch.optim.Optimizer | InBackward | None]:
    """Return ``(step, optimizer)``; ``step()`` runs one step and keeps nothing alive (with
    ``grads="zero"``: nothing but the parameters' zeroed ``.grad``).

    Args:
        optimizer: one of :data:`OPTIMIZERS` (the technique's :meth:`~memlab.Technique.make_optimizer`
            may supply its own instead: :func:`step_optimizer`), or an optimizer instance to share (a
            reference step timed beside the technique's uses the technique's optimizer).  An
            ``_in_backward`` name refuses ``accumulate`` > 1 and ``grads="zero"`` (ValueError:
            NOTE [ optimizer in backward ]); its optimizer is an :class:`InBackward`.
        loss: one of :data:`LOSSES`.
        accumulate: micro-batches per optimizer step (a ValueError naming the batch when it does
            not split: NOTE [ micro-batches of a problem ]).
        grads: ``none`` or ``zero``: what the gradients become after the optimizer step.

    ``step(probe)`` with a :class:`~memlab.measurement.categories.Probe` marks saved tensors, gradients
    and the upstream gradient for the memory categories (NOTE [ memory categories ]).

    ``capture``: a :class:`~memlab.measurement.step_check.StepLog` (or None) that may keep the leaves'
    values before a training step, samples each step's output (each micro-batch's: ``output``, then
    ``output:1``...), every gradient before the optimizer (accumulated over the micro-batches) and
    every parameter after it, then closes the step (NOTE [ every step checked ]); it allocates
    nothing in PyTorch's CPU allocator.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not valid; valid modes: {', '.join(MODES)}")
    check_choice("loss", loss, LOSSES)
    check_choice("grads", grads, GRADS)
    if mode == "infer":

        def infer_step(probe=None) -> None:
            with torch.no_grad(), record_function("memlab::forward"):
                out = technique.forward(problem)
                if capture is not None:
                    capture.output(out)
                    capture.next_step()
                del out

        return infer_step, None

    if isinstance(optimizer, str):
        check_choice("optimizer", optimizer, OPTIMIZERS)
        check_in_backward(optimizer, accumulate, grads)
    opt = step_optimizer(technique, optimizer, [p for p in problem.model.parameters() if p.requires_grad])
    parts = micro_problems(technique, problem, accumulate)
    return _train_step(technique, problem, parts, loss, opt, grads, capture), opt


def _train_step(technique: Technique, problem: Problem, parts: list[Problem], loss: str,
                opt: torch.optim.Optimizer | InBackward | None, grads: str, capture) -> Callable[..., None]:
    """The training step over ``parts`` (the micro-batch problems; ``[problem]`` without accumulation)."""
    leaves = problem.leaves()
    kept = len([p for p in problem.model.parameters() if p.requires_grad]) if grads == "zero" else 0
    hooked = opt.hooked if isinstance(opt, InBackward) else None

    def train_step(probe=None) -> None:
        if capture is not None:
            capture.begin(leaves)
        with hooked(_gradient_sampler(capture)) if hooked is not None else contextlib.nullcontext():
            for k, part in enumerate(parts):
                _micro_step(technique, part, k, len(parts), loss, probe, capture)
        if capture is not None:
            _sample_gradients(capture, leaves, opt)
        with record_function("memlab::optimizer"):
            if opt is not None:
                opt.step()
            if capture is not None:
                capture.parameters(leaves)
                capture.next_step()
            for i, t in enumerate(leaves):
                if i < kept and t.grad is not None:
                    t.grad.zero_()  # zero_grad(set_to_none=False)
                else:
                    t.grad = None

    return train_step


def _micro_step(technique: Technique, part: Problem, k: int, parts: int, loss: str, probe, capture) -> None:
    """Forward and backward of micro-batch ``k`` of ``parts``; gradients accumulate into ``.grad``.
    A scalar output or loss is divided by ``parts`` (NOTE [ micro-batches of a problem ])."""
    with record_function("memlab::forward"), _saving(probe):
        out = technique.forward(part)
        lossval = _mse_to_zero(out) if loss == "mse" else None
        if parts > 1 and lossval is not None:
            lossval = lossval / parts
        elif parts > 1 and isinstance(out, torch.Tensor) and out.dim() == 0:
            out = out / parts
    with record_function("memlab::backward"), _saving(probe):
        if probe is not None:
            probe.upstream(out)
        if lossval is None:
            out.backward(part.grad_output if loss == "given" else None)
        else:
            lossval.backward()
        if capture is not None:
            capture.record("output" if k == 0 else f"output:{k}", out)
        del out, lossval
        if probe is not None:
            probe.gradients()


def _gradient_sampler(capture) -> Callable[[int, torch.Tensor], None] | None:
    """``record(i, grad)`` for an :class:`InBackward` hook: leaf ``i``'s gradient sampled as
    ``capture.gradients`` names it, before the update frees it."""
    if capture is None:
        return None
    return lambda i, grad: capture.record(f"grad:{i}", grad)


def _sample_gradients(capture, leaves: list[torch.Tensor], opt) -> None:
    """Every leaf's gradient before the optimizer; with an :class:`InBackward`, those its hooks did not
    sample already (inputs, gradients set by hand)."""
    if not isinstance(opt, InBackward):
        capture.gradients(leaves)
        return
    for i, leaf in enumerate(leaves):
        if i not in opt.stepped:
            capture.record(f"grad:{i}", leaf.grad)


def _mse_to_zero(out: torch.Tensor) -> torch.Tensor:
    """``mse_loss(out.float(), 0)``: the target is one zero broadcast (a stride-0 view, no copy)."""
    out = out.float()
    return torch.nn.functional.mse_loss(out, out.new_zeros(()).expand(out.shape))


def _saving(probe):
    return probe.saving() if probe is not None else contextlib.nullcontext()


def tensors_bytes(objects) -> int:
    """Bytes of the distinct storages behind the tensors found in ``objects`` (nested containers).

    Used for the allocated baseline: storages shared by views are counted once.
    """
    seen: dict[tuple, int] = {}

    def visit(o) -> None:
        if isinstance(o, torch.Tensor):
            s = o.untyped_storage()
            seen[(o.device.type, o.device.index, s.data_ptr())] = s.nbytes()
        elif isinstance(o, dict):
            for v in o.values():
                visit(v)
        elif isinstance(o, (list, tuple, set)):
            for v in o:
                visit(v)

    visit(objects)
    return sum(seen.values())


def baseline_objects(problem: Problem, optimizer: torch.optim.Optimizer | None) -> list:
    """Everything a step keeps alive between steps: parameters, buffers, inputs, grad_output, optimizer
    state, and the gradients a step leaves allocated (``grads="zero"``)."""
    objs: list = [list(problem.model.state_dict(keep_vars=True).values()), problem.inputs, problem.grad_output,
                  [t.grad for t in problem.leaves() if t.grad is not None]]
    if optimizer is not None:
        objs.append([dict(s) for s in optimizer.state.values()])
    return objs
