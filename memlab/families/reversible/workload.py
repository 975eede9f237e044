"""A stack of reversible coupling blocks: the workload of the reversible-memory-accounting report.

Input ``x`` [B, 2·C] (``block="mlp"``) or [B, 2·C, S, S] (``block="conv"``), split along dim 1 into
halves of C = ``width`` channels.  Block i: ``y1 = couple(x1, F_i(x2))``, ``y2 = couple(x2, G_i(y1))``
(see :mod:`memlab.functional.reversible`).  F and G are

* mlp: Linear(C, hidden) -> ReLU -> Linear(hidden, C_out)
* conv: Conv2d(C, hidden, 3, padding=1) -> ReLU -> Conv2d(hidden, C_out, 3, padding=1)

with C_out = C (additive coupling) or 2·C (affine: scale and shift).  The issue's configuration is
``depth=16, batch=512, width=512, hidden=1024`` (x [512, 1024], MLP 512 -> 1024 -> 512).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from memlab.core.declaration import AdvisorModel, Count, Entry
from memlab.functional.reversible import Coupling, residual_stack
from memlab.core.params import Param
from memlab.workload import DEFAULT_TOLERANCES, Problem, Workload
from memlab.families.seeding import seeded_randn

__all__ = ["ResidualStack", "ResidualStackModel", "CouplingStack", "BLOCKS", "activation_bytes_per_block"]

BLOCKS = ("mlp", "conv")


def _seeded_linear(g: torch.Generator, n_in: int, n_out: int, device, dtype) -> nn.Linear:
    lin = nn.Linear(n_in, n_out, device=device, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(seeded_randn(g, n_out, n_in, device=device, dtype=dtype, scale=n_in ** -0.5))
        lin.bias.copy_(seeded_randn(g, n_out, device=device, dtype=dtype, scale=0.1))
    return lin


def _seeded_conv(g: torch.Generator, c_in: int, c_out: int, device, dtype) -> nn.Conv2d:
    conv = nn.Conv2d(c_in, c_out, 3, padding=1, device=device, dtype=dtype)
    with torch.no_grad():
        conv.weight.copy_(seeded_randn(g, c_out, c_in, 3, 3, device=device, dtype=dtype,
                                       scale=(9 * c_in) ** -0.5))
        conv.bias.copy_(seeded_randn(g, c_out, device=device, dtype=dtype, scale=0.1))
    return conv


class CouplingStack(nn.Module):
    """``depth`` pairs of residual functions: ``f[i]`` and ``g[i]`` (``nn.ModuleList`` each)."""

    def __init__(self, f: list[nn.Module], g: list[nn.Module]):
        super().__init__()
        self.f = nn.ModuleList(f)
        self.g = nn.ModuleList(g)


def _make_fn(gen, block: str, width: int, hidden: int, out: int, scale_last: float, device, dtype) -> nn.Sequential:
    make = _seeded_linear if block == "mlp" else _seeded_conv
    first, last = make(gen, width, hidden, device, dtype), make(gen, hidden, out, device, dtype)
    with torch.no_grad():  # keep the residual branches small so deep stacks stay well-conditioned
        last.weight.mul_(scale_last)
    return nn.Sequential(first, nn.ReLU(), last)


def activation_bytes_per_block(config: dict, element_size: int) -> dict[str, int]:
    """Analytic bytes plain autograd saves per block (ReLU outputs, y1 and y2, the couplings' own), for
    ``describe``.

    ``relu``: the two [B, hidden, ...] ReLU outputs (saved by ReLU and the second layer);
    ``halves``: y1 and y2, [B, C, ...] each (saved by the next layer / kept by the next block);
    ``coupling``: what the two couplings save beyond those halves (``CouplingRule.new_saved_halves``:
    0 additive, the scale ``s`` [B, C, ...] of each affine coupling).
    """
    spatial = 1 if config["block"] == "mlp" else config["spatial"] ** 2
    b, c, h = config["batch"], config["width"], config["hidden"]
    half = b * c * spatial * element_size
    return {"relu": 2 * b * h * spatial * element_size, "halves": 2 * half,
            "coupling": 2 * Coupling(config["coupling"]).rule.new_saved_halves * half}


class ResidualStack(Workload, name="residual_stack", family="reversible"):
    """depth coupling blocks y1 = x1 + F(x2), y2 = x2 + G(y1) on x [B, 2·C] (or [B, 2·C, S, S])."""

    params = {
        "depth": Param(16, low=1, high=4096, doc="coupling blocks in the stack (each has an F and a G)"),
        "batch": Param(512, low=1, high=10_000_000, doc="samples per step (B)"),
        "width": Param(512, low=1, high=1_000_000, doc="channels per half (C); x has 2*C"),
        "hidden": Param(1024, low=1, high=1_000_000, doc="hidden width of F and G (features or conv channels)"),
        "coupling": Param("additive", choices=tuple(c.value for c in Coupling),
                          doc="additive: y = x + F; affine: y = x * sigmoid(r + 2) + t"),
        "block": Param("mlp", choices=BLOCKS, doc="F and G: mlp (Linear-ReLU-Linear) or conv (3x3 convs)"),
        "spatial": Param(8, low=1, high=4096, doc="height = width of the conv variant's feature maps"),
        "x_requires_grad": Param(True, doc="whether x is a leaf that needs a gradient"),
    }
    samples_param = "batch"
    check_params = {"depth": 3, "batch": 5, "width": 4, "hidden": 6, "spatial": 3}
    # NOTE [ reconstruction and ReLU masks ]
    # Reversible techniques rebuild block inputs as y - F(x2): exact up to rounding.  In float64 the
    # gradients then agree with plain autograd to ~1e-13 (tolerance 1e-12).  In float32 the rebuilt
    # inputs differ by ~1e-6, enough to flip the ReLU mask of the few pre-activations within 1e-6 of
    # zero; each flip changes a weight-gradient element by one sample's g * x.  At the size
    # (depth 16, batch 512, width 512, hidden 1024) that is a max abs error ~0.25 on weight gradients
    # of magnitude ~10-100, so the float32 check (1e-4) reports reversible and RevLib as not matching
    # there: a property of reconstruction in float32, not a wrong formula (float64 is the proof).
    tolerances = {**DEFAULT_TOLERANCES, "float64": (1e-12, 1e-12)}

    @classmethod
    def sweep_grid(cls, quick):
        if quick:
            return [{"depth": d, "batch": 64, "width": 64, "hidden": 128} for d in (4, 16)]
        grid = [{"depth": d} for d in (4, 8, 16, 32, 64)]
        grid += [{"depth": 16, "batch": b} for b in (128, 256, 1024)]
        grid += [{"depth": 16, "coupling": "affine"}]
        grid += [{"depth": d, "block": "conv", "batch": 32, "width": 32, "hidden": 64, "spatial": 16} for d in (4, 16)]
        return grid

    def shape(self) -> tuple[int, ...]:
        """Shape of x, the output and grad_output."""
        c = self.config
        base = (c["batch"], 2 * c["width"])
        return base if c["block"] == "mlp" else base + (c["spatial"], c["spatial"])

    def build(self, device, dtype, seed):
        c = self.config
        gen = torch.Generator().manual_seed(seed)
        out = Coupling(c["coupling"]).out_channels(c["width"])
        scale_last = 1.0 / math.sqrt(2 * c["depth"])
        f, g = [], []
        for _ in range(c["depth"]):
            f.append(_make_fn(gen, c["block"], c["width"], c["hidden"], out, scale_last, device, dtype))
            g.append(_make_fn(gen, c["block"], c["width"], c["hidden"], out, scale_last, device, dtype))
        model = CouplingStack(f, g)
        x = seeded_randn(gen, *self.shape(), device=device, dtype=dtype)
        grad_out = seeded_randn(gen, *self.shape(), device=device, dtype=dtype)
        x.requires_grad_(c["x_requires_grad"])
        return Problem(model=model, inputs={"x": x}, grad_output=grad_out)

    def reference(self, problem):
        m = problem.model
        return residual_stack(problem.inputs["x"], list(m.f), list(m.g), coupling=self.config["coupling"])


class ResidualStackModel(AdvisorModel, family="reversible"):
    """The reversible family's advisor model (MLP blocks, additive coupling): sizes
    ``depth, batch, width, hidden``; ``k = depth`` (NOTE [ advisor models ] in :mod:`memlab.advisor.model`)."""

    workload = ResidualStack
    sizes = ("depth", "batch", "width", "hidden")
    workload_fixed = {"coupling": "additive", "block": "mlp", "x_requires_grad": True}
    loop = Count("depth")
    entries = (Entry("residual"), Entry("checkpoint_block"), Entry("reversible"), Entry("reversible_nosave"))
    held_out = {"batch": (1, 64), "width": (1, 40), "hidden": (1, 80)}
    time_sizes = ({"depth": 8, "batch": 128, "width": 64, "hidden": 128},
                  {"depth": 16, "batch": 256, "width": 128, "hidden": 256},
                  {"depth": 16, "batch": 256, "width": 256, "hidden": 1024})
    work = "depth*batch*width*hidden"
