"""The committed memory models still describe what the code allocates.

A model is fitted from traces of the code as it was (NOTE [ advisor models ] in
:mod:`memlab.advisor.model`); a later change to a technique's allocations leaves the committed
``data/models/cpu-float32-*.json`` describing bytes the code no longer allocates, and nothing else
reads those classes again until the next ``make models``.  It happened: the SGD chunking model of
05d1585's parent, fitted before ``slice_accumulate``'s per-loop workspace, still listed per-chunk
``[last, hidden]`` allocations the code no longer made.  Its peaks were right at every one of 400
random held-out settings (those allocations were freed before any peak); its classes' allocation lists
(the page-fault term of the time model reads them: NOTE [ page faults in the time model ] in
:mod:`memlab.advisor.fit`) were not.

So every modelled entry of every family is traced once, at one small held-out setting in its highest
exact class (3 loop bodies, 3 layers: :func:`check_point`), and the trace must match the model
exactly: the peak, total and every category, within the entry's own held-out traced bound
(``held_out_traced.max_abs_error_bytes``: 0 B for every committed entry,
``tests/test_advisor.py::test_models_are_versioned_and_exact_on_their_held_out_points``), and the
step's allocations, size for size and count for count, those the class lists.

The trace is the fit's own (:func:`memlab.advisor.trace.raw_trace`, in this process, one intra-op
thread as ``memlab advise --fit`` traces), not ``memlab.measure``: the same exact allocation record
without a child process, event by event, and at one thread resnet's oneDNN convolutions take no
per-thread scratch (their measured bound is 24,600 B at the default threads; traced they are exact).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from collections import Counter
from typing import Any, Iterable, Mapping

import pytest

from memlab.core.declaration import as_declaration
from memlab.advisor.fit import events_peak
from memlab.advisor.model import CATEGORIES, eval_poly, load_models, models_path, predict
from memlab.advisor.trace import raw_trace
from memlab.core.host import ISA_LEVELS, KERNEL_INDEPENDENT_CATEGORIES, describe, kernel_host

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

OPTIMIZERS = ("sgd", "adam")
#: random held-out settings drawn per entry; the one with the smallest predicted peak in the checked
#: class is traced
CANDIDATES = 400


def _class_of(entry: Mapping[str, Any], params: Mapping[str, int], k: int) -> Mapping[str, Any] | None:
    """The exact class (``k``, and the outer count where the entry has an outer loop) of ``params``,
    or None (a general class: its allocations grow with ``m``, a growing body's listed at its first size)."""
    for c in entry["classes"]:
        outer = c.get("outer")
        if c.get("k") == k and (not outer or outer.get("k") == params[outer["size"]]):
            return c
    return None


def check_point(fam: Mapping[str, Any], entry: Mapping[str, Any], seed: int = 1) -> dict[str, int]:
    """The smallest (by predicted peak bytes) of :data:`CANDIDATES` random held-out settings of
    ``entry`` (sizes and knobs, from the declaration's ``held_out`` ranges) in its highest exact class:
    ``k = BASE_K`` loop bodies (3 chunks, 3 blocks) where it has a loop, ``BASE_K`` layers where it has an
    outer loop; every size 2 or more (at 1 a copy of a size-1 dimension can be a view: the transformer
    at batch 1 skips one [tokens, 64] copy per layer that its model, traced at 5 and more, lists).  Every piece and every allocation of an exact class is the trace's own, event for event
    (NOTE [ advisor models ]), so a stale one shows at the right setting.

    Raises:
        AssertionError: no candidate falls in that class (the declaration's ranges cannot reach it).
    """
    decl = as_declaration(fam)
    own = decl.for_entry(decl.entry(entry["label"]))
    top = max(c.get("k", 0) for c in entry["classes"])
    outers = [c["outer"]["k"] for c in entry["classes"] if "k" in (c.get("outer") or {})]
    points = [p for p in own.random_points(bool(entry["knobs"]), CANDIDATES, seed)
              if min(p.values()) >= 2 and (c := _class_of(entry, p, predict(fam, entry, p)["k"])) is not None and c["k"] == top
              and (not outers or c["outer"]["k"] == max(outers))]
    assert points, f"{decl.name} {entry['label']}: none of {CANDIDATES} held-out settings is in class k={top}"
    return min(points, key=lambda p: predict(fam, entry, p)["total_peak_bytes"])


def _allocated_sizes(fam: Mapping[str, Any], entry: Mapping[str, Any], params: Mapping[str, int]) -> Counter | None:
    """``{bytes: count}`` of the allocations the step makes at ``params`` by the model (its exact class's
    ``allocations``: ``[q, monomial, a, b]``, ``a`` of ``q * monomial`` bytes); None where the class lists
    none (a model fitted before they were recorded: the SGD reversible model)."""
    decl = as_declaration(fam)
    k, values = decl.loop_of(params, chunked=bool(entry["knobs"]))
    listed = _class_of(entry, params, k).get("allocations")
    if listed is None:
        return None
    out: Counter = Counter()
    for q, mono, a, _b in listed:
        out[eval_poly({mono: q}, values)] += a
    return +out


def stale_entries(optimizer: str, models_dir=None, only: Iterable[tuple[str, str]] | None = None) -> list[str]:
    """One line per modelled entry (``(family, label)`` in ``only``, default all) of the models for
    ``optimizer`` in ``models_dir`` (default the committed ones), as they hold on this host's CPU kernels
    (:func:`load_models` with ``host``: a convolution family's variant fitted on this host's kernels where
    one is committed), that a trace of the current code at :func:`check_point` contradicts: a predicted
    peak off by more than the entry's held-out traced bound (bytes, in total or, where that bound is 0, in
    any category), or the step's allocations (sizes and counts) not those the model lists; empty when
    every entry matches.  A family fitted on other kernels, with no variant for this host's, is compared on
    :data:`KERNEL_INDEPENDENT_CATEGORIES` alone (NOTE [ host-dependent bytes ] in :mod:`memlab.core.host`)."""
    import torch

    models = load_models(optimizer, models_dir, host=kernel_host())
    wanted = None if only is None else set(only)
    out = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, fam in models["families"].items():
            for entry in fam["entries"]:
                if wanted is None or (name, entry["label"]) in wanted:
                    out += _contradictions(optimizer, name, fam, entry)
    finally:
        torch.set_num_threads(threads)
    return out


def _contradictions(optimizer: str, name: str, fam: Mapping[str, Any], entry: Mapping[str, Any]) -> list[str]:
    """:func:`stale_entries`' lines for one entry (none, one or two)."""
    p = check_point(fam, entry)
    pred = predict(fam, entry, p)
    trace = raw_trace(entry["technique"], {**fam["workload_fixed"], **entry["fixed"], **p}, optimizer)
    total, cats = events_peak(trace)
    bound = entry["held_out_traced"]["max_abs_error_bytes"]
    where = f"{optimizer} {name} {entry['label']} at {p}"
    if fam.get("other_kernels"):  # fitted on other kernels: what every host allocates alike
        warnings.warn(f"{where}: the model was fitted on {describe(fam['other_kernels']['fitted'])}, this host runs "
                      f"{describe(fam['other_kernels']['here'])}: compared on {KERNEL_INDEPENDENT_CATEGORIES} only")
        off = {c: pred["peak_by_category_bytes"][c] - cats.get(c, 0) for c in KERNEL_INDEPENDENT_CATEGORIES
               if pred["peak_by_category_bytes"][c] != cats.get(c, 0)}
        return [f"{where}: predicted - traced by category: {off}"] if off else []
    off = {c: pred["peak_by_category_bytes"][c] - cats.get(c, 0) for c in CATEGORIES
           if pred["peak_by_category_bytes"][c] != cats.get(c, 0)}
    out = []
    if abs(pred["total_peak_bytes"] - total) > bound or (bound == 0 and off):
        out.append(f"{where}: predicted {pred['total_peak_bytes']} B, traced {total} B (bound {bound} B; "
                   f"predicted - traced by category: {off})")
    listed = _allocated_sizes(fam, entry, p)
    made = Counter(delta for delta, _cat, phase, _op in trace if phase != "pre" and delta > 0)
    if listed is not None and listed != made:
        out.append(f"{where}: the model lists allocations {dict(sorted((listed - made).items()))} (bytes: count) the "
                   f"step does not make, and the step makes {dict(sorted((made - listed).items()))} it does not list")
    return out


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_committed_models_predict_what_the_code_allocates(optimizer):
    assert stale_entries(optimizer) == []


@pytest.mark.parametrize("stale", ["peak", "allocation"])
def test_a_model_of_code_that_has_changed_since_is_named_with_its_bytes(tmp_path, stale):
    """A copy of the SGD model whose ``slice_accumulate[backward=manual]`` class of 3 chunks lists one
    ``4 * hidden * last`` byte allocation the code does not make (the stale model of 05d1585's parent:
    per-chunk ``[last, hidden]`` allocations ``slice_accumulate`` had stopped making), live at every
    moment (``peak``: every piece's temporaries grow by it) or freed at once (``allocation``: only the
    class's allocations list it), is named with the bytes it is off by; ``slice_loop`` beside it,
    untouched, is not."""
    data = json.loads(models_path("sgd").read_text())
    label = "slice_accumulate[backward=manual]"
    entry = next(e for e in data["families"]["chunking"]["entries"] if e["label"] == label)
    three = next(c for c in entry["classes"] if c.get("k") == 3)
    if stale == "peak":
        for piece in three["pieces"]:
            piece.setdefault("temporaries", {})["hidden*last"] = piece["temporaries"].get("hidden*last", 0) + 4
    three["allocations"].append([4, "hidden*last", 1, 0])
    (tmp_path / models_path("sgd").name).write_text(json.dumps(data))
    point = check_point(data["families"]["chunking"], entry)
    extra = 4 * point["hidden"] * (point["n"] - 2 * point["chunk_size"])  # the last of 3 chunks
    lines = stale_entries("sgd", tmp_path, only=[("chunking", label), ("chunking", "slice_loop")])
    assert all(line.startswith(f"sgd chunking {label} at {point}: ") for line in lines), lines
    assert f"the model lists allocations {{{extra}: 1}} (bytes: count) the step does not make, and the step " \
           f"makes {{}} it does not list" in lines[-1], lines
    if stale == "peak":
        assert len(lines) == 2 and f"predicted - traced by category: {{'temporaries': {extra}}})" in lines[0], lines
    else:
        assert len(lines) == 1, lines


# -- another host's kernels: oneDNN capped below this CPU's instruction set --------------------------------

def _capped_check(optimizer: str, cap: str) -> dict[str, Any]:
    """In a fresh interpreter with oneDNN capped at ``cap`` (as a CPU without the instruction sets above
    it would run: NOTE [ host-dependent bytes ] in :mod:`memlab.core.host`): this host's kernel record, the
    families the committed models hold for other kernels there, the host-dependent entries and
    :func:`stale_entries` of those."""
    code = f"""
import importlib.util, json
spec = importlib.util.spec_from_file_location("stale", {str(Path(__file__))!r})
stale = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stale)
from memlab.advisor.model import load_models
from memlab.core.host import kernel_host
import gc, torch
gc.collect()
gc.freeze()  # as conftest.frozen_heap: the traces' gc.collect() scan only their own objects
fams = load_models({optimizer!r}, host=kernel_host())["families"]
dependent = sorted((n, e["label"]) for n, f in fams.items() if f.get("host_dependent") for e in f["entries"])
print(json.dumps({{"host": kernel_host(), "other": sorted(n for n, f in fams.items() if f.get("other_kernels")),
                  "dependent": dependent, "stale": stale.stale_entries({optimizer!r}, only=dependent)}}))
"""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": cap.upper(), "ATEN_CPU_CAPABILITY": "avx2" if cap != "avx" else "default"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


_HERE = kernel_host()["isa"]
_LEVELS = [name for name, _flags in ISA_LEVELS]
needs_above_avx2 = pytest.mark.skipif(
    _HERE is None or _LEVELS.index(_HERE) <= _LEVELS.index("avx2"),
    reason=f"this CPU's oneDNN level is {_HERE}: the cap needs a CPU above AVX2 (on an AVX2 host "
           f"test_committed_models_predict_what_the_code_allocates checks the AVX2 models directly)")


@needs_above_avx2
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_the_committed_avx2_models_are_exact_where_onednn_runs_avx2_kernels(optimizer):
    """The convolution family's committed variant for AVX2 hosts (``data/models/hosts/x86_64-avx2-*``) is
    what :func:`load_models` holds there, and a trace under AVX2 kernels matches it exactly."""
    r = _capped_check(optimizer, "avx2")
    assert r["host"]["isa"] == "avx2", r["host"]
    assert r["dependent"], "no committed family runs oneDNN kernels: nothing host-dependent is checked"
    assert r["other"] == [], f"no committed model for {r['host']}'s kernels: {r['other']}"
    assert r["stale"] == [], r["stale"]


@needs_above_avx2
def test_a_model_fitted_on_other_kernels_is_compared_on_what_every_host_allocates():
    """With oneDNN at AVX (no committed variant), the convolution family is held as fitted on other kernels
    and its entries agree with a fresh trace in the kernel-independent categories."""
    r = _capped_check("sgd", "avx")
    assert r["host"]["isa"] == "avx"
    assert r["other"] == sorted({n for n, _label in r["dependent"]}) != []
    assert r["stale"] == [], r["stale"]
