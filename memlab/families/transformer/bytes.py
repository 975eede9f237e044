"""Analytic bytes of the transformer family: what each technique keeps for backward, and the loss peak.

All figures in bytes, for ``N = batch·seq`` tokens, ``D = hidden``, ``H = heads``, ``T = seq``,
``B = batch``, ``V = vocab`` and element size ``e`` (4 for float32).  Derived from the ops each path
runs and checked to the byte against the exact CPU allocation trace in float32 and float64
(tests/test_transformer.py); the bfloat16 differences are stated where a term is not modelled.

# NOTE [ what a block keeps ]
At the end of forward, plain autograd keeps per block (eager attention, dropout 0):
  17·N·D·e  the block input (LN1), LN1's output (the qkv GEMM), the heads-first q/k/v copy
            [3, B, H, T, d] (3: k and v are saved as views of it, NOTE [ heads-first copy ]), q·scale
            (q kᵀ), the attention output's [B, T, D] copy (proj), the mid-block residual (LN2), LN2's
            output (fc1), fc1's output (GELU, 4) and GELU's output (fc2, 4)
  4·N·e     the mean and reciprocal std of the two LayerNorms ([N] each, in the dtype)
  B·H·T²·e  softmax's output (saved by softmax and by ``@ v``)
  T²        the bool causal mask (``masked_fill``)
  8         ``q * (1/sqrt(d))``: autograd saves the Python scale as a 0-dim float64 tensor
with dropout p > 0 (CPU: ``F.dropout`` keeps its noise in the dtype, CUDA would keep a bool mask):
  + 2·B·H·T²·e  the attention-dropout noise and the dropped probabilities (``@ v`` saves those)
  + 2·N·D·e     the noise of the two residual-branch dropouts
SDPA ``math``: 18·N·D·e (q and k each scaled by sqrt(scale): two copies, v a view) + 4·N·e + B·H·T²·e,
no mask (float32/float64; in bfloat16 the CPU math backend computes in float32: not modelled).
SDPA ``flash`` and ``chunked``: 17·N·D·e (q, k, v as views, the kernel's output [B, H, T, d] and its
[B, T, D] copy) + 4·N·e + the per-row log-sum-exp B·H·T (flash: float32 for 16-bit inputs, else the
dtype; chunked: the dtype).  No T² term.
``checkpointed`` (torch.utils.checkpoint per block): the block input N·D·e, the CPU RNG state the
checkpoint stashes (``torch.get_rng_state()``, 5,056 bytes) and 8 bytes more (measured).
``selective``: the block input, the four GEMM outputs (qkv 3, proj 1, fc1 4, fc2 1 N·D·e): 10·N·D·e,
plus the RNG state and 8 bytes as ``checkpointed``.

# NOTE [ loss peak ]
The loss head alone (``h`` [N, D] -> per-token loss [N], forward and backward, inputs and final
gradients excluded, the output kept through backward):
  plain:   3·N·V·e + N·e: log_softmax's output (saved), ``nll_loss``'s input gradient and the
           log-softmax gradient, all [N, V], live together in backward, plus the loss [N].
  chunked: c·V·e + c·D·e + 2·N·e with c = min(chunk, N): one chunk's [c, V] (recomputed logits
           turned into their gradient in place), its [c, D] input-gradient rows, the loss and the
           saved log-sum-exp [N] (float32/float64; bfloat16 CPU GEMMs add scratch: not modelled).
"""
from __future__ import annotations

from typing import Mapping

import torch

from memlab.measurement.alloc_trace import trace_allocations

__all__ = ["ATTENTION_KINDS", "LOSS_KINDS", "layer_terms", "head_terms", "loss_peak_bytes", "measured_loss_peak",
           "rng_state_bytes"]

ATTENTION_KINDS = ("eager", "sdpa_math", "flash", "chunked", "checkpointed", "selective")
LOSS_KINDS = ("plain", "chunked")
_SCALE_BYTES = 8  # a Python float saved by mul as a 0-dim float64 tensor
_CHECKPOINT_EXTRA_BYTES = 8  # measured per checkpointed block beyond its input and the RNG state


def rng_state_bytes() -> int:
    """Bytes of the CPU generator's state that ``torch.utils.checkpoint`` stashes per block."""
    return torch.get_rng_state().numel()


def _sizes(c: Mapping[str, int], e: int) -> dict[str, int]:
    n = c["batch"] * c["seq"]
    return {"N": n, "NDe": n * c["hidden"] * e, "Ne": n * e, "scores": c["batch"] * c["heads"] * c["seq"] ** 2 * e,
            "rows": c["batch"] * c["heads"] * c["seq"]}


def layer_terms(c: Mapping, e: int, kind: str, dtype: torch.dtype) -> dict[str, int] | None:
    """Bytes one block keeps for backward at the end of forward, by term (NOTE [ what a block keeps ]).

    Returns None where the figure is not modelled (SDPA math in a 16-bit dtype).
    """
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"attention kind {kind!r} is not valid; valid kinds: {', '.join(ATTENTION_KINDS)}")
    s = _sizes(c, e)
    low = dtype in (torch.bfloat16, torch.float16)
    if kind == "checkpointed":
        return {"block_input": s["NDe"], "rng_state": rng_state_bytes(), "checkpoint_other": _CHECKPOINT_EXTRA_BYTES}
    if kind == "selective":
        return {"block_input": s["NDe"], "gemm_outputs": 9 * s["NDe"], "rng_state": rng_state_bytes(),
                "checkpoint_other": _CHECKPOINT_EXTRA_BYTES}
    if kind == "sdpa_math":
        if low:
            return None
        return {"tokens_x_hidden": 18 * s["NDe"], "layernorm_stats": 4 * s["Ne"], "probabilities": s["scores"]}
    terms = {"tokens_x_hidden": 17 * s["NDe"], "layernorm_stats": 4 * s["Ne"]}
    if kind == "eager":
        terms.update(probabilities=s["scores"], causal_mask=c["seq"] ** 2, scale=_SCALE_BYTES)
        if c["dropout"] > 0:
            terms.update(attention_dropout=2 * s["scores"], residual_dropout=2 * s["NDe"])
    elif kind == "flash":
        terms["logsumexp"] = s["rows"] * (4 if low else e)
    else:
        terms["logsumexp"] = s["rows"] * e
    return terms


def head_terms(c: Mapping, e: int, loss: str) -> dict[str, int]:
    """Bytes kept at the end of forward outside the blocks: the last block's output (LN_f's input),
    LN_f's statistics and output, what the loss keeps, the loss [N] itself."""
    if loss not in LOSS_KINDS:
        raise ValueError(f"loss kind {loss!r} is not valid; valid kinds: {', '.join(LOSS_KINDS)}")
    s = _sizes(c, e)
    terms = {"final_hidden": 2 * s["NDe"], "layernorm_stats": 2 * s["Ne"], "loss": s["Ne"]}
    if loss == "plain":
        terms.update(log_probabilities=s["N"] * c["vocab"] * e, nll_total_weight=e)
    else:
        terms.update(logsumexp=s["Ne"])
    if c["dropout"] > 0:
        terms["embedding_dropout"] = s["NDe"]
    return terms


def loss_peak_bytes(c: Mapping, e: int, loss: str, chunk: int | None = None) -> int:
    """The loss head's activation peak (NOTE [ loss peak ]), bytes; ``c`` needs batch, seq, hidden, vocab."""
    n = c["batch"] * c["seq"]
    if loss == "plain":
        return 3 * n * c["vocab"] * e + n * e
    if loss != "chunked" or chunk is None:
        raise ValueError(f"loss={loss!r} with chunk={chunk!r}: the chunked loss needs a chunk; valid kinds: "
                         f"{', '.join(LOSS_KINDS)}")
    rows = min(chunk, n)
    return rows * c["vocab"] * e + rows * c["hidden"] * e + 2 * n * e


def measured_loss_peak(fn, h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor, grad_out: torch.Tensor) -> int:
    """The loss head's activation peak, measured (the figure :func:`loss_peak_bytes` predicts), bytes.

    ``fn(h, w, targets)`` is the loss head (``h`` [N, D] leaf, ``w`` [V, D] leaf, ``targets`` [N]) and
    ``grad_out`` [N] its upstream gradient.  One warm-up step, then one step traced on the CPU: live
    bytes above the start, forward and backward, with the storages of the final gradients of ``h`` and
    ``w`` left out (NOTE [ loss peak ]).  Both gradients are cleared after.
    """
    def step():
        out = fn(h, w, targets)
        out.backward(grad_out)
        del out

    step()
    h.grad = w.grad = None
    events, _ = trace_allocations(step, torch.device("cpu"), 1)
    grads = {h.grad.untyped_storage().data_ptr(), w.grad.untyped_storage().data_ptr()}
    h.grad = w.grad = None
    last = set({e.address: i for i, e in enumerate(events) if e.delta_bytes > 0 and e.address in grads}.values())
    live = held = peak = 0
    for i, e in enumerate(events):
        live += e.delta_bytes
        held += e.delta_bytes if i in last else 0
        peak = max(peak, live - held)
    return peak
