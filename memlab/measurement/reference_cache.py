"""The workload reference's output and gradients, computed once per configuration of a sweep.

A reference check (:func:`memlab.measurement.verify.verify_technique`) runs the technique and then
the workload's plain reference on the same seeded problem, in float64 and again in the measured
dtype, at the measured size.  Every technique of a workload at the same workload configuration
(``unchunked`` and ``slice_loop`` at five chunk sizes, say) builds the same problem, so the
reference half of their checks is the same computation: in the committed CPU sweep, 193 points
share 20 workload configurations.  A sweep therefore keeps that half in a folder of its own
(``memlab sweep`` makes one per run and removes it at the end) and each measurement child loads it
instead of recomputing it.

The cached result equals the one that would have been computed, bit for bit: the check runs the
reference first, on the problem exactly as built (:func:`~memlab.measurement.verify.verify_technique`),
so nothing a technique does to its problem can move it, and

* only techniques that keep the workload's ``build`` and ``reference`` use the cache (one that
  overrides either has a problem or a reference of its own);
* the key is the workload's class and configuration, the seed, the dtype, the device and the mode.

Files are written to a temporary name and renamed, so two children computing the same reference
at once both succeed and a reader never sees half a file; an unreadable file is recomputed.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch

from ..technique import Technique

__all__ = ["ReferenceCache"]


class ReferenceCache:
    """Reference outputs and gradients on disk under ``directory`` (one ``.pt`` file per key)."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def key(self, technique: Technique, dtype: torch.dtype, device: torch.device, mode: str, seed: int) -> str | None:
        """The file name for this check's reference, or None when ``technique`` builds its own problem
        or reference (then nothing is shared)."""
        cls = type(technique)
        if cls.build is not Technique.build or cls.reference is not Technique.reference:
            return None
        spec = technique.problem_spec
        ident = {"workload": f"{type(spec).__module__}.{type(spec).__qualname__}", "config": spec.config,
                 "dtype": str(dtype), "device": str(device), "mode": mode, "seed": seed}
        text = json.dumps(ident, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:32] + ".pt"

    def load(self, key: str, device: torch.device, leaves: int) -> tuple[torch.Tensor, list] | None:
        """``(output, gradients)`` stored under ``key`` (None when absent, unreadable, or holding a
        different number of gradients than ``leaves``)."""
        path = self.directory / key
        try:
            data = torch.load(path, map_location=device, weights_only=True)
        except Exception:  # noqa: BLE001 - absent, torn or not a tensor file: compute it again
            return None
        if not isinstance(data, dict) or not isinstance(data.get("output"), torch.Tensor) \
                or len(data.get("grads") or []) != leaves:
            return None
        return data["output"], list(data["grads"])

    def store(self, key: str, output: torch.Tensor, grads: list) -> None:
        """Save ``(output, grads)`` under ``key`` atomically; a failure to write is ignored (the next
        check computes the reference again)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.directory)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save({"output": output.detach(), "grads": [g if g is None else g.detach() for g in grads]}, f)
            os.replace(tmp, self.directory / key)
        except (OSError, RuntimeError):
            try:
                os.unlink(tmp)
            except OSError:
                pass

