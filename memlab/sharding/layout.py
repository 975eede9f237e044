"""Where each parameter's bytes live on each rank, computed from the parameter shapes alone (no
torch): FSDP2's dim-0 shards with their padding, ZeRO-1's ownership, and the model state they make.

# NOTE [ shard layout from shapes ]
FSDP2 (``fully_shard``) splits a parameter of dim-0 size ``d0`` as ``torch.chunk`` does: every
rank's chunk is ``ceil(d0 / N)`` rows except the last non-empty one (shorter) and any after it
(empty).  The shard's storage is padded to ``ceil(d0 / N)`` rows on every rank (FSDPParam's
``_sharded_param_data``), so a rank's parameter bytes are ``4 · ceil(d0/N) · rest`` per tensor
(``rest``: the product of the other dims), and an all-gather moves ``N · ceil(d0/N) · rest``
elements per tensor; Adam's moments (``zeros_like`` of the local shard) take the unpadded rows.
ZeroRedundancyOptimizer (``parameters_as_bucket_view=False``) sorts the tensors by element count,
largest first (a stable sort: ties keep the order the optimizer was given), and gives each to the
rank holding the fewest elements so far (the lowest rank on a tie).  Evidence: the per-rank
``local_param_numels`` and ``owned_numels`` a run records equal these
(tests/test_sharding_predict.py) and docs/sharding.md#prediction.
"""
from __future__ import annotations

from math import prod

__all__ = ["step_order_numels", "adam_step_temporary_numel", "ceil_div", "fsdp_rows", "fsdp_padded_rows", "zero1_owners", "local_numels", "padded_numels",
           "owned_numels", "model_state_bytes", "check_world", "gathered_numels"]

#: bytes of a float32 element
F32 = 4
#: bytes of Adam's scalar ``step`` counter (float32), one per tensor that has state
STEP = 4


def check_world(world: int, rank: int | None = None) -> None:
    """ValueError naming ``world`` (an int >= 1) or ``rank`` (0..world-1) when either is out of range."""
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ValueError(f"world={world!r} is not valid; valid: an int >= 1 (ranks)")
    if rank is not None and (not isinstance(rank, int) or not 0 <= rank < world):
        raise ValueError(f"rank={rank!r} is not valid at world={world}; valid: 0..{world - 1}")


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints ``a >= 0``, ``b >= 1``."""
    return -(-a // b)


def fsdp_padded_rows(d0: int, world: int) -> int:
    """Rows of every rank's padded FSDP2 shard of a tensor of dim-0 size ``d0`` on ``world`` ranks."""
    check_world(world)
    return ceil_div(d0, world)


def fsdp_rows(d0: int, world: int, rank: int) -> int:
    """Rows of rank ``rank``'s (unpadded) FSDP2 shard: ``torch.chunk``'s split of ``d0`` rows."""
    check_world(world, rank)
    chunk = ceil_div(d0, world)
    return max(0, min(chunk, d0 - rank * chunk))


def _rest(shape: tuple[int, ...]) -> int:
    return prod(shape[1:]) if len(shape) > 1 else 1


def local_numels(shapes: list[tuple[int, ...]], world: int, rank: int) -> list[int]:
    """Elements of rank ``rank``'s unpadded FSDP2 shard of each tensor of ``shapes`` (module order)."""
    return [fsdp_rows(s[0], world, rank) * _rest(s) if s else 1 for s in shapes]


def padded_numels(shapes: list[tuple[int, ...]], world: int) -> list[int]:
    """Elements of every rank's padded FSDP2 shard storage of each tensor of ``shapes``."""
    return [fsdp_padded_rows(s[0], world) * _rest(s) if s else 1 for s in shapes]


def gathered_numels(shapes: list[tuple[int, ...]], world: int) -> int:
    """Elements of the all-gather output (or reduce-scatter input) of a unit of tensors ``shapes``:
    ``N · ceil(d0/N) · rest`` each, summed."""
    return world * sum(padded_numels(shapes, world))


def zero1_owners(numels: list[int], world: int) -> list[int]:
    """The rank owning each tensor (by ``numels``, in the optimizer's order) under
    ZeroRedundancyOptimizer's greedy partition (NOTE [ shard layout from shapes ])."""
    check_world(world)
    held = [0] * world
    owner = [0] * len(numels)
    for i in sorted(range(len(numels)), key=lambda k: numels[k], reverse=True):
        r = held.index(min(held))
        owner[i] = r
        held[r] += numels[i]
    return owner


def step_order_numels(strategy: str, shapes: list[tuple[int, ...]], world: int, rank: int) -> list[int]:
    """:func:`owned_numels` in the order the rank's Adam steps them: module order for ddp and fsdp,
    ZeroRedundancyOptimizer's (largest first) for zero1."""
    owned = owned_numels(strategy, shapes, world, rank)
    return sorted(owned, reverse=True) if strategy == "zero1" else owned


def adam_step_temporary_numel(order: list[int]) -> int:
    """Most elements Adam's single-tensor step (``foreach=False``) holds in temporaries: stepping tensor
    ``i`` allocates ``sqrt`` and then the division (``i``'s size each) while the previous tensor's
    ``denom`` is still referenced, so ``max_i(n[i-1] + 2 n[i])``."""
    return max((2 * n + (order[i - 1] if i else 0) for i, n in enumerate(order)), default=0)


def owned_numels(strategy: str, shapes: list[tuple[int, ...]], world: int, rank: int) -> list[int]:
    """Elements of each tensor whose Adam state rank ``rank`` holds, in its optimizer's order
    (``ddp``: every tensor; ``zero1``: those it owns; ``fsdp``: its local shards, empty ones included
    as 0)."""
    check_world(world, rank)
    numels = [prod(s) for s in shapes]
    if strategy == "ddp":
        return numels
    if strategy == "zero1":
        owners = zero1_owners(numels, world)
        return [n for n, r in zip(numels, owners) if r == rank]
    if strategy == "fsdp":
        return local_numels(shapes, world, rank)
    raise ValueError(f"strategy={strategy!r} is not valid; valid strategies: ddp, zero1, fsdp")


def model_state_bytes(strategy: str, shapes: list[tuple[int, ...]], world: int, rank: int) -> dict[str, int]:
    """Rank ``rank``'s model state in bytes (float32, Adam ``foreach=False``): ``parameters`` (FSDP's
    padded shard storage), ``gradients`` (all of this rank's gradients: whole tensors for ddp and
    zero1, padded shards for fsdp) and ``optimizer_state`` (two moments per owned element, one 4-byte
    ``step`` per tensor with state; FSDP's empty shards hold a ``step`` and no moment bytes)."""
    owned = owned_numels(strategy, shapes, world, rank)
    if strategy == "fsdp":
        params = grads = F32 * sum(padded_numels(shapes, world))
    else:
        params = grads = F32 * sum(prod(s) for s in shapes)
    return {"parameters": params, "gradients": grads, "optimizer_state": 2 * F32 * sum(owned) + STEP * len(owned)}
