"""Seeded tensor construction that gives the same values on every device."""
from __future__ import annotations

import torch

__all__ = ["seeded_randn"]


def seeded_randn(
    generator: torch.Generator, *shape: int, device: torch.device, dtype: torch.dtype, scale: float = 1.0
) -> torch.Tensor:
    """Standard normal values drawn on the CPU in float64 from ``generator``, then moved.

    Drawing on the CPU in float64 makes the values independent of the target device and dtype, so a
    float64 CPU check and a float32 CUDA run see the same numbers (up to rounding).
    """
    t = torch.randn(*shape, generator=generator, dtype=torch.float64) * scale
    return t.to(device=device, dtype=dtype)
