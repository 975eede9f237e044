"""From symbolic traces to peak pieces: the loop structure of a step and the polynomials its peak is a max of.

Pure Python (no torch).  See NOTE [ advisor models ] in :mod:`memlab.advisor.model` for the form.
A polynomial here is ``{monomial: int}`` with a monomial a sorted tuple of variable names (``()`` the
constant); its value is bytes.  Category polynomials are ``{category: polynomial}``.
"""
from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass
from typing import Iterable, Sequence

from .trace import SymEvent

__all__ = ["Insertion", "LoopStructure", "StructureError", "infer_loops", "split_baseline", "loop_baseline",
           "pieces_of", "prune", "total_poly", "poly_add", "poly_scale", "LOOP_VAR"]

#: the copies variable of a looped class: ``m = k - base_k - 1 >= 0`` (``m + 1`` extra loop iterations)
LOOP_VAR = "m"

Poly = dict  # {tuple[str, ...]: int}


def poly_add(a: Poly, b: Poly, scale: int = 1) -> Poly:
    out = dict(a)
    for mono, c in b.items():
        v = out.get(mono, 0) + scale * c
        if v:
            out[mono] = v
        else:
            out.pop(mono, None)
    return out


def poly_scale(a: Poly, var: str) -> Poly:
    """``a`` multiplied by the variable ``var``."""
    return {tuple(sorted(mono + (var,))): c for mono, c in a.items()}


def _cat_add(a: dict, b: dict, scale: int = 1) -> dict:
    out = dict(a)
    for cat, p in b.items():
        out[cat] = poly_add(out.get(cat, {}), p, scale)
    return out


def _cat_times(a: dict, var: str) -> dict:
    return {cat: poly_scale(p, var) for cat, p in a.items()}


def _delta(e: SymEvent) -> dict:
    return {e.category: {m: e.sign * c for m, c in e.poly().items() if c}}


@dataclass(frozen=True)
class Insertion:
    """One loop body: ``unit`` events repeated once more per extra loop iteration, before base event ``at``."""

    at: int
    unit: tuple[SymEvent, ...]


@dataclass(frozen=True)
class LoopStructure:
    """A trace at loop count ``base_k`` and the loop bodies that one more iteration inserts."""

    base_k: int
    base: tuple[SymEvent, ...]
    insertions: tuple[Insertion, ...]

    def tokens(self, extra: int) -> list[tuple]:
        """The token sequence of the trace at loop count ``base_k + extra``."""
        out: list[tuple] = []
        ins = {i.at: i for i in self.insertions}
        for pos in range(len(self.base) + 1):
            if pos in ins:
                for _ in range(extra):
                    out.extend(e.token for e in ins[pos].unit)
            if pos < len(self.base):
                out.append(self.base[pos].token)
        return out


class StructureError(RuntimeError):
    """Traces at consecutive loop counts are not one trace plus repeated loop bodies."""


def infer_loops(base: Sequence[SymEvent], plus_one: Sequence[SymEvent], base_k: int,
                checks: Iterable[tuple[int, Sequence[SymEvent]]] = ()) -> LoopStructure:
    """The loop bodies that turn the trace at ``base_k`` into the trace at ``base_k + 1``.

    ``checks``: ``(k, trace)`` pairs at further loop counts that the inferred structure must
    reproduce token for token.

    Raises:
        StructureError: the difference is not insertions only, or a check trace differs.
    """
    a = [e.token for e in base]
    b = [e.token for e in plus_one]
    ops = [op[1:] for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    # A loop body inside a run of identical bodies may be matched as pieces around a few equal events
    # (any rotation of the body is as good), and two loops may end next to each other: try merging
    # the differences that lie close together, fewest merges first, and keep the first structure that
    # reproduces every check trace.
    close = [i for i in range(len(ops) - 1) if ops[i + 1][0] - ops[i][1] <= 2 * max(
        (ops[i][3] - ops[i][2]) - (ops[i][1] - ops[i][0]), 1)]
    checks = list(checks)
    tried = 0
    for merges in sorted(itertools.product((False, True), repeat=min(len(close), 8)), key=sum):
        merge_after = {close[i] for i, m in enumerate(merges) if m}
        groups: list[list[int]] = []
        for idx, op in enumerate(ops):
            if groups and idx - 1 in merge_after:
                groups[-1][1], groups[-1][3] = op[1], op[3]
            else:
                groups.append(list(op))
        insertions = _contiguous(groups, a, b, plus_one)
        if insertions is None:
            continue
        tried += 1
        st = LoopStructure(base_k, tuple(base), tuple(insertions))
        if all(st.tokens(k - base_k) == [e.token for e in trace] for k, trace in checks):
            return st
    raise StructureError(f"no loop structure turns the trace at k={base_k} into those at k={base_k + 1}"
                         f"{''.join(f',{k}' for k, _ in checks)} ({tried} candidates tried)")


def _contiguous(groups, a, b, plus_one) -> list[Insertion] | None:
    """Each group of differences as one contiguous insertion, or None when one is not an insertion.

    The insertion may sit up to one body length outside the group, inside the equal events around
    it (a rotation of the body in a run of bodies), but never past a neighbouring group.
    """
    insertions = []
    for g, (s3, e3, s4, e4) in enumerate(groups):
        size = (e4 - s4) - (e3 - s3)
        if size <= 0:
            return None
        lo = max(s3 - size, groups[g - 1][1] if g else 0)
        hi = min(e3 + size, groups[g + 1][0] if g + 1 < len(groups) else len(a))
        shift_lo = s4 - s3          # b index = a index + shift before the group
        shift_hi = e4 - e3          # ... and after it (shift_lo + size)
        for p in range(lo, hi + 1):
            q = p + shift_lo
            if (b[lo + shift_lo:q] == a[lo:p] and b[q + size:hi + shift_hi] == a[p:hi]):
                insertions.append(Insertion(p, tuple(plus_one[q:q + size])))
                break
        else:
            return None
    return insertions


def split_baseline(events: Sequence[SymEvent]) -> tuple[dict, list[SymEvent]]:
    """``(baseline, step)``: the category polynomials live when the traced step starts (build and
    warm-up summed) and the step's own events."""
    live: dict = {}
    for e in events:
        if e.phase == "pre":
            live = _cat_add(live, _delta(e))
    return _clean(live), [e for e in events if e.phase != "pre"]


def loop_baseline(baselines: dict[int, dict], base_k: int) -> dict:
    """The baseline at loop count ``base_k + 1 + m`` from baselines at ``base_k .. base_k + 3`` (it must
    grow by the same polynomial per loop iteration; checked)."""
    step = _cat_add(baselines[base_k + 1], baselines[base_k], -1)
    for k, b in baselines.items():
        want = _cat_add(baselines[base_k], step, k - base_k)
        if _clean(want) != _clean(b):
            raise StructureError(f"the baseline does not grow linearly with the loop count (k={k})")
    return _clean(_cat_add(baselines[base_k + 1], _cat_times(step, LOOP_VAR)))


def pieces_of(baseline: dict, step: Sequence[SymEvent], structure: LoopStructure | None = None) -> list[dict]:
    """Category polynomials of the live bytes (baseline included) at every candidate peak moment of
    the step: its start and after every event.

    Without ``structure``: the moments of exactly ``step``.  With it (inferred on step events): of
    the step at loop count ``base_k + 1 + m`` for any ``m >= 0`` (variable :data:`LOOP_VAR`), each
    loop body running ``m + 1`` extra times; inside a body the live bytes are linear in the copy
    index, so their maximum is at the first or the last copy, and both are pieces.  ``baseline``
    must then be the baseline at that loop count (:func:`loop_baseline`).
    """
    if structure is None:
        base, ins = list(step), {}
    else:
        base, ins = list(structure.base), {i.at: i for i in structure.insertions}
    live = dict(baseline)
    pieces: list[dict] = [live]
    for pos in range(len(base) + 1):
        if pos in ins:
            unit = ins[pos].unit
            total: dict = {}
            for e in unit:
                total = _cat_add(total, _delta(e))
            prefix: dict = {}
            for e in unit:
                prefix = _cat_add(prefix, _delta(e))
                first = _cat_add(live, prefix)
                pieces.append(first)                                         # first copy
                pieces.append(_cat_add(first, _cat_times(total, LOOP_VAR)))  # last copy
            live = _cat_add(_cat_add(live, total), _cat_times(total, LOOP_VAR))  # m + 1 copies
        if pos < len(base):
            live = _cat_add(live, _delta(base[pos]))
            pieces.append(live)
    return [_clean(p) for p in pieces]


def _clean(d: dict) -> dict:
    return {c: p for c, p in d.items() if p}


def total_poly(p: dict) -> Poly:
    """The sum of a piece's category polynomials."""
    out: Poly = {}
    for poly in p.values():
        out = poly_add(out, poly)
    return out


def _key(p: dict) -> tuple:
    return tuple(sorted((c, tuple(sorted(poly.items()))) for c, poly in p.items()))


def prune(pieces: Sequence[dict]) -> list[dict]:
    """Drop duplicates and pieces another piece dominates: ``q - p`` has no negative coefficient, so
    ``q >= p`` wherever every variable is >= 0.  Order (first reached first) is kept."""
    seen, uniq = set(), []
    for p in pieces:
        k = _key(p)
        if k not in seen:
            seen.add(k)
            uniq.append(p)
    totals = [total_poly(p) for p in uniq]
    keep = []
    for i, t in enumerate(totals):
        dominated = False
        for j, u in enumerate(totals):
            if i == j:
                continue
            diff = poly_add(u, t, -1)
            if all(c >= 0 for c in diff.values()) and (diff or j < i):
                dominated = True
                break
        if not dominated:
            keep.append(uniq[i])
    return keep
