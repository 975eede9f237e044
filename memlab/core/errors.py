"""Exceptions shared by the torch-free and the torch-using layers (importing this imports no torch)."""
from __future__ import annotations

__all__ = ["TechniqueUnavailable"]


class TechniqueUnavailable(RuntimeError):
    """The technique cannot run here (device, optional dependency, torch version).

    A subclass of RuntimeError that memlab reports as such; it never measures something else.
    """
