"""Running one measurement in a fresh Python process.

Results depend on what ran before in the same process (allocator state, lazy initialisation,
glibc heap layout), so memlab measures each configuration in its own subprocess by default.  The
child gets ``MALLOC_MMAP_THRESHOLD_`` fixed (see NOTE [ CPU resident high-water mark ]) and the
parent's plug-ins.  A crash or a timeout becomes a Measurement with status ``error``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..registry import loaded_plugins
from ..technique import Technique
from .resident import MMAP_THRESHOLD

__all__ = ["run_in_subprocess", "WorkerFailed"]


class WorkerFailed(RuntimeError):
    """The measurement subprocess crashed, timed out or wrote no result."""


def _child_env(technique: type[Technique]) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD)
    plugins = [p for p in env.get("MEMLAB_PLUGINS", "").split(os.pathsep) if p]
    plugins += [p for p in loaded_plugins() if p not in plugins]
    src = technique.source_file()
    memlab_dir = str(Path(__file__).resolve().parents[1])
    if technique.__module__ == "__main__" or src is None:
        raise ValueError(
            f"technique {technique.name!r} is defined in __main__ or has no source file; a subprocess "
            "cannot import it: define it in a file (load it with memlab.load_plugin / --plugin) or pass isolate=False"
        )
    if not str(Path(src).resolve()).startswith(memlab_dir) and str(Path(src).resolve()) not in plugins:
        plugins.append(str(Path(src).resolve()))
    env["MEMLAB_PLUGINS"] = os.pathsep.join(plugins)
    root = str(Path(memlab_dir).parent)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run_in_subprocess(technique: type[Technique], request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run ``python -m memlab.measure.worker`` on ``request``; return the result JSON object.

    Raises:
        WorkerFailed: non-zero exit, timeout, or missing/corrupt result; the message carries the
            exit code and the last lines of the child's stderr.
    """
    env = _child_env(technique)
    with tempfile.TemporaryDirectory(prefix="memlab-") as tmp:
        req_path, res_path = os.path.join(tmp, "request.json"), os.path.join(tmp, "result.json")
        with open(req_path, "w") as f:
            json.dump(request, f)
        try:
            proc = subprocess.run([sys.executable, "-m", "memlab.measure.worker", req_path, res_path],
                                  env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise WorkerFailed(f"measurement subprocess timed out after {timeout:g} s") from None
        if proc.returncode != 0 or not os.path.exists(res_path):
            tail = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()][-3:]
            raise WorkerFailed(f"measurement subprocess exited with code {proc.returncode}: " + " | ".join(tail))
        try:
            with open(res_path) as f:
                return json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            raise WorkerFailed(f"measurement subprocess wrote an unreadable result: {exc}") from None
