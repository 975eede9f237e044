"""From symbolic traces to peak pieces: the loop structure of a step and the polynomials its peak is a max of.

Pure Python (no torch).  See NOTE [ advisor models ] in :mod:`memlab.advisor.model` for the form.
A polynomial here is ``{monomial: int}`` with a monomial a sorted tuple of variable names (``()`` the
constant); its value is bytes.  Category polynomials are ``{category: polynomial}``.
"""
from __future__ import annotations

import dataclasses
import difflib
import itertools
from dataclasses import dataclass
from typing import Iterable, Sequence

from .trace import SymEvent

__all__ = ["Insertion", "LoopStructure", "StructureError", "infer_loops", "split_baseline", "loop_baseline",
           "pieces_of", "prune", "total_poly", "poly_add", "poly_scale", "poly_substitute", "LOOP_VAR", "OUTER_VAR"]

#: the copies variable of a looped class: ``m = k - base_k - 1 >= 0`` (``m + 1`` extra loop iterations)
LOOP_VAR = "m"
#: the copies variable of an outer loop (:class:`~memlab.core.loops.Repeated`) while its pieces are
#: built; the fit writes it as the outer size itself (:func:`poly_substitute`)
OUTER_VAR = "mo"

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


def poly_substitute(a: Poly, var: str, new: str, offset: int) -> Poly:
    """``a`` with ``var`` replaced by ``new - offset`` (``mo = layers - 4``), expanded; integer coefficients."""
    out: Poly = {}
    for mono, c in a.items():
        rest = tuple(v for v in mono if v != var)
        terms: Poly = {rest: c}
        for _ in range(len(mono) - len(rest)):
            terms = poly_add(poly_scale(terms, new), {m: -offset * x for m, x in terms.items()})
        out = poly_add(out, terms)
    return out


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
    """One loop body: ``unit`` events repeated once more per extra loop iteration, before base event ``at``.

    ``var``: the copies variable (``var + 1`` copies in a general class).  ``growth``: for a body whose
    tensors grow with its index (NOTE [ growing loop bodies ]), the bytes per monomial unit each event's
    ``q`` gains per copy (empty: every copy alike).  A unit's items are events or, in an outer loop's
    body, inner loops (an :class:`Insertion` as one item: a layer's attention blocks).
    """

    at: int
    unit: tuple
    var: str = LOOP_VAR
    growth: tuple[int, ...] = ()

    @property
    def token(self) -> tuple:
        """The loop as one item of an outer loop's trace."""
        return ("loop", self.var, tuple(e.token for e in self.unit), self.growth)

    def copy_tokens(self, j: int) -> list[tuple]:
        """The tokens of copy ``j`` (0-based): each event's ``q`` grown by ``j * growth``."""
        if not self.growth or not j:
            return [e.token for e in self.unit]
        return [_grown_token(e.token, j * g) for e, g in zip(self.unit, self.growth)]


def _grown_token(token: tuple, dq: int) -> tuple:
    return token if not dq else (token[0], token[1] + dq, *token[2:])


def _q_free(token: tuple) -> tuple:
    """An event's token without its ``q`` (a loop item's token as it is)."""
    return token if token[0] == "loop" else (token[0], *token[2:])


@dataclass(frozen=True)
class LoopStructure:
    """A trace at loop count ``base_k`` and the loop bodies that one more iteration inserts."""

    base_k: int
    base: tuple[SymEvent, ...]
    insertions: tuple[Insertion, ...]

    def tokens(self, extra: int) -> list[tuple]:
        """The token sequence of the trace at loop count ``base_k + extra``."""
        return [t for t, *_ in self.layout(extra)]

    def layout(self, extra: int) -> list[tuple]:
        """``(token, insertion index or None, copy, position in the unit)`` of every event of the trace
        at loop count ``base_k + extra``."""
        out: list[tuple] = []
        ins = {i.at: (n, i) for n, i in enumerate(self.insertions)}
        for pos in range(len(self.base) + 1):
            if pos in ins:
                n, i = ins[pos]
                for j in range(extra):
                    out.extend((t, n, j, p) for p, t in enumerate(i.copy_tokens(j)))
            if pos < len(self.base):
                out.append((self.base[pos].token, None, 0, pos))
        return out

    def items(self) -> list:
        """The base events with each loop placed before its event ``at`` as one item (an
        :class:`Insertion`): the trace of a general class, for :func:`pieces_of` and for an outer loop."""
        ins = {i.at: i for i in self.insertions}
        out: list = []
        for pos in range(len(self.base) + 1):
            if pos in ins:
                out.append(ins[pos])
            if pos < len(self.base):
                out.append(self.base[pos])
        return out


class StructureError(RuntimeError):
    """Traces at consecutive loop counts are not one trace plus repeated loop bodies."""


def infer_loops(base: Sequence[SymEvent], plus_one: Sequence[SymEvent], base_k: int,
                checks: Iterable[tuple[int, Sequence[SymEvent]]] = (), *, var: str = LOOP_VAR,
                grow: bool = False) -> LoopStructure:
    """The loop bodies that turn the trace at ``base_k`` into the trace at ``base_k + 1``.

    ``checks``: ``(k, trace)`` pairs at further loop counts that the inferred structure must
    reproduce token for token.  ``var``: the copies variable of the loops found.  ``grow``: a body
    whose events' ``q`` grow by the same bytes per copy is a loop too, its growth read from the first
    check (at ``base_k + 2``) and held to the others (NOTE [ growing loop bodies ]).  The traces'
    items are events or inner loops (:meth:`LoopStructure.items`).

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
        insertions = [dataclasses.replace(i, var=var) for i in insertions]
        st = LoopStructure(base_k, tuple(base), tuple(insertions))
        if grow and checks:
            st = _with_growth(st, checks[0]) or st
        if all(st.tokens(k - base_k) == [e.token for e in trace] for k, trace in checks):
            return st
    raise StructureError(f"no loop structure turns the trace at k={base_k} into those at k={base_k + 1}"
                         f"{''.join(f',{k}' for k, _ in checks)} ({tried} candidates tried)")


# NOTE [ growing loop bodies ]
# A loop whose bodies are alike but for their sizes, which grow with the body's index: the query blocks
# of causal attention (NOTE [ query-blocked attention ] in memlab.families.transformer.attention), where block i
# scores its rows against keys [0, (i + 1) * block), so its scores are (i + 1) * block^2 per batch and
# head.  Traced at the same class, block i's events are the same monomials with q growing by one fixed
# step per block: q_j = q_0 + j * g for the j-th copy of the body.  The structure is found as for any
# loop from the traces at base_k and base_k + 1 (the body one more copy adds), its growth g read from
# the trace at base_k + 2 (the second added copy less the first) and checked at base_k + 3.  In a
# general class the copies j = 0 .. m each hold the live bytes before the loop plus j times a body's
# net plus the first j bodies' growth, plus their own prefix P_p + j * G_p at each event p: linear in j
# when the net does not grow (sum of g over the body's events, signed, is 0: what every block
# allocates it frees), so the peak over the copies is at the first or the last copy, both pieces
# (pieces_of: the last copy is the first plus m * (net + G_p)).  A body whose net grows would add
# m(m + 1)/2 terms: refused (StructureError), not modelled.


def _with_growth(st: LoopStructure, check: tuple[int, Sequence]) -> LoopStructure | None:
    """``st`` with the growth of each body read from ``check`` (the trace at ``base_k + 2``), or None
    when the trace is not ``st`` with grown second copies."""
    k, trace = check
    layout = st.layout(k - st.base_k)
    if len(layout) != len(trace):
        return None
    growth = [[0] * len(i.unit) for i in st.insertions]
    for (tok, n, j, p), e in zip(layout, trace):
        got = e.token
        if n is None or j == 0 or tok[0] == "loop":
            if got != tok:
                return None
        elif _q_free(got) != _q_free(tok):
            return None
        else:
            growth[n][p] = (got[1] - tok[1]) // j
            if tok[1] + j * growth[n][p] != got[1]:
                return None
    if not any(any(g) for g in growth):
        return None
    return LoopStructure(st.base_k, st.base, tuple(dataclasses.replace(i, growth=tuple(g) if any(g) else ())
                                                   for i, g in zip(st.insertions, growth)))


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


def loop_baseline(baselines: dict[int, dict], base_k: int, var: str = LOOP_VAR) -> dict:
    """The baseline at loop count ``base_k + 1 + var`` from baselines at ``base_k .. base_k + 3`` (it must
    grow by the same polynomial per loop iteration; checked)."""
    step = _cat_add(baselines[base_k + 1], baselines[base_k], -1)
    for k, b in baselines.items():
        want = _cat_add(baselines[base_k], step, k - base_k)
        if _clean(want) != _clean(b):
            raise StructureError(f"the baseline does not grow linearly with the loop count (k={k})")
    return _clean(_cat_add(baselines[base_k + 1], _cat_times(step, var)))


def pieces_of(baseline: dict, step: Sequence[SymEvent], structure: LoopStructure | None = None) -> list[dict]:
    """Category polynomials of the live bytes (baseline included) at every candidate peak moment of
    the step: its start and after every event.

    Without ``structure``: the moments of exactly ``step`` (whose items may be loops:
    :meth:`LoopStructure.items`).  With it (inferred on step events): of the step at loop count
    ``base_k + 1 + m`` for any ``m >= 0`` (each insertion's ``var``, :data:`LOOP_VAR` unless stated),
    each loop body running ``m + 1`` extra times; inside a body the live bytes are linear in the copy
    index (NOTE [ growing loop bodies ] where the body grows), so their maximum is at the first or the
    last copy, and both are pieces; a loop inside a loop's body (an outer loop's) gives the four
    corners.  ``baseline`` must then be the baseline at that loop count (:func:`loop_baseline`).
    """
    items = list(step) if structure is None else structure.items()
    pieces: list[dict] = [dict(baseline)]
    _run(items, dict(baseline), pieces)
    return [_clean(p) for p in pieces]


def _run(items: Sequence, live: dict, pieces: list[dict], grown: tuple[Sequence[int], str] | None = None) -> dict:
    """Append the live bytes after each event of ``items`` to ``pieces``; return the live bytes after
    them.  ``grown``: ``(growth, var)``, each event's bytes grown by ``var * growth[i]`` units."""
    for n, e in enumerate(items):
        if isinstance(e, Insertion):
            live = _run_loop(e, live, pieces)
            continue
        live = _cat_add(live, _delta(e))
        if grown and grown[0][n]:
            live = _cat_add(live, {e.category: {tuple(sorted(e.mono + (grown[1],))): e.sign * grown[0][n]}})
        pieces.append(live)
    return live


def _run_loop(ins: Insertion, live: dict, pieces: list[dict]) -> dict:
    """One loop of ``var + 1`` copies: the pieces of its first and last copy, interleaved moment by
    moment; the live bytes after it."""
    first: list[dict] = []
    end = _run(ins.unit, live, first)
    total = _clean(_cat_add(end, live, -1))
    if ins.growth and _clean(_cat_add(_run(ins.unit, {}, [], (ins.growth, ins.var)), _run(ins.unit, {}, []), -1)):
        raise StructureError("a loop body whose net bytes grow with its index (NOTE [ growing loop bodies ])")
    last: list[dict] = []
    _run(ins.unit, _cat_add(live, _cat_times(total, ins.var)), last, (ins.growth, ins.var) if ins.growth else None)
    for f, la in zip(first, last):
        pieces += [f, la]
    return _cat_add(end, _cat_times(total, ins.var))


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
