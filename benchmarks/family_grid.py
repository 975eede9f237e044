"""The families' asv benchmark classes, built from the grids their folders declare (``meta.py``'s
``BENCHMARKS``: ``{class name: spec}``).

The grids are read through memlab's registry as the working tree has it (``memlab/registry.py``
loaded from its file alone: it imports no other memlab module, nor torch), never through the memlab
installed in asv's environment: NOTE [ params must not depend on the installed memlab ] in
``common.py``.  A spec is a :class:`common.MemlabBenchmark` (``workload``, ``workload_params``,
``fixed``, ``ignored_by``, ``techniques``, ``params``: the swept parameters between the technique and
the device; ``plugins``: False keeps the plug-in techniques of the workload out of the technique
list) or, with ``"kind": "complexity"``, a :class:`common.ComplexityBenchmark` (``techniques``,
``size``, ``sizes``, ``fixed``, ``x_extra``, ``metric``).

Each built-in family's classes live in ``bench_<family>.py`` where that module exists (asv's history
is filed under the module's name), else in ``bench_families.py``; a plug-in family folder's in
``bench_plugins.py``.  A new family folder therefore needs no edit here or elsewhere.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Mapping

from . import common

__all__ = ["tree_registry", "benchmark_class", "family_benchmarks", "unclaimed_families", "plugin_family_benchmarks"]

#: the working tree's ``memlab/registry.py``
_REGISTRY = Path(__file__).resolve().parents[1] / "memlab" / "registry.py"
_TREE_REGISTRY = "memlab_tree_registry"


def tree_registry():
    """The working tree's registry module, loaded once from its file alone (no memlab package import)."""
    if _TREE_REGISTRY not in sys.modules:
        spec = importlib.util.spec_from_file_location(_TREE_REGISTRY, _REGISTRY)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_TREE_REGISTRY] = module  # a dataclass looks its module up while it is defined
        spec.loader.exec_module(module)
    return sys.modules[_TREE_REGISTRY]


def benchmark_class(name: str, spec: Mapping[str, Any], module: str) -> type:
    """The asv benchmark class ``name`` of one grid ``spec``, defined as if in ``module``."""
    namespace = {"__module__": module, "__doc__": spec.get("doc")}
    if spec.get("kind") == "complexity":
        namespace.update(techniques=list(spec["techniques"]), size=spec["size"], sizes=tuple(spec["sizes"]),
                         fixed=dict(spec.get("fixed", {})), x_extra=spec.get("x_extra"), metric=spec["metric"])
        return type(name, (common.ComplexityBenchmark,), namespace)
    techniques = (common.technique_list(spec["techniques"], spec["workload"]) if spec.get("plugins", True)
                  else list(spec["techniques"]))
    params, param_names = common.class_params([("technique", techniques), *spec.get("params", ()),
                                               ("device", common.DEVICES)])
    namespace.update(workload=spec["workload"], workload_params=tuple(spec.get("workload_params", ())),
                     fixed=dict(spec.get("fixed", {})), ignored_by=dict(spec.get("ignored_by", {})),
                     params=params, param_names=param_names)
    return type(name, (common.MemlabBenchmark,), namespace)


def family_benchmarks(family: str, module: str) -> dict[str, type]:
    """``{class name: benchmark class}`` of one built-in family's grid, defined in ``module``."""
    registry = tree_registry()
    meta = registry.read_family_meta(family, dict(registry.builtin_families())[family])
    return {name: benchmark_class(name, spec, module) for name, spec in meta.benchmarks.items()}


def unclaimed_families() -> list[str]:
    """The built-in families without a ``bench_<family>.py`` module of their own."""
    here = Path(__file__).resolve().parent
    return [name for name, _ in tree_registry().builtin_families() if not (here / f"bench_{name}.py").is_file()]


def plugin_family_benchmarks(module: str, environ: Mapping[str, str] | None = None) -> dict[str, type]:
    """``{"Plugin" + class name: benchmark class}`` of the plug-in family folders in ``MEMLAB_PLUGINS``."""
    registry = tree_registry()
    out = {}
    for family, folder in registry.plugin_families(environ):
        for name, spec in registry.read_family_meta(family, folder).benchmarks.items():
            out[f"Plugin{name}"] = benchmark_class(f"Plugin{name}", spec, module)
    return out
