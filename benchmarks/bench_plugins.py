"""Plug-in families: one benchmark class per workload a ``MEMLAB_PLUGINS`` file defines, and each
plug-in family folder's own grid.

A family added as a plug-in (its workload and techniques in one file, :func:`memlab.load_plugin`)
is benchmarked by asv with no edit here or elsewhere: this module reads the files named in
``MEMLAB_PLUGINS`` (their source, no import: NOTE [ params must not depend on the installed memlab ]
in ``common.py``) and defines, for each workload declared ``class X(memlab.Workload, name="...",
family="...")``, a :class:`common.MemlabBenchmark` subclass named after it (``two_layer`` ->
``PluginTwoLayer``) whose ``params`` are that workload's techniques in the files and the devices.

Swept: technique, device.  Held fixed: every workload parameter at its default (the plug-in's own
choice of a representative size; the file's sweep grid would need memlab imported to read).
Without ``MEMLAB_PLUGINS`` this module defines no benchmark.  A user runs
``MEMLAB_PLUGINS=/path/to/family.py asv run`` (asv passes the variable to its benchmark processes).

A family folder in ``MEMLAB_PLUGINS`` (the shape of ``memlab/families/<name>/``) is benchmarked on the
grid its ``meta.py`` declares (``BENCHMARKS``, read without importing it: ``family_grid.py``), each
class named ``Plugin`` + the name the grid gives it.
"""
from __future__ import annotations

from . import common, family_grid

__all__ = ["plugin_classes", "class_name"]


def class_name(workload: str) -> str:
    """``two_layer`` -> ``PluginTwoLayer`` (asv names a benchmark ``bench_plugins.<class>.<metric>``)."""
    return "Plugin" + "".join(part[:1].upper() + part[1:] for part in workload.split("_") if part)


def plugin_classes(environ=None) -> dict[str, type]:
    """``{class name: benchmark class}``, one per workload the ``MEMLAB_PLUGINS`` files define that
    has at least one technique there."""
    out = {}
    for workload in common.plugin_workloads(environ):
        techniques = common.plugin_techniques(workload, environ)
        if not techniques or not class_name(workload).isidentifier():
            continue
        name = class_name(workload)
        params, param_names = common.class_params([("technique", techniques), ("device", common.DEVICES)])
        out[name] = type(name, (common.MemlabBenchmark,), {
            "__module__": __name__, "__doc__": f"One training step of plug-in workload {workload!r} at its defaults.",
            "workload": workload, "params": params, "param_names": param_names})
    out.update(family_grid.plugin_family_benchmarks(__name__, environ))
    return out


globals().update(plugin_classes())
