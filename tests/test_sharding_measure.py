"""``memlab measure --shard-strategy`` (issue 48 item 1): bad sharding options refused before torch
with the bad value and the valid range, each rank printed with the peak ``run_sharded`` measures,
and the bytes each collective holds at a rank's peak, checked on the committed rows against the
bytes the shapes say (an all-gather output is one block's gathered parameters, DDP's bucket 4Ψ).

The two spawns (the tiny MLP stack on 2 gloo ranks) assert bytes, never a time.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from gloo_checks import needs_gloo
from process_checks import cli_probe as _probe

from memlab.cli.options import MAX_SHARD_WORLD, SHARD_SIZES, SHARD_STRATEGIES, SHARDED_MODELS
from memlab.sharding.layout import F32, gathered_numels
from memlab.sharding.predict import total_numel
from memlab.sharding.report import collective_bytes, listed_at_peak_bytes, measure_lines

DATA = Path(__file__).resolve().parents[1] / "data" / "sharding"
#: the tiny MLP stack of the spawned runs: Ψ = 2·(2·8·16 + 16 + 8) + 8·8 + 8 = 632
TINY = ["--param", "dim=8", "--param", "hidden=16", "--param", "layers=2", "--param", "batch=4"]


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line]


def test_the_cli_s_torch_free_copies_equal_memlab_sharding_s():
    from memlab.sharding.formulas import STRATEGIES
    from memlab.sharding.launch import MAX_WORLD
    from memlab.sharding.model import MODELS, Sizes

    assert SHARD_SIZES == {f.name: f.default for f in dataclasses.fields(Sizes) if f.name not in ("model", "checkpoint_blocks")}
    assert SHARDED_MODELS == MODELS and MAX_SHARD_WORLD == MAX_WORLD and SHARD_STRATEGIES == ("none", *STRATEGIES)


@pytest.mark.parametrize("argv, words", [
    (["measure", "--world", "2"], "--world needs --shard-strategy; valid: --shard-strategy ddp|zero1|fsdp"),
    (["measure", "--model", "transformer"], "--model transformer needs --shard-strategy"),
    (["measure", "--shard-strategy", "ddp", "--world", "17"], "--world 17 is not valid; valid: 1..16"),
    (["measure", "--shard-strategy", "ddp", "--world", "0"], "--world 0 is not valid; valid: 1..16"),
    (["measure", "--shard-strategy", "ddp", "--world", "3"], "--param batch=16 is not valid at world 3; valid: a multiple of 3"),
    (["measure", "--shard-strategy", "fsdp", "--world", "4", "--param", "batch=10"], "batch=10 is not valid at world 4"),
    (["measure", "plain", "--shard-strategy", "ddp"], "a technique name ('plain') is not valid with --shard-strategy"),
    (["measure", "--shard-strategy", "zero1", "--no-reshard"], "--no-reshard is not valid with --shard-strategy zero1"),
    (["measure", "--shard-strategy", "ddp", "--dtype", "bfloat16"], "--dtype 'bfloat16' is not valid with --shard-strategy"),
    (["measure", "--shard-strategy", "ddp", "--param", "depth=3"], "--param depth is not valid with --shard-strategy; valid: dim"),
    (["measure", "--shard-strategy", "ddp", "--param", "dim=0"], "--param dim=0 is not valid; valid: an int >= 1"),
    (["measure", "--shard-strategy", "zero2"], "invalid choice: 'zero2'"),
    (["advise", "--shard-strategy", "fsdp", "--world", "1", "--budget", "1GiB"], "--world 1 is not valid with --shard-strategy fsdp; valid: 2..1024"),
    (["advise", "--shard-strategy", "ddp", "--world", "2000", "--budget", "1GiB"], "--world 2000 is not valid"),
    (["advise", "--shard-strategy", "fsdp", "--world", "64"], "needs --budget"),
    (["advise", "--shard-strategy", "fsdp", "--world", "64", "--budget", "80GiB", "--fit-worlds", "1,17"],
     "--fit-worlds '17' is not valid; valid: comma-separated ints in 1..16"),
    (["advise", "--shard-strategy", "fsdp", "--world", "64", "--budget", "lots"], "--budget 'lots' is not a memory size"),
    (["advise", "--shard-strategy", "fsdp", "--world", "64", "--budget", "1GiB", "--fit-worlds", "4,5"],
     "--param batch=24 is not valid at world 5"),
    (["advise", "--rows", "x.jsonl", "--budget", "1GiB"], "--rows needs --shard-strategy"),
    (["advise", "--model", "transformer", "--budget", "1GiB"], "--model transformer needs --shard-strategy"),
])
def test_bad_sharding_options_are_refused_before_torch(argv, words):
    rc, torch_modules, err = _probe(argv)
    assert rc == 2, err
    assert torch_modules == [], f"torch imported before the refusal: {torch_modules[:5]}"
    assert words in err, err


def test_each_collective_holds_what_the_shapes_say_at_fsdp_s_peak():
    """MLP stack, fsdp, N = 2 and 4, peak in backward: the prefetched all-gather output is one block's
    gathered parameters, the reduce-scatter input the same bytes, its output one shard of them, and
    the parameters gathered (copied out) those of one block and the root."""
    rows = [r for r in _rows("mlp-g24.jsonl") if r["strategy"] == "fsdp" and r["world"] in (2, 4)]
    assert rows
    for r in rows:
        block = [tuple(s) for s, u in zip(r["param_shapes"], r["param_units"]) if u == 0]
        gathered = F32 * gathered_numels(block, r["world"])
        held = collective_bytes(r)
        assert listed_at_peak_bytes(r) == r["peak_bytes"]
        assert held["all-gather output (FSDP)"] == {"temporaries": gathered}
        assert held["reduce-scatter (FSDP)"] == {"temporaries": gathered, "gradients": gathered // r["world"]}
        root = [tuple(s) for s, u in zip(r["param_shapes"], r["param_units"]) if u < 0]
        # one block's and the root's parameters, unsharded (the head's gradient is being computed)
        assert held["gathered parameters (FSDP all-gather copy-out)"] == \
            {"temporaries": gathered + F32 * gathered_numels(root, r["world"])}


def _bucket_bounds(row: dict) -> tuple[int, int]:
    """DDP's bucket, 4Ψ bytes, and at most the rebuild leftovers beside it (4 bytes, 4·(tensors + 1):
    NOTE [ DDP's rebuild leftovers ])."""
    psi4 = F32 * total_numel([tuple(s) for s in row["param_shapes"]])
    return psi4, psi4 + 4 + 4 * (len(row["param_shapes"]) + 1)


def test_ddp_s_bucket_is_four_psi_at_its_peak():
    rows = [r for r in _rows("mlp-g24.jsonl") + _rows("transformer-g24.jsonl") if r["strategy"] == "ddp"]
    assert rows
    for r in rows:
        low, high = _bucket_bounds(r)
        assert low <= collective_bytes(r)["gradient buckets (DDP all-reduce)"]["temporaries"] <= high


@needs_gloo
def test_measure_prints_each_rank_s_peak_as_run_sharded_measures_it(capsys):
    from memlab.cli import main
    from memlab.sharding import run_sharded
    from memlab.sharding.model import Sizes

    assert main(["measure", "--shard-strategy", "fsdp", "--world", "2", *TINY]) == 0
    out = capsys.readouterr().out
    [rows] = run_sharded([("fsdp", True)], 2, Sizes(dim=8, hidden=16, layers=2, batch=4))
    for r in rows:
        first, *rest = measure_lines(r)
        assert f"rank {r['rank']}/2: peak {r['peak_bytes']:,} B in " in first
        for line in [first.split(";")[0], *rest]:   # the check's float differences aside
            assert line in out, out
    assert out.count("check ok") == 2 and out.count("held by collectives at the peak") == 2


@needs_gloo
def test_measure_json_is_one_object_per_rank_with_collectives(capsys):
    from memlab.cli import main

    assert main(["measure", "--shard-strategy", "ddp", "--world", "1", "--json", *TINY]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["world"] == 1 and row["matches"] and row["collectives_exact"]
    low, high = _bucket_bounds(row)
    assert low <= row["collective_bytes"]["gradient buckets (DDP all-reduce)"]["temporaries"] <= high
    assert row["peak_bytes"] == sum(row["peak"].values())


def test_the_cuda_floor_counts_the_allocator_s_rounding():
    from memlab.sharding.reserved import cuda_floor

    assert cuda_floor([(4, 3)]) == {"allocated_floor_bytes": 1536, "reserved_floor_bytes": 2 * 2**20,
                                    "small_bytes": 1536, "large_bytes": 0}
    big = cuda_floor([(2**20 + 1, 1), (0, 5)])
    assert big["large_bytes"] == big["reserved_floor_bytes"] == 2**20 + 512
    with pytest.raises(ValueError, match=r"block \(-1, 1\) is not valid"):
        cuda_floor([(-1, 1)])


@pytest.mark.parametrize("name", ["mlp-g24.jsonl", "gpt2-tiny-g24.jsonl"])
def test_the_cuda_floor_is_below_the_allocator_replayed_on_the_live_blocks(name):
    """Every committed rank's live blocks allocated through memlab's model of the caching allocator
    (in any order, all live) reserve at least the floor and allocate at least its allocated bytes."""
    from memlab.cuda_replay.model import simulate
    from memlab.sharding.reserved import cuda_floor, live_blocks

    for r in _rows(name)[::5]:
        blocks = live_blocks(r)
        sizes = [n for n, k in sorted(blocks) for _ in range(k)]
        floor = cuda_floor(blocks)
        for order in (sizes, sizes[::-1]):
            stats = simulate([("alloc", i, n) for i, n in enumerate(order)])
            assert stats.peak_reserved_bytes >= floor["reserved_floor_bytes"]
            assert stats.peak_allocated_bytes >= floor["allocated_floor_bytes"]
        assert floor["allocated_floor_bytes"] >= r["peak_bytes"]
