"""The ZeRO paper's model-state bytes per rank (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models", section 5.1), as pure functions; no torch.

With Ψ parameters, N ranks and K bytes of optimizer state per parameter, one rank holds

==========  ==========  ==========  ==========
strategy    parameters  gradients   optimizer
==========  ==========  ==========  ==========
ddp         PΨ          GΨ          KΨ
zero1       PΨ          GΨ          KΨ / N
fsdp        PΨ / N      GΨ / N      KΨ / N       (ZeRO-3: all three sharded)
==========  ==========  ==========  ==========

The paper's mixed-precision case is P = G = 2 (16-bit) and K = 12 (Adam's two moments plus a
float32 master copy); memlab's sharded step is float32 throughout, so P = G = 4 and K = 8 (Adam's
``exp_avg`` and ``exp_avg_sq``, no master copy).  The paper's counts leave out what the measured
step also holds: Adam's scalar ``step`` counter per parameter tensor (4 bytes each, float32),
DDP's gradient buckets, FSDP's gathered (unsharded) parameters and gradients, activations.
:func:`exact_adam_state_bytes` counts the first exactly; the report names the rest
(:mod:`memlab.sharding.report`).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PHASES", "STRATEGIES", "ModelState", "zero_model_state", "exact_adam_state_bytes", "FLOAT32_BYTES",
           "ADAM_FLOAT32_K"]

#: the sharding strategies memlab runs (:mod:`memlab.sharding.strategies`)
STRATEGIES = ("ddp", "zero1", "fsdp")
#: the marked phases of a traced step, in order (:mod:`memlab.sharding.trace`)
PHASES = ("forward", "backward", "optimizer")
#: bytes per float32 element (P and G in the table above)
FLOAT32_BYTES = 4
#: Adam's optimizer-state bytes per parameter in float32 (two moments)
ADAM_FLOAT32_K = 8
#: bytes of Adam's scalar float32 ``step`` counter, one per parameter tensor
ADAM_STEP_BYTES = 4


@dataclass(frozen=True)
class ModelState:
    """Model-state bytes one rank holds by the paper's formula (bytes; fractions kept exact as floats)."""

    parameters: float
    gradients: float
    optimizer_state: float

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer_state


def zero_model_state(strategy: str, psi: int, world: int, *, param_bytes: int = FLOAT32_BYTES,
                     grad_bytes: int = FLOAT32_BYTES, k: int = ADAM_FLOAT32_K) -> ModelState:
    """Per-rank model-state bytes of ``strategy`` (one of :data:`STRATEGIES`) for ``psi`` parameters
    (elements, >= 1) on ``world`` ranks (>= 1), by the ZeRO paper's table (module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not valid; valid strategies: {', '.join(STRATEGIES)}")
    if not isinstance(psi, int) or psi < 1:
        raise ValueError(f"psi={psi!r} is not valid; valid: an int >= 1 (parameter elements)")
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world={world!r} is not valid; valid: an int >= 1 (ranks)")
    p, g, o = param_bytes * psi, grad_bytes * psi, k * psi
    if strategy == "zero1":
        o = o / world
    elif strategy == "fsdp":
        p, g, o = p / world, g / world, o / world
    return ModelState(float(p), float(g), float(o))


def exact_adam_state_bytes(numels: list[int]) -> int:
    """Bytes of float32 Adam state (``foreach=False``) over parameter tensors of ``numels`` elements
    each: two moments of 4 bytes per element and one 4-byte scalar ``step`` per tensor."""
    if any(not isinstance(n, int) or n < 0 for n in numels):
        raise ValueError(f"numels={numels!r} is not valid; valid: a list of ints >= 0 (elements per tensor)")
    return ADAM_FLOAT32_K * sum(numels) + ADAM_STEP_BYTES * len(numels)
