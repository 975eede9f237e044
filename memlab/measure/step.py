"""One training or inference step of a technique, with phase markers for the profiler.

``train``: zero-free start (no ``.grad`` is live between steps), forward, ``output.backward(
grad_output)``, ``SGD.step()``, then every leaf's ``.grad`` set to None.  So between steps only the
baseline (parameters, inputs, upstream gradient, optimizer state) is live, and a step's peak covers
activations, gradients and temporaries.
``infer``: forward under ``torch.no_grad()``; the output is dropped at the end of the step.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.profiler import record_function

from ..technique import Technique
from ..workload import Problem

__all__ = ["make_step", "MODES", "PHASES"]

MODES = ("train", "infer")
PHASES = ("forward", "backward", "optimizer")
LEARNING_RATE = 1e-4


def make_step(technique: Technique, problem: Problem, mode: str) -> tuple[Callable[[], None], torch.optim.Optimizer | None]:
    """Return ``(step, optimizer)``; ``step()`` runs one step and keeps nothing alive."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not valid; valid modes: {', '.join(MODES)}")
    if mode == "infer":

        def infer_step() -> None:
            with torch.no_grad(), record_function("memlab::forward"):
                out = technique.forward(problem)
                del out

        return infer_step, None

    params = [p for p in problem.model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=LEARNING_RATE, foreach=False) if params else None
    leaves = problem.leaves()
    grad_output = problem.grad_output

    def train_step() -> None:
        with record_function("memlab::forward"):
            out = technique.forward(problem)
        with record_function("memlab::backward"):
            out.backward(grad_output)
            del out
        with record_function("memlab::optimizer"):
            if optimizer is not None:
                optimizer.step()
            for t in leaves:
                t.grad = None

    return train_step, optimizer


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
    """Everything a step keeps alive between steps: parameters, buffers, inputs, grad_output, optimizer state."""
    objs: list = [list(problem.model.state_dict(keep_vars=True).values()), problem.inputs, problem.grad_output]
    if optimizer is not None:
        objs.append([dict(s) for s in optimizer.state.values()])
    return objs
