"""A built-in family is one folder: its technique names appear in memlab/ only inside it (issue 42).

Every string constant in ``memlab/**/*.py`` (read with :mod:`ast`, so a name inside a docstring or a
longer message does not count) that is exactly a built-in technique's name must lie in that
technique's family folder, ``memlab/families/<family>/`` (its seed reproductions, its site notes and
its bench-harness points included).  The families' folders and names come from the registry
(:func:`memlab.registry.builtin_families` and the CLI's name index: no torch).

One folder outside ``memlab/families/`` is a family's own: ``memlab/own_model/`` is the model-file
family's (a user's model file gets its workload and techniques from there, registered as
``<model>__<kind>`` in family ``model:<model>``).  Its technique kinds are that family's own names,
declared as ``kind = "..."`` in its technique classes; three of them (``selective_checkpoint``,
``autocast_bf16``, ``offload_activations``) are also the transformer family's names for its own
techniques of the same idea.  A kind is not a misplaced transformer name: it names the model-file
technique, never the transformer's (``memlab measure selective_checkpoint`` measures the transformer's,
``memlab measure --model f.py`` the kind's ``f__selective_checkpoint``).  So in that folder a kind
declaration is the family's own name; any other constant there that is a built-in name is misplaced
like anywhere else.
"""
from __future__ import annotations

import ast
from pathlib import Path

from memlab.cli.names import builtin_index
from memlab.registry import builtin_families

ROOT = Path(__file__).resolve().parents[1]
#: the model-file family's folder (see the module docstring): its ``kind = "..."`` declarations are its own names
MODEL_FILE_FOLDER = "memlab/own_model/"


def _family_of(path: Path, folders: dict[Path, str]) -> str | None:
    return next((name for folder, name in folders.items() if folder in path.parents), None)


def _own_constants(tree: ast.Module, rel: str) -> set[int]:
    """ids of the constants that are the file's own names, not a use of a technique: ``__all__``'s
    (Python names) and, in :data:`MODEL_FILE_FOLDER`, the ``kind = "..."`` declarations of classes."""
    own = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Assign)
           and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets) for c in ast.walk(n.value)}
    if rel.startswith(MODEL_FILE_FOLDER):
        own |= {id(stmt.value) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) for stmt in cls.body
                if isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["kind"]}
    return own


def misplaced_names(root: Path = ROOT) -> list[str]:
    """``file:line: 'name' (family F)`` for every technique name in ``root/memlab`` outside its family's folder."""
    family = {name: info.family for name, info in builtin_index().items()}
    folders = {(root / "memlab" / "families" / name).resolve(): name for name, _ in builtin_families()}
    out = []
    for path in sorted((root / "memlab").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        here = _family_of(path.resolve(), folders)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _own_constants(tree, rel)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in family
                    and family[node.value] != here and id(node) not in own):
                out.append(f"{rel}:{node.lineno}: {node.value!r} (family {family[node.value]})")
    return out


def test_the_index_knows_every_family_folder():
    assert {info.family for info in builtin_index().values()} == {name for name, _ in builtin_families()}


def test_no_built_in_technique_name_outside_its_family_folder():
    misplaced = misplaced_names()
    assert not misplaced, "move these into their family's folder (memlab/families/<family>/):\n" + "\n".join(misplaced)


def test_the_scan_finds_a_name_out_of_its_folder_and_nowhere_else(tmp_path):
    """The check can fail: a technique's name in a general module, another family's folder, or the
    model-file folder outside a kind declaration is found; in its own folder, in ``__all__``, in a
    docstring or as a model-file kind it is not."""
    index = builtin_index()
    name = min(index)
    mine, other = index[name].family, next(f for f, _ in builtin_families() if f != index[name].family)
    files = {"memlab/site/bad.py": f'X = "{name}"\n', f"memlab/families/{other}/bad.py": f'Y = ["{name}"]\n',
             "memlab/own_model/bad.py": f'Z = "{name}"\nclass K:\n    kind = "{name}"\n',
             f"memlab/families/{mine}/good.py": f'__all__ = ["{name}"]\nW = "{name}"\n',
             "memlab/cli/good.py": f'"""What {name} does."""\nV = "a {name} b"\n'}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = misplaced_names(tmp_path)
    assert found == [f"memlab/families/{other}/bad.py:1: {name!r} (family {mine})",
                     f"memlab/own_model/bad.py:1: {name!r} (family {mine})",
                     f"memlab/site/bad.py:1: {name!r} (family {mine})"]


def test_the_model_file_exception_is_needed():
    """The exception for the model-file folder holds only while one of its kinds shares a built-in
    technique's name: when none does, delete it."""
    tree = ast.parse((ROOT / MODEL_FILE_FOLDER / "techniques.py").read_text(encoding="utf-8"))
    kinds = {c.value for c in ast.walk(tree) if id(c) in _own_constants(tree, MODEL_FILE_FOLDER + "techniques.py")
             and isinstance(c, ast.Constant) and isinstance(c.value, str)}
    assert kinds & set(builtin_index()), f"no model-file kind ({sorted(kinds)}) is a built-in name: drop the exception"
