"""What the advisor models, per family: sizes, the loop variable, the variables of the pieces, the
traced and held-out designs.  Torch-free (the advisor reads the same definitions).

Two families are modelled (see NOTE [ advisor models ] in :mod:`memlab.advisor.model`):

* ``chunking`` (workload ``chained_matmul``): sizes ``n, d, hidden``, knob ``chunk_size``.  Loop
  variable ``k = ceil(n / chunk)`` with ``chunk = min(chunk_size, n)`` rows per chunk and
  ``last = n - (k - 1) * chunk`` rows in the last one.
* ``reversible`` (workload ``residual_stack``, ``block="mlp"``, ``coupling="additive"``): sizes
  ``depth, batch, width, hidden``; loop variable ``k = depth``; no knob (the choice is the technique).

``tensor_train`` is not modelled: its sizes are mode tuples (any number of cores), so its tensors are
not monomials of a fixed set of sizes.  The peers (MemCNN, RevLib, tensorly-torch) are not modelled.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["Entry", "Family", "FAMILIES", "get_family", "loop_of", "BASE_K"]

#: the general class is traced at this loop count plus one (and checked at +2, +3); counts up to
#: ``BASE_K`` have a class each, traced exactly
BASE_K = 3


@dataclass(frozen=True)
class Entry:
    """One modelled technique configuration: the technique, the parameters held fixed, its knobs."""

    technique: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    knobs: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        extra = ",".join(f"{k}={_fmt(v)}" for k, v in sorted(self.fixed.items()) if k not in _WORKLOAD_FIXED)
        return f"{self.technique}[{extra}]" if extra else self.technique


_WORKLOAD_FIXED = {"x_requires_grad", "coupling", "block", "spatial"}


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


@dataclass(frozen=True)
class Family:
    """How one family is modelled.

    Attributes:
        sizes: the workload's size parameters (every other workload parameter is ``workload_fixed``).
        variables: the variables of the looped classes' pieces (the exact ``k = 1`` class of a chunked
            technique uses ``sizes`` only).
        time_points: size points (with knob values) measured for the relative step time.
    """

    name: str
    workload: str
    sizes: tuple[str, ...]
    workload_fixed: Mapping[str, Any]
    entries: tuple[Entry, ...]
    #: the sizes the relative step time is measured at (at least two, of different work) ...
    time_sizes: tuple[Mapping[str, int], ...]
    #: ... the monomial of sizes the step's work grows with (NOTE [ advisor time model ] in fit) ...
    work: str
    #: ... and, for chunked entries, the chunk counts at each of them
    time_chunks: tuple[int, ...] = ()

    def entry(self, label: str) -> Entry:
        for e in self.entries:
            if e.label == label:
                return e
        raise KeyError(label)


FAMILIES: dict[str, Family] = {
    "chunking": Family(
        name="chunking", workload="chained_matmul", sizes=("n", "d", "hidden"),
        workload_fixed={"x_requires_grad": True},
        entries=(
            Entry("unchunked"),
            Entry("slice_loop", knobs=("chunk_size",)),
            Entry("vmap_chunk", knobs=("chunk_size",)),
            Entry("checkpoint_chunk", knobs=("chunk_size",)),
            Entry("einsum_chunk", {"opt_einsum": False}, knobs=("chunk_size",)),
            Entry("slice_accumulate", {"backward": "manual"}, knobs=("chunk_size",)),
            Entry("slice_accumulate", {"backward": "autograd"}, knobs=("chunk_size",)),
        ),
        time_sizes=({"n": 2048, "d": 64, "hidden": 256}, {"n": 8192, "d": 128, "hidden": 512},
                    {"n": 16384, "d": 256, "hidden": 512}),
        work="n*d*hidden", time_chunks=(1, 4, 16),
    ),
    "reversible": Family(
        name="reversible", workload="residual_stack", sizes=("depth", "batch", "width", "hidden"),
        workload_fixed={"coupling": "additive", "block": "mlp", "x_requires_grad": True},
        entries=(Entry("residual"), Entry("checkpoint_block"), Entry("reversible"), Entry("reversible_nosave")),
        time_sizes=({"depth": 8, "batch": 128, "width": 64, "hidden": 128},
                    {"depth": 16, "batch": 256, "width": 128, "hidden": 256},
                    {"depth": 16, "batch": 256, "width": 256, "hidden": 1024}),
        work="depth*batch*width*hidden",
    ),
}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown family {name!r}; modelled families: {', '.join(sorted(FAMILIES))}") from None


# -- variables --------------------------------------------------------------------------------

def loop_of(family: str, params: Mapping[str, int], chunked: bool) -> tuple[int, dict[str, int]]:
    """``(k, variables)`` of a configuration: the loop count and the values the pieces are written in.

    chunking: ``chunk = min(chunk_size, n)`` (``n`` without a knob), ``k = ceil(n / chunk)``,
    ``last = n - (k - 1) * chunk``; reversible: ``k = depth``.
    """
    if family == "chunking":
        n = int(params["n"])
        chunk = min(int(params["chunk_size"]), n) if chunked else n
        k = -(-n // chunk)
        return k, {"n": n, "d": int(params["d"]), "hidden": int(params["hidden"]), "chunk": chunk,
                   "last": n - (k - 1) * chunk}
    if family == "reversible":
        return int(params["depth"]), {v: int(params[v]) for v in ("batch", "width", "hidden")}
    raise ValueError(f"unknown family {family!r}; modelled families: {', '.join(sorted(FAMILIES))}")


def class_variables(family: str, k: int, chunked: bool) -> tuple[str, ...]:
    """The variables a class's monomials may use (identification library)."""
    if family == "chunking":
        return ("n", "d", "hidden") if (k == 1 or not chunked) else ("n", "d", "hidden", "chunk", "last")
    return ("batch", "width", "hidden")


def to_params(family: str, k: int, point: Mapping[str, int], chunked: bool) -> dict[str, int]:
    """Technique parameters of a traced point of class ``k``."""
    if family == "chunking":
        out = {"n": point["n"], "d": point["d"], "hidden": point["hidden"]}
        if chunked:
            out["chunk_size"] = point.get("chunk", point["n"])
        return out
    return {"depth": k, "batch": point["batch"], "width": point["width"], "hidden": point["hidden"]}


_PRIMES = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43)


def trace_points(family: str, k: int, chunked: bool, distinct: Callable) -> list[dict[str, int]]:
    """Two size points of class ``k`` whose monomials are all told apart (``distinct(points, vars)``)."""
    variables = class_variables(family, k, chunked)
    rng = random.Random(1000 * k + len(variables))
    for _ in range(2000):
        pts = []
        for _p in range(2):
            vals = rng.sample(_PRIMES, 4)
            if family == "chunking":
                d, h, c, last = vals
                if variables == ("n", "d", "hidden"):
                    pts.append({"n": c, "d": d, "hidden": h})
                    continue
                last = min(last, c - 1) if last >= c else last
                pts.append({"n": (k - 1) * c + last, "d": d, "hidden": h, "chunk": c, "last": last})
            else:
                pts.append({"batch": vals[0], "width": vals[1], "hidden": vals[2]})
        if distinct(pts, variables):
            return pts
    raise RuntimeError(f"no distinct trace points for {family} k={k}")  # pragma: no cover


def random_points(family: str, chunked: bool, count: int, seed: int, *, scale: int = 1,
                  k_max: int = 40) -> list[dict[str, int]]:
    """Held-out configurations (technique parameters) at random sizes, ``scale`` times the traced ones."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        if family == "chunking":
            d, h = rng.randint(2, 48) * scale, rng.randint(2, 96) * scale
            if not chunked:
                out.append({"n": rng.randint(2, 400) * scale, "d": d, "hidden": h})
                continue
            k = rng.choice([1, 2, 3, 4, 5, 7, 11, rng.randint(4, k_max)])
            c = rng.randint(2, 40) * scale
            last = rng.randint(1, c)
            out.append({"n": (k - 1) * c + last, "d": d, "hidden": h, "chunk_size": c})
        else:
            out.append({"depth": rng.choice([1, 2, 3, 4, 5, rng.randint(4, 12)]), "batch": rng.randint(1, 64) * scale,
                        "width": rng.randint(1, 40) * scale, "hidden": rng.randint(1, 80) * scale})
    return out


def knob_candidates(family: str, params: Mapping[str, int], low: int, high: int) -> list[int]:
    """Chunk sizes to consider for ``n`` rows: the smallest chunk giving each of a log-spaced set of
    chunk counts (1, 2, 3, 4, 6, 8, 12, 16 ... up to ``n``), within ``[low, high]``."""
    if family != "chunking":
        return []
    n = int(params["n"])
    counts, c = set(), 1.0
    while c <= n:
        counts.add(int(c))
        counts.add(int(round(c * 1.5)))
        c *= 2
    counts.add(n)
    sizes = sorted({max(low, min(high, -(-n // k))) for k in counts if 1 <= k <= n})
    return sizes


def fitted_range(points: list[Mapping[str, int]], sizes: tuple[str, ...]) -> dict[str, list[int]]:
    out = {}
    for s in sizes:
        vals = [p[s] for p in points if s in p]
        if vals:
            out[s] = [min(vals), max(vals)]
    return out

