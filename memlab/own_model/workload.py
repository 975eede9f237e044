"""A user's model file as a workload: ``build()``, ``batch(size)`` and optionally ``loss(output, batch)``.

A model file is a Python file with::

    def build() -> torch.nn.Module: ...                 # the model, built on the CPU in float32
    def batch(size) -> Tensor | tuple | list | dict:    # `size` samples: inputs (and targets)
    def loss(output, batch) -> Tensor: ...               # optional: a scalar

Loading it (:func:`memlab.own_model.load_model`, or ``--model`` on the command line) registers a
workload named ``model_<stem>`` in family ``model:<stem>`` (``<stem>``: the file name without
``.py``, made an identifier), with parameters ``batch`` (the size given to ``batch()``, the
samples per step), every other keyword parameter of ``batch()`` that has an integer default (say
``seq=64``: sweepable like ``batch``), and ``blocks`` (which containers hold the repeated blocks;
empty: guessed, :func:`memlab.functional.blocks.find_blocks`).

How a step calls the model (:func:`call_model`): a tensor ``x`` -> ``model(x)``; a dict ->
``model(**batch)``; a tuple or list -> ``model(batch[0])`` (the rest are targets for ``loss``), or
``model(*batch[0])`` / ``model(**batch[0])`` when that first item is itself a tuple or dict.  The
step's output is the loss: ``loss(output, batch)`` if the file defines it, else ``output.loss``
(a Hugging Face style output carrying its loss), else the mean of the squared output.  The loss is
a scalar, so the upstream gradient is a 0-d one (``Problem.grad_output``, 8 bytes in float64).

# NOTE [ model file seeding and dtype ]
``build()`` and ``batch()`` run on the CPU in float32 with the global RNG seeded (``seed``, the
caller's RNG state restored afterwards: ``torch.random.fork_rng``), then the model and every
floating tensor of the batch are cast to the measured dtype and moved to the device; integer
tensors (token ids, class targets) only move.  So the float64 reference check sees the same values
as a float32 measurement, rounded, and a technique and its reference see the same model and batch.

# NOTE [ dropout stays on ]
A model is measured as it trains: in training mode, its dropout on (the bytes a dropout saves for
backward, on the CPU a noise tensor of its input's size and dtype, are part of the step).  Every step's forward starts from the
global RNG seeded with the problem's seed (:meth:`ModelWorkload.run`: ``torch.manual_seed``, which
allocates nothing), for the technique and for its reference alike, so the float64 check and the
step-by-step check compare two steps that drew the same random stream, and no model differs from
its reference by dropout alone.  Checkpointing restores the RNG state when it recomputes a block
(``preserve_rng_state``), so it draws the same masks as plain autograd.  Each step draws the same
masks as the last; bytes and time do not depend on which.  A technique that draws its random
numbers in another order (:attr:`memlab.own_model.techniques.AnyModelTechnique.reorders_randomness`)
is checked with dropout fixed to the identity instead, and its row says so
(``extra["check_randomness"]``).
Evidence: tests/test_model_file.py (the dropout tests: examples/encoder_dropout.py ok with every
generic kind; a model differing only by dropout ok, its noise bytes measured)

The file is imported by path in the parent and again in every measuring child (it travels as a
plug-in, NOTE [ worker isolation ]); nothing about it is pickled.
"""
from __future__ import annotations

import inspect
import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

import torch
from torch import nn

from ..functional.blocks import Blocks, blocks_for
from ..core.params import Param
from ..workload import Problem, Workload

__all__ = ["ModelFile", "ModelFileError", "ModelWorkload", "read_model_module", "check_model_file",
           "workload_for", "call_model", "call_args", "flatten_batch", "stem_of", "DEFAULT_BATCH", "FAMILY_PREFIX",
           "BUILD_OBSERVERS"]

#: called with the configuration each time a model file's problem is built in this process (a cold
#: ``advise --model`` counts its traces with it: :class:`memlab.own_model.advice.FitProgress`)
BUILD_OBSERVERS: list[Callable[[dict[str, Any]], None]] = []
#: ``batch`` when none is given
DEFAULT_BATCH = 4
#: a model file's family is this prefix and its stem (``model:tiny_gpt``)
FAMILY_PREFIX = "model:"
_FORMAT = ("a model file defines build() -> torch.nn.Module and batch(size) -> a tensor or a tuple/list/dict "
           "of tensors, and optionally loss(output, batch) -> a scalar tensor")


class ModelFileError(ValueError):
    """A model file that cannot be measured; the message is one line naming the file and the fix."""


def stem_of(path: str | Path) -> str:
    """The file name without ``.py`` as an identifier (``my-model.py`` -> ``my_model``)."""
    stem = re.sub(r"\W", "_", Path(path).stem) or "model"
    return f"m_{stem}" if stem[0].isdigit() or keyword.iskeyword(stem) else stem


@dataclass(frozen=True)
class ModelFile:
    """The functions of one model file.

    Attributes:
        path: the file's resolved path.
        build: ``build() -> nn.Module``.
        batch: ``batch(size, **sizes) -> tensors``.
        loss: ``loss(output, batch) -> scalar tensor``, or None (see the module doc).
        sizes: ``batch()``'s other keyword parameters with integer defaults (``{"seq": 64}``).
    """

    path: str
    build: Callable[[], nn.Module]
    batch: Callable[..., Any]
    loss: Callable[[Any, Any], torch.Tensor] | None
    sizes: dict[str, int]

    @property
    def stem(self) -> str:
        return stem_of(self.path)

    @property
    def family(self) -> str:
        return FAMILY_PREFIX + self.stem

    @property
    def name(self) -> str:
        """The file's name as the user wrote it (``my_model.py``), for messages."""
        return Path(self.path).name

    def fail(self, what: str) -> ModelFileError:
        return ModelFileError(f"model file {self.name}: {what}")


def read_model_module(module, path: str) -> ModelFile:
    """The :class:`ModelFile` of an imported model file (functions present and of the right shape).

    Raises:
        ModelFileError: ``build`` or ``batch`` missing or not callable, ``batch`` without a size
            parameter, ``loss`` not callable.
    """
    name = Path(path).name
    for fn in ("build", "batch"):
        if not callable(getattr(module, fn, None)):
            called = "build() for the model" if fn == "build" else "batch(size) for `size` samples"
            raise ModelFileError(f"model file {name} has no {fn}() function (memlab calls {called}); {_FORMAT}")
    loss = getattr(module, "loss", None)
    if loss is not None and not callable(loss):
        raise ModelFileError(f"model file {name}: loss is a {type(loss).__name__}, not a function; {_FORMAT}")
    return ModelFile(str(path), module.build, module.batch, loss, _batch_sizes(module.batch, name))


def _batch_sizes(fn, name: str) -> dict[str, int]:
    """``batch()``'s keyword parameters with integer defaults; ModelFileError when it takes no size."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return {}
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    if not positional:
        raise ModelFileError(f"model file {name}: batch() takes no size; define batch(size) returning `size` samples")
    sizes = {}
    for p in params[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is p.empty:
            raise ModelFileError(f"model file {name}: batch() parameter {p.name!r} has no default; give it one "
                                 f"(an integer default makes it a sweepable size, e.g. {p.name}=64)")
        if isinstance(p.default, int) and not isinstance(p.default, bool) and p.default >= 1:
            if p.name in ("batch", "blocks"):
                raise ModelFileError(f"model file {name}: batch() parameter {p.name!r} clashes with memlab's own "
                                     f"parameter of that name; rename it")
            sizes[p.name] = p.default
    return sizes


# -- batches ---------------------------------------------------------------------------------------
def flatten_batch(data, where: str = "batch") -> dict[str, torch.Tensor]:
    """The tensors of a batch by name (``x``; ``0``, ``1``; dict keys; nested joined by ``.``).

    Raises:
        TypeError: anything but tensors, tuples/lists and dicts with string keys; the message
            names where in the batch (``batch[1]``).
    """
    out: dict[str, torch.Tensor] = {}

    def visit(obj, name: str, shown: str) -> None:
        if isinstance(obj, torch.Tensor):
            out[name or "x"] = obj
        elif isinstance(obj, (tuple, list)) and obj:
            for i, item in enumerate(obj):
                visit(item, f"{name}.{i}" if name else str(i), f"{shown}[{i}]")
        elif isinstance(obj, dict) and obj and all(isinstance(k, str) for k in obj):
            for k, item in obj.items():
                visit(item, f"{name}.{k}" if name else k, f"{shown}[{k!r}]")
        else:
            kind = f"an empty {type(obj).__name__}" if isinstance(obj, (tuple, list, dict)) and not obj \
                else f"a {type(obj).__name__}"
            raise TypeError(f"{shown} is {kind}: expected a tensor, or a tuple/list/dict (string keys) of tensors")

    visit(data, "", where)
    return out


def _map_tensors(data, fn):
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, (tuple, list)):
        return type(data)(_map_tensors(x, fn) for x in data)
    return {k: _map_tensors(v, fn) for k, v in data.items()}


def _shapes(data) -> list[tuple[int, ...]]:
    return [tuple(t.shape) for t in flatten_batch(data).values()]


def call_args(data) -> tuple[tuple, dict, str]:
    """``(args, kwargs, shown)``: how a step calls the model on a batch (the module doc's convention),
    ``shown`` as a message writes it (``model(**batch)``)."""
    if isinstance(data, torch.Tensor):
        return (data,), {}, "model(batch)"
    if isinstance(data, dict):
        return (), data, "model(**batch)"
    first = data[0]
    if isinstance(first, dict):
        return (), first, "model(**batch[0])"
    if isinstance(first, (tuple, list)):
        return tuple(first), {}, "model(*batch[0])"
    return (first,), {}, "model(batch[0])"


def call_model(model: nn.Module, data):
    """The model's output on a batch (the calling convention of the module doc)."""
    args, kwargs, _ = call_args(data)
    return model(*args, **kwargs)


def _default_loss(output) -> torch.Tensor:
    """``output.loss`` (or ``output["loss"]``) when the model computes its loss; else the mean squared
    output; TypeError for an output that is neither a tensor nor carries a loss."""
    found = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if isinstance(found, torch.Tensor):
        return found
    if isinstance(output, torch.Tensor) and output.is_floating_point():
        return output.square().mean()
    kind = f"a {output.dtype} tensor" if isinstance(output, torch.Tensor) else f"a {type(output).__name__}"
    raise TypeError(f"the model returned {kind} and the file defines no loss(output, batch): define it to say "
                    f"what the step minimises")


def _as_scalar(value, mf: ModelFile) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.is_floating_point():
        kind = (f"a {value.dtype} tensor of shape {list(value.shape)}" if isinstance(value, torch.Tensor)
                else f"a {type(value).__name__}")
        raise mf.fail(f"loss(output, batch) returned {kind}; expected a floating scalar tensor (e.g. "
                      f"cross_entropy(...) or .mean())")
    return value.reshape(())


def loss_of(mf: ModelFile, model: nn.Module, data) -> torch.Tensor:
    """The step's scalar loss on ``data`` (module doc); ModelFileError for a non-scalar loss."""
    output = call_model(model, data)
    value = mf.loss(output, data) if mf.loss is not None else _default_loss(output)
    return _as_scalar(value, mf)


# -- the checks done once, in the process that loads the file ---------------------------------------
def check_model_file(mf: ModelFile) -> None:
    """Build the model (on the meta device where it can: no memory), make ``batch(1)`` and
    ``batch(2)``, bind ``batch(1)`` to ``forward()`` as memlab calls it (:func:`call_args`), and run
    the forward and the loss (on the meta device, or the CPU without gradients); one ModelFileError
    per problem, saying what memlab called and what to write instead.

    Raises:
        ModelFileError: ``build()`` raises or returns no ``nn.Module``, the model has no trainable
            parameter, ``batch()`` raises, returns something other than tensors, or the same shapes
            for sizes 1 and 2, ``forward()`` does not take the batch as memlab passes it (a dict
            key it has no parameter for), or the output gives no loss (a tuple or dict without
            ``loss`` and no ``loss()`` in the file) or the loss is not a scalar (when the forward
            runs there: an op without a meta kernel leaves those to the first measurement).
    """
    model = _build_for_check(mf)
    if not isinstance(model, nn.Module):
        raise mf.fail(f"build() returned a {type(model).__name__}; expected a torch.nn.Module")
    if not any(p.requires_grad for p in model.parameters()):
        raise mf.fail(f"build() returned a {type(model).__name__} with no trainable parameters: a training "
                      f"step has nothing to update")
    small, larger = (_call_batch(mf, n) for n in (1, 2))
    if _shapes(small) == _shapes(larger):
        raise mf.fail(f"batch(1) and batch(2) give the same shapes {_shapes(small)}: batch(size) must make "
                      f"`size` samples (memlab varies it)")
    _check_call(mf, model, small)
    on_meta = all(p.device.type == "meta" for p in model.parameters())
    try:
        with torch.no_grad():
            output = call_model(model, _map_tensors(small, lambda t: t.to("meta")) if on_meta else small)
    except Exception:  # noqa: BLE001 - an op without a meta kernel: the real run reports real errors
        return
    _check_output(mf, output, small)


def _check_call(mf: ModelFile, model: nn.Module, data) -> None:
    """The batch's items fit ``model.forward``'s parameters, as memlab calls it (:func:`call_args`)."""
    args, kwargs, shown = call_args(data)
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        forward = f"{type(model).__name__}.forward{_signature_text(signature)}"
        if kwargs:
            extra = [k for k in kwargs if k not in signature.parameters] or list(kwargs)
            fix = (f"make forward() take {', '.join(extra)} (forward(self, ..., {'=None, '.join(extra)}=None)), or "
                   f"return (inputs, targets) from batch(), say ({{...inputs}}, targets), the targets read by "
                   f"loss(output, batch)")
        else:
            fix = "make batch() return the inputs forward() takes first (a tuple of them for several), then targets"
        raise mf.fail(f"memlab called {shown} with batch(1) and {forward} refused it: {exc}; {fix}") from None


def _signature_text(signature: inspect.Signature) -> str:
    text = str(signature)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_output(mf: ModelFile, output, data) -> None:
    """The model's output gives the step a loss: a ``loss()`` in the file, a floating tensor, or an
    output carrying ``loss`` (module doc)."""
    if mf.loss is not None:
        try:
            value = mf.loss(output, data)
        except Exception:  # noqa: BLE001 - say, .item() on the meta device: the real run reports real errors
            return
        _as_scalar(value, mf)
        return
    try:
        _default_loss(output)
    except TypeError:
        _, _, shown = call_args(data)
        kind = (f"a {output.dtype} tensor" if isinstance(output, torch.Tensor)
                else f"a {type(output).__name__}" + (f" with keys {sorted(output)}" if isinstance(output, dict) else ""))
        first = f"[{next(iter(output))!r}]" if isinstance(output, dict) and output else "[0]"
        raise mf.fail(f"memlab called {shown} and got {kind}, with no loss in it and no loss(output, batch) in the "
                      f"file; define loss(output, batch) returning a scalar (e.g. F.cross_entropy(output{first}, "
                      f"batch[1])), or return the loss as output['loss'] / output.loss") from None


def _build_for_check(mf: ModelFile):
    try:
        with torch.device("meta"):
            return mf.build()
    except Exception:  # noqa: BLE001 - build on the CPU instead, where its real error shows
        pass
    try:
        return mf.build()
    except Exception as exc:  # noqa: BLE001 - a user's file may raise anything
        raise mf.fail(f"build() raised {type(exc).__name__}: {_first_line(exc)}") from None


def _call_batch(mf: ModelFile, size: int):
    try:
        data = mf.batch(size)
    except Exception as exc:  # noqa: BLE001
        raise mf.fail(f"batch({size}) raised {type(exc).__name__}: {_first_line(exc)}") from None
    try:
        flatten_batch(data, f"batch({size})")
    except TypeError as exc:
        raise mf.fail(f"batch({size}) returned something memlab cannot feed: {exc}") from None
    return data


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else ""


# -- the workload ----------------------------------------------------------------------------------
class ModelWorkload(Workload):
    """Base of the workload each model file registers (:func:`workload_for`): the file's model and
    batch at ``batch`` samples, the loss as output (a scalar), the plain step as reference."""

    model_file: ClassVar[ModelFile]
    samples_param = "batch"
    check_params = {"batch": 2}
    _meta_blocks: ClassVar[dict[str, Any]]

    def validate(self) -> None:
        if self.config.get("blocks", "").strip():
            self.meta_blocks()  # a --blocks that names no container: one line, before anything runs

    @classmethod
    def sweep_grid(cls, quick: bool) -> list[dict[str, Any]]:
        """``batch`` 1, 2 (quick) or 1, 2, 4: the sizes an exact memory model in ``batch`` is fitted from."""
        return [{"batch": b} for b in ((1, 2) if quick else (1, 2, 4))]

    def sizes(self) -> dict[str, int]:
        """The keyword sizes given to ``batch()`` besides the batch (``{"seq": 64}``)."""
        return {k: self.config[k] for k in self.model_file.sizes}

    def build(self, device: torch.device, dtype: torch.dtype, seed: int) -> Problem:
        """The model and batch, seeded, cast and moved (NOTE [ model file seeding and dtype ]).

        ``inputs``: the batch's tensors by name (:func:`flatten_batch`); ``extra["batch"]``: the batch
        as the file returned it (the same tensors), which the model and the loss receive;
        ``grad_output``: a 0-d one (the output is the scalar loss).
        """
        mf = self.model_file
        for observe in BUILD_OBSERVERS:
            observe(dict(self.config))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = mf.build()
            data = mf.batch(self.config["batch"], **self.sizes())
        model = model.to(device=device, dtype=dtype)
        data = _map_tensors(data, lambda t: t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype))
        return Problem(model=model, inputs=flatten_batch(data), grad_output=torch.ones((), device=device, dtype=dtype),
                       extra={"batch": data, "seed": seed})

    def run(self, problem: Problem) -> torch.Tensor:
        """The step's loss (a 0-d tensor in the problem's dtype) with plain autograd, from the global RNG
        seeded with the problem's seed (NOTE [ dropout stays on ])."""
        torch.manual_seed(problem.extra.get("seed", 0))
        out = loss_of(self.model_file, problem.model, problem.extra["batch"])
        return out if out.dtype == problem.grad_output.dtype else out.to(problem.grad_output.dtype)

    def reference(self, problem: Problem) -> torch.Tensor:
        return self.run(problem)

    def blocks(self, problem: Problem) -> Blocks | None:
        """The repeated blocks of the problem's model (``blocks`` given, else guessed), found once."""
        if "blocks" not in problem.extra:
            problem.extra["blocks"] = blocks_for(problem.model, self.config.get("blocks", ""))
        return problem.extra["blocks"]

    def meta_blocks(self) -> Blocks | None:
        """The blocks as found on a model built on the meta device (no memory; the CPU where the
        file's build() cannot run on meta): what a technique can say before anything is measured."""
        spec = self.config.get("blocks", "")
        cache = type(self).__dict__.get("_meta_blocks")
        if cache is None:
            cache = {}
            type(self)._meta_blocks = cache
        if spec not in cache:
            cache[spec] = blocks_for(_build_for_check(self.model_file), spec)
        return cache[spec]


def workload_for(mf: ModelFile, module_name: str) -> type[ModelWorkload]:
    """Register and return the workload of ``mf`` (``model_<stem>``, family ``model:<stem>``).

    ``module_name``: the name the file was imported under; the class claims it, so the registry
    (and a measuring child) knows it comes from that file.
    """
    params = {"batch": Param(DEFAULT_BATCH, low=1, high=1_000_000, doc="samples per step: batch(size)'s size"),
              **{k: Param(v, low=1, high=1_000_000_000, doc=f"batch()'s {k}") for k, v in mf.sizes.items()},
              "blocks": Param("", doc="dotted path(s) of the nn.ModuleList/nn.Sequential of repeated blocks, "
                                      "comma-separated; empty: guessed (the block class filling the most same-type lists)")}
    namespace = {"model_file": mf, "params": params, "__module__": module_name,
                 "__qualname__": f"ModelWorkload_{mf.stem}",
                 "__doc__": f"The model of {mf.name}, trained on batch(size) (a user's model file)."}
    return type(f"ModelWorkload_{mf.stem}", (ModelWorkload,), namespace, name=f"model_{mf.stem}", family=mf.family)
