"""memlab.sharding (issue 48, first slice): the ZeRO formula, the trace repair, and one process group
of 2 gloo ranks running ddp, zero1, fsdp and fsdp without reshard-after-forward on the tiny MLP stack.

The distributed tests share one spawn (a module fixture: every strategy in one process group, about
a minute on 2 loaded cores) and skip where torch.distributed or gloo is unavailable.  They assert
bytes, never a time.
"""
from __future__ import annotations

import pytest
from gloo_checks import needs_gloo

from memlab.core.record import AllocEvent
from memlab.sharding.formulas import exact_adam_state_bytes, zero_model_state
from memlab.sharding.model import Sizes

WORLD = 2
MODELS = ("mlp", "transformer")
LABELS = ("ddp", "zero1", "fsdp", "fsdp(keep)")
CASES = [(m, label) for m in MODELS for label in LABELS]




def test_formula_divides_as_the_paper_says():
    psi, n = 1000, 4
    assert zero_model_state("ddp", psi, n).total == 16 * psi
    z1 = zero_model_state("zero1", psi, n)
    assert (z1.parameters, z1.gradients, z1.optimizer_state) == (4 * psi, 4 * psi, 8 * psi / n)
    f = zero_model_state("fsdp", psi, n)
    assert (f.parameters, f.gradients, f.optimizer_state) == (psi, psi, 2 * psi)
    mixed = zero_model_state("ddp", psi, n, param_bytes=2, grad_bytes=2, k=12)
    assert mixed.total == 16 * psi   # the paper's 2Ψ + 2Ψ + 12Ψ


@pytest.mark.parametrize("args, bad", [(("ddp3", 10, 2), "ddp3"), (("ddp", 0, 2), "psi=0"), (("fsdp", 10, 0), "world=0")])
def test_formula_names_the_bad_value(args, bad):
    with pytest.raises(ValueError, match=bad):
        zero_model_state(*args)


def test_exact_adam_bytes_count_the_step_counters():
    assert exact_adam_state_bytes([10, 3]) == 8 * 13 + 4 * 2
    with pytest.raises(ValueError, match="numels"):
        exact_adam_state_bytes([-1])


def test_sizes_refuse_a_batch_that_does_not_split():
    with pytest.raises(ValueError, match="batch=6 .* multiple of 4"):
        Sizes(batch=6).check(4)
    assert Sizes(dim=4, hidden=8, layers=2).psi == 2 * (2 * 4 * 8 + 8 + 4) + 4 * 4 + 4
    with pytest.raises(ValueError, match="dim=6 .* heads=4"):
        Sizes(model="transformer", dim=6).check(2)
    with pytest.raises(ValueError, match="model='cnn'"):
        Sizes(model="cnn").check(2)


def test_repair_closes_a_block_whose_free_was_dropped():
    from memlab.sharding.trace import repair_dropped_frees

    ev = [AllocEvent(1, 100, "a", (), address=7), AllocEvent(2, 40, "b", (), address=7),
          AllocEvent(3, -40, "b", (), address=7)]
    out, count, nbytes = repair_dropped_frees(ev)
    assert (count, nbytes) == (1, 100)
    assert [e.delta_bytes for e in out] == [100, -100, 40, -40]
    assert sum(e.delta_bytes for e in out) == 0


def test_collective_buffers_held_across_the_step_are_named():
    from memlab.sharding.report import suspect_held_bytes, with_formula

    row = {"held_outside_categories": {"aten::empty": 400, "aten::flatten_dense_tensors > aten::cat": 100,
                                       "c10d::_reduce_scatter_base_ > aten::clone > aten::empty_strided": 20},
           "peak_bytes": 1000, "strategy": "ddp", "psi": 25, "world": 2, "owned_numels": [25],
           "start": {"parameters": 100, "optimizer_state": 204}, "max": {"gradients": 100}, "peak": {}}
    assert suspect_held_bytes(row) == 120
    assert with_formula(row)["peak_without_suspect_bytes"] == 880
    row["unfreed_in_step"] = {"aten::mm": 7, "gloo:all_gather > aten::empty": 9, "FSDP::all_gather > aten::empty": 2}
    assert with_formula(row)["suspect_unfreed_bytes"] == 11


def test_launch_refuses_a_bad_world_before_spawning():
    from memlab.sharding.launch import run_sharded

    with pytest.raises(ValueError, match="world=0 .* 1..16"):
        run_sharded([("ddp", True)], 0)
    with pytest.raises(ValueError, match="strategy='zero2'"):
        run_sharded([("zero2", True)], 2)


def test_cli_plan_defaults_to_every_strategy():
    from memlab.sharding.__main__ import parse, plan_of

    assert plan_of(parse([])) == [("ddp", True), ("zero1", True), ("fsdp", True), ("fsdp", False)]
    assert plan_of(parse(["--strategy", "fsdp", "--no-reshard"])) == [("fsdp", False)]


@pytest.fixture(scope="module")
def runs():
    """Every strategy at world 2 through the command line (``--json``: one object per rank)."""
    import contextlib
    import io
    import json

    from memlab.sharding.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["--world", str(WORLD), "--json", "--model", "mlp", "--model", "transformer"])
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    by: dict = {}
    for row in rows:
        by.setdefault((row["model"], row["strategy"]), []).append(row)
        if row["model"] == "mlp":
            by.setdefault(row["strategy"], []).append(row)
    return {"status": status, **by}


@needs_gloo
def test_the_command_prints_one_object_per_rank_and_strategy(runs):
    assert runs["status"] == 0
    assert {k: [r["rank"] for r in v] for k, v in runs.items() if isinstance(k, tuple)} == \
        {(m, label): list(range(WORLD)) for m in MODELS for label in LABELS}
    for m in MODELS:
        assert runs[(m, "ddp")][0]["psi"] == Sizes(model=m).psi
    assert all("formula" in r and "optimizer_terms" in r for r in runs["fsdp"])


@needs_gloo
@pytest.mark.parametrize("case", CASES)
def test_each_strategy_matches_the_reference(runs, case):
    for row in runs[case]:
        assert row["matches"], (row["max_param_diff"], row["loss_rel_diff"], row["grad_rel_diff"])
        assert row["grad_rel_diff"] <= 1e-5
        assert len(row["losses"]) == 3   # two warm-up steps, one measured


@needs_gloo
@pytest.mark.parametrize("case", CASES)
def test_parameters_and_gradients_equal_the_formula_to_the_byte(runs, case):
    from memlab.sharding.report import formula, model_state

    for row in runs[case]:
        m, f = model_state(row), formula(row)
        assert m["parameters"] == f["parameters"]
        assert m["gradients"] == f["gradients"]


@needs_gloo
@pytest.mark.parametrize("case", CASES)
def test_optimizer_state_is_the_owned_parameters_state(runs, case):
    from memlab.sharding.report import optimizer_terms

    for row in runs[case]:
        assert row["start"]["optimizer_state"] == row["exact_optimizer_state_bytes"]
        assert optimizer_terms(row)["unexplained"] == 0


@needs_gloo
@pytest.mark.parametrize("model", MODELS)
def test_zero1_partitions_the_optimizer_state(runs, model):
    rows = runs[(model, "zero1")]
    psi = rows[0]["psi"]
    assert sum(sum(r["owned_numels"]) for r in rows) == psi          # every parameter owned once
    assert all(sum(r["owned_numels"]) < psi for r in rows)
    ddp_state = runs[(model, "ddp")][0]["start"]["optimizer_state"]
    assert sum(r["start"]["optimizer_state"] for r in rows) == ddp_state


@needs_gloo
@pytest.mark.parametrize("model", MODELS)
def test_fsdp_shards_hold_a_world_th_of_every_tensor(runs, model):
    for label in ("fsdp", "fsdp(keep)"):
        for row in runs[(model, label)]:
            assert sum(row["local_param_numels"]) * WORLD == row["psi"]
    for ddp in runs[(model, "ddp")]:
        # DDP's gradient buckets (4Ψ) live between steps, beside them at times a buffer whose free the
        # trace dropped (docs/sharding.md#dropped-frees)
        assert ddp["start"]["temporaries"] >= 4 * ddp["psi"]


@needs_gloo
def test_rank_line_names_each_difference(runs):
    from memlab.sharding.report import rank_line, with_formula

    row = runs["zero1"][0]
    line = rank_line(row)
    assert line.startswith("mlp zero1 rank 0/2: peak ")
    assert "partition" in line and "step counters" in line and "check ok" in line
    assert with_formula(row)["peak_minus_formula"]["inputs"] == row["peak"]["inputs"]
