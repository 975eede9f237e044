"""A finished sweep in words: the count per status and a plain-text table of its rows."""
from __future__ import annotations

from ..record import STATUSES, Measurement, fmt_mib

__all__ = ["status_summary", "format_table", "not_ok_lines"]


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



def _params_text(m: Measurement) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(m.params.items()))


def format_table(rows: list[Measurement]) -> str:
    """A plain-text table grouped by family (a heading line each), rows by technique and parameters:
    technique, params, status, peak allocated/resident (MiB), step ms, floor ratio.  A row that is
    not ``ok`` shows its status alone; :func:`not_ok_lines` gives the reasons."""
    header = ("technique", "params", "status", "peak alloc", "peak resident/reserved", "step", "floor ratio")
    ordered = sorted(rows, key=lambda m: (m.family, m.technique, _params_text(m)))
    lines: list[tuple | str] = [header]
    for i, m in enumerate(ordered):
        if i == 0 or m.family != ordered[i - 1].family:
            lines.append(f"-- {m.family}")
        floor = m.analytic_floor_bytes()
        ratio = f"{m.peak_allocated_bytes / floor:.2f}x" if floor and m.peak_allocated_bytes else "-"
        step = "-" if m.step_time_s is None else f"{m.step_time_s * 1e3:.1f} ms"
        lines.append((m.technique, _params_text(m), m.status, fmt_mib(m.peak_allocated_bytes),
                      fmt_mib(m.peak_reserved_bytes), step, ratio))
    cells = [r for r in lines if isinstance(r, tuple)]
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    return "\n".join(r if isinstance(r, str) else "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in lines)


def not_ok_lines(rows: list[Measurement]) -> list[str]:
    """One line per row that is not ``ok``, grouped by family: status, technique, parameters and the
    one-line reason (``mismatch memcnn batch=64 depth=16: grad:x differs ...``)."""
    bad = sorted((m for m in rows if m.status != "ok"), key=lambda m: (m.family, m.technique, _params_text(m)))
    return [f"{m.status} {m.technique} {_params_text(m)}: {(m.error or 'no reason recorded').splitlines()[0]}"
            for m in bad]
