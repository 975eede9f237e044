"""Operator memory that exists only on a GPU (cuDNN workspaces), measured per signature into a table.

# NOTE [ calibration table ]
A convolution on a GPU allocates, through the caching allocator, memory the CPU trace cannot show:
cuDNN's workspace for the algorithm it picks (forward, backward-data, backward-weight), and layout
copies its kernels need.  How much depends on the operator's signature (shapes, stride, padding,
dtype, memory layout) and on the environment (GPU model, cuDNN and torch versions, TF32).  memlab
measures it once per signature on a GPU (:func:`measure_signature_on_cuda`) and keeps it in a JSON
table; the CUDA prediction (:mod:`memlab.cuda_replay.prediction`) looks each convolution call
of the trace up there.  A signature the table lacks makes the prediction ``uncalibrated``: the
convolution's CUDA-only memory is then not in the figures, and the prediction says so, with the
error its family showed on a real GPU (:func:`conv_error_range`).

Table file (one environment per file; ``data/cuda-calibration/<gpu>.json``)::

    {"format": "memlab.cuda_calibration/1",
     "environment": {"gpu": "NVIDIA H200", "torch": "2.13.0+cu130", "cuda": "13.0", "cudnn": 91002,
                     "tf32": true},
     "entries": [{"op": "aten::convolution", "input": [100, 16, 32, 32], "weight": [16, 16, 3, 3],
                  "bias": false, "stride": [1, 1], "padding": [1, 1], "dilation": [1, 1],
                  "transposed": false, "output_padding": [0, 0], "groups": 1, "dtype": "float32",
                  "layout": "contiguous", "workspace_bytes": 1048576}, ...]}

* ``environment``: ``gpu`` (``torch.cuda.get_device_name``), ``torch`` (``torch.__version__``),
  ``cuda`` (``torch.version.cuda``), ``cudnn`` (``torch.backends.cudnn.version()``), ``tf32``
  (``torch.backends.cudnn.allow_tf32``); optional ``benchmark`` / ``deterministic`` (cuDNN flags,
  default false).
* an entry: the signature fields of :func:`conv_call_signatures` (``op`` is ``aten::convolution``
  or ``aten::convolution_backward``; the backward adds ``grad_output`` and ``output_mask``;
  ``padding`` is a list of integers, or ``"same"`` / ``"valid"``) and
  ``workspace_bytes``: the most device bytes the operator held beyond its inputs and outputs while
  it ran (``max_memory_allocated()`` during the call minus ``memory_allocated()`` after it, both
  with the inputs allocated before), i.e. cuDNN's workspace and any temporaries, as the caching
  allocator handed them out.  Optional ``note``.

The replay puts a calibrated call's ``workspace_bytes`` on the device just before the operator
returns, after its outputs, and drops the temporaries the CPU kernel made inside it (their CUDA
counterparts are in the measured figure).
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..registry import get_technique

__all__ = ["TABLE_FORMAT", "CONV_OPS", "SIGNATURE_FIELDS", "BACKWARD_FIELDS", "ENVIRONMENT_FIELDS", "CALIBRATION_DIR",
           "GPU_CHECK_FILE", "DEFAULT_TABLE", "CalibrationTable", "conv_call_signatures", "signature_key",
           "table_from_dict", "load_table", "default_table", "conv_error_range", "environment_here",
           "measure_signature_on_cuda"]

#: the ``format`` field of a table file
TABLE_FORMAT = "memlab.cuda_calibration/1"
#: the operators whose calls are looked up (the outermost convolution operators of a trace)
CONV_OPS = frozenset({"aten::convolution", "aten::convolution_backward"})
#: an entry's signature fields, with the type each must have (``list`` = list of ints)
SIGNATURE_FIELDS: dict[str, type] = {
    "op": str, "input": list, "weight": list, "bias": bool, "stride": list, "padding": list, "dilation": list,
    "transposed": bool, "output_padding": list, "groups": int, "dtype": str, "layout": str}
#: the backward's extra signature fields
BACKWARD_FIELDS: dict[str, type] = {"grad_output": list, "output_mask": list}
#: required environment fields and their types
ENVIRONMENT_FIELDS: dict[str, tuple[type, ...]] = {"gpu": (str,), "torch": (str,), "cuda": (str,), "cudnn": (int,),
                                                   "tf32": (bool,)}
CALIBRATION_DIR = Path(__file__).resolve().parents[2] / "data" / "cuda-calibration"
GPU_CHECK_FILE = Path(__file__).resolve().parents[2] / "data" / "gpu-check" / "nvidia-h200.json"
#: the table the prediction uses unless given another (absent until a GPU session measures it)
DEFAULT_TABLE = CALIBRATION_DIR / "nvidia-h200.json"


# ---------------------------------------------------------------------------------------------------
# Signatures

def _layout(shape: Sequence[int], strides: Sequence[int]) -> str:
    """``contiguous``, ``channels_last`` (NHWC / NDHWC strides) or ``strided`` (anything else)."""
    shape, strides = list(shape), list(strides)
    if len(shape) != len(strides):
        return "strided"

    def dense(order: list[int]) -> bool:
        step = 1
        for d in order:
            if shape[d] != 1 and strides[d] != step:
                return False
            step *= shape[d]
        return True

    n = len(shape)
    if dense(list(range(n - 1, -1, -1))):
        return "contiguous"
    if n >= 4 and dense([1] + list(range(n - 1, 1, -1)) + [0]):
        return "channels_last"
    return "strided"


def _per_dim(value: Any, n: int) -> list[int]:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)] * n


def _output_shape(inp: list[int], weight: list[int], sig: Mapping[str, Any]) -> list[int]:
    """The convolution's output shape (PyTorch's formula; ``padding="same"`` keeps the size)."""
    spatial = []
    for i, size in enumerate(inp[2:]):
        k, s, d = weight[2 + i], sig["stride"][i], sig["dilation"][i]
        if sig["padding"] == "same":
            spatial.append(size)
            continue
        p = 0 if sig["padding"] == "valid" else sig["padding"][i]
        if sig["transposed"]:
            spatial.append((size - 1) * s - 2 * p + d * (k - 1) + sig["output_padding"][i] + 1)
        else:
            spatial.append((size + 2 * p - d * (k - 1) - 1) // s + 1)
    out_channels = weight[1] * sig["groups"] if sig["transposed"] else weight[0]
    return [inp[0], out_channels, *spatial]


def conv_call_signatures(input: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
                         groups: int, transposed: bool = False, output_padding: Any = 0) -> dict[str, Any]:
    """The signatures of one ``torch.nn.functional.conv*d`` / ``conv_transpose*d`` call, from its
    arguments (tensors and Python values): ``{"forward": ..., "backward": ... or None}``; the backward
    (``aten::convolution_backward``, with ``grad_output`` = the output shape and ``output_mask``
    = which of input, weight, bias need a gradient) only when one does."""
    inp, w = list(input.shape), list(weight.shape)
    n = len(inp) - 2
    sig: dict[str, Any] = {
        "op": "aten::convolution", "input": inp, "weight": w, "bias": bias is not None,
        "stride": _per_dim(stride, n), "padding": padding if isinstance(padding, str) else _per_dim(padding, n),
        "dilation": _per_dim(dilation, n), "transposed": bool(transposed),
        "output_padding": _per_dim(output_padding, n), "groups": int(groups),
        "dtype": str(input.dtype).replace("torch.", ""), "layout": _layout(inp, input.stride())}
    mask = [bool(input.requires_grad), bool(weight.requires_grad), bool(bias is not None and bias.requires_grad)]
    backward = None
    if any(mask) and _grad_enabled():
        backward = {**sig, "op": "aten::convolution_backward", "grad_output": _output_shape(inp, w, sig),
                    "output_mask": mask}
    return {"forward": sig, "backward": backward}


def _grad_enabled() -> bool:
    import torch  # deferred: torch line

    return torch.is_grad_enabled()


def signature_key(sig: Mapping[str, Any]) -> str:
    """The canonical string a signature is looked up by (its signature fields as sorted JSON)."""
    fields = {**SIGNATURE_FIELDS, **(BACKWARD_FIELDS if sig.get("op") == "aten::convolution_backward" else {})}
    return json.dumps({k: sig.get(k) for k in fields}, sort_keys=True)


# ---------------------------------------------------------------------------------------------------
# Tables

@dataclass(frozen=True)
class CalibrationTable:
    """One environment's measured signatures (NOTE [ calibration table ]).

    Attributes:
        path: the file read ("" for a table built in memory).
        environment: GPU, torch, CUDA, cuDNN and TF32 of the measurement.
        entries: ``signature_key`` -> entry (signature fields and ``workspace_bytes``).
    """

    path: str
    environment: dict[str, Any]
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def lookup(self, sig: Mapping[str, Any]) -> dict[str, Any] | None:
        """The entry measured for ``sig``, or None (uncalibrated)."""
        return None if sig.get("incomplete") else self.entries.get(signature_key(sig))

    def describe(self) -> dict[str, Any]:
        """What a prediction records about the table it used."""
        return {"path": self.path, "environment": dict(self.environment), "entries": len(self.entries)}


def _a(kind: type) -> str:
    name = {"str": "string", "int": "integer", "bool": "boolean (true or false)", "list": "list"}[kind.__name__]
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _field_error(path: Path | str, where: str, value: Any, valid: str) -> ValueError:
    return ValueError(f"{path}: {where} = {value!r} is not valid; valid: {valid}")


def _check_entry(path: Path | str, i: int, entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise _field_error(path, f"entries[{i}]", type(entry).__name__, "an object of signature fields")
    fields = dict(SIGNATURE_FIELDS)
    if entry.get("op") == "aten::convolution_backward":
        fields.update(BACKWARD_FIELDS)
    elif entry.get("op") != "aten::convolution":
        raise _field_error(path, f"entries[{i}].op", entry.get("op"), " or ".join(sorted(CONV_OPS)))
    for name, kind in fields.items():
        value = entry.get(name)
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if name == "padding" and value in ("same", "valid"):
            ok = True
        elif ok and kind is list:
            ok = all(isinstance(v, (int, bool)) for v in value)
        if not ok:
            raise _field_error(path, f"entries[{i}].{name}", value, _a(kind) + (" of integers" if kind is list else ""))
    ws = entry.get("workspace_bytes")
    if not isinstance(ws, int) or isinstance(ws, bool) or ws < 0:
        raise _field_error(path, f"entries[{i}].workspace_bytes", ws, "an integer >= 0 (bytes)")
    return entry


def table_from_dict(data: Any, path: Path | str = "") -> CalibrationTable:
    """Validate a parsed table (NOTE [ calibration table ]).

    Raises:
        ValueError: naming the file and the field (``entries[3].workspace_bytes``), the bad value
            and what is valid.
    """
    if not isinstance(data, dict):
        raise _field_error(path, "the top level", type(data).__name__, "an object")
    if data.get("format") != TABLE_FORMAT:
        raise _field_error(path, "format", data.get("format"), repr(TABLE_FORMAT))
    env = data.get("environment")
    if not isinstance(env, dict):
        raise _field_error(path, "environment", env, "an object with " + ", ".join(ENVIRONMENT_FIELDS))
    for name, kinds in ENVIRONMENT_FIELDS.items():
        value = env.get(name)
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise _field_error(path, f"environment.{name}", value, _a(kinds[0]))
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise _field_error(path, "entries", type(entries).__name__, "a list of entries")
    table: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(entries):
        key = signature_key(_check_entry(path, i, entry))
        if key in table:
            raise _field_error(path, f"entries[{i}]", "a repeated signature", "each signature once")
        table[key] = entry
    return CalibrationTable(str(path), dict(env), table)


def load_table(path: Path | str) -> CalibrationTable:
    """Read and validate a table file (ValueError naming the file and the field when it is not one)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable calibration table ({type(exc).__name__}: {exc})") from None
    return table_from_dict(data, path)


def default_table() -> CalibrationTable | None:
    """The committed table (:data:`DEFAULT_TABLE`) if there is one; None otherwise (every convolution
    is then uncalibrated)."""
    return load_table(DEFAULT_TABLE) if DEFAULT_TABLE.is_file() else None


# ---------------------------------------------------------------------------------------------------
# The family's measured error

def _is_convolutional(technique: str, params: Mapping[str, Any]) -> bool:
    try:
        cls = get_technique(technique)
    except (KeyError, ValueError):
        return False
    resolved = {name: p.default for name, p in cls.all_params().items()}
    resolved.update(params)
    return getattr(cls.workload, "convolutional", False) or resolved.get("block") == "conv"


@functools.lru_cache(maxsize=4)
def conv_error_range(path: str = str(GPU_CHECK_FILE)) -> dict[str, Any] | None:
    """The predicted-vs-measured allocated error of the convolutional configurations in a GPU-check
    file (ResNet/RevNet workloads, conv blocks): ``{"source", "gpu", "rows", "min_pct", "max_pct"}``,
    percent = (predicted − measured) / measured x 100; None if the file is unreadable or has none."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        rows = data["rows"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    errors = []
    for r in rows if isinstance(rows, list) else []:
        p, m = r.get("predicted_allocated_bytes"), r.get("measured_allocated_bytes")
        if isinstance(p, int) and isinstance(m, int) and m > 0 and _is_convolutional(r.get("technique", ""),
                                                                                     r.get("params") or {}):
            errors.append(100.0 * (p - m) / m)
    if not errors:
        return None
    return {"source": str(path), "gpu": data.get("gpu"), "rows": len(errors), "min_pct": round(min(errors), 3),
            "max_pct": round(max(errors), 3)}


# ---------------------------------------------------------------------------------------------------
# Measuring one signature on a GPU (not run on CPU-only hosts)

def environment_here(device: str = "cuda") -> dict[str, Any]:
    """The ``environment`` of a table measured on this process's GPU."""
    import torch  # deferred: torch line

    return {"gpu": torch.cuda.get_device_name(torch.device(device)), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "tf32": bool(torch.backends.cudnn.allow_tf32), "benchmark": bool(torch.backends.cudnn.benchmark),
            "deterministic": bool(torch.backends.cudnn.deterministic)}


def measure_signature_on_cuda(sig: Mapping[str, Any], device: str = "cuda", repeats: int = 2) -> dict[str, Any]:
    """Measure one signature's ``workspace_bytes`` on a GPU: the inputs allocated first, the call run
    ``repeats`` times (the first picks cuDNN's algorithm), the last one measured as
    ``max_memory_allocated()`` during it minus ``memory_allocated()`` after it (outputs alive).

    Returns:
        The table entry: the signature's fields and ``workspace_bytes``.
    """
    import torch  # deferred: torch line

    dev = torch.device(device)
    dtype = getattr(torch, sig["dtype"])
    fmt = torch.channels_last if sig["layout"] == "channels_last" else torch.contiguous_format

    def tensor(shape):
        t = torch.randn(shape, device=dev, dtype=dtype)
        return t.contiguous(memory_format=fmt) if t.dim() == 4 else t

    x, w = tensor(sig["input"]), tensor(sig["weight"])
    padding = sig["padding"]
    if isinstance(padding, str):   # "valid": none; "same": symmetric (odd kernels: what F.conv*d passes on)
        padding = [0 if padding == "valid" else d * (k - 1) // 2 for d, k in zip(sig["dilation"], sig["weight"][2:])]
    args = (sig["stride"], padding, sig["dilation"], sig["transposed"], sig["output_padding"], sig["groups"])
    if sig["op"] == "aten::convolution":
        b = torch.randn(w.shape[1 if sig["transposed"] else 0], device=dev, dtype=dtype) if sig["bias"] else None

        def call():
            return torch.ops.aten.convolution(x, w, b, *args)
    else:
        go = tensor(sig["grad_output"])
        bias_sizes = [w.shape[1 if sig["transposed"] else 0]] if sig["bias"] else None

        def call():
            return torch.ops.aten.convolution_backward(go, x, w, bias_sizes, *args, sig["output_mask"])
    out = None
    for _ in range(repeats):
        del out
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        out = call()
        torch.cuda.synchronize(dev)
        workspace = torch.cuda.max_memory_allocated(dev) - torch.cuda.memory_allocated(dev)
    return {**{k: sig[k] for k in sig if k != "incomplete"}, "workspace_bytes": int(workspace)}
