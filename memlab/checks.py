"""The automatic reference check every technique gets, built-in or plug-in.

Each technique runs on its workload's small ``check_params`` (plus its own ``check_params``) in
float64 on the CPU; outputs and all gradients must match the workload reference within the
workload's float64 tolerance (see :data:`memlab.workload.DEFAULT_TOLERANCES`).
"""
from __future__ import annotations

import torch

from .measure.verify import Verification, verify_technique
from .registry import get_technique, list_techniques
from .technique import TechniqueUnavailable

__all__ = ["check_technique", "check_all"]


def check_technique(name: str, *, dtype: torch.dtype = torch.float64, mode: str = "train") -> Verification:
    """Verify one technique on its check configuration (CPU)."""
    technique = get_technique(name).for_check()
    technique.check_available(torch.device("cpu"))
    return verify_technique(technique, torch.device("cpu"), dtype, mode=mode)


def check_all(names: list[str] | None = None) -> list[tuple[str, Verification | str]]:
    """``(name, Verification)`` per technique, or ``(name, reason)`` when it is unavailable here."""
    out: list[tuple[str, Verification | str]] = []
    for name in names or list_techniques():
        try:
            out.append((name, check_technique(name)))
        except TechniqueUnavailable as exc:
            out.append((name, f"unavailable: {exc}"))
    return out
