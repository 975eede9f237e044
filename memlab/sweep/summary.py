"""A finished sweep in words: the count per status and a plain-text table of its rows."""
from __future__ import annotations

from ..record import STATUSES, Measurement, fmt_mib

__all__ = ["status_summary", "format_table"]


def status_summary(rows: list[Measurement], planned: int) -> str:
    """``'14 points: 12 ok, 1 mismatch, 1 error'``: the count per status, in :data:`STATUSES` order.

    ``planned`` points that yielded no row (technique unavailable on the device) count as skipped.
    """
    counts: dict[str, int] = {}
    for m in rows:
        counts[m.status] = counts.get(m.status, 0) + 1
    order = [s for s in STATUSES if s in counts] + sorted(set(counts) - set(STATUSES))
    parts = [f"{counts[s]} {s}" for s in order]
    if planned > len(rows):
        parts.append(f"{planned - len(rows)} skipped")
    return f"{planned} point{'' if planned == 1 else 's'}: " + (", ".join(parts) or "none measured")



def format_table(rows: list[Measurement]) -> str:
    """A plain-text table: technique, params, status, peak allocated/resident (MiB), step ms."""
    header = ("technique", "params", "status", "peak alloc", "peak resident/reserved", "step", "floor ratio")
    lines = [header]
    for m in rows:
        params = " ".join(f"{k}={v}" for k, v in sorted(m.params.items()))
        floor = m.analytic_floor_bytes()
        ratio = f"{m.peak_allocated_bytes / floor:.2f}x" if floor and m.peak_allocated_bytes else "-"
        step = "-" if m.step_time_s is None else f"{m.step_time_s * 1e3:.1f} ms"
        lines.append((m.technique, params, m.status if m.status == "ok" else f"{m.status}: {(m.error or '')[:40]}",
                      fmt_mib(m.peak_allocated_bytes), fmt_mib(m.peak_reserved_bytes), step, ratio))
    widths = [max(len(str(r[i])) for r in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in lines)
