"""The advisor, the Choose page and the CLI read the one default optimizer (issue 44 follow-up): the
optimizer's name is spelt as a default only in :mod:`memlab.core.setting` (``DEFAULTS.optimizer``) and
in the training step's dispatch (:mod:`memlab.measurement.step`, which builds it by name)."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

from memlab.advisor import advise
from memlab.advisor.fit import OPTIMIZERS_FITTED, small_held_out_points
from memlab.core.setting import DEFAULTS, STEPPED_OPTIMIZERS
from memlab.own_model.advice import advise_model
from memlab.own_model.checks import check_beyond
import pytest

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

ROOT = Path(__file__).resolve().parents[1]
#: the files that may spell the default optimizer's name: where it is named, and the step that builds it
ALLOWED = {"memlab/core/setting.py", "memlab/measurement/step.py"}


def spelt(name: str, root: Path = ROOT) -> list[str]:
    """``file:line`` of every string constant exactly ``name`` in ``root/memlab`` outside :data:`ALLOWED`."""
    out = []
    for path in sorted((root / "memlab").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value == name:
                out.append(f"{rel}:{node.lineno}")
    return out


def test_the_default_optimizer_is_spelt_only_where_it_is_named_and_built():
    assert DEFAULTS.optimizer in STEPPED_OPTIMIZERS
    found = spelt(DEFAULTS.optimizer)
    assert not found, "read memlab.core.setting.DEFAULTS.optimizer instead:\n" + "\n".join(found)


def test_the_scan_finds_a_spelt_default(tmp_path):
    """The check can fail: a module outside the allowed two that spells the name is found."""
    (tmp_path / "memlab" / "core").mkdir(parents=True)
    (tmp_path / "memlab" / "core" / "setting.py").write_text(f"OPT = {DEFAULTS.optimizer!r}\n")
    (tmp_path / "memlab" / "x.py").write_text(f"def f(optimizer={DEFAULTS.optimizer!r}):\n    return optimizer\n")
    assert spelt(DEFAULTS.optimizer, tmp_path) == ["memlab/x.py:1"]


def test_the_advisor_defaults_are_the_measurement_default():
    assert OPTIMIZERS_FITTED[0] == DEFAULTS.optimizer
    assert small_held_out_points(DEFAULTS.optimizer) == 2 and small_held_out_points(OPTIMIZERS_FITTED[1]) == 1
    for fn in (advise, advise_model, check_beyond):
        assert inspect.signature(fn).parameters["optimizer"].default == DEFAULTS.optimizer, fn.__name__
