"""A built-in family is one folder: its technique names appear in memlab/ only inside it (issue 42).

Every string constant in ``memlab/**/*.py`` (read with :mod:`ast`, so a name inside a docstring or a
longer message does not count) that is exactly a built-in technique's name must lie in that
technique's family folder, ``memlab/families/<family>/``.  The families' folders and names come from
the registry (:func:`memlab.registry.builtin_modules`, read like the CLI's name index: no torch).
"""
from __future__ import annotations

import ast
from pathlib import Path

from memlab.cli.names import builtin_index
from memlab.registry import builtin_families

ROOT = Path(__file__).resolve().parents[1]

#: files that may name techniques of other folders, and why (each is a step left for issue 42)
ALLOWED = {
    # each seed reproduction re-measures its paper's or report's techniques (one family each but
    # reversible_memory_accounting, which measures the reversible and the resnet families'); they move
    # into their family folders with the reproductions' registry
    "memlab/reproductions/": "a seed reproduction names the techniques its paper measured",
    # the model-file techniques are kinds (plain, checkpoint_blocks, selective_checkpoint, autocast_bf16,
    # offload_activations) registered as ``<model>__<kind>``: other techniques that share three names
    "memlab/techniques/any_model.py": "a model file's technique kinds, not the transformer's techniques",
    # the bench-harness and its limits measure one point per family, across families, by design
    "memlab/harness.py": "the bench-harness's points, one technique of each family",
    "memlab/limits.py": "the limits' points, across families",
    # the overview's footnotes on two techniques' figures (functions of their rows, not plain data, so
    # not yet in meta.py), and the CLI's refusal benchmark, whose bad commands name a real technique
    "memlab/site/notes.py": "footnotes on einsum_chunk's and memcnn's figures",
    "memlab/cli/refusals.py": "make bench-cli's refused commands name a real technique",
}


def _family_of(path: Path, folders: dict[Path, str]) -> str | None:
    return next((name for folder, name in folders.items() if folder in path.parents), None)


def misplaced_names() -> list[str]:
    """``file:line: 'name' (family F)`` for every technique name outside its family's folder."""
    family = {name: info.family for name, info in builtin_index().items()}
    folders = {folder.resolve(): name for name, folder in builtin_families()}
    out = []
    for path in sorted((ROOT / "memlab").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(prefix) for prefix in ALLOWED):
            continue
        here = _family_of(path.resolve(), folders)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        exported = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets) for c in ast.walk(n.value)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in family
                    and family[node.value] != here and id(node) not in exported):  # __all__: a Python name
                out.append(f"{rel}:{node.lineno}: {node.value!r} (family {family[node.value]})")
    return out


def test_the_index_knows_every_family_folder():
    assert {info.family for info in builtin_index().values()} == {name for name, _ in builtin_families()}


def test_no_built_in_technique_name_outside_its_family_folder():
    misplaced = misplaced_names()
    assert not misplaced, "move these into their family's folder (memlab/families/<family>/):\n" + "\n".join(misplaced)


def test_every_allowed_path_exists():
    assert all((ROOT / prefix).exists() for prefix in ALLOWED)
