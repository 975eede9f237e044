"""A decoder-only transformer language model: the workload of the transformer family.

Input ``tokens`` [B, T] (int64 ids in [0, V)), output the per-token cross-entropy [B, T] against
``targets`` [B, T]; the upstream gradient is a seeded positive weight per token summing to about 1
(a mean loss with per-token weights; about 2**10 in 16-bit dtypes: NOTE [ 16-bit steps ]).  The model
(GPT-2's layout, pre-LayerNorm):

    h = dropout(E[tokens] + P[:T])                                   # [B, T, D], D = hidden
    layers x:  h = h + dropout(W_o · attention(W_qkv · LN1(h)))      # H = heads, d = D / H
               h = h + dropout(W_2 · gelu(W_1 · LN2(h)))             # W_1: D -> 4D, W_2: 4D -> D
    loss = cross_entropy(LN_f(h) · W_headᵀ, targets)                  # untied head [V, D], no bias

with causal multi-head attention.  A technique chooses *how* (a :class:`Path`): the attention
kernel, the per-block wrapper (checkpointing) and the loss; the reference is the plain eager
model (:data:`EAGER`).

# NOTE [ dropout and the reference check ]
Dropout makes the output a random function of the seed.  Every forward with ``dropout > 0``
re-seeds the global RNG to :attr:`TransformerLM.dropout_seed` inside ``torch.random.fork_rng`` (the
caller's RNG stream is left as it was), so the reference and a technique that draws the same masks
in the same order (eager attention; checkpointing, whose recomputation restores the RNG state; the
chunked loss, which has no dropout) give the same output, in the float64 check and at every
measured step.  ``fork_rng`` saves the RNG state as a small CPU tensor (5,056 bytes on CPU) inside
the step.  Attention kernels that draw their attention-dropout mask differently (SDPA's own
dropout, a per-block draw) cannot be compared with the reference at ``dropout > 0``: those
techniques refuse it (``TechniqueUnavailable``) and are measured at ``dropout = 0``.  At
``dropout = 0`` (the default, and every sweep grid) no RNG is touched.

# NOTE [ 16-bit steps ]
memlab's training step is SGD at lr 1e-4 (:mod:`memlab.measurement.step`).  With a mean loss the
gradients are at most ~0.09 (default size), so an update moves a weight by ~1e-5, below half a bfloat16
ulp of most weights (weights ~N(0, 1/D): ulp 2**-10 at 0.125): measured in bfloat16, one SGD step changed
0.1% of the weight entries and the per-token loss summed to 864.719, 864.719, 864.75, 864.75 over four
steps.  A stale
technique (one that serves the first step's output again) would then pass the every-step check
(NOTE [ every step checked ] in :mod:`memlab.measurement.step_check`).  So in bfloat16 and float16 the
per-token weights sum to about :data:`HALF_PRECISION_LOSS_SCALE` = 2**10 (a power of two: the scaling is
exact): 35% of the entries move per step and the summed loss falls 2.5% per step (864.7, 842.8, 821.6,
801.4 over four bfloat16 steps; float32 at the same scale 841.7, 819.5, 798.4), finite and the same
trajectory as float32.  2**13 moved 67% of entries but the loss by 17% in a step.  Each bfloat16 step
after the first is then held to the every-step check's tolerance, ``(8 * d0 + 16 * 2**-7) * max|reference|``
per tensor (``d0`` the first step's drift against the bfloat16 reference); eager_attention at the default
size passed it at every measured and timed step, 0.38% (output) and 0.68% (head-weight gradient) of the
largest entry away from the float64 reference (bfloat16's eps is 0.78%).  float32 and float64 keep
weights summing to about 1 (their figures, and the float64 check, are unchanged); no byte depends on it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from memlab.core.declaration import AdvisorModel, ChunksOf, Entry, Repeated
from .attention import eager_attention
from .lm_loss import plain_lm_loss
from memlab.core.params import Param, check_steps
from memlab.workload import DEFAULT_TOLERANCES, Problem, Workload
from memlab.families.seeding import seeded_randn

__all__ = ["Transformer", "TransformerModel", "TransformerLM", "Block", "Path", "EAGER", "Attention", "plain_block",
           "HALF_PRECISION_LOSS_SCALE"]

#: the upstream gradient's sum in bfloat16 and float16 (NOTE [ 16-bit steps ])
HALF_PRECISION_LOSS_SCALE = 2 ** 10
#: ``attention(q, k, v, dropout_p) -> out``: q, k, v and out [B, H, T, d]
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]
#: ``loss(h, weight, targets) -> loss``: h [N, D], weight [V, D], targets [N] -> [N]
Loss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


# NOTE [ heads-first copy ]
# The qkv projection gives [B, T, 3, H, d]; attention wants [B, H, T, d].  As a permuted view, what the
# attention's batched matmuls keep depends on the batch size: for B > 1 ``matmul`` cannot fold
# [B, H] of the view into one batch dimension and copies q and k (and v) for itself, for B = 1 it
# keeps views of the whole [B, T, 3D] projection.  One explicit copy to a contiguous [3, B, H, T, d]
# makes q, k, v contiguous views of one tensor for every B, so what each technique keeps has one
# formula (:mod:`memlab.families.transformer.bytes`); the copy is what FlashAttention-style
# kernels expect anyway.


class Block(nn.Module):
    """One pre-LayerNorm block: causal multi-head attention, then a 4x MLP with GELU (tanh-free)."""

    def __init__(self, hidden: int, heads: int, dropout: float, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.heads, self.dropout = heads, dropout
        self.ln1 = nn.LayerNorm(hidden, **kw)
        self.qkv = nn.Linear(hidden, 3 * hidden, **kw)
        self.proj = nn.Linear(hidden, hidden, **kw)
        self.ln2 = nn.LayerNorm(hidden, **kw)
        self.fc1 = nn.Linear(hidden, 4 * hidden, **kw)
        self.fc2 = nn.Linear(4 * hidden, hidden, **kw)

    def forward(self, h: torch.Tensor, attention: Attention) -> torch.Tensor:
        """[B, T, D] -> [B, T, D]."""
        b, t, dim = h.shape
        # heads-first and contiguous, [3, B, H, T, d], in one copy (NOTE [ heads-first copy ])
        qkv = self.qkv(self.ln1(h)).view(b, t, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4).contiguous()
        o = attention(qkv[0], qkv[1], qkv[2], self.dropout)  # [B, H, T, d] each
        o = o.transpose(1, 2).reshape(b, t, dim)
        h = h + self._drop(self.proj(o))
        return h + self._drop(self.fc2(F.gelu(self.fc1(self.ln2(h)))))

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.dropout, training=True) if self.dropout > 0 else x


def plain_block(block: Block, h: torch.Tensor, attention: Attention) -> torch.Tensor:
    """Run ``block`` with plain autograd."""
    return block(h, attention)


@dataclass(frozen=True)
class Path:
    """How a forward computes the model: the attention kernel, the per-block runner and the loss.

    ``run_block(block, h, attention) -> h`` wraps each block (plain, checkpointed...).
    """

    attention: Attention = eager_attention
    run_block: Callable[[Block, torch.Tensor, Attention], torch.Tensor] = plain_block
    loss: Loss = plain_lm_loss


#: the reference: eager attention, plain autograd, the plain loss
EAGER = Path()


class TransformerLM(nn.Module):
    """Embeddings ``tok`` [V, D] and ``pos`` [T, D], ``blocks``, final ``ln_f`` and untied ``head`` [V, D]."""

    def __init__(self, c: dict, device=None, dtype=None, dropout_seed: int = 0):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.dropout, self.dropout_seed = c["dropout"], dropout_seed
        self.tok = nn.Embedding(c["vocab"], c["hidden"], **kw)
        self.pos = nn.Parameter(torch.zeros(c["seq"], c["hidden"], **kw))
        self.blocks = nn.ModuleList(Block(c["hidden"], c["heads"], c["dropout"], **kw) for _ in range(c["layers"]))
        self.ln_f = nn.LayerNorm(c["hidden"], **kw)
        self.head = nn.Linear(c["hidden"], c["vocab"], bias=False, **kw)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor, path: Path = EAGER) -> torch.Tensor:
        """tokens, targets [B, T] int64 -> per-token loss [B, T] (NOTE [ dropout and the reference check ])."""
        if self.dropout == 0:
            return self._forward(tokens, targets, path)
        devices = [tokens.device] if tokens.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, device_type=tokens.device.type):
            torch.manual_seed(self.dropout_seed)
            return self._forward(tokens, targets, path)

    def features(self, tokens: torch.Tensor, path: Path = EAGER) -> torch.Tensor:
        """tokens [B, T] -> the final LayerNorm's output [B, T, D], what the LM head reads (the caller
        seeds dropout: NOTE [ dropout and the reference check ])."""
        h = self.tok(tokens) + self.pos[:tokens.shape[1]]
        if self.dropout > 0:
            h = F.dropout(h, self.dropout, training=True)
        for block in self.blocks:
            h = path.run_block(block, h, path.attention)
        return self.ln_f(h)

    def _forward(self, tokens, targets, path: Path) -> torch.Tensor:
        b, t = tokens.shape
        h = self.features(tokens, path)
        return path.loss(h.view(b * t, -1), self.head.weight, targets.view(-1)).view(b, t)


def _seed_(model: TransformerLM, gen: torch.Generator, layers: int, device, dtype) -> None:
    """Every parameter from ``gen`` in module order: embeddings N(0, 1) and 0.1·N for positions;
    linear weights N / sqrt(fan_in), biases 0.1·N, the residual branches' last layers (``proj``,
    ``fc2``) times 1/sqrt(2·layers); LayerNorm scale 1 + 0.1·N, shift 0.1·N."""
    def rand(*shape, scale=1.0):
        return seeded_randn(gen, *shape, device=device, dtype=dtype, scale=scale)

    last = {id(b.proj) for b in model.blocks} | {id(b.fc2) for b in model.blocks}
    with torch.no_grad():
        model.tok.weight.copy_(rand(*model.tok.weight.shape))
        model.pos.copy_(rand(*model.pos.shape, scale=0.1))
        for m in model.modules():
            if isinstance(m, nn.Linear):
                s = m.weight.shape[1] ** -0.5 * (1 / math.sqrt(2 * layers) if id(m) in last else 1.0)
                m.weight.copy_(rand(*m.weight.shape, scale=s))
                if m.bias is not None:
                    m.bias.copy_(rand(m.bias.numel(), scale=0.1))
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + rand(m.weight.numel(), scale=0.1))
                m.bias.copy_(rand(m.bias.numel(), scale=0.1))


class Transformer(Workload, name="transformer", family="transformer"):
    """A decoder-only transformer LM: tokens [B, T] -> per-token cross-entropy [B, T]."""

    params = {
        "layers": Param(2, low=1, high=4096, doc="transformer blocks"),
        "seq": Param(64, low=1, high=1_048_576, doc="tokens per sequence (T)"),
        "batch": Param(2, low=1, high=1_000_000, doc="sequences per step (B)"),
        "hidden": Param(64, low=1, high=65_536, doc="model width (D); divisible by heads"),
        "heads": Param(4, low=1, high=4096, doc="attention heads (H); head size D / H"),
        "vocab": Param(512, low=2, high=1_048_576, doc="vocabulary size (V): embedding and LM-head rows"),
        "dropout": Param(0.0, low=0.0, high=0.95, doc="dropout probability (embeddings, attention, residual branches)"),
    }
    samples_param = "batch"
    check_params = {"layers": 2, "seq": 12, "batch": 2, "hidden": 16, "heads": 2, "vocab": 37}
    # float64: the SDPA flash backend and the blocked/chunked Functions sum in other orders than
    # the eager reference (~1e-15 relative); 1e-10 leaves room for the softmax's exp.
    tolerances = {**DEFAULT_TOLERANCES, "float64": (1e-10, 1e-10)}

    def validate(self) -> None:
        c = self.config
        check_steps("hidden", c["hidden"], c["heads"],
                    rule=f"is not divisible by heads={c['heads']} (head size hidden/heads must be whole)")

    @classmethod
    def sweep_grid(cls, quick):
        """Quick (``make demo``): one point per technique, seq 64, where the knobs loop (``block`` 16: 4
        attention blocks; ``chunk`` 32: 4 loss chunks of the 128 tokens; each dropped for the techniques
        without it).  Full: seq 64..512, and batch, layers and vocab around seq 128."""
        tiny = {"layers": 2, "batch": 2, "hidden": 32, "heads": 4, "vocab": 256}
        if quick:
            return [{**tiny, "seq": 64, "block": 16, "chunk": 32}]
        grid = [{**tiny, "seq": s} for s in (64, 128, 256, 512)]
        grid += [{**tiny, "seq": 128, "batch": b} for b in (1, 4)]
        grid += [{**tiny, "seq": 128, "layers": n} for n in (1, 4)]
        grid += [{**tiny, "seq": 128, "vocab": v} for v in (2048, 8192)]
        return grid

    def inputs(self, device, dtype, gen: torch.Generator) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """``({"tokens", "targets"}, grad_output)`` drawn from ``gen``: ids [B, T] int64 and a seeded
        positive weight per token [B, T] summing to about 1, about :data:`HALF_PRECISION_LOSS_SCALE` in
        bfloat16 and float16 (NOTE [ 16-bit steps ]; what every technique of the family, a peer model
        included, is fed)."""
        c = self.config
        tokens = torch.randint(c["vocab"], (c["batch"], c["seq"]), generator=gen).to(device)
        targets = torch.randint(c["vocab"], (c["batch"], c["seq"]), generator=gen).to(device)
        n = c["batch"] * c["seq"]
        weights = seeded_randn(gen, c["batch"], c["seq"], device=device, dtype=torch.float64).abs_()
        scale = HALF_PRECISION_LOSS_SCALE if dtype in (torch.bfloat16, torch.float16) else 1
        return {"tokens": tokens, "targets": targets}, (weights / n * scale).to(dtype)

    def build(self, device, dtype, seed) -> Problem:
        c = self.config
        gen = torch.Generator().manual_seed(seed)
        inputs, grad_out = self.inputs(device, dtype, gen)
        model = TransformerLM(c, device, dtype, dropout_seed=seed)
        _seed_(model, gen, c["layers"], device, dtype)
        return Problem(model=model, inputs=inputs, grad_output=grad_out)

    def reference(self, problem):
        return problem.model(problem.inputs["tokens"], problem.inputs["targets"], EAGER)


class TransformerModel(AdvisorModel, family="transformer"):
    """The transformer family's advisor model (NOTE [ advisor models ] in :mod:`memlab.advisor.model`):
    sizes ``seq, batch, vocab, layers`` at width 64 (4 heads), dropout 0.

    ``layers`` is an outer loop (:class:`~memlab.core.loops.Repeated`, NOTE [ outer loops ] in
    :mod:`memlab.advisor.fit`): each layer one more body of forward, backward and the optimizer's
    updates; 1, 2 and 3 layers are exact classes, from 4 on the pieces are polynomials in ``layers``.
    Inside it, the knob an entry searches chunks its own rows (:class:`~memlab.core.loops.ChunksOf`):
    ``chunked_lm_loss``'s ``chunk`` splits the ``batch * seq`` tokens (the loss, after the layers),
    ``chunked_attention``'s ``block`` the ``seq`` queries of every layer's attention: causal, so block ``i``
    scores its rows against keys ``[0, (i + 1) * block)`` and its tensors grow with its index, a loop of
    growing bodies (NOTE [ growing loop bodies ] in :mod:`memlab.advisor.structure`; NOTE [ query-blocked
    attention ] in :mod:`memlab.families.transformer.attention` lists its allocations), inside the outer loop.

    Held fixed, and why: ``hidden`` and ``heads`` (a fixed width keeps every tensor a monomial of degree
    <= 3 in the sizes).  Left out: ``sdpa``/``sdpa_flash`` (the CPU flash kernel sizes its scratch by
    blocks it picks from ``seq``: no monomial, NOTE [ SDPA on this CPU build ]), ``autocast_bf16`` and
    ``offload_activations`` (CUDA only).
    """

    workload = Transformer
    sizes = ("seq", "batch", "vocab", "layers")
    workload_fixed = {"hidden": 64, "heads": 4, "dropout": 0.0}
    loop = Repeated("layers", ChunksOf({"chunk": "batch*seq", "block": "seq"}, k_max=24), k_max=12)
    entries = (Entry("eager_attention"), Entry("checkpoint_layer"), Entry("selective_checkpoint"),
               Entry("chunked_lm_loss", knobs=("chunk",)), Entry("chunked_attention", knobs=("block",)))
    # why each technique left out is left out, as the Choose page and ``memlab advise`` list it
    # (memlab.advisor.decision.declared_not_modelled reads this literal without importing the family)
    not_modelled = {
        "sdpa": "PyTorch picks the flash kernel here (dropout 0), whose backward scratch is sized by blocks the "
                "CPU kernel picks from seq: no monomial of the sizes (NOTE [ SDPA on this CPU build ])",
        "sdpa_flash": "the CPU flash kernel's backward scratch is sized by blocks it picks from seq: no monomial "
                      "of the sizes (NOTE [ SDPA on this CPU build ])",
        "sdpa_math": "no entry traced: the math backend keeps the probabilities [B, H, T, T] as the modelled "
                     "eager_attention does (NOTE [ SDPA on this CPU build ])",
        "autocast_bf16": "its step runs in another dtype (bfloat16) than the models' float32, and its CPU time "
                         "(bfloat16 slower than float32 on this CPU) says nothing of a GPU's",
        "offload_activations": "CUDA only (saved tensors pinned in host memory): no CPU trace to model",
    }
    held_out = {"seq": (2, 64), "batch": (1, 6), "vocab": (2, 96)}
    # the time model weighs the parts a technique repeats apart (NOTE [ work components ] in
    # memlab.advisor.fit): the layers' matmuls and element-wise work (~ layers * tokens at the fixed
    # width), the attention scores (~ layers * tokens * seq) and the LM head over the vocabulary
    # (~ tokens * vocab, once per step whatever the layer count).  The time sizes vary their ratios
    # (attention over layers ~ seq, head over layers ~ vocab / layers) and the tokens (the fixed
    # cost); every tensor stays under 32 MiB (no block glibc maps afresh: logits 4 * batch * seq *
    # vocab bytes, scores 16 * batch * seq^2); the last two are at 6 and 24 layers (24: 4x the
    # largest traced count, a measured held-out point there)
    time_sizes = ({"seq": 128, "batch": 2, "vocab": 1024, "layers": 2}, {"seq": 256, "batch": 4, "vocab": 2048, "layers": 2},
                  {"seq": 64, "batch": 16, "vocab": 512, "layers": 2}, {"seq": 512, "batch": 1, "vocab": 512, "layers": 2},
                  {"seq": 64, "batch": 4, "vocab": 8192, "layers": 2}, {"seq": 384, "batch": 4, "vocab": 4096, "layers": 2},
                  {"seq": 32, "batch": 8, "vocab": 256, "layers": 2}, {"seq": 96, "batch": 8, "vocab": 3072, "layers": 2},
                  {"seq": 128, "batch": 4, "vocab": 2048, "layers": 6}, {"seq": 256, "batch": 4, "vocab": 2048, "layers": 24})
    work = {"layers": "layers*batch*seq", "attention": "layers*batch*seq*seq", "head": "batch*seq*vocab"}
    time_chunks = (1, 4, 16)
    # chunked_attention's query blocks run in every layer (its per-block cost repeats layers times) and
    # split the causal attention's work as W (k + 1) / (2k); chunked_lm_loss's chunks run once per
    # step, and one chunk holds the whole [tokens, vocab] logits as the plain loss does where k chunks
    # hold 1/k of them (NOTE [ per-chunk costs ] in memlab.advisor.fit)
    chunk_cost_scale = {"block": "layers"}
    chunk_split_work = {"block": ("attention",), "chunk": ("head",)}
    max_quantum = 1 << 12
    trace_values = (5, 7, 11, 13, 17, 19, 23)
