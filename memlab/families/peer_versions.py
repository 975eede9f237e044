"""The one check every peer comparator makes first: the exact version of its package that memlab was
written and verified against is installed, or the technique is unavailable with the command that
installs it (NOTE [ peer pins ] in docs/families.md, section Peers)."""
from __future__ import annotations

from importlib import metadata

from memlab.technique import TechniqueUnavailable

__all__ = ["require_version"]


def require_version(dist: str, version: str) -> None:
    """Raise :class:`~memlab.technique.TechniqueUnavailable` unless distribution ``dist`` is installed at
    exactly ``version`` (its message says which version is there and how to install the right one)."""
    try:
        found = metadata.version(dist)
    except metadata.PackageNotFoundError:
        found = None
    if found != version:
        have = "not installed" if found is None else f"version {found} is installed"
        raise TechniqueUnavailable(
            f"peer comparator needs {dist}=={version} ({have}); install it with "
            f"`pip install --no-deps {dist}=={version}` or `pip install 'memlab[peers]'`")
