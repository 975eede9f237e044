"""What several commands share: the usage error, stderr/stdout helpers, the checks made before torch is
imported (files, ``--param`` pairs, names), and the calls into the registry and the measurement."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Sequence

from ..core.setting import DEFAULTS, Setting
from . import names
from ..core.params import split_params
from ..registry import load_plugin

__all__ = ["UsageError", "say", "print_or_drop", "check_file", "check_files", "check_measured_name",
           "parse_params", "load_plugins", "model_file", "setting_of", "measure_kwargs"]


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def say(text: str) -> None:
    """One line to stderr.  A closed stderr is ignored: messages must never stop a sweep."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def print_or_drop(text: str) -> None:
    """Print to stdout.  A reader that went away (``| head -1``) is not an error: the text is
    dropped and stdout is pointed at /dev/null, so exiting prints no "Exception ignored" either."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()


def _stdout_to_devnull() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real descriptor behind sys.stdout
        sys.stdout = open(os.devnull, "w")


# -- checks made before torch is imported (NOTE [ names before torch ] in memlab/cli/names.py) ----------
def check_file(what: str, path: str) -> None:
    """``what`` (``model file``, ``plug-in file``) ``path`` must be a regular file: FileNotFoundError
    (the registry's words for a missing one) or UsageError, before anything is imported."""
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist")
    if p.is_dir():
        raise UsageError(f"{what} {str(path)!r} is a directory, not a Python file")
    if not p.is_file():
        raise UsageError(f"{what} {str(path)!r} is not a regular file")


def check_files(args) -> None:
    """Every ``--plugin`` and the ``--model`` of ``args`` exist as files (a ``--plugin`` may be a
    family folder holding ``__init__.py``)."""
    for path in getattr(args, "plugin", None) or []:
        if not (Path(path).expanduser() / "__init__.py").is_file():  # a family folder, else a file
            check_file("plug-in file", path)
    if getattr(args, "model", None):
        check_file("model file", args.model)


def check_measured_name(args) -> None:
    """``measure``/``timeline``: the technique and each ``--param`` name, from the source when every
    technique is built in; a malformed ``--param`` whatever the technique."""
    pairs = split_params(args.param or [])  # malformed or repeated: ValueError with the NAME=VALUE form
    if args.name is not None and names.applies(args.plugin, getattr(args, "model", None)):
        names.check_technique(args.name)
        names.check_params(args.name, pairs)


# -- the registry and the measurement -------------------------------------------------------------
def parse_params(cls, pairs: Sequence[str]) -> dict[str, Any]:
    specs = cls.all_params()
    out: dict[str, Any] = {}
    for key, text in split_params(pairs).items():  # a malformed or repeated --param: ValueError, exit 2
        if key not in specs:
            raise UsageError(f"technique {cls.name!r} has no parameter {key!r}; valid parameters: {', '.join(sorted(specs))}")
        out[key] = specs[key].parse(key, text)
    return out


def load_plugins(args) -> None:
    if not getattr(args, "plugin", None):  # the registry imports torch: commands that need no technique stay fast
        return

    for p in args.plugin:
        load_plugin(p)


def model_file(args, command: str) -> None:
    """``--model FILE.py``: point ``args`` at the model file's family (:mod:`memlab.own_model`)."""
    if getattr(args, "model", None):
        from ..own_model import apply_model_args  # deferred: torch line

        apply_model_args(args, command)


def setting_of(args) -> Setting:
    """The measuring options of ``args`` as a validated :class:`~memlab.core.setting.Setting` (a ValueError
    naming the bad value, exit status 2, before torch is imported)."""
    d = DEFAULTS  # --accumulate and --grads: measure and sweep only
    return Setting(device=args.device, dtype=args.dtype, mode=args.mode, optimizer=args.optimizer, loss=args.loss,
                   accumulate=getattr(args, "accumulate", d.accumulate), grads=getattr(args, "grads", d.grads),
                   iterations=args.iterations, repeats=args.repeats, threads=args.threads, timeout=args.timeout,
                   time_budget=args.time_budget).validate()


def measure_kwargs(args) -> dict[str, Any]:
    """The measuring options of ``args`` as :func:`memlab.measure`'s keywords: the validated
    ``setting`` (:func:`setting_of`) and how to isolate the run."""
    return {"setting": setting_of(args), "isolate": False if args.in_process else ("spawn" if args.spawn else True)}
