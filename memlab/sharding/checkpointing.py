"""Activation checkpointing of every block of the sharded step's model (``--checkpoint-blocks``).

Each block of :func:`memlab.sharding.model.blocks_of` (FSDP's per-block units) runs under
``torch.utils.checkpoint`` (``use_reentrant=False``, the CPU RNG state preserved), patched on the
block before the strategy wraps the model, as FSDP users do (checkpoint inside each ``fully_shard``
unit; DDP and ZeRO wrap the root only).  Saved for backward: each block's inputs (torch saves them
as one ``SavedVariable`` each: a block's input [b, ...] is the previous block's output, the first
block's the embedding's or the batch's) and the 5,056-byte CPU RNG state per block; the block's
other activations are recomputed in its backward, one block at a time.  The maths is the plain
step's: the single-process reference runs without checkpointing and the ranks must still match it
(NOTE [ sharded step checks ]).

# NOTE [ recomputed tensors are saved activations ]
Non-reentrant checkpoint keeps what a block's forward saves through its own saved-tensor hooks,
which hide it from memlab's pack hook (NOTE [ memory categories ]).  The block's inputs are saved
before those hooks are pushed (``_CheckpointFrame.save_inputs`` makes ordinary ``SavedVariable`` s,
so memlab's pack hook marks them).  What the recomputation in backward saves would be counted as
temporaries: so the recompute context (``context_fn``'s second context) pushes a hook that marks
each tensor as saved (:func:`memlab.measurement.categories.mark_saved`) and hands it on to the
recomputation's own hook, unchanged.  The category then means what it means without
checkpointing: the storages autograd keeps for backward.  Parameters (leaves that require grad, and
their views) are not marked: under FSDP the recomputation saves the block's gathered parameters,
which the plain step (resharding after forward) gathers again in backward as temporaries; marked,
they would move a gathered block into the saved activations and the two steps' categories would
not compare.  Evidence: tests/test_sharding_checkpoint.py
(the saved bytes at the peak against each block's input, exactly).
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from ..functional.blocks import Blocks, checkpoint_each
from ..measurement.categories import mark_saved
from .model import blocks_of

__all__ = ["checkpointing", "sharded_blocks"]


def sharded_blocks(model: nn.Module) -> Blocks:
    """The model's blocks (:func:`~memlab.sharding.model.blocks_of`, FSDP's units) as one group."""
    blocks = tuple(blocks_of(model))
    kinds = ", ".join(sorted({type(b).__name__ for b in blocks}))
    return Blocks(("blocks",), (blocks,), kinds, "sharded units")


def _is_parameter(t: torch.Tensor) -> bool:
    """A parameter (a leaf that requires grad) or a view of one (``weight.t()``, as ``addmm`` saves it)."""
    base = t._base if t._base is not None else t
    return base.is_leaf and base.requires_grad


@contextlib.contextmanager
def _marking_recomputation():
    """Within (a recomputation in backward): every tensor saved is marked, then handed to the hook
    that was on top (the recomputation's own): NOTE [ recomputed tensors are saved activations ]."""
    top = torch._C._autograd._top_saved_tensors_default_hooks(False)
    if top is None:
        raise RuntimeError("checkpointing: no saved-tensor hook during recomputation; valid: called as "
                           "torch.utils.checkpoint's recompute context only")
    pack, unpack = top

    def marked(t: torch.Tensor):
        if not _is_parameter(t):
            mark_saved(t)
        return pack(t)

    with torch.autograd.graph.saved_tensors_hooks(marked, unpack):
        yield


def _contexts():
    return contextlib.nullcontext(), _marking_recomputation()


def checkpointing(model: nn.Module, on: bool):
    """Context manager: within it, with ``on``, every block of ``model`` runs under non-reentrant
    ``torch.utils.checkpoint`` (module doc); without ``on``, nothing changes.  Enter it before the
    strategy wraps ``model``."""
    if not on:
        return contextlib.nullcontext()
    return checkpoint_each(sharded_blocks(model), context_fn=_contexts)
