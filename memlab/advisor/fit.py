"""Build the memory models of NOTE [ advisor models ] and check them against held-out measurements.

``memlab advise --fit`` (``make models``) runs :func:`fit_all` and writes ``data/models/cpu-float32-<optimizer>.json``.
Traces run in this process (cheap: tiny sizes, a few ms each once ``gc.freeze`` has moved torch's
objects out of the collector's way); the held-out checks are ordinary isolated
:func:`memlab.measure` calls.
"""
from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import memlab
from ..core.declaration import BASE_K, Declaration, Entry, fitted_range
from .model import (CATEGORIES, MMAP_CEILING_BYTES, SCHEMA, base_work, chunk_bodies, encode_poly, eval_poly,
                    mmapped_bytes, models_path, per_chunk_cost, predict, work_of)
from .structure import (LOOP_VAR, OUTER_VAR, Insertion, infer_loops, loop_baseline, pieces_of, poly_add, poly_scale,
                        poly_substitute, prune, split_baseline)
from ..core.atomic import write_text_atomic
from ..core.host import kernel_host
from ..core.setting import DEFAULTS
from ..registry import get_advisor, get_technique, list_advisors
from . import trace as traces  # trace.raw_trace is looked up when called: the tests and own_model patch it
from .trace import IdentificationError, check_distinct, monomial_library, symbolic_trace

__all__ = ["fit_all", "fit_entry", "fit_family", "declaration_of", "OPTIMIZERS_FITTED", "small_held_out_points", "time_model", "fault_term",
           "baseline_cost", "pooled_baseline_cost", "NS_PER_S", "events_peak"]

#: the optimizers ``memlab advise --fit`` fits, the default measurement's first (most answers use it)
OPTIMIZERS_FITTED = (DEFAULTS.optimizer, "adam")


def small_held_out_points(optimizer: str) -> int:
    """How many small held-out settings an entry is measured at: two for the first optimizer fitted (the
    one most answers use), one for the others."""
    return 2 if optimizer == OPTIMIZERS_FITTED[0] else 1


#: raw-trace held-out points per model (exact replays at random sizes and loop counts)
TRACED_HELD_OUT = 12


def _encode_piece(piece: dict) -> dict:
    return {c: encode_poly(p) for c, p in sorted(piece.items()) if p}


def declaration_of(family: str) -> Declaration:
    """The registered declaration of ``family`` (imports the families' modules: torch).

    Raises:
        ValueError: the family declares no advisor model (one line naming the declared ones).
    """
    return get_advisor(family).declaration()


def _allocations(items, outer: str | None = None) -> list[list]:
    """The allocations of a traced step's ``items`` (events, and loops: :meth:`LoopStructure.items`) as
    ``[q, monomial, a, b]``: ``a + b * m`` allocations of ``q * monomial`` bytes (a loop's body runs
    ``m + 1`` more times than in the base trace), or, with an outer loop's copies in the count,
    ``[q, monomial, count]`` with the count a polynomial of ``m`` and the outer size ``outer`` (NOTE [
    outer loops ]); for the page-fault term of the time model (NOTE [ page faults in the time model ]).
    A growing body's allocations (NOTE [ growing loop bodies ]) are listed at their first copy's size."""
    counts: dict[tuple, dict] = {}

    def walk(seq, mult: dict) -> None:
        for e in seq:
            if isinstance(e, Insertion):
                walk(e.unit, poly_add(mult, poly_scale(mult, e.var)))
            elif e.sign > 0:
                counts[(e.q, e.mono)] = poly_add(counts.get((e.q, e.mono), {}), mult)

    walk(items, {(): 1})
    out = []
    for (q, mono), n in sorted(counts.items(), key=lambda kv: (len(kv[0][1]), kv[0][1], kv[0][0])):
        if set(n) <= {(), (LOOP_VAR,)}:
            out.append([q, "*".join(mono) or "1", n.get((), 0), n.get((LOOP_VAR,), 0)])
        else:
            out.append([q, "*".join(mono) or "1", encode_poly(poly_substitute(n, OUTER_VAR, outer, BASE_K + 1))])
    return out


# NOTE [ outer loops ]
# A transformer's step repeats its layers (forward, backward, the optimizer's per-parameter updates),
# and an entry with a knob loops inside or beside them too: the query blocks of chunked_attention inside
# every layer, the loss chunks of chunked_lm_loss after them.  The outer loop (``Repeated``) is found
# the way an inner one is (NOTE [ advisor models ], step 2), one level up: for each class of the inner
# loop, the step is traced at outer counts 3 to 6 and each trace read as its inner structure (events,
# and each inner loop as one item: ``LoopStructure.items``); the items one more layer inserts are the
# outer body, checked at counts 5 and 6 item for item.  The pieces then run every loop at its first and
# last copy (an inner loop inside an outer body at the four corners), with the outer copies
# ``mo = layers - 4 >= 0`` written out in the size itself (``poly_substitute``: the monomials read
# ``layers*batch*seq``), after pruning, which needs every variable >= 0.  Outer counts 1, 2 and 3 are
# exact classes of their own, as for an inner loop.  The time model's per-chunk cost of an inner loop
# inside the outer bodies repeats in each of them (NOTE [ per-chunk costs ]).


def _inner_classes(fam: Declaration, entry: Entry, trace, count: int | None) -> list[tuple[dict, dict, list]]:
    """``(class key, baseline, items)`` of each inner class at outer ``count`` (None: no outer loop):
    ``k = 1 .. BASE_K`` exact (items: the step's events), and the general class (items: its events and
    loops)."""
    chunked = bool(entry.knobs)
    out = []
    for k in range(1, (BASE_K if fam.loop.looped(chunked) else 1) + 1):
        baseline, step = trace(k, count)
        out.append(({"k": k}, baseline, step))
    if fam.loop.looped(chunked):
        steps = {k: trace(k, count)[1] for k in range(BASE_K, BASE_K + 4)}
        structure = infer_loops(steps[BASE_K], steps[BASE_K + 1], BASE_K,
                                [(k, steps[k]) for k in range(BASE_K + 2, BASE_K + 4)], grow=True)
        baseline = loop_baseline({k: trace(k, count)[0] for k in steps}, BASE_K)
        out.append(({"k_min": BASE_K + 1, "loop_bodies": len(structure.insertions)}, baseline, structure.items()))
    return out


def _class(key: dict, baseline: dict, items: list, outer: str | None = None) -> dict:
    """One model class: its pruned pieces, its allocations and any bounded allocation; with ``outer``
    the pieces' outer copies written in the outer size (NOTE [ outer loops ])."""
    pieces = prune(pieces_of(baseline, items))
    if outer:
        pieces = [{c: poly_substitute(p, OUTER_VAR, outer, BASE_K + 1) for c, p in piece.items()} for piece in pieces]
    # NOTE [ polynomial allocations ]: a free of memory allocated before the step is read at its smallest
    bounded = [{"op": e.op, "phase": e.phase, "sign": e.sign, "bytes": e.q, "spread_bytes": e.bound,
                **({"read": "smallest"} if e.bound_low else {})}
               for e in items if not isinstance(e, Insertion) and e.bound] if "k" in key else []
    return {**key, "pieces": [_encode_piece(p) for p in pieces], "allocations": _allocations(items, outer),
            **({"bounded": bounded} if bounded else {})}


def _classes(fam: Declaration, entry: Entry, optimizer: str) -> tuple[list[dict], list[dict]]:
    """The model classes of one entry and every traced point (for the fitted range)."""
    chunked = bool(entry.knobs)
    outer = fam.loop.outer_size()
    traced: list[dict] = []
    cache: dict[tuple, tuple] = {}

    def distinct(points, variables) -> bool:
        return check_distinct(points, variables, max_degree=fam.max_degree)

    def trace(k: int, count: int | None):
        if (k, count) not in cache:
            at = {outer: count} if outer else {}
            variables = fam.class_variables(k, chunked)
            pts = fam.trace_points(k, chunked, distinct)
            traced.extend({**fam.to_params(k, p, chunked), **at} for p in pts)
            # traced only when an allocation is no single monomial (NOTE [ polynomial allocations ])
            further = fam.further_points(k, chunked, pts, len(monomial_library(variables, fam.max_degree)) - 1)
            events = symbolic_trace(entry.technique, {**fam.workload_fixed, **entry.fixed, **at}, pts, variables,
                                    lambda p: fam.to_params(k, p, chunked), optimizer, max_degree=fam.max_degree,
                                    max_quantum=fam.max_quantum, extra_points=further)
            cache[(k, count)] = split_baseline(events)
        return cache[(k, count)]

    if outer is None:
        return [_class(key, b, items) for key, b, items in _inner_classes(fam, entry, trace, None)], traced
    by_count = {n: _inner_classes(fam, entry, trace, n) for n in range(1, BASE_K + 4)}
    classes = [_class({**key, "outer": {"size": outer, "k": n}}, b, items)
               for n in range(1, BASE_K + 1) for key, b, items in by_count[n]]
    for i, (key, _b, _items) in enumerate(by_count[BASE_K + 1]):
        seqs = {n: by_count[n][i] for n in range(BASE_K, BASE_K + 4)}
        structure = infer_loops(seqs[BASE_K][2], seqs[BASE_K + 1][2], BASE_K,
                                [(n, seqs[n][2]) for n in range(BASE_K + 2, BASE_K + 4)], var=OUTER_VAR)
        baseline = loop_baseline({n: s[1] for n, s in seqs.items()}, BASE_K, var=OUTER_VAR)
        outer_key = {"size": outer, "k_min": BASE_K + 1, "loop_bodies": len(structure.insertions)}
        classes.append(_class({**{k: v for k, v in key.items() if k != "loop_bodies"}, "outer": outer_key},
                              baseline, structure.items(), outer))
    return classes, traced


def events_peak(events, categories=CATEGORIES) -> tuple[int, dict[str, int]]:
    """``(total bytes, live bytes per category)`` at the step's peak of a raw trace ``events`` (``(delta
    bytes, category, phase, op)`` in order; the ``pre`` phase, before the step, is not the step's): the
    live bytes when the step starts, or after any later event that raises the total above them."""
    live = {c: 0 for c in categories}
    best = None
    for delta, cat, phase, _op in events:
        if phase != "pre" and best is None:
            best = (sum(live.values()), dict(live))
        live[cat] = live.get(cat, 0) + delta
        if phase != "pre" and sum(live.values()) > best[0]:
            best = (sum(live.values()), dict(live))
    return best


def _traced_check(fam: Declaration, entry: Entry, optimizer: str, model: dict, seed: int) -> dict:
    """Predicted vs exactly replayed peaks (total and categories) at random held-out configurations."""
    chunked = bool(entry.knobs)
    worst, worst_at, cats_ok = -1, None, True
    pts = fam.random_points(chunked, TRACED_HELD_OUT, seed)
    for p in pts:
        params = {**fam.workload_fixed, **entry.fixed, **p}
        best = events_peak(traces.raw_trace(entry.technique, params, optimizer))
        pred = predict(fam, model, p)
        err = abs(pred["total_peak_bytes"] - best[0])
        cats_ok &= all(pred["peak_by_category_bytes"][c] == best[1].get(c, 0) for c in CATEGORIES)
        if err > worst:
            worst, worst_at = err, p
    return {"points": len(pts), "max_abs_error_bytes": worst, "categories_exact": cats_ok,
            "worst_at": worst_at}


def _measured_points(fam: Declaration, entry: Entry, optimizer: str, seed: int) -> list[tuple[dict, str]]:
    """Held-out configurations measured with memlab.measure: small random ones, and the time points
    (each of the family's time sizes, at each chunk count for a chunked entry; the first of
    :data:`OPTIMIZERS_FITTED`: all chunk counts, other optimizers the first and last), then the time-only ones (``time_only_sizes``, beyond the
    memory model's exact range) the same way; ``[(params, "small" | "time" | "time_only")]``."""
    chunked = bool(entry.knobs)
    out = [(p, "small") for p in fam.random_points(chunked, small_held_out_points(optimizer), seed + 7)]
    for kind, sizes in (("time", fam.time_sizes), ("time_only", fam.time_only_sizes)):
        for size in sizes:
            if chunked:
                chunks = fam.time_chunks if optimizer == OPTIMIZERS_FITTED[0] else (fam.time_chunks[0], fam.time_chunks[-1])
                out += [({**size, fam.loop.knob: fam.loop.knob_for_count(size, k)}, kind) for k in chunks]
            else:
                out.append((dict(size), kind))
    return out


def _beyond(params: dict, fitted: dict) -> float:
    return max((params[s] / hi for s, (_lo, hi) in fitted.items() if s in params and hi), default=1.0)


def _time_point(fam: Declaration, entry: Entry, p: dict, m) -> dict:
    """One measured time point of ``entry`` at ``p`` (a Measurement ``m`` with a relative time); with
    work components (NOTE [ work components ]) also the baseline's thread CPU seconds per step,
    ``baseline_step_cpu_s``: the technique's median CPU step over its relative time (None without
    CPU times)."""
    point = {"params": p, "chunks": fam.loop_of(p, chunked=True)[0] if entry.knobs else 1,
             "work": work_of(fam.work, p), "relative_step_time": round(m.relative_step_time, 4),
             "relative_to": m.relative_to, "step_time_s": m.step_time_s, "load_avg": m.load_avg_before}
    if isinstance(fam.work, Mapping):
        cpu = list(getattr(m, "step_cpu_times_s", None) or ())
        point["baseline_step_cpu_s"] = statistics.median(cpu) / m.relative_step_time if cpu else None
    return point


def _changes_dtype(technique: str) -> bool:
    """:attr:`memlab.Technique.changes_dtype` of ``technique`` (False for a name no class registers: a
    fit driven by a stand-in measurement)."""
    try:
        return bool(get_technique(technique).changes_dtype)
    except ValueError:
        return False


def fit_entry(fam: Declaration, entry: Entry, optimizer: str, *, measure_fn: Callable | None = None,
              say: Callable[[str], None] = lambda s: None, seed: int = 0) -> dict:
    """One entry's model: classes, fitted range, held-out checks (traced and measured), time model."""
    started = time.perf_counter()
    fam = fam.for_entry(entry)
    classes, traced = _classes(fam, entry, optimizer)
    fitted = fitted_range(traced, fam.sizes + entry.knobs)
    model: dict[str, Any] = {"technique": entry.technique, "label": entry.label, "fixed": dict(entry.fixed),
                             "knobs": list(entry.knobs), "classes": classes, "fitted_range": fitted,
                             "changes_dtype": _changes_dtype(entry.technique)}
    model["held_out_traced"] = _traced_check(fam, entry, optimizer, model, seed)
    measure_fn = measure_fn or memlab.measure
    rows, time_only, time_points, statuses = [], [], [], set()
    for p, kind in _measured_points(fam, entry, optimizer, seed):
        params = {**fam.workload_fixed, **entry.fixed, **p}
        small = kind == "small"
        # a time point is timed with memlab.measure's default repeats and budget (NOTE [ when to stop
        # timing ]): at three rounds and no budget an entry's points scattered by ±12% (eager_attention
        # over itself: 1.117 and 0.888), more than the 10% the time column is held to
        timing = {"repeats": 1, "time_budget": 0} if small else {}
        m = measure_fn(entry.technique, iterations=2, check=small, optimizer=optimizer, **timing, **params)
        statuses.add(m.status)
        # a time-only point is beyond the sizes the memory model is exact at: its bytes are listed
        # apart, never in the held-out byte error or the validated range (AdvisorModel.time_only_sizes)
        listed = time_only if kind == "time_only" else rows
        if m.status != "ok":
            listed.append({"params": p, "status": m.status, "error": m.error})
            continue
        pred = predict(fam, model, p)
        err = pred["total_peak_bytes"] - m.total_peak_bytes
        cuda = m.predicted_cuda or {}
        listed.append({
            "params": p, "kind": kind, "status": m.status, "beyond_fitted": round(_beyond(p, fitted), 1),
            "measured_total_peak_bytes": m.total_peak_bytes, "predicted_total_peak_bytes": pred["total_peak_bytes"],
            "error_bytes": err, "rel_error": abs(err) / m.total_peak_bytes if m.total_peak_bytes else 0.0,
            "categories_exact": all(pred["peak_by_category_bytes"][c] == m.peak_by_category_bytes.get(c, 0)
                                    for c in CATEGORIES),
            "predicted_cuda_reserved_bytes": cuda.get("reserved_peak_bytes"),
            "relative_step_time": m.relative_step_time,
        })
        if kind != "small" and m.relative_step_time is not None:
            time_points.append(_time_point(fam, entry, p, m))
    ok_rows = [r for r in rows if r["status"] == "ok"]
    model["held_out_measured"] = rows
    if time_only:
        model["time_only_measured"] = time_only
    model["max_rel_error"] = max((r["rel_error"] for r in ok_rows), default=None)
    model["max_abs_error_bytes"] = max((abs(r["error_bytes"]) for r in ok_rows), default=None)
    model["validated_range"] = fitted_range(traced + [r["params"] for r in ok_rows], fam.sizes + entry.knobs)
    model["recommendable"] = statuses == {"ok"}
    model["time"] = time_model(fam, entry, time_points)
    say(f"  {entry.label} ({optimizer}): {sum(len(c['pieces']) for c in classes)} pieces, traced held-out "
        f"max error {model['held_out_traced']['max_abs_error_bytes']} B, measured held-out max error "
        f"{model['max_abs_error_bytes']} B over {len(ok_rows)} points"
        + (f", {len(time_only)} time-only points beyond its exact range" if time_only else "")
        + f" ({time.perf_counter() - started:.1f} s)")
    return model


# NOTE [ advisor time model ]
# A step's relative time (thread CPU time of the technique's step over the family baseline's, at one
# intra-op thread: NOTE [ CPU time and load ] in memlab.measurement.timing) has two parts: the work
# the technique does beyond the baseline's, which grows with the step's work W (the monomial
# ``work`` of the family's sizes) as the baseline's does, so it is a constant ratio ``r``; and fixed
# costs per step and per chunk (kernel launches, Python and autograd per call, skinny products),
# which do not grow with W and so weigh less the larger the step:
#
#     relative(W, k) = r + (c + (k - 1) * o) / W
#
# ``c``: the technique's fixed cost per step, ``o``: per further chunk, both in units of the
# baseline's cost per unit of work.  The fit measures every entry at two or more sizes of different
# work (``time_sizes``) and, chunked, at several chunk counts (``time_chunks``), and solves for
# ``r``, ``c``, ``o`` by least squares (``o`` = 0 without a knob).  The old model took ``r`` from one
# small size, where the fixed costs dominate: checkpoint_block read 3.5x there and 1.30x at the
# sizes people train.  The site's Choose page evaluates the same formula (choose.js).  One monomial W
# assumes a technique repeats every part of the step alike; where it does not (a transformer's
# recompute skips the LM head), the family names the parts: NOTE [ work components ].


# NOTE [ page faults in the time model ]
# glibc serves an allocation from its heap, or maps it afresh with ``mmap`` when it is at least the
# mmap threshold.  The threshold starts at 128 KiB and rises to the size of each mapped block that is
# freed, but never above 32 MiB (``DEFAULT_MMAP_THRESHOLD_MAX`` on a 64-bit host): after the first
# steps every block under 32 MiB comes back from the heap, already resident, while every block of
# 32 MiB or more is mapped again on every step, and the kernel page-faults and zeroes each of its
# pages when the step first writes it (and unmaps them when it is freed).  That cost is the thread's
# own CPU time (system time), so the relative time sees it.  It does not grow with the work ``W``: it
# grows with the bytes of those blocks, and it falls on the baseline as often as on the technique.
# The unchunked product at ``n = 16384, hidden = 512`` allocates 32 MiB intermediates, each chunk of a
# chunked technique 2-8 MiB: at ``d = 64`` vmap_chunk measured 0.82x the baseline where the model
# without this term said 1.04x.  So the time model counts, per step, the bytes ``M`` of allocations of
# at least :data:`~memlab.advisor.model.MMAP_CEILING_BYTES` (from the symbolic trace: each
# allocation's bytes are ``q * monomial`` of the sizes, each class lists them with their counts,
# ``allocations``), for the technique and ``M_base`` for the baseline at the same sizes:
#
#     relative(W, k) = (r * W + c + (k - 1) * o + f * M) / (W + f * M_base)
#
# ``f``: the cost of a mapped byte in units of the baseline's cost per unit of work, one value per
# family (:func:`fault_term`: a one-dimensional search, each entry's ``r, c, o`` by least squares at
# each ``f``); 0 where no time point allocates such a block (nothing to fit it from).  With ``M =
# M_base = 0`` the form is the one of NOTE [ advisor time model ].  On CUDA the term is 0 (the caching
# allocator keeps its blocks): ``predict_time(..., device="cuda")`` leaves it out.  The timed phase's
# heap fixes the threshold at that 32 MiB ceiling and never trims (NOTE [ the timing heap ] in
# memlab/measurement/resident.py), so blocks under 32 MiB are faulted in only while the heap grows to
# its high-water mark in the first steps, whatever the process freed before; a default process can
# also return the top of its heap to the kernel and fault it in again each step, which no term counts.


# NOTE [ work components ]
# One work monomial assumes a technique repeats every part of the baseline's step in the same
# proportion.  The transformer's do not: ``checkpoint_layer`` recomputes the layers' forward (their
# matmuls, ~ batch * seq at the fixed width, and the attention, ~ batch * seq^2) but not the LM head
# over the vocabulary (~ batch * seq * vocab); ``chunked_lm_loss`` changes only the head.  With
# ``work = "batch*seq"`` the model had no way to tell a long sequence (attention-heavy) from a large
# vocabulary (head-heavy), and its held-out relative times were 4.1-17.9% off.  So a family may name
# the components of its work, ``work = {"layers": "batch*seq", "attention": "batch*seq*seq", ...}``,
# and the time model becomes the ratio of two costs, each a sum over the components W_j:
#
#     relative(sizes, k) = (sum_j r_j W_j + c + (k - 1) * o) / (sum_j b_j W_j + b_0)
#
# The denominator is the baseline's step: its thread CPU time per step (``baseline_step_cpu_s`` of
# every time point of every entry: the technique's median CPU step over its relative time) fitted as
# ``b_0 + sum_j b_j W_j`` by non-negative least squares in relative error, in nanoseconds
# (:func:`baseline_cost`; the family's, pooled over its entries, ``baseline_cost`` in each model).
# Absolute CPU times move with the machine and its load more than their ratios do, but only the
# shape of the denominator (how the baseline's cost splits between the components) enters a
# prediction; its scale cancels against the numerator's.  The numerator is each technique's step in
# the same units: ``r_j`` its cost per unit of component j, ``c`` its fixed cost, ``o`` per further
# chunk, fitted by least squares on the relative times with the denominator held (``kind``
# ``components``).  With the page-fault term f (NOTE [ page faults in the time model ]) ``f * M``
# joins the numerator and ``f * M_base`` the denominator, f in nanoseconds per mapped byte.
#
# Even one component changes the form: ``r + c / W`` divides by a baseline whose cost is all
# proportional to W, while ``(r W + c) / (b W + b_0)`` gives the baseline its own fixed cost.  Where
# the baseline's work is small beside its per-step costs that matters: tensor_train's dense step over
# 256-1,024 rows of 64 (``work = {"rows": "batch"}``), and resnet's per-layer costs that do not grow
# with the batch (``{"layers": "depth", "images": "depth*batch"}``).  With ``r + c / W`` their
# held-out relative times were 14-22% (tt_reconstructed, tt_chunked) and 6-18%
# (resnet_checkpoint_block) off.  A family with one monomial string keeps the form and the files of
# NOTE [ advisor time model ].  The fit needs the
# components' ratios to vary across ``time_sizes`` (the declaration asks for two sizes more than
# components); the Choose page evaluates the same sums in the same order (choose.js).

# NOTE [ per-chunk costs ]
# ``(k - 1) * o`` counts a chunked step's further loop bodies, each with its fixed cost (a few ops'
# dispatch, autograd nodes, Python).  Two loops break that count:
#
# * a knob whose loop runs inside an outer loop: chunked_attention's query blocks run inside every
#   one of the transformer's ``layers`` (forward, and the backward's recompute), so ``k`` blocks are
#   ``k * layers`` bodies and the further ones ``(k - 1) * layers``: with ``k - 1`` a 4,096-block step
#   of 12 layers was priced as 4,095 further bodies, not 49,140.  The family declares it
#   (``chunk_cost_scale = {"block": "layers"}``), the time model records it (``o_scale``) and counts
#   :func:`~memlab.advisor.model.chunk_bodies`.  chunked_lm_loss's chunks run once, after the layers.
# * work the chunks split unequally.  Causal query blocks score block ``i`` against ``i + 1``
#   blocks of keys, ``W (k + 1) / (2k)`` of the full attention ``W`` in all: at seq 512, one block
#   measured 1.13x the baseline's step and four blocks 0.68x (the model with ``(k - 1) * o`` alone
#   had 46% residuals at its own time points).  A component a knob splits
#   (``chunk_split_work = {"block": ("attention",)}``) gets a second cost, ``r_per_chunk_j * W_j /
#   k``, fitted with the rest: ``r_j W_j + s_j W_j / k`` is ``W (k + 1) / (2k)`` at ``r_j = s_j``, and
#   lets the fit find the overheads of small blocks too.  chunked_lm_loss's head is split the same
#   way (``"chunk": ("head",)``): one chunk holds the whole [tokens, vocab] logits, as the plain loss
#   does, and streams them through memory; k chunks hold 1/k of them.  Its SGD time points read
#   1.06, 0.81, 0.87 at 1, 4, 16 chunks (batch 8, seq 96, vocab 3072) and 1.01, 0.84, 0.90 (batch
#   4, seq 384, vocab 4096), which ``(k - 1) * o`` alone cannot follow (fit error 15.9%; 10.2% with
#   the split, from the same points).
# * a further chunk whose cost grows with the sizes.  A slice's backward writes a zeroed full-size
#   gradient of the sliced input and adds it in (``x[st:ed]``), and an assignment into a slice
#   (``y[st:ed] = ...``) passes on a copy of the whole output's gradient, so each further chunk costs
#   ``o + o_work_cost * n * d``, not ``o``: the family declares it (``chunk_cost_work = {"chunk_size":
#   "n*d"}``) and the time model fits ``o_work_cost`` beside ``o`` (``o_work`` names the product).  A
#   technique whose chunks add into one gradient buffer (slice_accumulate) fits a negative
#   ``o_work_cost`` from noise; a negative cost is none, so its model is fitted again without the term.
#   With ``o`` alone, fitted at 1, 4 and 16 chunks, every sweep row at 100 chunks ran slower than
#   predicted, by up to 39.5% (slice_loop), and the first choice at 100 chunks was wrong (vmap_chunk
#   predicted 0.997x, measured 1.255x); refitted from the same points with the term, the six at 100
#   chunks are within 6.5-18.4% (vmap_chunk 1.107x, and the first choice is slice_accumulate, as
#   measured), and six settings chosen before the refit (``data/models/unseen-settings-2.json``, five
#   past 16 chunks) within 3.2%, where ``o`` alone was 18.7% off.  More time points did not do this (a
#   refit at 64 chunks with ``o`` alone widened the bands to 37%), nor did a term in ``d * hidden``
#   (the weights each chunk reads), ``d`` or ``hidden`` alone.
#   Evidence: docs/evidence/time-model-bias.md#a-per-chunk-cost-in-n-times-d

#: nanoseconds per second: a work-components model (NOTE [ work components ]) counts in nanoseconds of thread CPU time
NS_PER_S = 1e9


def time_model(fam: Declaration, entry: Entry, points: list[dict], per_byte: float = 0.0,
               cost: Mapping[str, float] | None = None) -> dict:
    """The relative-step-time model of NOTE [ advisor time model ] from the measured ``points``
    (each with ``work``, ``chunks``, ``relative_step_time`` and, with ``per_byte``, ``mmap_bytes`` and
    ``baseline_mmap_bytes``: NOTE [ page faults in the time model ]); ``kind`` ``work`` (fitted),
    ``constant`` (one size only: the median) or ``none``.  A family whose ``work`` names components
    (NOTE [ work components ]) gets ``kind`` ``components`` over the baseline's ``cost`` (default:
    :func:`baseline_cost` of these points), or ``none`` when the points cannot determine it."""
    return _time_fit(fam, entry, points, per_byte, cost)[0]


def _lstsq_scaled(a, b):
    """Least squares of ``a x = b`` with ``a``'s columns scaled to unit norm first (the components'
    work spans orders of magnitude: tokens against tokens * vocab)."""
    import numpy as np  # deferred: torch line

    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    return np.linalg.lstsq(a / norms, b, rcond=None)[0] / norms


def baseline_cost(fam: Declaration, points: list[dict]) -> dict[str, float] | None:
    """The family baseline's step cost in nanoseconds of thread CPU time, ``{"1": fixed, component:
    per unit}`` (NOTE [ work components ]), from the points' ``baseline_step_cpu_s``: every
    coefficient >= 0, the sum of squared relative errors least (an exact non-negative least squares
    over the subsets of coefficients).  None with fewer usable points of distinct sizes than
    coefficients plus one."""
    import numpy as np  # deferred: torch line

    names = sorted(fam.work)
    pts = [p for p in points if p.get("baseline_step_cpu_s")]
    if len({tuple(sorted(p["work"].items())) for p in pts}) < len(names) + 2:
        return None
    y = np.array([p["baseline_step_cpu_s"] * NS_PER_S for p in pts])
    a = np.array([[1.0] + [float(p["work"][n]) for n in names] for p in pts]) / y[:, None]
    best = None
    for size in range(1, len(names) + 2):
        for cols in itertools.combinations(range(len(names) + 1), size):
            x = _lstsq_scaled(a[:, list(cols)], np.ones(len(pts)))
            if (x >= 0).all():
                loss = float(((a[:, list(cols)] @ x - 1.0) ** 2).sum())
                if best is None or loss < best[0]:
                    best = (loss, dict(zip(cols, x)))
    if best is None:  # pragma: no cover - a single column always has a non-negative solution
        return None
    return {key: float(best[1].get(i, 0.0)) for i, key in enumerate(["1"] + names)}


def _chunk_terms(fam: Declaration, entry: Entry, pts: list[dict]) -> dict[str, Any]:
    """The per-chunk terms of ``entry``'s time model (NOTE [ per-chunk costs ]): ``o_scale`` (the
    product of sizes its per-chunk cost repeats over, or None), ``split`` (the work components the
    chunks split), ``o_work`` (the product of sizes a further chunk's cost grows with, or None) and
    ``bodies`` (:func:`~memlab.advisor.model.chunk_bodies` at each point); none unless the points have
    two or more chunk counts."""
    if not (entry.knobs and len({p["chunks"] for p in pts}) > 1):
        return {"chunked": False, "o_scale": None, "split": [], "o_work": None, "bodies": [0] * len(pts)}
    knob = entry.knobs[0]
    scale = fam.chunk_cost_scale.get(knob)
    t = {"o_scale": scale} if scale else {}
    return {"chunked": True, "o_scale": scale, "split": sorted(fam.chunk_split_work.get(knob, ())),
            "o_work": fam.chunk_cost_work.get(knob),
            "bodies": [chunk_bodies(t, p.get("params") or {}, p["chunks"]) for p in pts]}


def _components_fit(fam: Declaration, entry: Entry, pts: list[dict], per_byte: float,
                    cost: Mapping[str, float] | None, out: dict) -> tuple[dict, float]:
    """:func:`_time_fit` for a family of work components (NOTE [ work components ], NOTE [ per-chunk
    costs ])."""
    import numpy as np  # deferred: torch line

    names = sorted(fam.work)
    cost = cost or baseline_cost(fam, pts)
    if cost is None:
        return {**out, "kind": "none", "reason": f"fewer than {len(names) + 2} time sizes with the baseline's "
                                                   "CPU time: the baseline's cost is not determined"}, 0.0
    chunk = _chunk_terms(fam, entry, pts)
    split = chunk["split"]
    den = [base_work(cost, p["work"]) + per_byte * p.get("baseline_mmap_bytes", 0) for p in pts]
    target = [p["relative_step_time"] - per_byte * p.get("mmap_bytes", 0) / d for p, d in zip(pts, den)]

    def solve(grow: str | None) -> list[float]:
        rows = [[p["work"][n] / d for n in names] + [1.0 / d] + ([b / d] if chunk["chunked"] else [])
                + [p["work"][n] / p["chunks"] / d for n in split]
                + ([b * eval_poly({grow: 1}, p["params"]) / d] if grow else [])
                for p, d, b in zip(pts, den, chunk["bodies"])]
        return [float(x) for x in _lstsq_scaled(np.array(rows), np.array(target))]

    grow = chunk["o_work"]
    solution = solve(grow)
    if grow and solution[-1] < 0:  # a further chunk costs no less for its size (NOTE [ per-chunk costs ])
        grow, solution = None, solve(None)
    per = solution.pop() if grow else 0.0
    r = dict(zip(names, solution))
    c = solution[len(names)]
    o = solution[len(names) + 1] if chunk["chunked"] else 0.0
    s = dict(zip(split, solution[len(names) + 2:]))
    fitted = [(sum(r[n] * p["work"][n] for n in names) + sum(s[n] * p["work"][n] / p["chunks"] for n in split)
               + c + b * per_chunk_cost(o, grow, per, p.get("params") or {})
               + per_byte * p.get("mmap_bytes", 0)) / d for p, d, b in zip(pts, den, chunk["bodies"])]
    rel = [(f - p["relative_step_time"]) / p["relative_step_time"] for f, p in zip(fitted, pts)]
    note = out["note"].replace("r + (c + (k - 1) * o) / W", "(sum_j r_j W_j + c + (k - 1) * o) / (sum_j "
                               "baseline_cost_j W_j + baseline_cost_1), nanoseconds (NOTE [ work components ])")
    if chunk["o_scale"] or split or grow:
        note += (f"; (k - 1) * {chunk['o_scale']} further loop bodies" if chunk["o_scale"] else "") + (
            f"; o + o_work_cost * {grow} per further loop body" if grow else "") + (
            f"; plus r_per_chunk_j W_j / k for {', '.join(split)}" if split else "") + " (NOTE [ per-chunk costs ])"
    return {**out, "note": note, "kind": "components", "baseline_cost": dict(cost), "r": r, "c": c, "o": o,
            **({"o_scale": chunk["o_scale"]} if chunk["o_scale"] else {}), **({"r_per_chunk": s} if split else {}),
            **({"o_work": grow, "o_work_cost": per} if grow else {}),
            "max_fit_rel_error": round(max(abs(e) for e in rel), 4)}, sum(e * e for e in rel)


def _time_fit(fam: Declaration, entry: Entry, points: list[dict], per_byte: float,
              cost: Mapping[str, float] | None = None) -> tuple[dict, float]:
    """:func:`time_model` and the sum of its squared relative residuals (0 unless ``work``)."""
    import numpy as np  # deferred: torch line

    note = ("relative_step_time (thread CPU time of the step over the family baseline's, one thread, median of "
            ">= 5 interleaved steps, up to 2 s of timing) at the points listed, fitted as r + (c + (k - 1) * o) / W"
            + (", plus f * (bytes in blocks glibc maps afresh), the baseline's in the denominator" if per_byte else ""))
    components = isinstance(fam.work, Mapping)
    pts = sorted(points, key=(lambda p: (sorted(p["work"].items()), p["chunks"])) if components
                 else (lambda p: (p["work"], p["chunks"])))
    out: dict[str, Any] = {"points": pts, "note": note, "work": dict(fam.work) if components else fam.work}
    if not pts:
        return {**out, "kind": "none"}, 0.0
    chunked = bool(entry.knobs) and len({p["chunks"] for p in pts}) > 1
    if len({str(p["work"]) for p in pts}) < 2:
        rel = sorted(p["relative_step_time"] for p in pts)
        return {**out, "kind": "constant", "a": round(rel[len(rel) // 2], 4)}, 0.0
    if components:
        return _components_fit(fam, entry, pts, per_byte, cost, out)
    chunk = _chunk_terms(fam, entry, pts)
    den = [p["work"] + per_byte * p.get("baseline_mmap_bytes", 0) for p in pts]
    target = [p["relative_step_time"] - per_byte * p.get("mmap_bytes", 0) / d for p, d in zip(pts, den)]

    def solve(grow: str | None) -> list[float]:
        rows = [[p["work"] / d, 1.0 / d] + ([b / d] if chunked else [])
                + ([b * eval_poly({grow: 1}, p["params"]) / d] if grow else [])
                for p, d, b in zip(pts, den, chunk["bodies"])]
        return [float(x) for x in np.linalg.lstsq(np.array(rows), np.array(target), rcond=None)[0]]

    grow = chunk["o_work"] if chunked else None
    solution = solve(grow)
    if grow and solution[3] < 0:  # a further chunk costs no less for its size: fitted without the term
        grow, solution = None, solve(None)
    r, c = solution[0], solution[1]
    o = solution[2] if chunked else 0.0
    per = solution[3] if grow else 0.0
    fitted = [(r * p["work"] + c + b * per_chunk_cost(o, grow, per, p.get("params") or {})
               + per_byte * p.get("mmap_bytes", 0)) / d for p, d, b in zip(pts, den, chunk["bodies"])]
    worst = max(abs(f - p["relative_step_time"]) / p["relative_step_time"] for f, p in zip(fitted, pts))
    sq = sum(((f - p["relative_step_time"]) / p["relative_step_time"]) ** 2 for f, p in zip(fitted, pts))
    if grow:
        out["note"] = out["note"].replace("(k - 1) * o", f"(k - 1) * (o + o_work_cost * {grow})") + \
            " (NOTE [ per-chunk costs ])"
    return {**out, "kind": "work", "r": round(r, 6), "c": c, "o": o, "max_fit_rel_error": round(worst, 4),
            **({"o_scale": chunk["o_scale"]} if chunk["o_scale"] else {}),
            **({"o_work": grow, "o_work_cost": per} if grow else {})}, sq


def pooled_baseline_cost(fam: Declaration, entries: list[dict], *,
                         say: Callable[[str], None] = lambda s: None) -> dict[str, float] | None:
    """For a family of work components (NOTE [ work components ]): the baseline's cost from the time
    points of all its fitted model ``entries`` (each entry alone fitted it from its own), and every
    entry's time model refitted over it, in place.  None (nothing changed) for a one-monomial family
    or when the points do not determine the cost."""
    if not isinstance(fam.work, Mapping):
        return None
    cost = baseline_cost(fam, [p for e in entries for p in (e.get("time") or {}).get("points") or []])
    if cost is None:
        return None
    for e in entries:
        pts = (e.get("time") or {}).get("points")
        if pts:
            e["time"] = time_model(fam, fam.entry(e["label"]), pts, cost=cost)
    say("  baseline cost (ns of thread CPU time): " + ", ".join(f"{k} {v:.4g}" for k, v in cost.items()))
    return cost


def fault_term(fam: Declaration, entries: list[dict], *, say: Callable[[str], None] = lambda s: None) -> float:
    """Fit the page-fault term of NOTE [ page faults in the time model ] over a family's fitted model
    ``entries`` (each with ``classes``, ``time`` and ``baseline``), in place: each time point gets its
    ``mmap_bytes`` and ``baseline_mmap_bytes``, each work-scaled time model its ``r, c, o`` refitted at
    the family's ``f`` and a ``fault`` record (the baseline's allocations ride along, so a model entry
    predicts alone).  Returns ``f`` (0 when the family has no modelled baseline or no time point
    allocates a block glibc maps afresh)."""
    import numpy as np  # deferred: torch line

    base = next((e for e in entries if e.get("baseline")), None)
    if base is None:
        return 0.0
    timed = []
    for e in entries:
        t = e.get("time") or {}
        pts = t.get("points") or []
        for p in pts:
            p["mmap_bytes"] = mmapped_bytes(e["classes"], *fam.loop_of(p["params"], chunked=bool(e["knobs"])))
            p["baseline_mmap_bytes"] = mmapped_bytes(base["classes"], *fam.loop_of(p["params"], chunked=False))
        if t.get("kind") in ("work", "components"):
            timed.append((e, fam.entry(e["label"])))
    if not any(p["mmap_bytes"] or p["baseline_mmap_bytes"] for e, _ in timed for p in e["time"]["points"]):
        best = 0.0
    else:
        def loss(f: float) -> float:
            return sum(_time_fit(fam, d, e["time"]["points"], f, e["time"].get("baseline_cost"))[1] for e, d in timed)

        # a coarse log grid (0 first: a term that does not lower the error is not taken), then a finer one
        grid = [0.0] + [float(x) for x in np.geomspace(1e-4, 1e3, 71)]
        losses = [loss(f) for f in grid]
        i = min(range(len(grid)), key=lambda j: (losses[j], j))
        best = grid[i]
        if best > 0:
            lo, hi = grid[max(i - 1, 1)], grid[min(i + 1, len(grid) - 1)]
            fine = [float(x) for x in np.geomspace(lo, hi, 41)]
            best = min(fine + [best], key=loss)
        units = "nanoseconds" if isinstance(fam.work, Mapping) else "baseline work units"
        say(f"  page-fault term: f = {best:.4g} ({units} per mapped byte); squared relative "
            f"error {losses[0]:.4g} without it, {loss(best):.4g} with it")
    baseline_classes = [{key: c[key] for key in ("k", "k_min", "outer", "allocations") if key in c}
                        for c in base["classes"]]
    for e, d in timed:
        t = time_model(fam, d, e["time"]["points"], best, e["time"].get("baseline_cost"))
        if best:
            t["fault"] = {"per_byte": best, "ceiling_bytes": MMAP_CEILING_BYTES, "baseline": baseline_classes,
                          "note": "NOTE [ page faults in the time model ] in memlab/advisor/fit.py"}
        e["time"] = t
    return best


def _cuda_margin_facts(families: dict) -> dict:
    ratios = []
    for fam in families.values():
        for e in fam["entries"]:
            for r in e["held_out_measured"]:
                if r.get("kind") == "time" and r.get("predicted_cuda_reserved_bytes"):
                    ratios.append(r["predicted_cuda_reserved_bytes"] / r["measured_total_peak_bytes"])
    return {"max_predicted_reserved_over_total_peak": round(max(ratios), 4) if ratios else None,
            "points": len(ratios)}


def fit_all(out_dir: Path, optimizers=OPTIMIZERS_FITTED, families=None, *, say: Callable[[str], None] = print,
            measure_fn: Callable | None = None) -> list[Path]:
    """Fit every declared family (or ``families``, names) for each optimizer; write one JSON file per
    optimizer; return the paths.  Fitting some families keeps the other families of an existing file
    (of this schema) as they are.

    Raises:
        ValueError: a family that declares no advisor model (before anything is traced).
    """
    import torch  # deferred: torch line

    declarations = [declaration_of(name) for name in (families or list_advisors())]
    # Traces run in this process on one intra-op thread: on a loaded machine every small op of a
    # multi-threaded step can wait for a time slice (10x slower traces); tensors this small never run
    # in parallel, and the held-out measurements (the fork server's default threads) check that the
    # bytes are the same.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    first = declarations[0]
    traces.raw_trace(first.entries[0].technique, first_trace_params(first))
    gc.collect()  # import and initialise everything once, then keep torch's objects out of the collector
    gc.freeze()
    try:
        return _fit_all(out_dir, optimizers, declarations, say, measure_fn)
    finally:
        gc.unfreeze()
        torch.set_num_threads(threads)


def _spec(p) -> dict[str, Any]:
    return {"default": p.default, "low": p.low, "high": p.high, "doc": p.doc}


def fit_family(fam: Declaration, optimizer: str, *, say: Callable[[str], None] = print,
               measure_fn: Callable | None = None, skip_unidentified: bool = False) -> dict[str, Any]:
    """One family's part of a model file: its declaration, the specs of its sizes and knobs (from the
    registered techniques' parameters) and every entry's fitted model.

    Raises:
        ValueError: an entry names a technique that is not registered or not of the family.
        IdentificationError: an allocation that is no ``q * monomial`` of the sizes; with
            ``skip_unidentified`` only when every entry has one (the others are listed in
            ``not_modelled``: ``[{technique, label, reason}]``, and left out of the declaration).
    """
    for e in fam.entries:
        if get_technique(e.technique).family() != fam.name:
            raise ValueError(f"advisor model of family {fam.name!r}: entry {e.label!r} is technique "
                             f"{e.technique!r} of family {get_technique(e.technique).family()!r}")
    entries, skipped = [], []
    for i, entry in enumerate(fam.entries):
        try:
            model = fit_entry(fam, entry, optimizer, measure_fn=measure_fn, say=say, seed=i)
        except IdentificationError as exc:
            if not skip_unidentified:
                raise
            say(f"  {entry.label} ({optimizer}): not modelled: {exc}")
            skipped.append({"technique": entry.technique, "label": entry.label, "reason": str(exc)})
            continue
        cls = get_technique(entry.technique)
        model.update(baseline=cls.baseline, peer=cls.peer)
        entries.append(model)
    if not entries:
        raise IdentificationError(f"advisor model of family {fam.name!r}: no entry could be modelled; "
                                  f"{skipped[0]['label']}: {skipped[0]['reason']}")
    pooled_baseline_cost(fam, entries, say=say)
    fault_term(fam, entries, say=say)
    if skipped:  # the declaration states what was modelled
        fam = dataclasses.replace(fam, entries=tuple(e for e in fam.entries
                                                     if e.technique not in {x["technique"] for x in skipped}))
    specs = get_technique(fam.entries[0].technique).all_params()
    knob_specs = {k: _spec(get_technique(e.technique).all_params()[k]) for e in fam.entries for k in e.knobs}
    return {
        **kernels_of(fam, optimizer),
        "workload": fam.workload,
        "sizes": {s: _spec(specs[s]) for s in fam.sizes},
        "knobs": knob_specs,
        "workload_fixed": dict(fam.workload_fixed),
        "variables": fam.variable_docs({s: specs[s].doc for s in fam.sizes}),
        "declaration": fam.to_json(),
        "entries": entries,
        **({"not_modelled": skipped} if skipped else {}),
    }


def first_trace_params(fam: Declaration) -> dict[str, Any]:
    """The workload parameters of a family's first trace point (one loop body, unchunked): the smallest
    step the fit traces, used to warm up and to see which kernels the step runs."""
    point = fam.trace_points(1, False, lambda pts, v: True)[0]
    return {**fam.workload_fixed, **fam.to_params(1, point, False)}


def kernels_of(fam: Declaration, optimizer: str) -> dict[str, Any]:
    """``{"host_dependent", "kernel_host"}`` of a family's model: whether any entry's step runs oneDNN
    kernels (a trace at the family's first trace point: NOTE [ host-dependent bytes ] in
    :mod:`memlab.core.host`), and the kernels this process picks, which such a model holds for."""
    from ..measurement.host_tags import ONEDNN_OPS  # deferred: torch line

    params = first_trace_params(fam)
    dependent = any(op in ONEDNN_OPS for e in fam.entries
                    for _d, _c, _p, op in traces.raw_trace(e.technique, {**params, **e.fixed}, optimizer))
    return {"host_dependent": dependent, "kernel_host": kernel_host()}


def _kept_families(path: Path) -> dict[str, Any]:
    """The families of an existing model file of this schema (refitted ones are replaced), else none;
    each keeps the commit it was fitted at (``memlab_commit``: the file's, for a family fitted before
    families carried their own)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not (isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("families"), dict)):
        return {}
    return {name: {"memlab_commit": data.get("memlab_commit"), **fam} for name, fam in data["families"].items()}


def _fit_all(out_dir, optimizers, declarations: list[Declaration], say, measure_fn) -> list[Path]:
    from ..measurement.environment import git_commit  # deferred: torch line

    paths = []
    started = time.perf_counter()
    for optimizer in optimizers:
        path = models_path(optimizer, out_dir)
        fams = _kept_families(path)
        for fam in declarations:
            say(f"memlab: fitting {fam.name} ({optimizer})")
            fams[fam.name] = {**fit_family(fam, optimizer, say=say, measure_fn=measure_fn), "memlab_commit": git_commit()}
        doc = {
            "schema": SCHEMA, "kind": "memlab memory models (NOTE [ advisor models ] in memlab/advisor/model.py)",
            "memlab_commit": git_commit(), "device": "cpu", "dtype": "float32", "mode": "train",
            "optimizer": optimizer, "loss": "given", "families": fams,
            "cuda_margin_facts": _cuda_margin_facts(fams),
            "fit_seconds": round(time.perf_counter() - started, 1),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
        say(f"memlab: wrote {path} ({time.perf_counter() - started:.0f} s so far)")
        paths.append(path)
    return paths
