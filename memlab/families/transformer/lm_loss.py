"""The language-model loss: LM head (``h @ Wᵀ``) and per-token cross-entropy, plainly or in chunks.

Both functions map hidden states ``h`` [N, D], head weight ``W`` [V, D] and targets [N] (int64) to
the per-token loss [N]: ``logsumexp(h_i W ᵀ) - (h_i W ᵀ)[target_i]``.

* :func:`plain_lm_loss`: ``F.cross_entropy(h @ Wᵀ, targets, reduction="none")``.  The logits [N, V]
  exist in forward, and ``log_softmax`` saves its output [N, V] for backward; backward builds the
  logits' gradient [N, V] (and ``nll_loss``'s [N, V] input gradient): loss memory O(N·V).
* :func:`chunked_lm_loss`: one autograd Function over ``chunk`` tokens at a time (NOTE [ chunked LM
  loss ]); it never holds more than one chunk's logits [chunk, V] and saves only the per-token
  log-sum-exp [N] besides its inputs: loss memory O(chunk·V + N).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from memlab.functional.slice_accumulate import chunk_bounds

__all__ = ["plain_lm_loss", "chunked_lm_loss"]


def _check(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, api: str) -> None:
    if h.dim() != 2 or weight.dim() != 2 or h.shape[1] != weight.shape[1]:
        raise ValueError(f"{api}: h must be [N, D] and weight [V, D] with the same D; got h {tuple(h.shape)}, "
                         f"weight {tuple(weight.shape)}")
    if targets.shape != h.shape[:1] or targets.dtype != torch.int64:
        raise ValueError(f"{api}: targets must be int64 of shape [N] = {tuple(h.shape[:1])}; got "
                         f"{targets.dtype} {tuple(targets.shape)}")


def plain_lm_loss(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``F.cross_entropy(h @ Wᵀ, targets, reduction="none")``: [N, D], [V, D], [N] -> [N].

    Saved for backward: h and W (by the matmul), the log-probabilities [N, V] (``log_softmax``) and
    the targets (``nll_loss``).
    """
    _check(h, weight, targets, "plain_lm_loss")
    return F.cross_entropy(h @ weight.t(), targets, reduction="none")


# NOTE [ chunked LM loss ]
# Forward, under no_grad, per chunk [s, e) of tokens: logits = h[s:e] Wᵀ [rows, V], lse[s:e] =
# logsumexp(logits) computed in place in the logits' buffer (max, subtract, exp, sum, log: no second
# [rows, V]), loss[s:e] = lse - logits[target] (gathered first); the chunk's logits are dropped
# before the next.  Saved: h, W, targets (inputs, already alive) and lse [N].  Backward, per chunk: recompute the
# logits, turn them in place into softmax = exp(logits - lse), subtract 1 at the target, scale each
# row by the upstream gradient g[s:e]: that is d loss / d logits [rows, V]; then grad_h[s:e] =
# that @ W (rows written into one [N, D] buffer) and grad_W += thatᵀ @ h[s:e] (one [V, D]
# accumulator).  Live beyond the inputs and the two gradients: one chunk's [rows, V] and its
# matmul outputs.  One more logits matmul per chunk than the plain loss (the recomputation).

@dataclass(frozen=True)
class _ChunkSpec:
    """Settings of one :func:`chunked_lm_loss` call."""

    chunk: int


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, targets, spec: _ChunkSpec):
        n = h.shape[0]
        loss = h.new_empty(n)
        lse = h.new_empty(n)
        for s, e in chunk_bounds(n, spec.chunk):
            logits = h[s:e] @ weight.t()  # [rows, V]
            picked = logits.gather(1, targets[s:e, None]).squeeze(1)  # [rows]
            top = logits.amax(dim=1)  # [rows]
            # log-sum-exp in place (torch.logsumexp would hold a second [rows, V] for its exp)
            lse[s:e] = logits.sub_(top[:, None]).exp_().sum(dim=1).log_().add_(top)
            loss[s:e] = lse[s:e] - picked
            del logits, picked, top
        ctx.save_for_backward(h, weight, targets, lse)
        ctx.spec = spec
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        h, weight, targets, lse = ctx.saved_tensors
        spec: _ChunkSpec = ctx.spec
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(h) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        for s, e in chunk_bounds(h.shape[0], spec.chunk):
            d = (h[s:e] @ weight.t()).sub_(lse[s:e, None]).exp_()  # softmax [rows, V]
            d.scatter_add_(1, targets[s:e, None], d.new_full((e - s, 1), -1.0))
            d.mul_(grad_loss[s:e, None])  # d loss / d logits
            if need_h:
                grad_h[s:e] = d @ weight
            if need_w:
                grad_w.addmm_(d.t(), h[s:e])
            del d
        return grad_h, grad_w, None, None


def chunked_lm_loss(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, chunk: int) -> torch.Tensor:
    """Per-token cross-entropy of the LM head, ``chunk`` tokens at a time (NOTE [ chunked LM loss ]).

    Never holds the full [N, V] logits: forward and backward keep one [chunk, V] block at a time,
    and autograd keeps only the per-token log-sum-exp [N] besides h, W and the targets.

    Args:
        h: [N, D] hidden states.
        weight: [V, D] the LM head (no bias).
        targets: [N] int64 token ids in [0, V).
        chunk: tokens per chunk (the last may be shorter), at least 1.

    Returns:
        [N] per-token loss, equal to :func:`plain_lm_loss` up to rounding.

    Example:
        >>> h, w = torch.randn(10, 8), torch.randn(50, 8)
        >>> chunked_lm_loss(h, w, torch.randint(50, (10,)), chunk=4).shape  # [N]
        torch.Size([10])
    """
    _check(h, weight, targets, "chunked_lm_loss")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunked_lm_loss: chunk={chunk!r} must be a positive integer (tokens per chunk)")
    return _ChunkedLinearCrossEntropy.apply(h, weight, targets, _ChunkSpec(chunk))
