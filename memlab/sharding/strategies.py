"""Wrapping the model for one sharding strategy, and reading its parameters back.

* ``ddp``: ``DistributedDataParallel`` (defaults: 25 MiB buckets, ``gradient_as_bucket_view=False``;
  ``init_sync=False``: every rank builds the same seeded model, so the construction broadcast, whose
  buffer a gloo thread could free unseen, is skipped) and ``torch.optim.Adam`` on every rank over
  every parameter.
* ``zero1``: the same DDP, and ``ZeroRedundancyOptimizer`` over ``Adam``: each rank keeps Adam's state
  of the parameters it owns (its partition) and broadcasts them after its step.
* ``fsdp``: FSDP2, ``torch.distributed.fsdp.fully_shard`` on each block and then on the root (the head
  is the root's), ``reshard_after_forward`` as asked; parameters are ``DTensor`` shards (dim 0) and
  Adam runs on the shards.  Its all-gather and reduce-scatter are FSDP2's own buffers moved by an
  in-place all-reduce (NOTE [ collectives freed on the caller's thread ]).

# NOTE [ collectives freed on the caller's thread ]
A gloo collective's work object holds its tensors, and a gloo worker thread holds the work until
just after it completes.  When the caller drops its last reference first, the tensors are freed on
the worker thread, outside the profiler's view and at a time that races the caller's next
allocations: the per-rank peak then moved between runs by up to a gathered block (the evidence in
docs/sharding.md#dropped-frees).  So an FSDP run installs :class:`SettledAllGather` and
:class:`SettledReduceScatter` (FSDP2's ``set_custom_all_gather`` / ``set_custom_reduce_scatter``):
each allocates FSDP's buffer as FSDP2's default does (``torch.empty``), moves the data with one
in-place ``all_reduce`` of FSDP's own buffer (an all-gather: the other ranks' slices zeroed first, so
the sum is each rank's slice exactly; a reduce-scatter: the sum, then this rank's slice copied out),
waits, and then waits until the buffer's storage has no reference left beyond the caller's
(:func:`settle`): every free is then made by FSDP on the caller's thread, in program order.  No gloo
buffer is allocated through c10 (gloo's own ``allgather`` would allocate a flat copy of the output,
its ``reduce_scatter`` a clone of the input), so each rank's bytes are FSDP2's own, as with NCCL,
which allocates none through c10.  DDP's bucket all-reduce works in place on its persistent buckets
(no free to race); its bucket-rebuild broadcast runs in the second warm-up step (``STEPS`` in
:mod:`memlab.sharding.worker`); ZeRO's broadcasts move the parameters in place.

All use ``Adam(lr=LEARNING_RATE, foreach=False)``, as the reference does.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from .formulas import STRATEGIES
from .model import LEARNING_RATE, blocks_of

__all__ = ["Wrapped", "wrap", "settle", "SettledAllGather", "SettledReduceScatter", "SETTLE_TIMEOUT_S", "local", "local_optimizer", "full_params", "owned_numels", "strategy_label"]


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
        units = [*blocks_of(model), model]
        for unit in units:
            fully_shard(unit, reshard_after_forward=reshard)
        if next(model.parameters()).device.type == "cpu":
            for unit in units:
                unit.set_custom_all_gather(SettledAllGather())
                unit.set_custom_reduce_scatter(SettledReduceScatter())
        return Wrapped(model, _adam(model.parameters()), strategy, reshard)
    dev = next(model.parameters()).device
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None, init_sync=False)
    if strategy == "ddp":
        return Wrapped(ddp, _adam(ddp.parameters()), strategy, reshard)
    opt = ZeroRedundancyOptimizer(list(ddp.parameters()), optimizer_class=torch.optim.Adam, lr=LEARNING_RATE,
                                  foreach=False)
    return Wrapped(ddp, opt, strategy, reshard)


#: most seconds :func:`settle` waits for a gloo thread to let go of a buffer
SETTLE_TIMEOUT_S = 60.0


def settle(start, buffer: torch.Tensor) -> None:
    """Run ``start()`` (a collective on ``buffer`` or a view of it, ``async_op=True``), wait for its work,
    drop it, then wait until ``buffer``'s storage has no more references than before the collective
    (the gloo worker has let go of it: NOTE [ collectives freed on the caller's thread ]).
    RuntimeError after :data:`SETTLE_TIMEOUT_S` seconds."""
    storage = buffer.untyped_storage()
    before = torch._C._storage_Use_Count(storage._cdata)
    work = start()
    work.wait()
    del work
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while torch._C._storage_Use_Count(storage._cdata) > before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"a gloo work still holds a {buffer.numel()}-element buffer after "
                               f"{SETTLE_TIMEOUT_S} s; valid: released once the collective completes")
        os.sched_yield()


def _all_reduce_settled(buffer: torch.Tensor, op, group) -> None:
    settle(lambda: dist.all_reduce(buffer.view(-1), op=op, group=group, async_op=True), buffer)


class SettledAllGather(AllGather):
    """FSDP2's all-gather as an in-place all-reduce of its own output buffer, every free on the
    caller's thread (NOTE [ collectives freed on the caller's thread ]); synchronous."""

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False) -> None:
        n, rank = group.size(), group.rank()
        with torch.no_grad():
            chunks = output_tensor.view(n, -1)
            if rank > 0:
                chunks[:rank].zero_()
            if rank < n - 1:
                chunks[rank + 1:].zero_()
            if input_tensor.data_ptr() != chunks[rank].data_ptr():   # FSDP copies it in place
                chunks[rank].copy_(input_tensor.view(-1))
            del chunks
            _all_reduce_settled(output_tensor, dist.ReduceOp.SUM, group)
        return None


class SettledReduceScatter(ReduceScatter):
    """FSDP2's reduce-scatter as an in-place all-reduce of its input buffer and a copy of this rank's
    slice (NOTE [ collectives freed on the caller's thread ]); synchronous."""

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False) -> None:
        with torch.no_grad():
            _all_reduce_settled(input_tensor, op, group)
            output_tensor.copy_(input_tensor.view(group.size(), -1)[group.rank()])
        return None


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
