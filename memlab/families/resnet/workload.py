"""CIFAR-style residual networks: the workload of the deep-network family (ResNet and RevNet).

Input ``x`` [B, 3, S, S] (S = ``image``, 32 for CIFAR), output [B, classes] logits.  The layout is
the CIFAR one of He et al.: a 3x3 stem, three stages of ``n`` residual blocks at ``width``,
``2·width`` and ``4·width`` channels (times 4 at a stage's output for bottleneck blocks), the second
and third stages halving the resolution in their first block, then norm, ReLU, global average pool
and a linear classifier.  ``depth`` counts weighted layers: ``6n + 2`` with basic blocks (two 3x3
convs: ResNet-110 is n = 18), ``9n + 2`` with bottleneck blocks (1x1, 3x3, 1x1: ResNet-164 is
n = 18).

Blocks are pre-activation (He et al. 2016, "Identity mappings"): ``y = x + F(x)`` with
``F = norm-ReLU-conv-norm-ReLU-conv`` (basic) or three norm-ReLU-conv triples (bottleneck); a block
that changes channels or resolution adds a 1x1 strided projection of ``x`` instead of ``x``.

# NOTE [ frozen norm ]
A training-mode BatchNorm updates its running statistics on every call, so a checkpointed
network (which runs each block's forward twice) would end a step with different buffers than the
plain one, and the batch statistics make every sample depend on the others.  memlab's check must
be exact, so the norm here is BatchNorm with *frozen* statistics (``F.batch_norm(training=False)``,
seeded running mean and variance, learnable scale and shift: torchvision's ``FrozenBatchNorm2d``
with a trainable affine).  It saves its input for backward like BatchNorm does, so the memory per
block is that of a real network; what it does not reproduce is the batch statistics' own small
buffers (two [C] vectors per norm).

RevNet (Gomez et al. 2017) is built here too (:func:`build_revnet`): each stage's total channels are
twice the ResNet's (halves of the ResNet's width), ``n / 2`` units per stage, each unit a coupling
``y1 = x1 + F(x2)``, ``y2 = x2 + G(y1)`` whose F and G are ResNet branches on the half; a stage's
first unit, where channels or resolution change, is a non-reversible residual block (the paper's
transition).  Its maths differs from the ResNet's, so a RevNet technique's reference is the same
RevNet run with plain autograd (:meth:`RevNetModel.forward` with ``reversible=False``).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F_
from torch import nn

from memlab.core.declaration import AdvisorModel, Count, Entry
from memlab.functional.reversible import residual_stack, reversible_stack
from memlab.core.params import Param, check_steps
from memlab.workload import DEFAULT_TOLERANCES, Problem, Workload
from memlab.families.seeding import seeded_randn

__all__ = ["ResNet", "ResNetAdvisorModel", "ResNetModel", "RevNetModel", "FrozenNorm", "ResBlock", "branch",
           "build_revnet", "blocks_per_stage", "BLOCKS"]

BLOCKS = ("basic", "bottleneck")
_LAYERS_PER_BLOCK = {"basic": 6, "bottleneck": 9}  # weighted layers per block, times 3 stages


def blocks_per_stage(depth: int, block: str) -> int:
    """``n`` of a ``6n + 2`` (basic) or ``9n + 2`` (bottleneck) network; ValueError naming the fix."""
    per = _LAYERS_PER_BLOCK[block]
    return check_steps("depth", depth, per, 2, rule=f"is not a {block} layout {per}n+2 (n >= 1)")


class FrozenNorm(nn.Module):
    """BatchNorm with frozen running statistics and a trainable affine (NOTE [ frozen norm ])."""

    def __init__(self, channels: int, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.ones(channels, **kw))
        self.bias = nn.Parameter(torch.zeros(channels, **kw))
        self.register_buffer("running_mean", torch.zeros(channels, **kw))
        self.register_buffer("running_var", torch.ones(channels, **kw))

    def forward(self, x):
        return F_.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=False)


def _conv(c_in, c_out, k, stride, device, dtype) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False, device=device, dtype=dtype)


def branch(c_in: int, c_out: int, stride: int, block: str, device=None, dtype=None) -> nn.Sequential:
    """A pre-activation residual function F: [B, c_in, S, S] -> [B, c_out, S/stride, S/stride].

    basic: norm-ReLU-conv3x3(stride)-norm-ReLU-conv3x3; bottleneck (middle width c_out / 4):
    norm-ReLU-conv1x1, norm-ReLU-conv3x3(stride), norm-ReLU-conv1x1.
    """
    if block == "basic":
        shape = [(c_in, c_out, 3, stride), (c_out, c_out, 3, 1)]
    else:
        mid = max(1, c_out // 4)
        shape = [(c_in, mid, 1, 1), (mid, mid, 3, stride), (mid, c_out, 1, 1)]
    layers: list[nn.Module] = []
    for ci, co, k, s in shape:
        layers += [FrozenNorm(ci, device, dtype), nn.ReLU(), _conv(ci, co, k, s, device, dtype)]
    return nn.Sequential(*layers)


class ResBlock(nn.Module):
    """``y = x + F(x)``, or ``P(x) + F(x)`` with a 1x1 strided projection P when the shape changes."""

    def __init__(self, c_in: int, c_out: int, stride: int, block: str, device=None, dtype=None):
        super().__init__()
        self.f = branch(c_in, c_out, stride, block, device, dtype)
        self.proj = _conv(c_in, c_out, 1, stride, device, dtype) if (c_in != c_out or stride != 1) else None

    def forward(self, x):
        return self.f(x) + (x if self.proj is None else self.proj(x))


class _Head(nn.Module):
    def __init__(self, channels: int, classes: int, device, dtype):
        super().__init__()
        self.norm = FrozenNorm(channels, device, dtype)
        self.fc = nn.Linear(channels, classes, device=device, dtype=dtype)

    def forward(self, x):  # [B, C, s, s] -> [B, classes]
        return self.fc(F_.relu(self.norm(x)).mean(dim=(2, 3)))


class ResNetModel(nn.Module):
    """``stem`` (3x3 conv), ``blocks`` (``nn.ModuleList`` of 3n :class:`ResBlock`), ``head``."""

    def __init__(self, stem: nn.Module, blocks: list[nn.Module], head: nn.Module):
        super().__init__()
        self.stem, self.blocks, self.head = stem, nn.ModuleList(blocks), head

    def forward(self, x):
        h = self.stem(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


class RevNetModel(nn.Module):
    """``stem``; per stage a ``transition`` block (or None) and coupling units ``f[s]``, ``g[s]``; ``head``."""

    def __init__(self, stem, transitions: list[nn.Module | None], f: list[list[nn.Module]],
                 g: list[list[nn.Module]], head):
        super().__init__()
        self.stem, self.head = stem, head
        self.transitions = nn.ModuleList([t if t is not None else nn.Identity() for t in transitions])
        self.f = nn.ModuleList([nn.ModuleList(s) for s in f])
        self.g = nn.ModuleList([nn.ModuleList(s) for s in g])

    def forward(self, x, *, reversible: bool = False, save_memory: bool = True):
        """Plain autograd (``reversible=False``: the reference) or one reversible Function per stage."""
        h = self.stem(x)
        for t, fs, gs in zip(self.transitions, self.f, self.g):
            h = t(h)
            if len(fs) == 0:
                continue
            if reversible:
                h = reversible_stack(h, list(fs), list(gs), save_memory=save_memory)
            else:
                h = residual_stack(h, list(fs), list(gs))
        return self.head(h)


def _stage_channels(width: int, block: str) -> list[int]:
    mult = 1 if block == "basic" else 4
    return [width * mult, 2 * width * mult, 4 * width * mult]


def _seed_(model: nn.Module, gen: torch.Generator, scale_last: float, device, dtype) -> None:
    """Overwrite every parameter and buffer from ``gen`` in module order (NOTE [ frozen norm ]).

    Convs: He-normal, std sqrt(2 / fan_in); the last conv of every residual function times
    ``scale_last`` (1/sqrt(blocks): deep stacks stay well-scaled); norms: scale 1 + 0.1·N, shift,
    running mean 0.1·N, running variance 1 + 0.1·|N|; classifier: N / sqrt(fan_in), bias 0.1·N.
    """
    def rand(*shape, scale=1.0):
        return seeded_randn(gen, *shape, device=device, dtype=dtype, scale=scale)

    last_convs = {id(m[-1]) for m in model.modules() if isinstance(m, nn.Sequential) and isinstance(m[-1], nn.Conv2d)}
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.weight[0].numel()
                s = math.sqrt(2.0 / fan_in) * (scale_last if id(m) in last_convs else 1.0)
                m.weight.copy_(rand(*m.weight.shape, scale=s))
            elif isinstance(m, FrozenNorm):
                c = m.weight.numel()
                m.weight.copy_(1 + rand(c, scale=0.1))
                m.bias.copy_(rand(c, scale=0.1))
                m.running_mean.copy_(rand(c, scale=0.1))
                m.running_var.copy_(1 + rand(c, scale=0.1).abs())
            elif isinstance(m, nn.Linear):
                m.weight.copy_(rand(*m.weight.shape, scale=m.weight.shape[1] ** -0.5))
                m.bias.copy_(rand(m.bias.numel(), scale=0.1))


def build_resnet(config: dict, device, dtype, gen: torch.Generator) -> ResNetModel:
    c, block = config, config["block"]
    n = blocks_per_stage(c["depth"], block)
    chans = _stage_channels(c["width"], block)
    blocks, c_in = [], c["width"]
    for s, c_out in enumerate(chans):
        for i in range(n):
            blocks.append(ResBlock(c_in, c_out, 2 if (s and not i) else 1, block, device, dtype))
            c_in = c_out
    model = ResNetModel(_conv(3, c["width"], 3, 1, device, dtype), blocks,
                        _Head(chans[-1], c["classes"], device, dtype))
    _seed_(model, gen, 1.0 / math.sqrt(3 * n), device, dtype)
    return model


def build_revnet(config: dict, device, dtype, gen: torch.Generator) -> RevNetModel:
    """The RevNet of the same ``depth``/``block``/``width`` (``n`` must be even): see the module doc."""
    block = config["block"]
    n = blocks_per_stage(config["depth"], block)
    if n % 2:
        raise ValueError(f"RevNet needs an even number of blocks per stage (n/2 coupling units, each an F "
                         f"and a G); depth={config['depth']} gives n={n}: use depth="
                         f"{config['depth'] + _LAYERS_PER_BLOCK[block]}")
    units = n // 2
    chans = [2 * ch for ch in _stage_channels(config["width"], block)]
    c_in = 2 * config["width"]
    transitions, fs, gs = [], [], []
    for s, c_out in enumerate(chans):
        stride = 2 if s else 1
        moves = c_in != c_out or stride != 1
        transitions.append(ResBlock(c_in, c_out, stride, block, device, dtype) if moves else None)
        k = units - 1 if moves else units
        fs.append([branch(c_out // 2, c_out // 2, 1, block, device, dtype) for _ in range(k)])
        gs.append([branch(c_out // 2, c_out // 2, 1, block, device, dtype) for _ in range(k)])
        c_in = c_out
    model = RevNetModel(_conv(3, 2 * config["width"], 3, 1, device, dtype), transitions, fs, gs,
                        _Head(chans[-1], config["classes"], device, dtype))
    _seed_(model, gen, 1.0 / math.sqrt(3 * n), device, dtype)
    return model


class ResNet(Workload, name="resnet", family="resnet"):
    """A CIFAR-style pre-activation ResNet, ``depth`` = 6n+2 (basic) or 9n+2 (bottleneck), x [B, 3, S, S]."""

    params = {
        "depth": Param(110, low=8, high=100_000, doc="weighted layers: 6n+2 (basic) or 9n+2 (bottleneck), n blocks per stage"),
        "block": Param("basic", choices=BLOCKS, doc="basic (two 3x3 convs) or bottleneck (1x1, 3x3, 1x1; 4x wider output)"),
        "batch": Param(32, low=1, high=1_000_000, doc="images per step (B)"),
        "width": Param(16, low=1, high=4096, doc="channels of the first stage (16 in the CIFAR networks); stages 1x, 2x, 4x"),
        "image": Param(32, low=4, high=4096, doc="height = width of the input images (32 for CIFAR)"),
        "classes": Param(10, low=1, high=100_000, doc="outputs of the classifier"),
    }
    samples_param = "batch"
    #: its step runs convolutions, whose CUDA workspace comes from the calibration table
    #: (:func:`memlab.cuda_replay.calibration.conv_error_range` reads it)
    convolutional = True
    check_params = {"depth": 26, "batch": 2, "width": 2, "image": 8}
    # RevNet reconstructs block inputs in backward (memlab.functional.reversible): in float64 its
    # gradients agree with plain autograd to ~1e-14 relative; 1e-10 leaves room for deep stacks.
    tolerances = {**DEFAULT_TOLERANCES, "float64": (1e-10, 1e-10)}

    def validate(self) -> None:
        blocks_per_stage(self.config["depth"], self.config["block"])

    @classmethod
    def sweep_grid(cls, quick):
        small = {"batch": 4, "width": 4}
        if quick:
            return [{"depth": d, **small, "image": 16} for d in (26, 50)]
        # 6n+2 with n = 6, 24, 96: 18 .. 288 blocks (16x), enough for a complexity fit (memlab.core.complexity);
        # data/sweeps/cpu-resnet.jsonl adds n = 12, 48 (make data: --family resnet --grid depth=74,290 ...)
        return [{"depth": 6 * n + 2, **small} for n in (6, 24, 96)]

    def n(self) -> int:
        """Blocks per stage."""
        return blocks_per_stage(self.config["depth"], self.config["block"])

    def build(self, device, dtype, seed):
        return self._problem(build_resnet, device, dtype, seed)

    def _problem(self, make, device, dtype, seed) -> Problem:
        c = self.config
        gen = torch.Generator().manual_seed(seed)
        x = seeded_randn(gen, c["batch"], 3, c["image"], c["image"], device=device, dtype=dtype)
        grad_out = seeded_randn(gen, c["batch"], c["classes"], device=device, dtype=dtype)
        model = make(c, device, dtype, gen)
        return Problem(model=model, inputs={"x": x}, grad_output=grad_out)

    def build_revnet(self, device, dtype, seed) -> Problem:
        """The RevNet problem: same seeded input and upstream gradient, RevNet weights."""
        return self._problem(build_revnet, device, dtype, seed)

    def reference(self, problem):
        return problem.model(problem.inputs["x"])


class ResNetAdvisorModel(AdvisorModel, family="resnet"):
    """The resnet family's advisor model: basic blocks of width 16 (the CIFAR networks') on 8x8 images,
    sizes ``depth, batch``; ``depth = 6k + 2`` counts ``k`` blocks per stage (``Count``).

    What is exact and what is not (traces of one step, ``memlab.advisor.trace.raw_trace``):

    * at width 16 every allocation of the step is ``q * batch`` or a constant for batch 5 to 160
      (the same 380 step events at depth 8, the same 1424 at depth 26): the batch is a size;
    * the width is not: oneDNN picks its convolution kernels by the channel count, and the step
      allocates a different number of convolution buffers at different widths (23 ``mkldnn_convolution``
      allocations at width 7, 25 at 13, 28 at 19 and 23, depth 8, 8x8 images), so the width is held at 16;
    * the image side is held too: the second and third stages halve it (``image / 2``, ``image / 4``
      rounded), no monomial of it;
    * ``resnet_checkpoint_sqrt`` is left out: its ``round(sqrt(3k))`` segments are no repeated loop
      body; the RevNet techniques are left out: they need an even ``k`` (``depth = 12j + 2``), a
      second loop count over the same size.
    """

    workload = ResNet
    sizes = ("depth", "batch")
    workload_fixed = {"block": "basic", "width": 16, "image": 8, "classes": 10}
    loop = Count("depth", per=6, offset=2)
    entries = (Entry("resnet"), Entry("resnet_checkpoint_block"))
    # why each technique left out is left out (memlab.advisor.decision.declared_not_modelled reads it)
    not_modelled = {
        "resnet_checkpoint_sqrt": "its round(sqrt(3k)) segments are no repeated loop body",
        "revnet": "needs an even k (depth = 12j + 2), a second loop count over the same size",
        "revnet_autograd": "needs an even k (depth = 12j + 2), a second loop count over the same size",
        "revnet_nosave": "needs an even k (depth = 12j + 2), a second loop count over the same size",
    }
    held_out = {"batch": (2, 40)}
    # the step's work has a part per layer whatever the batch (each layer's kernel calls, autograd nodes
    # and, checkpointed, the per-block recompute machinery) and a part per image per layer (the
    # convolutions): NOTE [ work components ] in memlab.advisor.fit.  With one monomial (depth * batch)
    # resnet_checkpoint_block's held-out times were 6-18% off, highest at small batches.  The time sizes
    # vary depth over batch (batch 8 to 160, every batch a traced-exact one); with batches up to 128 only
    # the split between the per-layer and the per-image cost was loose and batch 256 read 1.17 (measured
    # 1.36 and 1.51)
    time_sizes = ({"depth": 20, "batch": 16}, {"depth": 32, "batch": 64}, {"depth": 8, "batch": 128},
                  {"depth": 56, "batch": 8}, {"depth": 38, "batch": 32}, {"depth": 14, "batch": 160},
                  {"depth": 26, "batch": 96})
    work = {"layers": "depth", "images": "depth*batch"}
    max_degree = 2
    max_quantum = 1 << 14
