"""The sharded step's models (a small residual MLP stack, or the transformer family's language model
at tiny sizes), their seeded batches, and the single-process reference run.

``mlp`` (float32)::

    x [G, D] -> blocks x L: h = h + W_2 · gelu(W_1 · h + b_1) + b_2    # W_1 [F, D], W_2 [D, F]
             -> head: y = W_h · h + b_h                                # W_h [D, D]
    loss = mean((y - target)**2)                                       # target [G, D]

Ψ = L (2 D F + F + D) + D² + D parameters.  The global batch ``G`` rows are split evenly over the
ranks (rank r takes rows ``r G/N .. (r+1) G/N``); each rank's loss is the mean over its rows, and
DDP and FSDP average the gradients over ranks, so the sharded step computes the reference's
gradient of the global mean.  Every dimension is a multiple of 4 (the default sizes), so FSDP's
dim-0 shards at N = 2 and 4 need no padding and Ψ/N is exact.

``transformer``: :class:`memlab.families.transformer.workload.TransformerLM` (GPT-2's layout, eager
attention, no dropout) with width D = ``dim``, ``heads``, ``vocab`` V, ``seq`` T and ``layers`` L,
PyTorch's default initialisation seeded by ``seed``; ``batch`` sequences of T token ids [G, T]
(int64) and their targets; loss the mean of the per-token cross-entropy.
Ψ = 2 V D + T D + L (12 D² + 13 D) + 2 D; the defaults' dim-0 sizes are all multiples of 4 too.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..families.transformer.workload import TransformerLM
from .model_file import build as build_file, file_blocks, file_loss, global_batch, is_model_file, load

__all__ = ["blocks_of", "param_units", "Sizes", "Block", "MLPStack", "build_model", "batch", "loss_of", "LEARNING_RATE", "reference_run",
           "ReferenceRun", "MODELS"]

#: the built-in models a sharded step can run (``Sizes.model``; or a model file's path, ``*.py``)
MODELS = ("mlp", "transformer")

#: Adam's learning rate in the sharded step and its reference
LEARNING_RATE = 1e-3


@dataclass(frozen=True)
class Sizes:
    """Model and batch sizes: ``model`` (one of :data:`MODELS`), ``dim`` D, ``hidden`` F (mlp), ``layers``
    L, global batch ``batch`` G rows or sequences (split over the ranks: a multiple of the world size);
    ``heads``, ``vocab`` V and ``seq`` T for the transformer.  ``model`` may instead be a model file's
    path (``*.py``: :mod:`memlab.sharding.model_file`): then ``batch`` and ``seq`` (where the file's
    ``batch()`` takes one) are what count.  ``checkpoint_blocks``: every block runs under
    non-reentrant ``torch.utils.checkpoint`` in the sharded step (:mod:`memlab.sharding.checkpointing`;
    the reference never does)."""

    dim: int = 32
    hidden: int = 128
    layers: int = 3
    batch: int = 16
    seed: int = 0
    model: str = "mlp"
    heads: int = 4
    vocab: int = 256
    seq: int = 16
    checkpoint_blocks: bool = False

    def check(self, world: int) -> None:
        if is_model_file(self.model):
            load(self.model)
        elif self.model not in MODELS:
            raise ValueError(f"model={self.model!r} is not valid; valid models: {', '.join(MODELS)}")
        if self.model == "transformer" and self.dim % self.heads:
            raise ValueError(f"dim={self.dim} is not valid with heads={self.heads}; valid: a multiple of heads")
        for name in ("dim", "hidden", "layers", "batch", "heads", "vocab", "seq"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} is not valid; valid: an int >= 1")
        if self.batch % world:
            raise ValueError(f"batch={self.batch} is not valid at world={world}; valid: a multiple of {world}")
        if not isinstance(self.checkpoint_blocks, bool):
            raise ValueError(f"checkpoint_blocks={self.checkpoint_blocks!r} is not valid; valid: True or False")

    @property
    def psi(self) -> int:
        """Parameter elements Ψ of a built-in model (a model file's are counted from its parameters)."""
        if is_model_file(self.model):
            raise ValueError(f"model={self.model!r}: Ψ of a model file is not known from sizes; valid: mlp, transformer")
        d, f = self.dim, self.hidden
        if self.model == "transformer":
            return 2 * self.vocab * d + self.seq * d + self.layers * (12 * d * d + 13 * d) + 2 * d
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


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks (FSDP's per-block units): its ``blocks``, or a model file's found blocks."""
    return list(model.blocks) if isinstance(getattr(model, "blocks", None), nn.ModuleList) else file_blocks(model)


def param_units(model: nn.Module) -> list[int]:
    """For each parameter (``named_parameters`` order) the index of the block holding it, -1 for the
    root (the rest of the model: FSDP's root unit)."""
    where = {id(p): i for i, block in enumerate(blocks_of(model)) for p in block.parameters()}
    return [where.get(id(p), -1) for p in model.parameters()]


def build_model(sizes: Sizes, device: torch.device) -> nn.Module:
    """The model with weights seeded by ``sizes.seed`` (the same on every rank and in the reference);
    either has its blocks in ``.blocks``."""
    if is_model_file(sizes.model):
        return build_file(sizes.model, sizes.seed).to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(sizes.seed)
        if sizes.model == "transformer":
            config = {"vocab": sizes.vocab, "hidden": sizes.dim, "seq": sizes.seq, "layers": sizes.layers,
                      "heads": sizes.heads, "dropout": 0.0}
            model = TransformerLM(config)
        else:
            model = MLPStack(sizes)
    return model.to(device)


def loss_of(sizes: Sizes, model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The scalar loss: mean squared error (mlp), the mean per-token cross-entropy (transformer), or
    a model file's loss on its batch ``x`` (``target`` None)."""
    if is_model_file(sizes.model):
        return file_loss(sizes.model, model, x)
    if sizes.model == "transformer":
        return model(x, target).mean()
    return nn.functional.mse_loss(model(x), target)


def batch(sizes: Sizes, device: torch.device, rank: int = 0, world: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s rows of the seeded global batch: ``(x, target)``, each [G/world, D] float32
    (mlp), or token ids and targets [G/world, T] int64 (transformer); for a model file its batch's
    dict of tensors [G/world, ...] and None."""
    if is_model_file(sizes.model):
        return global_batch(sizes.model, sizes.batch, sizes.seq, sizes.seed, rank, world, device), None
    g = torch.Generator().manual_seed(sizes.seed + 1)
    if sizes.model == "transformer":
        x = torch.randint(sizes.vocab, (sizes.batch, sizes.seq), generator=g)
        target = torch.randint(sizes.vocab, (sizes.batch, sizes.seq), generator=g)
    else:
        x = torch.randn(sizes.batch, sizes.dim, generator=g)
        target = torch.randn(sizes.batch, sizes.dim, generator=g)
    rows = sizes.batch // world
    sl = slice(rank * rows, (rank + 1) * rows)
    return x[sl].clone().to(device), target[sl].clone().to(device)


@dataclass(frozen=True)
class ReferenceRun:
    """The single-process run: the loss of each step, every parameter after the last and every
    gradient of the first (by name)."""

    losses: tuple[float, ...]
    params: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor]


def reference_run(sizes: Sizes, steps: int, device: torch.device = torch.device("cpu")) -> ReferenceRun:
    """``steps`` Adam steps (``foreach=False``, lr :data:`LEARNING_RATE`) on the whole global batch."""
    model = build_model(sizes, device)
    x, target = batch(sizes, device)
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, foreach=False)
    losses, grads = [], {}
    for _ in range(steps):
        loss = loss_of(sizes, model, x, target)
        loss.backward()
        grads = grads or {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return ReferenceRun(tuple(losses), {n: p.detach().cpu().clone() for n, p in model.named_parameters()}, grads)
