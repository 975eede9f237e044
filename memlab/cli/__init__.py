"""``memlab`` command line: argument parsing and exit codes only; the work happens elsewhere.

One module per command (``memlab/cli/<command>.py``: its options, a check made before torch is
imported, and the call into the room that does the work); the shared option groups in ``options.py``;
the torch-free index of the built-in names in ``names.py`` (NOTE [ names before torch ]).

Exit status: 0 success, 1 a measurement was not ``ok`` (mismatch, leak, oom or error) or a
reference check failed, 2 bad input (unknown technique, family or parameter, parameter out of range,
unknown device, a missing file, a ``MEMLAB_*`` setting that is not valid...), answered before torch is
imported wherever the names allow.
``sweep``'s statuses are in :mod:`memlab.cli.sweep`.
"""
from __future__ import annotations

import sys
from typing import Sequence

from .common import UsageError, check_files, load_plugins
from .parser import build_parser
from ..core.env_settings import environment_problem
from ..core.errors import TechniqueUnavailable

__all__ = ["main", "build_parser", "UsageError"]


def _parser():
    """The ``memlab`` parser (the name the tests and older callers import)."""
    return build_parser()


def _check_environment() -> None:
    """Every ``MEMLAB_*`` setting, before torch (NOTE [ environment settings up front ])."""
    problem = environment_problem()
    if problem:
        raise UsageError(problem)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    try:
        _check_environment()
        check_files(args)
        precheck = getattr(args, "precheck", None)
        if precheck is not None:
            precheck(args)
        load_plugins(args)
        return args.func(args)
    except (UsageError, ValueError, TechniqueUnavailable, FileNotFoundError, ImportError) as exc:
        print(f"memlab: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
