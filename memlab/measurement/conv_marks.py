"""Profiler markers naming each convolution call's signature, for the cuDNN calibration lookup.

While memlab records a CPU trace, :func:`marked_convolutions` wraps ``torch.nn.functional``'s
``conv1d``/``conv2d``/``conv3d`` and ``conv_transpose1d``/``2d``/``3d`` (what ``nn.Conv*d`` modules
call) so that each call runs inside a ``memlab::conv:JSON`` range, JSON being
:func:`memlab.cuda_replay.calibration.conv_call_signatures` of its arguments.  The trace then links every
``aten::convolution`` operator to the range around it, and every ``aten::convolution_backward``
to its forward through autograd's sequence number (NOTE [ calibration table ]).  A convolution
called another way (``torch.conv2d``, ``torch.ops.aten.convolution``) has no marker: its
signature is unknown and the prediction says ``uncalibrated``.

Why not the profiler's ``record_shapes``: it keeps references to operator inputs, so some frees
happen after the recording ends and the trace loses them (seen with ``torch.func.vmap`` steps);
the markers change no tensor's lifetime.
"""
from __future__ import annotations

import contextlib
import json
from typing import Any, Callable, Iterator

import torch
from torch.profiler import record_function

from ..cuda_replay.calibration import conv_call_signatures

__all__ = ["CONV_MARK", "marked_convolutions"]

#: the marker prefix: ``memlab::conv:`` + JSON ``{"forward": ..., "backward": ...}``
CONV_MARK = "conv:"

#: functional name -> (transposed, argument names after input and weight, in order)
_ARGS = {
    **{f"conv{n}d": (False, ("bias", "stride", "padding", "dilation", "groups")) for n in (1, 2, 3)},
    **{f"conv_transpose{n}d": (True, ("bias", "stride", "padding", "output_padding", "groups", "dilation"))
       for n in (1, 2, 3)},
}
_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0}


def _signature_json(transposed: bool, names: tuple[str, ...], args: tuple, kwargs: dict[str, Any]) -> str | None:
    try:
        given = {**_DEFAULTS, **dict(zip(("input", "weight", *names), args)), **kwargs}
        sigs = conv_call_signatures(given["input"], given["weight"], given["bias"], given["stride"], given["padding"],
                                    given["dilation"], given["groups"], transposed, given["output_padding"])
        return json.dumps(sigs, sort_keys=True, separators=(",", ":"))
    except Exception:  # noqa: BLE001 - a signature memlab cannot read is just unknown (uncalibrated)
        return None


def _marked(fn: Callable[..., torch.Tensor], transposed: bool, names: tuple[str, ...]) -> Callable[..., torch.Tensor]:
    def conv(*args: Any, **kwargs: Any) -> torch.Tensor:
        text = _signature_json(transposed, names, args, kwargs)
        if text is None:
            return fn(*args, **kwargs)
        with record_function(f"memlab::{CONV_MARK}{text}"):
            return fn(*args, **kwargs)
    conv.__wrapped__ = fn  # type: ignore[attr-defined]
    return conv


@contextlib.contextmanager
def marked_convolutions() -> Iterator[None]:
    """While inside, ``torch.nn.functional``'s convolutions mark their signature (module docstring);
    the originals are restored on exit."""
    functional = torch.nn.functional
    originals = {name: getattr(functional, name) for name in _ARGS}
    for name, (transposed, names) in _ARGS.items():
        setattr(functional, name, _marked(originals[name], transposed, names))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(functional, name, fn)
