"""Activation checkpointing under a sharding strategy (``--checkpoint-blocks``,
:mod:`memlab.sharding.checkpointing`): the same maths as the plain step, fewer saved activations,
and exactly the bytes the shapes say.

Two spawns of 2 gloo ranks, each running the plain and the checkpointed model in one process group:
the transformer under FSDP2 and the MLP stack under DDP (whose parameters never count as saved
activations, so its saved bytes are activations only).  Bytes are asserted, never a time.
"""
from __future__ import annotations

import pytest
from gloo_checks import needs_gloo

WORLD = 2


@pytest.fixture(scope="module")
def transformer_fsdp():
    """``{False: ranks, True: ranks}``: the default transformer (D 32, 4 heads, T 16, L 3, G 16) under fsdp."""
    from memlab.sharding import run_sharded
    from memlab.sharding.model import Sizes

    plain, ckpt = run_sharded([("fsdp", True)], WORLD, [Sizes(model="transformer"),
                                                        Sizes(model="transformer", checkpoint_blocks=True)])
    return {False: plain, True: ckpt}


@pytest.fixture(scope="module")
def mlp_ddp():
    """``{False: ranks, True: ranks}``: the default MLP stack (D 32, F 128, L 3, G 16) under ddp."""
    from memlab.sharding import run_sharded
    from memlab.sharding.model import Sizes

    plain, ckpt = run_sharded([("ddp", True)], WORLD, [Sizes(), Sizes(checkpoint_blocks=True)])
    return {False: plain, True: ckpt}


def _saved(row: dict, phase: str | None = None) -> int:
    cats = row["peak"] if phase is None else row["phase_peaks"][phase]["categories"]
    return cats["saved_activations"]


def transformer_block_saved_besides_input(b: int, t: int, d: int, heads: int) -> int:
    """Bytes one eager :class:`~memlab.families.transformer.workload.Block` saves for backward besides
    its input [b, T, D] (float32 unless said): ln1's output, q, k, v made contiguous [b, T, 3D], the
    scaled q, the attention output, the residual after attention, ln2's output (D each), fc1's
    output and gelu's output (4D each): 16·D per token; the two LayerNorms' mean and rstd [b, T, 1]
    each; the softmax [b, H, T, T]; the causal mask [T, T] (bool, 1 byte)."""
    return 4 * b * t * 16 * d + 4 * 4 * b * t + 4 * b * heads * t * t + t * t


def mlp_block_saved_besides_input(b: int, hidden: int) -> int:
    """Bytes one MLP :class:`~memlab.sharding.model.Block` saves besides its input [b, D] and its
    weights (parameters): ``up``'s output (gelu's input) and gelu's output (``down``'s input), [b, F]
    float32 each."""
    return 2 * 4 * b * hidden


@needs_gloo
@pytest.mark.parametrize("fixture", ["transformer_fsdp", "mlp_ddp"])
def test_checkpointed_ranks_match_the_single_process_reference(fixture, request):
    runs = request.getfixturevalue(fixture)
    for row in runs[True]:
        assert row["checkpoint_blocks"] is True and row["sizes"]["checkpoint_blocks"] is True
        assert row["matches"], (row["rank"], row["max_param_diff"], row["loss_rel_diff"], row["grad_rel_diff"])
    assert all(row["checkpoint_blocks"] is False for row in runs[False])


@needs_gloo
def test_checkpointing_keeps_each_block_s_input_and_one_block_recomputed_transformer(transformer_fsdp):
    """The saved activations' most at any moment of the step (``max``): the plain step holds every
    block's saved tensors at the end of forward; the checkpointed one at most every block's input
    [b, T, D] (block 0's is the embeddings' sum) plus one block's recomputed tensors, in the last
    block's backward: exactly L·4·b·T·D + one block's saved bytes besides its input, from the shapes.
    At the end of forward (the forward phase's highest point, in both) they differ by exactly L
    blocks' saved bytes besides their inputs (the root's saved tensors are the same in both).  The
    per-rank peak and the saved bytes at it fall."""
    from memlab.sharding.model import Sizes

    s = Sizes(model="transformer")
    b = s.batch // WORLD
    block_input = 4 * b * s.seq * s.dim
    per_block = transformer_block_saved_besides_input(b, s.seq, s.dim, s.heads)
    for plain, ckpt in zip(transformer_fsdp[False], transformer_fsdp[True]):
        assert ckpt["max"]["saved_activations"] == s.layers * block_input + per_block
        assert plain["max"]["saved_activations"] >= s.layers * (block_input + per_block)
        assert _saved(plain, "forward") - _saved(ckpt, "forward") == s.layers * per_block
        assert _saved(ckpt) < _saved(plain)
        assert ckpt["peak_bytes"] < plain["peak_bytes"]


@needs_gloo
def test_checkpointing_keeps_each_block_s_input_and_one_block_recomputed_mlp(mlp_ddp):
    """The MLP stack under DDP (its weights are parameters, never saved activations): the plain
    step's most saved bytes, at the end of forward, are the inputs of blocks 1..L-1 (block 0's is
    the batch, an input), the head's and the loss's inputs, [b, D] each, and L blocks' [b, F]
    pairs; the checkpointed step's most, in the last block's backward, the inputs of blocks 1..L-1
    and one block's recomputed pair.  Each checkpoint keeps the CPU RNG state besides (a
    temporary), and the peak falls in the optimizer step with no activation live: the saved bytes
    at the peak do not rise (0 in both)."""
    from memlab.sharding.model import Sizes

    s = Sizes()
    b = s.batch // WORLD
    row_in, pair = 4 * b * s.dim, mlp_block_saved_besides_input(b, s.hidden)
    for plain, ckpt in zip(mlp_ddp[False], mlp_ddp[True]):
        assert plain["max"]["saved_activations"] == (s.layers + 1) * row_in + s.layers * pair
        assert ckpt["max"]["saved_activations"] == (s.layers - 1) * row_in + pair
        assert _saved(ckpt) <= _saved(plain)


def test_sizes_refuse_a_checkpoint_flag_that_is_not_a_bool():
    from memlab.sharding.model import Sizes

    with pytest.raises(ValueError, match=r"checkpoint_blocks='yes' is not valid; valid: True or False"):
        Sizes(checkpoint_blocks="yes").check(2)


@pytest.mark.parametrize("argv, words", [
    (["measure", "--checkpoint-blocks"], "--checkpoint-blocks needs --shard-strategy; valid: --shard-strategy "
                                         "ddp|zero1|fsdp (on one process: the technique checkpoint_blocks"),
    (["advise", "--checkpoint-blocks", "--budget", "1GiB"], "--checkpoint-blocks needs --shard-strategy"),
    (["measure", "--shard-strategy", "ddp", "--checkpoint-blocks", "--world", "17"], "--world 17 is not valid"),
    (["sweep", "--checkpoint-blocks"], "--checkpoint-blocks needs --shard-strategy (a sweep of the sharded step)"),
])
def test_checkpoint_blocks_without_a_strategy_is_refused_before_torch(argv, words):
    from process_checks import cli_probe

    rc, torch_modules, err = cli_probe(argv)
    assert rc == 2, err
    assert torch_modules == [], f"torch imported before the refusal: {torch_modules[:5]}"
    assert words in err, err


@needs_gloo
def test_a_checkpointed_sweep_s_rows_say_so_and_advise_reads_them_apart(tmp_path, capsys):
    """``memlab sweep --checkpoint-blocks``: every row carries ``"checkpoint_blocks": true`` and the
    table names the run ``ddp+ckpt``; ``memlab advise --rows`` fits such rows only with
    ``--checkpoint-blocks`` and, without it, says which rows the file holds."""
    import contextlib
    import io
    import json

    from memlab.cli import main

    path = tmp_path / "ckpt.jsonl"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["sweep", "--shard-strategy", "ddp", "--world", "1,2", "--model", "mlp", "--batch", "8",
                       "--checkpoint-blocks", "--out", str(path)])
    assert status == 0, out.getvalue()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(rows) == 3 and all(r["checkpoint_blocks"] is True and r["matches"] for r in rows)
    assert "ddp+ckpt" in out.getvalue()
    capsys.readouterr()
    argv = ["advise", "--model", "mlp", "--shard-strategy", "ddp", "--world", "8", "--budget", "1MiB",
            "--rows", str(path), "--fit-worlds", "1,2", "--check-worlds", "none"]
    assert main(argv) == 2
    assert "--rows hold no rows of model 'mlp' under ddp; valid: one of mlp ddp --checkpoint-blocks" \
        in capsys.readouterr().err
    with contextlib.redirect_stdout(io.StringIO()) as answer:
        main([*argv, "--checkpoint-blocks"])
    assert answer.getvalue().startswith("mlp, every block checkpointed, under ddp at N = 8 ranks")


def test_the_advise_cache_keeps_checkpointed_runs_apart(tmp_path):
    """NOTE [ sharded rows cache ]: the key hashes the sizes, ``checkpoint_blocks`` among them, and a
    cached file of the other setting does not read as this run's rows."""
    import json

    from memlab.cli.options import SHARD_SIZES
    from memlab.sharding.advise_rows import _cached, rows_key

    plain = dict(SHARD_SIZES, model="mlp", checkpoint_blocks=False)
    ckpt = {**plain, "checkpoint_blocks": True}
    assert rows_key(plain, "fsdp", 2) != rows_key(ckpt, "fsdp", 2)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"strategy": "fsdp", "world": 2, "checkpoint_blocks": False}) + "\n"
                            for _ in range(2)))
    assert _cached(path, "fsdp", 2, False) is not None and _cached(path, "fsdp", 2, True) is None


def _advise(argv: list[str]) -> tuple[int, dict]:
    import contextlib
    import io
    import json

    from memlab.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = main(["advise", "--model", "transformer", "--shard-strategy", "fsdp", "--world", "64",
                       "--budget", "1GiB", "--json", *argv])
    return status, json.loads(out.getvalue())


def test_advise_answers_from_the_committed_checkpointed_rows_exactly_at_n_3_6_8():
    """data/sharding/transformer-ckpt-g24-fsdp.jsonl (docs/sharding.md#checkpointing-under-a-sharding-strategy):
    fitted at N = 3, 6, 8 every rank at N = 2 and 4 is predicted to the byte, and the answer holds
    more sequences per rank than the plain step's from its own committed rows at the same points;
    the default points (2, 3, 6, checked at 4) give the same answer, exactly (NOTE [ which buffers
    each category holds ] in memlab/sharding/predict.py: before it they missed N = 4 by 1,592 B)."""
    from pathlib import Path

    data = str(Path(__file__).resolve().parents[1] / "data" / "sharding") + "/"
    points = ["--fit-worlds", "3,6,8", "--check-worlds", "2,4"]
    status, ckpt = _advise([*points, "--checkpoint-blocks", "--rows", data + "transformer-ckpt-g24-fsdp.jsonl"])
    assert status == 0 and ckpt["doubts"] == [] and ckpt["checkpoint_blocks"] is True
    assert len(ckpt["checks"]) == 6 and all(int(c["diff"]) == 0 for c in ckpt["checks"])
    status, plain = _advise([*points, "--rows", data + "transformer-g24.jsonl"])
    assert status == 0 and ckpt["batch_per_rank"] > plain["batch_per_rank"]
    status, default = _advise(["--checkpoint-blocks", "--rows", data + "transformer-ckpt-g24-fsdp.jsonl"])
    assert status == 0 and default["doubts"] == [] and default["batch_per_rank"] == ckpt["batch_per_rank"]


def test_measure_says_checkpointing_was_on(monkeypatch, capsys):
    """``memlab measure --shard-strategy fsdp --checkpoint-blocks``: the head line says every block was
    checkpointed and the step gets ``Sizes(checkpoint_blocks=True)`` (the ranks' rows stand in for
    a run: the committed checkpointed rows at N = 2)."""
    import json
    from pathlib import Path

    import memlab.sharding
    from memlab.cli import main

    path = Path(__file__).resolve().parents[1] / "data" / "sharding" / "transformer-ckpt-g24-fsdp.jsonl"
    rows = [r for r in map(json.loads, path.read_text().splitlines()) if r["world"] == 2]
    asked = []

    def fake_run(plan, world, sizes, device):
        asked.append((plan, world, sizes))
        return [rows]

    monkeypatch.setattr(memlab.sharding, "run_sharded", fake_run)
    argv = ["measure", "--model", "transformer", "--shard-strategy", "fsdp", "--world", "2", "--param", "batch=24"]
    assert main([*argv, "--checkpoint-blocks"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith("; every block checkpointed (non-reentrant torch.utils.checkpoint)"), head
    assert asked[0][2].checkpoint_blocks is True
    assert main(argv) == 0
    assert "checkpointed" not in capsys.readouterr().out.splitlines()[0]
    assert asked[1][2].checkpoint_blocks is False


def test_a_fit_refuses_checkpointed_and_plain_rows_together():
    import json
    from pathlib import Path

    from memlab.sharding.predict import fit

    data = Path(__file__).resolve().parents[1] / "data" / "sharding"
    ckpt = [json.loads(line) for line in (data / "transformer-ckpt-g24-fsdp.jsonl").read_text().splitlines()]
    plain = [r for r in map(json.loads, (data / "transformer-g24.jsonl").read_text().splitlines())
             if r["strategy"] == "fsdp" and r["world"] in (3, 6, 8)]
    assert fit([r for r in ckpt if r["world"] in (3, 6, 8)]).categories and fit(plain).categories
    with pytest.raises(ValueError, match="rows of checkpointed and plain steps together are not valid"):
        fit(plain + ckpt)
