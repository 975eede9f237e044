"""Subprocess entry point: ``python -m memlab.measurement.worker REQUEST.json RESULT.json``.

Reads a request written by :mod:`memlab.measurement.runner`, measures in this fresh process and writes
the Measurement (or Timeline) JSON to the result path atomically.  Plug-ins arrive through
``MEMLAB_PLUGINS`` as absolute paths.  The runner starts this module with ``python -P`` in a private
temporary folder, so nothing is imported from the caller's directory (NOTE [ worker isolation ] in
:mod:`memlab.measurement.runner`); whatever a technique prints goes to a log there, read as bytes.
"""
from __future__ import annotations

import json
import sys

from ..atomic import write_text_atomic


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    with open(request_path) as f:
        req = json.load(f)
    from ..registry import get_technique
    from .devices import parse_device, parse_dtype
    from .inprocess import measure_in_process, timeline_in_process

    import gc

    gc.collect()
    gc.freeze()  # imports stay for the process's life: keep them out of every gc.collect() (forkserver NOTE)
    technique = get_technique(req["technique"])(**req["params"])
    device, dtype = parse_device(req["device"]), parse_dtype(req["dtype"])
    if req["kind"] == "timeline":
        result = timeline_in_process(technique, device, dtype, mode=req["mode"], seed=req["seed"]).to_dict()
    else:
        result = measure_in_process(technique, device, dtype, mode=req["mode"], iterations=req["iterations"],
                                    repeats=req["repeats"], seed=req["seed"], check=req["check"],
                                    time_budget_s=req.get("time_budget_s", 2.0), optimizer=req.get("optimizer", "sgd"),
                                    loss=req.get("loss", "given"), threads=req.get("threads"),
                                    reference_cache=req.get("reference_cache")).to_dict()
    write_text_atomic(result_path, json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
