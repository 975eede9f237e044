"""Predicted vs measured CUDA memory on a real GPU (``make gpu-check``): the table the site shows.

Each configuration (every built-in technique at its defaults, plus every configuration of the seed
reproductions) is measured twice: on CPU, whose ``predicted_cuda`` is the caching-allocator model
replayed on the exact allocation trace (NOTE [ predicted CUDA memory ] in
:mod:`memlab.measurement.cuda_prediction`), and on the GPU.  Compared figures (bytes, each step's peak
above the memory held before it, as memlab's CUDA measurement records them):

* allocated: measured ``peak_allocated_bytes`` (``max_memory_allocated()`` − ``memory_allocated()``
  before the step) vs predicted ``allocated_peak_bytes``;
* reserved: measured ``peak_reserved_bytes`` (``max_memory_reserved()`` − ``memory_reserved()`` before)
  vs predicted ``with_history.reserved_peak_above_baseline_bytes`` (the replay that keeps what the
  warm-up step cached, as the measured process does).

Writes ``data/gpu-check/<gpu>.json``: ``{"gpu", "cuda", "torch", "memlab_commit", "rows": [...]}``, one
row per configuration with both figures, the statuses and any error.  Needs a CUDA GPU (exit 2 without).

Example::

    python -m memlab.gpu_check --out data/gpu-check [--quick]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["configurations", "check_one", "main"]


def configurations(reproductions: Path, quick: bool = False) -> list[dict[str, Any]]:
    """``{"technique", "params", "mode", "optimizer"}``: each built-in technique at its defaults (its
    check configuration with ``quick``), then each CPU configuration of the seed reproductions."""
    from .registry import get_technique, list_techniques

    out: dict[str, dict[str, Any]] = {}
    for name in list_techniques():
        cls = get_technique(name)
        params = {**cls.workload.check_params, **cls.check_params} if quick else {}
        key = {"technique": name, "params": params, "mode": "train", "optimizer": "sgd"}
        out.setdefault(json.dumps(key, sort_keys=True), key)
    for path in sorted(Path(reproductions).glob("*.json")):
        for m in json.loads(path.read_text()).get("measurements", []):
            if m.get("device") == "cpu" and m.get("dtype") == "float32":
                key = {"technique": m["technique"], "params": m["params"], "mode": m.get("mode", "train"),
                       "optimizer": m.get("optimizer") or "sgd"}
                out.setdefault(json.dumps(key, sort_keys=True), key)
    return list(out.values())


def check_one(cfg: dict[str, Any], device: str = "cuda") -> dict[str, Any]:
    """Measure one configuration on CPU (its prediction) and on ``device``; a row of the table."""
    import memlab

    common = dict(mode=cfg["mode"], optimizer=cfg["optimizer"], iterations=2, repeats=1, time_budget=0.0, check=False,
                  **cfg["params"])
    cpu = memlab.measure(cfg["technique"], device="cpu", **common)
    gpu = memlab.measure(cfg["technique"], device=device, **common)
    pc = cpu.predicted_cuda or {}
    return {**cfg, "cpu_status": cpu.status, "status": gpu.status, "error": gpu.error or cpu.error,
            "measured_allocated_bytes": gpu.peak_allocated_bytes,
            "predicted_allocated_bytes": pc.get("allocated_peak_bytes"),
            "measured_reserved_bytes": gpu.peak_reserved_bytes,
            "predicted_reserved_bytes": (pc.get("with_history") or {}).get("reserved_peak_above_baseline_bytes"),
            "cpu_peak_allocated_bytes": cpu.peak_allocated_bytes, "device_used_bytes": gpu.device_used_bytes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memlab.gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/gpu-check", help="output folder (default: %(default)s)")
    ap.add_argument("--reproductions", default="data/reproductions")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="each technique at its small check configuration only")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("memlab gpu-check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine with one",
              file=sys.stderr)
        return 2
    from .measurement.environment import git_commit

    props = torch.cuda.get_device_properties(torch.device(args.device))
    cfgs = configurations(Path(args.reproductions), args.quick)
    rows = []
    for i, cfg in enumerate(cfgs, 1):
        print(f"[{i}/{len(cfgs)}] {cfg['technique']} {cfg['params']}", file=sys.stderr)
        try:
            rows.append(check_one(cfg, args.device))
        except Exception as exc:  # noqa: BLE001 - one configuration failing is a row, not the end
            rows.append({**cfg, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]})
    data = {"gpu": props.name, "gpu_memory_bytes": props.total_memory, "cuda": torch.version.cuda,
            "torch": torch.__version__, "memlab_commit": git_commit(), "rows": rows,
            "note": "measured: peak above the memory held before the step on the GPU; predicted: memlab.cuda_model "
                    "replayed on the CPU trace of the same configuration (reserved: with the warm-up's cache)"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / (re.sub(r"[^a-z0-9]+", "-", props.name.lower()).strip("-") + ".json")
    target.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n")
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
