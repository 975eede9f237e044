"""``memlab advise --family F --vary micro_batches``: the fewest micro-batches K a family's batch B fits in,
from the committed family models (fitted on whole steps, without accumulation); no torch.

# NOTE [ micro-batches from a whole-step model ]
``--accumulate K`` runs a batch B as K micro-batches of B/K, each forward and backward adding into
``.grad``, then one optimizer step (NOTE [ micro-batches of a problem ] in memlab.measurement.micro_batches).
A family model holds the whole step at B/K, S, as a few pieces: the live bytes, by category, at each
moment of the step that can be its peak.  Against S the accumulated step differs in three ways:
the inputs are the whole batch's (the micro-batches are views of them): ``in(B)`` instead of ``in(B/K)``;
from the second micro-batch on every ``.grad`` exists before backward starts (each fresh gradient is a
temporary until it is added in place); and an input that takes a gradient gets a whole-batch-sized one
(its slice's backward).  The models were fitted without accumulation, so they hold no term for when,
in backward, the gradients of S come to exist, nor for the moments between its pieces.  So the
accumulated peak is bounded, in bytes, with T the peak of S at B/K, g its gradients, G the largest
gradients of any piece and P its parameters (with buffers):

* low  = max over the pieces of (their bytes - their gradients) + G + in(B) - in(B/K): each piece is a
  moment of S, and at it the second micro-batch holds its other bytes beside every gradient;
* high = T + in(B) - in(B/K) + P + 2 in(B) where a piece's gradients name the batch or a chunk (an
  input takes a gradient: the whole-batch gradient and its slice's backward), else
  T + in(B) - in(B/K) + P: no moment holds more than S's plus the whole gradient set.

Both are bounds on the model's whole step, which its traces hold at one intra-op thread.  Where its
measured held-out points (at the default threads) read more bytes than it predicts, high adds the
largest such shortfall, ``under``: oneDNN's convolution backward takes scratch per thread that the
one-thread traces do not hold (resnet: 599,040 B at 2 threads on an AVX2 host, up to 25 KB on
AVX-512; tests/test_advisor.py EXACT_AT_ONE_THREAD_ONLY), and an accumulated step measured beyond
the high bound without it (2,295,056 B against 1,709,240 on AVX2).
They meet, and the prediction is exact, when a piece without gradients is S's peak (g = 0), every
parameter's gradient shows in some piece (G = P: no buffers) and no input takes a gradient.  K = 1 is
the model itself.  An entry whose bounds do not meet is shown unranked with both and the reason, never
a number between them.  The relative time is the model's at B/K: each micro-batch's step against plain's
at B/K, as plain's micro-batches at the same K.
Evidence: tests/test_advise_micro_family.py (memlab.measure(..., accumulate=K) within the bounds at one
small setting per family with a batch, to the byte where they meet)
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from ..core.setting import DEFAULTS, MAX_ACCUMULATE
from .advise import (AdviceError, cuda_need, error_bound, fmt_bytes, format_categories, knob_settings, read_query,
                     time_cell, time_fields)
from .model import CATEGORIES, pieces_at, predict

__all__ = ["MICRO_BATCHES", "BATCH", "accumulated", "micro_counts", "advise_micro", "format_micro_advice"]

#: ``--vary micro_batches``: the fewest micro-batches a batch fits in
MICRO_BATCHES = "micro_batches"
#: the size a family splits into micro-batches (a family without it has no micro-batch answer)
BATCH = "batch"
#: a gradient term naming one of these is an input's (a batch-sized) gradient
_BATCH_VARIABLES = (BATCH, "chunk", "last")


def micro_counts(batch: int) -> list[int]:
    """The micro-batch counts K that split ``batch`` evenly (its divisors up to MAX_ACCUMULATE), ascending."""
    small = [k for k in range(1, int(batch ** 0.5) + 1) if batch % k == 0]
    return sorted(k for k in {*small, *(batch // k for k in small)} if k <= MAX_ACCUMULATE)


def measured_under_bytes(entry: Mapping[str, Any]) -> int:
    """The most bytes any ``ok`` measured held-out point of ``entry`` read above its prediction (0 when
    none did): what the one-thread model misses at the default threads (NOTE [ micro-batches from a
    whole-step model ])."""
    errors = [r.get("error_bytes") or 0 for r in entry.get("held_out_measured", []) if r.get("status") == "ok"]
    return max([0, *(-e for e in errors)])


def _input_gradients(entry: Mapping[str, Any]) -> bool:
    """Whether a piece of ``entry`` holds a gradient whose size names the batch or a chunk of it."""
    return any(set(mono.split("*")) & set(_BATCH_VARIABLES) for cls in entry["classes"] for piece in cls["pieces"]
               for mono in piece.get("gradients", {}))


def accumulated(family, entry: Mapping[str, Any], params: Mapping[str, int], parts: int) -> dict[str, Any]:
    """The peak of a step of ``params["batch"]`` as ``parts`` micro-batches, from ``entry``'s whole-step
    model (NOTE [ micro-batches from a whole-step model ]): ``low_bytes`` and ``high_bytes`` (total peak
    bounds), ``exact`` (they meet), ``peak_by_category_bytes`` (the low bound's: the whole batch's
    inputs, every gradient), ``k`` (loop count at B/K), ``terms`` (``peak``, ``gradients_at_peak``,
    ``gradients_largest``, ``parameters``, ``inputs_whole``, ``inputs_micro``, ``input_gradients``: bytes).

    Raises:
        ValueError: ``parts`` does not divide the batch (valid: its divisors).
    """
    batch = int(params[BATCH])
    if parts < 1 or batch % parts:
        raise ValueError(f"micro_batches={parts} does not split batch={batch}; valid: a divisor of {batch}")
    k, _cls, pieces = pieces_at(family, entry, {**params, BATCH: batch // parts})
    peak = max(range(len(pieces)), key=lambda i: (sum(pieces[i].values()), -i))  # predict's: the first on a tie
    cats = {c: pieces[peak].get(c, 0) for c in CATEGORIES}
    total = sum(cats.values())
    if parts == 1:
        return {"low_bytes": total, "high_bytes": total, "exact": True, "peak_by_category_bytes": cats, "k": k,
                "terms": None}
    whole = predict(family, entry, params)["peak_by_category_bytes"]["inputs"]
    g_max = max(p.get("gradients", 0) for p in pieces)
    grads_in = _input_gradients(entry)
    # each piece is a moment of S: beside every gradient (the second micro-batch on) it holds its other bytes
    # and g_max; the largest such moment is a lower bound (NOTE [ micro-batches from a whole-step model ])
    low_at = max(range(len(pieces)), key=lambda i: (sum(pieces[i].values()) - pieces[i].get("gradients", 0), -i))
    low_cats = {c: pieces[low_at].get(c, 0) for c in CATEGORIES}
    low = sum(low_cats.values()) - low_cats["gradients"] + g_max + whole - low_cats["inputs"]
    under = measured_under_bytes(entry)
    high = total + whole - cats["inputs"] + cats["parameters"] + (2 * whole if grads_in else 0) + under
    return {"low_bytes": low, "high_bytes": high, "exact": low == high, "k": k,
            "peak_by_category_bytes": {**low_cats, "inputs": whole, "gradients": g_max},
            "terms": {"peak": total, "gradients_at_peak": cats["gradients"], "gradients_largest": g_max,
                      "without_gradients": sum(low_cats.values()) - low_cats["gradients"],
                      "parameters": cats["parameters"], "inputs_whole": whole, "inputs_micro": cats["inputs"],
                      "input_gradients": grads_in, "measured_under": under}}


def _why(terms: Mapping[str, Any]) -> str:
    """Why an entry's bounds do not meet: each term the whole-step fit lacks, in bytes."""
    out = []
    if terms["without_gradients"] < terms["peak"]:
        out.append(f"every fitted moment of the whole step holds gradients ({fmt_bytes(terms['gradients_at_peak'])} at "
                   f"its peak): with all of them present from the second micro-batch on, which moment peaks is no "
                   f"term of the fit")
    if terms["parameters"] != terms["gradients_largest"]:
        out.append(f"parameters and buffers ({fmt_bytes(terms['parameters'])}) are not the largest gradients of "
                   f"any fitted moment ({fmt_bytes(terms['gradients_largest'])})")
    if terms["input_gradients"]:
        out.append(f"an input takes a gradient: the whole batch's and its slice's backward, at most "
                   f"2 x {fmt_bytes(terms['inputs_whole'])}")
    if terms.get("measured_under"):
        out.append(f"the whole-step model read up to {fmt_bytes(terms['measured_under'])} low at its measured "
                   f"held-out points (scratch its one-thread traces do not hold)")
    return "; ".join(out) or "the bounds differ"


def _settings_at(decl, fam, entry, chosen, sizes, parts, device, dtype) -> list[dict[str, Any]]:
    """Every knob setting of ``entry`` at the micro-batch size of ``parts`` (searched there), with its
    bounds and needs (bytes; CUDA: each bound plus the stated margin) and its ``time`` fields."""
    at = {**sizes, BATCH: sizes[BATCH] // parts}
    try:
        decl.loop.check(at)
    except ValueError:
        return []
    out = []
    need = (lambda b: b) if device == "cpu" else cuda_need
    for knobs in knob_settings(decl, fam, entry, chosen, at):
        acc = accumulated(decl, entry, {**sizes, **knobs}, parts)
        out.append({**acc, "knobs": knobs, "parts": parts, "at": {**at, **knobs},
                    "need_low_bytes": need(acc["low_bytes"]), "need_high_bytes": need(acc["high_bytes"]),
                    "time": time_fields(decl, entry, {**at, **knobs}, device, acc["k"], dtype)})
    return out


def _fastest(settings: list[dict[str, Any]], need: str) -> dict[str, Any]:
    """The setting predicted fastest (a timed one before an untimed one), then needing least ``need``."""
    def key(s):
        t = s["time"]["relative_step_time"]
        return (t is None, t or 0.0, s[need])
    return min(settings, key=key)


def _fewest(decl, fam, entry, chosen, sizes, budget, device, dtype) -> dict[str, Any]:
    """``entry``'s fewest K whose high need fits ``budget`` (``fits``: its fastest setting there) and the
    fewest whose low need does (``may_fit``), each None when no count reaches it; ``smallest``: the least
    low need at the most micro-batches (when nothing may fit) or None."""
    fits = may = None
    last: list[dict[str, Any]] = []
    for parts in micro_counts(sizes[BATCH]):
        found = _settings_at(decl, fam, entry, chosen, sizes, parts, device, dtype)
        last = found or last
        if may is None and any(s["need_low_bytes"] <= budget for s in found):
            may = _fastest([s for s in found if s["need_low_bytes"] <= budget], "need_low_bytes")
        ok = [s for s in found if s["need_high_bytes"] <= budget]
        if ok:
            fits = _fastest(ok, "need_high_bytes")
            break
    smallest = min(last, key=lambda s: s["need_low_bytes"]) if last and may is None else None
    return {"fits": fits, "may_fit": may, "smallest": smallest}


def _answer(entry, s, sizes, budget) -> dict[str, Any]:
    """One answer row: ``entry`` as ``s["parts"]`` micro-batches at the setting ``s``."""
    batch = sizes[BATCH]
    return {"technique": entry["technique"], "label": entry["label"], "knobs": s["knobs"], "chunks": s["k"],
            "size": s["parts"], "micro_batch": batch // s["parts"], "exact": s["exact"],
            "params": {**entry["fixed"], **sizes, **s["knobs"], "accumulate": s["parts"]},
            "total_peak_bytes": s["low_bytes"] if s["exact"] else None, "low_bytes": s["low_bytes"],
            "high_bytes": s["high_bytes"], "need_bytes": s["need_high_bytes"], "need_low_bytes": s["need_low_bytes"],
            "headroom_bytes": budget - s["need_high_bytes"], "fits": s["need_high_bytes"] <= budget,
            "peak_by_category_bytes": s["peak_by_category_bytes"], "baseline": entry.get("baseline") is True,
            "recommendable": entry.get("recommendable", False), "error_bound": error_bound(entry),
            "why": None if s["exact"] else _why(s["terms"]), **s["time"]}


def advise_micro(family: str, budget: int | str, params: Sequence[str] = (), *, optimizer: str = DEFAULTS.optimizer,
                 device: str = "cpu", models_dir=None, host: Mapping[str, Any] | None | str = "here") -> dict[str, Any]:
    """Per modelled technique of ``family``, the fewest micro-batches K (a divisor of ``--param batch``)
    its step fits ``budget`` bytes in (NOTE [ micro-batches from a whole-step model ]).

    Returns a JSON-ready dict: ``answers`` (exact ones, ranked by K, plain first, then predicted time:
    the shape :func:`memlab.advisor.verify` reads as ``fits``, ``params`` holding ``accumulate``),
    ``unranked`` (bounds that do not meet: ``low_bytes``, ``high_bytes``, ``size`` the fewest K whose high
    bound fits or None, ``may_fit_from`` the fewest whose low bound does, ``why``), ``cannot_fit`` (with
    the least need at K = B), ``batch``, ``sizes``, ``notes``.

    Raises:
        AdviceError: the family has no batch, a bad parameter, device or budget.
    """
    started = time.perf_counter()
    q = read_query(family, budget, params, optimizer, device, models_dir, host)
    fam, sizes, budget_bytes = q["fam"], q["sizes"], q["budget_bytes"]
    if BATCH not in fam["sizes"]:
        raise AdviceError(f"--vary {MICRO_BATCHES} splits a batch, and family {family!r} has none (sizes: "
                          f"{', '.join(fam['sizes'])}); valid: a family with a {BATCH} size, or --vary batch")
    answers, unranked, cannot = _rows(q["decl"], {**fam, "entries": q["entries"]}, q["chosen"], sizes, budget_bytes,
                                      device, q["models"].get("dtype"))
    answers.sort(key=lambda c: (c["size"], not c["baseline"], c["relative_step_time"] or float("inf")))
    answers = [dict(c, rank=i + 1) for i, c in enumerate(answers)]
    return {"family": family, "vary": MICRO_BATCHES, "batch": sizes[BATCH], "sizes": sizes, "notes": q["notes"],
            "workload_fixed": fam["workload_fixed"],
            "budget_bytes": budget_bytes, "optimizer": optimizer, "device": device,
            "models": q["models"].get("memlab_commit"), "dtype": q["models"].get("dtype"),
            "answers": answers, "fits": answers,
            "unranked": unranked, "cannot_fit": cannot, "seconds": round(time.perf_counter() - started, 2)}


def _rows(decl, fam, chosen, sizes, budget, device, dtype) -> tuple[list[dict], list[dict], list[dict]]:
    """``(answers, unranked, cannot_fit)`` of :func:`advise_micro`, one per entry of ``fam``."""
    answers, unranked, cannot = [], [], []
    for entry in fam["entries"]:
        found = _fewest(decl, fam, entry, chosen, sizes, budget, device, dtype)
        best = found["fits"] or found["may_fit"]
        if best is None or not entry.get("recommendable"):
            pool = [found[k] for k in ("smallest", "may_fit", "fits") if found[k]]
            least = min(pool, key=lambda s: s["need_low_bytes"]) if pool else None
            cannot.append({"technique": entry["technique"], "label": entry["label"],
                           "recommendable": entry.get("recommendable", False),
                           "smallest_need_bytes": least and least["need_low_bytes"],
                           "at": least and {"micro_batches": least["parts"], **least["knobs"]}})
            continue
        row = {**_answer(entry, best, sizes, budget),
               "may_fit_from": found["may_fit"] and found["may_fit"]["parts"]}
        if found["fits"] and best["exact"]:
            answers.append(row)
        else:
            unranked.append({**row, "size": found["fits"] and found["fits"]["parts"]})
    return answers, unranked, cannot


def format_micro_advice(a: Mapping[str, Any]) -> str:
    """The micro-batch answer as text: ranked exact answers, then the unranked bounds with their reason."""
    need = "peak" if a["device"] == "cpu" else "CUDA need"
    lines = [f"memlab advise: {a['family']} {' '.join(f'{k}={v}' for k, v in a['sizes'].items())}, fewest "
             f"{MICRO_BATCHES} of batch={a['batch']} in {fmt_bytes(a['budget_bytes'])}, optimizer {a['optimizer']}, "
             f"device {a['device']}",
             f"models: memlab {str(a['models'])[:12]} ({a['dtype']}, exact CPU bytes of whole steps at batch B/K; "
             f"nothing measured)", ""]
    rows = [("#", "technique", "setting", MICRO_BATCHES, need, "time (vs plain at B/K)", "bytes")]
    for c in a["answers"] + a["unranked"]:
        knobs = " ".join(f"{k}={v}" for k, v in c["knobs"].items()) or "-"
        k = f"{c['size']} x {c['micro_batch']}" if c.get("size") else f"from {c['may_fit_from']}?"
        what = fmt_bytes(c["need_bytes"]) if c["exact"] else f"{fmt_bytes(c['need_low_bytes'])} .. {fmt_bytes(c['need_bytes'])}"
        rows.append((str(c.get("rank") or "-"), c["label"], knobs, k, what, time_cell(c),
                     "exact" if c["exact"] else "bounds: unranked"))
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    lines += ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
    for c in a["answers"]:
        lines.append(f"  {c['label']}: {format_categories(c)}")
    for c in a["unranked"]:
        lines.append(f"  {c['label']} unranked: {c['why']}")
    for c in a["cannot_fit"]:
        at = c["at"] and " at " + " ".join(f"{k}={v}" for k, v in c["at"].items())
        why = "" if c["recommendable"] else " (not recommended: a held-out measurement was not ok)"
        lines.append(f"  {c['label']}: does not fit; smallest {need} {fmt_bytes(c['smallest_need_bytes'])}{at or ''}{why}")
    lines += ["", f"{MICRO_BATCHES}: K micro-batches of B/K accumulated into .grad (--accumulate K); predicted from the "
              "whole-step model at B/K plus the whole batch's inputs and gradients, exact where its bounds meet, else "
              "shown with both bounds and the term the fit lacks (NOTE [ micro-batches from a whole-step model ] in "
              "memlab/advisor/micro.py); fits by the upper bound"]
    return "\n".join(lines)
