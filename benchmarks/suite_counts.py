"""``python -m benchmarks.suite_counts``: the asv suite's classes, benchmark methods and CPU values per
commit, counted from the benchmark modules as asv finds them (``bench_*.py``), never written by hand.

Not a benchmark (asv imports it and finds nothing to run).  Each ``common.MemlabBenchmark`` class's CPU
combinations that apply (its ``setup`` does not skip them as "does not apply"; a technique that cannot
run on this host still counts: it applies where it can run), its benchmark methods, and each
``common.ComplexityBenchmark`` class's exponents (one per technique).  No measurement: ``setup``
resolves and validates a combination only (NOTE [ only time_step builds a step in setup ] in
``common.py``).  ``tests/test_benchmarks_docs.py`` checks benchmarks/README.md against these counts.
"""
from __future__ import annotations

import importlib
import inspect
import itertools
import sys
import tempfile
from pathlib import Path

__all__ = ["MODULES", "PREFIXES", "classes", "methods", "applicable", "counts", "main"]

ROOT = Path(__file__).resolve().parents[1]
#: the benchmark modules, as asv's discovery finds them
MODULES = sorted(f"benchmarks.{p.stem}" for p in (ROOT / "benchmarks").glob("bench_*.py"))
#: the method prefixes asv runs as benchmarks
PREFIXES = ("track_", "time_", "timeraw_", "peakmem_", "mem_")


def classes(base: type) -> dict[str, type]:
    """``{"bench_x.Class": class}`` of the ``base`` subclasses the bench modules define."""
    out = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and issubclass(cls, base):
                out[f"{name.split('.')[1]}.{cls.__name__}"] = cls
    return out


def methods(cls: type) -> list[str]:
    """The benchmark methods of ``cls`` (asv's prefixes), sorted."""
    return sorted(n for n in dir(cls) if n.startswith(PREFIXES) and callable(getattr(cls, n)))


def applicable(tmp: str) -> dict[str, list[tuple]]:
    """``{"bench_x.Class": [combination, ...]}``: the CPU combinations each ``MemlabBenchmark`` class
    measures wherever its techniques can run (NOTE [ skipped or failed ] in benchmarks/common.py);
    ``tmp``: asv's ``setup_cache`` folder for the setups."""
    from benchmarks import common

    out = {}
    for key, cls in classes(common.MemlabBenchmark).items():
        combos = []
        for combo in itertools.product(*cls.params):
            if combo[-1] != "cpu":
                continue
            try:
                cls().setup(tmp, *combo)
            except NotImplementedError as exc:
                if "cannot run here" not in str(exc):
                    continue
            combos.append(combo)
        out[key] = combos
    return out


def counts(tmp: str) -> dict:
    """The suite's counts on CPU: ``classes`` (``{"memlab": n, "complexity": n}``), ``methods`` (of a
    ``MemlabBenchmark`` class), ``cpu_methods`` (those that run on CPU: all but ``track_peak_reserved``),
    ``combinations`` and ``exponents`` per class, and ``values``: benchmark values per commit of the full suite."""
    from benchmarks import common

    combos = {k.split(".")[1]: len(v) for k, v in applicable(tmp).items()}
    complexity = classes(common.ComplexityBenchmark)
    exponents = {k.split(".")[1]: len(cls.params[0]) for k, cls in complexity.items()}
    every = methods(common.MemlabBenchmark)
    cpu = [m for m in every if m != "track_peak_reserved"]
    return {"classes": {"memlab": len(combos), "complexity": len(complexity)}, "methods": len(every),
            "cpu_methods": len(cpu), "combinations": combos, "exponents": exponents,
            "values": sum(combos.values()) * len(cpu) + sum(exponents.values())}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="memlab-asv-counts-") as tmp:
        c = counts(tmp)
    print(f"classes: {c['classes']['memlab']} MemlabBenchmark + {c['classes']['complexity']} ComplexityBenchmark")
    print(f"benchmark methods per MemlabBenchmark class: {c['methods']} ({c['cpu_methods']} run on CPU)")
    print("CPU combinations per class: " + ", ".join(f"{k} {n}" for k, n in c["combinations"].items())
          + f" ({sum(c['combinations'].values())} in all)")
    print("activation exponents per class: " + ", ".join(f"{k} {n}" for k, n in c["exponents"].items()))
    print(f"benchmark values per commit of the full suite on CPU: {c['values']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
