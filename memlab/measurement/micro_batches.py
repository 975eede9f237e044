"""A problem's batch as ``K`` micro-batches, for a training step that accumulates gradients.

# NOTE [ micro-batches of a problem ]
``accumulate=K`` takes ``K`` forward/backward passes, each over ``1/K`` of the batch, accumulating
into every leaf's ``.grad``, then one optimizer step.  The batch is the workload's ``samples_param``
(``batch``, or ``n`` rows for the chained matmul): every input tensor and the upstream gradient carry
it as their first dimension, and micro-batch ``k`` is the slice ``[k*B/K, (k+1)*B/K)`` of each, a
view (no copy: the inputs' bytes are those of the whole batch, as built).  A workload without a
``samples_param``, a batch that ``K`` does not divide, or an input whose first dimension is not the
batch is refused with a ValueError naming the batch and ``K`` (:func:`check_accumulate` before
anything runs; :func:`micro_problems` again on the built problem).  A 0-d upstream gradient (a
model file's scalar loss) is not split: each micro-batch's scalar output is scaled by ``1/K`` first,
as a user's loop divides its loss.  Tensors the problem's ``extra`` holds in dicts, lists or tuples
(a model file's batch as the file returned it) are replaced by their micro-batch slices too.
An input that requires grad receives, per micro-batch, the gradient of its slice through autograd's
slice backward: a whole-batch-sized tensor, as in any loop that slices one batch tensor.
Evidence: docs/evidence/accumulate.md#micro-batches
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..core.errors import TechniqueUnavailable
from ..workload import Problem

__all__ = ["check_accumulate", "micro_problems", "batch_of", "BatchDoesNotSplit"]


class BatchDoesNotSplit(TechniqueUnavailable, ValueError):
    """The configuration's batch cannot be split into ``accumulate`` equal micro-batches: a ValueError
    for :func:`memlab.measure`, and a point a sweep skips with this line (as it skips a technique
    that cannot run here) rather than a sweep stopped."""


def batch_of(technique) -> tuple[str, int] | None:
    """``(the batch parameter's name, its value)`` of ``technique``'s workload, or None without one."""
    name = getattr(technique.workload, "samples_param", None)
    if name is None or name not in technique.config:
        return None
    return name, int(technique.config[name])


def check_accumulate(technique, accumulate: int) -> None:
    """Raise ValueError when ``technique``'s batch cannot be split into ``accumulate`` equal
    micro-batches (NOTE [ micro-batches of a problem ]); nothing for ``accumulate`` 1."""
    if accumulate == 1:
        return
    found = batch_of(technique)
    if found is None:
        raise BatchDoesNotSplit(f"accumulate={accumulate} needs a batch to split, and workload "
                         f"{technique.workload.name!r} declares none (no samples_param)")
    name, batch = found
    if batch % accumulate:
        raise BatchDoesNotSplit(f"{name}={batch} does not split into accumulate={accumulate} equal micro-batches: "
                         f"give a {name} divisible by {accumulate}")


def _sliced(t: torch.Tensor, batch: int, parts: int, what: str, name: str) -> list[torch.Tensor]:
    if t.dim() == 0 or t.shape[0] != batch:
        raise ValueError(f"accumulate={parts}: {what} has shape {list(t.shape)}, whose first dimension is not "
                         f"the batch {name}={batch}; memlab cannot split it into micro-batches")
    size = batch // parts
    return [t[k * size:(k + 1) * size] for k in range(parts)]


def _replace_tensors(obj: Any, by_id: dict[int, torch.Tensor]) -> Any:
    """``obj`` with every tensor found in ``by_id`` (by identity) replaced, through dicts, lists, tuples."""
    if isinstance(obj, torch.Tensor):
        return by_id.get(id(obj), obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_replace_tensors(o, by_id) for o in obj)
    if isinstance(obj, dict):
        return {k: _replace_tensors(v, by_id) for k, v in obj.items()}
    return obj


def micro_problems(technique, problem: Problem, parts: int) -> list[Problem]:
    """``problem`` as ``parts`` micro-batch problems (NOTE [ micro-batches of a problem ]): the same
    model, each input and the upstream gradient sliced along the batch; ``[problem]`` for one part."""
    if parts == 1:
        return [problem]
    check_accumulate(technique, parts)
    name, batch = batch_of(technique)
    inputs = {k: _sliced(t, batch, parts, f"input {k!r}", name) for k, t in problem.inputs.items()}
    go = problem.grad_output
    grad_outputs = [go] * parts if go is None or go.dim() == 0 else _sliced(go, batch, parts, "grad_output", name)
    out = []
    for k in range(parts):
        by_id = {id(t): inputs[n][k] for n, t in problem.inputs.items()}
        out.append(dataclasses.replace(problem, inputs={n: v[k] for n, v in inputs.items()},
                                       grad_output=grad_outputs[k],
                                       extra={n: _replace_tensors(v, by_id) for n, v in problem.extra.items()}))
    return out
