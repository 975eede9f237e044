"""Starting the N rank processes and collecting their figures.

The parent spawns ``world`` fresh interpreters (``torch.multiprocessing.spawn``: no forked copy of a
parent's thread pools), which meet through a file store in a private temporary directory (no port to
find or race for), run :func:`memlab.sharding.worker.rank_main` and write one JSON file each; a rank
that raises makes ``spawn`` raise in the parent with its traceback.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from .formulas import STRATEGIES
from .model import Sizes

__all__ = ["run_sharded", "Plan", "MAX_WORLD"]

#: ``[(strategy, reshard_after_forward), ...]``: one traced step per entry, in one process group
Plan = list[tuple[str, bool]]
#: most ranks one host's run may start (each is a process with its own torch)
MAX_WORLD = 16


def run_sharded(plan: Plan, world: int, sizes: Sizes | list[Sizes] = Sizes(), device: str = "cpu") -> list[list[dict]]:
    """Run every ``plan`` entry for each model of ``sizes`` (one or a list) on ``world`` ranks
    (1..:data:`MAX_WORLD`; 1 runs the strategy's code on a group of one), all in one process group; one list per (model, entry), models outer, of
    one figure dict per rank (rank order), as :func:`memlab.sharding.worker.run_strategy` returns them."""
    if not isinstance(world, int) or not 1 <= world <= MAX_WORLD:
        raise ValueError(f"world={world!r} is not valid; valid: an int in 1..{MAX_WORLD}")
    for strategy, _ in plan:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy={strategy!r} is not valid; valid strategies: {', '.join(STRATEGIES)}")
    models = [sizes] if isinstance(sizes, Sizes) else list(sizes)
    for s in models:
        s.check(world)
    import torch.multiprocessing as mp  # deferred: torch line

    from .worker import rank_main  # deferred: torch line

    with tempfile.TemporaryDirectory(prefix="memlab-sharding-") as tmp:
        store = str(Path(tmp) / "store")
        mp.spawn(rank_main, args=(world, store, tmp, list(plan), models, device), nprocs=world, join=True)
        per_rank = [json.loads((Path(tmp) / f"rank{r}.json").read_text(encoding="utf-8")) for r in range(world)]
    return [[per_rank[r][i] for r in range(world)] for i in range(len(plan) * len(models))]
