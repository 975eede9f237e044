"""Reversible family: a coupling stack trained plainly, checkpointed per block, and reversibly.

All four techniques compute :class:`~memlab.families.reversible.workload.ResidualStack` with the same F
and G modules, so outputs and gradients agree with ``residual`` (float64 to ~1e-12); they differ in
what autograd keeps between forward and backward:

* ``residual``: plain autograd; every block's ReLU outputs and halves: O(depth).
* ``checkpoint_block``: ``torch.utils.checkpoint`` (non-reentrant) per block; each block's two
  input halves: O(depth), smaller.
* ``reversible``: one autograd Function over the stack (:func:`~memlab.functional.reversible.
  reversible_stack`); only the output, block inputs rebuilt in backward: O(1).
* ``reversible_nosave``: the same Function with ``save_memory=False``; it snapshots each block's
  input instead of inverting, so its cost over ``reversible`` is exactly what reconstruction saves.

``describe`` stores the analytic activation bytes of every design; the *measured* activation peak
(``extra["activation_peak_bytes"]``: saved activations plus temporaries during forward and backward,
above the step's start, NOTE [ memory categories ] in :mod:`memlab.measurement.categories`) comes from
the measurement itself (``reports_activation_peak``), since the plain step peak is dominated by
parameter gradients on this workload.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from memlab.functional.reversible import Coupling, couple, residual_stack, reversible_stack
from memlab.technique import Technique
from .workload import ResidualStack, activation_bytes_per_block

__all__ = ["Residual", "CheckpointBlock", "Reversible", "ReversibleNoSave", "stack_facts"]


def stack_facts(technique: Technique, problem, path: str) -> dict[str, Any]:
    """Shared ``describe``: path taken and analytic activation bytes per design (bytes)."""
    cfg = technique.config
    x = problem.inputs["x"]
    es = x.element_size()
    per_block = activation_bytes_per_block(cfg, es)
    half = x.numel() // 2 * es
    spatial = 1 if cfg["block"] == "mlp" else cfg["spatial"] ** 2
    hidden = cfg["batch"] * cfg["hidden"] * spatial * es
    fo = Coupling(cfg["coupling"]).out_channels(cfg["width"]) * cfg["batch"] * spatial * es
    depth = cfg["depth"]
    # torch.utils.checkpoint (preserve_rng_state) stashes the CPU generator's state per checkpointed
    # call: a 5,056-byte tensor on CPU; on CUDA it is host memory, outside the device's figures
    rng_state = torch.get_rng_state().numel() if x.device.type == "cpu" else 0
    facts = {
        "path": path,
        "x_bytes": 2 * half,
        "expected_activation_bytes": {
            # saved per block plus the concatenated output
            "residual": depth * sum(per_block.values()) + 2 * half,
            # the two input halves and the RNG state of every block plus the output; one block's
            # graph during backward
            "checkpoint_block": depth * (2 * half + rng_state) + 2 * half + sum(per_block.values()),
            # output + reconstruction copy + gradient buffer + one F or G graph in backward (its
            # ReLU output and that output's gradient, [B, hidden] each, and its output fo)
            "reversible": 3 * 2 * half + 2 * hidden + fo,
            # plus one [B, 2C] snapshot per block
            "reversible_nosave": 3 * 2 * half + 2 * hidden + fo + depth * 2 * half,
        },
    }
    return facts


class _Stack(Technique):
    workload = ResidualStack
    reports_activation_peak = True

    def _blocks(self, problem):
        return list(problem.model.f), list(problem.model.g)


class Residual(_Stack, name="residual"):
    """The reference: plain autograd over the coupling stack; saves every block's activations."""

    baseline = True

    def forward(self, problem):
        f, g = self._blocks(problem)
        return residual_stack(problem.inputs["x"], f, g, coupling=self.config["coupling"])

    def describe(self, problem, mode="train"):
        return stack_facts(self, problem, "plain autograd")


class CheckpointBlock(_Stack, name="checkpoint_block"):
    """``torch.utils.checkpoint`` (non-reentrant) around each block; keeps block inputs only."""

    def forward(self, problem):
        f, g = self._blocks(problem)
        c = Coupling(self.config["coupling"])
        x1, x2 = problem.inputs["x"].chunk(2, dim=1)
        for fi, gi in zip(f, g):
            x1, x2 = checkpoint(_block, fi, gi, c, x1, x2, use_reentrant=False)
        return torch.cat([x1, x2], dim=1)

    def describe(self, problem, mode="train"):
        return stack_facts(self, problem, "torch.utils.checkpoint per block, use_reentrant=False")


def _block(f, g, c: Coupling, x1, x2):
    y1 = couple(x1, f(x2), c)
    return y1, couple(x2, g(y1), c)


class Reversible(_Stack, name="reversible"):
    """One autograd Function over the stack; block inputs reconstructed in backward (O(1) in depth)."""

    drifts_in_low_precision = True  # rebuilt inputs: NOTE [ every step checked ]

    twin = "reversible_nosave"

    def forward(self, problem):
        f, g = self._blocks(problem)
        return reversible_stack(problem.inputs["x"], f, g, coupling=self.config["coupling"], save_memory=True)

    def describe(self, problem, mode="train"):
        return stack_facts(self, problem, "memlab.functional.reversible_stack(save_memory=True)")


class ReversibleNoSave(_Stack, name="reversible_nosave"):
    """``reversible`` with savings off: the same Function snapshots each block input (O(depth))."""

    def forward(self, problem):
        f, g = self._blocks(problem)
        return reversible_stack(problem.inputs["x"], f, g, coupling=self.config["coupling"], save_memory=False)

    def describe(self, problem, mode="train"):
        return stack_facts(self, problem, "memlab.functional.reversible_stack(save_memory=False)")
