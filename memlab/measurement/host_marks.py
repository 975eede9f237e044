"""Profiler markers that say what a CPU trace cannot: this memory is host memory on a GPU.

See NOTE [ device tags ] in :mod:`memlab.measurement.host_tags` for how the trace uses them.

* :func:`host_memory`: a technique wraps code whose tensors stay on the host when the step runs on
  CUDA (a CPU buffer, ``torch.tensor(x)`` without ``device=``, a pinned staging copy).  Every
  allocation inside the range is tagged ``host``.
* :func:`marked_offloading`: while memlab records a CPU trace, ``torch.autograd.graph.save_on_cpu``'s
  hooks are wrapped so that the trace shows what they would do on a GPU:

  - the pack hook runs inside a ``memlab::host`` range: the copy it makes with ``pin_memory=True``
    is host memory;
  - when the pack hook returns the very storage it was given (``pin_memory=False`` on a CPU, where
    ``tensor.cpu()`` is the tensor itself) and that tensor is an activation the step made (it has a
    ``grad_fn``), a zero-length ``memlab::offload:ADDR`` marker says that on a GPU autograd would hold
    a host copy instead: the replay frees the device block there (a lower bound: forward code may
    still hold the tensor a little longer);
  - the unpack hook emits ``memlab::device_copy:NBYTES``: on a GPU it copies the saved tensor back
    to the device, a block the replay allocates there and frees when the backward node that
    unpacked it returns.

  Leaves (parameters, inputs) are never offloaded: the caller holds them on the device.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch.profiler import record_function

__all__ = ["host_memory", "marked_offloading", "HOST_RANGE", "OFFLOAD_MARK", "DEVICE_COPY_MARK"]

#: the profiler range of :func:`host_memory` (``memlab::`` + :data:`memlab.measurement.host_tags.HOST_MARK`)
HOST_RANGE = "memlab::host"
#: zero-length marker ``memlab::offload:ADDR``: the device storage at ADDR is held on the host from here
OFFLOAD_MARK = "offload"
#: zero-length marker ``memlab::device_copy:NBYTES``: a device copy of NBYTES made here (unpack)
DEVICE_COPY_MARK = "device_copy"


@contextlib.contextmanager
def host_memory() -> Iterator[None]:
    """Mark the code inside as making host memory when the step runs on CUDA.

    Example::

        with memlab.host_memory():
            staging = torch.empty(n, dtype=torch.uint8)        # stays on the host on a GPU too
    """
    with record_function(HOST_RANGE):
        yield


def _marker(name: str) -> None:
    with record_function(f"memlab::{name}"):
        pass


def _storage_ptr(t: Any) -> int:
    try:
        return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else 0
    except (RuntimeError, NotImplementedError):
        return 0


def _stored_tensor(packed: Any) -> Any:
    """The tensor inside what a pack hook returned (``save_on_cpu`` returns ``(device, tensor)``)."""
    if isinstance(packed, tuple):
        return next((p for p in packed if isinstance(p, torch.Tensor)), None)
    return packed


def _marked_pack(pack: Callable[[torch.Tensor], Any]) -> Callable[[torch.Tensor], Any]:
    def pack_hook(tensor: torch.Tensor) -> Any:
        with record_function(HOST_RANGE):
            packed = pack(tensor)
        ptr = _storage_ptr(tensor)
        if ptr and tensor.grad_fn is not None and _storage_ptr(_stored_tensor(packed)) == ptr:
            _marker(f"{OFFLOAD_MARK}:{ptr}")
        return packed
    return pack_hook


def _marked_unpack(unpack: Callable[[Any], torch.Tensor]) -> Callable[[Any], torch.Tensor]:
    def unpack_hook(packed: Any) -> torch.Tensor:
        tensor = unpack(packed)
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            _marker(f"{DEVICE_COPY_MARK}:{tensor.numel() * tensor.element_size()}")
        return tensor
    return unpack_hook


@contextlib.contextmanager
def marked_offloading() -> Iterator[None]:
    """While inside, every new ``torch.autograd.graph.save_on_cpu`` marks its pack and unpack
    (module docstring); restored on exit.  memlab's :class:`~memlab.measurement.alloc_trace.
    AllocationRecorder` holds it around a CPU recording."""
    cls = torch.autograd.graph.save_on_cpu
    original = cls.__init__

    def init(self, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.pack_hook = _marked_pack(self.pack_hook)
        self.unpack_hook = _marked_unpack(self.unpack_hook)

    cls.__init__ = init
    try:
        yield
    finally:
        cls.__init__ = original
