"""What is measured (torch-free): a :class:`Setting` (how a step is taken and measured) and a
:class:`Point` (a technique, its parameters and a setting).

Every default of a measurement is named here once, as a field default of :class:`Setting`
(:data:`DEFAULTS` holds them), and every choice's valid values are listed here once
(:data:`OPTIMIZERS`, :data:`LOSSES`, :data:`MODES`, :data:`DTYPES`, :data:`GRADS`).
:meth:`Setting.validate` is the one place they are checked, with an error naming the bad value and
the valid range; the CLI calls it before torch is imported, :func:`memlab.measure` before it starts.

A point's identity is :meth:`Point.key`: technique, canonical parameters, then :meth:`Setting.key`
(mode, dtype, device type, optimizer, loss, accumulate, grads).  Resume, merge, compare, the GPU
check and the site compare points by it; a row written before a field existed reads as that field's
default (:meth:`Point.from_row`), so old rows and new rows of the same point have the same key.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["Setting", "Point", "DEFAULTS", "OPTIMIZERS", "STEPPED_OPTIMIZERS", "IN_BACKWARD", "in_backward", "check_in_backward", "LOSSES", "MODES", "DTYPES", "GRADS", "KEY_FIELDS",
           "MAX_TIMEOUT_S", "MAX_TIME_BUDGET_S", "MAX_THREADS", "MAX_ACCUMULATE", "check_choice", "canonical_params"]

#: the optimizers the training step builds (:mod:`memlab.measurement.step`)
STEPPED_OPTIMIZERS: tuple[str, ...] = ("sgd", "sgd_momentum", "adam", "adamw", "adafactor")
#: the suffix of an optimizer stepped in backward, one parameter at a time (NOTE [ optimizer in backward ])
IN_BACKWARD = "_in_backward"
#: the training step's optimizer choices: each of :data:`STEPPED_OPTIMIZERS`, after backward or in it
OPTIMIZERS: tuple[str, ...] = STEPPED_OPTIMIZERS + tuple(name + IN_BACKWARD for name in STEPPED_OPTIMIZERS)
#: the training step's losses (:mod:`memlab.measurement.step`)
LOSSES: tuple[str, ...] = ("given", "mse")
#: What a step runs: ``train`` (forward, backward, optimizer step) or ``infer`` (forward under no_grad).
MODES: tuple[str, ...] = ("train", "infer")
#: the floating-point types a measurement runs in (torch's names)
DTYPES: tuple[str, ...] = ("float32", "float64", "bfloat16", "float16")
#: between training steps the gradients are set to ``none`` or zeroed in place (``zero``)
GRADS: tuple[str, ...] = ("none", "zero")
#: the longest timeout: a week (select() and the clocks behind it overflow long before inf)
MAX_TIMEOUT_S = 7 * 24 * 3600
#: the longest time budget of the timed phase, in seconds
MAX_TIME_BUDGET_S = 3600
#: the most intra-op threads a measurement may ask for
MAX_THREADS = 1024
#: the most micro-batches a step may accumulate
MAX_ACCUMULATE = 1024
#: the fields of a :class:`Setting` that identify a point (the rest say how long and how it is measured)
KEY_FIELDS = ("mode", "dtype", "device", "optimizer", "loss", "accumulate", "grads")

_DEVICE = re.compile(r"(cpu|cuda)(:\d+)?")


# NOTE [ optimizer in backward ]
# ``<optimizer>_in_backward`` (``adam_in_backward``...) steps each parameter as soon as its gradient is
# accumulated, in a ``register_post_accumulate_grad_hook``, and frees that gradient at once (PyTorch's
# "How to save memory by fusing the optimizer step into the backward pass" tutorial): the gradients never
# live all together.  It is a choice of optimizer, not a flag beside it, by decision: the optimizer
# name is already part of every point's key, every row, the shadow reference's step, the family
# baseline's timed step and the advisor's fits, so the option reaches them all with nothing threaded
# through, and rows from before it read as the optimizer stepped after backward, as they were.
# It refuses ``accumulate`` > 1 (each micro-batch's gradient would update the parameters at once:
# no ``.grad`` is left to accumulate into) and ``grads="zero"`` (nothing is kept to zero).
# Evidence: tests/test_step_options.py (the peak drops by the gradient bytes; the same parameters)


def in_backward(optimizer: str) -> tuple[str, bool]:
    """``(the optimizer built, whether it steps in backward)``: ``adam_in_backward`` -> ``("adam", True)``,
    ``adam`` -> ``("adam", False)`` (NOTE [ optimizer in backward ])."""
    if optimizer.endswith(IN_BACKWARD):
        return optimizer[:-len(IN_BACKWARD)], True
    return optimizer, False


def check_in_backward(optimizer: str, accumulate: int, grads: str) -> None:
    """Raise ValueError naming the bad value when ``optimizer`` steps in backward and ``accumulate`` or
    ``grads`` asks what it cannot do (NOTE [ optimizer in backward ]); nothing otherwise."""
    built, stepped_in_backward = in_backward(optimizer)
    if not stepped_in_backward:
        return
    if accumulate != 1:
        raise ValueError(f"accumulate={accumulate} is not valid with optimizer={optimizer!r}: it updates each "
                         f"parameter and frees its gradient as soon as backward produces it, so no .grad is left to "
                         f"accumulate micro-batches into; valid: accumulate=1, or optimizer={built!r} to accumulate")
    if grads != GRADS[0]:
        raise ValueError(f"grads={grads!r} is not valid with optimizer={optimizer!r}: it frees each gradient in "
                         f"backward, so none is left to zero between steps; valid: grads={GRADS[0]!r}")


def check_choice(name: str, value: Any, valid: tuple[str, ...]) -> None:
    """Raise ValueError naming ``name``, the bad ``value`` and the valid choices."""
    if not isinstance(value, str) or value not in valid:
        plural = {"loss": "losses", "grads": "values"}.get(name, f"{name}s")
        raise ValueError(f"{name}={value!r} is not valid; valid {plural}: {', '.join(valid)}")


def _whole(name: str, value: Any, low: int, high: int | None, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise ValueError(f"{name}={value!r} is not valid: expected {what}")


def _seconds(name: str, value: Any, low_open: bool, high: float, what: str) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value > high or (value <= 0 if low_open else value < 0):
        raise ValueError(f"{name}={value!r} is not valid: expected {what}")


def canonical_params(params: Any) -> str:
    """Parameters as the canonical JSON text a key holds (sorted names, tuples as lists)."""
    return json.dumps(params, sort_keys=True, default=list)


def _device_type(device: Any) -> str:
    """``cuda:1`` -> ``cuda``: a point is the same on any GPU index (the row's environment says which)."""
    return str(device).split(":")[0]


@dataclass(frozen=True)
class Setting:
    """How one point is measured.  Frozen; :meth:`validate` checks every field.

    Identity (:data:`KEY_FIELDS`, :meth:`key`): ``device`` (``cpu``, ``cuda`` or ``cuda:N``),
    ``dtype``, ``mode`` (``train`` or ``infer``), ``optimizer`` (one of :data:`OPTIMIZERS`; an
    ``_in_backward`` one steps each parameter in backward: NOTE [ optimizer in backward ]), ``loss``, ``accumulate`` (micro-batches
    accumulated into ``.grad`` before the optimizer's step) and ``grads`` (between steps, gradients
    set to ``none`` or zeroed in place: ``zero``).  How it is measured: ``seed`` (the inputs'),
    ``check`` (the reference checks), ``iterations`` (allocation-measured steps), ``repeats`` (the
    fewest timed steps), ``threads`` (intra-op threads; None: the process's own for the memory phase,
    one for the timed phase), ``timeout`` (seconds before an isolated run is abandoned) and
    ``time_budget`` (seconds of timing after ``repeats``).  See :func:`memlab.measure`.
    """

    device: str = "cpu"
    dtype: str = "float32"
    mode: str = "train"
    optimizer: str = "sgd"
    loss: str = "given"
    accumulate: int = 1
    grads: str = "none"
    seed: int = 0
    check: bool = True
    iterations: int = 5
    repeats: int = 5
    threads: int | None = None
    timeout: float = 900.0
    time_budget: float = 2.0

    def validate(self) -> "Setting":
        """Check every field; returns ``self``.  Raises ValueError naming the field, the bad value
        and the valid values or range."""
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise ValueError(f"device={self.device!r} is not valid; valid devices: cpu, cuda, cuda:N")
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("mode", self.mode, MODES)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("loss", self.loss, LOSSES)
        check_choice("grads", self.grads, GRADS)
        _whole("accumulate", self.accumulate, 1, MAX_ACCUMULATE, f"a whole number from 1 to {MAX_ACCUMULATE}")
        check_in_backward(self.optimizer, self.accumulate, self.grads)
        _whole("seed", self.seed, 0, None, "a whole number >= 0")
        if not isinstance(self.check, bool):
            raise ValueError(f"check={self.check!r} is not valid: expected True or False")
        _whole("iterations", self.iterations, 1, None, "an integer >= 1")
        _whole("repeats", self.repeats, 1, None, "an integer >= 1")
        if self.threads is not None:
            _whole("threads", self.threads, 1, MAX_THREADS, f"a whole number from 1 to {MAX_THREADS}, or None "
                   "for the process's own setting")
        _seconds("timeout", self.timeout, True, MAX_TIMEOUT_S, f"seconds > 0 and <= {MAX_TIMEOUT_S} (a week)")
        _seconds("time_budget", self.time_budget, False, MAX_TIME_BUDGET_S,
                 f"seconds between 0 and {MAX_TIME_BUDGET_S}")
        return self

    def key(self) -> tuple:
        """What identifies a point's setting: mode, dtype, device type, optimizer, loss, accumulate, grads."""
        return (self.mode, self.dtype, _device_type(self.device), self.optimizer, self.loss, self.accumulate,
                self.grads)

    def replace(self, **changes: Any) -> "Setting":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Setting":
        """The setting :meth:`to_dict` wrote, validated; a missing field is its default.  Raises
        ValueError on a field that is not a Setting's or a value :meth:`validate` refuses."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a Setting must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown Setting field(s): {', '.join(map(str, unknown))}")
        return cls(**data).validate()

    @classmethod
    def from_json(cls, text: str) -> "Setting":
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Setting":
        """The identity of a result row (a Measurement's dict, a GPU check's configuration): each of
        :data:`KEY_FIELDS` the row holds (not null), the default for the rest (rows from before a
        choice existed).  Not validated: a row is read as it was written."""
        return cls(**{name: row[name] for name in KEY_FIELDS if row.get(name) is not None})

    @classmethod
    def split(cls, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(the options that are Setting fields, the others)``: keyword options of
        :func:`memlab.measure` are a setting's fields and a technique's parameters."""
        names = {f.name for f in dataclasses.fields(cls)}
        return {k: v for k, v in options.items() if k in names}, {k: v for k, v in options.items() if k not in names}


#: every default of a measurement
DEFAULTS = Setting()


@dataclass(frozen=True)
class Point:
    """One measured point: a registered technique's name, its parameters and a :class:`Setting`."""

    technique: str
    params: dict[str, Any] = field(default_factory=dict)
    setting: Setting = DEFAULTS

    def key(self) -> tuple:
        """``(technique, canonical parameters, *setting.key())``: equal for a point and for the row
        it was measured as (whose parameters are the resolved ones, so a planned point's key uses its
        resolved parameters: :func:`memlab.sweep.resume.resolved_key`)."""
        return (self.technique, canonical_params(self.params), *self.setting.key())

    def with_setting(self, setting: Setting) -> "Point":
        return dataclasses.replace(self, setting=setting)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Point":
        """The point a result row was measured at (see :meth:`Setting.from_row`)."""
        return cls(row.get("technique"), row.get("params", {}), Setting.from_row(row))
