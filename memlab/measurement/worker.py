"""Subprocess entry point: ``python -m memlab.measurement.worker REQUEST.json RESULT.json``.

Reads a request written by :mod:`memlab.measurement.runner`, measures in this fresh process and writes
the Measurement (or Timeline) JSON to the result path atomically.  A request of kind ``check`` runs one
technique's float64 reference check (:func:`memlab.measurement.reference_check.check_outcome`) and writes its
:class:`~memlab.measurement.reference_check.CheckOutcome` JSON instead.  Plug-ins arrive through
``MEMLAB_PLUGINS`` as absolute paths.  The runner starts this module with ``python -P`` in a private
temporary folder, so nothing is imported from the caller's directory (NOTE [ worker isolation ] in
:mod:`memlab.measurement.runner`); whatever a technique prints goes to a log there, read as bytes.
"""
from __future__ import annotations

import gc
import json
import sys

from ..core.atomic import write_text_atomic
from ..core.record import Measurement
from ..core.setting import Setting
from ..registry import get_technique
from .resident import fix_mmap_threshold
from .devices import parse_device, parse_dtype
from .inprocess import measure_in_process, time_measured, timeline_in_process
from .reference_check import check_outcome


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    with open(request_path) as f:
        req = json.load(f)


    gc.collect()
    gc.freeze()  # imports stay for the process's life: keep them out of every gc.collect() (forkserver NOTE)
    if req["kind"] == "check":
        write_text_atomic(result_path, json.dumps(run_check(req), sort_keys=True))
        return 0
    technique = get_technique(req["technique"])(**req["params"])
    if req["kind"] == "timeline":
        device, dtype = parse_device(req["device"]), parse_dtype(req["dtype"])
        fix_mmap_threshold()  # the resident figure's setting, before anything is built (resident NOTE)
        result = timeline_in_process(technique, device, dtype, mode=req["mode"], seed=req["seed"]).to_dict()
        write_text_atomic(result_path, json.dumps(result, sort_keys=True))
        return 0
    setting = Setting.from_json(req["setting"])
    device, dtype = parse_device(setting.device), parse_dtype(setting.dtype)
    if req["kind"] == "time":  # never the resident setting; the timing heap: NOTE [ the timing heap ]
        measured = Measurement.from_dict(req["measured"])
        result = time_measured(measured, technique, device, dtype, setting).to_dict()
    else:
        fix_mmap_threshold()  # the resident figure's setting, before anything is built (resident NOTE)
        result = measure_in_process(technique, device, dtype, setting=setting,
                                    reference_cache=req.get("reference_cache"), timing=False).to_dict()
    write_text_atomic(result_path, json.dumps(result, sort_keys=True))
    return 0


def run_check(req: dict) -> dict:
    """The ``check`` request ``{"kind": "check", "technique": name, "mode": "train"}``: one technique's
    reference check as a :class:`~memlab.measurement.reference_check.CheckOutcome` dict.  An exception of the technique is
    its ``ERROR`` outcome; ``sys.exit`` or ``os._exit`` in it ends this process without a result, which
    the runner reports (``exited with code 0 before writing a result``)."""
    return check_outcome(req["technique"], mode=req.get("mode", "train"), as_swept=req.get("as_swept", False)).to_dict()


if __name__ == "__main__":
    from .forkserver import die_with_parent

    die_with_parent()  # a spawned measurement ends with the process that started it
    sys.exit(main(sys.argv[1:]))
