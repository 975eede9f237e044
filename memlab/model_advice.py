"""``memlab advise --model my_model.py``: the largest batch each technique fits in a budget, for a model file.

::

    memlab advise --model examples/gpt2.py --vary batch --budget 24GiB --device cuda [--json] [--verify]

A model file's advisor model is declared like a family's (:class:`~memlab.advisor.AdvisorModel`):
by default (:func:`model_declaration`) it varies the sizes given to ``--vary`` (``batch``, and any
integer keyword of ``batch()`` such as ``seq``), has no loop, and models every technique of the file
that applies on the CPU (``offload_activations`` is CUDA only; the checkpointing kinds need repeated
blocks).  A file overrides any of that by defining one ``AdvisorModel`` subclass without a family
(``class Advice(memlab.AdvisorModel): held_out = {"batch": (1, 4)}``); ``entries`` may name kinds
(``Entry("checkpoint_blocks")``).

The fit (:func:`memlab.advisor.fit.fit_family`: exact traces at tiny sizes, held-out traces and
measurements) is cached per model file (:func:`cache_dir_for`: keyed by the file's bytes, the
declaration, the optimizer and memlab's commit), so a second ``advise`` reads JSON and searches.
For each technique the answer is the largest value of the first varied size (``batch``) whose
predicted need fits the budget (:func:`largest_fitting`), with its peak by category (bytes) and
predicted relative step time.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .advisor.advise import AdviceError, cuda_need, error_bound, fmt_bytes, parse_budget
from .advisor.declaration import MAX_QUANTUM_LIMIT, AdvisorModel, Declaration, Entry
from .advisor.loops import NoLoop
from .advisor.model import SCHEMA, load_models, models_path, predict, predict_time

__all__ = ["model_declaration", "cache_dir_for", "fitted_family", "largest_fitting", "advise_model",
           "format_model_advice", "TRACE_VALUES", "HELD_OUT", "TIME_BATCHES", "MAX_SIZE"]

#: the values a model file's varied sizes are traced at (small: a real model's step at batch 43 is slow)
TRACE_VALUES = (2, 3, 4, 5, 7)
#: ``(low, high)`` held-out traces draw ``batch`` from
HELD_OUT = (1, 8)
#: the two batches the relative step time is measured at (NOTE [ advisor time model ])
TIME_BATCHES = (2, 6)
#: the largest size searched (the workload's own upper bound on ``batch``)
MAX_SIZE = 1_000_000


def _file_declaration(workload) -> type[AdvisorModel] | None:
    """The one unregistered ``AdvisorModel`` subclass the model file defines, or None."""
    module = sys.modules.get(workload.__module__)
    found = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, AdvisorModel)
             and v is not AdvisorModel and v.__module__ == module.__name__] if module else []
    if len(found) > 1:
        raise AdviceError(f"model file {workload.model_file.name} defines {len(found)} AdvisorModel classes "
                          f"({', '.join(c.__name__ for c in found)}); define at most one")
    return found[0] if found else None


def _applicable(workload, names: Mapping[str, str]) -> list[str]:
    """Kinds that run on the CPU and find what they need (blocks) on this model."""
    from .registry import get_technique

    out = []
    for kind, name in names.items():
        cls = get_technique(name)
        if "cpu" not in cls.devices or (cls.needs_blocks and workload({}).meta_blocks() is None):
            continue
        out.append(kind)
    return out


def model_declaration(model, vary: Sequence[str] = ("batch",)) -> Declaration:
    """The advisor declaration of a model file: the file's own ``AdvisorModel`` subclass, its
    unset fields filled in, or the default (module doc).

    Args:
        model: the model file's path.
        vary: the sizes the models vary, ``batch`` first, then keywords of ``batch()`` (``seq``).

    Raises:
        AdviceError: a size that is not ``batch`` or a sized keyword of ``batch()``, or a bad declaration.
    """
    from .own_model import load_model, model_techniques, technique_name

    workload = load_model(model)
    valid = ["batch", *workload.model_file.sizes]
    vary = tuple(dict.fromkeys(vary))
    if not vary or vary[0] != "batch" or not set(vary) <= set(valid):
        raise AdviceError(f"--vary {','.join(vary) or repr('')} is not valid for {workload.model_file.name}: "
                          f"give batch, then any of {', '.join(valid[1:]) or '(batch() takes no other size)'}")
    names = model_techniques(model)
    own = _file_declaration(workload)
    sizes = tuple(own.sizes) if own and own.sizes else vary
    defaults = {s: workload.params[s].default for s in sizes}
    entries = tuple(Entry(technique_name(model, e.technique), dict(e.fixed), tuple(e.knobs))
                    for e in own.entries) if own and own.entries else \
        tuple(Entry(names[k]) for k in _applicable(workload, names))
    time_sizes = tuple({**defaults, "batch": b} for b in TIME_BATCHES)
    held_out = {s: (HELD_OUT if s == "batch" else (2, max(2, defaults[s]))) for s in sizes}
    fields = dict(name=workload.family, workload=workload.name, sizes=sizes, workload_fixed={}, entries=entries,
                  loop=NoLoop(), time_sizes=time_sizes, work="*".join(sizes), held_out=held_out,
                  max_quantum=MAX_QUANTUM_LIMIT, trace_values=TRACE_VALUES,
                  declared_by="memlab.model_advice.model_declaration")
    if own is not None:
        for f in ("workload_fixed", "time_sizes", "work", "held_out", "max_degree", "trace_values", "time_chunks"):
            value = getattr(own, f)
            if value != getattr(AdvisorModel, f):
                fields[f] = tuple(dict(p) for p in value) if f == "time_sizes" else value
        if type(own.loop) is not NoLoop:
            fields["loop"] = own.loop
        fields["declared_by"] = f"{own.__module__}.{own.__qualname__}"
    try:
        return Declaration(**fields)
    except ValueError as exc:
        raise AdviceError(str(exc)) from None


def cache_dir_for(model, decl: Declaration, optimizer: str, root: Path | None = None) -> Path:
    """Where the fitted models of ``model`` live: ``<root>/<stem>-<key>/``, ``key`` a hash of the file's
    bytes, the declaration, the optimizer and memlab's commit (a change to any refits).  ``root``
    defaults to ``$MEMLAB_CACHE``, else ``$XDG_CACHE_HOME/memlab/advise`` (``~/.cache/memlab/advise``)."""
    from .measurement.environment import git_commit
    from .own_model import load_model

    mf = load_model(model).model_file
    h = hashlib.sha256(Path(mf.path).read_bytes())
    h.update(json.dumps([decl.to_json(), optimizer, git_commit()], sort_keys=True).encode())
    if root is None:
        env = os.environ.get("MEMLAB_CACHE")
        root = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memlab" / "advise"
    return Path(root) / f"{mf.stem}-{h.hexdigest()[:16]}"


@contextlib.contextmanager
def _tracing():
    """One intra-op thread and torch's objects frozen out of the collector, as :func:`fit_all` traces."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        torch.set_num_threads(threads)


def fitted_family(model, decl: Declaration, optimizer: str, *, cache_root: Path | None = None,
                  say: Callable[[str], None] = print, measure_fn: Callable | None = None) -> tuple[dict, Path, bool]:
    """``(family part of the model file, its path, read from the cache)``: fitted once per key."""
    from .atomic import write_text_atomic
    from .measurement.environment import git_commit
    from .advisor.fit import fit_family

    folder = cache_dir_for(model, decl, optimizer, cache_root)
    path = models_path(optimizer, folder)
    if path.is_file():
        with contextlib.suppress(ValueError, KeyError):
            return load_models(optimizer, folder)["families"][decl.name], path, True
    started = time.perf_counter()
    say(f"memlab: fitting {decl.name} ({optimizer}): {len(decl.entries)} techniques, traced at "
        f"{decl.sizes[0]} in {decl.trace_values}; cached in {folder}")
    from .advisor.trace import IdentificationError

    with _tracing():
        try:
            fam = fit_family(decl, optimizer, say=say, measure_fn=measure_fn, skip_unidentified=True)
        except IdentificationError as exc:
            raise AdviceError(f"{Path(load_model_path(model)).name}: {exc}; the step's allocations are not products "
                              f"of the varied sizes (NOTE [ advisor models ])".splitlines()[0]) from None
    doc = {"schema": SCHEMA, "kind": "memlab memory models of a model file (memlab.model_advice)",
           "memlab_commit": git_commit(), "device": "cpu", "dtype": "float32", "mode": "train",
           "optimizer": optimizer, "loss": "given", "families": {decl.name: {**fam, "memlab_commit": git_commit()}},
           "model_file": load_model_path(model), "fit_seconds": round(time.perf_counter() - started, 1)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return load_models(optimizer, folder)["families"][decl.name], path, False


def load_model_path(model) -> str:
    from .own_model import load_model

    return load_model(model).model_file.path


def largest_fitting(need: Callable[[int], int], budget: int, high: int = MAX_SIZE) -> int | None:
    """The largest ``n`` in ``1..high`` with ``need(n) <= budget`` bytes (None: not even 1).

    ``need`` is a predicted peak, non-decreasing in the size (more samples never free memory), so a
    doubling then a bisection finds it in ~2 log2(n) evaluations.
    """
    if need(1) > budget:
        return None
    lo = 1
    while lo < high and need(min(2 * lo, high)) <= budget:
        lo = min(2 * lo, high)
    hi = min(2 * lo, high + 1)  # need(hi) > budget, or hi = high + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def advise_model(model, budget: int | str, *, vary: Sequence[str] = ("batch",), params: Mapping[str, int] = {},
                 optimizer: str = "sgd", device: str = "cpu", cache_root: Path | None = None,
                 say: Callable[[str], None] = print, measure_fn: Callable | None = None) -> dict[str, Any]:
    """For each modelled technique of ``model``: the largest ``vary[0]`` fitting ``budget`` bytes.

    Args:
        params: the other varied sizes' values (``{"seq": 128}``; default: ``batch()``'s defaults).

    Returns:
        a JSON-ready dict: ``answers`` (ranked by the size, then the predicted relative time; each
        with ``technique``, ``kind``, ``size``, ``total_peak_bytes``, ``need_bytes``,
        ``peak_by_category_bytes``, ``relative_step_time``, ``error_bound``), ``fits`` (the answers that
        fit, the shape :func:`memlab.advisor.verify` reads), ``cannot_fit``, ``cached``, ``seconds``.

    Raises:
        AdviceError: bad device, optimizer, size or budget, or no technique fits even one sample.
    """
    from .registry import get_technique

    started = time.perf_counter()
    if device not in ("cpu", "cuda"):
        raise AdviceError(f"--device {device!r} is not valid; valid: cpu, cuda")
    if optimizer not in ("sgd", "sgd_momentum", "adam", "adamw"):
        raise AdviceError(f"--optimizer {optimizer!r} is not valid; valid: sgd, sgd_momentum, adam, adamw")
    budget_bytes = parse_budget(budget) if isinstance(budget, str) else int(budget)
    decl = model_declaration(model, vary)
    size, others = decl.sizes[0], decl.sizes[1:]
    workload_params = get_technique(decl.entries[0].technique).all_params()
    held = {}
    for s in others:
        p = workload_params[s]
        held[s] = p.parse(s, str(params[s])) if s in params else p.default
    unknown = sorted(set(params) - set(others))
    if unknown:
        raise AdviceError(f"--param {unknown[0]} is not a size held while {size} varies; valid: "
                          f"{', '.join(others) or 'none (vary batch,seq to give seq)'}")
    fam, path, cached = fitted_family(model, decl, optimizer, cache_root=cache_root, say=say, measure_fn=measure_fn)

    def need(entry, n):
        total = predict(decl, entry, {**held, size: n})["total_peak_bytes"]
        return total if device == "cpu" else cuda_need(total)

    answers, cannot = [], []
    for entry in fam["entries"]:
        kind = get_technique(entry["technique"]).kind
        n = largest_fitting(lambda v: need(entry, v), budget_bytes) if entry.get("recommendable") else None
        if n is None:
            cannot.append({"technique": entry["technique"], "kind": kind, "label": entry["label"],
                           "recommendable": entry.get("recommendable", False),
                           "need_at_1_bytes": need(entry, 1)})
            continue
        p = {**held, size: n}
        pred = predict(decl, entry, p)
        t = predict_time(decl, entry, p)
        answers.append({"technique": entry["technique"], "kind": kind, "label": entry["label"], "size": n,
                        "params": p, "knobs": {}, "chunks": 1, "total_peak_bytes": pred["total_peak_bytes"],
                        "peak_by_category_bytes": pred["peak_by_category_bytes"], "need_bytes": need(entry, n),
                        "headroom_bytes": budget_bytes - need(entry, n), "fits": True,
                        "relative_step_time": None if t is None else round(t, 3),
                        "error_bound": error_bound(entry), "validated_max": entry["validated_range"].get(size, [0, 0])[1]})
    if not answers:
        raise AdviceError(f"no technique of {Path(load_model_path(model)).name} fits {fmt_bytes(budget_bytes)} "
                          f"at {size}=1 ({optimizer}, {device}); the smallest predicted need is "
                          f"{fmt_bytes(min(c['need_at_1_bytes'] for c in cannot))}")
    answers.sort(key=lambda a: (-a["size"], a["relative_step_time"] is None, a["relative_step_time"] or 0))
    return {"model_file": load_model_path(model), "family": decl.name, "vary": size, "held": held,
            "budget_bytes": budget_bytes, "optimizer": optimizer, "device": device, "models": str(path),
            "cached": cached, "declared_by": decl.declared_by, "answers": answers, "fits": answers,
            "cannot_fit": cannot, "not_modelled": fam.get("not_modelled", []),
            "seconds": round(time.perf_counter() - started, 1)}


def format_model_advice(a: Mapping[str, Any]) -> str:
    """The answers as text: one row per technique, its categories below it."""
    from .advisor.advise import category_text

    need = "peak" if a["device"] == "cpu" else "CUDA need"
    held = "".join(f", {k}={v}" for k, v in a["held"].items())
    lines = [f"memlab advise: {Path(a['model_file']).name} ({a['family']}), largest {a['vary']} in "
             f"{fmt_bytes(a['budget_bytes'])}{held}, optimizer {a['optimizer']}, device {a['device']}",
             f"models: {a['models']} ({'cached' if a['cached'] else 'fitted now'}; exact CPU bytes from traces; "
             f"{a['seconds']} s)"]
    if a["device"] == "cuda":
        lines.append("CUDA need = exact peak x 1.10 + 64 MiB caching-allocator margin + cuBLAS workspaces "
                     "(a stated margin); the CUDA context is not included")
    rows = [("#", "technique", a["vary"], need, "time", "model error")]
    for i, c in enumerate(a["answers"], 1):
        t = c["relative_step_time"]
        rows.append((str(i), c["kind"], str(c["size"]), fmt_bytes(c["need_bytes"]),
                     "-" if t is None else f"~{t:.2f}x", c["error_bound"]["text"]))
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    lines.append("")
    for j, r in enumerate(rows):
        lines.append("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
        if j:
            lines.append(" " * (widths[0] + 2) + category_text(a["answers"][j - 1]))
    for c in a["cannot_fit"]:
        why = "" if c["recommendable"] else " (not recommended: a held-out measurement was not ok)"
        lines.append(f"  {c['kind']}: does not fit at {a['vary']}=1 (needs {fmt_bytes(c['need_at_1_bytes'])}){why}")
    for c in a.get("not_modelled", []):
        lines.append(f"  {c['label']}: not modelled: {c['reason']}")
    beyond = [c for c in a["answers"] if c["validated_max"] and c["size"] > c["validated_max"]]
    if beyond:
        lines += ["", f"{a['vary']} beyond the measured range (<= {beyond[0]['validated_max']}) is predicted by the "
                      f"exact model of the traced allocations; --verify measures #1"]
    lines.append("time: relative step time (technique / plain, thread CPU time at one thread), modelled from "
                 f"{a['vary']}={TIME_BATCHES[0]} and {TIME_BATCHES[1]}")
    return "\n".join(lines)
