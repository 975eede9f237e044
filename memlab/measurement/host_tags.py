"""Where each traced allocation would live when the step runs on CUDA: the device, the host, or nowhere.

# NOTE [ device tags ]
memlab's CPU trace (NOTE [ exact CPU allocated bytes ]) records every allocation through c10's CPU
allocator.  Run on a GPU, most of them are device memory, but not all: some tensors stay on the
host even there, and some allocations exist only because the kernels ran on the CPU.  Each
allocation gets one *place*, decided by the first rule of :data:`RULES` that matches it (a free
takes its allocation's place):

* ``device`` (no rule matched): the CUDA replay (NOTE [ predicted CUDA memory ]) allocates it;
* ``host``: it is host memory on a GPU too; the replay leaves it out and counts it in
  ``predicted_cuda["host_bytes"]``;
* ``cpu_only``: a CPU kernel's own scratch, with no counterpart on a GPU; left out of both.

A rule sees the allocation's size, the operator that made it (``op``, the innermost profiler range),
the enclosing ranges (``stack``, outermost first), the memlab markers around it (``marks``:
``memlab.host_memory()``'s ``host``), and when its free came relative to the end of the operator that
made it.  Rules are matched, not guessed: each names the code path it recognises, and anything else
stays ``device`` (the replay then over- rather than under-predicts).  What no rule can know from a
CPU trace: ``torch.tensor(x)`` without ``device=`` in a technique's own code (a host tensor on a GPU,
identical in the CPU trace to ``torch.tensor(x, device=dev)``); mark such code with
:func:`memlab.host_memory`.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch

__all__ = ["PLACES", "TagRule", "RULES", "ONEDNN_OPS", "HOST_MARK", "rng_state_bytes", "place_of", "tag_events"]

#: every place an allocation can have (see NOTE [ device tags ])
PLACES = ("device", "host", "cpu_only")
#: the memlab marker whose range makes every allocation inside it host memory
HOST_MARK = "host"
#: CPU convolution kernels whose own allocations (not those of operators they call) are oneDNN
#: reorders of the input, weight and output into blocked layouts and their scratch pads (float32,
#: bfloat16), or the im2col column buffers of the slow path (float64)
ONEDNN_OPS = frozenset({"aten::mkldnn_convolution", "aten::mkldnn_convolution_backward", "aten::convolution_backward",
                        "aten::_convolution", "aten::mkldnn_linear", "aten::mkldnn_max_pool2d",
                        "aten::_mkldnn_reshape", "aten::mkldnn_rnn_layer", "aten::_slow_conv2d_forward",
                        "aten::_slow_conv2d_backward", "aten::slow_conv3d_forward", "aten::slow_conv_dilated2d"})
#: largest 0-dim tensor (bytes): complex128 is 16, but wrapped Python numbers are 8 (double, int64)
_SCALAR_BYTES = 8


@functools.lru_cache(maxsize=1)
def rng_state_bytes() -> int:
    """Bytes of ``torch.get_rng_state()`` in this build (5,056 with torch 2.13: the mt19937 state).

    Called after recording (the tensor it makes must not enter a trace)."""
    return int(torch.get_rng_state().numel())


def _is_operator(name: str) -> bool:
    """A dispatcher operator's profiler range (``aten::mm``), as opposed to an autograd node,
    ``torch.autograd.Function`` or user range (``CheckpointFunction``, ``Optimizer.step#SGD.step``)."""
    return "::" in name and not name.startswith(("autograd::", "torch::autograd::"))


@dataclass(frozen=True)
class TagRule:
    """One rule of :data:`RULES`.

    Attributes:
        name: what the rule recognises (recorded on the events it tags: ``AllocEvent.rule``).
        place: ``host`` or ``cpu_only``.
        why: why that allocation has that place on a GPU.
        match: ``(event, rng_bytes) -> bool`` on the allocation (``delta_bytes`` > 0).
        scope: 0 = the match alone decides; k >= 1 = the block must also be freed before the k-th
            enclosing range from the innermost ends (1: the operator that made it), checked by
            :func:`tag_events` once the free is seen; a block never freed is not matched.
    """

    name: str
    place: str
    why: str
    match: Callable[[Any, int], bool]
    scope: int = 0


def _marked_host(e, rng: int) -> bool:
    return HOST_MARK in e.marks


def _rng_state(e, rng: int) -> bool:
    return e.delta_bytes == rng and not _is_operator(e.op)


def _python_scalar(e, rng: int) -> bool:
    return e.delta_bytes <= _SCALAR_BYTES and not _is_operator(e.op)


def _optimizer_step_count(e, rng: int) -> bool:
    return (e.delta_bytes <= _SCALAR_BYTES and len(e.stack) >= 2 and e.stack[-1] == "aten::empty"
            and e.stack[-2].startswith("Optimizer.step#"))


def _scalar_cast(e, rng: int) -> bool:
    tail = e.stack[-4:]
    return (e.delta_bytes <= _SCALAR_BYTES and len(tail) == 4 and tail[1:] == ("aten::to", "aten::_to_copy",
            "aten::empty_strided") and _is_operator(tail[0]) and tail[0] != "aten::to")


def _onednn_scratch(e, rng: int) -> bool:
    return e.op in ONEDNN_OPS


#: the rules, first match wins (NOTE [ device tags ])
RULES: tuple[TagRule, ...] = (
    TagRule("marked_host", "host",
            "inside a memlab::host range: memlab.host_memory(), or the pack hook of "
            "torch.autograd.graph.save_on_cpu (instrumented while recording), whose copies are host memory",
            _marked_host),
    TagRule("rng_state", "host",
            "torch.get_rng_state() (torch.utils.checkpoint saves one per checkpoint, and torch.random.fork_rng "
            "one per recomputation): a CPU ByteTensor on every device, made by Generator.get_state outside any "
            "operator; matched by its exact size (rng_state_bytes()) and the absence of an enclosing operator",
            _rng_state),
    TagRule("python_scalar", "host",
            "a Python number wrapped into a 0-dim CPU tensor by the Python binding before dispatch (tensor.add_(1) "
            "in optimizer code): wrapped numbers stay on the host even when the other operand is on a GPU",
            _python_scalar),
    TagRule("optimizer_step_count", "host",
            "a 0-dim tensor made by torch.tensor(0.0) directly inside Optimizer.step: torch.optim's step "
            "counters (Adam, AdamW, Adagrad... without capturable/fused) are created without device=, on the host",
            _optimizer_step_count),
    TagRule("scalar_cast", "cpu_only",
            "an operator's copy of a 0-dim operand into the common dtype (TensorIterator on CPU casts operands "
            "in temporaries; CUDA kernels read CPU scalars and cast on the fly)",
            _scalar_cast, scope=4),
    TagRule("onednn_scratch", "cpu_only",
            "made by a CPU convolution kernel itself (no operator in between) and freed before it returns: "
            "oneDNN reorders into blocked layouts and scratch pads; cuDNN's workspace comes from the calibration "
            "table instead (memlab.cuda_replay.calibration)",
            _onednn_scratch, scope=1),
)


def place_of(e, rng: int | None = None, rules: Sequence[TagRule] = RULES) -> TagRule | None:
    """The first rule matching the allocation ``e`` (its ``scope`` still to be checked), or None: device."""
    rng = rng_state_bytes() if rng is None else rng
    for rule in rules:
        if rule.match(e, rng):
            return rule
    return None


def _freed_in_scope(alloc, free_ns: int, scope: int) -> bool:
    ends = alloc.stack_end_ns
    return scope == 0 or (len(ends) >= scope and free_ns <= ends[-scope])


def tag_events(events: Iterable, rng: int | None = None, rules: Sequence[TagRule] = RULES) -> list:
    """``events`` (time-ordered :class:`~memlab.core.record.AllocEvent`) with ``place`` and
    ``rule`` set by :data:`RULES`; a free gets its allocation's (NOTE [ device tags ])."""
    rng = rng_state_bytes() if rng is None else rng
    out = list(events)
    live: dict[int, tuple[int, TagRule | None]] = {}   # ptr -> (index of its allocation, rule matched)
    for i, e in enumerate(out):
        if e.delta_bytes > 0:
            rule = place_of(e, rng, rules)
            live[e.address] = (i, rule)
            if rule is not None and rule.scope == 0:
                out[i] = dataclasses.replace(e, place=rule.place, rule=rule.name)
            continue
        j, rule = live.pop(e.address, (None, None))
        if rule is None or not _freed_in_scope(out[j], e.time_ns, rule.scope):
            continue   # device memory (a scratch rule's block that outlived its operator is an output)
        out[j] = dataclasses.replace(out[j], place=rule.place, rule=rule.name)
        out[i] = dataclasses.replace(e, place=rule.place, rule=rule.name)
    return out
