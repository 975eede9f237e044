"""Small text helpers for page contexts: byte/number formatting, slugs, environment captions."""
from __future__ import annotations

import math
import numbers
import re
from typing import Any, Iterable

import pandas as pd

from ..units import MiB

__all__ = ["fmt_mib", "fmt_num", "fmt_pct", "fmt_ms", "slugs", "env_caption", "verdict_class"]


def _finite(v: Any) -> bool:
    """A real, finite number (numpy scalars included, bools excluded)."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def fmt_mib(n: Any) -> str:
    """Bytes as MiB with one decimal (``'17.2 MiB'``); ``'-'`` when unknown."""
    return f"{n / MiB:.1f} MiB" if _finite(n) else "-"


def fmt_num(v: Any, digits: int = 4) -> str:
    return f"{v:.{digits}g}" if _finite(v) else "-"


def fmt_ms(seconds: Any) -> str:
    return f"{seconds * 1e3:.1f} ms" if _finite(seconds) else "-"


def fmt_pct(fraction: Any) -> str:
    """A signed percentage (``'-86%'`` less, ``'+5%'`` more); ``'-'`` when unknown."""
    return f"{fraction * 100:+.0f}%" if _finite(fraction) else "-"


def slugs(names: Iterable[str], prefix: str) -> dict[str, str]:
    """A distinct, file-name-safe ``<prefix>-<slug>.html`` per name (names sorted first)."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in sorted(set(names)):
        base = re.sub(r"[^a-z0-9_]+", "-", name.lower()).strip("-")[:60] or "x"
        slug, k = base, 2
        while slug in used:
            slug, k = f"{base}-{k}", k + 1
        used.add(slug)
        out[name] = f"{prefix}-{slug}.html"
    return out


def _env_text(env: dict, device: str) -> str:
    parts = []
    if device.startswith("cuda") and env.get("gpu"):
        parts.append(f"GPU {env['gpu']}" + (f" (CUDA {env['cuda']})" if env.get("cuda") else ""))
    if env.get("cpu"):
        parts.append(f"CPU {env['cpu']}" + (f", {env['threads']} threads" if env.get("threads") else ""))
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    if env.get("memlab"):
        commit = env.get("git_commit")
        parts.append(f"memlab {env['memlab']}" + (f" @ {str(commit)[:12]}" if commit else ""))
    return " · ".join(parts) or "environment not recorded"


def env_caption(rows: pd.DataFrame) -> list[str]:
    """Distinct ``device: environment`` lines of the rows (where each figure comes from)."""
    seen = set()
    for env, device, run in zip(rows["environment"], rows["device"], rows["run"]):
        seen.add(f"{device}: {_env_text(env or {}, device)} (run {run})")
    return sorted(seen)


def verdict_class(verdict: str) -> str:
    """CSS class of a reproduction verdict."""
    return {"reproduced": "good", "reproduced with caveat": "caveat"}.get(verdict, "bad")
