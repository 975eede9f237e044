"""Each rank's peak bytes, by category, as functions of the world size N: fitted from runs at some N,
predicting the others (issue 48's "prediction for other N"); torch-free.

# NOTE [ the per-rank peak as a function of N ]
A rank's peak is the highest of its phases' highest points (forward, backward, optimizer: each run
records all three, ``phase_peaks``), and each is the sum of its categories there (bytes).  Each
phase is fitted on its own and the prediction takes the phase whose predicted total is highest: the
phase that peaks moves with N (the MLP stack's zero1 rank that steps only small tensors peaks in
backward, the others in the optimizer step).  Per phase and category:

* ``parameters`` and ``optimizer_state``: from the parameter shapes alone, no fit
  (:func:`memlab.sharding.layout.model_state_bytes`: FSDP's padded dim-0 shards, ZeRO-1's ownership);
* ``inputs``, ``gradients``, ``saved_activations``, ``temporaries``: each ``c0 + c1·b + Σ k_j·f_j(N, r)``,
  ``b`` the per-rank batch G/N (activations and their gradients are per sample), ``f_j`` bytes
  computed from the shapes: for FSDP a block's and the root's gathered (padded, unsharded) bytes
  and their shards (a gathered unit, an all-gather output, a reduce-scatter input or output), for
  every strategy Adam's step temporaries over the tensors the rank steps, in its order, and 4·N
  (FSDP's per-rank index tensors), each only in the categories that can hold it (NOTE [ which
  buffers each category holds ]).  The ``k_j`` are counts of live buffers, so small integers: :func:`fit_category`
  tries every combination in range, solves ``c0, c1`` exactly (rational least squares) and keeps
  the combinations that reproduce every fit point to the byte; among several it takes the one that
  leaves the smallest constant ``|c0|`` (the buffers, not a constant, should carry the bytes that
  move with N: GPT-2's root unit, padded differently at each N, was otherwise folded into c0 with
  three fit points), then the fewest buffers, and lists the others (``alternatives``).  A category no
  combination fits exactly is kept with its best combination and flagged ``exact=False`` with its
  residuals (those of no buffer counted): nothing is rounded away.  FSDP on one rank gathers
nothing (its shards are whole), a different program: FSDP's fit takes the runs at N >= 2 only.

# NOTE [ which buffers each category holds ]
At one global batch G the per-rank batch is b = G/N, so a shard (``4·ceil(d0/N)·rest`` bytes per
tensor) is ``(4Ψ_unit/G)·b`` plus its padding: the fit points tell a shard from per-sample bytes by
the padding alone, and at N = 2, 3, 6 (b = 12, 8, 4) that padding is itself linear in b for every
dim 0 that is 0 or 2 mod 6 (the transformer's 32, 96, 128): its block shard, 25,408, 17,204 and
9,000 bytes, lies on ``796 + 2,051·b``.  A free shard count then fits anywhere, and the
smallest-constant tie-break chose wrongly: backward's saved activations ``768 + 138,112·b`` were
taken as ``-28 + 136,061·b`` plus one block shard, 398 bytes low at N = 4 (b = 6: 12,704 for
13,102) and 597 at N = 8.  So each category is fitted with only the buffers it can hold, from what
the category is (NOTE [ memory categories ] in :mod:`memlab.measurement.categories`):
``inputs`` the batch, no buffer; ``saved_activations`` what autograd saves: activations, and the
gathered units fsdp(keep) keeps from forward to backward, never a shard (a rank's shards are
parameters); ``gradients`` the storages that held a leaf's ``.grad``: under FSDP the reduce-scatter
outputs, shard-sized, and nothing per sample (``c1 = 0``: a gradient has its parameter's shape
whatever b), which makes the shard counts identifiable (the shards are not constant in N);
``temporaries`` the all-gather outputs and reduce-scatter inputs (gathered), the 4·N index
tensors and Adam's step temporaries, no shard (the reduce-scatter output is the gradient).
Evidence: fitted on every committed world without the restriction (data/sharding/), every exact
FSDP category held shards only in the gradients and gathered units, 4·N and Adam's term only in the
temporaries (ddp's Adam term is the same at every N, one with the constant); with the restriction
the default fits of ``memlab advise --shard-strategy`` (1, 3, 6 for ddp and zero1; 2, 3, 6 for
fsdp) predict N = 4 to the byte for the MLP stack, the transformer (plain and checkpointed) and
examples/gpt2.py (tests/test_sharding_advise.py).  A step whose buffers break the rule fits
inexactly and says so; nothing is hidden.

# NOTE [ DDP's rebuild leftovers ]
DDP rebuilds its buckets at the second step's forward (the warm-up's) and broadcasts the new bucket
indices from rank 0: two small int tensors (4 bytes per bucket, 4 bytes per parameter tensor plus
one) that the reducer's C++ frees after the broadcast, racing the gloo worker thread that holds the
same work; when the worker lets go last the free is on its thread and the profiler never sees it
(NOTE [ collectives freed on the caller's thread ] in :mod:`memlab.sharding.strategies`; no Python
hook reaches that call).  The block then looks held across the measured step.  For ddp and zero1
the only legitimate bytes held across the step outside every category are the gradient buckets,
4Ψ bytes, so :func:`leftover_bytes` is what a rank holds there beyond 4Ψ (0 on most ranks; 4 or
168 bytes on one rank of some runs: docs/evidence/sharding.md).  The fit and the check take the
peak less those bytes and print them: the peak the step holds when the free is seen.

What it assumes: each phase's highest point holds the same kinds of buffers at every N (an inexact
fit says where not); the per-rank batch's bytes are affine in b; every block unit has the same shapes.  What it leaves out: the CUDA caching allocator's reserved memory (the
runs are CPU, where c10 allocates exactly what is asked).  Evidence: docs/sharding.md#prediction.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction
from math import prod

from .formulas import PHASES
from .layout import F32, adam_step_temporary_numel, gathered_numels, model_state_bytes, step_order_numels

__all__ = ["leftover_bytes", "Fit", "CategoryFit", "features", "fit", "fit_category", "predict_rank", "check", "FITTED",
           "ANALYTIC", "CATEGORY_FEATURES", "PER_SAMPLE", "base_strategy"]

#: categories fitted from the runs
FITTED = ("inputs", "gradients", "saved_activations", "temporaries")
#: categories computed from the shapes
ANALYTIC = ("parameters", "optimizer_state")
#: the buffer features each fitted category can hold (NOTE [ which buffers each category holds ])
CATEGORY_FEATURES = {"inputs": (), "saved_activations": ("block_gathered", "root_gathered"),
                     "gradients": ("block_shard", "root_shard"),
                     "temporaries": ("adam_step", "world", "block_gathered", "root_gathered")}
#: the fitted categories with a per-sample term ``c1·b`` (gradients are parameter-shaped: none)
PER_SAMPLE = {"inputs": True, "saved_activations": True, "gradients": False, "temporaries": True}


def base_strategy(label: str) -> str:
    """``fsdp(keep)`` -> ``fsdp``; the others unchanged."""
    return label.split("(")[0]


def _units(shapes: list[tuple[int, ...]], units: list[int]) -> tuple[list, list]:
    """(block 0's shapes, the root's shapes) from each tensor's unit (-1: the root; i: block i)."""
    block = [s for s, u in zip(shapes, units) if u == 0]
    root = [s for s, u in zip(shapes, units) if u < 0]
    return block, root


def features(label: str, shapes: list[tuple[int, ...]], units: list[int], world: int, rank: int) -> dict[str, int]:
    """The integer-count features ``f_j(N, r)`` in bytes (NOTE [ the per-rank peak as a function of N ]):
    ``adam_step`` (:func:`~memlab.sharding.layout.adam_step_temporary_numel` of the tensors the rank
    steps, in bytes) and ``world`` (4·N: a float32 per rank) for every strategy; for fsdp also ``block_gathered``, ``root_gathered``,
    ``block_shard``, ``root_shard``."""
    order = step_order_numels(base_strategy(label), shapes, world, rank)
    out = {"adam_step": F32 * adam_step_temporary_numel(order), "world": F32 * world}
    if base_strategy(label) == "fsdp":
        block, root = _units(shapes, units)
        gb, gr = F32 * gathered_numels(block, world), F32 * gathered_numels(root, world)
        out.update(block_gathered=gb, root_gathered=gr, block_shard=gb // world, root_shard=gr // world)
    return out


def _ranges(label: str, layers: int, category: str | None = None) -> dict[str, range]:
    """The counts tried for each feature: up to every block plus one for block buffers, up to 2 for
    the root's, 0..1 for the optimizer's step temporaries, 0..8 for blocks of N float32 (FSDP's
    per-rank index tensors); with ``category``, only the features that category can hold
    (:data:`CATEGORY_FEATURES`, NOTE [ which buffers each category holds ])."""
    out = {"adam_step": range(2), "world": range(9)}
    if base_strategy(label) == "fsdp":
        out.update(block_gathered=range(layers + 2), root_gathered=range(3), block_shard=range(layers + 2),
                   root_shard=range(3))
    if category is None:
        return out
    if category not in CATEGORY_FEATURES:
        raise ValueError(f"category={category!r} is not valid; valid: {', '.join(CATEGORY_FEATURES)}")
    return {j: k for j, k in out.items() if j in CATEGORY_FEATURES[category]}


@dataclass(frozen=True)
class Point:
    """One rank of one run: its per-rank batch ``b``, its features and the category's bytes."""

    b: int
    feats: dict[str, int]
    y: int


@dataclass
class CategoryFit:
    """``c0 + c1·b + Σ counts[j]·f_j`` (bytes); ``exact``: every fit point reproduced to the byte;
    ``residuals``: measured minus fitted at each fit point; ``alternatives``: other exact count sets."""

    c0: Fraction
    c1: Fraction
    counts: dict[str, int]
    exact: bool
    residuals: list[Fraction] = field(default_factory=list)
    alternatives: list[dict[str, int]] = field(default_factory=list)

    def value(self, b: int | Fraction, feats: dict[str, int]) -> Fraction:
        return self.c0 + self.c1 * b + sum(k * feats[j] for j, k in self.counts.items())


def _affine(points: list[Point], counts: dict[str, int],
            per_sample: bool = True) -> tuple[Fraction, Fraction, list[Fraction]]:
    """Exact least squares of ``y - Σ counts·f`` on ``c0 + c1·b``: (c0, c1, residuals); c1 = 0 when
    every point has the same b or ``per_sample`` is false (``c0`` alone: their mean)."""
    ys = [Fraction(p.y - sum(k * p.feats[j] for j, k in counts.items())) for p in points]
    bs = [Fraction(p.b) for p in points]
    n = len(points)
    mb, my = sum(bs) / n, sum(ys) / n
    sbb = sum((b - mb) ** 2 for b in bs) if per_sample else 0
    c1 = sum((b - mb) * (y - my) for b, y in zip(bs, ys)) / sbb if sbb else Fraction(0)
    c0 = my - c1 * mb
    return c0, c1, [y - c0 - c1 * b for b, y in zip(bs, ys)]


def _screen(points: list[Point], counts: dict[str, int], per_sample: bool = True) -> bool:
    """A float pre-check of :func:`_affine`: could this count set reproduce every point exactly?"""
    ys = [p.y - sum(k * p.feats[j] for j, k in counts.items()) for p in points]
    bs = [float(p.b) for p in points]
    n = len(points)
    mb, my = sum(bs) / n, sum(ys) / n
    sbb = sum((b - mb) ** 2 for b in bs) if per_sample else 0.0
    c1 = sum((b - mb) * (y - my) for b, y in zip(bs, ys)) / sbb if sbb else 0.0
    return max(abs(y - (my - c1 * mb) - c1 * b) for b, y in zip(bs, ys)) < 0.5


def fit_category(points: list[Point], ranges: dict[str, range], per_sample: bool = True) -> CategoryFit:
    """The count set whose affine rest reproduces every point exactly, the smallest constant first
    (NOTE [ the per-rank peak as a function of N ]); the least-residual one, ``exact=False``, when
    none does.  ``per_sample`` false: no ``c1·b`` term (c1 = 0; the gradients, NOTE [ which buffers
    each category holds ])."""
    if not points:
        raise ValueError("points=[] is not valid; valid: at least one measured rank")
    names = sorted(ranges)
    exact = []
    for combo in itertools.product(*(ranges[n] for n in names)):
        counts = {n: k for n, k in zip(names, combo) if k}
        if _screen(points, counts, per_sample):
            c0, c1, res = _affine(points, counts, per_sample)
            if not any(res):
                exact.append((sum(combo), combo, CategoryFit(c0, c1, counts, True, res)))
    if not exact:
        c0, c1, res = _affine(points, {}, per_sample)
        return CategoryFit(c0, c1, {}, False, res)
    exact.sort(key=lambda t: (abs(t[2].c0), t[0], t[1]))
    chosen = exact[0][2]
    chosen.alternatives = [f.counts for _, _, f in exact[1:]]
    return chosen


@dataclass
class Fit:
    """Per strategy label, phase and fitted category, its :class:`CategoryFit`; the shapes and units
    it was fitted on; the fit worlds."""

    shapes: list[tuple[int, ...]]
    units: list[int]
    layers: int
    worlds: list[int]
    categories: dict[str, dict[str, dict[str, CategoryFit]]]


def _shapes(row: dict) -> list[tuple[int, ...]]:
    return [tuple(s) for s in row["param_shapes"]]


def leftover_bytes(row: dict) -> int:
    """Bytes a ddp or zero1 rank holds across the whole measured step outside every category beyond
    its 4Ψ gradient buckets (NOTE [ DDP's rebuild leftovers ]); 0 for fsdp."""
    if base_strategy(row["strategy"]) == "fsdp":
        return 0
    return max(0, sum(row["held_outside_categories"].values()) - F32 * total_numel(_shapes(row)))


def _measured(row: dict, category: str, phase: str | None = None) -> int:
    """A category's bytes at the rank's peak (or at ``phase``'s highest point), less the leftover."""
    cats = row["peak"] if phase is None else row["phase_peaks"][phase]["categories"]
    return cats[category] - (leftover_bytes(row) if category == "temporaries" else 0)


def fit(rows: list[dict]) -> Fit:
    """Fit every strategy label and fitted category from ``rows`` (per-rank dicts of
    :func:`memlab.sharding.worker.run_strategy`, one model, any worlds)."""
    if not rows:
        raise ValueError("rows=[] is not valid; valid: the per-rank rows of at least one run")
    models = {(r["model"], tuple(map(tuple, r["param_shapes"]))) for r in rows}
    if len(models) != 1:
        raise ValueError(f"rows of {len(models)} models are not valid; valid: rows of one model (by name and shapes)")
    if len({r.get("checkpoint_blocks", False) is True for r in rows}) != 1:
        raise ValueError("rows of checkpointed and plain steps together are not valid; valid: rows of one setting "
                         "(checkpoint_blocks all true or all false)")
    shapes, units = _shapes(rows[0]), rows[0]["param_units"]
    layers = max(units) + 1
    cats: dict[str, dict[str, dict[str, CategoryFit]]] = {}
    for label in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == label and (r["world"] > 1 or base_strategy(label) != "fsdp")]
        if not mine:
            raise ValueError(f"{label} rows only at world 1 are not valid; valid: runs at N >= 2 for fsdp")
        feats = [features(label, shapes, units, r["world"], r["rank"]) for r in mine]
        phases = [p for p in PHASES if all(p in r["phase_peaks"] for r in mine)]
        cats[label] = {p: {c: fit_category([Point(r["batch_per_rank"], f, _measured(r, c, p)) for r, f in zip(mine, feats)],
                                           _ranges(label, layers, c), PER_SAMPLE[c]) for c in FITTED} for p in phases}
    return Fit(shapes, units, layers, sorted({r["world"] for r in rows}), cats)


def predict_rank(f: Fit, label: str, world: int, rank: int, b: int | Fraction) -> dict:
    """Rank ``rank``'s predicted bytes by category at its peak, ``peak`` and ``phase`` (the phase whose
    predicted highest point is highest: NOTE [ the per-rank peak as a function of N ]), at ``world``
    ranks with per-rank batch ``b``."""
    if label not in f.categories:
        raise ValueError(f"strategy={label!r} is not valid for this fit; valid: {', '.join(f.categories)}")
    state = model_state_bytes(base_strategy(label), f.shapes, world, rank)
    feats = features(label, f.shapes, f.units, world, rank)
    best = None
    for phase, fits in f.categories[label].items():
        out: dict = {c: Fraction(state[c]) for c in ANALYTIC}
        out.update({c: cf.value(b, feats) for c, cf in fits.items()})
        out["peak"] = sum(out.values())
        out["phase"] = phase
        if best is None or out["peak"] > best["peak"]:
            best = out
    return best


def check(f: Fit, rows: list[dict]) -> list[dict]:
    """Each measured rank of ``rows`` beside its prediction: ``{strategy, world, rank, measured (the
    peak), leftover (:func:`leftover_bytes`), predicted, diff (bytes: measured less leftover, minus
    predicted), categories: {c: [measured, predicted]}}``."""
    out = []
    for r in rows:
        p = predict_rank(f, r["strategy"], r["world"], r["rank"], r["batch_per_rank"])
        cats = {c: [_measured(r, c), _int(p[c])] for c in (*ANALYTIC, *FITTED)}
        left = leftover_bytes(r)
        out.append({"strategy": r["strategy"], "world": r["world"], "rank": r["rank"], "measured": r["peak_bytes"],
                    "leftover": left, "predicted": _int(p["peak"]), "diff": r["peak_bytes"] - left - p["peak"],
                    "categories": cats, "phase": r.get("at_peak", {}).get("phase"), "predicted_phase": p["phase"]})
    return out


def _int(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(x)


def total_numel(shapes: list[tuple[int, ...]]) -> int:
    """Ψ: elements over ``shapes``."""
    return sum(prod(s) for s in shapes)
