"""The repeated blocks of any ``nn.Module``: finding them, and running them checkpointed.

Pure operations on a module tree (no registry, no measuring), used by the techniques that apply to
any model (:mod:`memlab.own_model.techniques`).

* :func:`find_blocks` guesses the blocks: the containers (``nn.ModuleList`` / ``nn.Sequential``)
  whose children all have one type, grouped by that type; the type that fills the most container
  slots wins, and every container of it is used.  A model with one stack (a GPT's ``h``, 12 x
  ``Block``) gives that stack: the longest list of same-type children.  A CNN with stages (a
  ResNet's ``layer1`` .. ``layer4`` of ``Bottleneck``) gives all its stages.  torch.nn's own layers
  (a list of ``nn.Linear`` heads) are layers, not blocks, and are never chosen.
* :func:`resolve_blocks` takes the user's ``--blocks path.to.list[,other.list]`` instead.
* :func:`checkpoint_each` runs each block under ``torch.utils.checkpoint`` (``use_reentrant=False``,
  an optional ``context_fn``: :func:`matmul_saving_context` saves matmul outputs, the selective
  policy); :func:`checkpoint_sqrt` runs each container's blocks with ``checkpoint_sequential`` in
  ``round(sqrt(n))`` segments.

What is saved for backward: plain autograd keeps every block's saved tensors (O(blocks)).  With
:func:`checkpoint_each` a block keeps only its inputs (and, selectively, its matmul outputs); its
other activations are recomputed during backward, one block at a time.  With :func:`checkpoint_sqrt`
only segment boundaries are kept, and a segment's graph is rebuilt at a time (the last segment runs
plainly, as ``checkpoint_sequential`` does): O(sqrt(blocks)), one extra forward.

# NOTE [ patched block forwards ]
A model calls its blocks from its own ``forward`` (``for b in self.h: x = b(x)``), which memlab
cannot edit.  So the blocks' ``forward`` is replaced, on the instance and only inside the context
managers here, by a wrapper that checkpoints the original bound method; ``nn.Module.__call__``
still runs the block's hooks.  Recomputation in backward calls the saved original, so it is
unaffected by the restore.  For ``checkpoint_sqrt`` over an ``nn.ModuleList`` the first block runs
the whole list through ``checkpoint_sequential`` and the others pass their input through; each
pass-through checks it receives the previous result (``is``), and the context checks all blocks
were called, so a model that does anything between its blocks is refused, never mismeasured.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, checkpoint_sequential, \
    create_selective_checkpoint_contexts

__all__ = ["Blocks", "find_blocks", "resolve_blocks", "blocks_for", "checkpoint_each", "checkpoint_sqrt",
           "sqrt_segments", "matmul_saving_context", "MATMUL_OPS", "candidates_text"]

_CONTAINERS = (nn.ModuleList, nn.Sequential)


@dataclass(frozen=True, eq=False)
class Blocks:
    """The repeated blocks of a model.

    Attributes:
        paths: dotted paths of the containers (``"transformer.h"``), in module order.
        modules: per container, its blocks (the children), in order.
        block_type: the blocks' class name (several joined by ``, `` for a given mixed list).
        found_by: ``"guess"`` (:func:`find_blocks`) or ``"given"`` (``--blocks``).
    """

    paths: tuple[str, ...]
    modules: tuple[tuple[nn.Module, ...], ...] = field(repr=False)
    block_type: str
    found_by: str

    @property
    def count(self) -> int:
        """Blocks in all containers."""
        return sum(len(m) for m in self.modules)

    def containers(self, model: nn.Module) -> list[nn.Module]:
        return [model.get_submodule(p) for p in self.paths]

    def facts(self) -> dict[str, Any]:
        """JSON facts for ``Measurement.extra``: where the blocks are and how many."""
        return {"blocks": ",".join(self.paths), "block_count": self.count, "block_type": self.block_type,
                "blocks_per_container": [len(m) for m in self.modules], "blocks_found_by": self.found_by}


def _is_block_type(cls: type) -> bool:
    """A user's module class or ``nn.Sequential``; not one of torch.nn's own layers (Linear, Conv2d...)."""
    return cls is nn.Sequential or not cls.__module__.startswith("torch.nn.")


def _same_type_containers(model: nn.Module) -> list[tuple[str, nn.Module, type]]:
    """``(path, container, block class)`` for every ModuleList/Sequential of >= 2 children of one
    block type (:func:`_is_block_type`), in module order."""
    found = []
    for path, module in model.named_modules():
        if isinstance(module, _CONTAINERS):
            kinds = {type(c) for c in module.children()}
            if len(module) >= 2 and len(kinds) == 1 and _is_block_type(next(iter(kinds))):
                found.append((path, module, next(iter(kinds))))
    return found


def candidates_text(model: nn.Module) -> str:
    """The containers :func:`find_blocks` considers, for an error message (``'h' (4 x Block)``)."""
    found = _same_type_containers(model)
    return ", ".join(f"{p!r} ({len(m)} x {k.__name__})" for p, m, k in found) or "none"


def find_blocks(model: nn.Module) -> Blocks | None:
    """The model's repeated blocks as guessed (module doc), or None when it has none.

    Example:
        >>> class Net(nn.Module):            # doctest: +SKIP
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.h = nn.ModuleList(Block() for _ in range(4))
        >>> find_blocks(Net()).paths         # doctest: +SKIP
        ('h',)
    """
    found = _same_type_containers(model)
    if not found:
        return None
    slots: dict[type, int] = {}
    for _, container, kind in found:
        slots[kind] = slots.get(kind, 0) + len(container)
    best = max(slots.values())
    kind = next(k for _, _, k in found if slots[k] == best)  # ties: the first in module order
    chosen = [(p, c) for p, c, k in found if k is kind]
    # a container nested inside a block of another chosen container is run by that block: leave it out
    inner = {id(m) for _, c in chosen for block in c for m in block.modules() if m is not block}
    chosen = [(p, c) for p, c in chosen if id(c) not in inner]
    return Blocks(tuple(p for p, _ in chosen), tuple(tuple(c) for _, c in chosen), kind.__name__, "guess")


def resolve_blocks(model: nn.Module, spec: str) -> Blocks:
    """The blocks named by ``spec``: comma-separated dotted paths of ``nn.ModuleList`` /
    ``nn.Sequential`` containers (``"transformer.h"``), each block one child.

    Raises:
        ValueError: a path that is not a submodule, or not such a container with a child; the
            message names it and lists the containers :func:`find_blocks` considers.
    """
    paths = [p.strip() for p in spec.split(",") if p.strip()]
    if not paths:
        raise ValueError(f"blocks={spec!r} names no container: expected dotted paths like 'transformer.h'")
    modules = []
    for path in paths:
        try:
            container = model.get_submodule(path)
        except AttributeError:
            raise ValueError(f"blocks={spec!r}: the model has no submodule {path!r}; its lists of same-type "
                             f"blocks: {candidates_text(model)}") from None
        if not isinstance(container, _CONTAINERS) or len(container) == 0:
            raise ValueError(f"blocks={spec!r}: {path!r} is a {type(container).__name__}, not an nn.ModuleList or "
                             f"nn.Sequential of blocks; its lists of same-type blocks: {candidates_text(model)}")
        modules.append(tuple(container))
    kinds = sorted({type(b).__name__ for m in modules for b in m})
    return Blocks(tuple(paths), tuple(modules), ", ".join(kinds), "given")


def blocks_for(model: nn.Module, spec: str = "") -> Blocks | None:
    """``resolve_blocks(model, spec)`` when ``spec`` names containers, else ``find_blocks(model)``."""
    return resolve_blocks(model, spec) if spec.strip() else find_blocks(model)


def sqrt_segments(blocks: int) -> int:
    """Segments of the sqrt(n) technique: ``round(sqrt(blocks))``, at least 1."""
    return max(1, round(math.sqrt(blocks)))


#: the matmul operators whose outputs :func:`matmul_saving_context` keeps for backward
MATMUL_OPS = (torch.ops.aten.mm.default, torch.ops.aten.bmm.default, torch.ops.aten.addmm.default,
              torch.ops.aten.baddbmm.default)


def _save_matmuls(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in MATMUL_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def matmul_saving_context():
    """The selective-checkpoint contexts whose policy saves the outputs of :data:`MATMUL_OPS` and
    recomputes everything else (``context_fn`` of :func:`checkpoint_each`)."""
    return create_selective_checkpoint_contexts(_save_matmuls)


@contextlib.contextmanager
def _forwards_replaced(replacements: Sequence[tuple[nn.Module, Callable]]) -> Iterator[None]:
    """Within: each module's ``forward`` is its replacement (NOTE [ patched block forwards ])."""
    saved = [(m, m.__dict__.get("forward")) for m, _ in replacements]
    try:
        for module, forward in replacements:
            module.forward = forward
        yield
    finally:
        for module, previous in saved:
            if previous is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = previous


def checkpoint_each(blocks: Blocks, context_fn: Callable | None = None):
    """Context manager: within it, every block runs under ``torch.utils.checkpoint`` (non-reentrant;
    ``context_fn`` e.g. :func:`matmul_saving_context`).  Saved for backward: each block's inputs
    (and what ``context_fn``'s policy saves); the rest is recomputed in backward, block by block."""
    extra = {} if context_fn is None else {"context_fn": context_fn}

    def wrapped(original):
        return lambda *args, **kwargs: checkpoint(original, *args, use_reentrant=False, **extra, **kwargs)

    return _forwards_replaced([(b, wrapped(b.forward)) for m in blocks.modules for b in m])


def _call_with(original: Callable, rest: tuple, kwargs: dict, x):
    return original(x, *rest, **kwargs)


class _SqrtList:
    """One ``nn.ModuleList`` run as ``checkpoint_sequential`` from its first block (NOTE [ patched block forwards ])."""

    def __init__(self, path: str, blocks: tuple[nn.Module, ...], segments: int):
        self.path, self.blocks, self.segments = path, blocks, segments
        self.originals = [b.forward for b in blocks]
        self.expected: int | None = None  # the pass-through block due next, None between passes
        self.out = self.args = None

    def replacements(self) -> list[tuple[nn.Module, Callable]]:
        return [(self.blocks[0], self.head)] + [(b, functools.partial(self.pass_through, i))
                                                for i, b in enumerate(self.blocks) if i]

    def head(self, x, *rest, **kwargs):
        self.done()
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"checkpoint_sqrt needs blocks that take a tensor first; {self.path}[0] got "
                             f"{type(x).__name__}: use checkpoint_blocks")
        functions = [functools.partial(_call_with, f, rest, kwargs) for f in self.originals]
        out = checkpoint_sequential(functions, self.segments, x, use_reentrant=False)
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"checkpoint_sqrt needs blocks that return one tensor; {self.path} returned "
                             f"{type(out).__name__}: use checkpoint_blocks")
        self.out, self.args, self.expected = out, (rest, kwargs), 1 if len(self.blocks) > 1 else None
        return out

    def pass_through(self, index: int, x, *rest, **kwargs):
        same_args = self.args is not None and len(rest) == len(self.args[0]) and all(
            a is b for a, b in zip(rest, self.args[0])) and kwargs.keys() == self.args[1].keys()
        if self.expected != index or x is not self.out or not same_args:
            raise ValueError(f"checkpoint_sqrt: {self.path}[{index}] was not called right after {self.path}"
                             f"[{index - 1}] on its output with the same other arguments; the model does more "
                             f"between its blocks than chaining them: use checkpoint_blocks")
        self.expected = index + 1 if index + 1 < len(self.blocks) else None
        return x

    def done(self) -> None:
        if self.expected is not None:
            raise ValueError(f"checkpoint_sqrt: the model did not call {self.path}[{self.expected}] after "
                             f"{self.path}[0]; it does not run its blocks one after another: use checkpoint_blocks")


@contextlib.contextmanager
def checkpoint_sqrt(model: nn.Module, blocks: Blocks) -> Iterator[list[int]]:
    """Context manager: within it, each container's blocks run as ``checkpoint_sequential`` in
    ``round(sqrt(len))`` segments (non-reentrant); yields the segments per container.

    An ``nn.Sequential`` container's own forward is replaced; an ``nn.ModuleList``'s first block
    runs the list (NOTE [ patched block forwards ]).  Raises ValueError (from the model's forward)
    when the blocks are not a chain of tensor -> tensor calls.
    """
    replacements: list[tuple[nn.Module, Callable]] = []
    lists: list[_SqrtList] = []
    segments = [sqrt_segments(len(m)) for m in blocks.modules]
    for path, container, k in zip(blocks.paths, blocks.containers(model), segments):
        if isinstance(container, nn.Sequential):
            run = functools.partial(checkpoint_sequential, list(container), k, use_reentrant=False)
            replacements.append((container, run))
        else:
            lists.append(_SqrtList(path, tuple(container), k))
            replacements += lists[-1].replacements()
    with _forwards_replaced(replacements):
        yield segments
        for one in lists:
            one.done()
