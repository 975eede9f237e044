"""Your own model: a model file measured, checked, swept and advised like a built-in family.

:mod:`.run` loads, checks and measures a model file (``memlab.measure_model``, ``memlab.load_model``);
:mod:`.workload` and :mod:`.techniques` are the family a model file becomes; :mod:`.lora` its
adapters; :mod:`.advice` fits and answers ``memlab advise --model``; :mod:`.checks` checks those
answers beyond the measured batches.

# NOTE [ a light package ]
Importing this package imports no torch: the site reads :mod:`.advice` where torch is absent
(``tests/test_site.py::test_no_torch_import``), so the names of :mod:`.run` are imported on first
access (PEP 562 ``__getattr__``), as ``memlab``'s own are.
"""
from __future__ import annotations

import importlib

__all__ = ["load_model", "load_model_bounded", "CHILD_LOAD_SECONDS", "measure_model", "technique_name", "model_techniques", "register_model_module", "ModelFileError", "apply_model_args"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'memlab.own_model' has no attribute {name!r}")
    value = getattr(importlib.import_module(".run", __name__), name)
    globals()[name] = value
    return value
