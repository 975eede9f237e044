"""The one registry of workloads and techniques: registration, discovery, lookup by name.

Subclassing registers: ``class X(Workload, name=..., family=...)`` and ``class Y(Technique, name=...)``
call :func:`register_workload` / :func:`register_technique` from ``__init_subclass__``; nothing else
lists them.  Each built-in family is one package under :mod:`memlab.families` (its workload, its
techniques and peers, its operations, its metadata); the packages are found by a directory scan and
every module in them is imported on first lookup, so adding a family folder (or a user's file or
family folder via :func:`load_plugin`) is all it takes for its techniques to show up in the CLI, the
sweep, the benchmarks and the site.  This module imports no other memlab module (the packages are
found by name), so the classes that register here never form an import cycle with their lookup.

``MEMLAB_PLUGINS`` (paths separated by ``os.pathsep``) names plug-in files and family folders loaded on
discovery; the measurement subprocess receives the plug-ins of its parent the same way.  Each family
folder's ``meta.py`` (colours, held-out time settings, asv benchmark grid) is read as plain data by
:func:`family_meta`, without importing torch, for the site, the advisor's time check and the asv
benchmarks.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import pkgutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

__all__ = ["register_workload", "register_technique", "register_advisor", "get_advisor", "list_advisors", "discover", "load_plugin", "loaded_plugins",
           "builtin_modules", "builtin_families", "plugin_families", "family_meta", "read_family_meta", "FamilyMeta",
           "REPRODUCTIONS", "reproduction_folders", "reproduction_modules",
           "list_techniques", "list_families", "get_technique", "list_workloads", "get_workload", "registered"]

_WORKLOADS: dict[str, type] = {}
_TECHNIQUES: dict[str, type] = {}
_ADVISORS: dict[str, type] = {}  # family -> its AdvisorModel subclass
#: the package whose sub-packages are the built-in families, and its folder
_FAMILIES = f"{__package__}.families"
_FAMILY_DIR = Path(__file__).resolve().parent / "families"
#: the modules of the workload and techniques a user's model file gets, in :mod:`memlab.own_model`
_MODEL_FILE_MODULES = ("workload", "techniques")
_DISCOVERED = False
_DISCOVERY_LOCK = threading.RLock()
_PLUGINS: dict[str, str] = {}  # resolved path -> module name
#: the module that registers a user's model file (``build``/``batch``) loaded as a plug-in
_MODEL_FILES = f"{__package__}.own_model"
#: the sub-package of a family folder that holds its seed reproductions (:mod:`memlab.reproductions`
#: imports them; discovery does not: they measure, they register nothing)
REPRODUCTIONS = "reproductions"


@dataclass(frozen=True)
class FamilyMeta:
    """What a family folder's ``meta.py`` declares, read without importing torch or memlab.

    Attributes:
        name: the family (its folder's name).
        folder: the family folder.
        colors: ``{technique: colour name}`` on the site (``memlab.site.colors.NAMED``).
        time_held_out: ``((advisor entry label, parameters), ...)``: the held-out settings of
            ``python -m memlab.advisor.time_check``.
        benchmarks: ``{asv class name: spec}``, the family's asv benchmark grid (``benchmarks/family_grid.py``).
        harness_load_points: ``((position, technique, parameters), ...)``: the family's points of
            ``memlab bench-harness``'s load experiment (:mod:`memlab.measurement.harness_cost`), each at its
            position in the table of every family's points.
        limit_points: the same for ``memlab bench-harness --limits`` (:mod:`memlab.measurement.flop_limits`).
        site_notes: ``{technique: {"text": str, "when": (str, ...), "fill": {str: str}}}``, the site's
            footnotes under a figure showing the technique (:mod:`memlab.site.notes`).
    """

    name: str
    folder: Path
    colors: dict[str, str] = field(default_factory=dict)
    time_held_out: tuple[tuple[str, dict[str, Any]], ...] = ()
    benchmarks: dict[str, dict[str, Any]] = field(default_factory=dict)
    harness_load_points: tuple[tuple[int, str, dict[str, Any]], ...] = ()
    limit_points: tuple[tuple[int, str, dict[str, Any]], ...] = ()
    site_notes: dict[str, dict[str, Any]] = field(default_factory=dict)


def _same_definition(a: type, b: type) -> bool:
    """True when ``b`` re-defines ``a`` from the same source (a module re-import)."""
    try:
        return a.__qualname__ == b.__qualname__ and inspect.getfile(a) == inspect.getfile(b)
    except (TypeError, OSError):
        return False


def _register(table: dict[str, type], kind: str, name: str, cls: type, hint: str = "") -> None:
    if name in table and not _same_definition(table[name], cls):
        other = table[name]
        raise ValueError(f"{kind} name {name!r} is already registered by {other.__module__}.{other.__qualname__}{hint}")
    table[name] = cls


def register_workload(name: str, cls: type) -> None:
    """Register ``cls`` as workload ``name`` (called by ``Workload.__init_subclass__``).

    Raises:
        ValueError: another class holds the name; the message names it.
    """
    _register(_WORKLOADS, "workload", name, cls)


def register_technique(name: str, cls: type) -> None:
    """Register ``cls`` as technique ``name`` (called by ``Technique.__init_subclass__``).

    Raises:
        ValueError: another class holds the name; the message names it.
    """
    _register(_TECHNIQUES, "technique", name, cls, "; choose another name")


def register_advisor(family: str, cls: type) -> None:
    """Register ``cls`` as the advisor model of ``family`` (called by ``AdvisorModel.__init_subclass__``).

    Raises:
        ValueError: another class declares the family's model; the message names it.
    """
    _register(_ADVISORS, "advisor model of family", family, cls, "; a family declares one")


def list_advisors() -> list[str]:
    """Sorted names of the families that declare an advisor model."""
    discover()
    return sorted(_ADVISORS)


def get_advisor(family: str) -> type:
    """The advisor model class (``memlab.core.declaration.AdvisorModel`` subclass) of ``family``.

    Raises:
        ValueError: the family declares none; the message says which do and how to declare one.
    """
    discover()
    try:
        return _ADVISORS[family]
    except (KeyError, TypeError):
        families = sorted({c.family() for c in _TECHNIQUES.values()})
        what = "declares no advisor model" if family in families else "is not a known family"
        raise ValueError(f"family {family!r} {what}; declared: {', '.join(sorted(_ADVISORS)) or '(none)'} "
                         f"(declare one beside the workload: class M(memlab.AdvisorModel, family={family!r}))") from None


def registered() -> dict[str, type]:
    """The techniques registered so far, by name (no discovery)."""
    return _TECHNIQUES


def discover() -> None:
    """Import every built-in technique module and the plug-ins named in ``MEMLAB_PLUGINS``.

    Thread-safe: a parallel sweep's workers may be the first to look a technique up, at once; the
    second used to find discovery "done" while the first was still importing, and an empty registry.
    """
    global _DISCOVERED
    with _DISCOVERY_LOCK:  # re-entrant: a module being imported may look a technique up
        if _DISCOVERED:
            return
        _DISCOVERED = True
        _import_all()


def builtin_modules() -> list[tuple[str, Path]]:
    """``(module name, source file)`` of every built-in workload and technique module, in the order
    :func:`discover` imports them (each family folder's ``workload`` first, then its other modules),
    found without importing them (nor torch): the CLI reads the names they declare from their source
    to refuse a wrong name before torch is imported."""
    out = []
    for name, where in builtin_families():
        out.extend(_package_modules(f"{_FAMILIES}.{name}", where))
    own_model = Path(__file__).resolve().parent / "own_model"
    out.extend((f"{_MODEL_FILES}.{name}", own_model / f"{name}.py") for name in _MODEL_FILE_MODULES)
    return out


def builtin_families() -> list[tuple[str, Path]]:
    """``(family name, folder)`` of every built-in family: the packages in ``memlab/families/``, by
    name, found by a directory scan (no import; this works when the file is loaded alone, as the asv
    benchmarks load it from the working tree)."""
    return sorted((p.name, p) for p in _FAMILY_DIR.iterdir()
                  if (p / "__init__.py").is_file() and not p.name.startswith(("_", ".")))


def plugin_families(environ: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """``(family name, folder)`` of the plug-in family folders: those loaded so far and those named in
    ``MEMLAB_PLUGINS`` (of ``environ``, default ``os.environ``), found without importing them."""
    environ = os.environ if environ is None else environ
    named = [p.strip() for p in environ.get("MEMLAB_PLUGINS", "").split(os.pathsep) if p.strip()]
    folders = dict.fromkeys(Path(p).expanduser().resolve() for p in [*_PLUGINS, *named])
    return [(f.name, f) for f in folders if (f / "__init__.py").is_file()]


def family_meta(environ: Mapping[str, str] | None = None) -> dict[str, FamilyMeta]:
    """Every family folder's metadata (:class:`FamilyMeta`), by family name: the built-in families'
    and the plug-in folders' (:func:`plugin_families`), read from each folder's ``meta.py`` without
    importing torch or memlab.  A folder without ``meta.py`` declares nothing (empty metadata).

    Raises:
        ValueError: two folders declare the same family, or a ``meta.py`` is not plain data.
    """
    out: dict[str, FamilyMeta] = {}
    for name, folder in builtin_families() + plugin_families(environ):
        if name in out and out[name].folder != folder:
            raise ValueError(f"family {name!r} is declared by two folders: {out[name].folder} and {folder}")
        out[name] = read_family_meta(name, folder)
    return out


def read_family_meta(name: str, folder: Path) -> FamilyMeta:
    """The metadata ``folder/meta.py`` declares (``COLORS``, ``TIME_HELD_OUT``, ``BENCHMARKS``,
    ``HARNESS_LOAD_POINTS``, ``LIMIT_POINTS``, ``SITE_NOTES``), read as plain data with :mod:`ast` (the
    file is not run).

    Raises:
        ValueError: a name there is not a literal, or a point or note is not of its shape; the message
            names the file, the value and the shape.
    """
    path = Path(folder) / "meta.py"
    values: dict[str, Any] = {}
    if path.is_file():
        for stmt in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                try:
                    values[stmt.targets[0].id] = ast.literal_eval(stmt.value)
                except ValueError:
                    raise ValueError(f"{path}: {stmt.targets[0].id} is not plain data (a literal)") from None
    return FamilyMeta(name=name, folder=Path(folder), colors=dict(values.get("COLORS", {})),
                      time_held_out=tuple((label, dict(params)) for label, params in values.get("TIME_HELD_OUT", ())),
                      benchmarks=dict(values.get("BENCHMARKS", {})),
                      harness_load_points=_points(path, "HARNESS_LOAD_POINTS", values.get("HARNESS_LOAD_POINTS", ())),
                      limit_points=_points(path, "LIMIT_POINTS", values.get("LIMIT_POINTS", ())),
                      site_notes=_site_notes(path, values.get("SITE_NOTES", {})))


def _points(path: Path, key: str, value: Any) -> tuple[tuple[int, str, dict[str, Any]], ...]:
    """``value`` (``meta.py``'s ``key``) checked as ``((position: int, technique: str, parameters: dict), ...)``."""
    ok = isinstance(value, (tuple, list)) and all(
        isinstance(p, (tuple, list)) and len(p) == 3 and type(p[0]) is int and isinstance(p[1], str)
        and isinstance(p[2], dict) for p in value)
    if not ok:
        raise ValueError(f"{path}: {key} = {value!r:.200} is not ((position: int, technique: str, parameters: "
                         "dict), ...)")
    return tuple((p[0], p[1], dict(p[2])) for p in value)


def _site_notes(path: Path, value: Any) -> dict[str, dict[str, Any]]:
    """``value`` (``meta.py``'s ``SITE_NOTES``) checked as ``{technique: {"text": str, "when": ("extra.KEY"
    or "params.KEY", ...), "fill": {str: str}}}`` (``when`` and ``fill`` optional)."""
    def note_ok(note: Any) -> bool:
        return (isinstance(note, dict) and isinstance(note.get("text"), str)
                and set(note) <= {"text", "when", "fill"}
                and isinstance(note.get("when", ()), (tuple, list))
                and all(isinstance(w, str) and w.partition(".")[0] in ("extra", "params") and w.partition(".")[2]
                        for w in note.get("when", ()))
                and isinstance(note.get("fill", {}), dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in note.get("fill", {}).items()))

    if not (isinstance(value, dict) and all(isinstance(k, str) and note_ok(n) for k, n in value.items())):
        raise ValueError(f"{path}: SITE_NOTES = {value!r:.200} is not {{technique: {{'text': str, 'when': "
                         "('extra.KEY' or 'params.KEY', ...), 'fill': {str: str}}}}")
    return {k: {"text": n["text"], "when": tuple(n.get("when", ())), "fill": dict(n.get("fill", {}))}
            for k, n in value.items()}


def reproduction_folders(environ: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """``(family, folder)`` of every family folder's :data:`REPRODUCTIONS` sub-package: the built-in
    families', then the plug-in folders' (:func:`plugin_families` of ``environ``), found without
    importing them (the site reads their modules' constants from source)."""
    return [(name, where / REPRODUCTIONS) for name, where in builtin_families() + plugin_families(environ)
            if (where / REPRODUCTIONS / "__init__.py").is_file()]


def reproduction_modules() -> list[tuple[str, Path]]:
    """``(module name, source file)`` of the public modules of every family folder's :data:`REPRODUCTIONS`
    sub-package, by module name: the built-in families' and those of the plug-in folders loaded so far
    (:func:`discover` loads ``MEMLAB_PLUGINS``), under the name each was loaded as; not imported."""
    packages = {where: f"{_FAMILIES}.{name}" for name, where in builtin_families()}
    packages.update({Path(path): module for path, module in _PLUGINS.items()})
    out = []
    for where, package in packages.items():
        if (where / REPRODUCTIONS / "__init__.py").is_file():
            out.extend(_package_modules(f"{package}.{REPRODUCTIONS}", where / REPRODUCTIONS))
    return sorted(out)


def _package_modules(package: str, where: Path) -> list[tuple[str, Path]]:
    """``(module name, source file)`` of the public modules of the package at ``where``: ``workload``
    first, then the others by name; a :data:`REPRODUCTIONS` sub-package is not one of them (its
    modules measure; :func:`reproduction_modules` lists them)."""
    infos = [i for i in pkgutil.iter_modules([str(where)]) if not i.name.startswith("_") and i.name != REPRODUCTIONS]
    infos.sort(key=lambda i: (i.name != "workload", i.name))
    return [(f"{package}.{i.name}", where / i.name / "__init__.py" if i.ispkg else where / f"{i.name}.py")
            for i in infos]


def _import_all() -> None:
    for module, _ in builtin_modules():
        importlib.import_module(module)
    for path in os.environ.get("MEMLAB_PLUGINS", "").split(os.pathsep):
        if path.strip():
            load_plugin(path.strip())


def load_plugin(path: str | os.PathLike) -> list[str]:
    """Import a user's Python file, or a family folder, so the techniques it defines register themselves.

    A family folder is the shape of a built-in family (``memlab/families/<name>/``: ``__init__.py``,
    ``workload.py``, the technique modules, ``meta.py``): it is imported as a package under a private
    name, then each of its modules (:func:`builtin_modules`' order), so its modules import each other
    relatively and memlab absolutely.  Loading the same path twice is a no-op.  A file is imported
    under a private module name, so its ``if __name__ == "__main__":`` block does not run.  A file that
    registers nothing and defines ``build``/``batch`` is a model file: :mod:`memlab.own_model`
    registers its workload and techniques.

    Returns:
        names of the techniques the file or folder registered (empty on a repeated load).

    Raises:
        FileNotFoundError: ``path`` is neither a file nor a folder holding ``__init__.py``.
        ImportError: the file or folder failed to import (the original error is chained).
    """
    discover()
    resolved = str(Path(path).expanduser().resolve())
    if resolved in _PLUGINS:
        return []
    folder = os.path.isfile(os.path.join(resolved, "__init__.py"))
    if not folder and not os.path.isfile(resolved):
        raise FileNotFoundError(f"plug-in file {str(path)!r} does not exist (nor a family folder with __init__.py)")
    before, workloads_before = set(registered()), set(_WORKLOADS)
    guarded = _class_attributes()  # NOTE [ a plug-in cannot change what memlab measures against ]
    mod_name = f"memlab_plugin_{len(_PLUGINS)}_{Path(resolved).stem}"
    spec = (importlib.util.spec_from_file_location(mod_name, os.path.join(resolved, "__init__.py"),
                                                   submodule_search_locations=[resolved]) if folder
            else importlib.util.spec_from_file_location(mod_name, resolved))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import plug-in {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
        for name, _ in _package_modules(mod_name, Path(resolved)) if folder else ():
            importlib.import_module(name)
        if set(registered()) == before and set(_WORKLOADS) == workloads_before and _is_model_file(module):
            importlib.import_module(_MODEL_FILES).register_model_module(module, resolved)
        _refuse_changes(guarded, str(path), before, workloads_before)
    except Exception as exc:
        for name in [m for m in sys.modules if m == mod_name or m.startswith(mod_name + ".")]:
            del sys.modules[name]
        raise ImportError(f"plug-in {str(path)!r} failed to import: {exc}") from exc
    _PLUGINS[resolved] = mod_name
    return sorted(set(registered()) - before)


# NOTE [ a plug-in cannot change what memlab measures against ]
# A plug-in is trusted code (docs/threat-model.md), but one that replaced a built-in workload's
# reference at import made a technique computing half the output "ok" (max |error| 0).  So before a
# plug-in is imported, every attribute of every class above a registered workload or technique
# (built-ins, earlier plug-ins, and Workload and Technique themselves) is taken, by identity and, for
# a dict, list or set, as a copy; after its import, one changed, added or removed attribute refuses
# the plug-in (ImportError naming the class and attribute), puts the attributes back and unregisters
# what it registered.  A plug-in's own classes may define anything, a reference included (built-in
# peers do).  What a technique does later, while it is measured, is not watched: a plug-in written to
# defeat memlab is out of scope.
def _class_attributes() -> dict[type, dict[str, Any]]:
    """``{class: {attribute: value, or a copy of a dict/list/set}}`` of every class above a registered
    workload or technique (``object`` aside)."""
    classes = {c for cls in [*_WORKLOADS.values(), *_TECHNIQUES.values()] for c in cls.__mro__ if c is not object}
    return {c: {k: (type(v)(v) if type(v) in (dict, list, set) else v) for k, v in vars(c).items()} for c in classes}


def _changed(was: Any, now: Any) -> bool:
    if type(was) in (dict, list, set) and type(now) is type(was):
        try:
            return bool(was != now)
        except Exception:  # noqa: BLE001 - values that cannot be compared count as changed
            return True
    return was is not now


def _refuse_changes(guarded: dict[type, dict[str, Any]], path: str, techniques: set[str],
                    workloads: set[str]) -> None:
    """ImportError when a guarded class changed; its attributes are put back first and what the plug-in
    registered is unregistered (NOTE [ a plug-in cannot change what memlab measures against ])."""
    changed = []
    for cls, attrs in guarded.items():
        now = dict(vars(cls))
        for key in sorted(set(attrs) | set(now)):
            if key not in now or key not in attrs or _changed(attrs[key], now[key]):
                changed.append(f"{cls.__qualname__}.{key}")
                if key in attrs:
                    setattr(cls, key, attrs[key])
                else:
                    delattr(cls, key)
    if not changed:
        return
    for name in set(_TECHNIQUES) - techniques:
        del _TECHNIQUES[name]
    for name in set(_WORKLOADS) - workloads:
        del _WORKLOADS[name]
    raise ImportError(f"it changes {', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''}, which memlab "
                      f"measures against; refused (docs/threat-model.md)")


def _is_model_file(module) -> bool:
    """A file that registers nothing and defines ``build`` or ``batch``: a user's model file, whose
    workload and techniques :data:`_MODEL_FILES` registers."""
    return hasattr(module, "build") or hasattr(module, "batch")


def loaded_plugins() -> list[str]:
    """Resolved paths of the plug-in files and family folders loaded so far."""
    return list(_PLUGINS)


def forget_plugin(path: str | os.PathLike) -> bool:
    """Drop ``path`` from :func:`loaded_plugins` (True if it was there): for a plug-in loaded from a
    folder that is about to be deleted.  An isolated measurement hands every loaded plug-in to its
    child process, which would fail to find the deleted file; the techniques it registered stay
    registered in this process."""
    return _PLUGINS.pop(str(Path(path).expanduser().resolve()), None) is not None


def list_techniques(family: str | None = None) -> list[str]:
    """Sorted names of the registered techniques (optionally of one family)."""
    discover()
    return sorted(n for n, c in registered().items() if family is None or c.family() == family)


def list_families() -> list[str]:
    discover()
    return sorted({c.family() for c in registered().values()})


def get_technique(name: str) -> type:
    """The technique class registered as ``name``.

    Raises:
        ValueError: unknown name; the message lists what exists.
    """
    discover()
    try:
        return registered()[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(registered())) or "(none)"
        raise ValueError(f"unknown technique {name!r}; available: {known}") from None


def list_workloads() -> list[str]:
    """Sorted names of the registered workloads."""
    discover()
    return sorted(_WORKLOADS)


def get_workload(name: str) -> type:
    """The workload class registered as ``name``.

    Raises:
        ValueError: unknown name; the message lists what exists.
    """
    discover()
    try:
        return _WORKLOADS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown workload {name!r}; available: {', '.join(sorted(_WORKLOADS)) or '(none)'}") from None
