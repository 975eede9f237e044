"""One rank's sharded training step, traced exactly with memlab's allocation trace.

# NOTE [ a rank's traced step ]
Each rank opens an :class:`~memlab.measurement.alloc_trace.AllocationRecorder` before it builds the
model (so every storage the step can free was allocated inside the session and its free is seen:
NOTE [ exact CPU allocated bytes ]), wraps it for the strategy, runs one unmarked warm-up step
(Adam's state and FSDP's lazy init come to exist) and one marked step.  Its bytes are those
allocated through c10's allocator inside the session, the process group's own setup before it left
out; the profiler records the gloo worker threads' allocations too (they run under the caller's
thread-local profiler state).  Categories (NOTE [ memory categories ]): parameters and optimizer state
by storage address at the step's start, ``DTensor`` shards unwrapped to their local tensor, ZeRO's
state from the rank's own ``optim``; gradients by a ``memlab::grad:ADDR`` mark on every parameter's
(local) ``.grad`` after backward; saved activations by the probe's pack hook.  What holds memory
outside those (DDP's gradient buckets, FSDP's gathered parameters and unsharded gradients,
reduce-scatter and all-gather buffers) counts as temporaries.

# NOTE [ frees the gloo threads drop ]
A collective's buffers (FSDP's all-gather output, gloo's reduce-scatter copy) are sometimes released
last by a gloo worker thread after its work ends, outside the profiler's thread-local state, and that
free is never reported.  The proof is in the trace: an allocation at an address whose block is still
open (an allocator never hands out a live address).  :func:`repair_dropped_frees` closes such a block
at the reuse, its latest possible free, and counts them: without it the stale block stays live
forever and, when the address is reused by a parameter or optimizer state, is attributed to that
category (an all-gather buffer counted as FSDP's optimizer state, in the evidence).  The model-state
categories are then exact.  The peak is an upper bound: a repaired block counts until the reuse
(``dropped_frees``, ``dropped_free_bytes`` in each rank's figures), and a dropped free whose address is
never reused stays live to the end, as ``temporaries`` (:func:`held_outside_categories` and
:func:`unfreed_in_step` list such blocks; :mod:`memlab.sharding.report` flags those a collective
allocated).  Evidence: docs/sharding.md#dropped-frees.
"""
from __future__ import annotations

import dataclasses
import gc
import types
from dataclasses import dataclass

import torch
from torch.profiler import record_function

from ..core.record import CATEGORIES
from ..measurement.alloc_trace import AllocationRecorder, window
from ..measurement.categories import (IterationCategories, Probe, baseline_categories, block_categories, categorise,
                                      category_of, pair_blocks)
from .checkpointing import checkpointing
from .formulas import PHASES
from .model import Sizes, batch, build_model, loss_of
from .strategies import Wrapped, local, local_optimizer, wrap

__all__ = ["TracedStep", "traced_step", "category_maxima", "mark_gradients", "repair_dropped_frees",
           "held_outside_categories", "unfreed_in_step", "peak_detail", "phase_peaks"]

_GRAD_MARK = "memlab::grad:"
#: live blocks kept per category in :func:`peak_detail` (the largest by bytes)
PEAK_BLOCKS_KEPT = 25


@dataclass
class TracedStep:
    """A rank's traced step: its categories (start, peak, end), each category's most bytes at any
    moment of the step, the loss of each step run (warm-up first), the wrapped model, and the frees
    the trace dropped (NOTE [ frees the gloo threads drop ]: count, bytes)."""

    categories: IterationCategories
    maxima: dict[str, int]
    losses: list[float]
    wrapped: Wrapped
    dropped: tuple[int, int] = (0, 0)
    held: dict[str, int] = dataclasses.field(default_factory=dict)
    unfreed: dict[str, int] = dataclasses.field(default_factory=dict)
    at_peak: dict = dataclasses.field(default_factory=dict)
    phases: dict = dataclasses.field(default_factory=dict)


def repair_dropped_frees(events: list) -> tuple[list, int, int]:
    """``(events, count, bytes)``: ``events`` (time order) with a free inserted just before every
    allocation at an address whose block is still open (NOTE [ frees the gloo threads drop ])."""
    out, open_at = [], {}
    count = nbytes = 0
    for e in events:
        if e.delta_bytes > 0:
            old = open_at.get(e.address)
            if old is not None:
                out.append(dataclasses.replace(old, time_ns=e.time_ns, delta_bytes=-old.delta_bytes))
                count, nbytes = count + 1, nbytes + old.delta_bytes
            open_at[e.address] = e
        else:
            open_at.pop(e.address, None)
        out.append(e)
    return out, count, nbytes


def mark_gradients(params) -> None:
    """A ``memlab::grad:ADDR`` profiler mark per parameter's (local) ``.grad`` storage."""
    for p in params:
        g = local(p.grad) if p.grad is not None else None
        if g is not None:
            with record_function(f"{_GRAD_MARK}{g.untyped_storage().data_ptr()}"):
                pass


def _step_fn(sizes: Sizes, w: Wrapped, x, target, losses: list[float], probe: Probe):
    params = list(w.module.parameters())

    def step() -> None:
        with record_function("memlab::forward"), probe.saving():
            loss = loss_of(sizes, w.module, x, target)
        with record_function("memlab::backward"), probe.saving():
            loss.backward()
            losses.append(loss.item())
            del loss
            mark_gradients(params)
        with record_function("memlab::optimizer"):
            w.optimizer.step()
            w.optimizer.zero_grad(set_to_none=True)

    return step


def _baseline(w: Wrapped, x, target) -> dict[int, str]:
    """Storage address -> category of what lives between steps (shards unwrapped)."""
    params = {n: local(p) for n, p in w.module.named_parameters()}
    model = types.SimpleNamespace(state_dict=lambda keep_vars: params)
    state = {k: {n: local(v) for n, v in s.items()} for k, s in local_optimizer(w).state.items()}
    inputs = dict(x) if isinstance(x, dict) else {"x": x, "target": target}
    return baseline_categories(model, inputs, None, types.SimpleNamespace(state=state))


def category_maxima(events, windows, baseline) -> dict[str, int]:
    """Each category's most live bytes at any event of the ``iteration0`` window (its start included)."""
    it = window(windows, "iteration0")
    block_of, blocks = pair_blocks(events)
    category = block_categories(blocks, windows, baseline, it.start_ns)
    live = dict.fromkeys(CATEGORIES, 0)
    most = None
    for k, e in enumerate(events):
        if e.time_ns > it.end_ns:
            break
        if most is None and e.time_ns >= it.start_ns:
            most = dict(live)
        live[category_of(category, block_of[k])] += e.delta_bytes
        if most is not None:
            most = {c: max(most[c], live[c]) for c in CATEGORIES}
    return most if most is not None else dict(live)


def phase_peaks(events, windows, baseline) -> dict[str, dict]:
    """The highest point of each phase of ``iteration0`` (:data:`PHASES`): ``{phase: {"bytes": live
    bytes there, "categories": {category: bytes}}}`` (counting everything live, as the peak does)."""
    it = window(windows, "iteration0")
    block_of, blocks = pair_blocks(events)
    category = block_categories(blocks, windows, baseline, it.start_ns)
    live = dict.fromkeys(CATEGORIES, 0)
    total, out = 0, {}
    for k, e in enumerate(events):
        if e.time_ns > it.end_ns:
            break
        live[category_of(category, block_of[k])] += e.delta_bytes
        total += e.delta_bytes
        phase = next((m for m in e.marks if m in PHASES), None)
        if e.time_ns >= it.start_ns and phase and (phase not in out or total > out[phase]["bytes"]):
            out[phase] = {"bytes": total, "categories": dict(live)}
    return out


def peak_detail(events, windows, baseline) -> dict:
    """Where ``iteration0``'s first highest point falls and what is live there: ``phase`` (the memlab
    marks around the event that reached it), ``op`` (its allocating call), ``bytes`` (the peak), and
    ``blocks``: per category, the number of live blocks by allocating call (its last three ranges)
    and size, ``{category: {"call | bytes": count}}``."""
    it = window(windows, "iteration0")
    block_of, blocks = pair_blocks(events)
    category = block_categories(blocks, windows, baseline, it.start_ns)
    live: set[int] = set()
    total, best, at, best_live = 0, None, None, set()
    for k, e in enumerate(events):
        if e.time_ns > it.end_ns:
            break
        total += e.delta_bytes
        if block_of[k] is not None:
            (live.add if e.delta_bytes > 0 else live.discard)(block_of[k])
        if e.time_ns >= it.start_ns and (best is None or total > best):
            best, at, best_live = total, k, set(live)
    if at is None:
        return {}
    first = {b: k for k, b in enumerate(block_of) if b is not None and events[k].delta_bytes > 0}
    out: dict[str, dict[str, int]] = {}
    for b in sorted(best_live):
        e = events[first[b]]
        where = f"{' > '.join(e.stack[-3:]) or e.op} | {e.delta_bytes}"
        cat = out.setdefault(category_of(category, b), {})
        cat[where] = cat.get(where, 0) + 1
    top = {c: dict(sorted(v.items(), key=lambda kv: -kv[1] * int(kv[0].rsplit("| ", 1)[1]))[:PEAK_BLOCKS_KEPT])
           for c, v in out.items()}
    return {"phase": "/".join(m for m in events[at].marks if m != "iteration0"), "op": events[at].op,
            "bytes": best, "blocks": top}


def held_outside_categories(events, windows, baseline) -> dict[str, int]:
    """Bytes in no named category live through all of ``iteration0`` (held across the step: allocated
    before it, not freed in it), by the allocating call's enclosing ranges (the last three)."""
    return _uncategorised(events, windows, baseline, across=True)


def unfreed_in_step(events, windows, baseline) -> dict[str, int]:
    """Bytes in no named category allocated inside ``iteration0`` and never freed in the trace, by the
    allocating call's enclosing ranges (the last three)."""
    return _uncategorised(events, windows, baseline, across=False)


def _uncategorised(events, windows, baseline, *, across: bool) -> dict[str, int]:
    it = window(windows, "iteration0")
    _, blocks = pair_blocks(events)
    category = block_categories(blocks, windows, baseline, it.start_ns)
    allocs = [e for e in events if e.delta_bytes > 0]
    out: dict[str, int] = {}
    for i, (b, e) in enumerate(zip(blocks, allocs)):
        if across:
            keep = b.alloc_ns < it.start_ns and (b.free_ns is None or b.free_ns > it.end_ns)
        else:
            keep = it.start_ns <= b.alloc_ns <= it.end_ns and b.free_ns is None
        if keep and i not in category:
            where = " > ".join(e.stack[-3:]) or e.op
            out[where] = out.get(where, 0) + e.delta_bytes
    return out


def traced_step(sizes: Sizes, strategy: str, reshard: bool, rank: int, world: int,
                device: torch.device, warmup: int = 2) -> TracedStep:
    """Build, wrap, warm up (``warmup`` steps) and trace one step on this rank (NOTE [ a rank's traced
    step ]); with ``sizes.checkpoint_blocks`` every block checkpointed (:mod:`.checkpointing`)."""
    losses: list[float] = []
    gc.collect()   # a previous strategy's cycles freed now, not inside this recording
    with AllocationRecorder(device) as rec:
        model = build_model(sizes, device)
        with checkpointing(model, sizes.checkpoint_blocks):
            w = wrap(model, strategy, reshard=reshard)
            x, target = batch(sizes, device, rank, world)
            step = _step_fn(sizes, w, x, target, losses, Probe([]))
            for _ in range(warmup):
                step()
            gc.collect()
            rec.iterations(step, 1)
    events, windows = rec.result()
    events, count, nbytes = repair_dropped_frees(events)
    base = _baseline(w, x, target)
    cats = categorise(events, windows, base)[0]
    return TracedStep(cats, category_maxima(events, windows, base), losses, w, (count, nbytes),
                      held_outside_categories(events, windows, base), unfreed_in_step(events, windows, base),
                      peak_detail(events, windows, base), phase_peaks(events, windows, base))
