"""Chained matmul ``y = (x @ w1) @ w2``: the workload of the chunked-slicing report.

Shapes: ``x`` [n, d], ``w1`` [d, hidden], ``w2`` [hidden, d], ``y`` [n, d].  The hidden activation
``x @ w1`` is [n, hidden]; it is what chunking over rows tries not to hold in full.

# NOTE [ chained-matmul analytic floor ]
What any row-chunked computation of one step must hold at once, in bytes ABOVE the step's baseline
(the baseline already holds x, w1, w2 and grad_output, see :mod:`memlab.measurement.step`):

* train: the output ``y`` [n, d] (the step keeps it until backward returns) + ``grad_w1`` [d, hidden]
  + ``grad_w2`` [hidden, d] + ``grad_x`` [n, d] (only when x requires grad) + ONE chunk's hidden
  [c, hidden] (the last chunk's weight gradients need ``x_c @ w1`` or ``g_c @ w2.T``), with
  ``c = min(chunk_size, n)``; all of these are live together at the end of backward.
* infer: the output ``y`` [n, d] + one chunk's hidden [c, hidden].

Nothing else is counted: not the chunk's output [c, d] before it is copied into ``y``, not a second
[c, hidden] gradient, not per-chunk weight-gradient temporaries, not SGD temporaries.  A technique
that needs them shows them as ``measured / floor > 1``.  The floor assumes the (x @ w1) @ w2 order;
a contraction that forms ``w1 @ w2`` first (opt_einsum) never builds a hidden and may go below it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from memlab.core.declaration import AdvisorModel, Chunks, Entry
from memlab.core.params import Param
from memlab.core.record import MODES
from memlab.workload import DEFAULT_TOLERANCES, Problem, Workload
from memlab.families.seeding import seeded_randn

__all__ = ["ChainedMatmul", "ChainedMatmulModel", "MatmulWeights", "AnalyticFloor", "analytic_floor"]


class MatmulWeights(torch.nn.Module):
    """Holds ``w1`` [d, hidden] and ``w2`` [hidden, d] as parameters."""

    def __init__(self, w1: torch.Tensor, w2: torch.Tensor):
        super().__init__()
        self.w1 = torch.nn.Parameter(w1)
        self.w2 = torch.nn.Parameter(w2)


class ChainedMatmul(Workload, name="chained_matmul", family="chunking"):
    """y = (x @ w1) @ w2 with x [n, d], w1 [d, hidden], w2 [hidden, d]."""

    params = {
        "n": Param(10000, low=1, high=10_000_000, doc="rows of x (samples per step)"),
        "d": Param(256, low=1, high=1_000_000, doc="features of x and y"),
        "hidden": Param(1024, low=1, high=1_000_000, doc="width of the hidden activation x @ w1"),
        "x_requires_grad": Param(True, doc="whether x is a leaf that needs a gradient"),
    }
    samples_param = "n"
    #: float32 atol 1e-3: grad_w1/grad_w2 are sums over n rows (magnitude ~sqrt(n)); reassociating them
    #: (chunked accumulation, opt_einsum's x @ (w1 @ w2)) moves them by up to ~2.5e-4 at n=10000.
    tolerances = {**DEFAULT_TOLERANCES, "float32": (1e-4, 1e-3)}
    check_params = {"n": 37, "d": 8, "hidden": 16}

    #: chunk sizes of the full grid: n/1, n/2, n/4, n/10, n/20, n/40, n/100 of the default n=10000
    FULL_CHUNKS = (10000, 5000, 2500, 1000, 500, 250, 100)

    @classmethod
    def sweep_grid(cls, quick):
        """Quick: n=2000, d=128, hidden=512 at chunk n/10: one measurement per technique (6), each
        mostly a subprocess's start-up (~8 s on 2 cores), so about a minute.  Full: the default size at chunk n/1..n/100, plus x without grad at n/4 and n/100,
        slice_accumulate's generic autograd backward at every chunk size and einsum without
        opt_einsum at n/1, n/4, n/100."""
        if quick:
            return [{"n": 2000, "d": 128, "hidden": 512, "chunk_size": 200}]
        grid = [{"chunk_size": c} for c in cls.FULL_CHUNKS]
        grid += [{"chunk_size": c, "x_requires_grad": False} for c in (2500, 100)]
        # technique-specific variants (dropped, hence measured once, for the other techniques)
        grid += [{"chunk_size": c, "backward": "autograd"} for c in cls.FULL_CHUNKS]
        grid += [{"chunk_size": c, "opt_einsum": False} for c in (10000, 2500, 100)]
        return grid

    def build(self, device, dtype, seed):
        c = self.config
        g = torch.Generator().manual_seed(seed)
        x = seeded_randn(g, c["n"], c["d"], device=device, dtype=dtype)
        w1 = seeded_randn(g, c["d"], c["hidden"], device=device, dtype=dtype, scale=c["d"] ** -0.5)
        w2 = seeded_randn(g, c["hidden"], c["d"], device=device, dtype=dtype, scale=c["hidden"] ** -0.5)
        grad_y = seeded_randn(g, c["n"], c["d"], device=device, dtype=dtype)
        x.requires_grad_(c["x_requires_grad"])
        return Problem(model=MatmulWeights(w1, w2), inputs={"x": x}, grad_output=grad_y)

    def reference(self, problem):
        m = problem.model
        return (problem.inputs["x"] @ m.w1) @ m.w2


@dataclass(frozen=True)
class AnalyticFloor:
    """Analytic peak floors (bytes above the baseline) per mode and the terms that make them up.

    See NOTE [ chained-matmul analytic floor ] for what is counted.
    """

    train_bytes: int
    infer_bytes: int
    train_terms: dict[str, int]
    infer_terms: dict[str, int]
    chunk_rows: int

    def bytes_for(self, mode: str) -> int:
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not valid; valid modes: train, infer")
        return self.train_bytes if mode == "train" else self.infer_bytes

    def to_extra(self, mode: str | None) -> dict:
        """Keys for ``Measurement.extra``: ``analytic_floor_bytes`` for ``mode`` (train when None),
        ``analytic_floor_mode``, both modes' floors and the terms of each."""
        m = mode or "train"
        return {
            "analytic_floor_bytes": self.bytes_for(m),
            "analytic_floor_mode": m,
            "analytic_floor_bytes_by_mode": {"train": self.train_bytes, "infer": self.infer_bytes},
            "analytic_floor_terms": {"train": dict(self.train_terms), "infer": dict(self.infer_terms)},
            "analytic_floor_chunk_rows": self.chunk_rows,
        }


def analytic_floor(config, chunk_size: int | None, element_size: int) -> AnalyticFloor:
    """The floor of NOTE [ chained-matmul analytic floor ] for a resolved workload ``config``.

    Args:
        config: mapping with ``n``, ``d``, ``hidden``, ``x_requires_grad``.
        chunk_size: rows per chunk; None (unchunked) means ``n``.
        element_size: bytes per element of the dtype (4 for float32).
    """
    n, d, hd = int(config["n"]), int(config["d"]), int(config["hidden"])
    if element_size < 1:
        raise ValueError(f"element_size={element_size!r} is not valid; expected bytes per element >= 1")
    c = n if chunk_size is None else min(int(chunk_size), n)
    e = element_size
    train = {
        "output y [n, d]": n * d * e,
        "grad_w1 [d, hidden]": d * hd * e,
        "grad_w2 [hidden, d]": hd * d * e,
        "grad_x [n, d]": n * d * e if config["x_requires_grad"] else 0,
        "one chunk hidden [c, hidden]": c * hd * e,
    }
    infer = {"output y [n, d]": n * d * e, "one chunk hidden [c, hidden]": c * hd * e}
    return AnalyticFloor(sum(train.values()), sum(infer.values()), train, infer, c)


class ChainedMatmulModel(AdvisorModel, family="chunking"):
    """The chunking family's advisor model (NOTE [ advisor models ] in :mod:`memlab.advisor.model`).

    Sizes ``n, d, hidden``, knob ``chunk_size``: ``chunk = min(chunk_size, n)`` rows per chunk,
    ``k = ceil(n / chunk)`` chunks, ``last = n - (k - 1) * chunk`` rows in the last one.
    """

    workload = ChainedMatmul
    sizes = ("n", "d", "hidden")
    workload_fixed = {"x_requires_grad": True}
    loop = Chunks(rows="n", knob="chunk_size")
    entries = (
        Entry("unchunked"),
        Entry("slice_loop", knobs=("chunk_size",)),
        Entry("vmap_chunk", knobs=("chunk_size",)),
        Entry("checkpoint_chunk", knobs=("chunk_size",)),
        Entry("einsum_chunk", {"opt_einsum": False}, knobs=("chunk_size",)),
        Entry("slice_accumulate", {"backward": "manual"}, knobs=("chunk_size",)),
        Entry("slice_accumulate", {"backward": "autograd"}, knobs=("chunk_size",)),
    )
    held_out = {"n": (2, 400), "d": (2, 48), "hidden": (2, 96)}
    # the fourth size is where the baseline's 64 MiB blocks are mapped afresh every step and weigh most
    # against its work (NOTE [ page faults in the time model ] in memlab.advisor.fit)
    time_sizes = ({"n": 2048, "d": 64, "hidden": 256}, {"n": 8192, "d": 128, "hidden": 512},
                  {"n": 16384, "d": 256, "hidden": 512}, {"n": 16384, "d": 64, "hidden": 1024})
    work = "n*d*hidden"
    time_chunks = (1, 4, 16)
    # a further chunk's cost grows with n*d: a slice's backward writes a full [n, d] gradient per chunk
    # (NOTE [ per-chunk costs ] in memlab.advisor.fit)
    chunk_cost_work = {"chunk_size": "n*d"}
