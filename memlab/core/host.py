"""Which CPU kernels a step's bytes hold for: the instruction set oneDNN dispatches to, and torch's version.

# NOTE [ host-dependent bytes ]
Most of a step's allocations are tensors whose bytes follow from their shapes and dtype on every host.
A oneDNN convolution's are not: oneDNN picks its kernel by the CPU's instruction set, and the kernel
decides the blocked layouts it reorders into (``aBcd16b`` with AVX-512, ``aBcd8b`` with AVX2), its
scratch pads, and whether a weight gradient is made in a blocked buffer and reordered.  The same ResNet
step then allocates other bytes in other categories: at depth 20, batch 2 the SGD step peaks at
2,303,688 B under AVX-512 and 2,622,384 B under AVX2 (gradients +409,600 B, saved activations -53,248 B,
temporaries -675,048 B).  So a figure fitted from a trace that ran oneDNN kernels holds for the
:func:`kernel_host` it was fitted on, and is recorded with it; a figure of a step without oneDNN
kernels holds on every host.  Evidence: docs/evidence/host-dependent-bytes.md.

The key is oneDNN's instruction-set level (:data:`ISA_LEVELS`: the best level the CPU's flags allow,
capped by ``ONEDNN_MAX_CPU_ISA`` / ``DNNL_MAX_CPU_ISA`` as oneDNN caps itself) and torch's version (it
fixes the oneDNN version: torch is pinned).  Threads are not in the key: advisor traces run at one
intra-op thread, where a convolution takes no per-thread scratch.  The cap lets one machine produce
and check the figures of a lesser one (``ONEDNN_MAX_CPU_ISA=AVX2`` on an AVX-512 host reproduced the
AVX2 host's bytes exactly).

Torch-free: the flags come from ``/proc/cpuinfo`` and torch's version from its package metadata, so the
advisor can compare hosts without importing torch.
"""
from __future__ import annotations

import functools
import os
import platform
from importlib import metadata
from typing import Mapping

__all__ = ["ISA_LEVELS", "KERNEL_INDEPENDENT_CATEGORIES", "kernel_host", "host_key", "same_kernels", "describe"]

#: the categories whose bytes at a step's peak every host allocates alike: tensors the model, its inputs
#: and the optimizer make (always live at the traced step), not a kernel; a model fitted on other kernels
#: is compared on these alone
KERNEL_INDEPENDENT_CATEGORIES = ("parameters", "optimizer_state", "inputs")

#: oneDNN's x86-64 instruction-set levels this module tells apart, lowest first, each with the
#: ``/proc/cpuinfo`` flags it needs (on top of the previous level's)
ISA_LEVELS: tuple[tuple[str, frozenset[str]], ...] = (
    ("sse41", frozenset({"sse4_1"})),
    ("avx", frozenset({"avx"})),
    ("avx2", frozenset({"avx2", "fma"})),
    ("avx512_core", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})),
    ("avx512_core_vnni", frozenset({"avx512_vnni"})),
    ("avx512_core_bf16", frozenset({"avx512_bf16"})),
    ("avx512_core_amx", frozenset({"amx_tile", "amx_bf16", "amx_int8"})),
)
_NAMES = [name for name, _ in ISA_LEVELS]
#: what a cap spelt the way oneDNN spells it maps to (``ONEDNN_MAX_CPU_ISA=AVX2_VNNI`` caps at avx2)
_CAP_ALIASES = {"all": _NAMES[-1], "avx2_vnni": "avx2", "avx2_vnni_2": "avx2", "avx10_1_512": "avx512_core_bf16",
                "avx512_core_fp16": "avx512_core_bf16", "avx10_1_512_amx": "avx512_core_amx",
                "avx512_core_amx_fp16": "avx512_core_amx", "avx10_1_512_amx_fp16": "avx512_core_amx",
                "default": _NAMES[-1]}


def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _level_of(flags: frozenset[str]) -> str | None:
    """The highest :data:`ISA_LEVELS` name whose flags (and every lower level's) ``flags`` holds."""
    best = None
    for name, needs in ISA_LEVELS:
        if not needs <= flags:
            break
        best = name
    return best


def _cap(env: Mapping[str, str]) -> str | None:
    raw = (env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA") or "").strip().lower()
    if not raw:
        return None
    return raw if raw in _NAMES else _CAP_ALIASES.get(raw)


@functools.lru_cache(maxsize=None)
def _torch_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def kernel_host(flags: frozenset[str] | None = None, env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """``{"machine", "isa", "torch"}`` of this process: the architecture, oneDNN's instruction-set level
    (None off x86-64 or where ``/proc/cpuinfo`` is unreadable) and torch's version.  ``flags`` and ``env``
    default to this machine's CPU flags and ``os.environ`` (given, for tests)."""
    machine = platform.machine().lower()
    isa = None
    if machine in ("x86_64", "amd64"):
        isa = _level_of(_cpu_flags() if flags is None else flags)
        cap = _cap(os.environ if env is None else env)
        if isa is not None and cap is not None and _NAMES.index(cap) < _NAMES.index(isa):
            isa = cap
    return {"machine": machine, "isa": isa, "torch": _torch_version()}


def host_key(host: Mapping[str, str | None]) -> str:
    """A file-name-safe key: ``x86_64-avx2-torch2.13.0``."""
    return f"{host.get('machine')}-{host.get('isa') or 'unknown'}-torch{host.get('torch') or 'none'}"


def same_kernels(a: Mapping[str, str | None] | None, b: Mapping[str, str | None] | None) -> bool:
    """Whether two :func:`kernel_host` records pick the same oneDNN kernels (machine, level and torch
    equal, none unknown)."""
    if not a or not b:
        return False
    keys = ("machine", "isa", "torch")
    return all(a.get(k) is not None and a.get(k) == b.get(k) for k in keys)


def describe(host: Mapping[str, str | None] | None) -> str:
    """``avx2 (x86_64, torch 2.13.0)``, or ``an unrecorded CPU``."""
    if not host:
        return "an unrecorded CPU"
    return f"{host.get('isa') or 'unknown instruction set'} ({host.get('machine')}, torch {host.get('torch')})"
