"""Shared machinery of memlab's asv benchmarks: parameter lists, skips, failures, one measured step.

asv takes the benchmarks from the working tree but imports them in an environment holding memlab
as it was at the commit being measured.  So everything here is written against the *oldest* public
API it may meet (``memlab.list_techniques``, ``memlab.get_technique``,
``memlab.measure(..., isolate=False)``, all present since the first commit).

NOTE [ skipped or failed ]
asv records a combination whose ``setup`` raises :class:`NotImplementedError` as *skipped* (``n/a``,
NaN in the results file) and one that raises anything else as *failed* (``failed``, null; the
traceback is shown by ``asv run -e``; ``asv compare`` marks a value that became a failure with
``!``).  The two must not be confused:

- skipped: the combination does not exist in the memlab version being measured: the technique
  is not registered there, belongs to another workload, lacks a workload parameter the class
  sweeps, a swept parameter does not apply to it, or the technique says it cannot run here
  (``TechniqueUnavailable``: an optional peer library missing, a CPU-only technique on CUDA);
  ``track_peak_reserved`` on CPU (NOTE [ CPU resident is not a regression metric ]).
- failed: everything else.  ``import torch``, ``import memlab`` or the technique registry
  failing (recorded once, when asv's fork server imports this module, and raised again by every
  combination's ``setup``: a partly imported registry must not make techniques look absent), a
  ``cuda`` combination where torch cannot use CUDA, an invalid parameter value (``ValueError``
  from ``memlab.measurement.prepare``: the grid is valid in the working tree, so a version rejecting it
  changed or broke something), building the problem, the warm-up step or the measurement raising,
  a measurement whose status is not ``ok``.

NOTE [ params must not depend on the installed memlab ]
asv discovers a benchmark's ``params`` once, then runs combination *k* by index in a fresh process
of each commit's environment.  If the lists were built from memlab's registry, a commit with fewer
techniques would shift the indices and file one technique's numbers under another's name.  The
lists are therefore static per family, plus the technique names found in the ``MEMLAB_PLUGINS``
files by reading their source (no import), which does not depend on the memlab version either.
Whether a name exists, and belongs to the benchmark's workload, is decided in ``setup``.

NOTE [ device ]
The ``device`` values depend on the host, never on memlab: ``MEMLAB_ASV_DEVICES`` (a comma-separated
subset of ``cpu,cuda``) when set, otherwise ``cpu`` plus ``cuda`` where the host shows an NVIDIA
GPU (``/proc/driver/nvidia/gpus`` or ``/dev/nvidiaN``, hidden by ``CUDA_VISIBLE_DEVICES=""``).  So a
CPU host's tables hold no ``cuda`` column of ``n/a``, while the parameter *names* and every other
value stay the same on every host: asv stores each results file's own parameter values and
matches them by value (``asv compare`` and memlab's history page read CPU and GPU hosts' files
side by side; ``asv publish`` shows the values ``benchmarks.json`` lists, the devices of the last
run).  The probe does not
ask torch: ``torch.cuda.is_available()`` initialises the CUDA driver unless NVML is used, and this
module is imported in asv's fork server, whose forked children could then not use CUDA.  Nothing
here touches CUDA at import time; a ``cuda`` combination checks ``torch.cuda.is_available()`` in
its own (forked) process and fails if torch cannot use the GPU.

NOTE [ CPU resident is not a regression metric ]
``track_peak_reserved`` is measured on CUDA only.  On CPU memlab's ``peak_reserved_bytes`` is the
process's resident high-water mark over one step: page-granular, and moved by glibc's heap
trimming and by what earlier steps left mapped, it changed up to 2x between commits with no
change on its path (checkpoint_block depth 4, batch 128: 1,302,528 B at 8a7601e, 2,662,400 B at
581aeb9).  A benchmark that changes without a code change is noise in ``asv compare``; CPU
resident stays in memlab's sweeps and site, labelled there.  ``track_peak_allocated`` (exact on CPU) is the CPU memory regression metric.

NOTE [ timing ]
asv re-runs ``setup`` before every timing sample, so a sample is one training step right after the
warm-up step of a freshly built problem: ``number = 1``.  ``warmup_time`` adds one discarded
sample per process; ``repeat = (3, 6, 1.0)`` takes 3 to 6 samples per round (no new one after 1 s
once 3 are taken) and ``rounds = 2`` measures every combination in two separate processes:
6 to 12 samples per commit, enough for asv's Mann-Whitney test (p < 0.002, used from 6 + 6
samples on) to apply on top of its 10% factor.  ``asv continuous`` and a multi-commit ``asv run``
interleave the rounds over the commits (A B B A), so a slow minute hits both sides.
``min_run_count = 4`` (the warm-up call plus 3 samples) only restates that floor.
The step runs at ONE intra-op thread (``torch.set_num_threads(1)`` in its setup; asv runs each
benchmark in its own process), for the reason told in NOTE [ track_relative_step_time at one
thread ]: at the default two threads on 2 cores, ``asv continuous`` between 55accfd and 38b1fdf (a
README-only change) on an idle machine still flagged ``time_step`` in 1 and then 2 of 16
combinations (x0.83; x1.24 and x1.22) where the one-thread relative time flagged none.  So
``time_step`` is the seconds of a step on one core: a regression signal, not the throughput a
user's machine gets (memlab's sweeps record that, at the default threads).  ``version = "2"`` on
``time_step`` started its history afresh: the two-thread seconds are not comparable.
``version = "3"``: the step's seconds are the CPU time of the benchmark's thread
(``timer = time.thread_time``; at one thread a CPU step runs on it, autograd's backward included),
which other jobs on the machine do not move (NOTE [ CPU time and load ] in
memlab/measurement/timing.py), and the step is timed under glibc's default heap: asv's environment
sets ``MALLOC_MMAP_THRESHOLD_`` for the resident figure, so the setup lifts glibc's thresholds to
the ceiling of its own dynamic adjustment for the timed process (:func:`_glibc_default_heap`; the
resident setting made ``tt_factorized``'s step 5x slower).  ``time_step`` keeps that ceiling's 64 MiB
trim threshold, under which its history was measured; memlab's own timed phase, behind
``track_relative_step_time``, turns trimming off from 0a9d45d on (NOTE [ the timing heap ] in
memlab/measurement/resident.py), so a step there no longer returns the top of its heap to the kernel
and faults it in again.  On CUDA the thread waits for the
device in ``torch.cuda.synchronize()``, spinning by default, so its CPU time follows the wall clock.

NOTE [ track_relative_step_time at one thread ]
``track_relative_step_time`` is memlab's ``Measurement.relative_step_time``: the median over at least
``RELATIVE_STEPS`` training steps of each step's time over the plain reference steps timed just
before and after it in the same process (dimensionless; 1.0 = as fast as the workload's plain
reference).  It is measured with ONE intra-op thread (``torch.set_num_threads(1)`` around the
measurement, restored after; on CUDA the thread count does not matter).  The first version here ran
with the machine's default threads and was taken out: ``asv continuous -b ChainedMatmul`` between
3b5aa65 and 515b07e (a README-only change), at load 2.0-5.5 on 2 cores, flagged 8 of 16
combinations (ratios 0.24 to 1.86).  The cause: with two OpenMP threads on two busy cores every
parallel region waits at a barrier for a descheduled thread, so a technique with many small GEMMs
slows more than its one-GEMM reference (NOTE [ threads and load ] in memlab.measurement.inprocess:
slice_loop's relative time x1.35 under two busy loops at two threads, x1.06 at one).  A ``track_``
value is one number per commit (asv applies only its 10% factor to it), so it must be load-robust
by construction: at one thread it is.  Its own measurement (not ``track_peak_allocated``'s, whose
bytes stay at the default threads) is cached like the memory figures.  A commit whose memlab has no
``relative_step_time`` skips it.

NOTE [ the relative time as samples ]
A ``track_`` value is one number per commit, so ``asv continuous``/``asv compare`` could only apply
their factor to it (1.1 by default): under load a README-only pair was flagged like a real +33%
(issue 47).  ``track_relative_step_time`` therefore returns ``{"samples": [...], "number": 1}``, the
per-round ratios of memlab's timed phase (``extra["relative_step_ratios"]``: each technique step over
the mean of the two baseline steps around it; their median is ``relative_step_time``), and asv 0.6.6
takes them as samples whatever the benchmark's type: ``asv/runner.py``
(``_run_benchmark_single_param``) reads any result that is a dict holding ``samples`` and ``number``
as a timing result, and ``asv/results.py`` (``add_result``) stores the median with
``compute_stats``'s 99% interval and quartiles (the samples too under ``--record-samples``).
``asv/commands/compare.py`` (``_is_result_better``, used by ``compare`` and ``continuous``) then
flags a change only when ``asv/_stats.py``'s ``is_different`` finds the samples different
(Mann-Whitney, p < 0.002; without samples the 99% intervals must not overlap) **and** the factor is
exceeded: with samples asv flags at most what the factor alone flagged.  The unit stays ``ratio``
and the figure is the same median, so the history stays one series (no version bump); a commit
whose memlab records no ratios gives the one number as before, compared by the factor alone.
Limits: the samples are the rounds of ONE process per commit (asv runs a ``track_`` once:
``rounds`` is read for ``time_`` benchmarks only, ``asv_runner/benchmarks/time.py``), so a drift
slower than a process (NOTE [ the noise floor of a memory-bound step ] in
memlab/measurement/timing.py) is not in them; whether they tell a README-only pair from a +30%
commit under co-runners is for issue 47's co-runner comparison to measure.  The exact figures keep
their zero thresholds (NOTE [ exact figures ] in ``asv_host.py``).
Evidence: docs/asv.md#the-relative-time-as-samples

NOTE [ only time_step builds a step in setup ]
The class ``setup`` resolves and validates the configuration only (``prepare``: no tensors); the
problem and its warm-up step are built by ``time_step``'s own setup (asv runs a benchmark function's
``setup`` attribute after the class's, with the parameters but without the instance, so the class
setup leaves its instance in ``_CURRENT``: one asv process runs one benchmark).  The ``track_``
benchmarks build their own problem inside ``memlab.measure``: building one more and stepping it
before, as the suite did until December 2026, cost 10-20% of each memory combination's time (0.9 s
of 9.7 s for slice_loop, 8.8 s of 47.9 s for reversible at depth 16, at load 10 on 2 cores) and
changed no figure (the warm-up problem was freed before the measurement).

NOTE [ warm the fork server ]
Everything a combination would import lazily is imported here, once, in the fork server: the first
``torch.optim`` optimizer built in a process imports ``torch._dynamo`` (1.2-1.6 s measured), which
every forked combination would otherwise pay again.  Building an SGD optimizer on a CPU tensor
does it without touching CUDA.  Then ``gc.freeze()`` moves everything imported so far out of the
garbage collector's reach: ``memlab.measure`` calls ``gc.collect()`` around its steps, which in a
forked child would otherwise walk torch's whole object graph each time (0.8 s per call measured at
load 10 on 2 cores; memlab's own fork server freezes the same way).  No figure depends on it.

NOTE [ step options ]
A grid may sweep the training step's options ``accumulate`` (micro-batches accumulated into ``.grad``
before one optimizer step) and ``grads`` (``none`` or ``zero`` between steps): :data:`STEP_OPTIONS`.
They are the setting's, not the technique's: they go to ``memlab.measure`` as setting keywords (a
technique never sees them), they are part of the cache key (two values are two measurements), and
``time_step`` skips any value but the default (``n/a``): its step is built by ``make_step``, which
takes no setting, so it could only time the plain step under another name; ``track_relative_step_time``
times the option, against the family baseline stepped the same way.  A memlab version whose
``measure`` does not know an option (before issue 44) skips its non-default values and measures the
default as it always did (nothing is passed: the call is the one older commits saw).
"""
from __future__ import annotations

import abc
import ast
import dataclasses
import gc
import inspect
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

#: what failed while this module was imported, by step; see NOTE [ skipped or failed ]
_IMPORT_FAILURES: dict[str, BaseException] = {}

try:  # imported once in asv's fork server, not in every benchmark process
    import torch
except Exception as exc:  # pragma: no cover - exercised by tests in a subprocess
    torch = None
    _IMPORT_FAILURES["import torch"] = exc
try:
    import memlab
except Exception as exc:  # pragma: no cover - exercised by tests in a subprocess
    memlab = None
    _IMPORT_FAILURES["import memlab"] = exc
if memlab is not None:
    try:  # import every technique module (and plug-in) once, before asv forks; CPU only
        memlab.list_techniques()
    except Exception as exc:  # pragma: no cover - exercised by tests in a subprocess
        _IMPORT_FAILURES["memlab.list_techniques()"] = exc
if torch is not None:
    try:  # see NOTE [ warm the fork server ]; an optimisation only: a broken optimizer fails in setup
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)
    except Exception:  # pragma: no cover
        pass
gc.freeze()  # NOTE [ warm the fork server ]: forked combinations' gc.collect() skips torch's objects

from . import machine_guard  # noqa: E402  (after the freeze: nothing of it need be frozen)

try:  # NOTE [ the guard inside the benchmarks ] in machine_guard.py: once per fork server
    _MACHINE_MISMATCH = machine_guard.check()
except Exception as exc:  # pragma: no cover - a fault of the guard itself fails every benchmark, visibly
    _MACHINE_MISMATCH = f"the machine guard (benchmarks/machine_guard.py) raised {type(exc).__name__}: {exc}"

__all__ = [
    "DEVICES", "DEVICES_ENV", "DTYPE", "MODE", "BenchmarkFailure", "devices_from_env", "plugin_techniques",
    "plugin_workloads",
    "technique_list", "class_params", "MemlabBenchmark", "ComplexityBenchmark", "STEP_OPTIONS",
    "step_kwargs",
]

DEVICES_ENV = "MEMLAB_ASV_DEVICES"
#: technique steps (each between two reference steps) behind one track_relative_step_time value
RELATIVE_STEPS = 11
KNOWN_DEVICES = ("cpu", "cuda")
_NVIDIA_PROC = "/proc/driver/nvidia/gpus"
_NVIDIA_DEV = re.compile(r"nvidia\d+")


def _measurement_module(sub: str):
    """``memlab.measurement<sub>``, or ``memlab.measure<sub>`` in versions before the package's rename.

    asv runs these benchmarks against old commits too, where the measurement layer is the package
    ``memlab.measure``; a module that exists but fails to import is raised as it is.
    """
    import importlib

    try:
        return importlib.import_module("memlab.measurement" + sub)
    except ModuleNotFoundError as exc:
        if exc.name not in ("memlab.measurement", "memlab.measurement" + sub):
            raise
    return importlib.import_module("memlab.measure" + sub)


class BenchmarkFailure(RuntimeError):
    """The code or environment being measured is broken: asv records the combination as failed."""


def host_has_nvidia_gpu(environ: Mapping[str, str] | None = None, proc_dir: str = _NVIDIA_PROC,
                        dev_dir: str = "/dev") -> bool:
    """Whether the host shows an NVIDIA GPU, without loading CUDA (see NOTE [ device ])."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    try:
        if any(Path(proc_dir).iterdir()):
            return True
    except OSError:
        pass
    try:
        return any(_NVIDIA_DEV.fullmatch(p.name) for p in Path(dev_dir).iterdir())
    except OSError:
        return False


def devices_from_env(environ: Mapping[str, str] | None = None, *, gpu: bool | None = None) -> list[str]:
    """The ``device`` parameter values on this host, in the order ``cpu``, ``cuda``.

    ``MEMLAB_ASV_DEVICES`` (e.g. ``cpu`` or ``cpu,cuda``) when set and not empty, otherwise ``cpu``
    plus ``cuda`` when :func:`host_has_nvidia_gpu` (or ``gpu``, for tests).  See NOTE [ device ].

    Raises:
        ValueError: ``MEMLAB_ASV_DEVICES`` names something other than ``cpu`` and ``cuda``.
    """
    environ = os.environ if environ is None else environ
    raw = environ.get(DEVICES_ENV, "")
    if not raw.strip():
        return ["cpu", "cuda"] if (host_has_nvidia_gpu(environ) if gpu is None else gpu) else ["cpu"]
    names = [d.strip().lower() for d in raw.split(",") if d.strip()]
    unknown = sorted(set(names) - set(KNOWN_DEVICES))
    if unknown:
        raise ValueError(f"{DEVICES_ENV}={raw!r} is not valid: unknown device(s) {unknown}; "
                         f"expected a comma-separated subset of {','.join(KNOWN_DEVICES)}, e.g. 'cpu,cuda'")
    return [d for d in KNOWN_DEVICES if d in names]


#: The devices every benchmark sweeps on this host; see NOTE [ device ].
DEVICES = devices_from_env()
DTYPE = "float32"
MODE = "train"
#: the training step's options a grid may sweep, with the value every older measurement had
#: (NOTE [ step options ]): micro-batches accumulated into ``.grad``, gradients between steps
STEP_OPTIONS = {"accumulate": 1, "grads": "none"}

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _snake(name: str) -> str:
    """``ChainedMatmul`` -> ``chained_matmul``, ``TTLinear`` -> ``tt_linear``."""
    return _CAMEL.sub("_", name).lower()


def _keyword(node: ast.ClassDef, key: str) -> str | None:
    for kw in node.keywords:
        if kw.arg == key and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    return None


def _workload_ref(node: ast.ClassDef) -> str | None:
    """The terminal name assigned to ``workload = ...`` in a class body, if it is a plain name."""
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "workload"
                                                for t in stmt.targets):
            value = stmt.value
            if isinstance(value, ast.Name):
                return value.id
            if isinstance(value, ast.Attribute):
                return value.attr
    return None


def _workload_classes(classes: Sequence[ast.ClassDef]) -> dict[str, str]:
    """``{class name: workload name}`` of the classes declared ``class X(..., name="...", family="...")``."""
    return {n.name: _keyword(n, "name") for n in classes if _keyword(n, "name") and _keyword(n, "family")}


def _plugin_paths(environ: Mapping[str, str] | None) -> list[str]:
    environ = os.environ if environ is None else environ
    return [os.path.expanduser(p.strip()) for p in environ.get("MEMLAB_PLUGINS", "").split(os.pathsep) if p.strip()]


def plugin_workloads(environ: Mapping[str, str] | None = None) -> list[str]:
    """Sorted names of the workloads the ``MEMLAB_PLUGINS`` files define (a plug-in family's own),
    read from their source like :func:`plugin_techniques` (NOTE [ params must not depend on the
    installed memlab ]); a file that does not parse defines none."""
    names = set()
    for path in _plugin_paths(environ):
        try:
            tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
        except (OSError, SyntaxError, ValueError):
            continue
        names.update(_workload_classes([n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]).values())
    return sorted(names)


def _plugin_file_techniques(path: str) -> list[tuple[str, str | None]]:
    """``(technique name, workload name or None if unknown)`` for the classes a plug-in defines.

    A class counts as a technique when it is declared ``class X(..., name="...")`` and assigns
    ``workload``; a class declared with ``name=`` and ``family=`` is a workload the file defines.
    """
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    local_workloads = _workload_classes(classes)
    out = []
    for node in classes:
        name, ref = _keyword(node, "name"), _workload_ref(node)
        if name is None or ref is None or node.name in local_workloads:
            continue
        workload = local_workloads.get(ref) or _snake(ref)
        out.append((name, workload))
    return out


def plugin_techniques(workload: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """Sorted names of the techniques for ``workload`` in the ``MEMLAB_PLUGINS`` files.

    Found by reading the files' source, see NOTE [ params must not depend on the installed memlab ].
    A technique whose workload cannot be told from the source is included; ``setup`` skips it for
    the wrong workload.
    """
    names = set()
    for path in _plugin_paths(environ):
        for name, wl in _plugin_file_techniques(path):
            if wl is None or wl == workload:
                names.add(name)
    return sorted(names)


def technique_list(static: Sequence[str], workload: str) -> list[str]:
    """``static`` followed by the plug-in techniques of ``workload`` not already in it."""
    return list(static) + [n for n in plugin_techniques(workload) if n not in static]


def _require_imports() -> None:
    """Raise what failed when this module was imported (NOTE [ skipped or failed ]), or the machine
    guard's line (NOTE [ the guard inside the benchmarks ] in machine_guard.py)."""
    if _MACHINE_MISMATCH:
        raise BenchmarkFailure(_MACHINE_MISMATCH)
    if _IMPORT_FAILURES:
        what, exc = next(iter(_IMPORT_FAILURES.items()))
        raise BenchmarkFailure(f"{what} failed in this environment: {type(exc).__name__}: {exc}") from exc


def _cuda_only(cache_dir, *values) -> None:
    """Per-benchmark asv setup (runs after the class's): skip every device but ``cuda``."""
    if values and values[-1] != "cuda":
        raise NotImplementedError(
            "CPU resident is not a regression metric (NOTE [ CPU resident is not a regression metric ]); "
            "see memlab's sweeps and site")


def _measure_takes(name: str) -> bool:
    """Whether the memlab under test's ``measure`` takes the keyword ``name``: a parameter of its
    own, or, once measure's keywords build a ``memlab.Setting``, a field of it."""
    setting = getattr(memlab, "Setting", None)
    fields = {f.name for f in dataclasses.fields(setting)} if dataclasses.is_dataclass(setting) else set()
    return name in inspect.signature(memlab.measure).parameters or name in fields


def _has_time_budget() -> bool:
    """Whether the memlab under test takes ``time_budget`` (from 36df35b on, with the interleaved
    reference steps behind ``relative_step_time``)."""
    return _measure_takes("time_budget")


def step_kwargs(step: Mapping[str, Any]) -> dict[str, Any]:
    """The ``memlab.measure`` keywords of a combination's swept step options ``step`` (NOTE [ step
    options ]): the values other than :data:`STEP_OPTIONS`' defaults, which are never passed.

    Raises:
        NotImplementedError: (asv: skipped) the memlab under test has no such option and the value
            is not its default.
    """
    out = {}
    for name, value in step.items():
        if value == STEP_OPTIONS[name]:
            continue
        if not _measure_takes(name):
            raise NotImplementedError(f"{name}={value!r}: this memlab version has no {name!r} option "
                                      f"(measured at {name}={STEP_OPTIONS[name]!r} only)")
        out[name] = value
    return out


def _cpu_only(cache_dir, *values) -> None:
    """Per-benchmark asv setup: skip every device but ``cpu`` (on CUDA reserved is measured:
    ``track_peak_reserved``)."""
    if values and values[-1] != "cpu":
        raise NotImplementedError("the CUDA prediction is made from CPU traces; on CUDA see track_peak_reserved")


#: the benchmark instance whose class ``setup`` ran last in this process (one per asv process)
_CURRENT: "MemlabBenchmark | None" = None


def _timing_setup(cache_dir, *values) -> None:
    """``time_step``'s own asv setup (runs after the class's): build the problem and run the warm-up
    step; see NOTE [ only time_step builds a step in setup ]."""
    if _CURRENT is None:  # pragma: no cover - asv always runs the class setup first
        raise BenchmarkFailure("time_step's setup ran before the class setup")
    if _CURRENT.step_options:  # NOTE [ step options ]: make_step builds the plain step only
        raise NotImplementedError(f"time_step times the default step only, not {_CURRENT.step_options}; "
                                  "track_relative_step_time times it")
    _CURRENT._threads_before = torch.get_num_threads()  # restored by teardown (a caller that is not asv)
    torch.set_num_threads(1)  # NOTE [ timing ]: one intra-op thread, as track_relative_step_time
    _CURRENT._heap_lifted = _glibc_default_heap(True)
    _CURRENT._prepare_step()


#: glibc's mallopt parameters and the ceiling of its dynamic mmap threshold on 64-bit (bytes)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _MMAP_CEILING = -1, -3, 32 * 2**20


def _glibc_default_heap(on: bool) -> bool:
    """Lift (``on``) or restore glibc's thresholds when ``MALLOC_MMAP_THRESHOLD_`` is set (NOTE [ timing ]).

    Written here, not taken from memlab: the benchmarks run against old memlab versions too.
    Returns whether anything changed (False without the variable or without glibc's ``mallopt``).
    """
    fixed = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    if fixed is None:
        return False
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt(_M_MMAP_THRESHOLD, _MMAP_CEILING if on else int(fixed))
    mallopt(_M_TRIM_THRESHOLD, 2 * _MMAP_CEILING if on else 128 * 1024)
    return True


class MemlabBenchmark(abc.ABC):
    """Base of the per-workload benchmark classes: one training step of one technique.

    Abstract (``workload`` is an abstract property until a subclass sets it), so asv's discovery,
    which walks every class it finds in every module, does not take the base for a benchmark.

    Subclasses set:
        workload: the registered workload name (``chained_matmul``...).
        params, param_names: first ``technique``, last ``device``; in between, workload or
            technique parameters, or the step options of :data:`STEP_OPTIONS` (``accumulate``,
            ``grads``: setting keywords of ``memlab.measure``, NOTE [ step options ]) (build both
            with :func:`class_params` so they stay aligned).
        workload_params: the names (swept or fixed) that are workload parameters.  One missing
            from the memlab version under test skips the combination: measuring the default
            instead would mislabel it.
        fixed: values held constant to stay within the time budget (workload or technique
            parameters; a technique parameter applies to the techniques that have it).
        ignored_by: ``{param: {technique, ...}}`` for parameters a technique has but whose value
            does not change its memory or time (a TT rank for the dense layer).

    A swept technique parameter that a technique lacks (or ignores) is measured at the first value
    of its list only; the other values are skipped as saying nothing.

    Metrics (NOTE [ skipped or failed ] says when a combination is skipped and when it fails):
        ``track_peak_allocated`` (bytes): peak bytes of live tensors during one training step above
            the step's baseline; exact on CPU, ``max_memory_allocated`` on CUDA.
        ``track_peak_reserved`` (bytes, CUDA only): the caching allocator's reserved bytes above
            the baseline; skipped on CPU, see NOTE [ CPU resident is not a regression metric ].
        ``track_predicted_cuda_reserved`` (bytes, CPU only): the caching allocator's reserved peak
            predicted from the step's exact trace (deterministic).
        ``track_relative_step_time`` (ratio): the step over the plain reference step interleaved
            with it, at one thread: load-robust (NOTE [ track_relative_step_time at one thread ]).
        ``time_step`` (seconds): one training step, timed by asv after the warm-up step that
            ``setup`` runs; see NOTE [ timing ]: raw seconds, which move with the machine's load.
    The three memory ``track_`` figures come from ONE ``memlab.measure(..., isolate=False)`` per
    combination (``track_relative_step_time`` from its own, at one thread): the first of them to run
    stores it in asv's ``setup_cache`` directory (fresh for each commit and environment, deleted by
    asv afterwards), the others read it.
    """

    @property
    @abc.abstractmethod
    def workload(self) -> str:
        """The registered workload name; subclasses set it as a class attribute."""

    workload_params: tuple = ()
    fixed: Mapping[str, Any] = {}
    ignored_by: Mapping[str, set] = {}
    params: list = []
    param_names: list = []
    #: the step options of this combination other than their defaults (NOTE [ step options ])
    step_options: Mapping[str, Any] = {}

    # asv timing, see NOTE [ timing ]
    number = 1
    repeat = (3, 6, 1.0)
    min_run_count = 4
    rounds = 2
    warmup_time = 0.1
    timeout = 300
    #: bump when what is measured changes; otherwise asv versions results by a hash of the code,
    #: and a cosmetic edit would cut the history
    version = "1"

    # -- setup --------------------------------------------------------------------------------
    def setup_cache(self):
        """The directory of this run's measurements (asv's per-run cache dir, the cwd here)."""
        return os.path.abspath(os.getcwd())

    setup_cache.timeout = 300  # a fresh interpreter importing torch: 4-13 s here, more under load

    def setup(self, cache_dir, *values):
        self._step = None
        self.cache_dir = cache_dir
        config = dict(zip(self.param_names, values))
        self.technique_name = config.pop("technique")
        self.device = config.pop("device")
        step = {k: config.pop(k) for k in STEP_OPTIONS if k in config}
        _require_imports()
        self._require_device()
        self.config = self._resolve_config(config)
        self.step_options = step_kwargs(step)  # NOTE [ step options ]
        self._validate()
        global _CURRENT
        _CURRENT = self  # NOTE [ only time_step builds a step in setup ]

    def _require_device(self) -> None:
        """A ``cuda`` combination fails, never skips, where torch cannot use CUDA (NOTE [ device ])."""
        if self.device == "cuda" and not torch.cuda.is_available():
            build = getattr(torch.version, "cuda", None)
            raise BenchmarkFailure(
                f"device 'cuda' is in this host's params ({DEVICES_ENV}={os.environ.get(DEVICES_ENV, '')!r}, "
                f"devices {DEVICES}) but torch.cuda.is_available() is False in this environment "
                f"(torch {torch.__version__}, {'CUDA ' + build if build else 'built without CUDA'}); install a "
                f"CUDA build of torch in asv's environment, or set {DEVICES_ENV}=cpu")

    def _resolve_config(self, swept: dict[str, Any]) -> dict[str, Any]:
        """The technique's keyword parameters; raises NotImplementedError to skip."""
        _require_imports()
        # the registry must list; it raising is a failure (NOTE [ skipped or failed ])
        if self.technique_name not in memlab.list_techniques():
            raise NotImplementedError(f"technique {self.technique_name!r} is not in this memlab version")
        cls = memlab.get_technique(self.technique_name)
        name = getattr(cls.workload, "name", None)
        if name != self.workload:
            raise NotImplementedError(f"technique {self.technique_name!r} computes {name!r}, not {self.workload!r}")
        self.technique_cls = cls
        own, workload_own = cls.all_params(), cls.workload.params
        missing = sorted(k for k in self.workload_params if k not in workload_own)
        if missing:
            raise NotImplementedError(f"workload {name!r} has no parameter(s) {missing} in this version")
        config = {k: v for k, v in self.fixed.items() if k in own}
        first = dict(zip(self.param_names, (p[0] for p in self.params)))
        for key, value in swept.items():
            if key in own and self.technique_name not in self.ignored_by.get(key, ()):
                config[key] = value
            elif value != first[key]:
                raise NotImplementedError(
                    f"{key} does not apply to {self.technique_name!r}: measured at {key}={first[key]!r} only")
        return config

    def _validate(self) -> None:
        """Validate the configuration (``prepare``: no tensor is built); the technique saying it cannot
        run here skips the combination, an invalid value fails it (NOTE [ skipped or failed ])."""
        prepare = _measurement_module("").prepare
        try:
            self._prepared = prepare(self.technique_cls, dict(self.config), self.device, DTYPE, MODE)
        except memlab.TechniqueUnavailable as exc:
            raise NotImplementedError(f"{self.technique_name!r} cannot run here: {exc}") from None

    def _prepare_step(self) -> None:
        """Build the problem and run one warm-up step (``time_step``'s own setup)."""
        make_step = _measurement_module(".step").make_step

        technique, dev, dt = self._prepared
        problem = technique.build(dev, dt, 0)
        step, _ = make_step(technique, problem, MODE)
        step()
        self._sync()
        self._step = step

    def teardown(self, cache_dir, *values):
        self._step = None
        if getattr(self, "_heap_lifted", False):
            _glibc_default_heap(False)
            self._heap_lifted = False
        threads = getattr(self, "_threads_before", None)
        if threads is not None:  # time_step's setup set one thread for its process (NOTE [ timing ])
            torch.set_num_threads(threads)
            self._threads_before = None

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    # -- metrics ------------------------------------------------------------------------------
    def _cache_file(self) -> Path:
        # a step option is keyed by name apart from the technique's parameters (NOTE [ step options ])
        key = "-".join([f"{k}={v}" for k, v in sorted(self.config.items())]
                       + [f"step.{k}={v}" for k, v in sorted(self.step_options.items())])
        safe = re.sub(r"[^A-Za-z0-9_.=-]", "_", f"{self.workload}-{self.technique_name}-{self.device}-{key}")
        return Path(self.cache_dir) / f"memlab-{safe}.json"

    def _measure_here(self, **options) -> Any:
        """One ``memlab.measure`` of this combination in this process (asv already isolates it), one
        traced step, no reference check; a status other than ``ok`` fails the benchmark."""
        self._step = None  # free the timing problem first (refcounted): the measurement builds its own
        m = memlab.measure(self.technique_cls, device=self.device, dtype=DTYPE, mode=MODE, isolate=False,
                           iterations=1, check=False, **options, **self.step_options, **self.config)
        if m.status != "ok":
            raise BenchmarkFailure(f"{self.technique_name} {self.config} {dict(self.step_options)} on {self.device}: "
                                   f"{m.status}: {m.error}")
        return m

    def _measure(self) -> dict[str, Any]:
        """The figures of one measured step, measured once per combination and run."""
        path = self._cache_file()
        if path.exists():
            return json.loads(path.read_text())
        # one timed step, no more: asv times the step itself (time_step); time_budget exists from 36df35b
        options = {"time_budget": 0.0} if _has_time_budget() else {}
        m = self._measure_here(repeats=1, **options)
        predicted = getattr(m, "predicted_cuda", None) or {}  # CPU only, and only from issue 15 on
        figures = {"peak_allocated_bytes": m.peak_allocated_bytes, "peak_reserved_bytes": m.peak_reserved_bytes,
                   "predicted_cuda_reserved_bytes": predicted.get("reserved_peak_bytes")}
        path.write_text(json.dumps(figures))
        return figures

    def _timed(self) -> dict[str, Any]:
        """The one-thread measurement's ``relative_step_time``, ``flops`` and ``relative_to`` (the
        last two None where this memlab version records none), measured once per combination and run."""
        path = self._cache_file().with_suffix(".relative.json")
        if path.exists():
            return json.loads(path.read_text())
        if not _has_time_budget():
            raise NotImplementedError("this memlab version times no reference step (no relative_step_time)")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # not measure(threads=1): versions before it must be measured alike
        try:
            m = self._measure_here(repeats=RELATIVE_STEPS, time_budget=0.0)
        finally:
            torch.set_num_threads(threads)
        value = getattr(m, "relative_step_time", None)
        if value is None:
            raise NotImplementedError("this memlab version reports no relative_step_time")
        ratios = (getattr(m, "extra", None) or {}).get("relative_step_ratios")  # from issue 47 on
        timed = {"relative_step_time": value, "flops": getattr(m, "flops", None),
                 "relative_to": getattr(m, "relative_to", None),
                 "relative_step_ratios": [float(r) for r in ratios] if ratios else None}
        path.write_text(json.dumps(timed))
        return timed

    def _limit_gap(self) -> float:
        """``relative_step_time / (flops / baseline flops)`` (NOTE [ time limits ] in memlab.measurement.flop_limits):
        the relative time of the measurement :meth:`_timed` cached, over the FLOP ratio against the
        family baseline it was timed against (one traced step of the baseline, cached apart)."""
        timed = self._timed()
        flops, baseline = timed.get("flops"), timed.get("relative_to")
        if not flops or not baseline:
            raise NotImplementedError("this memlab version records no FLOPs or family baseline")
        path = self._cache_file().with_suffix(".baseline-flops.json")
        if path.exists():
            base_flops = json.loads(path.read_text())["flops"]
        else:
            self._step = None
            m = memlab.measure(baseline, device=self.device, dtype=DTYPE, mode=MODE, isolate=False, iterations=1,
                               repeats=1, time_budget=0.0, check=False, **self.step_options, **self._workload_config())
            if m.status != "ok" or not m.flops:
                raise BenchmarkFailure(f"baseline {baseline} of {self.technique_name} {self.config}: {m.status}: "
                                       f"{m.error or 'no FLOPs'}")
            base_flops = m.flops
            path.write_text(json.dumps({"flops": base_flops}))
        return timed["relative_step_time"] / (flops / base_flops)

    def _workload_config(self) -> dict[str, Any]:
        """This combination's parameters that belong to the workload (the baseline takes no others)."""
        wl = self.technique_cls.workload.params
        return {k: v for k, v in self.config.items() if k in wl}

    def _figure(self, key: str):
        value = self._measure()[key]
        if value is None:
            raise BenchmarkFailure(f"memlab reported no {key} for {self.technique_name} on {self.device}")
        return value

    def track_peak_allocated(self, cache_dir, *values):
        """Peak bytes of live tensors during one training step, above the step's baseline."""
        return self._figure("peak_allocated_bytes")

    track_peak_allocated.unit = "bytes"

    def track_peak_reserved(self, cache_dir, *values):
        """CUDA: peak reserved bytes of the caching allocator above the baseline (skipped on CPU)."""
        return self._figure("peak_reserved_bytes")

    track_peak_reserved.unit = "bytes"
    track_peak_reserved.setup = _cuda_only

    def track_predicted_cuda_reserved(self, cache_dir, *values):
        """CPU: the CUDA caching allocator's reserved peak predicted from this step's exact
        allocation trace (memlab.cuda_replay.model; bytes, deterministic like track_peak_allocated)."""
        value = self._measure().get("predicted_cuda_reserved_bytes")
        if value is None:
            raise NotImplementedError("this memlab version predicts no CUDA memory")
        return value

    track_predicted_cuda_reserved.unit = "bytes"
    track_predicted_cuda_reserved.setup = _cpu_only

    def track_relative_step_time(self, cache_dir, *values):
        """One training step over the family baseline's step (the workload's plain reference before
        memlab's timed phase existed), interleaved in one process at one intra-op thread (NOTE [
        track_relative_step_time at one thread ]); dimensionless.  Returned to asv as the samples
        of its per-round ratios where memlab records them (NOTE [ the relative time as samples ])."""
        return relative_samples(self._timed())

    track_relative_step_time.unit = "ratio"
    # "2": memlab's relative time against the family's baseline technique in thread CPU time, timed
    # under glibc's default heap (memlab.measurement.timing); "1": wall time against the reference
    track_relative_step_time.version = "2"

    def track_time_limit_gap(self, cache_dir, *values):
        """The relative step time over the FLOP ratio against the family baseline: 1.0 runs its FLOPs
        as fast as the baseline runs its own, above 1 slower (issue 32's gap; NOTE [ time limits ] in
        memlab.measurement.flop_limits); from the same one-thread measurement as track_relative_step_time; dimensionless."""
        return self._limit_gap()

    track_time_limit_gap.unit = "ratio"

    def time_step(self, cache_dir, *values):
        """Seconds of one training step (forward, backward, SGD step)."""
        self._step()
        self._sync()

    time_step.setup = _timing_setup
    # "3": thread CPU seconds under glibc's default heap; "2": wall seconds at one intra-op thread under
    # the resident malloc setting; "1" timed the default threads (NOTE [ timing ])
    time_step.version = "3"
    time_step.timer = time.thread_time


def relative_samples(timed: Mapping[str, Any]) -> float | dict[str, Any]:
    """What ``track_relative_step_time`` returns to asv for one cached timed measurement ``timed``:
    ``{"samples": [per-round ratio, ...], "number": 1}`` where memlab recorded the ratios (asv stores
    their median, 99% interval and quartiles, and the samples with ``--record-samples``), else the
    one ``relative_step_time`` (a memlab version before them).  NOTE [ the relative time as samples ].
    """
    ratios = timed.get("relative_step_ratios")
    if not ratios:
        return timed["relative_step_time"]
    return {"samples": [float(r) for r in ratios], "number": 1}


def class_params(spec: Sequence[tuple[str, list]]) -> tuple[list[list], list[str]]:
    """``[(name, values), ...]`` -> ``(params, param_names)``: one list, so they cannot drift apart."""
    return [list(v) for _, v in spec], [n for n, _ in spec]


class ComplexityBenchmark:
    """Base of the complexity trackers: the fitted log-log exponent of the exact activation peak
    (``extra["activation_peak_bytes"]``, CPU) against one size, per technique
    (:func:`memlab.core.complexity.fit_exponent`).

    A change in a technique's complexity (a path that starts keeping a [T, T] tensor, checkpointing
    turning linear) moves the exponent by ~0.5 to 1, which a single-size memory figure can hide
    behind a constant.

    Subclasses set ``techniques`` (a static list: NOTE [ params must not depend on the installed
    memlab ]), ``size`` (the parameter swept), ``sizes`` (its values), ``fixed`` (the other
    parameters), ``x_extra`` (the ``extra`` figure the exponent is taken against, e.g. ``blocks``
    for a ResNet's depth; None: the size itself) and ``metric`` (the ``track_`` name asv files the
    exponent under; it names the history, so it never changes).  Not a benchmark itself: asv finds
    no ``track_`` method here until a subclass names its ``metric``.
    """

    techniques: Sequence[str] = ()
    size: str = ""
    sizes: Sequence[int] = ()
    fixed: Mapping[str, Any] = {}
    x_extra: str | None = None
    metric: str = ""
    param_names = ["technique", "device"]
    timeout = 600
    version = "1"

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if not cls.metric.startswith("track_"):
            raise TypeError(f"{cls.__name__}.metric={cls.metric!r} must name a track_ method")
        cls.params = [list(cls.techniques), ["cpu"]]

        def track(self, technique, device):
            return self.exponent(technique, device)

        track.unit = "exponent"
        track.__name__ = cls.metric
        setattr(cls, cls.metric, track)

    def setup(self, technique, device):
        _require_imports()  # a broken memlab, or this host filing under another's machine name, fails
        if technique not in memlab.list_techniques():
            raise NotImplementedError(f"technique {technique!r} is not in this memlab version")
        self.technique, self.device = technique, device

    def exponent(self, technique, device) -> float:
        """The fitted exponent (3 decimals) over ``sizes``; RuntimeError on a measurement not ``ok``."""
        import memlab
        from memlab.core.complexity import fit_exponent

        xs, peaks = [], []
        for value in self.sizes:
            m = memlab.measure(technique, device=device, isolate=False, iterations=1, repeats=1, time_budget=0,
                               check=False, **{self.size: value}, **self.fixed)
            if m.status != "ok":
                raise RuntimeError(f"{technique} {self.size}={value}: {m.status} ({m.error})")
            xs.append(m.extra[self.x_extra] if self.x_extra else value)
            peaks.append(m.extra["activation_peak_bytes"])
        return round(fit_exponent(xs, peaks).exponent, 3)
