"""memlab's environment settings (``MEMLAB_*``), checked before anything is measured.

NOTE [ environment settings up front ]
A setting read only inside a measuring child is refused there, after the memory phase, as one
``error`` row per point: a sweep of 300 points wrote 300 rows that each said the same wrong value.
So the command line checks every ``MEMLAB_*`` setting memlab reads before it imports torch, and a bad
one is one line naming the variable, its value and what is valid, exit status 2:

* ``MEMLAB_TIMING_CPU``: ``none`` or a CPU this process may run on (NOTE [ one CPU per timed phase ]
  in memlab.measurement.cpu_pin, which reads it in the child);
* ``MEMLAB_PLUGINS``: plug-in files or family folders, separated by ``os.pathsep``; each must exist;
* ``MEMLAB_COMMIT``: the commit rows record, as given: one printable line of at most 200 characters;
* ``MEMLAB_CACHE``: the advisor's cache folder: not a file.

``MEMLAB_PARENT_PID`` is memlab's own, set by the runner for its children, and not checked here.
Imports nothing of memlab's and not torch.
"""
from __future__ import annotations

import os
from typing import Mapping

__all__ = ["environment_problem", "SETTINGS"]

#: the settings checked, in the order a problem is reported
SETTINGS = ("MEMLAB_TIMING_CPU", "MEMLAB_PLUGINS", "MEMLAB_COMMIT", "MEMLAB_CACHE")


def _cpus() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity masks here: the child does not pin either
        return None


def _timing_cpu(value: str) -> str | None:
    text = value.strip()
    cpus = _cpus()
    if not text or text.lower() == "none" or cpus is None:
        return None
    if text.lstrip("+").isdigit() and int(text) in cpus:
        return None
    return f"expected 'none' or one of the CPUs this process may run on: {cpus}"


def _plugins(value: str) -> str | None:
    for entry in (p.strip() for p in value.split(os.pathsep)):
        path = os.path.expanduser(entry)
        if entry and not os.path.isfile(path) and not os.path.isfile(os.path.join(path, "__init__.py")):
            return f"the plug-in file {entry!r} does not exist (nor a family folder with __init__.py)"
    return None


def _commit(value: str) -> str | None:
    text = value.strip()
    if len(text) <= 200 and text.isprintable():
        return None
    return "expected one printable line of at most 200 characters (a commit id)"


def _cache(value: str) -> str | None:
    if value.strip() and os.path.exists(value) and not os.path.isdir(value):
        return "expected a folder (the advisor's cache), not a file"
    return None


_CHECKS = {"MEMLAB_TIMING_CPU": _timing_cpu, "MEMLAB_PLUGINS": _plugins, "MEMLAB_COMMIT": _commit,
           "MEMLAB_CACHE": _cache}


def environment_problem(env: Mapping[str, str] | None = None) -> str | None:
    """One line naming the first ``MEMLAB_*`` setting of ``env`` (default ``os.environ``) that is not
    valid, its value and what is valid; None when every one is (NOTE [ environment settings up front ])."""
    env = os.environ if env is None else env
    for name in SETTINGS:
        value = env.get(name)
        if value is None:
            continue
        why = _CHECKS[name](value)
        if why:
            shown = value if len(value) <= 60 else value[:57] + "..."
            return f"{name}={shown!r} is not valid: {why}"
    return None
