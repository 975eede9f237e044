"""Shared machinery of memlab's asv benchmarks: parameter lists, skips, one measured step.

asv takes the benchmarks from the working tree but imports them in an environment holding memlab
as it was at the commit being measured.  So everything here is written against the *oldest* public
API it may meet (``memlab.get_technique``, ``memlab.measure(..., isolate=False)``) and turns every
"this does not exist in that version" into :class:`NotImplementedError` raised from ``setup``,
which asv records as a skipped combination (NaN), never as a wrong number.

NOTE [ params must not depend on the installed memlab ]
asv discovers a benchmark's ``params`` once, then runs combination *k* by index in a fresh process
of each commit's environment.  If the lists were built from memlab's registry, a commit with fewer
techniques would shift the indices and file one technique's numbers under another's name.  The
lists are therefore static per family, plus the technique names found in the ``MEMLAB_PLUGINS``
files by reading their source (no import), which does not depend on the memlab version either.
Whether a name exists, and belongs to the benchmark's workload, is decided in ``setup``.

NOTE [ device ]
``device`` is always ``["cpu", "cuda"]`` so result files from CPU-only and GPU hosts share one
``benchmarks.json``; ``setup`` skips ``cuda`` where ``torch.cuda.is_available()`` is False.
Nothing here touches CUDA at import time: asv imports this module in a parent process (and, with
the fork server, forks every benchmark from it).

NOTE [ warm the fork server ]
Everything a combination would import lazily is imported here, once, in the fork server: the first
``torch.optim`` optimizer built in a process imports ``torch._dynamo`` (1.2-1.6 s measured), which
every forked combination would otherwise pay again.  Building an SGD optimizer on a CPU tensor
does it without touching CUDA.
"""
from __future__ import annotations

import abc
import ast
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

try:  # imported once in asv's fork server, not in every benchmark process
    import torch
except Exception:  # pragma: no cover - the environment has no torch at all
    torch = None
try:
    import memlab
except Exception:  # pragma: no cover - memlab at this commit does not import
    memlab = None
try:  # import every technique module (and plug-in) once, before asv forks; CPU only
    memlab.list_techniques()
except Exception:  # pragma: no cover - setup reports what is missing, per combination
    pass
try:  # see NOTE [ warm the fork server ]
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)
except Exception:  # pragma: no cover
    pass

__all__ = [
    "DEVICES", "DTYPE", "MODE", "plugin_techniques", "technique_list", "class_params", "MemlabBenchmark",
]

#: Every benchmark sweeps both; ``cuda`` is skipped where no GPU is available.
DEVICES = ["cpu", "cuda"]
DTYPE = "float32"
MODE = "train"

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
    local_workloads = {n.name: _keyword(n, "name") for n in classes
                       if _keyword(n, "name") and _keyword(n, "family")}
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
    environ = os.environ if environ is None else environ
    names = set()
    for path in environ.get("MEMLAB_PLUGINS", "").split(os.pathsep):
        if path.strip():
            for name, wl in _plugin_file_techniques(os.path.expanduser(path.strip())):
                if wl is None or wl == workload:
                    names.add(name)
    return sorted(names)


def technique_list(static: Sequence[str], workload: str) -> list[str]:
    """``static`` followed by the plug-in techniques of ``workload`` not already in it."""
    return list(static) + [n for n in plugin_techniques(workload) if n not in static]


class MemlabBenchmark(abc.ABC):
    """Base of the per-workload benchmark classes: one training step of one technique.

    Abstract (``workload`` is an abstract property until a subclass sets it), so asv's discovery,
    which walks every class it finds in every module, does not take the base for a benchmark.

    Subclasses set:
        workload: the registered workload name (``chained_matmul``...).
        params, param_names: first ``technique``, last ``device``; in between, workload or
            technique parameters (build both with :func:`class_params` so they stay aligned).
        workload_params: the names (swept or fixed) that are workload parameters.  One missing
            from the memlab version under test skips the combination: measuring the default
            instead would mislabel it.
        fixed: values held constant to stay within the time budget (workload or technique
            parameters; a technique parameter applies to the techniques that have it).
        ignored_by: ``{param: {technique, ...}}`` for parameters a technique has but whose value
            does not change its memory or time (a TT rank for the dense layer).

    A swept technique parameter that a technique lacks (or ignores) is measured at the first value
    of its list only; the other values are skipped as saying nothing.

    Metrics: ``track_peak_allocated`` and ``track_peak_reserved`` (bytes above the step's
    baseline) come from ONE ``memlab.measure(..., isolate=False)`` per combination: the first of
    the two to run stores the Measurement in asv's ``setup_cache`` directory (fresh for each commit
    and environment, deleted by asv afterwards), the second reads it.  ``time_step`` is seconds of
    one training step, timed by asv after the warm-up step that ``setup`` runs.
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

    # asv timing: one step per sample, a few samples, the warm-up step is run in setup.
    number = 1
    repeat = (3, 5, 2.0)
    rounds = 1
    warmup_time = 0.0
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
        self.config = self._resolve_config(config)
        self._prepare_step()

    def _resolve_config(self, swept: dict[str, Any]) -> dict[str, Any]:
        """The technique's keyword parameters; raises NotImplementedError to skip."""
        if torch is None or memlab is None:
            raise NotImplementedError("torch or memlab does not import in this environment")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise NotImplementedError("no CUDA device here")
        try:
            cls = memlab.get_technique(self.technique_name)
        except ValueError as exc:
            raise NotImplementedError(f"not in this memlab version: {exc}") from None
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

    def _prepare_step(self) -> None:
        """Validate the configuration, build the problem and run one warm-up step."""
        try:
            from memlab.measure import prepare
            from memlab.measure.step import make_step
        except ImportError as exc:
            raise NotImplementedError(f"memlab internals missing: {exc}") from None
        try:
            technique, dev, dt = prepare(self.technique_cls, dict(self.config), self.device, DTYPE, MODE)
        except memlab.TechniqueUnavailable as exc:
            raise NotImplementedError(str(exc)) from None
        except ValueError as exc:  # an invalid combination in this version (e.g. rank too large)
            raise NotImplementedError(f"invalid configuration: {exc}") from None
        problem = technique.build(dev, dt, 0)
        step, _ = make_step(technique, problem, MODE)
        step()
        self._sync()
        self._step = step

    def teardown(self, cache_dir, *values):
        self._step = None

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    # -- metrics ------------------------------------------------------------------------------
    def _cache_file(self) -> Path:
        key = "-".join(f"{k}={v}" for k, v in sorted(self.config.items()))
        safe = re.sub(r"[^A-Za-z0-9_.=-]", "_", f"{self.workload}-{self.technique_name}-{self.device}-{key}")
        return Path(self.cache_dir) / f"memlab-{safe}.json"

    def _measure(self) -> dict[str, Any]:
        """Peak figures of one measured step, measured once per combination and run."""
        path = self._cache_file()
        if path.exists():
            return json.loads(path.read_text())
        self._step = None  # free the timing problem first (refcounted): the measurement builds its own
        m = memlab.measure(self.technique_cls, device=self.device, dtype=DTYPE, mode=MODE,
                           isolate=False, iterations=1, repeats=1, check=False, **self.config)
        if m.status != "ok":
            raise RuntimeError(f"{self.technique_name} {self.config} on {self.device}: {m.status}: {m.error}")
        figures = {"peak_allocated_bytes": m.peak_allocated_bytes, "peak_reserved_bytes": m.peak_reserved_bytes}
        path.write_text(json.dumps(figures))
        return figures

    def track_peak_allocated(self, cache_dir, *values):
        """Peak bytes of live tensors during one training step, above the step's baseline."""
        return self._measure()["peak_allocated_bytes"]

    track_peak_allocated.unit = "bytes"

    def track_peak_reserved(self, cache_dir, *values):
        """CUDA: peak reserved bytes above the baseline; CPU: resident high-water mark over the step."""
        value = self._measure()["peak_reserved_bytes"]
        if value is None:
            raise RuntimeError("memlab reported no peak_reserved_bytes on this device")
        return value

    track_peak_reserved.unit = "bytes"

    def time_step(self, cache_dir, *values):
        """Seconds of one training step (forward, backward, SGD step)."""
        self._step()
        self._sync()


def class_params(spec: Sequence[tuple[str, list]]) -> tuple[list[list], list[str]]:
    """``[(name, values), ...]`` -> ``(params, param_names)``: one list, so they cannot drift apart."""
    return [list(v) for _, v in spec], [n for n, _ in spec]
