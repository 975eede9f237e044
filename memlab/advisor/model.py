"""Memory models of a training step, stored as JSON and evaluated without torch.

# NOTE [ advisor models ]
Form.  For one technique configuration (workload fixed parameters and optimizer fixed, float32, CPU
exact bytes), the total peak of a training step is

    total_peak(sizes, knobs) = max_j  P_j(variables)

a maximum of a few polynomials with integer coefficients (bytes), one per moment of the step at which
the live bytes can peak; each ``P_j`` is split the same way into the six memory categories, so the
categories at the peak are those of the maximising piece (the first one on a tie, as the
measurement reports the first moment its peak is reached).  The variables depend on the family's
advisor declaration (:class:`memlab.core.declaration.AdvisorModel`, beside its workload, and
written into each model file): a loop count ``k`` (its ``loop``: chunks of a size, a size that
counts blocks, or, for a family with several knobs, the chunks of the one knob an entry searches, each
knob over its own rows: ``ChunksOf``, the transformer's ``block`` over ``seq`` and ``chunk`` over the
``batch * seq`` tokens) selects a class: ``k = 1, 2, 3`` have their own pieces; every ``k >= 4`` shares one
set of pieces in which the loop enters through ``m = k - 4 >= 0``; a family without a loop has one
class.

Why this form, and why it is exact.  Every allocation of a step is one tensor whose bytes are
``q * monomial`` of the sizes (``4 * chunk * hidden`` for a chunk's hidden activation, ``4 * d * n``
for ``slice_backward``'s zero gradient), and the sequence of allocations and frees depends on the
sizes only through the loop count.  So the live bytes after every event are a polynomial, and the peak
is the maximum of those polynomials: piecewise polynomial, not one polynomial.  A least-squares fit of
one polynomial over monomials is therefore wrong wherever the step's peak moves from one moment to
another (it did: 12 KB residuals at 40 chained-matmul points for ``slice_loop`` when its peak moves
between the first and second chunk of backward, depending on ``n * d`` against ``last * hidden``).
Instead the models are built from the exact allocation trace itself (:mod:`memlab.advisor.trace`):

1. Trace the step at two size points of a class whose sizes are distinct primes; each event's bytes
   at the two points identify its ``q`` and monomial uniquely (an exact rational solve of one
   unknown per event; no rounding needed, and a failure to identify is an error, not a residual).
   An allocation that is a sum (a workspace with a fixed part) is solved as an exact polynomial
   from further traces: NOTE [ polynomial allocations ] in :mod:`memlab.advisor.trace`.
2. For the loop classes, trace ``k = 3`` and ``k = 4``: the difference is the loop bodies (one more
   iteration of each loop); checked by reproducing the traces at ``k = 5`` and ``k = 6`` event for
   event.  Inside a run of loop bodies the live bytes grow linearly with the body's index, so the
   maximum over the ``m + 1`` extra bodies is at the first or the last: both are pieces.  Bodies
   whose sizes grow with their index by a fixed step (causal attention's query blocks) are a loop
   too (NOTE [ growing loop bodies ] in :mod:`memlab.advisor.structure`), and a loop around the
   others (a transformer's ``layers``) is found the same way one level up, its classes keyed by its
   count too (``outer``) and its general class written in the size itself (NOTE [ outer loops ] in
   :mod:`memlab.advisor.fit`).
3. Sum the events into the live bytes after each event (pieces), drop duplicates and pieces that
   another dominates coefficient-wise (every variable is >= 0).

Two families as examples (variables of the pieces; the monomials that occur, times 4 bytes for
float32); each model file lists every fitted family with its declaration and variables:

* chunking: ``n, d, hidden`` and, for a chunked technique, ``chunk = min(chunk_size, n)``,
  ``last = n - (k - 1) * chunk`` (the last chunk may be shorter), ``k = ceil(n / chunk)`` and
  ``m = k - 4``.  Tensors are 2-D products of two of them (``d*n`` inputs, output, x-sized gradients and
  ``slice_backward`` zeros; ``d*hidden`` weights and their gradients; ``chunk*hidden``, ``hidden*last``,
  ``chunk*d``, ``d*last`` per-chunk activations and temporaries), and loop terms ``m*chunk*hidden``
  (every chunk's hidden activation saved by ``slice_loop``/``vmap_chunk``), ``m*chunk*d`` ...  The peak
  moves between a few moments (end of forward, the first or second chunk of backward, the optimizer):
  up to ~36 pieces per technique over the four classes.
* reversible (``block="mlp"``, ``coupling="additive"``): ``batch, width, hidden`` and ``m = depth - 4``.
  Terms ``batch*width``, ``batch*hidden``, ``hidden*width``, ``hidden``, ``width``, constants (Adam's
  step counters) and their ``m*`` multiples (parameters, gradients and optimizer state grow with the
  depth; so do the activations ``residual`` and ``checkpoint_block`` keep, while ``reversible`` keeps
  O(1) in depth).

Checks reported with each model: traces at random held-out sizes and loop counts (exact
replays, cheap), and :func:`memlab.measure` at held-out points including 4x-30x beyond the traced sizes
(the error bound the advisor prints).  The relative step time is a separate, approximate model
(:func:`memlab.advisor.fit.time_model`): measured at a few sizes per family on a loaded shared machine
(NOTE [ advisor time model ] in :mod:`memlab.advisor.fit`): the relative time with one chunk plus
fixed and per-chunk costs scaled by the work ``n * d * hidden``, or, for a family whose work has
named components (the transformer's layers, attention and LM head), a ratio of the technique's and
the baseline's costs summed over them (NOTE [ work components ]).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from ..core.record import CATEGORIES
from ..core.declaration import Declaration, as_declaration
from ..core.host import host_key, same_kernels

__all__ = ["encode_poly", "decode_poly", "eval_poly", "Prediction", "predict", "pieces_at", "load_models", "models_path",
           "MODELS_DIR", "host_variant_dir", "SCHEMA", "CATEGORIES", "predict_time", "chunk_bodies", "mmapped_bytes",
           "MMAP_CEILING_BYTES", "work_of", "base_work", "time_band", "time_floor", "clamp_time", "chunks_timed"]

SCHEMA = 1
#: committed models, beside the sweeps
MODELS_DIR = Path(__file__).resolve().parents[2] / "data" / "models"


def encode_poly(poly: Mapping[tuple, int]) -> dict[str, int]:
    """``{("chunk", "hidden"): 4}`` -> ``{"chunk*hidden": 4}`` (the constant is ``"1"``)."""
    return {("*".join(m) or "1"): int(c) for m, c in sorted(poly.items(), key=lambda kv: (len(kv[0]), kv[0]))}


def decode_poly(data: Mapping[str, int]) -> dict[tuple, int]:
    return {(() if k == "1" else tuple(k.split("*"))): int(c) for k, c in data.items()}


def eval_poly(poly: Mapping[str, int], values: Mapping[str, int]) -> int:
    """Value (bytes) of an encoded polynomial; exact integer arithmetic."""
    total = 0
    for key, c in poly.items():
        term = c
        if key != "1":
            for v in key.split("*"):
                term *= values[v]
        total += term
    return total


class Prediction(dict):
    """``total_peak_bytes``, ``peak_by_category_bytes``, ``k`` and the class used (a dict, JSON-ready)."""


def _outer_ok(c: Mapping[str, Any], values: Mapping[str, int]) -> bool:
    """Whether class ``c`` covers the outer loop's count in ``values`` (a class without ``outer`` covers
    any: a family without an outer loop, :class:`~memlab.core.loops.Repeated`)."""
    o = c.get("outer")
    if not o:
        return True
    n = values[o["size"]]
    return n == o["k"] if "k" in o else n >= o["k_min"]


def _class_for(classes: list[dict], k: int, values: Mapping[str, int] | None = None) -> tuple[dict, dict[str, int]]:
    classes = [c for c in classes if _outer_ok(c, values or {})]
    for c in classes:
        if c.get("k") == k:
            return c, {}
    general = [c for c in classes if "k_min" in c and k >= c["k_min"]]
    if not general:
        raise ValueError(f"no model class covers loop count k={k}")
    c = general[0]
    return c, {"m": k - c["k_min"]}


def predict(family: Declaration | Mapping[str, Any], entry: Mapping[str, Any], params: Mapping[str, int]) -> Prediction:
    """Predicted total peak and categories (bytes) of ``entry`` (a model entry of the JSON) at ``params``
    (sizes and knobs, technique parameter names).

    Args:
        family: the family's :class:`~memlab.core.declaration.Declaration`, or its part of a model
            file (``models["families"][name]``, which carries the declaration).
    """
    k, cls, pieces = pieces_at(family, entry, params)
    best = None
    for cats in pieces:
        total = sum(cats.values())
        if best is None or total > best[0]:
            best = (total, cats)
    total, cats = best
    return Prediction(total_peak_bytes=total, peak_by_category_bytes={c: cats.get(c, 0) for c in CATEGORIES},
                      k=k, model_class=cls.get("k", f">={cls.get('k_min')}"))


def pieces_at(family: Declaration | Mapping[str, Any], entry: Mapping[str, Any],
              params: Mapping[str, int]) -> tuple[int, dict[str, Any], list[dict[str, int]]]:
    """``(k, the class, its pieces)`` of ``entry`` at ``params``: the loop count, the class of the model
    that holds at it, and each piece (a moment of the step at which the live bytes can peak) with its
    categories evaluated (bytes; a category the piece lacks is absent).  :func:`predict` takes the
    largest piece (the first on a tie)."""
    k, values = as_declaration(family).loop_of(params, chunked=bool(entry.get("knobs")))
    cls, extra = _class_for(entry["classes"], k, values)
    values = {**values, **extra}
    return k, cls, [{c: eval_poly(p, values) for c, p in piece.items()} for piece in cls["pieces"]]


def work_of(work: str | Mapping[str, str], params: Mapping[str, int]) -> int | dict[str, int]:
    """A step's work at ``params``: the value of the one monomial ``work``, or of each named component
    (``{component: value}``: NOTE [ work components ] in :mod:`memlab.advisor.fit`)."""
    if isinstance(work, Mapping):
        return {name: eval_poly({mono: 1}, params) for name, mono in sorted(work.items())}
    return eval_poly({work: 1}, params)


def base_work(cost: Mapping[str, float], work: Mapping[str, int]) -> float:
    """The family baseline's step cost (nanoseconds of thread CPU time) at the components ``work``:
    ``cost["1"] + sum_j cost[j] * work[j]``, summed in the components' sorted order (as choose.js)."""
    total = float(cost["1"])
    for name in sorted(work):
        total += cost[name] * work[name]
    return total


def chunk_bodies(t: Mapping[str, Any], params: Mapping[str, int], k: int) -> int:
    """Further loop bodies a time model's per-chunk cost ``o`` counts at ``k`` chunks: ``k - 1``, times
    the product of sizes ``t["o_scale"]`` when the knob's loop runs inside an outer loop (``(k - 1) *
    layers``: NOTE [ per-chunk costs ] in :mod:`memlab.advisor.fit`)."""
    scale = t.get("o_scale")
    return (k - 1) * (eval_poly({scale: 1}, params) if scale else 1)


def per_chunk_cost(o: float, grow: str | None, grow_cost: float, params: Mapping[str, int]) -> float:
    """A further loop body's cost: ``o``, plus ``grow_cost`` times the product of sizes ``grow`` (a time
    model's ``o_work`` and ``o_work_cost``; none when ``grow`` is None) at ``params`` (NOTE [ per-chunk
    costs ] in :mod:`memlab.advisor.fit`)."""
    return o + (grow_cost * eval_poly({grow: 1}, params) if grow else 0.0)


def _components_time(t: Mapping[str, Any], work: Mapping[str, int], k: int, mapped: tuple[float, float],
                     bodies: int, per_chunk: float) -> float:
    """``(sum_j r_j W_j + sum_j s_j W_j / k + c + bodies * o + f M) / (baseline cost + f M_base)`` of a
    ``components`` time model, ``s`` its ``r_per_chunk`` (NOTE [ per-chunk costs ]), ``bodies`` from
    :func:`chunk_bodies`, ``o`` = ``per_chunk`` (with its ``o_work`` term), ``mapped`` = ``(f M, f
    M_base)``; summed in the components' sorted order (as choose.js)."""
    num = t["c"] + bodies * per_chunk
    for name in sorted(work):
        num += t["r"][name] * work[name]
    split = t.get("r_per_chunk") or {}
    for name in sorted(split):
        num += split[name] * work[name] / k
    return float((num + mapped[0]) / (base_work(t["baseline_cost"], work) + mapped[1]))


def predict_time(family: Declaration | Mapping[str, Any], entry: Mapping[str, Any],
                 params: Mapping[str, int], device: str = "cpu") -> float | None:
    """Relative step time (technique step / family baseline step) of :func:`memlab.advisor.fit.time_model`:
    ``a`` for a ``constant`` model, ``r + (c + (k - 1) * o) / W`` for a ``work`` model, and with a
    page-fault term (``time["fault"]``, on CPU only: NOTE [ page faults in the time model ] in
    :mod:`memlab.advisor.fit`) ``(r * W + c + (k - 1) * o + f * M) / (W + f * M_base)``, ``M`` and
    ``M_base`` the bytes the technique's and the baseline's steps allocate in blocks glibc maps afresh;
    for a ``components`` model (NOTE [ work components ]) ``(sum_j r_j W_j + c + (k - 1) * o [+ f * M])
    / (sum_j b_j W_j + b_0 [+ f * M_base])``, ``b`` the baseline's cost (``time["baseline_cost"]``);
    where the per-chunk cost repeats inside an outer loop ``(k - 1) * o`` is ``(k - 1) * layers * o``,
    where it grows with a product of sizes ``o`` is ``o + o_work_cost * time["o_work"]`` (``n*d``),
    and a component the chunks split adds ``s_j * W_j / k`` (NOTE [ per-chunk costs ] in
    :mod:`memlab.advisor.fit`: :func:`chunk_bodies`, ``time["r_per_chunk"]``); None without a model.  The family baseline's own entry (``entry["baseline"]``) is 1 by definition:
    its measured points are itself over itself, the timing's noise (an eager_attention fit at 3 rounds
    read 1.117 and 0.888), so a model fitted to them would only add that noise to every prediction."""
    if entry.get("baseline"):
        return 1.0
    t = entry.get("time") or {}
    if t.get("kind") == "constant":
        return float(t["a"])
    if t.get("kind") not in ("work", "components"):
        return None
    decl = as_declaration(family)
    k, _ = decl.loop_of(params, chunked=True) if entry.get("knobs") else (1, {})
    work = work_of(t["work"], params)
    if (min(work.values()) if isinstance(work, dict) else work) <= 0:
        return None
    fault = t.get("fault") or {}
    per_byte = fault.get("per_byte") or 0.0
    mine = base = None
    if device == "cpu" and per_byte:
        ceiling = fault.get("ceiling_bytes", MMAP_CEILING_BYTES)
        mine = mmapped_bytes(entry["classes"], *decl.loop_of(params, chunked=bool(entry.get("knobs"))), ceiling)
        base = mmapped_bytes(fault["baseline"], *decl.loop_of(params, chunked=False), ceiling)
    bodies = chunk_bodies(t, params, k)
    per_chunk = per_chunk_cost(t["o"], t.get("o_work"), t.get("o_work_cost", 0.0), params)
    if t["kind"] == "components":
        mapped = (0.0, 0.0) if mine is None or base is None else (per_byte * mine, per_byte * base)
        return _components_time(t, work, k, mapped, bodies, per_chunk)
    if mine is None or base is None:
        return float(t["r"] + (t["c"] + bodies * per_chunk) / work)
    w = float(work)
    return float((t["r"] * w + t["c"] + bodies * per_chunk + per_byte * mine) / (w + per_byte * base))


# NOTE [ the time band ]
# A time model's error is stated from its own points, as its residuals allow: a fit of p coefficients
# (``r, c`` and, chunked, ``o``; a components model one ``r`` per component, ``c``, ``o`` and one
# ``r_per_chunk`` per split component) through n > p points has residuals, and its band is the largest
# relative residual (``max_fit_rel_error``: |fitted - measured| / measured over the points).  Through
# n <= p points the fit is exact whatever the noise, so the band is "unknown (n points)" with the
# measured ratios beside it, never a zero error: a model file's two timed batches put the noise of two
# ratios into the asymptote (data/model-files/gpt2-sgd.json).  A constant model's band is the spread
# of its points around their median.
# Evidence: docs/evidence/time-model-bias.md#the-band


def _fitted_coefficients(t: Mapping[str, Any]) -> int:
    """How many coefficients a ``work`` or ``components`` time model fitted (NOTE [ the time band ])."""
    chunked = len({p.get("chunks") for p in t.get("points") or []}) > 1
    if t.get("kind") == "components":
        return len(t.get("r") or {}) + 1 + chunked + len(t.get("r_per_chunk") or {}) + bool(t.get("o_work"))
    return 2 + chunked + bool(t.get("o_work"))


def time_band(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The relative error of ``entry``'s time model from its own points (NOTE [ the time band ]):
    ``{"fraction": float | None, "points": n, "text"}``; ``fraction`` None when the points cannot say
    (a fit through no more points than coefficients, or no model); 0 for the family baseline (1 by
    definition)."""
    if entry.get("baseline"):
        return {"fraction": 0.0, "points": 0, "text": "1 by definition (the family baseline)"}
    t = entry.get("time") or {}
    pts = [p["relative_step_time"] for p in t.get("points") or [] if isinstance(p.get("relative_step_time"), (int, float))]
    n = len(pts)
    measured = ", ".join(f"{x:.2f}x" for x in pts[:4]) + (" ..." if n > 4 else "")
    if t.get("kind") == "constant":
        if n < 2:
            return {"fraction": None, "points": n, "text": f"unknown ({n} point{'' if n == 1 else 's'})"}
        spread = max(abs(x - t["a"]) / t["a"] for x in pts)
        return {"fraction": round(spread, 4), "points": n, "text": f"±{100 * spread:.1f}% (spread of {n} points)"}
    if t.get("kind") not in ("work", "components"):
        return {"fraction": None, "points": n, "text": "no time model"}
    if n <= _fitted_coefficients(t) or not isinstance(t.get("max_fit_rel_error"), (int, float)):
        return {"fraction": None, "points": n, "text": f"unknown ({n} points: {measured} measured)"}
    worst = float(t["max_fit_rel_error"])
    return {"fraction": round(worst, 4), "points": n, "text": f"±{100 * worst:.1f}% (largest residual of {n} points)"}


# NOTE [ no faster than plain unless measured so ]
# A prediction below 1 (faster than the family baseline) stands only as far as a measured ratio of the
# entry went: the prediction is floored at min(1, the smallest ratio its time points measured), and
# the answer marks a floored time.  A fit's asymptote ``r`` carries its points' noise: a technique that
# recomputes was predicted faster than plain from two noisy batches and measured slower (issue 43).
# No ceiling is set: more chunks than were timed cost more than predicted, not less (the sweeps).
# Evidence: docs/evidence/time-model-bias.md#the-floor


def time_floor(entry: Mapping[str, Any]) -> float | None:
    """The least relative time ``entry`` may be predicted (NOTE [ no faster than plain unless measured
    so ]): ``min(1, smallest measured ratio of its time points)``; None for the baseline or an entry
    without time points."""
    pts = [p["relative_step_time"] for p in (entry.get("time") or {}).get("points") or []
           if isinstance(p.get("relative_step_time"), (int, float))]
    if entry.get("baseline") or not pts:
        return None
    return float(min(1.0, min(pts)))


def clamp_time(entry: Mapping[str, Any], t: float | None) -> tuple[float | None, bool]:
    """``(the prediction floored at time_floor(entry), whether the floor moved it)``."""
    floor = time_floor(entry)
    if t is None or floor is None or t >= floor:
        return t, False
    return floor, True


def chunks_timed(entry: Mapping[str, Any]) -> int | None:
    """The most chunks ``entry``'s time points measured (None: no points, or an entry without a knob,
    whose loop count is no chunk count); a setting with more chunks extrapolates the per-chunk cost
    (docs/evidence/time-model-bias.md)."""
    if not entry.get("knobs") or entry.get("baseline"):
        return None
    counts = [p.get("chunks") for p in (entry.get("time") or {}).get("points") or [] if isinstance(p.get("chunks"), int)]
    return max(counts) if counts else None


#: glibc's dynamic mmap threshold never rises above this (``DEFAULT_MMAP_THRESHOLD_MAX`` on a 64-bit
#: host): an allocation of at least this many bytes is always its own ``mmap`` (NOTE [ page faults in
#: the time model ] in :mod:`memlab.advisor.fit`)
MMAP_CEILING_BYTES = 32 * 1024 * 1024


def mmapped_bytes(classes: list[Mapping[str, Any]], k: int, values: Mapping[str, int],
                  ceiling: int = MMAP_CEILING_BYTES) -> int | None:
    """Bytes a step allocates in allocations of at least ``ceiling`` bytes each (every one a fresh
    ``mmap`` under glibc: page-faulted in on every step), from the class of loop count ``k`` of a model
    entry's ``classes`` (their ``allocations``: ``[q, monomial, a, b]``, ``a + b * m`` allocations of
    ``q * monomial`` bytes, or ``[q, monomial, count]`` with ``count`` an encoded polynomial of ``m`` and an
    outer loop's size); ``values``: the loop's variables (:meth:`Declaration.loop_of`).  None when
    the class lists no allocations (a model fitted before they were recorded)."""
    cls, extra = _class_for(list(classes), k, values)
    allocations = cls.get("allocations")
    if allocations is None:
        return None
    m = extra.get("m", 0)
    total = 0
    for q, mono, *count in allocations:
        size = eval_poly({mono: q}, values)
        if size >= ceiling:
            # [a, b]: a + b * m allocations; [poly]: a count polynomial of m and the outer size (NOTE [ outer loops ])
            n = eval_poly(count[0], {**values, "m": m}) if len(count) == 1 else count[0] + count[1] * m
            total += n * size
    return total


def models_path(optimizer: str, directory: Path | None = None) -> Path:
    return (directory or MODELS_DIR) / f"cpu-float32-{optimizer}.json"


def host_variant_dir(directory: Path | None, host: Mapping[str, Any]) -> Path:
    """Where the models fitted on ``host``'s kernels live beside ``directory``'s: ``hosts/<key>/``
    (NOTE [ host-dependent bytes ] in :mod:`memlab.core.host`)."""
    return (directory or MODELS_DIR) / "hosts" / host_key(host)


def load_models(optimizer: str, directory: Path | None = None, host: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """The committed models for ``optimizer``, as fitted.

    With ``host`` (a :func:`memlab.core.host.kernel_host` record), the models as they hold on that host: a
    family whose bytes depend on the CPU kernels (``host_dependent``) and that was fitted on other
    kernels is replaced by its variant under :func:`host_variant_dir` where one was fitted on ``host``'s
    kernels, and otherwise kept and marked ``other_kernels: {"fitted": ..., "here": ...}``, so a caller
    can say so (``memlab advise``) or compare only what every host allocates alike (the tests).

    Raises:
        ValueError: no models for that optimizer, a file of another schema, or a family without its
        advisor declaration (a file fitted before declarations: ``python -m memlab.advisor.migrate``).
    """
    path = models_path(optimizer, directory)
    if not path.is_file():
        have = sorted(p.stem.rsplit("-", 1)[-1] for p in path.parent.glob("cpu-float32-*.json"))
        raise ValueError(f"no memory models for optimizer {optimizer!r} in {path.parent}; "
                         f"modelled optimizers: {', '.join(have) or 'none (run memlab advise --fit)'}")
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path} has schema {data.get('schema')!r}; this memlab reads schema {SCHEMA} "
                         f"(regenerate with memlab advise --fit)")
    for name, fam in data["families"].items():
        try:
            decl = as_declaration(fam)
        except ValueError as exc:
            raise ValueError(f"{path}: family {name!r}: {exc}") from None
        if decl.name != name:
            raise ValueError(f"{path}: family {name!r} carries family {decl.name!r}'s advisor declaration")
    if host is not None:
        _hold_for(data, optimizer, directory, host)
    return data


def _hold_for(data: dict[str, Any], optimizer: str, directory: Path | None, host: Mapping[str, Any]) -> None:
    """:func:`load_models`' ``host`` step, in place."""
    variant_dir = host_variant_dir(directory, host)
    variants = (load_models(optimizer, variant_dir)["families"] if models_path(optimizer, variant_dir).is_file()
                else {})
    for name, fam in list(data["families"].items()):
        if not fam.get("host_dependent") or same_kernels(fam.get("kernel_host"), host):
            continue
        other = variants.get(name)
        if other is not None and same_kernels(other.get("kernel_host"), host):
            data["families"][name] = other
        else:
            fam["other_kernels"] = {"fitted": fam.get("kernel_host"), "here": dict(host)}

