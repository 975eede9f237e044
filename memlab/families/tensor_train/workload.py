"""TT linear map: ``y = x @ W`` with ``W`` [prod(in_modes), prod(out_modes)] held as a tensor train.

Shapes: ``x`` [batch, in_features] (requires grad: the layer sits inside a network), ``y`` and
``grad_output`` [batch, out_features].  The problem's model is a
:class:`~memlab.families.tensor_train.layer.TensorTrainLinear` whose cores are seeded (``W``'s entries have variance
``1 / in_features``); the ``dense`` technique swaps in an ``nn.Linear`` holding the reconstructed
weight, so every technique computes the same function.  Default: modes (10, 10, 10) -> (10, 10, 10)
(1000 -> 1000, three cores), rank 8, batch 4096: the tt-layer report's setting.

Reference: ``F.linear(x, W.T)`` with ``W`` reconstructed from the problem's own cores by one plain
``einsum`` (or the dense layer's own weight), differentiated by plain autograd, so gradients with
respect to the cores are comparable with every TT path.
"""
from __future__ import annotations

import math
import string

import torch
import torch.nn.functional as F

from memlab.core.declaration import AdvisorModel, Chunks, Entry
from .tt import TTShape
from memlab.core.params import Param
from memlab.workload import Problem, Workload
from memlab.families.seeding import seeded_randn
from .layer import TensorTrainLinear

__all__ = ["TTLinear", "TTLinearModel", "einsum_reconstruct"]

_MODES = dict(low=1, high=4096, min_len=1, max_len=8)


def einsum_reconstruct(cores) -> torch.Tensor:
    """``W`` [in, out] from TT cores by a single ``torch.einsum`` (independent of :mod:`memlab.families.tensor_train.tt`)."""
    letters = iter(string.ascii_letters)
    r = [next(letters) for _ in range(len(cores) + 1)]
    n = [next(letters) for _ in cores]
    m = [next(letters) for _ in cores]
    spec = ",".join(f"{r[i]}{n[i]}{m[i]}{r[i + 1]}" for i in range(len(cores)))
    spec += f"->{r[0]}{''.join(n)}{''.join(m)}{r[-1]}"
    full = torch.einsum(spec, *cores)
    in_f = math.prod(c.shape[1] for c in cores)
    return full.reshape(in_f, -1)


class TTLinear(Workload, name="tt_linear", family="tensor_train"):
    """y = x @ W, W [prod(in_modes), prod(out_modes)] in TT format of rank `rank`, x [batch, in]."""

    params = {
        "batch": Param(4096, low=1, high=10_000_000, doc="rows of x (samples, or tokens, per step)"),
        "rank": Param(8, low=1, high=4096, doc="TT rank of every inner core boundary"),
        "in_modes": Param((10, 10, 10), doc="input modes; in_features = their product", **_MODES),
        "out_modes": Param((10, 10, 10), doc="output modes (as many as in_modes); out_features = their product",
                           **_MODES),
    }
    samples_param = "batch"
    #: core gradients sum ``batch * in * out / (n_i m_i)`` products and reach ~10^3 at the default
    #: size; float32 rounding (~1e-6 relative) then leaves absolute errors ~1e-2 on entries near zero.
    tolerances = {"float64": (1e-9, 1e-7), "float32": (1e-3, 5e-2), "bfloat16": (5e-2, 5.0), "float16": (1e-2, 1.0)}
    check_params = {"batch": 21, "rank": 2, "in_modes": (2, 3, 2), "out_modes": (3, 2, 2)}

    @classmethod
    def sweep_grid(cls, quick):
        """Quick: batch 1024 at rank 8 (one measurement per technique, about a minute on 2 cores
        for the whole family).  Full: rank 1..32 at batch 4096, and batch 256..2048 at rank 8."""
        if quick:
            return [{"batch": 1024, "rank": 8}]
        grid = [{"batch": 4096, "rank": r} for r in (1, 2, 4, 8, 16, 32)]
        grid += [{"batch": b, "rank": 8} for b in (256, 1024, 2048)]
        return grid

    def validate(self):
        self.tt_shape = TTShape.create(self.config["in_modes"], self.config["out_modes"], self.config["rank"])

    def build(self, device, dtype, seed):
        c = self.config
        shape = self.tt_shape
        g = torch.Generator().manual_seed(seed)
        layer = TensorTrainLinear(shape.in_modes, shape.out_modes, c["rank"], device=device, dtype=dtype)
        std = (1.0 / (shape.in_features * math.prod(shape.ranks))) ** (1.0 / (2 * shape.n_cores))
        with torch.no_grad():
            for p in layer.cores:
                p.copy_(seeded_randn(g, *p.shape, device=device, dtype=dtype, scale=std))
        x = seeded_randn(g, c["batch"], shape.in_features, device=device, dtype=dtype).requires_grad_(True)
        grad_y = seeded_randn(g, c["batch"], shape.out_features, device=device, dtype=dtype)
        return Problem(model=layer, inputs={"x": x}, grad_output=grad_y)

    def reference(self, problem):
        model = problem.model
        x = problem.inputs["x"]
        if isinstance(model, torch.nn.Linear):
            return F.linear(x, model.weight, model.bias)
        return F.linear(x, einsum_reconstruct(model.cores).t())


class TTLinearModel(AdvisorModel, family="tensor_train"):
    """The tensor_train family's advisor model at rank 4 and modes (4, 4, 4) -> (4, 4, 4) (64 -> 64,
    three cores): size ``batch``; ``tt_chunked``'s knob ``chunk_size`` splits the batch (``Chunks``).

    Why so small a layer, and why the rank is held (traces of one step,
    ``memlab.advisor.trace.raw_trace``; plans from :func:`memlab.families.tensor_train.tt.plan_contraction`):

    * the factorized and chunked paths contract by a plan picked per rows (NOTE [ TT contraction
      plans ] in :mod:`memlab.families.tensor_train.tt`), and another plan allocates other tensors.  At these
      modes and rank 4 the plan is one from 15 rows on (``blocks_first_first`` in a training step,
      ``blocks_last_first`` in the chunked path's recomputing one, from 5 rows on); at rank 5 and
      more the chunked path's plan changes again between 17 and 64 rows, so the rank is no size.
    * rows run in cache blocks of ``plan_block_rows`` rows (``ROW_BLOCK_BYTES`` over a row's
      intermediates: 1,024 at this rank and these modes, 64 at modes 8x8x8 and rank 8), and each block
      past the first allocates its own temporaries: past one block the structure of the step
      follows ``ceil(batch / block rows)``, no polynomial (a model traced at modes 8x8x8, rank 8 and
      2 blocks was off by 0.55 MB at 7 blocks).  These modes keep every modelled point within one
      block: traced batches 17 to 43, held-out batches up to 250 (1,000 at 4x), time sizes 256, 512
      and 1,024, chunks of at most 160 rows.  The time model is fitted at 3,072 and 6,144 rows too
      (``time_only_sizes``: their bytes are listed, ``time_only_measured``, not counted as held out).
    * so the model covers batch 15 to 1,024 (tt_chunked: chunks of 5 to 1,024 rows); beyond that,
      ``memlab advise`` flags the extrapolation by its factor.  Chunks of 1 to 4 rows run the
      one-core-at-a-time plan, which the model does not trace, and ``memlab advise`` still lists them
      among its knob settings: measured at batch 100, chunk 2 the model overstates by 2,048 B (+1.8%), at
      chunk 4 it understates by 2,048 B (-1.7%), at batch 60, chunk 1 it overstates by 4,096 B; chunks
      of 8 and 200 rows are exact.
    """

    workload = TTLinear
    sizes = ("batch",)
    workload_fixed = {"rank": 4, "in_modes": (4, 4, 4), "out_modes": (4, 4, 4)}
    loop = Chunks(rows="batch", knob="chunk_size", chunk=(15, 40))
    entries = (Entry("dense"), Entry("tt_factorized"), Entry("tt_reconstructed"),
               Entry("tt_chunked", knobs=("chunk_size",)))
    held_out = {"batch": (15, 250)}
    time_sizes = ({"batch": 256}, {"batch": 512}, {"batch": 1024})
    # the time model is also fitted past one cache block (its bytes are not exact there: time only).
    # Fitted over 256-1,024 rows alone it extrapolated to the held-out 2,048-8,192 rows (time_check):
    # tt_chunked at 8,192 rows in chunks of 2,048 predicted 3.09, measured 2.74-3.04 (+2 to +13%), and
    # tt_factorized at 4,096 rows 2.70 against 2.83-3.06.  3,072 and 6,144 rows (chunks of 192 to
    # 6,144) are none of time_check's settings
    time_only_sizes = ({"batch": 3072}, {"batch": 6144})
    # one component, for the baseline's fixed cost (NOTE [ work components ] in memlab.advisor.fit): the
    # dense step over 256-1,024 rows of 64 is a small matmul beside its per-step costs, so r + c / batch
    # (a baseline cost proportional to the batch) was 14-22% off at 2,048-8,192 rows
    work = {"rows": "batch"}
    time_chunks = (1, 4, 16)
    max_quantum = 1 << 14
    trace_values = (17, 19, 23, 29, 31, 37, 41, 43)
