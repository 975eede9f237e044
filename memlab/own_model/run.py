"""Your own model: a model file measured, checked and swept like a built-in family.

::

    memlab measure --model my_model.py --param batch=4                # plain autograd
    memlab measure checkpoint_blocks --model my_model.py --param batch=4
    memlab check --model my_model.py
    memlab sweep --model my_model.py --grid batch=1,2,4 --out rows.jsonl
    memlab.measure_model("my_model.py", "checkpoint_blocks", batch=4)  # -> Measurement

A model file (:mod:`memlab.own_model.workload`) registers, when loaded, a workload and one
technique of each kind (:mod:`memlab.own_model.techniques`); loading goes through
:func:`memlab.registry.load_plugin`, so every measuring child loads it again by path, as it does
any plug-in.  :func:`load_model` also checks the file once (build, batch sizes, loss) and turns
every problem into one :class:`~memlab.own_model.workload.ModelFileError` line.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..core.setting import DEFAULTS
from .workload import ModelFileError, ModelWorkload, check_model_file, read_model_module, stem_of, workload_for
from ..core.errors import TechniqueUnavailable
from ..registry import get_technique, get_workload, list_techniques, list_workloads, load_plugin
from .techniques import KINDS, techniques_for

__all__ = ["load_model", "load_model_bounded", "CHILD_LOAD_SECONDS", "measure_model", "technique_name", "model_techniques", "register_model_module",
           "ModelFileError", "apply_model_args"]


def register_model_module(module, path: str) -> None:
    """Register the workload and techniques of an imported model file (called by
    :func:`memlab.registry.load_plugin` for a file that defines ``build``/``batch`` and registers no
    technique).  Checks only what needs no call: :func:`load_model` checks the rest."""
    mf = read_model_module(module, path)
    for name in list_workloads():
        other = get_workload(name)
        if issubclass(other, ModelWorkload) and other is not ModelWorkload and other.model_file.stem == mf.stem:
            raise ModelFileError(f"model file {path} has the name of {other.model_file.path}, loaded before "
                                 f"(family {mf.family}); rename one of them")
    techniques_for(workload_for(mf, module.__name__))


def _workload_of(path: str):
    for name in list_workloads():
        cls = get_workload(name)
        if issubclass(cls, ModelWorkload) and cls is not ModelWorkload and cls.model_file.path == path:
            return cls
    return None


def load_model(model: str | os.PathLike | Callable):
    """Load and check a model file; returns its workload class (``.family``: ``model:<stem>``).

    ``model``: the file's path, or its ``build`` function (the file it is defined in).  Loading a
    file twice checks it once.

    Raises:
        FileNotFoundError: no such file.
        ModelFileError: the file raises on import, lacks ``build``/``batch``, or fails
            :func:`~memlab.own_model.workload.check_model_file`; one line naming the file.
    """
    workload = _imported(model)
    if not workload.__dict__.get("_checked"):
        check_model_file(workload.model_file)
        workload._checked = True
    return workload


def _file_path(model) -> Path:
    """The model file's path: FileNotFoundError when there is none, ModelFileError for a directory."""
    path = _path_of(model)
    if path.is_dir():
        raise ModelFileError(f"model file {str(model)!r} is a directory, not a Python file; give the .py file "
                             f"that defines build() and batch(size)")
    if not path.is_file():
        raise FileNotFoundError(f"model file {str(model)!r} does not exist")
    return path


def _imported(model):
    """The workload of the model file, imported (once) and registered; not checked."""
    path = _file_path(model)
    resolved = str(path.resolve())
    if _workload_of(resolved) is None:
        try:
            load_plugin(resolved)
        except ImportError as exc:
            cause = exc.__cause__
            if isinstance(cause, ModelFileError):
                raise cause from None
            what = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
            raise ModelFileError(f"model file {path.name} failed to import: {what}".splitlines()[0]) from None
    workload = _workload_of(resolved)
    if workload is None:
        raise ModelFileError(f"model file {path.name} defines neither build() nor batch(), or registers "
                             f"techniques of its own (a plug-in: use --plugin); a model file defines build() -> "
                             f"torch.nn.Module and batch(size) -> tensors")
    return workload


# NOTE [ a model file loaded under a timeout ]
# A user's file runs arbitrary code on import and in build(): an import that waits on a network, a
# build() that never returns.  So the command line loads and checks it first in a child process
# (``python -c``, a session of its own) killed at ``--timeout``: a file that never finishes is one
# line and exit status 2, for measure, check, sweep and advise alike.  Once the child has loaded and
# checked it, the command imports it itself and skips the checks the child made.
# Evidence: tests/test_model_contract.py (a build() or an import that never returns, each command)
def load_model_bounded(model, timeout: float | None):
    """:func:`load_model`, its import and checks run first in a child killed after ``timeout``
    seconds (NOTE [ a model file loaded under a timeout ]); ``timeout`` None: in this process.

    Raises:
        ModelFileError: the child's one line (a bad file), or the file did not load and check in time.
    """
    if timeout is None:
        return load_model(model)
    path = _file_path(model)
    if _workload_of(str(path.resolve())) is None:
        _check_in_child(path, timeout)
        workload = _imported(model)
        workload._checked = True
    return load_model(model)


#: seconds a fresh Python took to import torch and load and check each model file (by resolved path),
#: in :func:`load_model_bounded`'s child: what every measuring child of the file pays before it measures
CHILD_LOAD_SECONDS: dict[str, float] = {}

_CHILD = ("import sys\nfrom memlab.own_model import load_model\ntry:\n    load_model(sys.argv[1])\n"
          "except (ValueError, FileNotFoundError, ImportError) as exc:\n"
          "    print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, file=sys.stderr)\n    sys.exit(2)\n")


def _check_in_child(path: Path, timeout: float) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])])}
    began = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        _, err = child.communicate(timeout=timeout)
        CHILD_LOAD_SECONDS[str(path.resolve())] = time.perf_counter() - began
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise ModelFileError(f"model file {path.name}: loading it (its import, build(), batch(1), batch(2)) did "
                             f"not finish within --timeout {timeout:g} s; a file that waits (a download, a lock, "
                             f"a loop) must return, or give a larger --timeout") from None
    if child.returncode != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        raise ModelFileError(lines[-1] if lines else f"model file {path.name}: loading it ended with exit status "
                                                      f"{child.returncode}")


def _path_of(model) -> Path:
    if callable(model) and not isinstance(model, (str, os.PathLike)):
        try:
            source = inspect.getsourcefile(model)
        except TypeError:
            source = None
        if not source:
            raise ModelFileError(f"{getattr(model, '__name__', model)!r} is not defined in a file; a measuring "
                                 f"child imports the model file again, so pass its path")
        return Path(source)
    return Path(model)


def model_techniques(model) -> dict[str, str]:
    """``{kind: registered technique name}`` of a model file (``{"plain": "my_model__plain", ...}``)."""
    workload = load_model(model)
    found = {get_technique(n).kind: n for n in list_techniques(workload.family)}
    return {kind: found[kind] for kind in KINDS if kind in found}


def technique_name(model, kind: str) -> str:
    """The registered name of technique ``kind`` of a model file; ValueError listing the kinds."""
    names = model_techniques(model)
    if kind in names.values():
        return kind
    if kind not in names:
        raise ValueError(f"unknown technique {kind!r} for a model file; available: {', '.join(names)}")
    return names[kind]


def measure_model(model, technique: str = "plain", **kwargs: Any):
    """Measure technique ``technique`` (a kind: ``plain``, ``checkpoint_blocks``...) on a model file.

    ``kwargs``: :func:`memlab.measure`'s settings (``device``, ``dtype``, ``optimizer``...) and the
    workload's parameters (``batch=4``, ``blocks="transformer.h"``, a ``batch()`` size such as
    ``seq=64``).  ``loss`` must stay ``given``: the step's loss is the file's.

    Returns:
        a :class:`~memlab.core.record.Measurement` (family ``model:<stem>``), like :func:`memlab.measure`.

    Example:
        >>> m = memlab.measure_model("examples/tiny_gpt.py", "checkpoint_blocks", batch=4)  # doctest: +SKIP
        >>> m.extra["block_count"], m.peak_allocated_bytes                                 # blocks, bytes
    """
    from ..measurement import measure  # deferred: torch line

    _loss_is_the_files(kwargs.get("loss", (kwargs.get("setting") or DEFAULTS).loss))
    return measure(technique_name(model, technique), **kwargs)


def _loss_is_the_files(loss: str) -> None:
    if loss != DEFAULTS.loss:
        raise ValueError(f"loss={loss!r} does not apply to a model file: its step minimises the file's "
                         f"loss(output, batch) (or the mean squared output); leave loss={DEFAULTS.loss!r}")


def apply_model_args(args, command: str) -> None:
    """``--model FILE`` on the command line: load and check the file, then point ``args`` at its
    family, so ``memlab measure|check|sweep`` run unchanged.  ``measure``'s name and ``sweep``'s
    ``--technique`` are kinds (``checkpoint_blocks``); ``--blocks`` becomes ``blocks=`` in
    ``--param`` (measure) or ``--grid`` (sweep)."""
    if command == "measure":
        _refuse_device(args.model, args.name or "plain", getattr(args, "device", None))
    workload = load_model_bounded(args.model, getattr(args, "timeout", None))
    names = model_techniques(args.model)
    blocks = getattr(args, "blocks", None)
    if command == "measure":
        _loss_is_the_files(args.loss)
        args.name = technique_name(args.model, args.name or "plain")
        args.param = (args.param or []) + ([f"blocks={blocks}"] if blocks else [])
    elif command == "sweep":
        _loss_is_the_files(args.loss)
        if args.family and args.family != workload.family:
            raise ValueError(f"--model sweeps family {workload.family}; leave out --family {args.family}")
        args.family = workload.family
        args.technique = [technique_name(args.model, k) for k in args.technique] if args.technique else None
        args.grid = (args.grid or []) + ([f"blocks={blocks}"] if blocks else [])
    elif command == "check":
        if blocks:
            raise ValueError("--blocks does not apply to memlab check, which checks each technique at batch=2 "
                             "with the guessed blocks; give --blocks to memlab measure or sweep")
        args.name = [technique_name(args.model, k) for k in args.name] if args.name else list(names.values())
    else:
        raise ValueError(f"--model does not apply to memlab {command}")


def _refuse_device(model, kind: str, device: str | None) -> None:
    """A kind that cannot run on ``device`` (``offload_activations`` on the CPU): refused before the
    file is loaded, in the words of :meth:`memlab.Technique.check_available`."""
    template = KINDS.get(kind)
    device_type = (device or "cpu").split(":")[0]
    if template is not None and device_type not in template.devices:
        raise TechniqueUnavailable(f"technique '{stem_of(model)}__{kind}' does not support device {device_type!r}; "
                                   f"supported: {', '.join(template.devices)}")
