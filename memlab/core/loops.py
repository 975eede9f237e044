"""The loop kinds of an advisor declaration: how a family's loop count ``k`` and the variables of its
model pieces follow from the parameters (NOTE [ advisor models ] in :mod:`memlab.advisor.model`).

Each kind is a small object carrying its own rules (loop count, variables, traced and held-out
points, knob candidates, the Choose page's rule), as a coupling carries its forward and inverse;
:meth:`Loop.from_json` reads one back from a model file.  Torch-free.
"""
from __future__ import annotations

import random
from typing import Any, Callable, ClassVar, Mapping, Sequence

from .params import check_steps

__all__ = ["Loop", "NoLoop", "Chunks", "Count", "ProductChunks", "ChunksOf", "Repeated"]


# -- loops ----------------------------------------------------------------------------------------

class Loop:
    """How a family's loop count ``k`` and the variables of its pieces follow from the parameters.

    ``k`` selects the model class (``k = 1 .. BASE_K`` exact, larger ``k`` the general class with
    ``m = k - BASE_K - 1``).  Subclasses register their ``kind`` (the name stored in model files).
    """

    kind: ClassVar[str] = ""
    _KINDS: ClassVar[dict[str, type["Loop"]]] = {}
    #: the technique parameter whose candidates the advisor searches (None: no knob)
    knob: str | None = None

    def __init_subclass__(cls, kind: str | None = None, **kw):
        super().__init_subclass__(**kw)
        if kind:
            cls.kind = kind
            Loop._KINDS[kind] = cls

    # -- what each kind states ----------------------------------------------------------------
    def loop_sizes(self) -> tuple[str, ...]:
        """The sizes the loop count is read from (they are not piece variables in a looped class)."""
        return ()

    def looped(self, chunked: bool) -> bool:
        """Whether the configuration has loop classes beyond ``k = 1``."""
        return False

    def outer_size(self) -> str | None:
        """The size counting an outer loop around this one (:class:`Repeated`); None: no outer loop."""
        return None

    def loop_of(self, params: Mapping[str, int], sizes: Sequence[str], chunked: bool) -> tuple[int, dict[str, int]]:
        """``(k, variables)``: the loop count and the values the pieces are written in."""
        return 1, {s: int(params[s]) for s in sizes}

    def class_variables(self, sizes: Sequence[str], k: int, chunked: bool) -> tuple[str, ...]:
        """The variables a class's monomials may use."""
        return tuple(sizes)

    def trace_point(self, sizes: Sequence[str], k: int, chunked: bool, vals: Sequence[int]) -> dict[str, int]:
        """A traced point of class ``k`` from distinct primes ``vals``: the non-loop sizes in declared
        order take the first values, the loop's variables the next."""
        return dict(zip(sizes, vals))

    def values_needed(self, sizes: Sequence[str], k: int, chunked: bool) -> int:
        return len(sizes)

    def to_params(self, sizes: Sequence[str], k: int, point: Mapping[str, int], chunked: bool) -> dict[str, int]:
        """Technique parameters of a traced point of class ``k``."""
        return {s: point[s] for s in sizes}

    def held_out(self, rng: random.Random, draw_others: Callable[[], dict[str, int]],
                 ranges: Mapping[str, tuple[int, int]], chunked: bool, scale: int) -> dict[str, int]:
        """One held-out configuration: the non-loop sizes (``draw_others()`` draws them from ``rng``)
        plus the loop's parameters, drawn from the same ``rng`` in the loop's own order."""
        return draw_others()

    def knob_candidates(self, params: Mapping[str, int], low: int, high: int) -> list[int]:
        """Knob values the advisor tries when none is given (empty: no knob)."""
        return []

    def check(self, params: Mapping[str, int]) -> None:
        """Raise ValueError (naming the value and the valid ones) for parameters the loop cannot read."""

    def knobs(self) -> tuple[str, ...]:
        """The technique parameters an entry of this loop may search."""
        return (self.knob,) if self.knob else ()

    def for_knobs(self, knobs: Sequence[str]) -> "Loop":
        """The loop an entry searching ``knobs`` is fitted and predicted with (itself, but for
        :class:`ChunksOf`, whose knobs each chunk their own rows)."""
        return self

    def variable_docs(self) -> dict[str, str]:
        """What each loop variable means (written into the model file beside the sizes' docs)."""
        return {}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def page_rule(self, sizes: Sequence[str]) -> dict[str, Any]:
        """The loop rule the Choose page's script evaluates (``loopOf`` in ``choose.js``)."""
        return {"kind": self.kind, "sizes": [s for s in sizes if s not in self.loop_sizes()], "order": list(sizes)}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "Loop":
        """The loop a model file states; ValueError naming the kinds known."""
        kind = data.get("kind") if isinstance(data, Mapping) else None
        if kind not in Loop._KINDS:
            raise ValueError(f"loop kind {kind!r} is not known; known: {', '.join(sorted(Loop._KINDS))}")
        args = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k != "kind"}
        return Loop._KINDS[kind](**args)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_json() == self.to_json()

    def __hash__(self) -> int:
        return hash(repr(sorted(self.to_json().items())))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_json().items() if k != "kind")
        return f"{type(self).__name__}({args})"


class NoLoop(Loop, kind="none"):
    """No loop: one class (``k = 1``) whose variables are the sizes."""


class Chunks(Loop, kind="chunks"):
    """``rows`` split in chunks of ``knob`` rows: ``chunk = min(knob, rows)`` (``rows`` without the
    knob), ``k = ceil(rows / chunk)``, ``last = rows - (k - 1) * chunk`` rows in the last chunk.

    Args:
        rows: the size that is chunked (e.g. ``"n"``).
        knob: the technique parameter giving rows per chunk (e.g. ``"chunk_size"``).
        counts: loop counts a held-out point draws from (plus one in ``[4, k_max]``).
        k_max: the largest held-out loop count.
        chunk: range of the held-out chunk (rows, times the scale).
    """

    def __init__(self, rows: str, knob: str, counts: tuple[int, ...] = (1, 2, 3, 4, 5, 7, 11), k_max: int = 40,
                 chunk: tuple[int, int] = (2, 40)):
        self.rows, self.knob, self.counts, self.k_max, self.chunk = rows, knob, tuple(counts), int(k_max), tuple(chunk)

    def loop_sizes(self):
        return (self.rows,)

    def rows_of(self, params: Mapping[str, int]) -> int:
        """The rows that are chunked, at ``params``."""
        return int(params[self.rows])

    def knob_for_count(self, params: Mapping[str, int], k: int) -> int:
        """The knob value (rows per chunk) that splits the rows at ``params`` in ``k`` chunks or fewer."""
        return -(-self.rows_of(params) // k)

    def looped(self, chunked):
        return chunked

    def loop_of(self, params, sizes, chunked):
        n = self.rows_of(params)
        chunk = min(int(params[self.knob]), n) if chunked else n
        k = -(-n // chunk)
        return k, {**{s: int(params[s]) for s in sizes}, "chunk": chunk, "last": n - (k - 1) * chunk}

    def class_variables(self, sizes, k, chunked):
        if k == 1 or not chunked:
            return tuple(sizes)
        return (*sizes, "chunk", "last")

    def values_needed(self, sizes, k, chunked):
        return len(sizes) + (0 if (k == 1 or not chunked) else 1)

    def trace_point(self, sizes, k, chunked, vals):
        others = [s for s in sizes if s != self.rows]
        point = dict(zip(others, vals))
        c = vals[len(others)]
        if k == 1 or not chunked:
            return {self.rows: c, **point}
        last = vals[len(others) + 1]
        last = min(last, c - 1) if last >= c else last
        return {self.rows: (k - 1) * c + last, **point, "chunk": c, "last": last}

    def to_params(self, sizes, k, point, chunked):
        out = {s: point[s] for s in sizes}
        if chunked:
            out[self.knob] = point.get("chunk", point[self.rows])
        return out

    def held_out(self, rng, draw_others, ranges, chunked, scale):
        others = draw_others()
        if not chunked:
            lo, hi = ranges.get(self.rows, (2, 400))
            return {**others, self.rows: rng.randint(lo, hi) * scale}
        k = rng.choice([*self.counts, rng.randint(4, self.k_max)])
        c = rng.randint(*self.chunk) * scale
        last = rng.randint(1, c)
        return {**others, self.rows: (k - 1) * c + last, self.knob: c}

    def knob_candidates(self, params, low, high):
        """The smallest chunk giving each of a log-spaced set of chunk counts (1, 2, 3, 4, 6, 8, 12,
        16 ... up to ``rows``), within ``[low, high]``."""
        n = self.rows_of(params)
        counts, c = set(), 1.0
        while c <= n:
            counts.add(int(c))
            counts.add(int(round(c * 1.5)))
            c *= 2
        counts.add(n)
        return sorted({max(low, min(high, -(-n // k))) for k in counts if 1 <= k <= n})

    def variable_docs(self):
        r = self.rows
        return {"chunk": f"rows per chunk: min({self.knob}, {r}); {r} for unchunked",
                "k": f"chunks: ceil({r} / chunk); selects the class (k = 1, 2, 3 exact; k >= 4 general)",
                "last": f"rows of the last chunk: {r} - (k - 1) * chunk",
                "m": "k - 4 in the general class (k_min = 4)"}

    def to_json(self):
        return {"kind": self.kind, "rows": self.rows, "knob": self.knob, "counts": list(self.counts),
                "k_max": self.k_max, "chunk": list(self.chunk)}

    def page_rule(self, sizes):
        return {"kind": self.kind, "rows": self.rows, "knob": self.knob, "sizes": list(sizes), "order": list(sizes)}


class Count(Loop, kind="count"):
    """A size counts the loop: ``size = per * k + offset`` (``depth`` blocks: ``per = 1``; a 6n+2
    ResNet: ``per = 6``, ``offset = 2``).  The variables are the other sizes.

    Args:
        size: the size parameter that counts the loop.
        per, offset: ``size = per * k + offset``; a size not of that form is refused by :meth:`check`.
        counts: loop counts a held-out point draws from (plus one in ``[4, k_max]``).
        k_max: the largest held-out loop count.
    """

    def __init__(self, size: str, per: int = 1, offset: int = 0, counts: tuple[int, ...] = (1, 2, 3, 4, 5),
                 k_max: int = 12):
        if int(per) < 1:
            raise ValueError(f"Count(per={per!r}) must be an integer >= 1")
        self.size, self.per, self.offset, self.counts, self.k_max = size, int(per), int(offset), tuple(counts), int(k_max)

    def loop_sizes(self):
        return (self.size,)

    def looped(self, chunked):
        return True

    def check(self, params):
        check_steps(self.size, int(params[self.size]), self.per, self.offset,
                    rule=f"is not {self.per}k+{self.offset} (k >= 1)")

    def loop_of(self, params, sizes, chunked):
        self.check(params)
        k = (int(params[self.size]) - self.offset) // self.per
        return k, {s: int(params[s]) for s in sizes if s != self.size}

    def class_variables(self, sizes, k, chunked):
        return tuple(s for s in sizes if s != self.size)

    def values_needed(self, sizes, k, chunked):
        return len(sizes) - 1

    def trace_point(self, sizes, k, chunked, vals):
        return dict(zip(self.class_variables(sizes, k, chunked), vals))

    def to_params(self, sizes, k, point, chunked):
        return {self.size: self.per * k + self.offset, **{s: point[s] for s in sizes if s != self.size}}

    def held_out(self, rng, draw_others, ranges, chunked, scale):
        k = rng.choice([*self.counts, rng.randint(4, self.k_max)])
        return {self.size: self.per * k + self.offset, **draw_others()}

    def variable_docs(self):
        plain = (self.per, self.offset) == (1, 0)
        k = self.size if plain else f"({self.size} - {self.offset}) / {self.per}"
        return {"k": f"{k}; selects the class (k = 1, 2, 3 exact; k >= 4 general)",
                "m": f"{self.size if plain else 'k'} - 4 in the general class (k_min = 4)"}

    def to_json(self):
        return {"kind": self.kind, "size": self.size, "per": self.per, "offset": self.offset,
                "counts": list(self.counts), "k_max": self.k_max}

    def page_rule(self, sizes):
        rule = {"kind": self.kind, "count": self.size, "sizes": [s for s in sizes if s != self.size],
                "order": list(sizes)}
        if (self.per, self.offset) != (1, 0):
            rule.update(per=self.per, offset=self.offset)
        return rule


class ProductChunks(Chunks, kind="product_chunks"):
    """A product of sizes (``batch * seq`` tokens) split in chunks of ``knob`` rows: as :class:`Chunks`
    (``chunk``, ``k``, ``last`` and ``m`` alike), but the rows are no size of their own, so every size
    stays a variable and a traced point of class ``k`` takes ``chunk`` from the rows (any chunk that
    gives exactly ``k`` chunks).

    Args:
        rows: the sizes whose product is chunked (``("batch", "seq")``).
        knob, counts, k_max, chunk: as :class:`Chunks` (``chunk`` is unused: the chunk follows from
            the rows and the drawn count).
    """

    def __init__(self, rows: Sequence[str], knob: str, counts: tuple[int, ...] = (1, 2, 3, 4, 5, 7, 11),
                 k_max: int = 40, chunk: tuple[int, int] = (2, 40)):
        super().__init__("*".join(rows) if not isinstance(rows, str) else rows, knob, counts, k_max, chunk)
        self.parts = tuple(self.rows.split("*"))

    def loop_sizes(self):
        return ()

    def rows_of(self, params):
        n = 1
        for s in self.parts:
            n *= int(params[s])
        return n

    def values_needed(self, sizes, k, chunked):
        return len(sizes) + (0 if (k == 1 or not chunked) else 1)

    def trace_point(self, sizes, k, chunked, vals):
        point = dict(zip(sizes, vals))
        if k == 1 or not chunked:
            return point
        n = self.rows_of(point)
        lo, hi = -(-n // k), -(-n // (k - 1)) - 1  # chunks of lo .. hi rows give exactly k chunks
        if lo > hi:
            return None  # no chunk gives k chunks of these rows: the caller draws again
        c = lo + vals[len(sizes)] % (hi - lo + 1)
        return {**point, "chunk": c, "last": n - (k - 1) * c}

    def to_params(self, sizes, k, point, chunked):
        out = {s: point[s] for s in sizes}
        if chunked:
            out[self.knob] = point.get("chunk", self.rows_of(point))
        return out

    def held_out(self, rng, draw_others, ranges, chunked, scale):
        others = draw_others()
        if not chunked:
            return others
        n = self.rows_of(others)
        k = min(n, rng.choice([*self.counts, rng.randint(4, self.k_max)]))
        return {**others, self.knob: -(-n // k)}

    def to_json(self):
        return {**super().to_json(), "rows": list(self.parts)}


class ChunksOf(Loop, kind="chunks_of"):
    """Several knobs, each chunking its own rows: ``ChunksOf({"block": "seq", "chunk": "batch*seq"})``.

    An entry searches one of them; it is fitted and predicted with that knob's loop
    (:meth:`for_knobs`: :class:`Chunks` over a size, :class:`ProductChunks` over a product of sizes),
    an entry without a knob with :class:`NoLoop`.  Which knob a configuration uses is read from its
    parameters (the one knob present).

    Args:
        knobs: ``{knob: rows}``, rows a size or a product of sizes (``"batch*seq"``).
        counts, k_max, chunk: passed to each knob's loop (see :class:`Chunks`).
    """

    def __init__(self, knobs: Mapping[str, str], counts: tuple[int, ...] = (1, 2, 3, 4, 5, 7, 11), k_max: int = 40,
                 chunk: tuple[int, int] = (2, 40)):
        if not knobs:
            raise ValueError("ChunksOf(knobs={}) needs at least one {knob: rows}")
        self.rows = {str(k): str(v) for k, v in dict(knobs).items()}
        self.counts, self.k_max, self.chunk = tuple(counts), int(k_max), tuple(chunk)

    def knobs(self):
        return tuple(self.rows)

    def for_knobs(self, knobs):
        if not knobs:
            return NoLoop()
        if len(knobs) != 1 or knobs[0] not in self.rows:
            raise ValueError(f"a {self.kind} loop chunks one of {', '.join(self.rows)} per entry; got knobs {list(knobs)}")
        parts = self.rows[knobs[0]].split("*")
        kw = {"counts": self.counts, "k_max": self.k_max, "chunk": self.chunk}
        return Chunks(parts[0], knobs[0], **kw) if len(parts) == 1 else ProductChunks(tuple(parts), knobs[0], **kw)

    def _of(self, params: Mapping[str, int], chunked: bool) -> Loop:
        given = [k for k in self.rows if k in params] if chunked else []
        if chunked and len(given) != 1:
            raise ValueError(f"a chunked configuration gives one of the knobs {', '.join(self.rows)}; got {sorted(params)}")
        return self.for_knobs(tuple(given))

    def loop_sizes(self):
        return tuple(dict.fromkeys(s for rows in self.rows.values() for s in rows.split("*")))

    def looped(self, chunked):
        return chunked

    def loop_of(self, params, sizes, chunked):
        return self._of(params, chunked).loop_of(params, sizes, chunked)

    def variable_docs(self):
        docs: dict[str, list[str]] = {}
        for knob in self.rows:
            for var, text in self.for_knobs((knob,)).variable_docs().items():
                docs.setdefault(var, []).append(f"{knob}: {text}")
        return {var: "; ".join(texts) for var, texts in docs.items()}

    def to_json(self):
        return {"kind": self.kind, "knobs": dict(self.rows), "counts": list(self.counts), "k_max": self.k_max,
                "chunk": list(self.chunk)}

    def page_rule(self, sizes):
        return {"kind": self.kind, "knobs": {k: rows.split("*") for k, rows in self.rows.items()},
                "sizes": list(sizes), "order": list(sizes)}


class Repeated(Loop, kind="repeated"):
    """An outer loop around another: ``size`` counts repeated bodies (a transformer's ``layers``), each
    holding whatever the ``inner`` loop gives (a layer's attention blocks, or nothing), and the inner
    loop's own chunks (the loss's) may lie outside them.

    A model class is one of the inner loop's (``k``, ``k_min``) at one outer count or at every count of
    at least ``BASE_K + 1`` (``outer``: ``{"size", "k"}`` or ``{"size", "k_min"}``); in the general outer
    class the size itself is a variable of the pieces (its bodies' copies ``size - BASE_K - 1 >= 0``
    written out in the size: NOTE [ outer loops ] in :mod:`memlab.advisor.fit`).  The inner loop's
    variables are those of its own kind, over the other sizes.

    Args:
        size: the size that counts the outer bodies (>= 1).
        inner: the loop inside (:class:`NoLoop`, :class:`ChunksOf`...; a model file's object is read back).
        counts: outer counts a held-out point draws from (plus one in ``[4, k_max]``).
        k_max: the largest held-out outer count.
    """

    def __init__(self, size: str, inner: "Loop | Mapping[str, Any]" = None, counts: tuple[int, ...] = (1, 2, 3, 4, 5),
                 k_max: int = 12):
        self.size, self.counts, self.k_max = size, tuple(counts), int(k_max)
        inner = NoLoop() if inner is None else inner
        self.inner = inner if isinstance(inner, Loop) else Loop.from_json(inner)
        if isinstance(self.inner, Repeated):
            raise ValueError(f"Repeated({size!r}) inside another Repeated: one outer loop per family")

    def _sizes(self, sizes: Sequence[str]) -> list[str]:
        return [s for s in sizes if s != self.size]

    @property
    def knob(self):  # the inner loop's knob (an entry's loop, after for_knobs)
        return self.inner.knob

    def outer_size(self) -> str:
        return self.size

    def knob_for_count(self, params: Mapping[str, int], k: int) -> int:
        return self.inner.knob_for_count(params, k)

    def loop_sizes(self):
        return (self.size, *self.inner.loop_sizes())

    def looped(self, chunked):
        return self.inner.looped(chunked)

    def check(self, params):
        check_steps(self.size, int(params[self.size]), 1, 0, rule="is not a whole count >= 1")
        self.inner.check(params)

    def loop_of(self, params, sizes, chunked):
        k, values = self.inner.loop_of(params, self._sizes(sizes), chunked)
        return k, {**values, self.size: int(params[self.size])}

    def class_variables(self, sizes, k, chunked):
        return self.inner.class_variables(self._sizes(sizes), k, chunked)

    def values_needed(self, sizes, k, chunked):
        return self.inner.values_needed(self._sizes(sizes), k, chunked)

    def trace_point(self, sizes, k, chunked, vals):
        return self.inner.trace_point(self._sizes(sizes), k, chunked, vals)

    def to_params(self, sizes, k, point, chunked):
        out = self.inner.to_params(self._sizes(sizes), k, point, chunked)
        return {**out, self.size: point[self.size]} if self.size in point else out

    def held_out(self, rng, draw_others, ranges, chunked, scale):
        count = rng.choice([*self.counts, rng.randint(4, self.k_max)])
        return {**self.inner.held_out(rng, draw_others, ranges, chunked, scale), self.size: count}

    def knob_candidates(self, params, low, high):
        return self.inner.knob_candidates(params, low, high)

    def knobs(self):
        return self.inner.knobs()

    def for_knobs(self, knobs):
        inner = self.inner.for_knobs(knobs)
        return self if inner is self.inner else Repeated(self.size, inner, self.counts, self.k_max)

    def variable_docs(self):
        return {**self.inner.variable_docs(),
                self.size: f"{self.size}: selects the outer class ({self.size} = 1, 2, 3 exact; >= 4 general, "
                           f"where it is a variable of the pieces)"}

    def to_json(self):
        return {"kind": self.kind, "size": self.size, "inner": self.inner.to_json(), "counts": list(self.counts),
                "k_max": self.k_max}

    def page_rule(self, sizes):
        return {"kind": self.kind, "count": self.size, "inner": self.inner.page_rule(self._sizes(sizes)),
                "sizes": list(self._sizes(sizes)), "order": list(sizes)}
