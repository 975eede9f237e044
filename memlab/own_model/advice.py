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
declaration, the optimizer, memlab's fitting sources and the libraries' versions: NOTE [ model fit
cache key ]), so a second ``advise`` reads JSON and searches; an index beside the fits finds that JSON
without importing the model file or torch (NOTE [ advise without the model file ]).
For each technique the answer is the largest value of the first varied size (``batch``) whose
predicted need fits the budget (:func:`largest_fitting`), with its peak by category (bytes) and
predicted relative step time.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import importlib.metadata as md
import json
import os
import platform
import sys
import time
import types
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import memlab
from ..advisor import trace  # trace.raw_trace is looked up when called: the tests patch it
from ..advisor.advise import (AdviceError, bounded_reading, cuda_need, error_bound, fmt_bytes, format_categories,
                             parse_budget, time_cell, time_fields)
from ..advisor.decision import order_fits
from ..advisor.fit import TRACED_HELD_OUT, fit_family, small_held_out_points
from ..advisor.trace import IdentificationError
from ..core.atomic import write_text_atomic
from ..core.declaration import MAX_QUANTUM_LIMIT, AdvisorModel, Declaration, Entry, as_declaration
from ..core.host import kernel_host
from ..core.loops import NoLoop
from ..core.params import Param
from ..advisor.model import SCHEMA, eval_poly, load_models, models_path, predict
from ..core.setting import DEFAULTS, OPTIMIZERS
from ..registry import get_technique, get_workload

__all__ = ["model_declaration", "cache_dir_for", "fitted_family", "FitProgress", "MEASURE_PER_TRACE", "TRACE_SPAN",
           "largest_fitting", "advise_model", "format_model_advice", "source_key", "keyed_files", "KEYED_SOURCES",
           "TRACE_VALUES", "HELD_OUT", "TIME_BATCHES", "TIME_ONLY_BATCHES", "MAX_SIZE", "MICRO_BATCHES", "MICRO_TRACED",
           "micro_declaration", "predict_micro", "micro_batched"]

#: the values a model file's varied sizes are traced at (small: a real model's step at batch 43 is slow)
TRACE_VALUES = (2, 3, 4, 5, 7)
#: ``(low, high)`` held-out traces draw ``batch`` from
HELD_OUT = (1, 8)
#: the batches the relative step time is measured at (NOTE [ advisor time model ]): three, so that the
#: two-coefficient fit ``r + c / batch`` has a residual to state its band by (NOTE [ the time band ] in
#: memlab.advisor.model); batch 4 costs one more timed measurement per technique, between the other two
#: in time (docs/evidence/time-model-bias.md#model-files)
TIME_BATCHES = (2, 4, 6)
#: the batches timed beyond the memory model's exact range (``time_only_sizes``: their bytes are listed
#: apart): the ratio at batch 2 to 6 is not the ratio a user's batch runs at (NOTE [ a time point where
#: users run ])
TIME_ONLY_BATCHES = (16,)

# NOTE [ a time point where users run ]
# ``r + c / batch`` fitted to batches 2, 4 and 6 alone extrapolates their noise and their regime:
# examples/gpt2.py's autocast_bf16 measured 0.60-0.77x at batch 2-6 (a fixed cost that bfloat16 halves,
# the 50257 x 64 head read each step, dominates a step that small) and 0.89-0.92x at 16, 32 and 80, so
# the three-point model predicted 0.72x at batch 32 (-20%, outside its own band).  One time-only point
# at batch 16 (one timed measurement per technique) anchors the asymptote where a user's batch is.
# Evidence: docs/evidence/time-model-bias.md#model-files
#: the largest size searched (the workload's own upper bound on ``batch``)
MAX_SIZE = 1_000_000
#: ``--vary micro_batches``: the fewest micro-batches a given batch fits in (NOTE [ the micro-batch model ])
MICRO_BATCHES = "micro_batches"
#: the micro-batch count the accumulation model is traced and measured at
MICRO_TRACED = 2

# NOTE [ the micro-batch model ]
# ``--accumulate K`` runs a batch B as K micro-batches of B/K accumulated into ``.grad``, then one
# optimizer step (NOTE [ micro-batches of a problem ] in memlab.measurement.micro_batches).  From the
# second micro-batch on every ``.grad`` exists, so micro-batches 2..K repeat one another allocation for
# allocation; the first peaks lower or alike (no ``.grad`` yet), the optimizer's step is the same at
# any K.  What grows with K at a fixed micro-batch size m is only what is built at the whole batch:
# the inputs (micro-batches are views of them).  So the step at K >= 2 is fitted once, at K = 2 as a
# function of m (exact traces at ``batch = 2 m``, ``accumulate=2``: the batch model's fit, held-out
# traces and measurements, with m in the place of the batch), and K micro-batches of m are predicted
# as that model at m plus the inputs of the whole batch beyond those of two micro-batches: the
# model's inputs polynomial, in m = B / 2, evaluated at B = K m.  K = 1 is the batch model itself
# (``--vary batch``'s fit, shared through the cache).  tests/test_advise_micro.py checks that the
# traces at K = 2, 3 and 4 of one m differ in the inputs alone, and the prediction at K = 4 against
# ``memlab measure --accumulate 4`` to the byte.  The fit traces with :func:`micro_batched`, which
# makes the advisor's traces (memlab.advisor.trace.raw_trace) build the step with accumulation; the
# measurements pass ``accumulate`` to memlab.measure.


def _file_declaration(workload) -> type[AdvisorModel] | None:
    """The one unregistered ``AdvisorModel`` subclass the model file defines, or None."""
    module = sys.modules.get(workload.__module__)
    found = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, AdvisorModel)
             and v is not AdvisorModel and v.__module__ == module.__name__] if module else []
    if len(found) > 1:
        raise AdviceError(f"model file {workload.model_file.name} defines {len(found)} AdvisorModel classes "
                          f"({', '.join(c.__name__ for c in found)}); define at most one")
    return found[0] if found else None


#: fields of a model file's ``AdvisorModel`` that :func:`model_declaration` reads itself, not through
#: :func:`_own_fields`: ``sizes`` and ``entries`` (kinds become the file's technique names)
_READ_APART = ("sizes", "entries")
#: ``AdvisorModel`` attributes a model file may not set: the file is the workload and names the family
_NOT_SETTABLE = ("family", "workload")


def _frozen(value: Any) -> Any:
    """A declared value as :class:`Declaration` holds it: mappings as dicts, lists and tuples as tuples,
    all the way down (``time_sizes``: a tuple of dicts; ``chunk_split_work``: a dict of tuples)."""
    if isinstance(value, Mapping):
        return {k: _frozen(v) for k, v in value.items()}
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _own_fields(own: type[AdvisorModel], file_name: str) -> dict[str, Any]:
    """``{field: value}`` of every :class:`Declaration` field the model file's ``AdvisorModel`` subclass
    ``own`` sets (in its body or a base below ``AdvisorModel``), but ``sizes`` and ``entries``.

    The fields come from :class:`Declaration` itself, so a field added there is copied without an
    edit here; an ``AdvisorModel`` attribute the file sets that is no such field raises.

    Raises:
        AdviceError: ``own`` sets ``workload`` or ``family``, or an attribute that names no field.
    """
    mro = own.__mro__
    below = mro[:mro.index(AdvisorModel)]
    declarable = {n for n in vars(AdvisorModel) if not n.startswith("_") and not callable(getattr(AdvisorModel, n))}
    set_names = sorted({n for c in below for n in vars(c) if n in declarable})
    copied = {f.name for f in dataclasses.fields(Declaration)} - set(_READ_APART) - {"name", "declared_by"}
    refused = [n for n in set_names if n in _NOT_SETTABLE or (n not in copied and n not in _READ_APART)]
    if refused:
        raise AdviceError(f"model file {file_name}: {own.__qualname__} sets {', '.join(refused)}, which a model "
                          f"file's AdvisorModel may not set (the file is the workload; it may set "
                          f"{', '.join(sorted(copied - set(_NOT_SETTABLE) | set(_READ_APART)))})")
    return {n: (getattr(own, n) if n == "loop" else _frozen(getattr(own, n))) for n in set_names if n in copied}


def _applicable(workload, names: Mapping[str, str]) -> list[str]:
    """Kinds advised by default that run on the CPU and find what they need (blocks) on this model."""
    out = []
    for kind, name in names.items():
        cls = get_technique(name)
        if not cls.advised or "cpu" not in cls.devices or (cls.needs_blocks and workload({}).meta_blocks() is None):
            continue
        out.append(kind)
    return out


def model_declaration(model, vary: Sequence[str] = ("batch",)) -> Declaration:
    """The advisor declaration of a model file: the file's own ``AdvisorModel`` subclass, its
    unset fields filled in, or the default (module doc).  Every :class:`Declaration` field the
    subclass sets in its body (or a base below ``AdvisorModel``) is taken as it is, even one equal to
    ``AdvisorModel``'s default (:func:`_own_fields`).

    Args:
        model: the model file's path.
        vary: the sizes the models vary, ``batch`` first, then keywords of ``batch()`` (``seq``).

    Raises:
        AdviceError: a size that is not ``batch`` or a sized keyword of ``batch()``, a bad declaration, or
            one that sets ``workload`` or ``family`` (the file is the workload).
    """
    from .run import load_model, model_techniques, technique_name  # deferred: torch line

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
    time_only_sizes = tuple({**defaults, "batch": b} for b in TIME_ONLY_BATCHES)
    held_out = {s: (HELD_OUT if s == "batch" else (2, max(2, defaults[s]))) for s in sizes}
    fields = dict(name=workload.family, workload=workload.name, sizes=sizes, workload_fixed={}, entries=entries,
                  loop=NoLoop(), time_sizes=time_sizes, time_only_sizes=time_only_sizes, work="*".join(sizes), held_out=held_out,
                  max_quantum=MAX_QUANTUM_LIMIT, trace_values=TRACE_VALUES,
                  declared_by="memlab.own_model.advice.model_declaration")
    if own is not None:
        fields.update(_own_fields(own, workload.model_file.name))
        fields["declared_by"] = f"{own.__module__}.{own.__qualname__}"
    try:
        return Declaration(**fields)
    except ValueError as exc:
        raise AdviceError(str(exc)) from None


#: the memlab sources a fit depends on (globs under memlab/): the measurement, the tracing and fitting,
#: the model-file workload and its techniques, the pure operations they call, the interfaces.  The
#: site, the sweeps, the reproductions, the CLI and the other families are left out: editing them
#: keeps a cached fit (NOTE [ model fit cache key ])
KEYED_SOURCES = ("*.py", "core/*.py", "measurement/*.py", "advisor/*.py", "functional/*.py", "own_model/*.py")
#: paths under memlab/ the globs find that a fit does not depend on (the model checks only read a fit)
_UNKEYED = ("cli.py", "__main__.py", "_version.py", "own_model/checks.py")

# NOTE [ model fit cache key ]
# A fit is reused when nothing it depends on has changed: the model file's bytes, the declaration,
# the optimizer, the memlab sources of KEYED_SOURCES (their bytes, not the git commit: a commit
# changes with every edit anywhere in the repository, and "+dirty" names no edit at all, so keying
# on it refitted after every unrelated commit and reused a fit across uncommitted edits), Python's
# and torch's versions, and the version of every library the model file's own names come from
# (``from transformers import GPT2Config``: transformers' version), and the CPU kernels oneDNN picks
# (:func:`memlab.core.host.kernel_host`: a convolution's bytes depend on them, NOTE [ host-dependent bytes ]).
# What the file imports indirectly is not in the key: delete the cache folder (``--models DIR``) after
# changing it.


def keyed_files() -> list[Path]:
    """The memlab source files a fit depends on (KEYED_SOURCES), sorted."""
    root = Path(__file__).resolve().parents[1]
    return sorted({p for g in KEYED_SOURCES for p in root.glob(g) if p.relative_to(root).as_posix() not in _UNKEYED})


def source_key() -> str:
    """sha256 (hex) of the memlab sources a fit depends on (:func:`keyed_files`, by path and bytes)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in keyed_files():
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _library_versions(module) -> dict[str, str]:
    """``{top-level package: version}`` of the libraries the model file's globals come from (not memlab,
    not the standard library's unversioned modules), and ``{path: sha256}`` of a module it loaded by
    path (a sibling model file: not in ``sys.modules``)."""
    by_path = _loaded_by_path(module)
    out = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in by_path.values()}
    for value in vars(module).values() if module else ():
        if id(value) in by_path:
            continue
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        top = name.split(".")[0] if isinstance(name, str) else None
        version = getattr(sys.modules.get(top), "__version__", None) if top and top != "memlab" else None
        if isinstance(version, str):
            out[top] = version
    return dict(sorted(out.items()))


def _loaded_by_path(module) -> dict[int, Path]:
    """``{id(module): its file}`` of the modules in ``module``'s globals that were loaded by path (a
    sibling model file: a module object that is not the one ``sys.modules`` holds under its name)."""
    return {id(v): Path(v.__file__) for v in (vars(module).values() if module else ())
            if isinstance(v, types.ModuleType) and sys.modules.get(v.__name__) is not v
            and Path(getattr(v, "__file__", None) or "").is_file()}


def cache_dir_for(model, decl: Declaration, optimizer: str, root: Path | None = None, accumulate: int = 1) -> Path:
    """Where the fitted models of ``model`` live: ``<root>/<stem>-<key>/``, ``key`` a hash of the file's
    bytes, the declaration, the optimizer, memlab's fitting sources, the libraries' versions and, above 1,
    the micro-batches accumulated (NOTE [ model fit cache key ]; a change to any refits).  ``root`` defaults to ``$MEMLAB_CACHE``, else
    ``$XDG_CACHE_HOME/memlab/advise`` (``~/.cache/memlab/advise``)."""
    import torch  # deferred: torch line

    from .run import load_model  # deferred: torch line

    workload = load_model(model)
    mf = workload.model_file
    versions = {"python": platform.python_version(), "torch": torch.__version__, "kernels": kernel_host(),
                **_library_versions(sys.modules.get(workload.__module__))}
    h = hashlib.sha256(Path(mf.path).read_bytes())
    h.update(json.dumps([decl.to_json(), optimizer, source_key(), versions], sort_keys=True).encode())
    if accumulate != 1:  # NOTE [ the micro-batch model ]
        h.update(f"accumulate={accumulate}".encode())
    return _cache_root(root) / f"{mf.stem}-{h.hexdigest()[:16]}"


def _cache_root(root: Path | None) -> Path:
    """``root``, else ``$MEMLAB_CACHE``, else ``$XDG_CACHE_HOME/memlab/advise`` (``~/.cache/memlab/advise``)."""
    if root is not None:
        return Path(root)
    env = os.environ.get("MEMLAB_CACHE")
    return Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memlab" / "advise"


# NOTE [ advise without the model file ]
# cache_dir_for needs the model file imported: its key holds the versions of the libraries the file's
# globals come from, and its declaration the sizes of batch() and the blocks the file's model has.
# For examples/gpt2.py that import (transformers, and torch under it) was 5.1 of the 5.35 s of CPU
# a cached ``memlab advise`` took; the advice itself (the JSON read and the searches) 0.3 s.  So every
# advise that reaches a fit also writes an index entry, ``<root>/index/<hash>.json``, the hash over
# what can be read without importing anything: the file's resolved path and bytes, the varied
# sizes, the optimizer, memlab's keyed sources (source_key) and Python's version.  The entry holds
# the fit's folder, the version of every installed distribution behind the libraries of the key
# (``importlib.metadata``; torch's always) and the sha256 of every file the model file loaded by
# path, as the key saw them.  A later advise whose entry still matches all of that reads the fit
# directly: neither the model file nor torch is imported.  Anything else takes the full path (and
# writes the entry again): a library of the key that no distribution provides writes no entry, a
# changed version or sibling file misses it, ``--verify`` loads the model file to measure.


def _index_path(model, vary: Sequence[str], optimizer: str, root: Path | None) -> Path | None:
    """The index entry of a model file's path (NOTE [ advise without the model file ]); None for a
    ``build`` function or a path that is no file."""
    if not isinstance(model, (str, os.PathLike)) or not Path(model).is_file():
        return None
    path = Path(model).resolve()
    h = hashlib.sha256(path.read_bytes())
    h.update(json.dumps([str(path), list(dict.fromkeys(vary)), optimizer, source_key(),
                         platform.python_version()]).encode())
    return _cache_root(root) / "index" / f"{h.hexdigest()[:24]}.json"


def _distributions(module) -> dict[str, str] | None:
    """``{distribution: version}`` of torch and of the libraries :func:`_library_versions` keys on (None
    when one of them comes from no installed distribution: it cannot be checked without importing)."""
    tops = {"torch"} | {k for k in _library_versions(module) if not k.endswith(".py")}
    owners = md.packages_distributions()
    out = {}
    for top in sorted(tops):
        if not owners.get(top):
            return None
        for dist in owners[top]:
            out[dist] = md.version(dist)
    return out


def _write_index(index: Path | None, model, folder: Path, kinds: Mapping[str, str]) -> None:
    """Record the fit ``folder`` of ``model`` (loaded) under ``index`` (NOTE [ advise without the model file ])."""
    from .run import load_model  # deferred: torch line

    if index is None:
        return
    module = sys.modules.get(load_model(model).__module__)
    dists = _distributions(module)
    if dists is None:
        return
    files = {str(p.resolve()): hashlib.sha256(p.read_bytes()).hexdigest() for p in _loaded_by_path(module).values()}
    index.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(index, json.dumps({"folder": str(folder), "distributions": dists, "files": files,
                                         "kinds": dict(kinds), "model_file": load_model_path(model)},
                                        indent=1, sort_keys=True) + "\n")


def _read_index(index: Path | None) -> dict[str, Any] | None:
    """The index entry at ``index`` when its distributions and files are as recorded, else None."""
    try:
        entry = json.loads(index.read_text())
        if any(md.version(d) != v for d, v in entry["distributions"].items()):
            return None
        if any(hashlib.sha256(Path(f).read_bytes()).hexdigest() != h for f, h in entry["files"].items()):
            return None
    except (AttributeError, OSError, ValueError, KeyError, md.PackageNotFoundError):
        return None
    return entry


def micro_batched(parts: int):
    """While open, the advisor's traces (:func:`memlab.advisor.trace.raw_trace`) take ``batch`` as the
    micro-batch size: each traces ``parts`` micro-batches of it accumulated (``batch = parts * batch``,
    ``accumulate=parts``); nothing for ``parts`` 1 (NOTE [ the micro-batch model ])."""
    return trace.micro_batches(parts)


def _micro_measure(measure_fn: Callable | None, parts: int) -> Callable | None:
    """``measure_fn`` (default :func:`memlab.measure`) taking ``batch`` as the micro-batch size:
    it measures ``parts`` micro-batches of it accumulated; ``measure_fn`` itself for ``parts`` 1."""
    if parts == 1:
        return measure_fn

    def measure(technique: str, **kwargs):
        kwargs = {**kwargs, "batch": parts * int(kwargs["batch"]), "accumulate": parts}
        return (measure_fn or memlab.measure)(technique, **kwargs)

    return measure


@contextlib.contextmanager
def _tracing():
    """One intra-op thread and torch's objects frozen out of the collector, as :func:`fit_all` traces."""
    import torch  # deferred: torch line

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
                  say: Callable[[str], None] = print, measure_fn: Callable | None = None,
                  accumulate: int = 1) -> tuple[dict, Path, bool]:
    """``(family part of the model file, its path, read from the cache)``: fitted once per key; with
    ``accumulate`` K > 1 the step of K micro-batches, its ``batch`` the micro-batch size (NOTE [ the
    micro-batch model ])."""
    from ..measurement.environment import git_commit  # deferred: torch line

    folder = cache_dir_for(model, decl, optimizer, cache_root, accumulate)
    path = models_path(optimizer, folder)
    if path.is_file():
        with contextlib.suppress(ValueError, KeyError):
            return load_models(optimizer, folder)["families"][decl.name], path, True
    started = time.perf_counter()
    say(f"memlab: fitting {decl.name} ({optimizer}): {len(decl.entries)} techniques, traced at "
        f"{decl.sizes[0]} in {decl.trace_values}; cached in {folder}")
    progress = FitProgress(decl, optimizer, say, _micro_measure(measure_fn, accumulate))
    with _tracing(), progress.watching(), micro_batched(accumulate):
        progress.plan()
        try:
            fam = fit_family(decl, optimizer, say=say, measure_fn=progress.measure, skip_unidentified=True)
        except IdentificationError as exc:
            raise AdviceError(f"{Path(load_model_path(model)).name}: {exc}; the step's allocations are not products "
                              f"of the varied sizes (NOTE [ advisor models ])".splitlines()[0]) from None
    progress.done()
    doc = {"schema": SCHEMA, "kind": "memlab memory models of a model file (memlab.own_model.advice)",
           "memlab_commit": git_commit(), "device": "cpu", "dtype": "float32", "mode": "train",
           "optimizer": optimizer, "loss": DEFAULTS.loss, "accumulate": accumulate,
           "families": {decl.name: {**fam, "memlab_commit": git_commit()}},
           "model_file": load_model_path(model), "fit_seconds": round(time.perf_counter() - started, 1)}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return load_models(optimizer, folder)["families"][decl.name], path, False


# NOTE [ a cold fit announced ]
# A cold ``advise --model`` traces each technique at a few sizes (in this process) and measures it at
# a few more (a child each): minutes to an hour for a real model.  So before the long part it says
# what it will do (the techniques, about how many traces and measurements) and, a trace later, how
# long that should take.  One trace ``t`` of the first technique at the largest traced size (after a
# warm-up trace at the smallest) is timed; a trace of the fit takes TRACE_SPAN ``t`` (checkpointing
# recomputes, and the fitting runs between traces), and a measurement, a child, takes what the
# child that loaded the file took (a fresh Python importing torch and the file:
# ``own_model.CHILD_LOAD_SECONDS``, 0 when the file was loaded in this process) plus
# MEASURE_PER_TRACE ``t`` (its float64 check, its traced steps, its timed steps).  Then a
# line per trace and per measurement with the time left, from the mean trace and measurement so far
# (a trace's time is the wait until the next one starts; the traces per technique are counted on
# the first), and a closing line with the fit's time beside the estimate.
# Evidence: docs/evidence/advise-estimate.md
#: a trace of the fit in timed first traces, and a measurement's time beyond its child's start
TRACE_SPAN, MEASURE_PER_TRACE = 1.5, 15


class FitProgress:
    """The plan, the estimate, and a line per trace and measurement of a cold fit (NOTE [ a cold fit
    announced ]).  :meth:`watching` counts the traces (the builds of the model file's problem in this
    process); :meth:`measure` is the fit's ``measure_fn``."""

    def __init__(self, decl: Declaration, optimizer: str, say: Callable[[str], None], measure_fn: Callable | None):
        self.decl, self.optimizer, self.say, self.inner = decl, optimizer, say, measure_fn
        self.traces_each = len(decl.trace_values) + 1 + TRACED_HELD_OUT  # counted on the first technique
        self.measures_each = small_held_out_points(optimizer) + len(decl.time_sizes) + len(decl.time_only_sizes)
        self.trace_times: list[float] = []
        self.measure_times: list[float] = []
        self.traced_now = 0  # the traces of the technique being fitted
        self.refined = False
        self.fitting = False  # False during the plan's own traces
        self.last_trace: float | None = None
        self.first_trace = self.first_measure = 0.0
        self.estimate = 0.0
        self.started = time.perf_counter()

    @property
    def totals(self) -> tuple[int, int]:
        """About how many traces (and one more per technique: its kernels) and measurements in all."""
        n = len(self.decl.entries)
        return n * (self.traces_each + 1), n * self.measures_each

    def plan(self) -> None:
        """The plan line; a warm-up trace and a timed one; the estimate line."""
        traces, measures = self.totals
        kinds = ", ".join(e.technique.split("__", 1)[-1] for e in self.decl.entries)
        size, values = self.decl.sizes[0], self.decl.trace_values
        self.say(f"memlab: plan: {len(self.decl.entries)} techniques ({kinds}); about {traces} traces ({self.traces_each} "
                 f"each, at {size} {min(values)}..{max(values)} and held out) and {measures} measurements "
                 f"({self.measures_each} each)")
        first = self.decl.entries[0]
        fixed = {**(self.decl.time_sizes[0] if self.decl.time_sizes else {}), **self.decl.workload_fixed, **first.fixed}
        trace.raw_trace(first.technique, {**fixed, size: min(values)}, self.optimizer)  # warm-up
        began = time.perf_counter()
        trace.raw_trace(first.technique, {**fixed, size: max(values)}, self.optimizer)
        self.first_trace = TRACE_SPAN * (time.perf_counter() - began)
        self.first_measure = self._child_start() + MEASURE_PER_TRACE * self.first_trace / TRACE_SPAN
        self.estimate = traces * self.first_trace + measures * self.first_measure
        self.say(f"memlab: estimated {_duration(self.estimate)}: {traces} traces of about {self.first_trace:.1f} s "
                 f"(from one of {first.technique} at {size}={max(values)}) and {measures} measurements of about "
                 f"{self.first_measure:.1f} s each")
        self.fitting = True

    def _child_start(self) -> float:
        from . import CHILD_LOAD_SECONDS  # deferred: torch line

        return CHILD_LOAD_SECONDS.get(str(Path(get_workload(self.decl.workload).model_file.path).resolve()), 0.0)

    def done(self) -> None:
        """The closing line: the fit's time and the estimate."""
        self.say(f"memlab: fitted in {_duration(time.perf_counter() - self.started)} (estimated "
                 f"{_duration(self.estimate)}), {len(self.trace_times) + bool(self.last_trace)} traces and "
                 f"{len(self.measure_times)} measurements")

    @contextlib.contextmanager
    def watching(self):
        from .workload import BUILD_OBSERVERS  # deferred: torch line

        pid = os.getpid()

        def observe(config: dict) -> None:
            if os.getpid() == pid and self.fitting:
                self._traced(config)

        BUILD_OBSERVERS.append(observe)
        try:
            yield self
        finally:
            BUILD_OBSERVERS.remove(observe)

    def _traced(self, config: dict) -> None:
        now = time.perf_counter()
        if self.last_trace is not None:
            self.trace_times.append(now - self.last_trace)
        self.last_trace = now
        self.traced_now += 1
        done = len(self.trace_times) + 1
        sizes = " ".join(f"{k}={config[k]}" for k in self.decl.sizes if k in config)
        self.say(f"memlab: trace {done}/~{max(done, self.totals[0])} ({sizes}); {self._left()}")

    def measure(self, technique: str, **kwargs):
        """The fit's measurement (``measure_fn``, default :func:`memlab.measure`), timed and counted."""
        if self.traced_now:  # the first measurement of a technique ends its traces
            if not self.refined:
                self.traces_each, self.refined = self.traced_now, True
            self.traced_now = 0
        if self.last_trace is not None:
            self.trace_times.append(time.perf_counter() - self.last_trace)
            self.last_trace = None
        began = time.perf_counter()
        m = (self.inner or memlab.measure)(technique, **kwargs)
        self.measure_times.append(time.perf_counter() - began)
        sizes = " ".join(f"{k}={kwargs[k]}" for k in self.decl.sizes if k in kwargs)
        self.say(f"memlab: measured {len(self.measure_times)}/{self.totals[1]}: {technique} ({sizes}) "
                 f"{m.status} in {self.measure_times[-1]:.1f} s; {self._left()}")
        return m

    def _left(self) -> str:
        traces, measures = self.totals
        per_trace = sum(self.trace_times) / len(self.trace_times) if self.trace_times else self.first_trace
        per_measure = sum(self.measure_times) / len(self.measure_times) if self.measure_times else self.first_measure
        left = max(0, traces - len(self.trace_times)) * per_trace + max(0, measures - len(self.measure_times)) * per_measure
        return f"{_duration(time.perf_counter() - self.started)} so far, about {_duration(left)} left"


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def load_model_path(model) -> str:
    from .run import load_model  # deferred: torch line

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
                 optimizer: str = DEFAULTS.optimizer, device: str = "cpu", cache_root: Path | None = None,
                 say: Callable[[str], None] = print, measure_fn: Callable | None = None,
                 load_timeout: float | None = None) -> dict[str, Any]:
    """For each modelled technique of ``model``: the largest ``vary[0]`` fitting ``budget`` bytes, or, with
    ``vary[0]`` ``micro_batches``, the fewest micro-batches K the batch ``params["batch"]`` fits in
    (:func:`advise_micro`).

    Args:
        params: the other varied sizes' values (``{"seq": 128}``; default: ``batch()``'s defaults).
        load_timeout: when the fit is not indexed, seconds the model file's import and checks may take
            in a child first (NOTE [ a model file loaded under a timeout ]); None: in this process.

    Returns:
        a JSON-ready dict: ``answers`` (the plain step first, then by predicted relative time, a
        technique not ranked by time last: on ``device="cuda"`` one that changes the dtype, whose CPU
        ratio says nothing of a GPU's; each with ``rank``, ``technique``, ``kind``, ``size``,
        ``total_peak_bytes``, ``need_bytes``, ``peak_by_category_bytes``, ``relative_step_time`` (floored:
        NOTE [ no faster than plain unless measured so ]), ``time_band``, ``time_ranked``, ``error_bound``,
        ``bounded``: the allocations
        read as upper bounds, :func:`memlab.advisor.advise.bounded_reading`, or None), ``fits`` (the answers that
        fit, the shape :func:`memlab.advisor.verify` reads), ``cannot_fit``, ``cached``, ``seconds``.

    Raises:
        AdviceError: bad device, optimizer, size or budget, or no technique fits even one sample.
    """
    started = time.perf_counter()
    if device not in ("cpu", "cuda"):
        raise AdviceError(f"--device {device!r} is not valid; valid: cpu, cuda")
    if optimizer not in OPTIMIZERS:
        raise AdviceError(f"--optimizer {optimizer!r} is not valid; valid: {', '.join(OPTIMIZERS)}")
    budget_bytes = parse_budget(budget) if isinstance(budget, str) else int(budget)
    fitting = dict(optimizer=optimizer, cache_root=cache_root, say=say, measure_fn=measure_fn, load_timeout=load_timeout)
    if tuple(vary)[:1] == (MICRO_BATCHES,):
        return advise_micro(model, budget_bytes, vary=vary, params=params, device=device, started=started, **fitting)
    fit = _fit_for(model, vary, params, **fitting)
    decl, fam, held = fit["decl"], fit["fam"], fit["held"]
    size = decl.sizes[0]
    answers, cannot = _answers(decl, fam, fit["kinds"], held, budget_bytes, device)
    if not answers:
        raise AdviceError(f"no technique of {Path(fit['model_file']).name} fits {fmt_bytes(budget_bytes)} "
                          f"at {size}=1 ({optimizer}, {device}); the smallest predicted need is "
                          f"{fmt_bytes(min(c['need_at_1_bytes'] for c in cannot))}")
    answers = order_fits(answers, None)  # plain first when it fits, then by predicted time (NOTE [ plain fits first ])
    return {"model_file": fit["model_file"], "family": decl.name, "vary": size, "held": held,
            "budget_bytes": budget_bytes, "optimizer": optimizer, "device": device, "models": str(fit["path"]),
            "cached": fit["cached"], "declared_by": decl.declared_by, "answers": answers, "fits": answers,
            "cannot_fit": cannot, "not_modelled": fam.get("not_modelled", []),
            "seconds": round(time.perf_counter() - started, 1)}


def _fit_for(model, vary: Sequence[str], params: Mapping[str, Any], *, optimizer: str, cache_root: Path | None,
             say: Callable[[str], None], measure_fn: Callable | None, load_timeout: float | None) -> dict[str, Any]:
    """:func:`_full_fit`'s answer, from the index when it holds the fit (NOTE [ advise without the model
    file ]), else fitted or read from the cache and indexed; ``vary`` ``("micro_batches", ...)`` fits
    the micro-batch model (NOTE [ the micro-batch model ])."""
    index = _index_path(model, vary, optimizer, cache_root)
    fit = _indexed_fit(index, optimizer, params)
    if fit is None:
        from .run import load_model_bounded  # deferred: torch line

        load_model_bounded(model, load_timeout)
        fit = _full_fit(model, vary, optimizer, params, cache_root, say, measure_fn)
        _write_index(index, model, Path(fit["path"]).parent, fit["kinds"])
    return fit


def _held_sizes(decl: Declaration, specs: Mapping[str, Any], params: Mapping[str, int]) -> dict[str, int]:
    """The values of the varied sizes after the first: ``params``' (parsed by ``specs``, the sizes'
    :class:`~memlab.core.params.Param`), else their defaults.

    Raises:
        AdviceError: a size of ``params`` that is not one of them.
    """
    others = decl.sizes[1:]
    unknown = sorted(set(params) - set(others))
    if unknown:
        raise AdviceError(f"--param {unknown[0]} is not a size held while {decl.sizes[0]} varies; valid: "
                          f"{', '.join(others) or 'none (vary batch,seq to give seq)'}")
    return {s: specs[s].parse(s, str(params[s])) if s in params else specs[s].default for s in others}


def _full_fit(model, vary, optimizer, params, cache_root, say, measure_fn) -> dict[str, Any]:
    """The model file imported, its declaration, its fit (cached or fitted now) and the kinds of its
    techniques: ``decl``, ``fam``, ``path``, ``cached``, ``held``, ``kinds``, ``model_file``."""
    parts = MICRO_TRACED if tuple(vary)[:1] == (MICRO_BATCHES,) else 1
    decl = micro_declaration(model, vary[1:]) if parts > 1 else model_declaration(model, vary)
    held = _held_sizes(decl, get_technique(decl.entries[0].technique).all_params(), params)
    fam, path, cached = fitted_family(model, decl, optimizer, cache_root=cache_root, say=say, measure_fn=measure_fn,
                                      accumulate=parts)
    kinds = {e["technique"]: get_technique(e["technique"]).kind for e in fam["entries"]}
    return {"decl": decl, "fam": fam, "path": path, "cached": cached, "held": held, "kinds": kinds,
            "model_file": load_model_path(model)}


def _indexed_fit(index: Path | None, optimizer: str, params: Mapping[str, int]) -> dict[str, Any] | None:
    """:func:`_full_fit`'s answer from the index entry at ``index`` without importing the model file
    (NOTE [ advise without the model file ]); None when there is no valid entry or fit."""
    entry = _read_index(index) if index is not None else None
    if entry is None:
        return None
    folder = Path(entry["folder"])
    try:
        families = load_models(optimizer, folder)["families"]
        fam = next(iter(families.values()))
        decl = as_declaration(fam)
        kinds = {e["technique"]: entry["kinds"][e["technique"]] for e in fam["entries"]}
    except (ValueError, KeyError, StopIteration):
        return None
    specs = {s: Param(v["default"], low=v["low"], high=v["high"], doc=v["doc"]) for s, v in fam["sizes"].items()}
    return {"decl": decl, "fam": fam, "path": models_path(optimizer, folder), "cached": True,
            "held": _held_sizes(decl, specs, params), "kinds": kinds, "model_file": entry["model_file"]}


def _answers(decl: Declaration, fam: Mapping[str, Any], kinds: Mapping[str, str], held: Mapping[str, int],
             budget_bytes: int, device: str) -> tuple[list[dict], list[dict]]:
    """``(answers, cannot_fit)`` of :func:`advise_model`: per entry of ``fam``, the largest size fitting
    ``budget_bytes`` (bytes) with its prediction, or what one sample needs."""
    size = decl.sizes[0]

    def need(entry, n):
        total = predict(decl, entry, {**held, size: n})["total_peak_bytes"]
        return total if device == "cpu" else cuda_need(total)

    answers, cannot = [], []
    for entry in fam["entries"]:
        kind = kinds[entry["technique"]]
        n = largest_fitting(lambda v: need(entry, v), budget_bytes) if entry.get("recommendable") else None
        if n is None:
            cannot.append({"technique": entry["technique"], "kind": kind, "label": entry["label"],
                           "recommendable": entry.get("recommendable", False),
                           "need_at_1_bytes": need(entry, 1)})
            continue
        p = {**held, size: n}
        pred = predict(decl, entry, p)
        answers.append({"technique": entry["technique"], "kind": kind, "label": entry["label"], "size": n,
                        "params": p, "knobs": {}, "chunks": 1, "total_peak_bytes": pred["total_peak_bytes"],
                        "peak_by_category_bytes": pred["peak_by_category_bytes"], "need_bytes": need(entry, n),
                        "headroom_bytes": budget_bytes - need(entry, n), "fits": True,
                        "baseline": entry.get("baseline") is True,
                        **time_fields(decl, {**entry, "technique": kind}, p, device, 1, fam.get("dtype", "float32")),
                        "error_bound": error_bound(entry), "bounded": bounded_reading(entry),
                        "validated_max": entry["validated_range"].get(size, [0, 0])[1]})
    return answers, cannot


def micro_declaration(model, others: Sequence[str] = ()) -> Declaration:
    """The declaration of the micro-batch model (NOTE [ the micro-batch model ]): the model file's
    (:func:`model_declaration` varying ``batch`` and ``others``), its ``batch`` read as the micro-batch
    size of a step of :data:`MICRO_TRACED` micro-batches.

    Raises:
        AdviceError: as :func:`model_declaration`, or a declaration with a loop (a knob's chunks).
    """
    decl = model_declaration(model, ("batch", *others))
    if decl.loop.kind != "none":
        raise AdviceError(f"--vary {MICRO_BATCHES} models a step without a loop; {decl.declared_by} declares "
                          f"a {decl.loop.kind} loop: give --vary batch")
    return dataclasses.replace(decl, declared_by=f"{decl.declared_by} (batch: the micro-batch size at "
                                                 f"accumulate={MICRO_TRACED})")


def predict_micro(whole: Mapping[str, Any], micro: Mapping[str, Any], params: Mapping[str, int],
                  parts: int) -> dict[str, Any]:
    """The predicted peak (bytes, total and by category) of a step of ``params["batch"]`` as ``parts``
    micro-batches (NOTE [ the micro-batch model ]).

    Args:
        whole: ``{"decl", "entry"}`` of the batch model (``parts`` 1), or None where it has no entry.
        micro: ``{"decl", "entry"}`` of the micro-batch model (``parts`` > 1).

    Raises:
        ValueError: ``parts`` does not divide the batch (valid: its divisors), or an inputs polynomial
            that is no whole number of bytes at the whole batch.
    """
    batch = int(params["batch"])
    if parts < 1 or batch % parts:
        raise ValueError(f"micro_batches={parts} does not split batch={batch}; valid: a divisor of {batch}")
    if parts == 1:
        return dict(predict(whole["decl"], whole["entry"], params))
    at = {**params, "batch": batch // parts}
    pred = predict(micro["decl"], micro["entry"], at)
    cls = next(c for c in micro["entry"]["classes"] if c.get("k") == pred["k"])
    piece = max(cls["pieces"], key=lambda pc: sum(eval_poly(q, at) for q in pc.values()))  # predict's peak
    inputs = eval_poly(piece.get("inputs", {}), {**at, "batch": Fraction(batch, MICRO_TRACED)})
    if inputs.denominator != 1:
        raise ValueError(f"the inputs of batch={batch} come to {inputs} bytes, no whole number: the micro-batch "
                         f"model's inputs are no polynomial of the batch")
    grow = int(inputs) - pred["peak_by_category_bytes"]["inputs"]
    cats = dict(pred["peak_by_category_bytes"], inputs=int(inputs))
    return {**pred, "total_peak_bytes": pred["total_peak_bytes"] + grow, "peak_by_category_bytes": cats}


def advise_micro(model, budget_bytes: int, *, vary: Sequence[str], params: Mapping[str, Any], device: str,
                 started: float, **fitting) -> dict[str, Any]:
    """:func:`advise_model` for ``--vary micro_batches``: per technique the fewest micro-batches K (a
    divisor of ``params["batch"]``) whose predicted need fits ``budget_bytes`` (bytes); the answers as
    :func:`advise_model`'s, ``size`` K, ``micro_batch`` B/K, ordered by K, then by predicted time.

    Without ``--param batch`` the question is the other one: :func:`advise_micro_largest`.

    Raises:
        AdviceError: a ``--param batch`` outside 1..MAX_SIZE; nothing fits at K = B.
    """
    rest = {k: v for k, v in params.items() if k != "batch"}
    raw = params.get("batch")
    if raw is None:
        return advise_micro_largest(model, budget_bytes, vary=vary, rest=rest, device=device, started=started,
                                    **fitting)
    if not str(raw).isdigit() or not 1 <= int(raw) <= MAX_SIZE:
        raise AdviceError(f"--vary {MICRO_BATCHES} needs --param batch=B, the batch split into micro-batches "
                          f"(got {raw!r}); valid: a whole number from 1 to {MAX_SIZE}")
    batch = int(raw)
    whole = _fit_for(model, ("batch", *vary[1:]), rest, **fitting)
    micro = _fit_for(model, tuple(vary), rest, **fitting)
    answers, cannot = _micro_answers(whole, micro, batch, budget_bytes, device)
    if not answers:
        raise AdviceError(f"no technique of {Path(micro['model_file']).name} fits {fmt_bytes(budget_bytes)} at "
                          f"batch={batch} in {batch} micro-batches of 1 ({fitting['optimizer']}, {device}); the "
                          f"smallest predicted need is {fmt_bytes(min(c['need_at_1_bytes'] for c in cannot))}")
    answers.sort(key=lambda c: (c["size"], not c["baseline"], c["relative_step_time"] or float("inf")))
    answers = [dict(c, rank=i + 1) for i, c in enumerate(answers)]
    return {"model_file": micro["model_file"], "family": micro["decl"].name, "vary": MICRO_BATCHES, "batch": batch,
            "held": micro["held"], "budget_bytes": budget_bytes, "optimizer": fitting["optimizer"],
            "device": device, "models": f"{whole['path']}, {micro['path']}",
            "cached": whole["cached"] and micro["cached"], "declared_by": micro["decl"].declared_by,
            "answers": answers, "fits": answers, "cannot_fit": cannot,
            "not_modelled": micro["fam"].get("not_modelled", []), "seconds": round(time.perf_counter() - started, 1)}


#: ``--vary micro_batches`` without ``--param batch``: the micro-batch counts the largest batch is given for
MICRO_COUNTS = (1, 2, 4, 8)


def _largest_fitting(need: Callable[[int], int], budget_bytes: int, top: int) -> int:
    """The largest m in 1..``top`` with ``need(m)`` <= ``budget_bytes`` (``need`` rising in m), 0 if none."""
    if need(1) > budget_bytes:
        return 0
    low, high = 1, 2
    while high <= top and need(high) <= budget_bytes:
        low, high = high, 2 * high
    high = min(high, top + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if need(mid) <= budget_bytes else (low, mid)
    return low


def advise_micro_largest(model, budget_bytes: int, *, vary: Sequence[str], rest: Mapping[str, Any], device: str,
                         started: float, **fitting) -> dict[str, Any]:
    """``--vary micro_batches`` without a batch: per technique and K in :data:`MICRO_COUNTS`, the largest
    batch B = K m (m the micro-batch size) whose predicted need fits ``budget_bytes`` (bytes), from the same
    two models as :func:`advise_micro` (NOTE [ the micro-batch model ]); ordered by K, then by B
    (largest first), then by predicted time.  ``batch`` None in the answer; each answer's ``size`` is K.

    Raises:
        AdviceError: nothing fits at K = 8 and a micro-batch of 1.
    """
    whole = _fit_for(model, ("batch", *vary[1:]), rest, **fitting)
    micro = _fit_for(model, tuple(vary), rest, **fitting)
    answers = []
    for entry, models in _micro_models(whole, micro):
        for parts in MICRO_COUNTS:
            if not _micro_tried(models, parts):
                continue

            def need(m: int, parts: int = parts) -> tuple[int, dict]:
                return _micro_need(models, {**micro["held"], "batch": parts * m}, parts, device)

            m = _largest_fitting(lambda m: need(m)[0], budget_bytes, MAX_SIZE // parts)
            if m:
                answers.append(_micro_row(micro, models, parts, m, *need(m), budget_bytes, device))
    return _largest_answer(model, budget_bytes, whole, micro, answers, device, started, fitting["optimizer"])


def _largest_answer(model, budget_bytes, whole, micro, answers, device, started, optimizer) -> dict[str, Any]:
    """The answer document of :func:`advise_micro_largest` (ranks set), or AdviceError where none fits."""
    if not answers:
        raise AdviceError(f"no technique of {Path(micro['model_file']).name} fits {fmt_bytes(budget_bytes)} at a "
                          f"micro-batch of 1 in up to {MICRO_COUNTS[-1]} micro-batches ({optimizer}, {device})")
    answers.sort(key=lambda c: (c["size"], -c["params"]["batch"], c["relative_step_time"] or float("inf")))
    answers = [dict(c, rank=i + 1) for i, c in enumerate(answers)]
    return {"model_file": micro["model_file"], "family": micro["decl"].name, "vary": MICRO_BATCHES, "batch": None,
            "held": micro["held"], "budget_bytes": budget_bytes, "optimizer": optimizer, "device": device,
            "models": f"{whole['path']}, {micro['path']}", "cached": whole["cached"] and micro["cached"],
            "declared_by": micro["decl"].declared_by, "answers": answers, "fits": answers, "cannot_fit": [],
            "not_modelled": micro["fam"].get("not_modelled", []), "seconds": round(time.perf_counter() - started, 1)}


def _micro_answers(whole: Mapping[str, Any], micro: Mapping[str, Any], batch: int, budget_bytes: int,
                   device: str) -> tuple[list[dict], list[dict]]:
    """``(answers, cannot_fit)`` of :func:`advise_micro`: per entry of the micro-batch model, the fewest
    micro-batches of ``batch`` fitting ``budget_bytes`` (bytes), or what ``batch`` micro-batches of 1 need."""
    counts = [k for k in range(1, batch + 1) if batch % k == 0]
    answers, cannot = [], []
    for entry, models in _micro_models(whole, micro):
        tried = [k for k in counts if _micro_tried(models, k)]

        def need(k: int) -> tuple[int, dict]:
            return _micro_need(models, {**micro["held"], "batch": batch}, k, device)

        parts = next((k for k in tried if need(k)[0] <= budget_bytes), None)
        if parts is None:
            cannot.append({"technique": entry["technique"], "kind": micro["kinds"][entry["technique"]],
                           "label": entry["label"], "recommendable": bool(tried), "need_at_1_bytes": need(batch)[0]})
            continue
        answers.append(_micro_row(micro, models, parts, batch // parts, *need(parts), budget_bytes, device))
    return answers, cannot


def _micro_models(whole: Mapping[str, Any], micro: Mapping[str, Any]):
    """``(entry, models)`` per entry of the micro-batch fit ``micro``: ``models["micro"]`` that entry,
    ``models["whole"]`` the same technique's entry of the batch fit ``whole`` (None unless recommendable),
    each with its declaration (what :func:`predict_micro` reads)."""
    ones = {e["technique"]: e for e in whole["fam"]["entries"] if e.get("recommendable")}
    for entry in micro["fam"]["entries"]:
        yield entry, {"whole": {"decl": whole["decl"], "entry": ones.get(entry["technique"])},
                      "micro": {"decl": micro["decl"], "entry": entry}}


def _micro_tried(models: Mapping[str, Any], parts: int) -> bool:
    """Whether ``parts`` micro-batches are answered from ``models``: K = 1 by the batch model's entry
    (a recommendable one), K >= 2 by a recommendable entry of the micro-batch model."""
    return bool(models["whole"]["entry"] if parts == 1 else models["micro"]["entry"].get("recommendable"))


def _micro_need(models: Mapping[str, Any], params: Mapping[str, int], parts: int, device: str) -> tuple[int, dict]:
    """``(need, prediction)`` of ``params["batch"]`` as ``parts`` micro-batches (:func:`predict_micro`):
    the need the budget is held to in bytes (the exact peak on CPU, :func:`cuda_need` of it on CUDA)."""
    pred = predict_micro(models["whole"], models["micro"], params, parts)
    return (pred["total_peak_bytes"] if device == "cpu" else cuda_need(pred["total_peak_bytes"])), pred


def _micro_row(micro: Mapping[str, Any], models: Mapping[str, Any], parts: int, micro_batch: int, need_bytes: int,
               pred: Mapping[str, Any], budget_bytes: int, device: str) -> dict[str, Any]:
    """One answer of ``--vary micro_batches``: ``models``' technique as ``parts`` micro-batches of
    ``micro_batch`` fitting ``budget_bytes`` (bytes), with its prediction ``pred`` and need; the time is
    the batch model's at K = 1, the micro-batch model's at K >= 2, both at the micro-batch size."""
    entry, held = models["micro"]["entry"], micro["held"]
    kind = micro["kinds"][entry["technique"]]
    timed = models["whole" if parts == 1 else "micro"]
    return {"technique": entry["technique"], "kind": kind, "label": entry["label"], "size": parts,
            "micro_batch": micro_batch, "params": {**held, "batch": parts * micro_batch, "accumulate": parts},
            "knobs": {}, "chunks": 1, "total_peak_bytes": pred["total_peak_bytes"],
            "peak_by_category_bytes": pred["peak_by_category_bytes"], "need_bytes": need_bytes,
            "headroom_bytes": budget_bytes - need_bytes, "fits": True, "baseline": entry.get("baseline") is True,
            **time_fields(timed["decl"], {**timed["entry"], "technique": kind}, {**held, "batch": micro_batch},
                          device, 1, micro["fam"].get("dtype", "float32")),
            "error_bound": error_bound(timed["entry"]), "bounded": bounded_reading(timed["entry"]),
            "validated_max": 0}


def format_model_advice(a: Mapping[str, Any]) -> str:
    """The answers as text: one row per technique, its categories below it."""
    need = "peak" if a["device"] == "cpu" else "CUDA need"
    held = "".join(f", {k}={v}" for k, v in a["held"].items())
    micro = a["vary"] == MICRO_BATCHES
    asked = (f"largest batch as K {MICRO_BATCHES} (K in {', '.join(map(str, MICRO_COUNTS))}; give --param batch=B for "
             f"the fewest K of B)" if micro and a["batch"] is None else
             f"fewest {MICRO_BATCHES} of batch={a['batch']}" if micro else f"largest {a['vary']}")
    lines = [f"memlab advise: {Path(a['model_file']).name} ({a['family']}), {asked} in "
             f"{fmt_bytes(a['budget_bytes'])}{held}, optimizer {a['optimizer']}, device {a['device']}",
             f"models: {a['models']} ({'cached' if a['cached'] else 'fitted now'}; exact CPU bytes from traces; "
             f"{a['seconds']} s)"]
    if a["device"] == "cuda":
        lines.append("CUDA need = exact peak x 1.10 + 64 MiB caching-allocator margin + cuBLAS workspaces "
                     "(a stated margin); the CUDA context is not included")
    rows = [("#", "technique", a["vary"], need, "time" if a["device"] == "cpu" else "relative time measured on CPU",
             "time error", "bytes error")]
    for c in a["answers"]:
        size = f">= {c['size']}" if c["size"] >= MAX_SIZE else str(c["size"])  # the search stops at MAX_SIZE
        size = f"{c['size']} x {c['micro_batch']} = {c['size'] * c['micro_batch']}" if micro else size
        rows.append((str(c.get("rank") or "-"), c["kind"], size, fmt_bytes(c["need_bytes"]), time_cell(c),
                     (c.get("time_band") or {}).get("text", "-"), c["error_bound"]["text"]))
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    lines.append("")
    for j, r in enumerate(rows):
        lines.append("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
        if j:
            lines.append(" " * (widths[0] + 2) + format_categories(a["answers"][j - 1]))
            if a["answers"][j - 1].get("bounded"):
                lines.append(" " * (widths[0] + 2) + "bounds: " + a["answers"][j - 1]["bounded"]["text"])
    for c in a["cannot_fit"]:
        why = "" if c["recommendable"] else " (not recommended: a held-out measurement was not ok)"
        at = f"{a['batch']} micro-batches of 1" if micro else f"{a['vary']}=1"
        lines.append(f"  {c['kind']}: does not fit at {at} (needs {fmt_bytes(c['need_at_1_bytes'])}){why}")
    for c in a.get("not_modelled", []):
        lines.append(f"  {c['label']}: not modelled: {c['reason']}")
    if micro:
        lines += ["", f"{MICRO_BATCHES}: K micro-batches x B/K each, accumulated into .grad (--accumulate K); "
                      f"K >= 2 from the model of {MICRO_TRACED} micro-batches at B/K plus the whole batch's inputs, "
                      "K = 1 the batch model; time relative to plain at the same K (NOTE [ the micro-batch model ])"]
    if any(c["size"] >= MAX_SIZE for c in a["answers"]) and not micro:
        lines += ["", f">= {MAX_SIZE}: the budget holds more than the largest {a['vary']} searched"]
    beyond = [c for c in a["answers"] if c["validated_max"] and c["size"] > c["validated_max"]]
    if beyond:
        lines += ["", f"{a['vary']} beyond the measured range (<= {beyond[0]['validated_max']}) is predicted by the "
                      f"exact model of the traced allocations; --verify measures #1"]
    timed = sorted({p for c in a["answers"] for p in [(c.get("time_band") or {}).get("points")] if p})
    lines.append("time: relative step time (technique / plain, thread CPU time at one thread), fitted as r + c / "
                 f"{'batch' if micro else a['vary']} by least squares through {'/'.join(map(str, timed)) or 'no'} measured point(s) per "
                 "technique; its error is the fit's largest residual, unknown where two points fix both coefficients; "
                 "floored at the smallest measured ratio below 1; ordered plain first, then by predicted time"
                 + ("" if a["device"] == "cpu" else "; measured on CPU: a technique that changes the dtype is not "
                    "ranked by it"))
    return "\n".join(lines)
