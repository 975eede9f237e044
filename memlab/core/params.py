"""Tunable parameters: declared once with a default and a valid range, validated everywhere.

A :class:`Param` describes one knob of a workload or technique (``chunk_size``, ``rank``,
``batch``...).  The type is taken from the default: ``int``, ``float``, ``bool``, ``str`` or a tuple
of ints (mode shapes).  Values arriving as strings (from ``--param k=v`` on the CLI) are parsed with
:meth:`Param.parse`; every value, parsed or not, goes through :meth:`Param.validate`, whose errors
name the parameter, the bad value and the valid range.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["Param", "resolve_params", "split_params", "check_steps", "nearest_steps"]


@dataclass(frozen=True)
class Param:
    """One tunable parameter.

    Args:
        default: value used when none is given; its type is the parameter's type.
        doc: one line for ``memlab list``.
        low, high: inclusive bounds for numbers (and for every element of an int tuple).
        choices: the allowed values, for strings (and anything else enumerable).
        min_len, max_len: allowed tuple lengths (tuples only).
    """

    default: Any
    doc: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    min_len: int | None = None
    max_len: int | None = None

    @property
    def kind(self) -> type:
        return type(self.default)

    def describe_range(self) -> str:
        """Human description of what is valid, e.g. ``integer in [1, 100000]``."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        kind = self.kind
        if kind is bool:
            return "true or false"
        if kind is tuple:
            n = ""
            if self.min_len is not None or self.max_len is not None:
                n = f" of length {self.min_len or 1}..{self.max_len if self.max_len is not None else 'any'}"
            return f"comma-separated integers{n}" + self._bounds_text(" each")
        name = {int: "integer", float: "number", str: "string"}.get(kind, kind.__name__)
        return name + self._bounds_text("")

    def _bounds_text(self, prefix: str) -> str:
        if self.low is None and self.high is None:
            return ""
        lo = "-inf" if self.low is None else _fmt(self.low)
        hi = "inf" if self.high is None else _fmt(self.high)
        return f"{prefix} in [{lo}, {hi}]"

    def parse(self, name: str, text: str) -> Any:
        """Parse a CLI string into this parameter's type (then validate it)."""
        kind = self.kind
        try:
            if kind is bool:
                low = text.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    value: Any = True
                elif low in ("0", "false", "no", "off"):
                    value = False
                else:
                    raise ValueError(text)
            elif kind is tuple:
                parts = [p for p in text.strip().strip("()[]").split(",") if p.strip()]
                value = tuple(int(p) for p in parts)
            elif kind is int:
                value = int(text)
            elif kind is float:
                value = float(text)
            else:
                value = text
        except ValueError:
            raise ValueError(
                f"{name}={text!r} is not valid: expected {self.describe_range()}"
            ) from None
        return self.validate(name, value)

    def validate(self, name: str, value: Any) -> Any:
        """Return ``value`` normalised to this parameter's type, or raise ValueError naming it."""
        kind = self.kind
        bad = ValueError(f"{name}={value!r} is out of range: expected {self.describe_range()}")
        if kind is bool:
            if not isinstance(value, bool):
                raise bad
        elif kind is tuple:
            if isinstance(value, list):
                value = tuple(value)
            if not isinstance(value, tuple) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            ):
                raise bad
            if self.min_len is not None and len(value) < self.min_len:
                raise bad
            if self.max_len is not None and len(value) > self.max_len:
                raise bad
            if any(not self._in_bounds(v) for v in value):
                raise bad
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad
            if not self._in_bounds(value):
                raise bad
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise bad
            value = float(value)
            if not self._in_bounds(value):
                raise bad
        elif not isinstance(value, kind):
            raise bad
        if self.choices is not None and value not in self.choices:
            raise bad
        return value

    def _in_bounds(self, v: float) -> bool:
        return (self.low is None or v >= self.low) and (self.high is None or v <= self.high)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def resolve_params(
    specs: Mapping[str, Param], given: Mapping[str, Any], *, owner: str
) -> dict[str, Any]:
    """Fill defaults and validate ``given`` against ``specs``.

    Raises:
        ValueError: an unknown parameter name (the message lists the valid ones) or a bad value.
    """
    unknown = sorted(set(given) - set(specs))
    if unknown:
        valid = ", ".join(sorted(specs)) or "(none)"
        raise ValueError(f"{owner} has no parameter {unknown[0]!r}; valid parameters: {valid}")
    out = {}
    for key in sorted(specs):
        spec = specs[key]
        value = given.get(key, spec.default)
        out[key] = spec.validate(key, value)
    return out


def split_params(pairs: Sequence[str]) -> dict[str, str]:
    """``["n=64", "d=8"]`` (``--param`` values) -> ``{"n": "64", "d": "8"}``: names stripped, values
    still text for each parameter's :meth:`Param.parse`.

    Raises:
        ValueError: a pair that is not ``name=value``, or a name given twice (the message names it
            and both values: a repeated ``--param`` must not silently take the last).
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--param {pair!r} is not of the form name=value: expected NAME=VALUE, "
                             f"e.g. --param {key or 'chunk_size'}=1000")
        if key in out:
            raise ValueError(f"--param {key} is given twice ({key}={out[key]!r} and {key}={text!r}); give it once")
        out[key] = text
    return out


def nearest_steps(value: int, per: int, offset: int = 0) -> list[int]:
    """The valid values ``per * n + offset`` (``n >= 1``) just below and just above ``value``."""
    n = max(1, (value - offset) // per)
    return [per * n + offset, per * (n + 1) + offset]


def check_steps(name: str, value: int, per: int, offset: int = 0, *, rule: str) -> int:
    """``n`` of ``value = per * n + offset`` (``n >= 1``): the one divisibility check of the workloads
    (a head size ``hidden / heads``, a ResNet's ``6n + 2`` layers, a loop count ``size = per * k + offset``).

    Args:
        name: the parameter, as the user wrote it (``hidden``, ``depth``).
        value, per, offset: the value and its rule ``per * n + offset``.
        rule: what the rule says, after the value: ``"is not divisible by heads=4 (...)"``.

    Raises:
        ValueError: ``"{name}={value} {rule}; nearest valid: a, b"``.

    Example::

        check_steps("depth", 26, 6, 2, rule="is not a basic layout 6n+2 (n >= 1)")   # 4
    """
    if (value - offset) % per or value < per + offset:
        raise ValueError(f"{name}={value} {rule}; nearest valid: {', '.join(map(str, nearest_steps(value, per, offset)))}")
    return (value - offset) // per
