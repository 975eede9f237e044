"""Each seed reproduction's configurations predicted for a GPU under several ``PYTORCH_CUDA_ALLOC_CONF``
settings (``make cuda-variants``; read by the site's seed pages, :mod:`memlab.site.cuda`).

For every distinct configuration measured in ``data/reproductions/<seed>.json`` (technique, parameters,
mode, optimizer, loss; CPU float32 rows), one CPU training step is traced as memlab's measurement traces
it and replayed through the caching-allocator model under each setting of :data:`CONFS`
(NOTE [ predicted CUDA memory ] in :mod:`memlab.cuda_replay.prediction`).  A seed whose reproduction module
defines a ``cuda_variants(confs, quick)`` hook adds the keys it returns (the chunked-slicing seed: its
``slice_backward`` answer, does reserved memory grow with the number of chunks where allocated does
not?).  Everything written is predicted.

Example::

    python -m memlab.cuda.variants --out data/cuda-variants          # every seed in data/reproductions
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from ..core.record import WHOLE_STATUSES
from ..core.setting import Setting
from ..cuda_replay.prediction import predict_cuda
from ..registry import get_technique

__all__ = ["CONFS", "seed_variants", "main"]

#: allocator settings compared: the default, expandable segments, and a split limit (no block above
#: 20 MiB is split, so large cached blocks are not carved up for small requests)
CONFS = ("", "expandable_segments:True", "max_split_size_mb:20")
_FIGURES = ("allocated_peak_bytes", "allocated_peak_total_bytes", "reserved_peak_bytes",
            "reserved_peak_above_baseline_bytes", "fragmentation_at_peak_bytes", "segments_peak", "cpu_peak_bytes")


def _configs(seed: dict[str, Any]) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for m in seed.get("measurements", []):
        if m.get("device") != "cpu" or m.get("dtype") != "float32" or m.get("status") not in WHOLE_STATUSES:
            continue
        setting = Setting.from_row(m)
        key = {"technique": m["technique"], "params": m["params"], "mode": setting.mode,
               "optimizer": setting.optimizer, "loss": setting.loss}
        out.setdefault(json.dumps(key, sort_keys=True), key)
    return list(out.values())


def seed_variants(seed: dict[str, Any], confs: tuple[str, ...] = CONFS, say=print) -> dict[str, Any]:
    """The predicted rows of one reproduction (a dict as in ``data/reproductions``); imports torch."""
    from ..measurement.alloc_trace import trace_step  # deferred: torch line
    from ..measurement.environment import git_commit  # deferred: torch line

    rows = []
    for cfg in _configs(seed):
        say(f"  {cfg['technique']} {cfg['params']} {cfg['mode']}")
        try:
            technique = get_technique(cfg["technique"])(**cfg["params"])
            events, windows = trace_step(technique, mode=cfg["mode"], optimizer=cfg["optimizer"], loss=cfg["loss"])
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run here is recorded, not fatal
            rows += [{**cfg, "conf": c, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
                     for c in confs]
            continue
        for conf in confs:
            p = predict_cuda(events, windows, conf=conf, with_history=False)
            rows.append({**cfg, "conf": conf, **{k: p.get(k) for k in _FIGURES}, "would_oom": p["would_oom"]})
        del events, windows
        gc.collect()
    import torch  # deferred: torch line

    out = {"seed": seed["seed"], "confs": list(confs), "rows": rows, "predicted": True,
           "method": "one CPU float32 training step per configuration traced as memlab measures it, replayed through "
                     "memlab.cuda_replay.model (PyTorch's CUDA caching allocator, one stream) from a cache holding only the "
                     "baseline; figures are totals (max_memory_allocated / max_memory_reserved) in bytes",
           "torch": torch.__version__, "memlab_commit": git_commit()}
    # the seed's module found by name, as the registry finds the built-in packages: the hook is the
    # reproduction's to declare, and this package needs no import edge to the reproductions
    reproductions = importlib.import_module("memlab.reproductions")
    hook = getattr(reproductions.find_reproduction(seed["seed"]), "cuda_variants", None)
    if hook is not None:  # the seed's own question (its reproduction module answers it)
        say(f"  {seed['seed']}: cuda_variants hook")
        out.update(hook(confs=confs, quick=bool(seed.get("quick"))))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memlab.cuda.variants", description=__doc__.splitlines()[0])
    ap.add_argument("--reproductions", default="data/reproductions", help="folder of <seed>.json (default: %(default)s)")
    ap.add_argument("--out", default="data/cuda-variants", help="output folder (default: %(default)s)")
    ap.add_argument("--seed", action="append", help="only these seeds (repeatable)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(args.reproductions).glob("*.json")):
        seed = json.loads(path.read_text())
        if args.seed and seed.get("seed") not in args.seed:
            continue
        print(f"{seed['seed']}:", file=sys.stderr)
        data = seed_variants(seed, say=lambda m: print(m, file=sys.stderr))
        target = out / f"{seed['seed']}.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n")
        tmp.replace(target)
        print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
