"""A memlab model file (``build()``, ``batch(size, **sizes)``, optional ``loss``: docs/model-files.md)
as the sharded step's model: ``python -m memlab.sharding --model examples/gpt2.py``.

The file is imported once per process under a private module name (no family is registered); its
model is built with the global RNG seeded (the same weights on every rank and in the reference), its
global batch of ``G`` samples made the same way and split by rows (every tensor's dim 0) over the
ranks, its loss the one memlab measures a model file with (:func:`memlab.own_model.workload.loss_of`).
FSDP's per-block units are the blocks memlab's ``checkpoint_blocks`` finds
(:func:`memlab.functional.blocks.find_blocks`).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

from ..functional.blocks import find_blocks
from ..own_model.workload import ModelFile, loss_of, read_model_module

__all__ = ["is_model_file", "load", "build", "global_batch", "file_loss", "file_blocks"]

_LOADED: dict[str, ModelFile] = {}


def is_model_file(model: str) -> bool:
    """A ``--model`` value naming a Python file (``*.py``) rather than a built-in model."""
    return model.endswith(".py")


def load(path: str) -> ModelFile:
    """The model file's functions (imported once per process). FileNotFoundError naming the path;
    ModelFileError for a file without ``build``/``batch``."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"model={path!r} is not valid; valid: mlp, transformer or an existing model file (*.py)")
    key = str(p.resolve())
    if key not in _LOADED:
        spec = importlib.util.spec_from_file_location(f"memlab_sharded_{len(_LOADED)}_{p.stem}", key)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _LOADED[key] = read_model_module(module, key)
    return _LOADED[key]


def build(path: str, seed: int) -> nn.Module:
    """The file's model, its weights from the global RNG seeded with ``seed`` (the RNG restored after)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return load(path).build()


def global_batch(path: str, size: int, seq: int, seed: int, rank: int, world: int, device: torch.device) -> dict:
    """Rank ``rank``'s rows of the file's seeded global batch of ``size`` samples (``seq`` passed as
    ``batch``'s ``seq`` where it takes one): ``{name: tensor [size/world, ...]}``."""
    mf = load(path)
    kwargs = {"seq": seq} if "seq" in mf.sizes else {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        data = mf.batch(size, **kwargs)
    if isinstance(data, torch.Tensor):
        data = {"input": data}
    rows = size // world
    mine: dict[int, torch.Tensor] = {}   # one copy per tensor: a batch may name one tensor twice (GPT-2's labels)
    for v in data.values():
        if id(v) not in mine:
            mine[id(v)] = v[rank * rows:(rank + 1) * rows].clone().to(device)
    return {k: mine[id(v)] for k, v in data.items()}


def file_loss(path: str, model: nn.Module, data: dict) -> torch.Tensor:
    """The scalar loss memlab measures the file with, on ``data``."""
    return loss_of(load(path), model, data)


def file_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks (:func:`~memlab.functional.blocks.find_blocks`); ValueError when none."""
    found = find_blocks(model)
    if found is None:
        raise ValueError("the model file's model has no nn.ModuleList or nn.Sequential of repeated blocks; "
                         "valid: a model with one (FSDP wraps each block)")
    return [b for group in found.modules for b in group]
