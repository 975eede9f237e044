"""Small text helpers for page contexts: byte/number formatting, slugs, environment captions, the
reference check as one line."""
from __future__ import annotations

import re
from typing import Any, Iterable

import pandas as pd

from ..core.record import fmt_mib
from ..core.record import is_number as _finite

__all__ = ["fmt_mib", "fmt_num", "fmt_pct", "fmt_ms", "fmt_step", "fmt_relative", "relative_against", "fmt_rate", "fmt_load",
           "fmt_sci", "fmt_check", "fmt_tolerance", "slugs", "env_caption", "verdict_class", "summary_items"]


def fmt_num(v: Any, digits: int = 4) -> str:
    return f"{v:.{digits}g}" if _finite(v) else "-"


def fmt_ms(seconds: Any) -> str:
    return f"{seconds * 1e3:.1f} ms" if _finite(seconds) else "-"


def fmt_step(median: Any, iqr: Any) -> str:
    """A step time as median ± interquartile range in ms (``'278.2 ± 0.9 ms'``); the median alone
    without a spread; ``'-'`` when unknown."""
    if not _finite(median):
        return "-"
    if not _finite(iqr):
        return fmt_ms(median)
    return f"{median * 1e3:.1f} ± {iqr * 1e3:.1f} ms"


def fmt_relative(ratio: Any) -> str:
    """A step time relative to the family baseline's step (``'1.80×'``); ``'-'`` when unknown."""
    return f"{ratio:.2f}×" if _finite(ratio) else "-"


def relative_against(relative_to: Any) -> str:
    """What a relative step time is a multiple of: ``"unchunked's step"`` for a row timed against
    its family baseline (``relative_to``), ``"the workload's reference step"`` for one without
    (rows from before memlab recorded it, a plug-in family with no baseline technique)."""
    if isinstance(relative_to, str) and relative_to:
        return f"{relative_to}'s step"
    return "the workload's reference step"


def fmt_rate(v: Any) -> str:
    """Samples/s as a whole number with thousands separators (``'24,970'``), three significant digits
    below 100 (``'2.43'``, not ``'2'``); ``'-'`` when unknown."""
    if not _finite(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def fmt_load(before: Any, after: Any, cores: Any) -> str:
    """``'load B → A on N cores'`` (the 1-minute load averages before and after, two decimals); ``'-'`` when no load average was recorded."""
    if not (_finite(before) or _finite(after)):
        return "-"
    one = lambda v: f"{v:.2f}" if _finite(v) else "?"  # noqa: E731
    return f"load {one(before)} → {one(after)}" + (f" on {int(cores)} cores" if _finite(cores) else "")


def fmt_pct(fraction: Any) -> str:
    """A signed percentage (``'-86%'`` less, ``'+5%'`` more); ``'-'`` when unknown."""
    return f"{fraction * 100:+.0f}%" if _finite(fraction) else "-"


def fmt_sci(v: Any) -> str:
    """A small number with two significant digits, short exponent (``'3.1e-13'``, ``'0.25'``, ``'0'``)."""
    if not _finite(v):
        return "-" if v is None or v != v else str(v)
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), f"{v:.2g}")


def fmt_tolerance(rtol: Any, atol: Any) -> str:
    """``'atol 1e-8 + rtol 1e-6·|ref|'``: the elementwise bound ``|err| <= atol + rtol * |ref|``."""
    return f"atol {fmt_sci(atol)} + rtol {fmt_sci(rtol)}·|ref|"


def fmt_check(check: Any) -> str:
    """The reference check of a row as one line: verdict, dtype, error size, tolerance, drift.

    Example: ``'yes (float64, max |err| 3.1e-13 ≤ atol 1e-8 + rtol 1e-6·|ref|; float32 drift 2.4e-6)'``.
    Non-finite errors read ``'NO: non-finite values in output'``; no check: ``'not checked'``.
    """
    if not isinstance(check, dict):
        return "-"
    if check["non_finite"]:
        return "NO: non-finite values in output"
    if check["matches"] is None:
        return "not checked"
    where = check["dtype"] + (" at the check configuration" if check["at_check_config"] else "")
    parts = []
    tol = fmt_tolerance(check["rtol"], check["atol"]) if check["rtol"] is not None else None
    err = f"max |err| {fmt_sci(check['max_abs'])}" if _finite(check["max_abs"]) else None
    if check["matches"]:
        parts.append(" ≤ ".join(p for p in (err, tol) if p) if err else (f"within {tol}" if tol else ""))
    else:
        parts.append(", ".join(p for p in (err, f"outside {tol}" if tol else None) if p))
        if _finite(check["max_rel"]):
            parts[-1] += f", max rel err {fmt_sci(check['max_rel'])}"
    head = f"{'yes' if check['matches'] else 'NO'} ({where}" + (f", {parts[0]}" if parts[0] else "")
    if check["drift_dtype"] and _finite(check["drift_abs"]):
        head += f"; {check['drift_dtype']} drift {fmt_sci(check['drift_abs'])}"
    return head + ")"


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
    parts = [f"host {env['host']}"] if env.get("host") else []
    if device.startswith("cuda") and env.get("gpu"):
        parts.append(f"GPU {env['gpu']}" + (f" {env['gpu_uuid']}" if env.get("gpu_uuid") else "")
                     + (f" (CUDA {env['cuda']})" if env.get("cuda") else ""))
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


#: a sentence that opens with a short label ("Caveat: ", "Predicted CUDA (...): "): a new item
_LABELLED = re.compile(r"(?<=\.) (?=[A-Za-z_][^.:]{0,80}: )")
_LABEL = re.compile(r"^([A-Za-z_][^.:]{0,80}): ")


def summary_items(summary: str, shown_apart: Iterable[str] = ("Claim", "Verdict")) -> list[dict[str, str]]:
    """A reproduction's summary (one long string) as a list: split before every sentence that opens
    with a short label, each item ``{"label", "text"}`` (label ``""`` when it has none).  Items whose
    label is in ``shown_apart`` (the claim and the verdict, which the page shows on their own) are
    left out, unless nothing else is left."""
    items = []
    for part in _LABELLED.split(str(summary).strip()):
        m = _LABEL.match(part)
        items.append({"label": m.group(1), "text": part[m.end():]} if m else {"label": "", "text": part})
    kept = [i for i in items if i["label"] not in set(shown_apart)]
    return kept or items
