"""``memlab advise --model``: a model file's advisor declaration, the size search, the real-model
examples' blocks, and one-line errors.  No fit runs here (it measures: minutes on 2 cores); the
cheap parts are tested directly."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.advisor import AdviceError
from memlab.model_advice import TRACE_VALUES, cache_dir_for, largest_fitting, model_declaration
from memlab.own_model import load_model

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

TINY = '''
import torch
from torch import nn

def build():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))

def batch(size, seq=3):
    return torch.randn(size, seq, 4)
'''

OWN = TINY + '''
import memlab
from memlab.advisor import Entry

class Advice(memlab.AdvisorModel):
    entries = (Entry("plain"),)
    held_out = {"batch": (1, 3)}
'''


@pytest.fixture()
def model_file(tmp_path):
    def write(name: str, text: str) -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p
    return write


def test_default_declaration_varies_batch_and_models_the_cpu_techniques(model_file):
    path = model_file("adv_tiny.py", TINY)
    decl = model_declaration(path)
    assert decl.sizes == ("batch",) and decl.loop.kind == "none" and decl.trace_values == TRACE_VALUES
    kinds = {e.technique.split("__")[1] for e in decl.entries}
    # nn.Sequential of mixed children: no repeated blocks, so no checkpointing kind; offload is CUDA only
    assert kinds == {"plain", "autocast_bf16"}
    assert decl.entries[0].technique == "adv_tiny__plain"
    both = model_declaration(path, ("batch", "seq"))
    assert both.sizes == ("batch", "seq") and both.work == "batch*seq"
    assert all(p["seq"] == 3 for p in both.time_sizes)


def test_a_file_overrides_the_declaration_with_its_own_advisor_model(model_file):
    decl = model_declaration(model_file("adv_own.py", OWN))
    assert [e.technique for e in decl.entries] == ["adv_own__plain"]
    assert decl.held_out == {"batch": (1, 3)} and decl.declared_by.endswith(".Advice")


def test_declaration_round_trips_with_trace_values_and_a_large_quantum(model_file):
    from memlab.advisor.declaration import Declaration

    decl = model_declaration(model_file("adv_rt.py", TINY))
    assert Declaration.from_json(decl.to_json()) == decl
    with pytest.raises(ValueError, match=r"trace_values=\(1, 2\) must be 4 or more"):
        Declaration(**{**decl.__dict__, "trace_values": (1, 2)})


def test_bad_vary_is_one_error_naming_the_valid_sizes(model_file):
    path = model_file("adv_vary.py", TINY)
    with pytest.raises(AdviceError, match=r"--vary seq is not valid for adv_vary.py: give batch, then any of seq"):
        model_declaration(path, ("seq",))
    with pytest.raises(AdviceError, match=r"--vary batch,width"):
        model_declaration(path, ("batch", "width"))


def test_cache_key_changes_with_the_file(model_file):
    path = model_file("adv_cache.py", TINY)
    decl = model_declaration(path)
    first = cache_dir_for(path, decl, "sgd", Path("/c"))
    assert first == cache_dir_for(path, decl, "sgd", Path("/c")) and first.name.startswith("adv_cache-")
    assert cache_dir_for(path, decl, "adam", Path("/c")) != first
    path.write_text(TINY + "\n# edited\n")
    assert cache_dir_for(path, decl, "sgd", Path("/c")) != first


@pytest.mark.parametrize("budget", [0, 7, 99, 100, 12345, 10**9])
def test_largest_fitting_is_the_last_size_within_budget(budget):
    need = lambda n: 100 * n + 50 * (n // 7)  # noqa: E731 - non-decreasing, not linear
    got = largest_fitting(need, budget, high=10**6)
    brute = max((n for n in range(1, 20000) if need(n) <= budget), default=None)
    assert got == (brute if budget < 10**9 else 10**6)


@pytest.mark.parametrize("name, blocks, count, block_type", [
    ("gpt2.py", "transformer.h", 2, "GPT2Block"),
    ("resnet50.py", "layer1,layer2,layer3,layer4", 16, "Bottleneck"),
])
def test_checkpoint_blocks_finds_the_real_models_blocks_without_being_told(name, blocks, count, block_type):
    pytest.importorskip("transformers") if name == "gpt2.py" else None
    facts = load_model(EXAMPLES / name)({}).meta_blocks().facts()
    assert (facts["blocks"], facts["block_count"], facts["block_type"], facts["blocks_found_by"]) == \
        (blocks, count, block_type, "guess")


def test_resnet50_has_torchvisions_parameter_count():
    import torch

    with torch.device("meta"):
        model = load_model(EXAMPLES / "resnet50.py").model_file.build()
    assert sum(p.numel() for p in model.parameters()) == 25_557_032  # torchvision resnet50(): 25,557,032


def test_cli_errors_are_one_line_exit_2(model_file):
    path = model_file("adv_cli.py", TINY)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args, message in ((["--vary", "seq", "--budget", "1GiB"], "--vary seq is not valid"),
                          (["--budget", "lots"], "--budget 'lots' is not a memory size"),
                          ([], "needs --budget")):
        out = subprocess.run([sys.executable, "-m", "memlab", "advise", "--model", str(path), *args],
                             capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
        assert out.stderr.strip().count("\n") == 0, out.stderr
