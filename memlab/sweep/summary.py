"""A finished sweep in words: the count per status, a plain-text table of its rows, and (``make demo``)
which of its non-ok rows are expected and why (NOTE [ expected non-ok rows ])."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from ..core.record import STATUSES, Measurement, Status, fmt_mib

__all__ = ["status_summary", "format_table", "not_ok_lines", "NotOk", "reason_clauses", "failing_tensors",
           "expected_mismatch", "classify_not_ok", "count_line", "demo_summary", "DEMO_COUNTED", "shown_status"]


def shown_status(m: Measurement) -> str:
    """The status a summary shows: the row's verdict (:attr:`memlab.core.record.Measurement.verdict`) as
    its label, so an ``ok`` row measured over fewer steps than a leak verdict needs shows ``leak
    unknown`` (NOTE [ verdicts ] in memlab.measurement.verdict)."""
    verdict = m.verdict
    return Status(verdict).label if verdict in STATUSES else str(verdict)


def _shown_reason(m: Measurement) -> str:
    return m.reason or "no reason recorded"


def status_summary(rows: list[Measurement], planned: int) -> str:
    """``'14 points: 12 ok, 1 mismatch, 1 error'``: the count per status, in :data:`STATUSES` order.

    ``planned`` points that yielded no row (technique unavailable on the device) count as skipped.
    """
    counts: dict[str, int] = {}
    for m in rows:
        counts[shown_status(m)] = counts.get(shown_status(m), 0) + 1
    labels = [Status(s).label for s in STATUSES]
    order = [s for s in labels if s in counts] + sorted(set(counts) - set(labels))
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
        lines.append((m.technique, _params_text(m), shown_status(m), fmt_mib(m.peak_allocated_bytes),
                      fmt_mib(m.peak_reserved_bytes), step, ratio))
    cells = [r for r in lines if isinstance(r, tuple)]
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    return "\n".join(r if isinstance(r, str) else "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in lines)


def not_ok_lines(rows: list[Measurement]) -> list[str]:
    """One line per row that is not ``ok``, grouped by family: status, technique, parameters and the
    one-line reason (``mismatch memcnn batch=64 depth=16: grad:x differs ...``)."""
    bad = sorted((m for m in rows if shown_status(m) != "ok"), key=lambda m: (m.family, m.technique, _params_text(m)))
    return [f"{shown_status(m)} {m.technique} {_params_text(m)}: {_shown_reason(m)}" for m in bad]


# NOTE [ expected non-ok rows ]
# A sweep's end says which of its non-ok rows are known and explained, so that a newcomer's first
# `make demo` does not read a peer library's documented defect as a broken install.  What is known
# lives on the technique, not in a list here: a technique class may declare ``known_mismatch``,
# ``{tensor name: why}`` (MemCNN: ``grad:x``, NOTE [ MemCNN 1.5.2 input gradient ]).  A mismatch row
# is expected only when every reason its error gives is "<tensor> differs from the reference" for a
# tensor named there; any other reason (a non-finite value, a wrong shape, a failed step, another
# tensor), any error, leak or oom row, and any skipped point the device could run, is unexpected.
# A planned point with no row is expected when its technique does not run on the device (``devices``:
# a CUDA-only technique in a CPU sweep) or declares ``known_unavailable``, ``{device type: why}``, for it
# (cut-cross-entropy's Triton kernel on a CPU); a missing package or a missing row is unexpected.
_DIFFERS = re.compile(r"^(\S+) differs from the reference by ")
_PREAMBLE = re.compile(r"^\w+: max \|error\| |^tolerance rtol=")


@dataclass(frozen=True)
class NotOk:
    """One row that is not ``ok``, or a planned point with no row (``status="skipped"``):
    ``expected`` is why it is known and explained, None when it is not."""

    status: str
    technique: str
    params: str
    reason: str
    expected: str | None = None


def reason_clauses(error: str | None) -> list[str]:
    """The reasons in a row's ``error``: its first line split at ``'; '``, without the check's preamble
    (``float64: max |error| ...``, ``tolerance rtol=...``)."""
    first = (error or "").splitlines()[0] if error else ""
    return [c.strip() for c in first.split("; ") if c.strip() and not _PREAMBLE.match(c.strip())]


def failing_tensors(error: str | None) -> list[str] | None:
    """The tensors a mismatch's ``error`` says differ from the reference; None when some reason is of
    another kind (or there is none)."""
    clauses = reason_clauses(error)
    found = [_DIFFERS.match(c) for c in clauses]
    if not clauses or not all(found):
        return None
    return [f.group(1) for f in found]


def expected_mismatch(m: Measurement, known: Mapping[str, str]) -> str | None:
    """Why the mismatch row ``m`` is expected from its technique's ``known_mismatch``; None when it is
    not a mismatch or some reason it gives is not known (NOTE [ expected non-ok rows ])."""
    if m.status != "mismatch" or not known:
        return None
    tensors = failing_tensors(m.error)
    if not tensors or any(t not in known for t in tensors):
        return None
    return "; ".join(dict.fromkeys(known[t] for t in tensors))


def classify_not_ok(rows: list[Measurement], known_of: Callable[[str], Mapping[str, str]],
                    skipped: Iterable[NotOk] = ()) -> list[NotOk]:
    """Every non-ok row (then the ``skipped`` points), grouped by family, each with its one-line reason
    and, where its technique's ``known_of(technique)`` explains it, why it is expected."""
    bad = sorted((m for m in rows if shown_status(m) != "ok"), key=lambda m: (m.family, m.technique, _params_text(m)))
    out = []
    for m in bad:
        clauses = reason_clauses(m.error)
        reason = "; ".join(clauses) if clauses else _shown_reason(m)
        out.append(NotOk(shown_status(m), m.technique, _params_text(m), reason, expected_mismatch(m, known_of(m.technique))))
    return out + list(skipped)


DEMO_COUNTED = ("ok", "mismatch", "skipped", "error")


def count_line(rows: list[Measurement], planned: int, skipped: int) -> str:
    """``'52 points: 49 ok, 2 mismatch, 1 skipped, 0 error'``: ok, mismatch, skipped and error always,
    any other status (leak, oom) when it occurred; a planned point with neither row nor skip reason
    counts as ``missing``."""
    counts = {s: 0 for s in DEMO_COUNTED}
    for m in rows:
        counts[shown_status(m)] = counts.get(shown_status(m), 0) + 1
    counts["skipped"] += skipped
    missing = planned - len(rows) - skipped
    parts = [f"{n} {s}" for s, n in counts.items() if s in DEMO_COUNTED or n]
    parts += [f"{missing} missing"] if missing > 0 else []
    return f"{planned} point{'' if planned == 1 else 's'}: " + ", ".join(parts)


def _not_ok_block(items: list[NotOk], with_why: bool) -> list[str]:
    """Each item on its line; with ``with_why``, why they are expected after each run of items of one
    technique and one reason."""
    lines = []
    for i, it in enumerate(items):
        lines.append(f"  {it.status} {it.technique}" + (f" {it.params}" if it.params else "") + f": {it.reason}")
        nxt = items[i + 1] if i + 1 < len(items) else None
        if with_why and (nxt is None or (nxt.technique, nxt.expected) != (it.technique, it.expected)):
            lines.append(f"    why expected: {it.expected}")
    return lines


def demo_summary(rows: list[Measurement], planned: int, not_ok: list[NotOk]) -> tuple[list[str], int]:
    """The lines closing ``make demo`` and the number of unexpected items: the count per status, the
    expected non-ok rows with their reasons and why each is expected, then the unexpected ones, loudly."""
    expected = [n for n in not_ok if n.expected]
    unexpected = [n for n in not_ok if not n.expected]
    skipped = sum(1 for n in not_ok if n.status == "skipped")
    lines = [count_line(rows, planned, skipped)]
    if expected:
        lines.append(f"expected ({len(expected)}): known and explained, not a fault of this install:")
        lines += _not_ok_block(expected, with_why=True)
    if unexpected:
        lines.append(f"!!! UNEXPECTED ({len(unexpected)}): not a known limitation; a bug or a broken install, "
                     "please report it with the lines below:")
        lines += _not_ok_block(unexpected, with_why=False)
    else:
        lines.append("unexpected: none" + (" (every row ok)" if not expected else ""))
    return lines, len(unexpected)
