"""Your own model (memlab.own_model): a model file measured, checked and swept like a family; bad files
are one line and exit 2; the techniques for any model find the repeated blocks and save what they say."""
import json
from pathlib import Path

import pytest
import torch
from torch import nn

import memlab
from memlab.cli import main
from memlab.functional.blocks import find_blocks, resolve_blocks
from memlab.own_model import load_model, model_techniques
from memlab.own_model.workload import ModelFileError

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

ROOT = Path(__file__).resolve().parents[1]
CHAIN = ROOT / "tests" / "models" / "chain_blocks.py"
EXAMPLES = ROOT / "examples"
FAST = ["--iterations", "2", "--repeats", "1", "--time-budget", "0"]


def _module(path):
    """A model file's module, as the registry imported it."""
    import sys

    load_model(path)
    return next(m for n, m in sys.modules.items() if n.startswith("memlab_plugin_") and n.endswith(Path(path).stem))


def _example(name):
    return _module(EXAMPLES / name)


# -- finding blocks --------------------------------------------------------------------------------
def test_blocks_of_the_examples_are_found_without_being_named():
    gpt = find_blocks(_example("tiny_gpt.py").build())
    assert (gpt.paths, gpt.count, gpt.block_type) == (("blocks",), 4, "Block")
    cnn = find_blocks(_example("small_cnn.py").build())  # the three stages, not the Sequential inside each block
    assert (cnn.paths, cnn.count, cnn.block_type) == (("stage1", "stage2", "stage3"), 9, "ResBlock")


def test_a_list_of_layers_is_not_taken_for_blocks():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = nn.Linear(2, 2)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleList(nn.Linear(2, 2) for _ in range(6))  # layers: longer, never chosen
            self.body = nn.ModuleList(Block() for _ in range(3))
            self.mixed = nn.ModuleList([Block(), nn.Linear(2, 2)])         # not of one type

    found = find_blocks(Net())
    assert (found.paths, found.count, found.found_by) == (("body",), 3, "guess")
    given = resolve_blocks(Net(), "mixed")
    assert (given.count, given.block_type, given.found_by) == (2, "Block, Linear", "given")
    with pytest.raises(ValueError, match=r"blocks='nope': the model has no submodule 'nope'; its lists of "
                                         r"same-type blocks: 'body' \(3 x Block\)$"):
        resolve_blocks(Net(), "nope")
    with pytest.raises(ValueError, match=r"'body.0' is a Block, not an nn.ModuleList or nn.Sequential"):
        resolve_blocks(Net(), "body.0")
    assert find_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) is None


# -- bad files: one line each ----------------------------------------------------------------------
GOOD_BATCH = "def batch(size):\n    return torch.randn(size, 3)\n"
GOOD_BUILD = "def build():\n    return nn.Linear(3, 2)\n"
BAD_FILES = {
    "no_build": (GOOD_BATCH, r"model file no_build\.py has no build\(\) function \(memlab calls build\(\) for the "
                             r"model\); a model file defines build\(\)"),
    "no_batch": (GOOD_BUILD, r"model file no_batch\.py has no batch\(\) function"),
    "build_int": ("def build():\n    return 3\n" + GOOD_BATCH,
                  r"model file build_int\.py: build\(\) returned a int; expected a torch\.nn\.Module"),
    "no_params": ("def build():\n    return nn.ReLU()\n" + GOOD_BATCH,
                  r"model file no_params\.py: build\(\) returned a ReLU with no trainable parameters"),
    "batch_str": (GOOD_BUILD + "def batch(size):\n    return 'x' * size\n",
                  r"model file batch_str\.py: batch\(1\) returned something memlab cannot feed: batch\(1\) is a str"),
    "batch_list_int": (GOOD_BUILD + "def batch(size):\n    return torch.randn(size, 3), size\n",
                       r"batch\(1\)\[1\] is a int: expected a tensor, or a tuple/list/dict"),
    "same_size": (GOOD_BUILD + "def batch(size):\n    return torch.randn(4, 3)\n",
                  r"model file same_size\.py: batch\(1\) and batch\(2\) give the same shapes \[\(4, 3\)\]: "
                  r"batch\(size\) must make `size` samples"),
    "loss_vector": (GOOD_BUILD + GOOD_BATCH + "def loss(output, batch):\n    return output\n",
                    r"model file loss_vector\.py: loss\(output, batch\) returned a torch\.float32 tensor of shape "
                    r"\[1, 2\]; expected a floating scalar"),
    "raises": ("1 / 0\n" + GOOD_BUILD + GOOD_BATCH,
               r"model file raises\.py failed to import: ZeroDivisionError: division by zero"),
    "build_raises": ("def build():\n    raise RuntimeError('no weights here')\n" + GOOD_BATCH,
                     r"model file build_raises\.py: build\(\) raised RuntimeError: no weights here"),
    "nothing": ("X = 1\n", r"model file nothing\.py defines neither build\(\) nor batch\(\)"),
}


@pytest.mark.parametrize("stem", sorted(BAD_FILES))
def test_a_bad_model_file_is_one_line_naming_it(stem, tmp_path):
    body, match = BAD_FILES[stem]
    path = tmp_path / f"{stem}.py"
    path.write_text("import torch\nfrom torch import nn\n" + body)
    with pytest.raises(ModelFileError, match=match):
        load_model(path)


def test_bad_model_file_on_the_command_line_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "bad_cli.py"
    path.write_text("import torch\nfrom torch import nn\n" + BAD_FILES["same_size"][0])
    for argv in (["measure", "--model", str(path)], ["check", "--model", str(path)],
                 ["sweep", "--model", str(path), "--grid", "batch=1,2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("memlab: error: model file bad_cli.py: batch(1) and batch(2)") and "\n" not in err
    assert main(["measure", "--model", str(tmp_path / "absent.py")]) == 2
    assert capsys.readouterr().err.strip().endswith("absent.py' does not exist")


def test_a_technique_that_needs_blocks_refuses_a_model_without_them(tmp_path, capsys):
    path = tmp_path / "flat_mlp.py"
    path.write_text("import torch\nfrom torch import nn\n"
                    "def build():\n    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))\n" + GOOD_BATCH)
    assert main(["measure", "checkpoint_blocks", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert "technique 'flat_mlp__checkpoint_blocks' does not apply to model:flat_mlp: the model has no " \
           "nn.ModuleList or nn.Sequential of two or more same-type blocks; name the list of blocks with --blocks" in err
    assert main(["measure", "checkpoint_blocks", "--model", str(path), "--blocks", "nope"]) == 2
    assert "blocks='nope': the model has no submodule 'nope'" in capsys.readouterr().err
    assert main(["measure", "offload_activations", "--model", str(path)]) == 2
    assert "does not support device 'cpu'; supported: cuda" in capsys.readouterr().err
    assert main(["measure", "nope", "--model", str(path)]) == 2
    assert "unknown technique 'nope' for a model file; available: plain, checkpoint_blocks" in capsys.readouterr().err


def test_the_loss_option_does_not_apply(capsys):
    assert main(["measure", "--model", str(CHAIN), "--loss", "mse"]) == 2
    assert "loss='mse' does not apply to a model file" in capsys.readouterr().err


def test_checkpoint_sqrt_refuses_a_model_that_does_more_between_its_blocks(tmp_path):
    path = tmp_path / "scaled_chain.py"
    path.write_text(CHAIN.read_text().replace("x = block(x)", "x = 0.5 * block(x)"))
    technique = memlab.get_technique(model_techniques(path)["checkpoint_sqrt"])(batch=2)
    problem = technique.build(torch.device("cpu"), torch.float64, 0)
    with pytest.raises(ValueError, match=r"checkpoint_sqrt: blocks\[1\] was not called right after blocks\[0\] "
                                         r"on its output .*use checkpoint_blocks"):
        technique.forward(problem)


# -- a model file is a family ----------------------------------------------------------------------
def test_a_model_file_registers_a_family_with_every_technique():
    workload = load_model(CHAIN)
    assert (workload.name, workload.family, workload.samples_param) == ("model_chain_blocks", "model:chain_blocks", "batch")
    assert list(model_techniques(CHAIN).items()) == [(k, f"chain_blocks__{k}") for k in (
        "plain", "checkpoint_blocks", "checkpoint_sqrt", "selective_checkpoint", "autocast_bf16", "offload_activations", "lora")]
    plain = memlab.get_technique("chain_blocks__plain")
    assert plain.baseline and memlab.get_technique("chain_blocks__checkpoint_blocks").twin == "chain_blocks__plain"
    assert plain.source_file() == str(CHAIN)  # the measuring child imports the file by this path
    assert load_model(_module(CHAIN).build) is workload  # a build function stands for its file
    load_model(EXAMPLES / "tiny_gpt.py")  # batch(size, seq=32): seq is a size parameter too
    assert memlab.get_technique("tiny_gpt__plain").all_params()["seq"].default == 32


def test_measure_check_and_sweep_from_the_command_line(tmp_path, capsys):
    assert main(["measure", "checkpoint_blocks", "--model", str(CHAIN), "--param", "batch=4", "--json", *FAST]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (rec["status"], rec["family"], rec["workload"], rec["technique"]) == (
        "ok", "model:chain_blocks", "model_chain_blocks", "chain_blocks__checkpoint_blocks")
    assert rec["matches_reference"] is True and rec["check_dtype"] == "float64" and rec["params"]["batch"] == 4
    assert sum(rec["peak_by_category_bytes"].values()) == rec["total_peak_bytes"]
    # predicted CUDA: the same trace replayed through the allocator model; host tensors (the RNG states a
    # checkpoint keeps) are left out of it, so it may be below the CPU peak
    assert rec["predicted_cuda"]["allocated_peak_bytes"] > 0 and rec["step_time_s"] > 0
    assert (rec["extra"]["blocks"], rec["extra"]["block_count"], rec["extra"]["blocks_found_by"]) == ("blocks", 8, "guess")

    assert main(["check", "--model", str(CHAIN)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert sorted(line.split()[0] for line in lines) == ["PASS"] * 6 + ["SKIP"]  # lora included
    assert any(line.startswith("SKIP  chain_blocks__offload_activations") for line in lines)

    out = tmp_path / "rows.jsonl"
    assert main(["sweep", "--model", str(CHAIN), "--technique", "checkpoint_sqrt", "--grid", "batch=1,2",
                 "--blocks", "blocks", "--out", str(out), *FAST]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["technique"], r["params"]["batch"], r["status"]) for r in rows] == [
        ("chain_blocks__checkpoint_sqrt", 1, "ok"), ("chain_blocks__checkpoint_sqrt", 2, "ok")]
    assert rows[0]["extra"]["blocks_found_by"] == "given" and rows[0]["extra"]["segments"] == [3]
    from memlab.results import load_runs  # the site's reader takes the rows as they are

    runs = load_runs([out])
    assert list(runs["family"]) == ["model:chain_blocks"] * 2 and list(runs["status"]) == ["ok", "ok"]


# -- the techniques save what they say --------------------------------------------------------------
def _measured(kind, batch):
    m = memlab.measure_model(CHAIN, kind, batch=batch, isolate=False, iterations=2, repeats=1, time_budget=0)
    assert m.status == "ok", m.error
    return m


def test_checkpoint_blocks_saves_each_blocks_tanh_output_less_the_rng_state_it_keeps():
    """tests/models/chain_blocks.py: N blocks h -> h + tanh(linear(h)) on [B, D] float32.

    Plain autograd keeps, per block, the tanh output (saved by tanh) and the block output (saved by
    the next linear, or the loss): 2N [B, D] tensors, exactly the saved activations at its peak.
    ``checkpoint_blocks`` keeps each block's input only (the previous output, already alive), so it
    drops the N tanh outputs; in exchange each non-reentrant checkpoint keeps the CPU RNG state
    (``preserve_rng_state``: ``torch.get_rng_state()``, 5056 bytes) until its block's backward.
    The step peaks fall at the same point of backward, so the saving is exactly
    N * (B * D * 4 - rng state bytes).  Measured at B = 96 (not a size used to find the formula).
    """
    chain = _module(CHAIN)
    n, d, b = chain.N, chain.D, 96
    plain, ckpt = _measured("plain", b), _measured("checkpoint_blocks", b)
    assert plain.peak_by_category_bytes["saved_activations"] == 2 * n * b * d * 4
    assert ckpt.extra["block_count"] == n and ckpt.extra["blocks"] == "blocks"
    rng = torch.get_rng_state().numel()
    assert plain.peak_allocated_bytes - ckpt.peak_allocated_bytes == n * (b * d * 4 - rng)
    assert plain.extra["activation_peak_bytes"] - ckpt.extra["activation_peak_bytes"] == n * (b * d * 4 - rng)


def test_the_readme_model_file_is_a_model_file(tmp_path):
    """The example a newcomer copies from README's 'Your own model' loads, and its blocks are found."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Your own model"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("\n```\n")]
    path = tmp_path / "readme_model.py"
    path.write_text(code + "\n")
    module = _module(path)
    found = find_blocks(module.build())
    assert (found.paths, found.count, found.block_type) == (("blocks",), 8, "Block")
    assert load_model(path).family == "model:readme_model"


# -- dropout stays on (NOTE [ dropout stays on ]) ---------------------------------------------------
ENCODER = EXAMPLES / "encoder_dropout.py"
SAME_STREAM = "dropout on; technique and reference seeded alike before each step's forward (same masks)"
GENERIC = ("plain", "checkpoint_blocks", "checkpoint_sqrt", "selective_checkpoint", "autocast_bf16")


@pytest.mark.parametrize("kind", GENERIC)
def test_the_dropout_encoder_is_ok_with_every_generic_technique(kind):
    """examples/encoder_dropout.py: dropout 0.1 on, two inputs (a dict batch), a dict output carrying
    the loss; every step checked against the reference drawing the same random stream."""
    m = memlab.measure_model(ENCODER, kind, batch=2, isolate=False, iterations=2, repeats=1, time_budget=0)
    assert (m.status, m.matches_reference) == ("ok", True), m.error
    assert (m.extra["dropout_modules"], m.extra["check_randomness"]) == (10, SAME_STREAM)
    if kind != "plain" and kind != "autocast_bf16":
        assert (m.extra["blocks"], m.extra["block_count"], m.extra["blocks_found_by"]) == ("layers", 3, "guess")


DROPPED = '''
import torch
from torch import nn

P = {p}

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.f, self.drop = nn.Linear(16, 16), nn.Dropout(P)

    def forward(self, x):
        return x + self.drop(torch.tanh(self.f(x)))

def build():
    return nn.Sequential(*(Block() for _ in range(4)))

def batch(size):
    return torch.randn(size, 16)
'''


def test_a_model_that_differs_only_by_dropout_is_ok_and_its_masks_are_measured(tmp_path):
    """Dropout 0.5 against the same model without it: both ok in float64 and step by step, with and
    without checkpointing; with dropout each block also saves its noise (on the CPU, nn.Dropout
    computes ``input * noise``, the noise a float32 [B, 16] tensor, 0 or 1/(1-p))."""
    rows = {}
    for stem, p in (("no_drop", 0.0), ("half_drop", 0.5)):
        path = tmp_path / f"{stem}.py"
        path.write_text(DROPPED.format(p=p))
        for kind in ("plain", "checkpoint_blocks"):
            m = memlab.measure_model(path, kind, batch=8, isolate=False, iterations=2, repeats=1, time_budget=0)
            assert (m.status, m.matches_reference) == ("ok", True), m.error
            rows[stem, kind] = m
    assert "check_randomness" not in rows["no_drop", "plain"].extra
    assert rows["half_drop", "checkpoint_blocks"].extra["check_randomness"] == SAME_STREAM
    masks = rows["half_drop", "plain"].peak_by_category_bytes["saved_activations"] - \
        rows["no_drop", "plain"].peak_by_category_bytes["saved_activations"]
    assert masks == 4 * 8 * 16 * 4  # four blocks' [8, 16] float32 noise


def test_a_technique_that_reorders_randomness_is_checked_with_dropout_off(monkeypatch):
    """AnyModelTechnique.reorders_randomness: its problems (and so its reference's) have every dropout
    at p=0, and the row says so."""
    from memlab.own_model.techniques import AnyModelTechnique

    load_model(ENCODER)
    monkeypatch.setattr(AnyModelTechnique, "reorders_randomness", True)
    technique = memlab.get_technique("encoder_dropout__checkpoint_blocks")(batch=2)
    problem = technique.build(torch.device("cpu"), torch.float64, 0)
    assert problem.extra["dropout_fixed"] == 10
    assert all(getattr(m, "p", 0.0) == 0.0 for m in problem.model.modules() if isinstance(m, nn.Dropout))
    m = memlab.measure_model(ENCODER, "checkpoint_blocks", batch=2, isolate=False, iterations=2, repeats=1,
                             time_budget=0)
    assert (m.status, m.extra["dropout_modules"]) == ("ok", 10), m.error
    assert m.extra["check_randomness"].startswith("dropout off (p=0) in this technique's steps and its reference's")
