"""Wrapping the model for one sharding strategy, and reading its parameters back.

* ``ddp``: ``DistributedDataParallel`` (defaults: 25 MiB buckets, ``gradient_as_bucket_view=False``)
  and ``torch.optim.Adam`` on every rank over every parameter.
* ``zero1``: the same DDP, and ``ZeroRedundancyOptimizer`` over ``Adam``: each rank keeps Adam's state
  of the parameters it owns (its partition) and broadcasts them after its step.
* ``fsdp``: FSDP2, ``torch.distributed.fsdp.fully_shard`` on each block and then on the root (the head
  is the root's), ``reshard_after_forward`` as asked; parameters are ``DTensor`` shards (dim 0) and
  Adam runs on the shards.

All use ``Adam(lr=LEARNING_RATE, foreach=False)``, as the reference does.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from .formulas import STRATEGIES
from .model import LEARNING_RATE

__all__ = ["Wrapped", "wrap", "local", "local_optimizer", "full_params", "owned_numels", "strategy_label"]


@dataclass
class Wrapped:
    """The module a step calls, its optimizer, and the strategy it was wrapped for."""

    module: nn.Module
    optimizer: torch.optim.Optimizer
    strategy: str
    reshard: bool


def strategy_label(strategy: str, reshard: bool) -> str:
    """``fsdp`` with ``reshard_after_forward=False`` is ``fsdp(keep)``; the others their name."""
    return f"{strategy}(keep)" if strategy == "fsdp" and not reshard else strategy


def wrap(model: nn.Module, strategy: str, *, reshard: bool = True) -> Wrapped:
    """``model`` wrapped for ``strategy`` (one of :data:`STRATEGIES`) in the default process group."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not valid; valid strategies: {', '.join(STRATEGIES)}")
    if strategy == "fsdp":
        for block in model.blocks:
            fully_shard(block, reshard_after_forward=reshard)
        fully_shard(model, reshard_after_forward=reshard)
        return Wrapped(model, _adam(model.parameters()), strategy, reshard)
    dev = next(model.parameters()).device
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    if strategy == "ddp":
        return Wrapped(ddp, _adam(ddp.parameters()), strategy, reshard)
    opt = ZeroRedundancyOptimizer(list(ddp.parameters()), optimizer_class=torch.optim.Adam, lr=LEARNING_RATE,
                                  foreach=False)
    return Wrapped(ddp, opt, strategy, reshard)


def _adam(params) -> torch.optim.Optimizer:
    return torch.optim.Adam(list(params), lr=LEARNING_RATE, foreach=False)


def local(t):
    """A ``DTensor``'s local shard (a plain tensor sharing its storage); any other object as it is."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def local_optimizer(w: Wrapped) -> torch.optim.Optimizer:
    """The optimizer whose ``state`` this rank holds (ZeRO's per-rank ``optim``)."""
    return getattr(w.optimizer, "optim", w.optimizer)


def owned_numels(w: Wrapped) -> list[int]:
    """Elements of each parameter tensor whose optimizer state this rank holds (local shards for fsdp)."""
    return [local(p).numel() for g in local_optimizer(w).param_groups for p in g["params"]]


def full_params(w: Wrapped, *, grads: bool = False) -> dict[str, torch.Tensor]:
    """Every parameter (with ``grads``: its ``.grad``, where set), whole (an FSDP shard gathered: a
    collective every rank must call), on CPU, by the unwrapped model's names."""
    module = w.module.module if hasattr(w.module, "module") and w.strategy != "fsdp" else w.module
    out = {}
    for name, p in module.named_parameters():
        t = p.grad if grads else p
        if t is not None:
            full = t.full_tensor() if hasattr(t, "full_tensor") else t
            out[name] = full.detach().cpu().clone()
    return out
