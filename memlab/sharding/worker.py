"""What each rank process runs: join the process group, then per strategy the traced step, the
checks against the single-process reference, and its figures written as JSON for the parent.

# NOTE [ sharded step checks ]
Every rank computes the single-process reference itself (the whole global batch, the same seeds,
the same number of Adam steps: warm-up and measured) outside the trace.  The sharded run's loss of
each step is the mean of the ranks' losses (an ``all_reduce`` after the trace); its parameters after
the last step are gathered whole (``DTensor.full_tensor()`` for FSDP; ZeRO broadcasts each owner's
update, DDP keeps them whole).  They must match within :data:`PARAM_ATOL` (absolute, per element:
5% of one Adam update at lr 1e-3, which moves an element by up to about lr) and :data:`LOSS_RTOL`
(relative): only the order of the floating-point sums differs (per-rank partial batches, the
gradients' average over ranks), which Adam's second step amplifies where two steps' gradients nearly
cancel in the first moment.  A wrong shard or a missed update moves an element by about lr, 20 times
the tolerance.  Adam is blind to a gradient's scale (a sum over ranks in place of the mean would pass
those), so the first step's gradients are checked too, on a fresh wrapped model outside the trace,
gathered whole: within :data:`GRAD_RTOL` of the largest reference entry.  Evidence:
docs/sharding.md#checks.
"""
from __future__ import annotations

import json
import os
import socket
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

from ..core.atomic import write_text_atomic
from .checkpointing import checkpointing
from .formulas import exact_adam_state_bytes
from .model import Sizes, batch, build_model, loss_of, param_units, reference_run
from .strategies import full_params, local, owned_numels, strategy_label, wrap
from .trace import traced_step

__all__ = ["rank_main", "run_strategy", "gradient_diff", "PARAM_ATOL", "LOSS_RTOL", "GRAD_RTOL", "STEPS",
           "backend_for"]

#: largest absolute difference allowed per parameter element after the last step
PARAM_ATOL = 5e-5
#: largest relative difference allowed per step's loss
LOSS_RTOL = 1e-5
#: largest difference allowed between a gathered gradient and the reference's, over the largest
#: reference gradient entry
GRAD_RTOL = 1e-5
#: Adam steps per run: two warm-up (the second rebuilds DDP's buckets: NOTE [ collectives freed on
#: the caller's thread ]), one measured
STEPS = 3


def backend_for(device_type: str) -> str:
    """``gloo`` on CPU, ``nccl`` on CUDA."""
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device={device_type!r} is not valid; valid devices: cpu, cuda")
    return "gloo" if device_type == "cpu" else "nccl"


def rank_main(rank: int, world: int, store: str, out_dir: str, plan: list[tuple[str, bool]], models: list[Sizes],
              device_type: str) -> None:
    """One rank (``torch.multiprocessing.spawn``'s entry): ``plan`` is ``[(strategy, reshard), ...]``, run
    for each of ``models``; writes ``out_dir/rank{rank}.json``, one figure dict per model and plan entry
    (models outer)."""
    torch.set_num_threads(1)
    # FSDP2 warns that the transformer's per-token loss is a view (an in-place op on it would skip the
    # all-gather); loss_of only takes its mean, out of place
    warnings.filterwarnings("ignore", message=".*returned a view tensor")
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend_for(device_type), init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        rows = []
        for sizes in models:
            ref = reference_run(sizes, STEPS, device)
            for strategy, reshard in plan:
                rows.append(run_strategy(sizes, strategy, reshard, rank, world, device, ref))
                dist.barrier()
        write_text_atomic(Path(out_dir) / f"rank{rank}.json", json.dumps(rows))
    finally:
        dist.destroy_process_group()


def run_strategy(sizes: Sizes, strategy: str, reshard: bool, rank: int, world: int, device: torch.device,
                 ref) -> dict:
    """This rank's figures and checks for one strategy (a JSON-ready dict; bytes as ints)."""
    t = traced_step(sizes, strategy, reshard, rank, world, device, warmup=STEPS - 1)
    losses = torch.tensor(t.losses, dtype=torch.float64, device=device)
    dist.all_reduce(losses)
    losses = (losses / world).tolist()
    full = full_params(t.wrapped)
    diff = max(float((full[n] - p).abs().max()) for n, p in ref.params.items())
    loss_diff = max(abs(a - b) / abs(b) for a, b in zip(losses, ref.losses))
    owned = owned_numels(t.wrapped)
    c = t.categories
    grad_diff = gradient_diff(sizes, strategy, reshard, rank, world, device, ref)
    return {"machine": socket.gethostname() or None,
            "strategy": strategy_label(strategy, reshard), "model": sizes.model, "rank": rank, "world": world,
            "checkpoint_blocks": sizes.checkpoint_blocks,
            "psi": sum(p.numel() for p in ref.params.values()),
            "sizes": vars(sizes), "peak_bytes": c.total_peak_bytes, "peak_above_start_bytes": c.peak_above_start_bytes,
            "start": c.start, "peak": c.peak, "end": c.end, "max": t.maxima,
            "local_param_numels": [local(p).numel() for p in t.wrapped.module.parameters()],
            "param_shapes": [list(p.shape) for p in ref.params.values()], "at_peak": t.at_peak, "phase_peaks": t.phases,
            "param_units": param_units(build_model(sizes, torch.device("meta"))),
            "batch_per_rank": sizes.batch // world,
            "owned_numels": owned, "exact_optimizer_state_bytes": exact_adam_state_bytes(owned),
            "losses": losses, "reference_losses": list(ref.losses), "max_param_diff": diff,
            "grad_rel_diff": grad_diff,
            "loss_rel_diff": loss_diff, "dropped_frees": t.dropped[0], "dropped_free_bytes": t.dropped[1],
            "held_outside_categories": t.held, "unfreed_in_step": t.unfreed, "matches": diff <= PARAM_ATOL and loss_diff <= LOSS_RTOL and grad_diff <= GRAD_RTOL,
            "pid": os.getpid()}


def gradient_diff(sizes: Sizes, strategy: str, reshard: bool, rank: int, world: int, device: torch.device,
                  ref) -> float:
    """The first step's gradients of a fresh wrapped model (untraced; averaged over the ranks by the
    strategy, gathered whole) against the reference's: the largest absolute difference over the largest
    reference entry (NOTE [ sharded step checks ])."""
    model = build_model(sizes, device)
    with checkpointing(model, sizes.checkpoint_blocks):
        w = wrap(model, strategy, reshard=reshard)
        x, target = batch(sizes, device, rank, world)
        loss_of(sizes, w.module, x, target).backward()
    grads = full_params(w, grads=True)
    scale = max(float(g.abs().max()) for g in ref.grads.values())
    return max(float((grads[n] - g).abs().max()) for n, g in ref.grads.items()) / scale
