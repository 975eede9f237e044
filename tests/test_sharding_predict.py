"""memlab.sharding's prediction for other N: the shard layout from shapes (FSDP2's padded dim-0
chunks, ZeRO-1's greedy ownership) against torch's own algorithms, the exact fit on synthetic
points, the committed runs (data/sharding/) predicted at N = 2 and 4 to the byte from fits at
N = 1, 3, 6, 8, and one fresh spawned run: the small MLP stack at N = 2 under ddp, zero1 and fsdp,
each rank equal to the prediction fitted on the stored runs at the other N.

The spawn (two ranks, three strategies) runs once for the module; it asserts bytes, never a time.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from gloo_checks import gloo_available, needs_gloo

from memlab.sharding.layout import (ceil_div, fsdp_rows, gathered_numels, local_numels, model_state_bytes,
                                    padded_numels, zero1_owners)
from memlab.sharding.predict import Point, fit_category

#: the worlds the stored runs are fitted at (data/sharding/: N = 1, 2, 3, 4, 6, 8 at G = 24)
STORED_FIT = (1, 3, 6, 8)
CHECK_WORLD = 2
DATA = Path(__file__).resolve().parents[1] / "data" / "sharding"




@pytest.mark.parametrize("d0", [1, 5, 7, 16, 33, 100])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 6, 8, 64])
def test_fsdp_rows_follow_torch_chunk(d0, world):
    import torch

    chunks = [c.shape[0] for c in torch.chunk(torch.empty(d0), world)]
    chunks += [0] * (world - len(chunks))
    assert [fsdp_rows(d0, world, r) for r in range(world)] == chunks
    assert sum(chunks) == d0
    assert all(rows <= ceil_div(d0, world) for rows in chunks)


def test_padding_is_ceil_division_of_dim0():
    shapes = [(32, 8), (32,), (5, 2, 3)]
    assert padded_numels(shapes, 3) == [11 * 8, 11, 2 * 6]
    assert gathered_numels(shapes, 3) == 3 * (88 + 11 + 12)
    assert local_numels(shapes, 3, 2) == [10 * 8, 10, 1 * 6]
    state = model_state_bytes("fsdp", shapes, 3, 2)
    assert state["parameters"] == 4 * (88 + 11 + 12)            # padded storage on every rank
    assert state["optimizer_state"] == 8 * (80 + 10 + 6) + 4 * 3  # moments of the unpadded rows, 3 steps


def test_zero1_ownership_is_torch_greedy_partition():
    import torch

    if not gloo_available():
        pytest.skip("torch.distributed with gloo is unavailable")
    from torch.distributed.optim import ZeroRedundancyOptimizer

    numels = [30, 10, 30, 5, 1, 12, 12]
    assert zero1_owners(numels, 2) == [0, 0, 1, 1, 1, 0, 1]
    for world in (2, 3, 5):
        params = [torch.nn.Parameter(torch.zeros(n)) for n in numels]
        # ZeroRedundancyOptimizer's own partition method on a bare instance (no process group needed)
        opt = ZeroRedundancyOptimizer.__new__(ZeroRedundancyOptimizer)
        opt.param_groups, opt.world_size, opt._partition_parameters_cache = [{"params": params}], world, []
        per_rank = opt._partition_parameters()
        owner = {id(p): r for r, groups in enumerate(per_rank) for g in groups for p in g["params"]}
        assert zero1_owners(numels, world) == [owner[id(p)] for p in params]


def test_model_state_ddp_and_zero1_sum_to_the_whole():
    shapes = [(30,), (10,), (30,), (5,), (1,)]
    ddp = model_state_bytes("ddp", shapes, 4, 0)
    assert ddp == {"parameters": 4 * 76, "gradients": 4 * 76, "optimizer_state": 8 * 76 + 4 * 5}
    z = [model_state_bytes("zero1", shapes, 4, r)["optimizer_state"] for r in range(4)]
    assert sum(z) == ddp["optimizer_state"]


@pytest.mark.parametrize("world, rank, match", [(0, 0, "world=0 .* >= 1"), (2, 2, "rank=2 .* 0..1"), (2, -1, "rank=-1")])
def test_layout_names_a_bad_world_or_rank(world, rank, match):
    with pytest.raises(ValueError, match=match):
        fsdp_rows(4, world, rank)


def test_fit_recovers_counts_and_predicts_exactly():
    def truth(n, b):
        return 100 + 48 * b + 2 * (1000 + (n % 3) * 12) + 1 * (300 // n)

    pts = [Point(24 // n, {"g": 1000 + (n % 3) * 12, "s": 300 // n}, truth(n, 24 // n)) for n in (1, 3, 6, 8)]
    cf = fit_category(pts, {"g": range(4), "s": range(3)})
    assert cf.exact and cf.counts == {"g": 2, "s": 1}
    assert (cf.c0, cf.c1) == (100, 48)
    assert cf.value(12, {"g": 1024, "s": 150}) == truth(2, 12)


def test_a_shard_on_a_line_in_b_is_fixed_only_without_a_per_sample_term():
    """NOTE [ which buffers each category holds ]: at N = 2, 3, 6 of G = 24 the transformer block's
    shard (from the shapes) lies on a line in b = 24/N, so with a per-sample term every shard count
    reproduces the points; without one (the gradients) only the true count does, and it predicts
    N = 4, where the shard leaves the line."""
    from memlab.sharding.predict import _ranges, features

    shapes = [(32,), (32,), (96, 32), (96,), (32, 32), (32,), (32,), (32,), (128, 32), (128,), (32, 128), (32,)]
    units = [0] * len(shapes)
    shard = {n: features("fsdp", shapes, units, n, 0)["block_shard"] for n in (2, 3, 4, 6)}
    assert (shard[2] - shard[3]) * 2 == shard[2] - shard[6]    # b = 12, 8, 4: on one line
    assert (shard[2] - shard[4]) * 4 != (shard[2] - shard[6]) * 3    # b = 6 is off it
    pts = [Point(24 // n, {"block_shard": shard[n]}, 3 * shard[n]) for n in (2, 3, 6)]
    counts = range(5)
    free = fit_category(pts, {"block_shard": counts})
    assert len(free.alternatives) == len(counts) - 1    # every count fits the three points
    fixed = fit_category(pts, {"block_shard": counts}, per_sample=False)
    assert fixed.exact and fixed.counts == {"block_shard": 3} and fixed.alternatives == [] and fixed.c1 == 0
    assert fixed.value(6, {"block_shard": shard[4]}) == 3 * shard[4]
    assert "block_shard" not in _ranges("fsdp", 3, "saved_activations")
    assert set(_ranges("fsdp", 3, "gradients")) == {"block_shard", "root_shard"}
    with pytest.raises(ValueError, match="category='peak' is not valid; valid: inputs, "):
        _ranges("fsdp", 3, "peak")


def test_fit_says_when_nothing_fits_exactly():
    pts = [Point(b, {}, y) for b, y in ((1, 10), (2, 20), (3, 31))]
    cf = fit_category(pts, {})
    assert not cf.exact
    assert sum(cf.residuals) == 0 and max(abs(r) for r in cf.residuals) > 0
    assert isinstance(cf.c1, Fraction)


def test_predict_cli_refuses_bad_worlds():
    from memlab.sharding.predict_cli import main
    from memlab.sharding.sweep_plan import parse_worlds

    assert parse_worlds("6,1,3,3", "--fit") == [1, 3, 6]
    for bad, shown in (("0,2", "'0'"), ("x", "'x'"), ("17", "'17'"), (",", "','")):
        with pytest.raises(ValueError, match=f"^--fit {shown} is not valid; valid: comma-separated ints in 1..16"):
            parse_worlds(bad, "--fit")
    assert parse_worlds("none", "--check-worlds", none_ok=True) == []
    with pytest.raises(ValueError, match="--world 'none' is not valid"):
        parse_worlds("none")
    assert main(["--fit", "0"]) == 2


def _stored(name: str) -> list[dict]:
    import json

    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.parametrize("name", ["transformer-g24.jsonl", "mlp-g24.jsonl"])
def test_stored_runs_are_predicted_to_the_byte(name):
    """The committed runs (data/sharding/README.md): fitted at N = 1, 3, 6, 8, every rank at N = 2 and 4
    equals its prediction, for ddp, zero1 and fsdp; the rebuild leftover is a few bytes at most."""
    from memlab.sharding.predict import check, fit

    rows = _stored(name)
    f = fit([r for r in rows if r["world"] in STORED_FIT])
    checks = check(f, [r for r in rows if r["world"] in (2, 4)])
    assert {c["strategy"] for c in checks} == {"ddp", "zero1", "fsdp"}
    assert len(checks) == 3 * (2 + 4)
    assert [(c["strategy"], c["world"], c["rank"], c["diff"]) for c in checks if c["diff"] != 0] == []
    assert all(c["leftover"] <= 4 * (len(rows[0]["param_shapes"]) + 2) for c in checks)
    # the phase each checked rank peaks in is fitted exactly in every category
    assert all(cf.exact for c in checks for cf in f.categories[c["strategy"]][c["predicted_phase"]].values())
    assert all(c["phase"] == c["predicted_phase"] for c in checks)


def test_stored_gpt2_ddp_and_zero1_are_predicted_to_the_byte():
    """examples/gpt2.py (tiny): fitted at N = 1, 3, 6 (N = 8's backward highest point lies elsewhere:
    docs/sharding.md#prediction), ddp and zero1 at N = 2 and 4 equal their prediction on every rank."""
    from memlab.sharding.predict import check, fit

    rows = [r for r in _stored("gpt2-tiny-g24.jsonl") if r["strategy"] in ("ddp", "zero1")]
    f = fit([r for r in rows if r["world"] in (1, 3, 6)])
    checks = check(f, [r for r in rows if r["world"] in (2, 4)])
    assert len(checks) == 2 * (2 + 4)
    assert [(c["strategy"], c["world"], c["rank"], c["diff"]) for c in checks if c["diff"] != 0] == []


def test_stored_gpt2_fsdp_is_predicted_to_the_byte():
    """examples/gpt2.py (tiny) under fsdp: fitted at N = 3, 6 (4 and 8 sequences per rank) and N = 8 at
    G = 32 (4 per rank), every rank at N = 2 and 4 equals its prediction; the constant is the 72 bytes
    of fixed temporaries, the root's and a block's gathered bytes counted once each."""
    from memlab.sharding.predict import check, fit

    rows = [r for r in _stored("gpt2-tiny-g24.jsonl") if r["strategy"] == "fsdp"]
    f = fit([r for r in rows if r["world"] in (3, 6)] + _stored("gpt2-tiny-g32-fsdp-n8.jsonl"))
    temps = f.categories["fsdp"]["backward"]["temporaries"]
    assert (temps.c0, temps.counts) == (72, {"block_gathered": 1, "root_gathered": 1, "world": 3})
    checks = check(f, [r for r in rows if r["world"] in (2, 4)])
    assert len(checks) == 2 + 4
    assert [(c["world"], c["rank"], c["diff"]) for c in checks if c["diff"] != 0] == []


@pytest.fixture(scope="module")
def fresh_n2():
    """The MLP stack (global batch 24) under ddp, zero1 and fsdp, measured now at N = 2."""
    from memlab.sharding.launch import run_sharded
    from memlab.sharding.model import Sizes

    plan = [("ddp", True), ("zero1", True), ("fsdp", True)]
    return [row for per in run_sharded(plan, CHECK_WORLD, Sizes(batch=24)) for row in per]


@needs_gloo
def test_layout_equals_what_each_rank_holds(fresh_n2):
    from memlab.sharding.layout import owned_numels

    for row in fresh_n2 + _stored("mlp-g24.jsonl"):
        shapes = [tuple(s) for s in row["param_shapes"]]
        base = row["strategy"].split("(")[0]
        assert sorted(row["owned_numels"]) == sorted(owned_numels(base, shapes, row["world"], row["rank"]))
        state = model_state_bytes(base, shapes, row["world"], row["rank"])
        assert row["start"]["parameters"] == state["parameters"]
        assert row["start"]["optimizer_state"] == state["optimizer_state"]


@needs_gloo
def test_a_fresh_n2_run_equals_the_prediction_from_other_n(fresh_n2):
    """Fitted on the stored runs at N = 1, 3, 6, 8 only; each rank measured now at N = 2."""
    from memlab.sharding.predict import check, fit

    f = fit([r for r in _stored("mlp-g24.jsonl") if r["world"] in STORED_FIT])
    checks = check(f, fresh_n2)
    assert sorted((c["strategy"], c["rank"]) for c in checks) == \
        sorted((s, r) for s in ("ddp", "zero1", "fsdp") for r in range(CHECK_WORLD))
    assert [(c["strategy"], c["rank"], c["measured"], c["diff"]) for c in checks if c["diff"] != 0] == []
    assert all(row["matches"] for row in fresh_n2)
