"""Finding techniques by name: built-in modules, user plug-in files, ``MEMLAB_PLUGINS``.

Built-in techniques live one family per module under :mod:`memlab.techniques`; every module there is
imported on first lookup, so adding a module (or a user's file via :func:`load_plugin`) is all it
takes for a technique to show up in the CLI, the sweep, the benchmarks and the site.

``MEMLAB_PLUGINS`` (paths separated by ``os.pathsep``) names plug-in files loaded on discovery; the
measurement subprocess receives the plug-ins of its parent the same way.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path

from .technique import Technique, registered

__all__ = ["discover", "load_plugin", "list_techniques", "get_technique", "loaded_plugins"]

_DISCOVERED = False
_PLUGINS: dict[str, str] = {}  # resolved path -> module name


def discover() -> None:
    """Import every built-in technique module and the plug-ins named in ``MEMLAB_PLUGINS``."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    from . import techniques, workloads

    for pkg in (workloads, techniques):
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{pkg.__name__}.{info.name}")
    for path in os.environ.get("MEMLAB_PLUGINS", "").split(os.pathsep):
        if path.strip():
            load_plugin(path.strip())


def load_plugin(path: str | os.PathLike) -> list[str]:
    """Import a user's Python file so the techniques it defines register themselves.

    Loading the same file twice is a no-op.  The file is imported under a private module name, so
    its ``if __name__ == "__main__":`` block does not run.

    Returns:
        names of the techniques the file registered (empty on a repeated load).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ImportError: the file failed to import (the original error is chained).
    """
    discover()
    resolved = str(Path(path).expanduser().resolve())
    if resolved in _PLUGINS:
        return []
    if not os.path.isfile(resolved):
        raise FileNotFoundError(f"plug-in file {str(path)!r} does not exist")
    before = set(registered())
    mod_name = f"memlab_plugin_{len(_PLUGINS)}_{Path(resolved).stem}"
    spec = importlib.util.spec_from_file_location(mod_name, resolved)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import plug-in {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[mod_name]
        raise ImportError(f"plug-in {str(path)!r} failed to import: {exc}") from exc
    _PLUGINS[resolved] = mod_name
    return sorted(set(registered()) - before)


def loaded_plugins() -> list[str]:
    """Resolved paths of the plug-in files loaded so far."""
    return list(_PLUGINS)


def list_techniques(family: str | None = None) -> list[str]:
    """Sorted names of the registered techniques (optionally of one family)."""
    discover()
    return sorted(n for n, c in registered().items() if family is None or c.family() == family)


def list_families() -> list[str]:
    discover()
    return sorted({c.family() for c in registered().values()})


def get_technique(name: str) -> type[Technique]:
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
