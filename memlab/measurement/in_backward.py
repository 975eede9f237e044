"""An optimizer stepped in backward: each parameter updated in its post-accumulate-grad hook, its
gradient freed at once (NOTE [ optimizer in backward ] in :mod:`memlab.core.setting`).

PyTorch's tutorial "How to save memory by fusing the optimizer step into the backward pass" builds one
optimizer per parameter and registers, on each, a ``register_post_accumulate_grad_hook`` that calls
that optimizer's ``step()`` and frees the gradient.  :class:`InBackward` is that, for a training step
(:func:`memlab.measurement.step.make_step`):

* :meth:`InBackward.hooked` registers the hooks for one step and removes them after it.  They are
  registered at the start of each step, so the memory categories' own gradient hook (a
  :class:`~memlab.measurement.categories.Probe`, entered before the steps) runs first and marks the
  gradient as a gradient before it is freed: hooks run in the order they were registered.
* a parameter whose gradient never passes through autograd's ``AccumulateGrad`` (a technique that
  writes ``.grad`` itself) fires no hook: :meth:`InBackward.step`, called where the optimizer
  would step after backward, steps and frees those.  A hook fired with no gradient does nothing: an
  ``AccumulateGrad`` that received none still runs its hooks (the reversible stack's Function returns
  None for the parameters whose gradients it has already put into ``.grad`` in a nested backward,
  NOTE [ gradients into .grad block by block ], so each of its parameters fires twice).
* ``state``: every parameter's optimizer state, one mapping, as ``torch.optim.Optimizer.state`` is
  (the ``optimizer_state`` category and the allocated baseline read it).

Each parameter's update is the one its optimizer gives it after backward (every optimizer here
updates parameter by parameter, ``foreach=False``), with the same gradient: only when it runs changes.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

__all__ = ["InBackward"]


class InBackward:
    """One optimizer per parameter (``optimizers[i]`` over ``params[i]`` alone), stepped in backward.

    ``record(i, grad)``, when given, is called in the hook with the parameter's index and its
    gradient before the update (a :class:`~memlab.measurement.step_check.StepLog` samples it there:
    the gradient is gone once backward ends)."""

    def __init__(self, params: list[torch.Tensor], optimizers: list[torch.optim.Optimizer]):
        if len(params) != len(optimizers):
            raise ValueError(f"{len(params)} parameters but {len(optimizers)} optimizers: expected one per parameter")
        self.params, self.optimizers = list(params), list(optimizers)
        self.stepped: set[int] = set()  # indices stepped in backward during the current step

    @property
    def state(self) -> dict[torch.Tensor, dict]:
        """``{parameter: its optimizer state}`` over every parameter (tensors and step counters)."""
        return {p: s for opt in self.optimizers for p, s in opt.state.items()}

    def _hook(self, i: int, record: Callable[[int, torch.Tensor], None] | None):
        def hook(param: torch.Tensor) -> None:
            if param.grad is None:  # an AccumulateGrad that received no gradient (module doc) runs it too
                return
            if record is not None:
                record(i, param.grad)
            self.optimizers[i].step()
            param.grad = None
            self.stepped.add(i)

        return hook

    @contextlib.contextmanager
    def hooked(self, record: Callable[[int, torch.Tensor], None] | None = None) -> Iterator[None]:
        """The hooks, registered for the ``with`` body (one training step), removed after it."""
        self.stepped = set()
        handles = [p.register_post_accumulate_grad_hook(self._hook(i, record)) for i, p in enumerate(self.params)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def step(self) -> None:
        """Step and free every parameter the hooks did not reach that holds a gradient (one set by hand)."""
        for i, p in enumerate(self.params):
            if i not in self.stepped and p.grad is not None:
                self.optimizers[i].step()
                p.grad = None
