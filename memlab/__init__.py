"""memlab: honest memory numbers for memory-saving PyTorch training techniques.

Public API::

    memlab.Technique, memlab.Workload, memlab.Param, memlab.Problem
    memlab.list_techniques(), memlab.get_technique(name), memlab.load_plugin(path)
    memlab.measure(name, *, device="cpu", dtype="float32", mode="train", **params) -> Measurement
    memlab.measure(memlab.Point(name, params, memlab.Setting(optimizer="adam"))) -> Measurement
    memlab.timeline(name, ...) -> Timeline
    memlab.measure_model("my_model.py", "checkpoint_blocks", batch=4) -> Measurement  # your own model
    memlab.load_model("my_model.py")  # check a model file; its workload class (family model:my_model)
    memlab.host_memory()  # context manager: what it allocates stays on the host when the step runs on CUDA

# NOTE [ lazy top-level imports ]
``import memlab`` does not import torch: the results reader (:mod:`memlab.results`) and the site
builder (:mod:`memlab.site`) only read files and must run where torch is absent or slow to load.
The public names below are imported from their modules on first access (PEP 562 ``__getattr__``).
``memlab.measure`` is the public function; the measurement layer is the subpackage
:mod:`memlab.measurement`.
"""
from __future__ import annotations

import importlib

from ._version import __version__

_EXPORTS = {
    "Technique": ".technique", "TechniqueUnavailable": ".technique",
    "Workload": ".workload", "Problem": ".workload", "get_workload": ".registry", "list_workloads": ".registry",
    "Param": ".core.params",
    "list_techniques": ".registry", "list_families": ".registry", "get_technique": ".registry",
    "load_plugin": ".registry", "list_advisors": ".registry", "get_advisor": ".registry",
    "AdvisorModel": ".core.declaration",
    "measure": ".measurement", "timeline": ".measurement", "Measurement": ".measurement",
    "Setting": ".core.setting", "Point": ".core.setting",
    "Timeline": ".measurement", "TimelineEvent": ".measurement",
    "Verification": ".measurement.verify", "verify_technique": ".measurement.verify",
    "host_memory": ".measurement.host_marks",
    "measure_model": ".own_model", "load_model": ".own_model",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'memlab' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

