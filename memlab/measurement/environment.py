"""What a measurement ran on: versions, threads, CPU/GPU names, memlab's git commit."""
from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import torch

from .._version import __version__
from ..core.host import kernel_host
from .resident import MMAP_THRESHOLD, threshold_fixed

__all__ = ["environment", "load_average"]


def load_average() -> float | None:
    """The machine's 1-minute load average (runnable processes), or None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=None)
def _platform() -> str:
    """``platform.platform()``, once per process (it reads the Python executable to find the C library's
    version): the fork server's answer serves every child (NOTE [ harness cost ] in
    :mod:`memlab.measurement.harness_cost`)."""
    return platform.platform()


@functools.lru_cache(maxsize=None)
def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
def git_commit() -> str | None:
    """memlab's source commit (with ``+dirty`` when the tree has changes), or None outside git.

    ``MEMLAB_COMMIT`` in the environment, when set, is taken as is: a copy of the tree on another
    host (a lent GPU machine) may carry a ``.git`` that does not match the files (data/gpu-check/README.md).
    """
    given = os.environ.get("MEMLAB_COMMIT", "").strip()
    if given:
        return given
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": _platform(),
        "opt_einsum": bool(torch.backends.opt_einsum.is_available()),
        "threads": torch.get_num_threads(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": _cpu_name(),
        # the CPU kernels a convolution's bytes hold for (NOTE [ host-dependent bytes ] in memlab.core.host)
        "kernels": kernel_host(),
        # which host measured the row: shards and Ray tasks run on many (the site keeps them apart)
        "host": socket.gethostname() or None,
        "memlab": __version__,
        "git_commit": git_commit(),
        # the memory phase's heap setting (NOTE [ CPU resident high-water mark ]); the timed phase's is
        # ``timing_heap``, added by the timed phase
        "malloc_mmap_threshold": MMAP_THRESHOLD if threshold_fixed() else None,
        "gpu": None,
        # the GPU a sweep worker was pinned to (NOTE [ one GPU per worker ] in memlab.sweep.run), or the
        # user's own setting; None when unset
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["gpu"] = torch.cuda.get_device_name(device)
        env["gpu_uuid"] = str(getattr(props, "uuid", "")) or None
        env["gpu_index"] = device.index if device.index is not None else torch.cuda.current_device()
        env["cuda"] = torch.version.cuda
    return env
