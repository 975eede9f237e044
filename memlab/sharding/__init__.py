"""Past one device: each rank's exact memory under DDP, ZeRO-1 and FSDP2 (issue 48, first slice).

``run_sharded(plan, world)`` (:mod:`.launch`) starts ``world`` processes (gloo on CPU, NCCL on CUDA),
each of which builds the small model of :mod:`.model` (every block checkpointed with ``checkpoint_blocks``:
:mod:`.checkpointing`), wraps it for a strategy (:mod:`.strategies`),
traces one Adam training step with memlab's exact allocation trace (:mod:`.trace`), and checks the
step against the single-process reference (:mod:`.worker`).  :mod:`.formulas` is the ZeRO paper's
model-state formula (torch-free); :mod:`.report` puts both side by side; :mod:`.layout` and
:mod:`.predict` (torch-free) predict each rank's peak at other world sizes from runs at some.
Command line: ``python -m memlab.sharding --strategy ddp --world 2``, ``python -m memlab.sharding
predict``.  docs/sharding.md says what is measured.
"""
from __future__ import annotations

from .formulas import STRATEGIES, ModelState, exact_adam_state_bytes, zero_model_state

__all__ = ["STRATEGIES", "ModelState", "exact_adam_state_bytes", "zero_model_state", "run_sharded"]


def run_sharded(*args, **kwargs):
    """:func:`memlab.sharding.launch.run_sharded` (imported on first use: torch stays unloaded until then)."""
    from .launch import run_sharded as run  # deferred: torch line

    return run(*args, **kwargs)
