"""One technique's reference check on its check configuration, in this process (the isolated child
of ``memlab check`` runs it: :mod:`memlab.measurement.technique_checks`, NOTE [ fork server ])."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..registry import get_technique
from ..core.setting import DEFAULTS
from ..technique import TechniqueUnavailable
from .verify import Verification, verify_technique

__all__ = ["CheckOutcome", "check_technique", "check_outcome", "config_text", "first_line"]


@dataclass(frozen=True)
class CheckOutcome:
    """One technique's check: ``PASS``/``FAIL`` (with ``verification``), ``ERROR`` (the technique
    raised, or its isolated child exited, died or timed out: ``message`` says which, in one line) or
    ``SKIP`` (unavailable here)."""

    name: str
    verdict: str
    verification: Verification | None = None
    message: str = ""
    #: which configuration was checked, when the technique has two (:func:`config_text`); else ``""``
    config: str = ""

    def line(self) -> str:
        """One line for the terminal, never a traceback."""
        detail = self.verification.line() if self.verification is not None else self.message
        return f"{self.verdict:<5} {self.name}{f' [{self.config}]' if self.config else ''}: {detail}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (errors as floats; see :meth:`from_dict`)."""
        return {"name": self.name, "verdict": self.verdict, "message": self.message, "config": self.config,
                "verification": None if self.verification is None else asdict(self.verification)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CheckOutcome":
        """The outcome :meth:`to_dict` wrote (e.g. in the isolated child)."""
        v = d.get("verification")
        verification = None if v is None else Verification(**{**v, "not_compared": tuple(v.get("not_compared", ()))})
        return cls(d["name"], d["verdict"], verification, d.get("message", ""), d.get("config", ""))


def config_text(name: str, as_swept: bool) -> str:
    """``''`` for a technique checked as it is swept; else which of its two configurations
    (NOTE [ two check configurations ]): ``'check configuration: x_requires_grad=False'`` or
    ``'as swept: x_requires_grad=True'``."""
    cls = get_technique(name)
    swept = cls.swept_overrides()
    if not swept:
        return ""
    shown = swept if as_swept else {k: cls.check_params[k] for k in swept}
    return ("as swept: " if as_swept else "check configuration: ") + ", ".join(f"{k}={v}" for k, v in sorted(shown.items()))


def check_technique(name: str, *, dtype: torch.dtype = torch.float64, mode: str = DEFAULTS.mode,
                    as_swept: bool = False) -> Verification:
    """Verify one technique on its check configuration (CPU; ``as_swept``: with the workload parameters a
    sweep publishes, :meth:`~memlab.technique.Technique.swept_overrides`): two forward/backward calls of
    one instance, on seeds 0 and 1, the first failure (else the second) returned.  Exceptions of the
    technique propagate."""
    technique = get_technique(name).for_check(as_swept)
    technique.check_available(torch.device("cpu"))
    first = verify_technique(technique, torch.device("cpu"), dtype, mode=mode)
    if not first.ok:
        return first
    # NOTE [ a check calls twice ]: a technique right only on its first call (state kept between
    # calls, a cached output) passed a one-call check; the second call, on another seed, fails it
    return verify_technique(technique, torch.device("cpu"), dtype, mode=mode, seed=1)


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters of it)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def check_outcome(name: str, *, mode: str = DEFAULTS.mode, as_swept: bool = False) -> CheckOutcome:
    """Check one technique in this process (``as_swept``: see :func:`check_technique`); an exception of
    the technique becomes ``ERROR`` (``SystemExit`` and ``KeyboardInterrupt`` are not caught)."""
    config = config_text(name, as_swept)
    try:
        v = check_technique(name, mode=mode, as_swept=as_swept)
    except TechniqueUnavailable as exc:
        return CheckOutcome(name, "SKIP", message=f"unavailable: {exc}", config=config)
    except Exception as exc:  # noqa: BLE001 - a plug-in may raise anything; report it in one line
        return CheckOutcome(name, "ERROR", message=first_line(exc), config=config)
    return CheckOutcome(name, "PASS" if v.ok else "FAIL", v, config=config)
