"""The seed reproductions live in their families' folders (issue 42): ``memlab/families/<family>/reproductions/``.

:func:`memlab.reproductions.list_reproductions` finds them there (through
:func:`memlab.registry.reproduction_modules`), discovery never imports them, the site reads their page
titles from the same files, and two modules with one ``SEED`` are refused, naming both.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

import memlab.registry as registry
from memlab.cli import main
from memlab.registry import REPRODUCTIONS, builtin_families, builtin_modules, reproduction_folders
from memlab.reproductions import list_reproductions
from process_checks import HANG_GUARD_S


def _declared() -> dict[str, str]:
    """``{SEED: family}`` read from the source of every family folder's reproduction modules."""
    out = {}
    for family, folder in builtin_families():
        for path in sorted((folder / REPRODUCTIONS).glob("[!_]*.py")):
            m = re.search(r'(?m)^SEED = "([^"]+)"', path.read_text(encoding="utf-8"))
            if m:
                out[m.group(1)] = family
    return out


def test_every_reproduction_is_found_in_its_family_folder():
    declared = _declared()
    found = list_reproductions()
    assert set(found) == set(declared) and len(found) >= 8
    for seed, mod in found.items():
        assert mod.__name__.startswith(f"memlab.families.{declared[seed]}.{REPRODUCTIONS}."), (seed, mod.__name__)
    assert list(found) == sorted(found, key=lambda s: found[s].__name__.rsplit(".", 1)[-1])  # by module name
    assert {f for f, _ in reproduction_folders({})} == set(declared.values())


def test_discovery_neither_lists_nor_imports_them():
    assert not [m for m, _ in builtin_modules() if f".{REPRODUCTIONS}" in m]
    code = ("import sys, memlab.registry as r; r.discover(); "
            f"print(sorted(m for m in sys.modules if '.{REPRODUCTIONS}' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr[-2000:])


def test_two_reproductions_of_one_seed_are_refused(tmp_path, monkeypatch, capsys):
    for name in ("seed_a", "seed_b"):
        (tmp_path / f"{name}.py").write_text('SEED = "same-seed"\nTITLE = CLAIM = "x"\n\n\n'
                                             'def reproduce(quick=False):\n    return {}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "reproduction_modules",
                        lambda: [("seed_a", tmp_path / "seed_a.py"), ("seed_b", tmp_path / "seed_b.py")])
    with pytest.raises(ValueError, match=r"seed 'same-seed' is declared by two reproductions: seed_a and seed_b"):
        list_reproductions()
    assert main(["reproduce", "--only", "same-seed", "--out", str(tmp_path / "out")]) == 2
    assert "seed_a and seed_b" in capsys.readouterr().err and not (tmp_path / "out").exists()
