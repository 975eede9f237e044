"""The plan of a sharded sweep (``memlab sweep --shard-strategy ... --world ...``) and what its rows
say, without torch: the command line checks its values here before torch is imported, and the site
and ``memlab merge`` read the rows with it.

A sharded sweep runs one traced step (:func:`memlab.sharding.launch.run_sharded`) per
:class:`ShardedRun`: a model, a strategy label and a world size N at one global batch G.  Each run
writes one JSON line per rank: the rank row of :func:`memlab.sharding.worker.run_strategy` (bytes
as ints, its ``machine``), ``"kind": "sharded"`` first (:data:`SHARDED_KIND`: readers tell these rows
from a technique sweep's Measurements by it), ``"sweep"`` (where and how the run ran: executor,
seconds, load, cores, torch, commit) and, in a shard of a sweep, ``"sweep_shard"`` (the plan's
record, as :mod:`memlab.sweep.shard` writes it for technique rows, with every planned run named).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from ..core.row_kinds import SHARDED_KIND, is_sharded_row
from .formulas import STRATEGIES

__all__ = ["SHARDED_KIND", "STRATEGY_NAMES", "BUILTIN_MODELS", "MAX_WORLD", "DEFAULT_BATCH", "ShardedRun",
           "parse_strategies", "parse_worlds", "check_batch", "plan_runs", "plan_from_options", "is_sharded_row", "run_key",
           "rank_key", "EXACT_FIELDS", "finished_runs", "planned_key"]

#: ``--shard-strategy`` names -> (strategy, reshard_after_forward); ``fsdp_keep`` is FSDP2 with
#: ``reshard_after_forward=False``, whose rows say ``fsdp(keep)`` (the label
#: :func:`memlab.sharding.strategies.strategy_label` gives it; accepted as a name too)
STRATEGY_NAMES = {**{s: (s, True) for s in STRATEGIES}, "fsdp_keep": ("fsdp", False), "fsdp(keep)": ("fsdp", False)}
#: the built-in models of the sharded step (:data:`memlab.sharding.model.MODELS`, which imports torch;
#: tests/test_sharding_sweep.py keeps the two equal)
BUILTIN_MODELS = ("mlp", "transformer")
#: most ranks one run may start (:data:`memlab.sharding.launch.MAX_WORLD`; the test keeps them equal)
MAX_WORLD = 16
#: the global batch G when ``--batch`` is not given (``Sizes.batch``; the test keeps them equal)
DEFAULT_BATCH = 16
#: the figures two rows of one rank must agree on to be one row (``memlab merge``): bytes, exact
EXACT_FIELDS = ("psi", "peak_bytes", "peak_above_start_bytes", "start", "peak", "end", "max", "local_param_numels",
                "owned_numels", "matches")


@dataclass(frozen=True)
class ShardedRun:
    """One traced step: ``model`` (``mlp``, ``transformer`` or a model file's path), ``strategy`` (one
    of :data:`~memlab.sharding.formulas.STRATEGIES`), ``reshard`` (FSDP's ``reshard_after_forward``),
    ``world`` N ranks, global ``batch`` G (rows or sequences; G / N per rank), ``checkpoint_blocks``
    (every block under activation checkpointing: :mod:`memlab.sharding.checkpointing`)."""

    model: str
    strategy: str
    reshard: bool
    world: int
    batch: int
    checkpoint_blocks: bool = False

    @property
    def label(self) -> str:
        """The strategy as the rows name it: ``fsdp(keep)`` for FSDP without resharding."""
        return f"{self.strategy}(keep)" if self.strategy == "fsdp" and not self.reshard else self.strategy

    def key(self) -> tuple[str, str, int, int, bool]:
        """``(model, strategy label, world, global batch, checkpoint_blocks)``: what :func:`run_key`
        reads off its rows."""
        return self.model, self.label, self.world, self.batch, self.checkpoint_blocks

    def plan_key(self) -> list:
        """The run as plain data, for a shard's canonical order and the plan's digest (:mod:`memlab.sweep.shard`)."""
        return list(self.key())

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "strategy": self.strategy, "reshard": self.reshard, "world": self.world,
                "batch": self.batch, "checkpoint_blocks": self.checkpoint_blocks}


def _split(text: str) -> list[str]:
    return [x.strip() for x in str(text).split(",") if x.strip()]


def parse_strategies(text: str) -> list[tuple[str, bool]]:
    """``"ddp,zero1,fsdp,fsdp_keep"`` -> ``[(strategy, reshard), ...]`` (repeats dropped); ValueError
    naming the bad value and the valid names."""
    names = _split(text)
    valid = ", ".join(n for n in STRATEGY_NAMES if n != "fsdp(keep)")
    bad = [n for n in names if n not in STRATEGY_NAMES]
    if not names or bad:
        shown = bad[0] if bad else text
        raise ValueError(f"--shard-strategy {shown!r} is not valid; valid: comma-separated names of {valid} "
                         f"(fsdp_keep: FSDP2 with reshard_after_forward=False)")
    return list(dict.fromkeys(STRATEGY_NAMES[n] for n in names))


def parse_worlds(text: str, option: str = "--world", *, none_ok: bool = False) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]`` (sorted, repeats dropped): the one parser of a world list, for
    ``memlab sweep --world``, ``memlab advise --fit-worlds/--check-worlds`` and ``python -m
    memlab.sharding predict --fit/--check``.  ``option`` is the option's name as the user typed it;
    with ``none_ok``, ``"none"`` is the empty list.  ValueError naming the option and its first bad
    value (valid: ints 1..:data:`MAX_WORLD`)."""
    if none_ok and text.strip() == "none":
        return []
    valid = f"valid: comma-separated ints in 1..{MAX_WORLD} (ranks), e.g. 1,2,4{' or none' if none_ok else ''}"
    out = []
    for word in _split(text):
        try:
            n = int(word)
        except ValueError:
            n = None
        if n is None or not 1 <= n <= MAX_WORLD:
            raise ValueError(f"{option} {word!r} is not valid; {valid}")
        out.append(n)
    if not out:
        raise ValueError(f"{option} {text!r} is not valid; {valid}")
    return sorted(set(out))


def check_batch(batch: int, worlds: Iterable[int]) -> None:
    """ValueError unless the global batch ``batch`` (rows or sequences, >= 1) splits evenly over every
    world size (each rank takes G / N of it)."""
    worlds = list(worlds)
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"--batch {batch!r} is not valid; valid: an int >= 1 (the global batch G)")
    bad = [n for n in worlds if batch % n]
    if bad:
        lcm = 1
        for n in worlds:
            lcm = lcm * n // _gcd(lcm, n)
        raise ValueError(f"--batch {batch} is not valid with --world {','.join(map(str, worlds))}: {batch} rows do not "
                         f"split evenly over {bad[0]} ranks; valid: a multiple of every world size (of {lcm})")


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def plan_runs(models: Iterable[str], strategies: Iterable[tuple[str, bool]], worlds: Iterable[int],
              batch: int, checkpoint_blocks: bool = False) -> list[ShardedRun]:
    """Every (model, strategy, world) at global batch ``batch``: models outer, then worlds, then strategies."""
    return [ShardedRun(m, s, reshard, n, batch, checkpoint_blocks) for m in dict.fromkeys(models) for n in worlds
            for s, reshard in strategies]


def plan_from_options(strategies: str, worlds: str | None, batch: int | None, models: list[str],
                      device: str = "cpu", checkpoint_blocks: bool = False) -> list[ShardedRun]:
    """The runs ``memlab sweep --shard-strategy STRATEGIES --world WORLDS [--batch G] [--model M]...
    [--device D] [--checkpoint-blocks]`` asks for (:func:`plan_runs`; models default to ``mlp``, G to
    :data:`DEFAULT_BATCH`), each value checked: ValueError naming the bad one and the valid range."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device {device!r} is not valid with --shard-strategy; valid: cpu (gloo) or cuda "
                         f"(nccl: rank r on cuda:r)")
    plan = parse_strategies(strategies)
    if worlds is None:
        raise ValueError(f"--shard-strategy needs --world N1,N2,... (ranks, 1..{MAX_WORLD}), e.g. --world 1,2,4")
    ns = parse_worlds(worlds)
    batch = DEFAULT_BATCH if batch is None else batch
    check_batch(batch, ns)
    for m in models:
        if m not in BUILTIN_MODELS and not m.endswith(".py"):
            raise ValueError(f"--model {m!r} is not valid with --shard-strategy; valid: {', '.join(BUILTIN_MODELS)} "
                             f"or a model file (*.py)")
    return plan_runs(models or ["mlp"], plan, ns, batch, checkpoint_blocks)


def run_key(row: dict) -> tuple[str, str, int, int, bool]:
    """``(model, strategy label, world, global batch, checkpoint_blocks)`` of a rank row
    (:meth:`ShardedRun.key`; a row without ``checkpoint_blocks``, from before the option, ran without)."""
    return (str(row["model"]), str(row["strategy"]), int(row["world"]), int(row["sizes"]["batch"]),
            row.get("checkpoint_blocks", False) is True)


def planned_key(key: list) -> tuple[str, str, int, int, bool]:
    """A run as a shard's record lists it (:meth:`ShardedRun.plan_key`) as a :func:`run_key`: a record
    written before ``checkpoint_blocks`` lists four fields (those runs ran without)."""
    return (*key, False) if len(key) == 4 else tuple(key)


def rank_key(row: dict) -> tuple:
    """What identifies one rank's row: its run's key, every size of the model, and the rank."""
    return (*run_key(row), json.dumps(row["sizes"], sort_keys=True), int(row["rank"]))


def finished_runs(rows: Iterable[dict]) -> set[tuple[str, str, int, int, bool]]:
    """The run keys whose every rank (0..N-1) has a row among ``rows`` (``--resume`` skips them)."""
    ranks: dict[tuple, set[int]] = {}
    for row in rows:
        if is_sharded_row(row):
            try:
                ranks.setdefault(run_key(row), set()).add(int(row["rank"]))
            except (KeyError, TypeError, ValueError):
                continue
    return {key for key, seen in ranks.items() if seen >= set(range(key[2]))}
