"""Predicted vs measured CUDA memory on a real GPU (``make gpu-check``): the table the site shows.

Each configuration (every built-in technique at its defaults, plus every configuration of the seed
reproductions) is measured twice: on CPU, whose ``predicted_cuda`` is the caching-allocator model
replayed on the exact allocation trace (NOTE [ predicted CUDA memory ] in
:mod:`memlab.cuda_replay.prediction`), and on the GPU.  Compared figures (bytes, each step's peak
above the memory held before it, as memlab's CUDA measurement records them):

* allocated: measured ``peak_allocated_bytes`` (``max_memory_allocated()`` − ``memory_allocated()``
  before the step) vs predicted ``allocated_peak_bytes``;
* reserved: measured ``peak_reserved_bytes`` (``max_memory_reserved()`` − ``memory_reserved()`` before)
  vs predicted ``with_history.reserved_peak_above_baseline_bytes`` (the replay that keeps what the
  warm-up step cached, as the measured process does).

The CPU half also records ``predicted_host_bytes`` (host memory live at the device peak: saved RNG
states, CPU scalars; never part of the device figures) and ``predicted_status`` (``uncalibrated``
when a convolution's cuDNN workspace is not in the calibration table; NOTE [ calibration table ]).

The two halves can run on different machines, which is how a GPU host's scarce time is spent well:
``--predict-only --predictions FILE`` measures the CPU half (the prediction memlab publishes, with the
pinned torch) and writes it; ``--predictions FILE`` on the GPU host reuses it and measures only the
GPU half.  ``--jobs N`` measures N configurations at once on the GPU, each in its own process: the
allocator's figures are per process and exact; ``device_used_bytes`` (the driver's whole-GPU figure)
is then shared and recorded as null.

Writes ``data/gpu-check/<gpu>.json`` (rewritten atomically after every configuration, so a run that
is stopped keeps what it measured): ``{"gpu", "cuda", "torch", "predicted_with_torch",
"memlab_commit", "rows": [...]}``, one row per configuration with both figures, the statuses and any
error.  Needs a CUDA GPU (exit 2 without), except with ``--predict-only``.

Example::

    python -m memlab.cuda.gpu_check --predict-only --predictions /tmp/pred.json     # any machine, CPU
    python -m memlab.cuda.gpu_check --predictions /tmp/pred.json --jobs 8 --out data/gpu-check   # GPU host
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

import memlab
from ..core.setting import DEFAULTS, Point, Setting
from ..core.atomic import write_text_atomic
from ..registry import get_technique, list_techniques

__all__ = ["configurations", "config_key", "predict", "measure_on_device", "row_for", "load_predictions", "check_all",
           "main"]

#: what identifies a configuration (the rest of a row is measured)
_CONFIG_KEYS = ("technique", "params", "mode", "optimizer")
#: the setting both halves measure with (no reference check: the sweeps verify; two steps, one timed),
#: on the CPU; the configuration sets its mode and optimizer, the GPU half its device
_COMMON = Setting(iterations=2, repeats=1, time_budget=0.0, check=False)


def configurations(reproductions: Path, quick: bool = False) -> list[dict[str, Any]]:
    """``{"technique", "params", "mode", "optimizer"}``: each built-in technique at its defaults (its
    check configuration with ``quick``), then each CPU configuration of the seed reproductions."""
    out: dict[str, dict[str, Any]] = {}
    known = set(list_techniques())
    for name in list_techniques():
        cls = get_technique(name)
        params = {**cls.workload.check_params, **cls.check_params} if quick else {}
        key = {"technique": name, "params": params, "mode": DEFAULTS.mode, "optimizer": DEFAULTS.optimizer}
        out.setdefault(config_key(key), key)
    for path in sorted(Path(reproductions).glob("*.json")):
        for m in json.loads(path.read_text()).get("measurements", []):
            # a reproduction's own technique (its deliberately leaky Function, say) is not registered here
            if m.get("device") == "cpu" and m.get("dtype") == "float32" and m.get("technique") in known:
                setting = Setting.from_row(m)
                key = {"technique": m["technique"], "params": m["params"], "mode": setting.mode,
                       "optimizer": setting.optimizer}
                out.setdefault(config_key(key), key)
    return list(out.values())


def point_of(cfg: dict[str, Any]) -> Point:
    """A configuration (technique, params, mode, optimizer; a missing or null one is the default) as
    the point its CPU half measures (:data:`_COMMON`: CPU, float32, the default loss)."""
    given = Setting.from_row({k: cfg.get(k) for k in ("mode", "optimizer")})
    return Point(cfg["technique"], cfg["params"], _COMMON.replace(mode=given.mode, optimizer=given.optimizer))


def config_key(cfg: dict[str, Any]) -> str:
    """One configuration's identity, :meth:`Point.key <memlab.core.setting.Point.key>` of :func:`point_of`,
    as a canonical JSON string (the key of a ``--predictions`` file's rows)."""
    return json.dumps(point_of(cfg).key())


def _measure(cfg: dict[str, Any], device: str):
    point = point_of(cfg)
    return memlab.measure(point.with_setting(point.setting.replace(device=device)))


def predict(cfg: dict[str, Any]) -> dict[str, Any]:
    """The CPU half of a row: the configuration measured on CPU and its predicted CUDA peaks (bytes)."""
    cpu = _measure(cfg, "cpu")
    pc = cpu.predicted_cuda or {}
    hist = pc.get("with_history") or {}
    return {"cpu_status": cpu.status, "cpu_error": cpu.error,
            "predicted_allocated_bytes": pc.get("allocated_peak_bytes"),
            "predicted_reserved_bytes": hist.get("reserved_peak_above_baseline_bytes"),
            # what the process holds at the step's peak, the warm-up's cache included (not only the growth)
            "predicted_reserved_total_bytes": hist.get("reserved_peak_bytes"),
            # host memory (RNG states, CPU scalars, offloaded copies) at the device peak: not in the figures above
            "predicted_host_bytes": pc.get("host_bytes"),
            # "uncalibrated": a convolution's cuDNN workspace is missing (memlab.cuda_replay.calibration)
            "predicted_status": pc.get("status"),
            "cpu_peak_allocated_bytes": cpu.peak_allocated_bytes}


def measure_on_device(cfg: dict[str, Any], device: str, shared: bool = False) -> dict[str, Any]:
    """The GPU half of a row (bytes).  ``shared``: other measurements run on the GPU at the same time,
    so the driver's whole-device figure is not this configuration's and is left out (null)."""
    gpu = _measure(cfg, device)
    total = None
    if gpu.peak_reserved_bytes is not None and gpu.reserved_baseline_bytes is not None:
        total = gpu.reserved_baseline_bytes + gpu.peak_reserved_bytes
    return {"status": gpu.status, "error": gpu.error, "measured_allocated_bytes": gpu.peak_allocated_bytes,
            "measured_reserved_bytes": gpu.peak_reserved_bytes, "measured_reserved_total_bytes": total,
            "device_used_bytes": None if shared else gpu.device_used_bytes}


def row_for(cfg: dict[str, Any], predictions: dict[str, Any], device: str, shared: bool = False) -> dict[str, Any]:
    """Both halves of a row: the CPU half from ``predictions`` (``config_key`` -> CPU half) or, where it
    has none, predicted here; then the configuration measured on ``device``."""
    cpu = predictions.get(config_key(cfg)) or predict(cfg)
    return {**cpu, **measure_on_device(cfg, device, shared)}


def load_predictions(path: Path) -> dict[str, Any]:
    """A ``--predict-only`` file: ``{"torch", "memlab_commit", "rows": {config_key: CPU half}}``.

    Raises:
        ValueError: naming the file, when it is not such an object.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable predictions file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict):
        raise ValueError(f"{path}: a predictions file is an object with 'rows' (config key -> CPU half); "
                         f"write one with python -m memlab.cuda.gpu_check --predict-only --predictions {path}")
    return {**data, "rows": {_rekeyed(k): v for k, v in data["rows"].items()}}


def _rekeyed(key: str) -> str:
    """A row key of an older predictions file (the configuration as a JSON object) as :func:`config_key`'s."""
    try:
        cfg = json.loads(key)
    except ValueError:
        return key
    return config_key(cfg) if isinstance(cfg, dict) and {"technique", "params"} <= cfg.keys() else key


def _row_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def check_all(cfgs: list[dict[str, Any]], half: Callable[[dict[str, Any]], dict[str, Any]], jobs: int = 1,
              on_row: Callable[[int, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """``half(cfg)`` for every configuration, ``jobs`` at a time; rows in the configurations' order.
    A configuration that raises is a row with status ``error`` (``unavailable`` when its technique
    cannot run here: a peer library missing); ``on_row(done, row)`` after each."""
    from ..technique import TechniqueUnavailable  # deferred: torch line

    rows: list[dict[str, Any] | None] = [None] * len(cfgs)
    lock = threading.Lock()
    done = 0

    def one(i: int) -> None:
        nonlocal done
        try:
            row = {**cfgs[i], **half(cfgs[i])}
        except TechniqueUnavailable as exc:  # a peer library not installed here: not a failure
            row = {**cfgs[i], "status": "unavailable", "error": _row_error(exc)}
        except Exception as exc:  # noqa: BLE001 - one configuration failing is a row, not the end
            row = {**cfgs[i], "status": "error", "error": _row_error(exc)}
        with lock:
            rows[i] = row
            done += 1
            if on_row is not None:
                on_row(done, row)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for f in as_completed([pool.submit(one, i) for i in range(len(cfgs))]):
            f.result()
    return [r for r in rows if r is not None]


def _write(target: Path, data: dict[str, Any]) -> None:
    write_text_atomic(target, json.dumps(data, sort_keys=True, indent=1) + "\n")


def _progress(total: int) -> Callable[[int, dict[str, Any]], None]:
    def show(done: int, row: dict[str, Any]) -> None:
        status = row.get("status", row.get("cpu_status"))
        print(f"[{done}/{total}] {row['technique']} {row['params']} {row['mode']}: {status}", file=sys.stderr,
              flush=True)
    return show


def _predict_only(cfgs: list[dict[str, Any]], target: Path, jobs: int) -> int:
    import torch  # deferred: torch line

    from ..measurement.environment import git_commit  # deferred: torch line

    data: dict[str, Any] = {"torch": torch.__version__, "memlab_commit": git_commit(), "rows": {}}
    show = _progress(len(cfgs))

    def on_row(done: int, row: dict[str, Any]) -> None:  # written after each: a stopped run keeps its rows
        show(done, row)
        data["rows"][config_key(row)] = {k: v for k, v in row.items() if k not in _CONFIG_KEYS}
        _write(target, data)

    check_all(cfgs, predict, jobs, on_row)
    print(target)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memlab.cuda.gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/gpu-check", help="output folder (default: %(default)s)")
    ap.add_argument("--reproductions", default="data/reproductions")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="each technique at its small check configuration only")
    ap.add_argument("--predictions", type=Path, help="the CPU half: written with --predict-only, else read (and "
                    "any configuration it lacks is predicted here)")
    ap.add_argument("--predict-only", action="store_true", help="measure the CPU half only and write --predictions")
    ap.add_argument("--jobs", type=int, default=1, help="configurations measured at once (default: %(default)s)")
    args = ap.parse_args(argv)
    if not 1 <= args.jobs <= 64:
        ap.error(f"--jobs {args.jobs} is not valid: expected a whole number from 1 to 64")
    cfgs = configurations(Path(args.reproductions), args.quick)
    if args.predict_only:
        if args.predictions is None:
            ap.error("--predict-only needs --predictions FILE (where the CPU half is written)")
        return _predict_only(cfgs, args.predictions, args.jobs)
    import torch  # deferred: torch line

    if not torch.cuda.is_available():
        print("memlab gpu-check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine with one",
              file=sys.stderr)
        return 2
    from ..measurement.environment import git_commit  # deferred: torch line

    try:
        pred = load_predictions(args.predictions) if args.predictions else {"rows": {}}
    except ValueError as exc:
        print(f"memlab gpu-check: {exc}", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(torch.device(args.device))
    target = Path(args.out) / (re.sub(r"[^a-z0-9]+", "-", props.name.lower()).strip("-") + ".json")
    data = {"gpu": props.name, "gpu_memory_bytes": props.total_memory, "cuda": torch.version.cuda,
            "torch": torch.__version__, "predicted_with_torch": pred.get("torch", torch.__version__),
            "memlab_commit": git_commit() or pred.get("memlab_commit"), "jobs": args.jobs, "rows": [],
            "note": "measured: peak above the memory held before the step on the GPU; predicted: memlab.cuda_replay.model "
                    "replayed on the CPU trace of the same configuration (reserved: with the warm-up's cache)"}

    def half(cfg: dict[str, Any]) -> dict[str, Any]:
        return row_for(cfg, pred["rows"], args.device, shared=args.jobs > 1)

    show = _progress(len(cfgs))

    def on_row(done: int, row: dict[str, Any]) -> None:
        show(done, row)
        data["rows"].append(row)
        _write(target, data)

    rows = check_all(cfgs, half, args.jobs, on_row)
    _write(target, {**data, "rows": rows})  # the configurations' order
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
