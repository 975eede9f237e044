"""The Setting and the Point (memlab/core/setting.py): each default named once, one validation with messages
naming the bad value and the valid range, one key that resume, merge, compare and the GPU check share,
a JSON round trip, and the committed rows on disk keyed as resume keyed them before the Setting."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.core.record import Measurement
from memlab.core.setting import DEFAULTS, KEY_FIELDS, Point, Setting
from process_checks import HANG_GUARD_S

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

ROOT = Path(__file__).resolve().parent.parent
MEMLAB = ROOT / "memlab"
SWEEPS = sorted((ROOT / "data" / "sweeps").glob("*.jsonl"))

#: files that may spell a default's value as a literal: the Setting itself; the advisor's answers (another
#: branch's files); the advisor's fitting, which names the optimizers it fits and branches on them
ALLOWED = {"memlab/core/setting.py", "memlab/advisor/advise.py", "memlab/site/choose.py", "memlab/advisor/fit.py"}
#: and per value: the step builds the optimizer and the loss each name means (not defaults); a model
#: file's blocks are "given" or guessed
ALLOWED_FOR = {"sgd": {"memlab/measurement/step.py"},
               "given": {"memlab/measurement/step.py", "memlab/measurement/step_check.py",
                         "memlab/functional/blocks.py", "memlab/families/blocks.py"}}


def _literals(value: str) -> list[str]:
    """``FILE:LINE`` of every string constant equal to ``value`` in memlab/ (docstrings are text, not code)."""
    found = []
    for path in sorted(MEMLAB.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in ALLOWED or rel in ALLOWED_FOR.get(value, ()):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == value:
                found.append(f"{rel}:{node.lineno}")
    return found


@pytest.mark.parametrize("value", ['sgd', 'given'])
def test_each_default_is_named_once(value):
    """The default optimizer and loss are spelled in memlab/core/setting.py; everything else reads DEFAULTS."""
    assert _literals(value) == [], f"use memlab.core.setting.DEFAULTS instead of the literal {value!r}"


@pytest.mark.parametrize("change, message", [
    ({"device": "tpu"}, "device='tpu' is not valid; valid devices: cpu, cuda, cuda:N"),
    ({"dtype": "int8"}, "dtype='int8' is not valid; valid dtypes: float32, float64, bfloat16, float16"),
    ({"mode": "eval"}, "mode='eval' is not valid; valid modes: train, infer"),
    ({"optimizer": "adamx"}, "optimizer='adamx' is not valid; valid optimizers: sgd, sgd_momentum, adam, adamw"),
    ({"loss": "ce"}, "loss='ce' is not valid; valid losses: given, mse"),
    ({"grads": "keep"}, "grads='keep' is not valid; valid values: none, zero"),
    ({"accumulate": 0}, "accumulate=0 is not valid: expected a whole number from 1 to 1024"),
    ({"accumulate": True}, "accumulate=True is not valid: expected a whole number from 1 to 1024"),
    ({"iterations": 0}, "iterations=0 is not valid: expected an integer >= 1"),
    ({"repeats": 2.0}, "repeats=2.0 is not valid: expected an integer >= 1"),
    ({"threads": 0}, "threads=0 is not valid: expected a whole number from 1 to 1024, or None"),
    ({"seed": -1}, "seed=-1 is not valid: expected a whole number >= 0"),
    ({"check": 1}, "check=1 is not valid: expected True or False"),
    ({"timeout": 0}, "timeout=0 is not valid: expected seconds > 0 and <= 604800 (a week)"),
    ({"timeout": float("inf")}, "timeout=inf is not valid: expected seconds > 0 and <= 604800"),
    ({"time_budget": -1}, "time_budget=-1 is not valid: expected seconds between 0 and 3600"),
    ({"time_budget": float("nan")}, "time_budget=nan is not valid: expected seconds between 0 and 3600"),
])
def test_validate_names_the_bad_value_and_the_valid_range(change, message):
    with pytest.raises(ValueError) as info:
        Setting(**change).validate()
    assert str(info.value).startswith(message)


def test_valid_settings_pass():
    for s in (DEFAULTS, Setting(device="cuda:1", dtype="bfloat16", mode="infer", optimizer="adamw", loss="mse",
                                accumulate=4, grads="zero", threads=1, timeout=1, time_budget=0)):
        assert s.validate() is s


def test_the_key_is_stable():
    """A key on disk (a predictions file) and in memory must not change without a migration."""
    assert DEFAULTS.key() == ("train", "float32", "cpu", "sgd", "given", 1, "none")
    assert Setting(device="cuda:3", iterations=1, threads=2, time_budget=0).key() == Setting(device="cuda").key()
    point = Point("slice_loop", {"n": 10, "chunk_size": (2, 3)}, Setting(optimizer="adam"))
    assert point.key() == ("slice_loop", '{"chunk_size": [2, 3], "n": 10}', "train", "float32", "cpu", "adam",
                           "given", 1, "none")
    assert len(DEFAULTS.key()) == len(KEY_FIELDS)


def test_json_round_trip_and_refusals():
    s = Setting(device="cuda:0", dtype="float16", optimizer="adam", threads=3, timeout=12.5, time_budget=0)
    assert Setting.from_json(s.to_json()) == s
    assert Setting.from_dict({"optimizer": "adam"}) == Setting(optimizer="adam")  # missing fields: defaults
    with pytest.raises(ValueError, match="unknown Setting field"):
        Setting.from_dict({"optimiser": "adam"})
    with pytest.raises(ValueError, match="loss='ce' is not valid"):
        Setting.from_json(json.dumps({"loss": "ce"}))


def _old_resume_pairs(rows, device, dtype, mode, optimizer, loss):
    """How --resume keyed a file's finished rows before the Setting (memlab/sweep/resume.py)."""
    return {(r["technique"], json.dumps(r["params"], sort_keys=True)) for r in rows
            if r["status"] in ("ok", "mismatch", "leak") and r["device"].split(":")[0] == device.split(":")[0]
            and r["dtype"] == dtype and r["mode"] == mode and (r.get("optimizer") or "sgd") == optimizer
            and (r.get("loss") or "given") == loss}


@pytest.mark.parametrize("path", SWEEPS, ids=[p.name for p in SWEEPS])
def test_rows_on_disk_read_with_the_keys_resume_used(path):
    """Every committed row reads as a Measurement whose setting().key() and point().key() give the
    (technique, params) pairs the old --resume found, in the setting it was measured in."""
    from memlab.sweep import already_measured, finished_keys
    from memlab.sweep.compare import point_key

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert rows
    keys = set()
    for row in rows:
        m = Measurement.from_dict(row)
        assert m.setting().key() == Setting.from_row(row).key() == Point.from_row(row).key()[2:]
        assert m.point().key() == point_key(row)  # compare and merge
        keys.add(m.point().key())
    assert finished_keys(path) <= keys
    for setting in {Measurement.from_dict(r).setting() for r in rows}:
        old = _old_resume_pairs(rows, setting.device, setting.dtype, setting.mode, setting.optimizer, setting.loss)
        assert {k[:2] for k in finished_keys(path) if k[2:] == setting.key()} == old
        assert already_measured(path, setting.device, setting.dtype, setting.mode, optimizer=setting.optimizer,
                                loss=setting.loss, accumulate=setting.accumulate, grads=setting.grads) == old


def test_a_planned_point_has_its_rows_key(tmp_path):
    """The key resume computes for a planned point (its parameters resolved) is its row's key, and the
    keyword API and the Point API measure the same point."""
    import memlab
    from memlab.sweep.resume import finished_keys, is_done, resolved_key

    setting = Setting(iterations=1, repeats=1, time_budget=0)
    point = Point("unchunked", {"n": 16, "d": 4, "hidden": 8}, setting)
    by_point = memlab.measure(point, isolate=False)
    by_keywords = memlab.measure("unchunked", isolate=False, iterations=1, repeats=1, time_budget=0,
                                 n=16, d=4, hidden=8)
    assert by_point.status == by_keywords.status == "ok"
    assert by_point.point().key() == by_keywords.point().key() == resolved_key(point)
    assert by_point.peak_allocated_bytes == by_keywords.peak_allocated_bytes
    path = tmp_path / "rows.jsonl"
    path.write_text(by_point.to_json() + "\n")
    assert is_done(point, finished_keys(path))
    assert not is_done(point.with_setting(setting.replace(optimizer="adam")), finished_keys(path))


def test_the_gpu_check_and_the_site_key_by_the_point():
    from memlab.cuda.gpu_check import config_key, point_of

    cfg = {"technique": "slice_loop", "params": {"n": 8}, "mode": "train", "optimizer": None}
    assert point_of(cfg).key() == Point("slice_loop", {"n": 8}).key()
    assert config_key(cfg) == json.dumps(Point("slice_loop", {"n": 8}).key())


def test_gradient_options_are_part_of_the_key():
    """Rows without the gradient options read as their defaults; another value is another point."""
    assert Setting.from_row({"optimizer": "adam"}).key() == Setting(optimizer="adam", accumulate=1, grads="none").key()
    assert len({Setting(accumulate=2).key(), Setting(grads="zero").key(), DEFAULTS.key()}) == 3


def test_the_cli_validates_the_setting_before_torch():
    code = ("import sys; from memlab.cli import main; rc = main(['measure', 'slice_loop', '--loss', 'ce']); "
            "assert rc == 2, rc; bad = [m for m in sys.modules if m.split('.')[0] == 'torch']; assert not bad, bad")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "loss='ce' is not valid; valid losses: given, mse" in p.stderr
