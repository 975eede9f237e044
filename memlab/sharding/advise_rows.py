"""The per-rank rows a sharded answer is fitted on: read from JSON Lines files (``--rows``), or run
at a few small worlds and cached (``memlab advise --shard-strategy``).

# NOTE [ sharded rows cache ]
A run's rows are kept per world in ``<cache>/sharding/<model>[-ckpt]-<label>-n<N>-<key>.jsonl``, ``key``
a hash of everything the bytes depend on: the model file's bytes (or the built-in model's name), the
sizes (``checkpoint_blocks`` among them: ``-ckpt``), the strategy label, N, the torch version and the source of the step, its trace and its
categories (:data:`STEP_SOURCES`: a change to what the step allocates runs it again).  A file that
does not read as rows of that run is run again.  The cache is ``--models DIR``, else
``$MEMLAB_CACHE``, else ``~/.cache/memlab/advise``, as for ``memlab advise --model``.
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
from pathlib import Path
from typing import Callable

from ..core.atomic import write_text_atomic
from .predict import base_strategy

__all__ = ["read_rows", "cached_rows", "cache_root", "rows_key", "STEP_SOURCES"]

_HERE = Path(__file__).resolve().parent
#: the sources whose change can change a run's bytes (the step, its trace and categories)
STEP_SOURCES = tuple(_HERE / n for n in ("launch.py", "worker.py", "trace.py", "strategies.py", "model.py",
                                          "model_file.py", "checkpointing.py")) + \
    tuple(_HERE.parent / "measurement" / n for n in ("alloc_trace.py", "categories.py")) + \
    (_HERE.parent / "functional" / "blocks.py",)


def _same_model(a: str, b: str) -> bool:
    if a.endswith(".py") and b.endswith(".py"):
        return os.path.normpath(a) == os.path.normpath(b) or Path(a).resolve() == Path(b).resolve()
    return a == b


def _checkpointed(row: dict) -> bool:
    """Whether the row's step checkpointed every block (a row from before the option: no)."""
    return row.get("checkpoint_blocks", False) is True


def read_rows(paths: list[Path], model: str, label: str, checkpoint_blocks: bool = False) -> list[dict]:
    """Rows of ``model`` under strategy ``label`` from JSON Lines ``paths`` (as ``python -m
    memlab.sharding predict --save`` writes them), with every block checkpointed or not as
    ``checkpoint_blocks`` says; ValueError naming the models and labels the files hold when none
    match, FileNotFoundError naming a missing file."""
    rows = []
    for p in paths:
        if not Path(p).is_file():
            raise FileNotFoundError(f"--rows {str(p)!r} does not exist")
        rows += [json.loads(line) for line in Path(p).read_text(encoding="utf-8").splitlines() if line.strip()]
    mine = [r for r in rows if _same_model(r.get("model", ""), model) and r.get("strategy") == label
            and _checkpointed(r) == checkpoint_blocks]
    if not mine:
        held = sorted({f"{r.get('model')} {r.get('strategy')}{' --checkpoint-blocks' if _checkpointed(r) else ''}"
                       for r in rows})
        asked = f"{label}{' --checkpoint-blocks' if checkpoint_blocks else ''}"
        raise ValueError(f"--rows hold no rows of model {model!r} under {asked}; valid: one of {', '.join(held) or '(none)'}")
    return mine


def cache_root(root: Path | None) -> Path:
    """``root``, else ``$MEMLAB_CACHE``, else ``$XDG_CACHE_HOME/memlab/advise``; then ``sharding/``."""
    if root is None:
        env = os.environ.get("MEMLAB_CACHE")
        root = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memlab" / "advise"
    return Path(root) / "sharding"


def rows_key(sizes: dict, label: str, world: int) -> str:
    """The cache key of one run (NOTE [ sharded rows cache ]): 16 hex digits."""
    h = hashlib.sha256()
    model = sizes["model"]
    h.update(Path(model).read_bytes() if model.endswith(".py") else model.encode())
    try:
        torch_version = md.version("torch")
    except md.PackageNotFoundError:
        torch_version = None
    key = {k: v for k, v in sizes.items() if k != "model"}
    h.update(json.dumps([key, label, world, torch_version], sort_keys=True).encode())
    for src in STEP_SOURCES:
        h.update(src.read_bytes())
    return h.hexdigest()[:16]


def _cached(path: Path, label: str, world: int, checkpointed: bool) -> list[dict] | None:
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    ok = len(rows) == world and all(r.get("strategy") == label and r.get("world") == world and
                                    _checkpointed(r) == checkpointed for r in rows)
    return rows if ok else None


def cached_rows(sizes: dict, label: str, worlds: list[int], root: Path | None,
                say: Callable[[str], None] = lambda _: None) -> list[dict]:
    """The rows of ``sizes`` (``Sizes`` keywords) under ``label`` (``fsdp(keep)``: fsdp without
    reshard-after-forward) at each of ``worlds``: from the cache, else run (one process group per
    world) and cached (NOTE [ sharded rows cache ])."""
    folder = cache_root(root)
    stem = Path(sizes["model"]).stem + ("-ckpt" if sizes.get("checkpoint_blocks") else "")
    out = []
    for n in worlds:
        path = folder / f"{stem}-{label}-n{n}-{rows_key(sizes, label, n)}.jsonl"
        rows = _cached(path, label, n, sizes.get("checkpoint_blocks", False) is True)
        if rows is None:
            from .launch import run_sharded  # deferred: torch line
            from .model import Sizes  # deferred: torch line

            say(f"memlab: running {sizes['model']} {label} on {n} rank(s) (global batch {sizes['batch']}); "
                f"cached in {path}")
            [rows] = run_sharded([(base_strategy(label), label == base_strategy(label))], n, Sizes(**sizes))
            write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))
        out += rows
    return out
