"""The automatic reference check every technique gets, built-in or plug-in.

Each technique runs on its workload's small ``check_params`` (plus its own ``check_params``) in
float64 on the CPU; outputs and all gradients must match the workload reference within
``technique.tolerance("float64")`` (the workload's, see :data:`memlab.workload.DEFAULT_TOLERANCES`,
unless the technique declares its own), and the step must leave inputs and parameters unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .measurement.verify import Verification, verify_technique
from .registry import get_technique, list_techniques
from .technique import TechniqueUnavailable

__all__ = ["check_technique", "check_all", "CheckOutcome"]


@dataclass(frozen=True)
class CheckOutcome:
    """One technique's check: ``PASS``/``FAIL`` (with ``verification``), ``ERROR`` (the technique
    raised: ``message`` is the exception's first line) or ``SKIP`` (unavailable here)."""

    name: str
    verdict: str
    verification: Verification | None = None
    message: str = ""

    def line(self) -> str:
        """One line for the terminal, never a traceback."""
        detail = self.verification.line() if self.verification is not None else self.message
        return f"{self.verdict:<5} {self.name}: {detail}"


def check_technique(name: str, *, dtype: torch.dtype = torch.float64, mode: str = "train") -> Verification:
    """Verify one technique on its check configuration (CPU).  Exceptions of the technique propagate."""
    technique = get_technique(name).for_check()
    technique.check_available(torch.device("cpu"))
    return verify_technique(technique, torch.device("cpu"), dtype, mode=mode)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def check_all(names: list[str] | None = None, *, mode: str = "train") -> list[CheckOutcome]:
    """Check every technique (or ``names``); one technique's failure never stops the others."""
    out: list[CheckOutcome] = []
    for name in names or list_techniques():
        try:
            v = check_technique(name, mode=mode)
        except TechniqueUnavailable as exc:
            out.append(CheckOutcome(name, "SKIP", message=f"unavailable: {exc}"))
        except Exception as exc:  # noqa: BLE001 - a plug-in may raise anything; report it in one line
            out.append(CheckOutcome(name, "ERROR", message=_first_line(exc)))
        else:
            out.append(CheckOutcome(name, "PASS" if v.ok else "FAIL", v))
    return out
