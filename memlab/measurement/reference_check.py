"""One technique's reference check on its check configuration, in this process (the isolated child
of ``memlab check`` runs it: :mod:`memlab.checks`, NOTE [ fork server ])."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..registry import get_technique
from ..technique import TechniqueUnavailable
from .verify import Verification, verify_technique

__all__ = ["CheckOutcome", "check_technique", "check_outcome", "first_line"]


@dataclass(frozen=True)
class CheckOutcome:
    """One technique's check: ``PASS``/``FAIL`` (with ``verification``), ``ERROR`` (the technique
    raised, or its isolated child exited, died or timed out: ``message`` says which, in one line) or
    ``SKIP`` (unavailable here)."""

    name: str
    verdict: str
    verification: Verification | None = None
    message: str = ""

    def line(self) -> str:
        """One line for the terminal, never a traceback."""
        detail = self.verification.line() if self.verification is not None else self.message
        return f"{self.verdict:<5} {self.name}: {detail}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (errors as floats; see :meth:`from_dict`)."""
        return {"name": self.name, "verdict": self.verdict, "message": self.message,
                "verification": None if self.verification is None else asdict(self.verification)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CheckOutcome":
        """The outcome :meth:`to_dict` wrote (e.g. in the isolated child)."""
        v = d.get("verification")
        verification = None if v is None else Verification(**{**v, "not_compared": tuple(v.get("not_compared", ()))})
        return cls(d["name"], d["verdict"], verification, d.get("message", ""))


def check_technique(name: str, *, dtype: torch.dtype = torch.float64, mode: str = "train") -> Verification:
    """Verify one technique on its check configuration (CPU).  Exceptions of the technique propagate."""
    technique = get_technique(name).for_check()
    technique.check_available(torch.device("cpu"))
    return verify_technique(technique, torch.device("cpu"), dtype, mode=mode)


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters of it)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def check_outcome(name: str, *, mode: str = "train") -> CheckOutcome:
    """Check one technique in this process; an exception of the technique becomes ``ERROR``
    (``SystemExit`` and ``KeyboardInterrupt`` are not caught)."""
    try:
        v = check_technique(name, mode=mode)
    except TechniqueUnavailable as exc:
        return CheckOutcome(name, "SKIP", message=f"unavailable: {exc}")
    except Exception as exc:  # noqa: BLE001 - a plug-in may raise anything; report it in one line
        return CheckOutcome(name, "ERROR", message=first_line(exc))
    return CheckOutcome(name, "PASS" if v.ok else "FAIL", v)
