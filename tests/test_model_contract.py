"""A model file's contract, checked before anything is measured (issue 45): each file error is exit
status 2 and one line saying what memlab called and what to write instead; a file that never finishes
loading ends at ``--timeout``; a refusal that needs no measurement comes before the file is loaded; a
cold ``advise --model`` announces its plan and estimate, then a line per trace and measurement."""
from __future__ import annotations

from pathlib import Path

import pytest

from memlab.cli import main

ROOT = Path(__file__).resolve().parents[1]
HEAD = "import time\nimport torch\nfrom torch import nn\n"
LINEAR = ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
          "        self.f = nn.Linear(3, 2)\n")
BATCH = "def batch(size):\n    return torch.randn(size, 3), torch.randint(0, 2, (size,))\n"
BUILD = "def build():\n    return Net()\n"

#: stem -> (file body, the start of the one line after "memlab: error: ")
CONTRACT = {
    "tuple_out": (LINEAR + "    def forward(self, x):\n        return self.f(x), x.sum()\n" + BUILD + BATCH,
                  "model file tuple_out.py: memlab called model(batch[0]) and got a tuple, with no loss in it and no "
                  "loss(output, batch) in the file; define loss(output, batch) returning a scalar (e.g. "
                  "F.cross_entropy(output[0], batch[1])), or return the loss as output['loss'] / output.loss"),
    "dict_out": (LINEAR + "    def forward(self, x):\n        return {'logits': self.f(x)}\n" + BUILD + BATCH,
                 "model file dict_out.py: memlab called model(batch[0]) and got a dict with keys ['logits'], with no "
                 "loss in it and no loss(output, batch) in the file; define loss(output, batch) returning a scalar "
                 "(e.g. F.cross_entropy(output['logits'], batch[1]))"),
    "dict_batch": (LINEAR + "    def forward(self, x):\n        return self.f(x)\n" + BUILD
                   + "def batch(size):\n    return {'x': torch.randn(size, 3), 'y': torch.randint(0, 2, (size,))}\n",
                   "model file dict_batch.py: memlab called model(**batch) with batch(1) and Net.forward(x) refused "
                   "it: got an unexpected keyword argument 'y'; make forward() take y (forward(self, ..., y=None)), "
                   "or return (inputs, targets) from batch()"),
    "two_inputs_one_taken": (LINEAR + "    def forward(self, x):\n        return self.f(x)\n" + BUILD
                             + "def batch(size):\n    return (torch.randn(size, 3), torch.randn(size, 3)), "
                               "torch.randn(size, 2)\n",
                             "model file two_inputs_one_taken.py: memlab called model(*batch[0]) with batch(1) and "
                             "Net.forward(x) refused it: too many positional arguments; make batch() return the "
                             "inputs forward() takes first"),
    "no_build": (BATCH, "model file no_build.py has no build() function (memlab calls build() for the model); "
                        "a model file defines build() -> torch.nn.Module"),
    "no_batch": (LINEAR + "    def forward(self, x):\n        return self.f(x)\n" + BUILD,
                 "model file no_batch.py has no batch() function (memlab calls batch(size) for `size` samples)"),
}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert err.startswith("memlab: error: "), err
    return err[len("memlab: error: "):]


@pytest.mark.parametrize("stem", sorted(CONTRACT))
def test_each_file_error_is_exit_2_and_one_line_saying_what_memlab_called(stem, tmp_path, capsys):
    body, start = CONTRACT[stem]
    path = tmp_path / f"{stem}.py"
    path.write_text(HEAD + body)
    assert main(["measure", "--model", str(path), "--timeout", "120"]) == 2
    assert _one_line(capsys).startswith(start)


def test_a_directory_is_named_as_one(tmp_path, capsys):
    from memlab.own_model import ModelFileError, load_model

    for command in (["measure"], ["check"], ["advise", "--budget", "1GiB"]):
        assert main([*command, "--model", str(tmp_path)]) == 2
        assert _one_line(capsys).endswith("is a directory, not a Python file")
    with pytest.raises(ModelFileError, match="is a directory, not a Python file; give the .py file"):
        load_model(tmp_path)


HANGS = HEAD + "def build():\n    while True:\n        time.sleep(0.1)\n" + BATCH


@pytest.mark.parametrize("command", [["measure"], ["check"], ["advise", "--budget", "1GiB"]])
def test_a_build_that_never_returns_ends_at_the_timeout(command, tmp_path, capsys):
    path = tmp_path / "never.py"
    path.write_text(HANGS)
    extra = ["--models", str(tmp_path / "cache")] if command[0] == "advise" else []
    assert main([*command, "--model", str(path), "--timeout", "2", *extra]) == 2
    assert _one_line(capsys) == ("model file never.py: loading it (its import, build(), batch(1), batch(2)) did not "
                                 "finish within --timeout 2 s; a file that waits (a download, a lock, a loop) must "
                                 "return, or give a larger --timeout")


def test_an_import_that_never_returns_ends_at_the_timeout(tmp_path, capsys):
    path = tmp_path / "never_imports.py"
    path.write_text(HEAD + "while True:\n    time.sleep(0.1)\n")
    assert main(["measure", "--model", str(path), "--timeout", "2"]) == 2
    assert "did not finish within --timeout 2 s" in _one_line(capsys)


def test_a_device_refusal_comes_before_the_file_is_loaded(tmp_path, capsys):
    path = tmp_path / "never.py"
    path.write_text(HANGS)  # never loads: the refusal must not wait for it
    assert main(["measure", "offload_activations", "--model", str(path)]) == 2
    assert _one_line(capsys) == "technique 'never__offload_activations' does not support device 'cpu'; supported: cuda"


def test_a_child_that_fails_otherwise_is_one_line(tmp_path, capsys):
    path = tmp_path / "raises.py"
    path.write_text(HEAD + "raise RuntimeError('no weights here')\n")
    assert main(["check", "--model", str(path), "--timeout", "120"]) == 2
    assert _one_line(capsys) == "model file raises.py failed to import: RuntimeError: no weights here"
