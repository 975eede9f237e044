"""Parsing and validating ``device`` and ``dtype`` arguments (without initialising CUDA early)."""
from __future__ import annotations

import torch

from ..core import setting

__all__ = ["parse_device", "parse_dtype", "DTYPES", "device_label", "synchronize"]

#: each dtype name of :data:`memlab.core.setting.DTYPES` -> its torch dtype
DTYPES = {name: getattr(torch, name) for name in setting.DTYPES}


def parse_device(text: str) -> torch.device:
    """``'cpu'``, ``'cuda'`` or ``'cuda:N'`` -> torch.device; ValueError otherwise or without a GPU."""
    if not isinstance(text, str):
        raise ValueError(f"device={text!r} is not valid; valid devices: cpu, cuda, cuda:N")
    try:
        dev = torch.device(text)
    except RuntimeError:
        raise ValueError(f"device={text!r} is not valid; valid devices: cpu, cuda, cuda:N") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(f"device={text!r} is not supported; valid devices: cpu, cuda, cuda:N")
    if not torch.cuda.is_available():
        raise ValueError(f"device={text!r} requested but no CUDA GPU is available here; use device='cpu'")
    count = torch.cuda.device_count()
    index = 0 if dev.index is None else dev.index
    if index >= count:
        raise ValueError(f"device={text!r} does not exist; valid: cuda:0..cuda:{count - 1}")
    return torch.device("cuda", index)


def parse_dtype(text: str) -> torch.dtype:
    try:
        return DTYPES[text]
    except (KeyError, TypeError):
        raise ValueError(f"dtype={text!r} is not valid; valid dtypes: {', '.join(DTYPES)}") from None


def device_label(dev: torch.device) -> str:
    return "cpu" if dev.type == "cpu" else f"cuda:{dev.index or 0}"


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA); a no-op on CPU, whose operations run synchronously."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
