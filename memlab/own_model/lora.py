"""Low-rank adapters on a model's ``nn.Linear`` layers, the base frozen (LoRA: Hu et al. 2021,
"LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685).

Each ``nn.Linear`` ``y = x W^T + b`` (``W`` [out, in]; or a ``transformers`` ``Conv1D``, GPT-2's
``y = x W + b`` with ``W`` [in, out]) becomes ``y = base(x) + (x A^T) B^T``
with ``A`` [r, in] and ``B`` [out, r] trainable and ``W``, ``b`` and every other parameter of the
model frozen (``requires_grad=False``).  ``B`` starts at zero, so the adapted model computes what
the base computes until the first update; ``A`` starts as ``nn.Linear`` initialises a weight
(Kaiming-uniform, ``a=sqrt(5)``, as PEFT does).  The scale ``alpha / r`` is 1 (``alpha = r``).
A training step then has gradients and optimizer state for the adapters only: ``r * (in + out)``
elements per layer instead of ``in * out (+ out)``.

# NOTE [ LoRA adapters ]
The adapters are drawn on the CPU in float32 from the problem's seed (``torch.random.fork_rng``:
the caller's RNG state is left as it was), in the order ``named_modules`` lists the layers, then
cast to the layer's dtype and moved to its device: the float64 reference check and a float32
measurement start from the same values, rounded (as NOTE [ model file seeding and dtype ] does for
the model).  A layer that appears under two names (a shared module) gets one adapter, set at both.
The ``nn.Linear`` inside an ``nn.MultiheadAttention`` (``out_proj``) is left frozen without an
adapter: the attention reads its weight directly and never calls it.
Evidence: tests/test_lora.py (outputs equal the base model's; gradients and optimizer state are
the adapters', to the byte)
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LoRALinear", "add_adapters", "adapter_parameters", "adapter_targets", "linear_features"]


class LoRALinear(nn.Module):
    """``base(x) + (x @ lora_a.T) @ lora_b.T``: a frozen linear layer (``base``: :func:`linear_features`)
    and a rank-``rank`` update, ``lora_a`` [rank, in] and ``lora_b`` [out, rank] (zero at the start).
    Shapes: ``x`` [..., in] -> [..., out], in the layer's dtype."""

    def __init__(self, base: nn.Module, rank: int):
        super().__init__()
        found = linear_features(base)
        if found is None:
            raise TypeError(f"a {type(base).__name__} is not a linear layer LoRA adapts (nn.Linear, or "
                            f"transformers' Conv1D)")
        self.base = base
        a = torch.empty(rank, found[0])
        nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        like = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.lora_a = nn.Parameter(a.to(**like))
        self.lora_b = nn.Parameter(torch.zeros(found[1], rank, **like))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + F.linear(F.linear(x, self.lora_a), self.lora_b)


def linear_features(layer: nn.Module) -> tuple[int, int] | None:
    """``(in, out)`` of a linear layer LoRA adapts: an ``nn.Linear`` (weight [out, in]), or a
    ``transformers`` ``Conv1D`` (GPT-2's projections: weight [in, out], ``nx`` in, ``nf`` out; known by
    its name and shape, so memlab needs no ``transformers``); None for anything else."""
    if isinstance(layer, nn.Linear):
        return layer.in_features, layer.out_features
    nx, nf, weight = getattr(layer, "nx", None), getattr(layer, "nf", None), getattr(layer, "weight", None)
    if type(layer).__name__ == "Conv1D" and isinstance(weight, torch.Tensor) and tuple(weight.shape) == (nx, nf):
        return nx, nf
    return None


def adapter_targets(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(dotted name, layer)`` of every linear layer (:func:`linear_features`) outside an
    ``nn.MultiheadAttention``, shared modules under each of their names (NOTE [ LoRA adapters ])."""
    named = list(model.named_modules(remove_duplicate=False))
    attention = [name for name, m in named if isinstance(m, nn.MultiheadAttention)]
    return [(name, m) for name, m in named if name and linear_features(m) is not None
            and not any(name.startswith(a + ".") for a in attention)]


def add_adapters(model: nn.Module, rank: int, seed: int) -> list[str]:
    """Freeze every parameter of ``model`` and put a :class:`LoRALinear` of rank ``rank`` in place of
    each linear layer (:func:`adapter_targets`, NOTE [ LoRA adapters ]), in place; returns the dotted
    names replaced."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank={rank!r} is not valid: expected a whole number >= 1")
    model.requires_grad_(False)
    adapted: dict[int, LoRALinear] = {}
    names = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for name, layer in adapter_targets(model):
            if id(layer) not in adapted:
                adapted[id(layer)] = LoRALinear(layer, rank)
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, adapted[id(layer)])
            names.append(name)
    return names


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every adapter's ``lora_a`` and ``lora_b`` in ``model``, each once."""
    seen: dict[int, nn.Parameter] = {}
    for m in model.modules():
        if isinstance(m, LoRALinear):
            seen.setdefault(id(m.lora_a), m.lora_a)
            seen.setdefault(id(m.lora_b), m.lora_b)
    return list(seen.values())
