"""Live bytes by category, attributed by storage identity in the exact allocation trace.

# NOTE [ memory categories ]
Every allocation a step makes is one block (address, size, allocation time, free time) in the
profiler's allocation events (NOTE [ exact CPU allocated bytes ]).  Each block gets one category:

* ``parameters``: the model's parameters and buffers (``state_dict(keep_vars=True)``);
* ``optimizer_state``: every tensor in ``optimizer.state`` (momentum, Adam's ``exp_avg`` and
  ``exp_avg_sq``, its ``step`` counters);
* ``inputs``: the problem's inputs and the upstream gradient: the preallocated ``grad_output``
  (``loss="given"``), or the gradient a loss computes for the output inside the step;
* ``gradients``: every storage that held a leaf's ``.grad`` (parameters and grad-requiring inputs);
* ``saved_activations``: storages autograd saved for backward (``save_for_backward`` and every
  built-in op's saved tensors), in forward or in a recomputation during backward;
* ``temporaries``: everything else (outputs, intermediate results, a kernel's scratch, a gradient
  being computed before it reaches a leaf...).

The first three are known by address before the step: the blocks live at the first measured
iteration's start whose address is a storage of those tensors.  The others are observed during the
step by a :class:`Probe`: a ``saved_tensors_hooks`` pack hook, ``register_post_accumulate_grad_hook``
on the leaves, a hook on the output's gradient, and a sweep of the leaves' ``.grad`` after backward.
Each observation emits a zero-length profiler marker ``memlab::saved:ADDR`` (``grad:``,
``upstream:``) in the same event tree as the allocations, so it has a time on the same clock; the
block at ``ADDR`` whose lifetime contains that time takes the category (precedence: the known
baseline categories, then gradients, upstream gradient, saved activations).  A block is one
category for its whole lifetime: a gradient counts as a gradient from its allocation (while backward
still fills it), a saved tensor from the op that produced it.  The replay sums the same deltas as
:func:`~memlab.measurement.alloc_trace.iteration_stats`, so the categories add up to the live bytes to
the byte at every event.

The hooks observe without changing what is measured: the pack hook returns a detached alias of the
same storage (no copy, no reference cycle through the output's ``grad_fn``), the unpack hook returns
it; no ``TorchDispatchMode`` is active, so autograd keeps its in-place gradient accumulation.
Tests compare peaks with and without the probe for every built-in technique.
Limits: ``torch.func.grad``/``vjp``/``jacrev``/``hessian`` refuse to run under saved-tensor
hooks; a technique that calls them is measured again without the pack hook, its saved tensors then
counted as temporaries (``extra["saved_activations_separated"] = False`` says so).  A technique that
installs its own saved-tensor hooks (``torch.utils.checkpoint`` with
``use_reentrant=False``, activation offloading) hides what it keeps from this category: its
checkpointed inputs and recomputed tensors show as temporaries.  Storages kept on ``ctx`` attributes
rather than through ``save_for_backward`` are temporaries too.
"""
from __future__ import annotations

import bisect
import contextlib
from dataclasses import dataclass
from typing import Iterable, Mapping

import torch
from torch.profiler import record_function

from ..core.record import ACTIVATION_CATEGORIES, CATEGORIES, Category
from .alloc_trace import AllocEvent, Window

__all__ = ["CATEGORIES", "ACTIVATION_CATEGORIES", "Probe", "IterationCategories", "baseline_categories",
           "categorise", "refuses_saved_hooks", "Block", "pair_blocks", "block_categories", "category_of", "mark_saved"]


_MARK = "memlab::"
_OBSERVED = {"grad": Category.GRADIENTS, "upstream": Category.INPUTS, "saved": Category.SAVED_ACTIVATIONS}
_PRECEDENCE = (Category.GRADIENTS, Category.INPUTS, Category.SAVED_ACTIVATIONS)


def _ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no storage (sparse, nested...): nothing to mark
        return 0


def _mark(kind: str, t: torch.Tensor | None) -> None:
    if t is None:
        return
    ptr = _ptr(t)
    if ptr:
        with record_function(f"{_MARK}{kind}:{ptr}"):
            pass


def mark_saved(t: torch.Tensor | None) -> None:
    """Mark ``t``'s storage as saved for backward now (``memlab::saved:ADDR``): for a saved-tensor
    hook that keeps tensors its own way (memlab.sharding.checkpointing's recomputation)."""
    _mark("saved", t)


def _pack(t: torch.Tensor):
    _mark("saved", t)
    return t.detach()


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def _on_grad(leaf: torch.Tensor) -> None:
    _mark("grad", leaf.grad)


def _on_upstream(grad: torch.Tensor) -> None:
    _mark("upstream", grad)


class Probe:
    """Marks saved tensors, the leaves' gradients and the upstream gradient in the profiler trace.

    Used by the measured steps only (:func:`memlab.measurement.step.make_step`'s ``step(probe)``)::

        with Probe(problem.leaves()) as probe:      # gradient hooks on the leaves
            recorder.iterations(lambda: step(probe), n)

    See NOTE [ memory categories ].
    """

    def __init__(self, leaves: Iterable[torch.Tensor], *, saved: bool = True):
        self.leaves = [t for t in leaves if t.requires_grad and t.is_leaf]
        self.saved = saved
        self._handles: list = []

    def __enter__(self) -> "Probe":
        self._handles = [t.register_post_accumulate_grad_hook(_on_grad) for t in self.leaves]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def saving(self):
        """A ``saved_tensors_hooks`` context marking every tensor autograd saves inside it (a null
        context with ``saved=False``: see :func:`refuses_saved_hooks`)."""
        if not self.saved:
            return contextlib.nullcontext()
        return torch.autograd.graph.saved_tensors_hooks(_pack, _unpack)

    @staticmethod
    def upstream(out: torch.Tensor) -> None:
        """Mark the gradient that reaches ``out`` in backward (the upstream gradient)."""
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(_on_upstream)

    def gradients(self) -> None:
        """Mark every leaf's ``.grad`` as it stands (after backward): set by hand or accumulated."""
        for t in self.leaves:
            _mark("grad", t.grad)


def refuses_saved_hooks(exc: BaseException) -> bool:
    """True for the error ``torch.func.grad``/``vjp``/``jacrev``/``hessian`` raise under
    saved-tensor hooks: such a technique is measured with ``Probe(saved=False)``, its saved
    activations counted as temporaries."""
    return isinstance(exc, RuntimeError) and "support saved tensor hooks" in str(exc)


def baseline_categories(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor], grad_output,
                        optimizer: torch.optim.Optimizer | None) -> dict[int, str]:
    """``{storage address: category}`` for the tensors that live between steps."""
    found: dict[int, str] = {}

    def add(objs, category: str) -> None:
        for o in objs:
            if isinstance(o, torch.Tensor):
                ptr = _ptr(o)
                if ptr:
                    found.setdefault(ptr, category)
            elif isinstance(o, dict):
                add(o.values(), category)
            elif isinstance(o, (list, tuple)):
                add(o, category)

    add(model.state_dict(keep_vars=True).values(), Category.PARAMETERS)
    add(inputs.values(), Category.INPUTS)
    add([grad_output], Category.INPUTS)
    if optimizer is not None:
        add([dict(s) for s in optimizer.state.values()], Category.OPTIMIZER_STATE)
    return found


@dataclass(frozen=True)
class IterationCategories:
    """Bytes by category (all of :data:`CATEGORIES`, baseline included) in one measured iteration.

    Attributes:
        start: live at the iteration's start.
        peak: live at the first moment the iteration's live bytes reach their maximum.
        end: live at the iteration's end.
        activation_peak_bytes: the highest ``saved_activations + temporaries`` during forward and
            backward, above their level at the iteration's start; ``activation_peak_phase`` says
            in which phase (``forward``/``backward``) it was first reached.
    """

    start: dict[str, int]
    peak: dict[str, int]
    end: dict[str, int]
    activation_peak_bytes: int
    activation_peak_phase: str

    @property
    def total_peak_bytes(self) -> int:
        return sum(self.peak.values())

    @property
    def peak_above_start_bytes(self) -> int:
        return sum(self.peak.values()) - sum(self.start.values())


def categorise(events: list[AllocEvent], windows: list[Window], baseline: Mapping[int, str]) -> list[IterationCategories]:
    """Replay ``events`` with a category per block; one :class:`IterationCategories` per
    ``memlab::iterationK`` window.  See NOTE [ memory categories ]."""
    iters = [w for w in windows if w.name.startswith("iteration")]
    if not iters:
        return []
    block_of, blocks = pair_blocks(events)
    category = block_categories(blocks, windows, baseline, iters[0].start_ns)
    phases = sorted((w for w in windows if w.name in ("forward", "backward")), key=lambda w: w.start_ns)
    phase_starts = [w.start_ns for w in phases]
    out = []
    live = dict.fromkeys(CATEGORIES, 0)
    k = 0
    for w in iters:
        while k < len(events) and events[k].time_ns < w.start_ns:
            live[category_of(category, block_of[k])] += events[k].delta_bytes
            k += 1
        start = dict(live)
        total = peak_total = sum(live.values())
        peak = dict(live)
        act0 = act_peak = sum(live[c] for c in ACTIVATION_CATEGORIES)
        act_phase = "forward"
        while k < len(events) and events[k].time_ns <= w.end_ns:
            e = events[k]
            cat = category_of(category, block_of[k])
            live[cat] += e.delta_bytes
            total += e.delta_bytes
            if total > peak_total:
                peak_total, peak = total, dict(live)
            if cat in ACTIVATION_CATEGORIES and e.delta_bytes > 0:
                act = sum(live[c] for c in ACTIVATION_CATEGORIES)
                phase = _phase(phases, phase_starts, e.time_ns)
                if phase and act > act_peak:
                    act_peak, act_phase = act, phase
            k += 1
        out.append(IterationCategories(start=start, peak=peak, end=dict(live),
                                       activation_peak_bytes=act_peak - act0, activation_peak_phase=act_phase))
    return out


def category_of(category: dict[int, str], block: int | None) -> str:
    """The category of block number ``block`` (``temporaries`` when unknown or None)."""
    return Category.TEMPORARIES if block is None else category.get(block, Category.TEMPORARIES)


@dataclass
class Block:
    """One allocation's lifetime: its address, when it was allocated and freed (ns; None: still live)."""

    address: int
    alloc_ns: int
    free_ns: int | None = None


def pair_blocks(events: list[AllocEvent]) -> tuple[list[int | None], list[Block]]:
    """Pair allocations with frees by address: the block index of every event (None: a free of a
    block allocated before the trace) and the blocks."""
    blocks: list[Block] = []
    open_at: dict[int, int] = {}
    block_of: list[int | None] = []
    for e in events:
        if e.delta_bytes > 0:
            open_at[e.address] = len(blocks)
            block_of.append(len(blocks))
            blocks.append(Block(e.address, e.time_ns))
        else:
            b = open_at.pop(e.address, None)
            if b is not None:
                blocks[b].free_ns = e.time_ns
            block_of.append(b)
    return block_of, blocks


def block_categories(blocks: list[Block], windows: list[Window], baseline: Mapping[int, str],
                     first_start_ns: int) -> dict[int, str]:
    """Each block's category by index (NOTE [ memory categories ]): ``baseline`` (address -> category)
    for the blocks live when the first measured iteration starts, the probe's marks for the others."""
    by_ptr: dict[int, list[int]] = {}
    for i, b in enumerate(blocks):
        by_ptr.setdefault(b.address, []).append(i)  # in allocation order
    category: dict[int, str] = {}
    for ptr, cat in baseline.items():
        for i in by_ptr.get(ptr, ()):
            b = blocks[i]
            if b.alloc_ns < first_start_ns and (b.free_ns is None or b.free_ns >= first_start_ns):
                category[i] = cat
    starts = {ptr: [blocks[i].alloc_ns for i in ids] for ptr, ids in by_ptr.items()}
    observed: dict[int, set[str]] = {}
    for w in windows:
        kind, _, addr = w.name.partition(":")
        if kind not in _OBSERVED or not addr.isdigit():
            continue
        ids = by_ptr.get(int(addr))
        if not ids:
            continue
        # the newest block at that address allocated by the marker's time, if still live then
        j = bisect.bisect_right(starts[int(addr)], w.start_ns) - 1
        if j < 0:
            continue
        b = blocks[ids[j]]
        if b.free_ns is None or b.free_ns >= w.start_ns:
            observed.setdefault(ids[j], set()).add(_OBSERVED[kind])
    for i, cats in observed.items():
        if i not in category:
            category[i] = next(c for c in _PRECEDENCE if c in cats)
    return category


def _phase(phases: list[Window], starts: list[int], time_ns: int) -> str | None:
    j = bisect.bisect_right(starts, time_ns) - 1
    if j >= 0 and phases[j].start_ns <= time_ns <= phases[j].end_ns:
        return phases[j].name
    return None
