"""The built-in technique names, families and parameter names, read from the source (no torch).

# NOTE [ names before torch ]
Importing the registry imports every built-in module and with it torch (seconds), so a mistyped
name used to be refused only after that.  The built-in modules declare what the CLI checks in a
fixed shape: ``class X(Technique, name="...")`` or ``class W(Workload, name="...", family="...")``,
``workload = W`` and ``params = {"name": Param(...), ...}`` on the class or a base it inherits from.
:func:`builtin_index` reads that shape with :mod:`ast` from the files the registry would import
(:func:`memlab.registry.builtin_modules`), so :mod:`memlab.cli` refuses a wrong technique, family or
parameter name in a fraction of a second, with the message the registry gives.  Only a refusal is
decided here: a name the index knows goes on to the registry, which checks it again with the values'
ranges.  With a plug-in (``--plugin``, ``MEMLAB_PLUGINS``), a model file, or a technique registered in
the process beforehand, names come from code that must run, so the index is not used; a parameter
table it cannot read (not a literal dict) is not checked here either.  ``tests/test_cli_fast.py`` checks that the index equals the registry; the
refusal times are in docs/evidence/code-notes-cli.md (``make bench-cli`` prints them).
"""
from __future__ import annotations

import ast
import difflib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from ..registry import builtin_modules, loaded_plugins, registered

__all__ = ["TechniqueInfo", "builtin_index", "applies", "unknown_technique", "unknown_family", "unknown_param",
           "check_technique", "check_family", "check_params", "families"]


@dataclass(frozen=True)
class TechniqueInfo:
    """What the CLI checks of one built-in technique: its family and its parameter names (workload's
    and its own; None when the source does not spell them as a literal dict)."""

    name: str
    family: str
    params: frozenset[str] | None


@dataclass
class _Class:
    module: str
    node: ast.ClassDef

    def keyword(self, key: str) -> str | None:
        for kw in self.node.keywords:
            if kw.arg == key and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                return kw.value.value
        return None

    def attribute(self, key: str) -> ast.expr | None:
        for stmt in self.node.body:
            targets = (stmt.targets if isinstance(stmt, ast.Assign)
                       else [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else [])
            if any(isinstance(t, ast.Name) and t.id == key for t in targets):
                return stmt.value
        return None


class _Source:
    """The classes of the built-in modules and the names each module imports from another."""

    def __init__(self, modules: list[tuple[str, Path]]):
        self.classes: dict[str, dict[str, _Class]] = {}
        self.imports: dict[str, dict[str, str]] = {}
        for module, path in modules:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            self.classes[module] = {n.name: _Class(module, n) for n in tree.body if isinstance(n, ast.ClassDef)}
            self.imports[module] = _imported_names(module, tree, path.name == "__init__.py")

    def resolve(self, module: str, name: str) -> _Class | None:
        """The class ``name`` means in ``module``: defined there, or imported from another built-in."""
        for _ in range(8):  # re-exports, a few levels deep
            if name in self.classes.get(module, {}):
                return self.classes[module][name]
            if name not in self.imports.get(module, {}):
                return None
            module = self.imports[module][name]
        return None

    def ancestry(self, cls: _Class) -> list[_Class | str]:
        """``cls`` and its bases depth-first (the order attribute lookup follows for single
        inheritance); a base outside the built-ins is its bare name (``Technique``, ``Workload``)."""
        out: list[_Class | str] = [cls]
        for base in cls.node.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
            found = self.resolve(cls.module, name)
            out.extend(self.ancestry(found) if found is not None else [name])
        return out

    def inherited(self, cls: _Class, key: str) -> tuple[_Class, ast.expr] | None:
        for c in self.ancestry(cls):
            if isinstance(c, _Class) and c.attribute(key) is not None:
                return c, c.attribute(key)
        return None

    def param_names(self, cls: _Class) -> frozenset[str] | None:
        found = self.inherited(cls, "params")
        if found is None:
            return frozenset()
        value = found[1]
        if isinstance(value, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                               for k in value.keys):
            return frozenset(k.value for k in value.keys)
        return None


def _imported_names(module: str, tree: ast.Module, is_package: bool) -> dict[str, str]:
    """``{local name: module}`` of the ``from X import Y`` statements at the top of ``module``."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                out[a.asname or a.name] = base
    return out


def _is(source: _Source, cls: _Class, root: str) -> bool:
    return root in [c for c in source.ancestry(cls) if isinstance(c, str)]


@functools.lru_cache(maxsize=1)
def builtin_index() -> dict[str, TechniqueInfo]:
    """Every built-in technique by name, read from the source of the built-in modules."""
    source = _Source(builtin_modules())
    out = {}
    for module, classes in source.classes.items():
        for cls in classes.values():
            name = cls.keyword("name")
            if name is None or not _is(source, cls, "Technique"):
                continue
            found = source.inherited(cls, "workload")
            workload = source.resolve(found[0].module, found[1].id) if found and isinstance(found[1], ast.Name) else None
            if workload is None or workload.keyword("name") is None:
                continue  # a shape the index does not read: left to the registry
            own, shared = source.param_names(cls), source.param_names(workload)
            out[name] = TechniqueInfo(name, workload.keyword("family") or workload.keyword("name"),
                                      None if own is None or shared is None else own | shared)
    return out


def applies(plugins, model=None) -> bool:
    """True when every technique comes from the built-ins: no ``--plugin``, no ``MEMLAB_PLUGINS``, no
    ``--model`` (their names are known only once their code has run), and none registered in this
    process beyond the built-ins (a caller of :func:`memlab.cli.main` that loaded a plug-in itself)."""
    if plugins or model or os.environ.get("MEMLAB_PLUGINS", "").strip() or loaded_plugins():
        return False
    return set(registered()) <= set(builtin_index())


def families() -> list[str]:
    return sorted({t.family for t in builtin_index().values()})


def _suggest(word: str, known) -> str:
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6) if isinstance(word, str) else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_technique(name: str) -> str | None:
    """The registry's refusal of ``name`` with a suggestion, or None for a known built-in."""
    index = builtin_index()
    if name in index:
        return None
    return f"unknown technique {name!r}{_suggest(name, index)}; available: {', '.join(sorted(index))}"


def unknown_family(family: str) -> str | None:
    known = families()
    if family in known:
        return None
    return f"unknown family {family!r}{_suggest(family, known)}; available: {', '.join(known)}"


def unknown_param(technique: str, key: str) -> str | None:
    """The refusal of parameter ``key`` of built-in ``technique``; None when it has it or its table
    was not read."""
    valid = builtin_index()[technique].params
    if valid is None or key in valid:
        return None
    return (f"technique {technique!r} has no parameter {key!r}{_suggest(key, valid)}; "
            f"valid parameters: {', '.join(sorted(valid))}")


def check_technique(name: str) -> None:
    """Raise ValueError for a name no built-in technique has (call when :func:`applies`)."""
    why = unknown_technique(name)
    if why:
        raise ValueError(why)


def check_family(family: str | None) -> None:
    why = unknown_family(family) if family is not None else None
    if why:
        raise ValueError(why)


def check_params(technique: str, keys) -> None:
    """Raise ValueError for the first of ``keys`` that built-in ``technique`` has no parameter of."""
    for key in keys:
        why = unknown_param(technique, key)
        if why:
            raise ValueError(why)
