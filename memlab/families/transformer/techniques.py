"""Transformer family: attention kernels, checkpoint policies and the LM-head loss.

Every technique computes :class:`~memlab.families.transformer.workload.Transformer` (the per-token loss of a
decoder-only LM) with the same weights; they differ in *how* (a
:class:`~memlab.families.transformer.workload.Path`) and so in what autograd keeps for backward:

* ``eager_attention`` (baseline): scores, probabilities and dropout materialised, O(T²) per layer.
* ``sdpa``, ``sdpa_math``, ``sdpa_flash``: ``F.scaled_dot_product_attention`` with PyTorch's choice
  of backend (recorded in ``extra["sdpa_backend"]``) or one forced backend; this CPU build has
  ``math`` (O(T²): the eager graph) and ``flash`` (O(T): output and log-sum-exp only).
* ``chunked_attention``: queries ``block`` rows at a time (:func:`~memlab.families.transformer.attention.
  chunked_attention`), O(block·T).
* ``checkpoint_layer``: ``torch.utils.checkpoint`` per block (``use_reentrant=False``): each block's
  input [B, T, D] kept, one block's graph at a time in backward.
* ``selective_checkpoint``: the selective-checkpoint API with :func:`save_matmuls` (the linear layers'
  GEMM outputs saved; attention core, softmax, LayerNorm, GELU and dropout recomputed).
* ``chunked_lm_loss``: the LM head and cross-entropy over ``chunk`` tokens at a time, never the full
  [B·T, V] logits (:func:`~memlab.families.transformer.lm_loss.chunked_lm_loss`).
* ``autocast_bf16``: the step under ``torch.autocast(dtype=bfloat16)``.
* ``offload_activations``: ``torch.autograd.graph.save_on_cpu`` (CUDA only).

``describe`` states what each path keeps at the end of forward, per block and in the head, and the
loss head's peak (:mod:`.transformer_bytes`, equal to the exact CPU trace to the byte); the measured
activation peak is ``extra["activation_peak_bytes"]`` (``reports_activation_peak``).

# NOTE [ SDPA on this CPU build ]
torch 2.13.0+cpu has two SDPA backends: ``math`` (the eager graph, probabilities [B, H, T, T] kept)
and ``flash`` (``_scaled_dot_product_flash_attention_for_cpu``: output and float32 log-sum-exp kept);
``efficient`` and ``cudnn`` raise "No viable backend" here (CUDA only: not registered as techniques).
PyTorch picks ``flash`` at dropout 0 and ``math`` at dropout > 0 (the CPU flash kernel takes no
dropout), recorded in ``extra["sdpa_backend"]``.  What flash keeps is linear in T, but its
backward's scratch is sized by query/key blocks that the kernel picks from T, so its activation peak
steps up where the block size changes (measured: x2.42 from seq 128 to 256, x2.00 from 256 to 512,
x3.16 from 512 to 1024 at heads 8, head size 2, batch 1) and is linear between the steps: fitted over
seq 128-1024 its exponent is 1.28 (eager 1.98, chunked 1.00 on the same points).  Past the last step
(seq >= 768) a fixed block scratch (~2.1 MB at 2 threads) dominates and the increments are linear
(~750-820 bytes per token there): fitted over seq 768, 1536, 3072 the exponent is 0.38.  So on this
CPU build no seq span gives flash a fitted exponent of 1 ± 0.1 at this size; its memory is "linear plus
a block-sized constant", not the O(T²) of math/eager.  The buffer shows only where flash's backward is
the step's peak: at hidden 64 with head size 8 (the FlashAttention page, NOTE [ flash block buffer ] in
reproductions/dao_flash_attention.py) the peak is elsewhere and exactly linear, exponent 1.00
over seq 1024-4096.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from .attention import SdpaBackend, chunked_attention, sdpa_attention, sdpa_backend
from .lm_loss import chunked_lm_loss
from memlab.core.params import Param
from memlab.technique import Technique, TechniqueUnavailable
from .workload import EAGER, Path, Transformer
from .bytes import head_terms, layer_terms, loss_peak_bytes

__all__ = ["EagerAttention", "Sdpa", "SdpaMath", "SdpaFlash", "ChunkedAttention", "CheckpointLayer",
           "SelectiveCheckpoint", "ChunkedLMLoss", "AutocastBF16", "OffloadActivations", "save_matmuls"]


class _TransformerTechnique(Technique):
    """Shared by the family (not registered): the forward over a :class:`Path` and the facts."""

    workload = Transformer
    reports_activation_peak = True
    #: the attention kind :func:`~.transformer_bytes.layer_terms` describes
    attention_kind = "eager"
    #: the loss kind :func:`~.transformer_bytes.head_terms` and :func:`~.transformer_bytes.loss_peak_bytes` describe
    loss_kind = "plain"
    #: True: the attention draws its dropout masks differently from the eager reference
    #: (NOTE [ dropout and the reference check ])
    own_attention_dropout = False

    def path(self) -> Path:
        return EAGER

    def forward(self, problem):
        return problem.model(problem.inputs["tokens"], problem.inputs["targets"], self.path())

    def check_available(self, device):
        super().check_available(device)
        if self.own_attention_dropout and self.config["dropout"] > 0:
            raise TechniqueUnavailable(
                f"technique {self.name!r} at dropout={self.config['dropout']}: its attention draws its dropout "
                "masks differently from the eager reference, so its output cannot be checked; measure it at "
                "dropout=0 (NOTE [ dropout and the reference check ] in memlab/families/transformer/workload.py)")

    def facts(self, problem, kind: str | None = None) -> dict[str, Any]:
        """The path's analytic bytes (:mod:`.transformer_bytes`) for attention ``kind`` (default: the
        class's :attr:`attention_kind`) and what it ran."""
        c, w = self.config, problem.model.head.weight
        e, kind = w.element_size(), kind or self.attention_kind
        per_layer = layer_terms(c, e, kind, w.dtype) if self.modelled(w.dtype) else None
        head = head_terms(c, e, self.loss_kind) if self.modelled(w.dtype) else None
        return {
            "attention": kind, "loss": self.loss_kind, "tokens": c["batch"] * c["seq"],
            "expected_kept_bytes_per_layer": per_layer,
            "expected_forward_kept_bytes": (None if per_layer is None else
                                            c["layers"] * sum(per_layer.values()) + sum(head.values())),
            "expected_loss_peak_bytes": (loss_peak_bytes(c, e, self.loss_kind, c.get("chunk"))
                                         if self.modelled(w.dtype) else None),
        }

    def modelled(self, dtype: torch.dtype) -> bool:
        """Whether :mod:`.transformer_bytes` states this path's bytes in ``dtype``."""
        return True

    def describe(self, problem, mode="train"):
        return {"path": self.summary(), **self.facts(problem)}


class EagerAttention(_TransformerTechnique, name="eager_attention"):
    """The reference: eager attention ([B, H, T, T] scores, softmax, dropout kept), plain autograd."""

    baseline = True


class _Sdpa(_TransformerTechnique):
    backend = SdpaBackend.AUTO
    own_attention_dropout = True

    def path(self):
        return Path(attention=functools.partial(sdpa_attention, backend=self.backend))

    def picked(self, problem) -> str:
        """The backend that runs: the forced one, or PyTorch's choice for this problem's q."""
        if self.backend is not SdpaBackend.AUTO:
            return self.backend.value
        c = self.config
        probe = problem.model.head.weight.new_empty(c["batch"], c["heads"], c["seq"], c["hidden"] // c["heads"])
        return sdpa_backend(probe, c["dropout"])

    def describe(self, problem, mode="train"):
        picked = self.picked(problem)
        kind = {"flash": "flash", "math": "sdpa_math"}.get(picked)  # the CPU build's two; others not modelled
        facts = self.facts(problem, kind) if kind is not None else {"attention": picked}
        return {"path": self.summary(), "sdpa_backend": picked,
                "sdpa_backend_forced": self.backend is not SdpaBackend.AUTO, **facts}


class Sdpa(_Sdpa, name="sdpa"):
    """``F.scaled_dot_product_attention(is_causal=True)`` with PyTorch's choice of backend (recorded)."""

    twin = "sdpa_math"


class SdpaMath(_Sdpa, name="sdpa_math"):
    """SDPA forced to the ``math`` backend (``sdpa_kernel(SDPBackend.MATH)``): the eager graph, O(T²)."""

    accumulation_note = (
        "above eager attention with or without micro-batches: the math backend is the eager graph and saves "
        "a little more for backward (docs/evidence/accumulation.md)")

    backend = SdpaBackend.MATH


class SdpaFlash(_Sdpa, name="sdpa_flash"):
    """SDPA forced to the ``flash`` backend (``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``): O(T) saved."""

    backend = SdpaBackend.FLASH
    twin = "sdpa_math"


class ChunkedAttention(_TransformerTechnique, name="chunked_attention"):
    """Queries in blocks of ``block`` rows in one autograd Function: O(block·T) attention memory."""

    params = {"block": Param(16, low=1, high=1_048_576, doc="query rows per attention block (the last may be shorter)")}
    check_params = {"block": 5}  # does not divide the check's seq 12: a short last block
    attention_kind = "chunked"
    own_attention_dropout = True

    def path(self):
        block = self.config["block"]
        return Path(attention=lambda q, k, v, p: chunked_attention(q, k, v, block=block))

    def facts(self, problem):
        return {**super().facts(problem), "block": self.config["block"],
                "blocks_per_layer": -(-self.config["seq"] // self.config["block"])}


def _checkpointed(block, h, attention, *, context_fn=None):
    kw = {} if context_fn is None else {"context_fn": context_fn}
    return checkpoint(block, h, attention, use_reentrant=False, **kw)


class CheckpointLayer(_TransformerTechnique, name="checkpoint_layer"):
    """``torch.utils.checkpoint`` (``use_reentrant=False``) per block: keeps each block's input."""

    twin = "eager_attention"
    attention_kind = "checkpointed"

    def path(self):
        return Path(run_block=_checkpointed)


def save_matmuls(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    """Selective-checkpoint policy: save the outputs of the linear layers' GEMMs (``aten.mm``,
    ``aten.addmm``), recompute everything else: the attention core (``bmm`` of q kᵀ and of P v,
    masking, softmax, dropout), LayerNorm, GELU and the residual additions (Korthikanti et al.
    2022's "selective activation recomputation")."""
    if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


class SelectiveCheckpoint(_TransformerTechnique, name="selective_checkpoint"):
    """Selective checkpoint per block (``create_selective_checkpoint_contexts``): GEMM outputs saved,
    attention core and pointwise ops recomputed."""

    twin = "eager_attention"
    attention_kind = "selective"

    def path(self):
        ctx = functools.partial(create_selective_checkpoint_contexts, save_matmuls)
        return Path(run_block=functools.partial(_checkpointed, context_fn=ctx))


class ChunkedLMLoss(_TransformerTechnique, name="chunked_lm_loss"):
    """LM head + cross-entropy over ``chunk`` tokens at a time; saves only the per-token log-sum-exp."""

    params = {"chunk": Param(256, low=1, high=1 << 30, doc="tokens per loss chunk (the last may be shorter)")}
    check_params = {"chunk": 7}  # does not divide the check's 24 tokens
    loss_kind = "chunked"

    def path(self):
        chunk = self.config["chunk"]
        return Path(loss=lambda h, w, t: chunked_lm_loss(h, w, t, chunk=chunk))

    def facts(self, problem):
        n = self.config["batch"] * self.config["seq"]
        return {**super().facts(problem), "chunk": self.config["chunk"], "chunks": -(-n // self.config["chunk"])}


class AutocastBF16(_TransformerTechnique, name="autocast_bf16"):
    """The step under ``torch.autocast(dtype=torch.bfloat16)``: matmuls in bfloat16.

    Autocast leaves float64 tensors alone, so the float64 check verifies the wiring only; its
    bfloat16 drift is what a float32 measurement reports (``drift_max_abs_error``), held to the
    float32 tolerance below (bfloat16 has 8 bits of mantissa).
    """

    changes_dtype = True
    tolerances = {"float32": (5e-2, 5e-2)}

    def modelled(self, dtype):
        return dtype == torch.float64  # autocast leaves float64 alone; its bfloat16 copies are not modelled

    def forward(self, problem):
        with torch.autocast(problem.inputs["tokens"].device.type, dtype=torch.bfloat16):
            return super().forward(problem)


class OffloadActivations(_TransformerTechnique, name="offload_activations"):
    """``torch.autograd.graph.save_on_cpu(pin_memory=True)``: every tensor autograd saves for backward is
    copied to pinned host memory in forward and copied back to the device when its backward node runs
    (CUDA only; on a CPU build nothing is pinned).  The device keeps the step's other tensors; what a GPU
    would hold is predicted from a CPU trace through the offload markers (NOTE [ device tags ] in
    :mod:`memlab.measurement.host_tags`; tests/test_transformer.py)."""

    devices = ("cuda",)

    def modelled(self, dtype):
        return False  # its saved tensors are host memory; transformer_bytes states what stays on the device otherwise

    def describe(self, problem, mode="train"):
        return {**super().describe(problem, mode), "saved_tensors_on": "host (pinned where CUDA runs)"}

    def forward(self, problem):
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            return super().forward(problem)
