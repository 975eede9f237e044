"""A family's advisor declaration: what its memory models vary, hold fixed and loop over.

A family declares its advisor model beside its workload, by subclassing :class:`AdvisorModel` (the
subclass registers itself, as a :class:`memlab.Technique` does)::

    class ChainedMatmulModel(AdvisorModel, family="chunking"):
        workload = ChainedMatmul                       # the Workload subclass (or its name)
        sizes = ("n", "d", "hidden")                   # workload parameters the models vary
        workload_fixed = {"x_requires_grad": True}     # every other workload parameter that matters
        loop = Chunks(rows="n", knob="chunk_size")     # how the loop count k follows from the parameters
        entries = (Entry("unchunked"), Entry("slice_loop", knobs=("chunk_size",)))
        held_out = {"n": (2, 400), "d": (2, 48), "hidden": (2, 96)}
        time_sizes = ({"n": 2048, "d": 64, "hidden": 256}, {"n": 8192, "d": 128, "hidden": 512})
        work = "n*d*hidden"
        time_chunks = (1, 4, 16)

``memlab advise --fit`` fits every declared family (:mod:`memlab.advisor.fit`) and writes the
declaration into the model file (``families.<family>.declaration``, :meth:`Declaration.to_json`);
``memlab advise`` and the site's Choose page read it back from there (:meth:`Declaration.from_json`),
so they need neither torch nor the registry, and no module outside the family's own file names the
family.  This module imports nothing heavy (no torch, no other memlab module but the registry).

The loop kinds (:class:`~memlab.core.loops.NoLoop`, :class:`~memlab.core.loops.Chunks`,
:class:`~memlab.core.loops.Count`) live in :mod:`memlab.core.loops`; see NOTE [ advisor models ]
in :mod:`memlab.advisor.model` for the classes ``k = 1 .. BASE_K`` and the general one.
"""
from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

from ..registry import register_advisor
from .loops import Chunks, ChunksOf, Count, Loop, NoLoop, ProductChunks, Repeated

__all__ = ["AdvisorModel", "Declaration", "Entry", "Loop", "NoLoop", "Chunks", "Count", "ChunksOf", "ProductChunks",
           "Repeated",
           "BASE_K", "fitted_range",
           "as_declaration"]

#: the general class is traced at this loop count plus one (and checked at +2, +3); loop counts up to
#: ``BASE_K`` have a class each, traced exactly
BASE_K = 3
#: distinct primes a traced size point draws its values from (NOTE [ advisor models ], step 1)
PRIMES = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43)
#: the largest ``max_quantum`` (bytes per monomial unit): a model file's per-sample tensors are large
#: (GPT-2's logits: seq x 50257 x 4 bytes per sample).  The reading stays unique at any quantum:
#: ``check_distinct`` makes the monomials' value vectors non-proportional, so the ratio of an
#: allocation's sizes at the two points names its monomial.
MAX_QUANTUM_LIMIT = 1 << 40
_MONOMIAL = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*(\*[A-Za-z_][A-Za-z_0-9]*)*$")
#: workload parameters left out of an entry's label (they are the family's, not the entry's)
_LABEL_SKIP = {"x_requires_grad", "coupling", "block", "spatial"}


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _from_json_value(v: Any) -> Any:
    """A parameter value read back from JSON: lists were tuples (mode tuples), nothing else changes."""
    return tuple(_from_json_value(x) for x in v) if isinstance(v, list) else v


def _to_json_value(v: Any) -> Any:
    """A parameter value as JSON holds it: tuples (mode tuples) as lists, so ``to_json`` equals what a
    model file reads back; :func:`_from_json_value` undoes it."""
    return [_to_json_value(x) for x in v] if isinstance(v, (tuple, list)) else v


@dataclass(frozen=True)
class Entry:
    """One modelled technique configuration.

    Attributes:
        technique: the registered technique's name.
        fixed: technique (or workload) parameters held at these values for this entry.
        knobs: the technique parameters the advisor searches; only a loop's knob (:class:`Chunks`,
            one of :class:`ChunksOf`'s) is supported, since its candidates come from the loop
            (:meth:`Loop.knob_candidates`).
    """

    technique: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    knobs: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        extra = ",".join(f"{k}={_fmt(v)}" for k, v in sorted(self.fixed.items()) if k not in _LABEL_SKIP)
        return f"{self.technique}[{extra}]" if extra else self.technique

    def to_json(self) -> dict[str, Any]:
        return {"technique": self.technique, "fixed": {k: _to_json_value(v) for k, v in self.fixed.items()},
                "knobs": list(self.knobs)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Entry":
        fixed = {k: _from_json_value(v) for k, v in (data.get("fixed") or {}).items()}
        return cls(str(data["technique"]), fixed, tuple(data.get("knobs") or ()))


# -- the declaration ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Declaration:
    """A family's advisor model, as data (see :class:`AdvisorModel` for what each field means).

    Built from a registered :class:`AdvisorModel` subclass (:meth:`AdvisorModel.declaration`) or read
    back from a model file (:meth:`from_json`); :meth:`to_json` and :meth:`from_json` round-trip.
    """

    name: str
    workload: str
    sizes: tuple[str, ...]
    workload_fixed: Mapping[str, Any]
    entries: tuple[Entry, ...]
    loop: Loop
    time_sizes: tuple[Mapping[str, int], ...]
    work: str | Mapping[str, str]
    time_chunks: tuple[int, ...] = ()
    held_out: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    max_degree: int = 3
    max_quantum: int = 64
    declared_by: str = ""
    trace_values: tuple[int, ...] = ()
    time_only_sizes: tuple[Mapping[str, int], ...] = ()
    chunk_cost_scale: Mapping[str, str] = field(default_factory=dict)
    chunk_split_work: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    chunk_cost_work: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    # -- checks --------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ValueError naming the field, the bad value and what is valid."""
        who = f"advisor model of family {self.name!r}"
        if not self.sizes or not all(isinstance(s, str) and s.isidentifier() for s in self.sizes):
            raise ValueError(f"{who}: sizes={self.sizes!r} must be a non-empty tuple of parameter names")
        if set(self.sizes) & {"k", "m", "mo", "chunk", "last"}:
            raise ValueError(f"{who}: sizes={self.sizes!r} may not use the loop variable names k, m, mo, chunk, last")
        missing = [s for s in self.loop.loop_sizes() if s not in self.sizes]
        if missing:
            raise ValueError(f"{who}: loop {self.loop!r} reads {missing}, which is not in sizes={self.sizes!r}")
        if not self.entries:
            raise ValueError(f"{who}: entries is empty; give at least the family's baseline, Entry('<technique>')")
        labels = [e.label for e in self.entries]
        if len(set(labels)) != len(labels):
            raise ValueError(f"{who}: entries repeat a label: {labels}")
        allowed = set(self.loop.knobs())
        for e in self.entries:
            if not set(e.knobs) <= allowed:
                raise ValueError(f"{who}: entry {e.label!r} has knobs {list(e.knobs)}; the {self.loop.kind!r} loop "
                                 f"supports {sorted(allowed) or 'none'}")
        self._validate_work(who)
        for point in (*self.time_sizes, *self.time_only_sizes):
            if set(point) != set(self.sizes) or not all(isinstance(v, int) and v >= 1 for v in point.values()):
                raise ValueError(f"{who}: time size {dict(point)!r} must give every size {list(self.sizes)} "
                                 f"as an integer >= 1")
        if self.time_only_sizes and not self.time_sizes:
            raise ValueError(f"{who}: time_only_sizes={[dict(p) for p in self.time_only_sizes]!r} without time_sizes; "
                             "time-only sizes add to the time sizes, they do not replace them")
        self._validate_chunk_costs(who)
        if len({tuple(sorted(p.items())) for p in self.time_sizes}) == 1:
            raise ValueError(f"{who}: time_sizes has one size; give two or more of different work (or none)")
        if any(e.knobs for e in self.entries) and self.time_sizes and not self.time_chunks:
            raise ValueError(f"{who}: time_chunks is empty; give the chunk counts to time a knob at, e.g. (1, 4, 16)")
        for s, rng in self.held_out.items():
            if s not in self.sizes or len(rng) != 2 or not 1 <= rng[0] <= rng[1]:
                raise ValueError(f"{who}: held_out[{s!r}]={rng!r} must be a (low, high) range, 1 <= low <= high, "
                                 f"of one of sizes={self.sizes!r}")
        if not 1 <= self.max_degree <= 6:
            raise ValueError(f"{who}: max_degree={self.max_degree!r} is out of range: expected 1 to 6")
        if not 1 <= self.max_quantum <= MAX_QUANTUM_LIMIT:
            raise ValueError(f"{who}: max_quantum={self.max_quantum!r} is out of range: expected 1 to {MAX_QUANTUM_LIMIT}")
        if self.trace_values and (len(set(self.trace_values)) < 4 or min(self.trace_values) < 2):
            raise ValueError(f"{who}: trace_values={self.trace_values!r} must be 4 or more distinct integers >= 2 "
                             f"(or empty: the primes {PRIMES[0]} to {PRIMES[-1]})")

    def _validate_chunk_costs(self, who: str) -> None:
        """``chunk_cost_scale`` and ``chunk_cost_work``: a knob of the loop -> a product of sizes;
        ``chunk_split_work``: a knob -> work components (NOTE [ per-chunk costs ] in
        :mod:`memlab.advisor.fit`)."""
        knobs = set(self.loop.knobs())
        for knob, mono in self.chunk_cost_scale.items():
            if knob not in knobs or not (isinstance(mono, str) and _MONOMIAL.match(mono)
                                         and set(mono.split("*")) <= set(self.sizes)):
                raise ValueError(f"{who}: chunk_cost_scale[{knob!r}]={mono!r} must map a knob of the loop "
                                 f"({', '.join(sorted(knobs)) or 'none'}) to a product of sizes {list(self.sizes)}")
        names = set(self.work) if isinstance(self.work, Mapping) else set()
        for knob, parts in self.chunk_split_work.items():
            if knob not in knobs or not parts or not set(parts) <= names:
                raise ValueError(f"{who}: chunk_split_work[{knob!r}]={parts!r} must map a knob of the loop "
                                 f"({', '.join(sorted(knobs)) or 'none'}) to one or more work components "
                                 f"({', '.join(sorted(names)) or 'none: work is one monomial'})")
        for knob, mono in self.chunk_cost_work.items():
            if knob not in knobs or not (isinstance(mono, str) and _MONOMIAL.match(mono)
                                         and set(mono.split("*")) <= set(self.sizes)):
                raise ValueError(f"{who}: chunk_cost_work[{knob!r}]={mono!r} must map a knob of the loop "
                                 f"({', '.join(sorted(knobs)) or 'none'}) to a product of sizes {list(self.sizes)}")

    def _validate_work(self, who: str) -> None:
        """``work``: one monomial of the sizes, or named components (NOTE [ work components ] in
        :mod:`memlab.advisor.fit`): one or more, each its own monomial of the sizes, and enough time
        sizes to fit the baseline's cost of each and its fixed cost with one point to spare."""
        def monomial(w: Any) -> bool:
            return isinstance(w, str) and bool(_MONOMIAL.match(w)) and set(w.split("*")) <= set(self.sizes)

        if isinstance(self.work, Mapping):
            if not self.work or not all(isinstance(n, str) and n.isidentifier() and monomial(w)
                                             for n, w in self.work.items()):
                raise ValueError(f"{who}: work={dict(self.work)!r} must name one or more components, each a product "
                                 f"of sizes like {{'tokens': {'*'.join(self.sizes)!r}, ...}} (or be one product)")
            if len(set(self.work.values())) < len(self.work):
                raise ValueError(f"{who}: work={dict(self.work)!r} repeats a monomial; each component grows its own way")
            need = len(self.work) + 2
            have = len({tuple(sorted(p.items())) for p in self.time_sizes})
            if self.time_sizes and have < need:
                raise ValueError(f"{who}: {have} time_sizes for {len(self.work)} work components; give at least "
                                 f"{need} (the baseline's cost of each component, its fixed cost, one to spare)")
        elif not monomial(self.work):
            raise ValueError(f"{who}: work={self.work!r} must be a product of sizes like "
                             f"{'*'.join(self.sizes)!r}")

    def entry(self, label: str) -> Entry:
        for e in self.entries:
            if e.label == label:
                return e
        raise KeyError(label)

    # -- the rules the fit and the advice use ------------------------------------------------------
    def loop_of(self, params: Mapping[str, int], chunked: bool) -> tuple[int, dict[str, int]]:
        """``(k, variables)`` of a configuration (technique parameter names -> values)."""
        return self.loop.loop_of(params, self.sizes, chunked)

    def class_variables(self, k: int, chunked: bool) -> tuple[str, ...]:
        return self.loop.class_variables(self.sizes, k, chunked)

    def to_params(self, k: int, point: Mapping[str, int], chunked: bool) -> dict[str, int]:
        return self.loop.to_params(self.sizes, k, point, chunked)

    def trace_points(self, k: int, chunked: bool, distinct: Callable) -> list[dict[str, int]]:
        """Two size points of class ``k`` whose monomials are all told apart (``distinct(points, vars)``)."""
        variables = self.class_variables(k, chunked)
        need = max(4, self.loop.values_needed(self.sizes, k, chunked))
        values = tuple(sorted(set(self.trace_values))) or PRIMES
        if need > len(values):
            raise ValueError(f"advisor model of family {self.name!r}: {need} traced variables; at most {len(values)}")
        rng = random.Random(1000 * k + len(variables))
        for _ in range(2000):
            pts = [self.loop.trace_point(self.sizes, k, chunked, rng.sample(values, need)) for _p in range(2)]
            if None not in pts and distinct(pts, variables):  # None: no point of class k from these values
                return pts
        raise RuntimeError(f"no distinct trace points for {self.name} k={k}")  # pragma: no cover

    def further_points(self, k: int, chunked: bool, exclude: Sequence[Mapping[str, int]],
                       count: int) -> list[dict[str, int]]:
        """Up to ``count`` more distinct size points of class ``k``, none of them in ``exclude``, drawn
        as :meth:`trace_points` draws (NOTE [ polynomial allocations ] in :mod:`memlab.advisor.trace`)."""
        values = tuple(sorted(set(self.trace_values))) or PRIMES
        need = max(4, self.loop.values_needed(self.sizes, k, chunked))
        rng = random.Random(7000 + 1000 * k + need)
        seen = {tuple(sorted(p.items())) for p in exclude}
        out: list[dict[str, int]] = []
        for _ in range(5000):
            if len(out) >= count:
                break
            p = self.loop.trace_point(self.sizes, k, chunked, rng.sample(values, need))
            if tuple(sorted(p.items())) not in seen:
                seen.add(tuple(sorted(p.items())))
                out.append(p)
        return out

    def random_points(self, chunked: bool, count: int, seed: int, *, scale: int = 1) -> list[dict[str, int]]:
        """Held-out configurations (technique parameters) at random sizes, ``scale`` times the traced ones:
        each non-loop size drawn from its ``held_out`` range (default 1 to 32), then the loop's."""
        rng = random.Random(seed)
        others = [s for s in self.sizes if s not in self.loop.loop_sizes()]

        def draw() -> dict[str, int]:
            return {s: rng.randint(*self.held_out.get(s, (1, 32))) * scale for s in others}

        return [self.loop.held_out(rng, draw, self.held_out, chunked, scale) for _ in range(count)]

    def knob_candidates(self, params: Mapping[str, int], low: int, high: int, knob: str | None = None) -> list[int]:
        """Values of ``knob`` (default: the loop's one knob) the advisor tries at ``params``."""
        loop = self.loop if knob is None else self.loop.for_knobs((knob,))
        return loop.knob_candidates(params, low, high)

    def for_entry(self, entry: Entry) -> "Declaration":
        """The declaration ``entry`` is fitted with: itself, or, where each knob chunks its own rows
        (:class:`~memlab.core.loops.ChunksOf`), that entry alone with its knob's loop (and its
        knob's per-chunk costs only, NOTE [ per-chunk costs ])."""
        loop = self.loop.for_knobs(entry.knobs)
        if loop is self.loop:
            return self
        return dataclasses.replace(self, loop=loop, entries=(entry,),
                                   chunk_cost_scale={k: v for k, v in self.chunk_cost_scale.items() if k in entry.knobs},
                                   chunk_split_work={k: v for k, v in self.chunk_split_work.items() if k in entry.knobs},
                                   chunk_cost_work={k: v for k, v in self.chunk_cost_work.items() if k in entry.knobs})

    def variable_docs(self, size_docs: Mapping[str, str]) -> dict[str, str]:
        """What each variable of the pieces means: the loop's variables and the sizes (``size_docs``)."""
        piece_sizes = [s for s in self.sizes if s not in self.loop.loop_sizes()] if self.loop.kind == "count" else self.sizes
        return {**self.loop.variable_docs(), **{s: size_docs.get(s, s) for s in piece_sizes}}

    # -- model files ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The declaration as written into a model file (``families.<name>.declaration``)."""
        return {"family": self.name, "workload": self.workload, "sizes": list(self.sizes),
                "workload_fixed": {k: _to_json_value(v) for k, v in self.workload_fixed.items()},
                "entries": [e.to_json() for e in self.entries],
                "loop": self.loop.to_json(), "time_sizes": [dict(p) for p in self.time_sizes],
                "work": dict(self.work) if isinstance(self.work, Mapping) else self.work,
                "time_chunks": list(self.time_chunks), "held_out": {k: list(v) for k, v in self.held_out.items()},
                "max_degree": self.max_degree, "max_quantum": self.max_quantum, "declared_by": self.declared_by,
                **({"trace_values": list(self.trace_values)} if self.trace_values else {}),
                **({"time_only_sizes": [dict(p) for p in self.time_only_sizes]} if self.time_only_sizes else {}),
                **({"chunk_cost_scale": dict(self.chunk_cost_scale)} if self.chunk_cost_scale else {}),
                **({"chunk_split_work": {k: list(v) for k, v in self.chunk_split_work.items()}}
                   if self.chunk_split_work else {}),
                **({"chunk_cost_work": dict(self.chunk_cost_work)} if self.chunk_cost_work else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Declaration":
        """The declaration a model file states.

        Raises:
            ValueError: not a declaration (the message names the missing or bad field).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"an advisor declaration must be an object, not {type(data).__name__}")
        try:
            return cls(name=str(data["family"]), workload=str(data["workload"]), sizes=tuple(data["sizes"]),
                       workload_fixed={k: _from_json_value(v) for k, v in (data.get("workload_fixed") or {}).items()},
                       entries=tuple(Entry.from_json(e) for e in data["entries"]), loop=Loop.from_json(data["loop"]),
                       time_sizes=tuple(dict(p) for p in data.get("time_sizes") or ()),
                       work=_work_from_json(data["work"]),
                       time_chunks=tuple(data.get("time_chunks") or ()),
                       held_out={k: tuple(v) for k, v in (data.get("held_out") or {}).items()},
                       max_degree=int(data.get("max_degree", 3)), max_quantum=int(data.get("max_quantum", 64)),
                       declared_by=str(data.get("declared_by", "")),
                       trace_values=tuple(data.get("trace_values") or ()),
                       time_only_sizes=tuple(dict(p) for p in data.get("time_only_sizes") or ()),
                       chunk_cost_scale={str(k): str(v) for k, v in (data.get("chunk_cost_scale") or {}).items()},
                       chunk_split_work={str(k): tuple(v) for k, v in (data.get("chunk_split_work") or {}).items()},
                       chunk_cost_work={str(k): str(v) for k, v in (data.get("chunk_cost_work") or {}).items()})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"an advisor declaration without a valid {exc}") from None


def _work_from_json(work: Any) -> str | dict[str, str]:
    """A model file's ``work``: one monomial, or ``{component: monomial}``."""
    return {str(k): str(v) for k, v in work.items()} if isinstance(work, Mapping) else str(work)


def as_declaration(family: Declaration | Mapping[str, Any]) -> Declaration:
    """A :class:`Declaration` from itself, a model file's family (``{"declaration": ...}``) or its
    ``declaration`` object.

    Raises:
        ValueError: a family of a model file without a declaration (fitted before families declared
        their models: run ``python -m memlab.advisor.migrate``).
    """
    if isinstance(family, Declaration):
        return family
    if isinstance(family, Mapping) and "declaration" in family:
        return Declaration.from_json(family["declaration"])
    if isinstance(family, Mapping) and "loop" in family:
        return Declaration.from_json(family)
    raise ValueError("a model family without an advisor declaration; add it with python -m memlab.advisor.migrate "
                     "(or refit with memlab advise --fit)")


def fitted_range(points: list[Mapping[str, int]], sizes: Sequence[str]) -> dict[str, list[int]]:
    """``{size: [min, max]}`` over ``points`` (sizes absent from every point are left out)."""
    out = {}
    for s in sizes:
        vals = [p[s] for p in points if s in p]
        if vals:
            out[s] = [min(vals), max(vals)]
    return out


# -- registration ---------------------------------------------------------------------------------

class AdvisorModel:
    """Base class of advisor declarations.  Subclass with ``family="..."`` to register, beside the
    family's workload (one declaration per family).

    Class attributes (sizes in the workload's own units: rows, channels, blocks...):
        workload: the family's :class:`memlab.Workload` subclass (or its registered name).
        sizes: the workload parameters the models vary, in the order forms list them; each becomes a
            variable of the pieces (a loop's size becomes ``k``).  Every other workload parameter is
            held at its default or at ``workload_fixed``.
        workload_fixed: workload parameters held at these values for every entry (``block="mlp"``).
        loop: how the loop count ``k`` follows from the parameters: :class:`NoLoop` (one class),
            :class:`Chunks` (a size split by a knob) or :class:`Count` (a size counts blocks).
        entries: the modelled technique configurations (:class:`Entry`), the baseline first.
        held_out: ``{size: (low, high)}`` ranges (in the size's units) held-out points draw each
            non-loop size from; default 1 to 32.  The loop draws its own (``Chunks(counts=...)``).
        time_sizes: two or more size points ``{size: value}`` of different work at which the relative
            step time is measured (NOTE [ advisor time model ]); empty: no time model.
        work: the monomial of sizes the step's work grows with (``"n*d*hidden"``), or named components of
            it that a technique may repeat unequally (``{"layers": "batch*seq", "head": "batch*seq*vocab"}``:
            NOTE [ work components ] in :mod:`memlab.advisor.fit`; one or more, and at least two more time
            sizes than components).
        time_chunks: chunk counts each time size is measured at, for entries with a knob.
        max_degree: the highest total degree of an allocation's monomial (3: a [c, d, h] product).
        max_quantum: the largest bytes-per-monomial-unit an allocation may have (4 for a float32
            tensor; more when a fixed size multiplies it, e.g. 4 * 64 for a fixed 8x8 image).
        trace_values: the values traced sizes are drawn from (4 or more distinct integers >= 2);
            empty: the primes 5 to 43.  A model file's default is small (2 to 7) to keep traces cheap.
        time_only_sizes: more size points for the time model only, beyond the sizes where the memory
            model is exact (tensor_train past one cache block of rows): measured and fitted like
            ``time_sizes``, their bytes listed apart (``time_only_measured``), never in the held-out
            byte error or the validated range.
        chunk_cost_scale: ``{knob: product of sizes}`` for a knob whose loop runs inside an outer loop
            (the transformer's ``block`` inside every one of its ``layers``): the per-chunk cost counts
            ``(k - 1) * layers`` further loop bodies, not ``k - 1`` (NOTE [ per-chunk costs ] in
            :mod:`memlab.advisor.fit`).
        chunk_split_work: ``{knob: (work components,)}`` whose work the knob's chunks split unequally
            (causal query blocks: block ``i`` scores ``i + 1`` blocks of keys, ``W (k + 1) / (2k)`` in
            all): the time model gives each a term in ``W_j / k`` too (NOTE [ per-chunk costs ]).
        chunk_cost_work: ``{knob: product of sizes}`` a further chunk's cost grows with, beside its
            constant (the chunking family's ``"n*d"``: each chunk's slice backward writes a full
            ``[n, d]`` gradient): the time model fits ``o + o_work_cost * product`` per further loop
            body (NOTE [ per-chunk costs ]).
    """

    family: ClassVar[str] = ""
    workload: ClassVar[Any] = None
    sizes: ClassVar[tuple[str, ...]] = ()
    workload_fixed: ClassVar[Mapping[str, Any]] = {}
    loop: ClassVar[Loop] = NoLoop()
    entries: ClassVar[tuple[Entry, ...]] = ()
    held_out: ClassVar[Mapping[str, tuple[int, int]]] = {}
    time_sizes: ClassVar[tuple[Mapping[str, int], ...]] = ()
    work: ClassVar[str | Mapping[str, str]] = ""
    time_chunks: ClassVar[tuple[int, ...]] = ()
    max_degree: ClassVar[int] = 3
    max_quantum: ClassVar[int] = 64
    trace_values: ClassVar[tuple[int, ...]] = ()
    time_only_sizes: ClassVar[tuple[Mapping[str, int], ...]] = ()
    chunk_cost_scale: ClassVar[Mapping[str, str]] = {}
    chunk_split_work: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    chunk_cost_work: ClassVar[Mapping[str, str]] = {}

    def __init_subclass__(cls, family: str | None = None, **kw):
        super().__init_subclass__(**kw)
        if family is None:
            return
        if not isinstance(family, str) or not family.isidentifier():
            raise ValueError(f"advisor model family {family!r} must be an identifier like 'chunking'")
        cls.family = family
        cls.declaration()  # validates: a bad declaration fails at import, naming the field
        register_advisor(family, cls)  # refuses a family another class declares

    @classmethod
    def workload_name(cls) -> str:
        w = cls.workload
        if isinstance(w, str):
            return w
        if isinstance(getattr(w, "name", None), str) and w.name:
            return w.name
        raise TypeError(f"advisor model of family {cls.family!r}: workload={w!r} must be a memlab.Workload "
                        "subclass or its registered name")

    @classmethod
    def declaration(cls) -> Declaration:
        """The declaration as data; ValueError naming a bad field."""
        params = getattr(cls.workload, "params", None)
        if isinstance(params, Mapping):
            unknown = [s for s in (*cls.sizes, *cls.workload_fixed) if s not in params]
            if unknown:
                raise ValueError(f"advisor model of family {cls.family!r}: {unknown} are not parameters of workload "
                                 f"{cls.workload_name()!r}; its parameters: {', '.join(params)}")
            wf = getattr(cls.workload, "family", cls.family)
            if wf != cls.family:
                raise ValueError(f"advisor model of family {cls.family!r}: workload {cls.workload_name()!r} belongs "
                                 f"to family {wf!r}")
        return Declaration(
            name=cls.family, workload=cls.workload_name(), sizes=tuple(cls.sizes),
            workload_fixed=dict(cls.workload_fixed), entries=tuple(cls.entries), loop=cls.loop,
            time_sizes=tuple(dict(p) for p in cls.time_sizes),
            work=dict(cls.work) if isinstance(cls.work, Mapping) else cls.work, time_chunks=tuple(cls.time_chunks),
            held_out={k: tuple(v) for k, v in cls.held_out.items()}, max_degree=cls.max_degree,
            max_quantum=cls.max_quantum, declared_by=f"{cls.__module__}.{cls.__qualname__}",
            trace_values=tuple(cls.trace_values), time_only_sizes=tuple(dict(p) for p in cls.time_only_sizes),
            chunk_cost_scale=dict(cls.chunk_cost_scale),
            chunk_split_work={k: tuple(v) for k, v in cls.chunk_split_work.items()},
            chunk_cost_work=dict(cls.chunk_cost_work))
