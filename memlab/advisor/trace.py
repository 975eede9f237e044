"""Symbolic allocation traces: one traced training step whose every allocation is a monomial in the sizes.

The measurement's exact CPU trace (NOTE [ exact CPU allocated bytes ]) is recorded here the way
:func:`memlab.measurement.inprocess.traced_steps` records it (build, one warm-up step, one traced step
under the category :class:`~memlab.measurement.categories.Probe`), but kept event by event with each
event's category.  Tracing the same configuration class at two size points whose sizes are
distinct primes lets every allocation's byte count be read as ``q * monomial`` (``q`` bytes per
unit, e.g. 4 for float32, 1 for a bool mask) with the monomial unique: see NOTE [ advisor models ]
in :mod:`memlab.advisor.model`.
"""
from __future__ import annotations

import gc
import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["SymEvent", "raw_trace", "symbolic_trace", "monomial_library", "IdentificationError"]

#: the largest bytes per monomial unit an allocation may have by default (bool mask 1 ... complex128 16,
#: times small counts); a declaration raises it where a fixed size multiplies its tensors
#: (``AdvisorModel.max_quantum``)
MAX_QUANTUM = 64
#: highest total degree of a monomial allocation by default (a [c, d, h] batched product is degree 3;
#: ``AdvisorModel.max_degree``)
MAX_DEGREE = 3


class IdentificationError(RuntimeError):
    """An allocation whose size is no single ``q * monomial`` of the traced sizes, or two traces whose
    operation sequences differ (the structure depends on the sizes there)."""


@dataclass(frozen=True)
class SymEvent:
    """One allocation (``sign`` +1) or free (-1) of ``q * monomial`` bytes, in one category.

    ``mono`` is a sorted tuple of variable names (``()`` for a constant of ``q`` bytes); ``phase``
    is ``pre`` (build, warm-up: before the traced step), ``forward``, ``backward``, ``optimizer``
    or ``other``; ``token`` identifies the event's role for structure matching.
    """

    sign: int
    q: int
    mono: tuple[str, ...]
    category: str
    phase: str
    op: str

    @property
    def token(self) -> tuple:
        return (self.sign, self.q, self.mono, self.category, self.phase, self.op)


def raw_trace(technique_name: str, params: Mapping[str, Any],
              optimizer: str = "sgd") -> list[tuple[int, str, str, str]]:
    """``[(delta_bytes, category, phase, op)]`` of build + warm-up + one traced training step (CPU, float32).

    Events before the traced step have phase ``pre``; their categories are those of the blocks
    (baseline tensors: parameters, inputs, optimizer state).
    """
    import torch

    from ..measurement import prepare
    from ..measurement import alloc_trace
    # the category replay's pairing and attribution, the same as the measurement's
    from ..measurement.categories import (Probe, baseline_categories, block_categories, category_of,
                                          pair_blocks)
    from ..measurement.step import make_step

    technique, dev, dt = prepare(technique_name, dict(params), "cpu", "float32", "train")
    gc.collect()
    with alloc_trace.AllocationRecorder(dev) as rec:
        problem = technique.build(dev, dt, 0)
        step, opt = make_step(technique, problem, "train", optimizer=optimizer)
        step()
        gc.collect()
        known = baseline_categories(problem.model, problem.inputs, problem.grad_output, opt)
        with Probe(problem.leaves()) as probe:
            rec.iterations(lambda: step(probe), 1)
    events, windows = rec.result()
    del problem, step, opt, technique
    block_of, blocks = pair_blocks(events)
    it = next(w for w in windows if w.name == "iteration0")
    category = block_categories(blocks, windows, known, it.start_ns)
    phases = [w for w in windows if w.name in ("forward", "backward", "optimizer")]
    out = []
    for k, e in enumerate(events):
        if e.time_ns > it.end_ns:
            break
        if e.time_ns < it.start_ns:
            phase = "pre"
        else:
            phase = next((w.name for w in phases if w.start_ns <= e.time_ns <= w.end_ns and w.start_ns >= it.start_ns),
                         "other")
        out.append((int(e.delta_bytes), category_of(category, block_of[k]), phase, e.op))
    gc.collect()
    torch.set_grad_enabled(True)
    return out


def monomial_library(variables: Sequence[str], max_degree: int = MAX_DEGREE) -> list[tuple[str, ...]]:
    """Every monomial of ``variables`` up to ``max_degree`` (sorted tuples), the constant ``()`` first."""
    out: list[tuple[str, ...]] = [()]
    for deg in range(1, max_degree + 1):
        out.extend(tuple(sorted(c)) for c in itertools.combinations_with_replacement(sorted(variables), deg))
    return out


def mono_value(mono: Sequence[str], values: Mapping[str, int]) -> int:
    return math.prod(values[v] for v in mono)


def check_distinct(points: Sequence[Mapping[str, int]], variables: Sequence[str], *,
                   max_degree: int = MAX_DEGREE) -> bool:
    """True when no two monomials have proportional value vectors over ``points`` (so an allocation's
    ``q * monomial`` reading is unique) and every non-constant monomial changes between the points."""
    lib = monomial_library(variables, max_degree)
    vecs = [tuple(mono_value(m, p) for p in points) for m in lib]
    for a, b in itertools.combinations(range(len(lib)), 2):
        va, vb = vecs[a], vecs[b]
        if all(x * vb[0] == y * va[0] for x, y in zip(va, vb)):
            return False
    return True


def _identify(deltas: Sequence[int], points: Sequence[Mapping[str, int]], lib,
              max_quantum: int = MAX_QUANTUM) -> tuple[int, tuple[str, ...]]:
    size = [abs(d) for d in deltas]
    if len(set(size)) == 1:
        return size[0], ()
    found = []
    for mono in lib[1:]:
        vals = [mono_value(mono, p) for p in points]
        if size[0] % vals[0]:
            continue
        q = size[0] // vals[0]
        if 1 <= q <= max_quantum and all(q * v == s for v, s in zip(vals, size)):
            found.append((q, mono))
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise IdentificationError(f"{what} monomial matches allocation sizes {size} at {list(points)}")
    return found[0]


def symbolic_trace(technique_name: str, fixed: Mapping[str, Any], points: Sequence[Mapping[str, int]],
                   variables: Sequence[str], to_params, optimizer: str = "sgd", *, max_degree: int = MAX_DEGREE,
                   max_quantum: int = MAX_QUANTUM) -> list[SymEvent]:
    """Trace ``technique_name`` at each size point and read every event as ``q * monomial``.

    Args:
        fixed: parameters held constant (``x_requires_grad``...).
        points: size points ``{variable: value}`` of one structure class (two or more).
        variables: the variables a monomial may use.
        to_params: maps a size point to the technique's parameters.
        max_degree, max_quantum: the largest monomial degree and bytes per unit an allocation may have.

    Raises:
        IdentificationError: the traces differ in structure or an allocation is not a monomial.
    """
    traces = [raw_trace(technique_name, {**fixed, **to_params(p)}, optimizer) for p in points]
    lengths = {len(t) for t in traces}
    if len(lengths) != 1:
        raise IdentificationError(f"{technique_name}: traces at {list(points)} have {sorted(lengths)} events")
    lib = monomial_library(variables, max_degree)
    out = []
    for evs in zip(*traces):
        shape = {(d > 0, cat, ph, op) for d, cat, ph, op in evs}
        if len(shape) != 1:
            raise IdentificationError(f"{technique_name}: event differs between size points: {evs}")
        q, mono = _identify([d for d, *_ in evs], points, lib, max_quantum)
        d0, cat, ph, op = evs[0]
        out.append(SymEvent(1 if d0 > 0 else -1, q, mono, cat, ph, op))
    return out
