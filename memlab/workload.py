"""Workloads: the maths a family of techniques computes, its seeded inputs and its reference.

A workload fixes *what* is computed (e.g. ``y = (x @ w1) @ w2``); techniques choose *how* (chunked,
checkpointed, reversible...).  Because every technique of a workload computes the same function of
the same parameters, its outputs and gradients can be checked against :meth:`Workload.reference`,
which evaluates the maths with plain autograd on the technique's own :class:`Problem`.

A workload registers itself by name when subclassed::

    class ChainedMatmul(Workload, name="chained_matmul", family="chunking"):
        params = {"n": Param(10000, low=1), ...}
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import torch

from .core.params import Param, resolve_params
from .registry import register_workload

__all__ = ["Workload", "Problem", "DEFAULT_TOLERANCES"]

#: (rtol, atol) per dtype used when comparing a technique with the workload's reference.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-9),
    "float32": (1e-4, 1e-4),
    "bfloat16": (5e-2, 5e-2),
    "float16": (1e-2, 1e-2),
}

@dataclass
class Problem:
    """Everything one step needs, built on a device and dtype from a seed.

    Attributes:
        model: module holding the trainable parameters (may have none).
        inputs: named input tensors; leaves, some may ``requires_grad``.
        grad_output: the seeded upstream gradient fed to ``output.backward``; same shape as the
            output.  It is part of the baseline, so a step's peak does not include it.
        extra: free-form objects a technique or workload wants to keep (never measured).
    """

    model: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    grad_output: torch.Tensor
    extra: dict[str, Any] = field(default_factory=dict)

    def leaves(self) -> list[torch.Tensor]:
        """Tensors whose ``.grad`` a training step produces: parameters, then grad-requiring inputs."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        return params + [t for t in self.inputs.values() if t.requires_grad]


class Workload:
    """Base class of workloads.  Subclass with ``name=`` and ``family=`` keywords to register.

    Class attributes:
        params: the workload's parameters (shared by all its techniques).
        tolerances: ``{dtype: (rtol, atol)}`` for the reference check.
        samples_param: the parameter counting samples per step (for samples/s).
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    params: ClassVar[Mapping[str, Param]] = {}
    tolerances: ClassVar[Mapping[str, tuple[float, float]]] = DEFAULT_TOLERANCES
    samples_param: ClassVar[str | None] = None
    #: a small configuration for the automatic reference check in tests
    check_params: ClassVar[Mapping[str, Any]] = {}

    def __init_subclass__(cls, name: str | None = None, family: str | None = None, **kw):
        super().__init_subclass__(**kw)
        if name is None:
            return
        if not name.isidentifier():
            raise ValueError(f"workload name {name!r} must be an identifier")
        register_workload(name, cls)  # refuses a name another class holds
        cls.name = name
        cls.family = family or name

    def __init__(self, config: Mapping[str, Any]):
        self.config = dict(config)
        self.validate()

    # -- hooks ---------------------------------------------------------------------------------
    def validate(self) -> None:
        """Cross-parameter checks (raise ValueError naming the values)."""

    def build(self, device: torch.device, dtype: torch.dtype, seed: int) -> Problem:
        """Seeded inputs, parameters and upstream gradient for one step."""
        raise NotImplementedError

    def reference(self, problem: Problem) -> torch.Tensor:
        """The workload's maths with plain autograd, using ``problem``'s own parameters."""
        raise NotImplementedError

    @classmethod
    def sweep_grid(cls, quick: bool) -> list[dict[str, Any]]:
        """Configurations ``memlab sweep`` measures for this workload's techniques.

        Each entry maps parameter names (workload's or techniques') to values; for a technique,
        keys it does not have are dropped and duplicates measured once.  ``quick`` grids must
        finish the whole family in about a minute on 2 CPU cores.
        """
        return [{}]

    def samples_per_step(self) -> int:
        if self.samples_param is None:
            return 1
        return int(self.config[self.samples_param])

    @classmethod
    def resolve(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        return resolve_params(cls.params, given, owner=f"workload {cls.name!r}")
