"""The sharded step's model: a small residual MLP stack, its seeded batch, and the single-process
reference run.

Model (float32)::

    x [G, D] -> blocks x L: h = h + W_2 · gelu(W_1 · h + b_1) + b_2    # W_1 [F, D], W_2 [D, F]
             -> head: y = W_h · h + b_h                                # W_h [D, D]
    loss = mean((y - target)**2)                                       # target [G, D]

Ψ = L (2 D F + F + D) + D² + D parameters.  The global batch ``G`` rows are split evenly over the
ranks (rank r takes rows ``r G/N .. (r+1) G/N``); each rank's loss is the mean over its rows, and
DDP and FSDP average the gradients over ranks, so the sharded step computes the reference's
gradient of the global mean.  Every dimension is a multiple of 4 (the default sizes), so FSDP's
dim-0 shards at N = 2 and 4 need no padding and Ψ/N is exact.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["Sizes", "Block", "MLPStack", "build_model", "batch", "LEARNING_RATE", "reference_run", "ReferenceRun"]

#: Adam's learning rate in the sharded step and its reference
LEARNING_RATE = 1e-3


@dataclass(frozen=True)
class Sizes:
    """Model and batch sizes: ``dim`` D, ``hidden`` F, ``layers`` L, global batch ``batch`` G rows
    (split over the ranks: a multiple of the world size)."""

    dim: int = 32
    hidden: int = 128
    layers: int = 3
    batch: int = 16
    seed: int = 0

    def check(self, world: int) -> None:
        for name in ("dim", "hidden", "layers", "batch"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} is not valid; valid: an int >= 1")
        if self.batch % world:
            raise ValueError(f"batch={self.batch} is not valid at world={world}; valid: a multiple of {world}")

    @property
    def psi(self) -> int:
        """Parameter elements Ψ."""
        d, f = self.dim, self.hidden
        return self.layers * (2 * d * f + f + d) + d * d + d


class Block(nn.Module):
    """``h + W_2 · gelu(W_1 · h + b_1) + b_2``; h [rows, D] -> [rows, D]."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.down(nn.functional.gelu(self.up(h)))


class MLPStack(nn.Module):
    """``blocks`` (an ``nn.ModuleList``, FSDP's per-block units) then a linear ``head``; [rows, D] -> [rows, D]."""

    def __init__(self, sizes: Sizes):
        super().__init__()
        self.blocks = nn.ModuleList(Block(sizes.dim, sizes.hidden) for _ in range(sizes.layers))
        self.head = nn.Linear(sizes.dim, sizes.dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def build_model(sizes: Sizes, device: torch.device) -> MLPStack:
    """The model with weights seeded by ``sizes.seed`` (the same on every rank and in the reference)."""
    gen = torch.random.fork_rng(devices=[])
    with gen:
        torch.manual_seed(sizes.seed)
        model = MLPStack(sizes)
    return model.to(device)


def batch(sizes: Sizes, device: torch.device, rank: int = 0, world: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s rows of the seeded global batch: ``(x, target)``, each [G/world, D] float32."""
    g = torch.Generator().manual_seed(sizes.seed + 1)
    x = torch.randn(sizes.batch, sizes.dim, generator=g)
    target = torch.randn(sizes.batch, sizes.dim, generator=g)
    rows = sizes.batch // world
    sl = slice(rank * rows, (rank + 1) * rows)
    return x[sl].clone().to(device), target[sl].clone().to(device)


@dataclass(frozen=True)
class ReferenceRun:
    """The single-process run: the loss of each step and every parameter after the last (by name)."""

    losses: tuple[float, ...]
    params: dict[str, torch.Tensor]


def reference_run(sizes: Sizes, steps: int, device: torch.device = torch.device("cpu")) -> ReferenceRun:
    """``steps`` Adam steps (``foreach=False``, lr :data:`LEARNING_RATE`) on the whole global batch."""
    model = build_model(sizes, device)
    x, target = batch(sizes, device)
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, foreach=False)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return ReferenceRun(tuple(losses), {n: p.detach().cpu().clone() for n, p in model.named_parameters()})
