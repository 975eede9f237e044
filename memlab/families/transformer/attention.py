"""Causal multi-head attention three ways: eager (scores materialised), query-blocked, and SDPA.

Every function takes ``q, k, v`` of shape [B, H, T, d] (batch, heads, sequence, head size) and
returns the attention output [B, H, T, d]: ``softmax(q kᵀ / sqrt(d) + causal mask) v``.

Memory per call (training, element size ``e`` bytes):

* :func:`eager_attention` materialises the scores, the probabilities and (with dropout) the dropped
  probabilities: autograd keeps the probabilities [B, H, T, T] (softmax's output), the dropout
  noise [B, H, T, T] (CPU: in the dtype; CUDA: a bool mask) and the dropped probabilities (saved by
  ``@ v``), plus the [T, T] bool causal mask (``masked_fill``): O(T²).
* :func:`chunked_attention` takes the queries ``block`` rows at a time inside one autograd Function
  (NOTE [ query-blocked attention ]): it keeps q, k, v, the output and one log-sum-exp per row
  [B, H, T]; forward and backward hold one block's scores [B, H, block, T] at a time: O(block·T).
* :func:`sdpa_attention` is ``F.scaled_dot_product_attention(..., is_causal=True)`` under a forced
  backend (or PyTorch's choice); what it keeps depends on the backend (:func:`sdpa_backend`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from memlab.functional.slice_accumulate import chunk_bounds

__all__ = ["eager_attention", "chunked_attention", "sdpa_attention", "sdpa_backend", "SdpaBackend"]


class SdpaBackend(Enum):
    """A backend of ``F.scaled_dot_product_attention``; ``AUTO`` lets PyTorch choose."""

    AUTO = "auto"
    MATH = "math"
    FLASH = "flash"
    EFFICIENT = "efficient"
    CUDNN = "cudnn"

    def torch_backend(self):
        """The ``torch.nn.attention.SDPBackend`` member (None for ``AUTO``)."""
        return None if self is SdpaBackend.AUTO else {
            SdpaBackend.MATH: SDPBackend.MATH, SdpaBackend.FLASH: SDPBackend.FLASH_ATTENTION,
            SdpaBackend.EFFICIENT: SDPBackend.EFFICIENT_ATTENTION, SdpaBackend.CUDNN: SDPBackend.CUDNN_ATTENTION,
        }[self]


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, api: str) -> None:
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"{api}: q, k, v must share one [B, H, T, d] shape; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")


def causal_mask(t: int, device: torch.device) -> torch.Tensor:
    """[T, T] bool, True above the diagonal (the keys a query may not see)."""
    return torch.ones(t, t, dtype=torch.bool, device=device).triu_(1)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """Causal attention with every [B, H, T, T] intermediate materialised (the reference).

    Saved for backward: q·scale and k (by ``q @ kᵀ``), the causal mask [T, T] bool, the
    probabilities [B, H, T, T], with dropout the noise [B, H, T, T], and the dropped probabilities
    with v (by ``@ v``).  Dropout draws from the global RNG (``F.dropout``).

    Example:
        >>> q = k = v = torch.randn(2, 4, 8, 16)       # [B, H, T, d]
        >>> eager_attention(q, k, v).shape            # [B, H, T, d]
        torch.Size([2, 4, 8, 16])
    """
    _check_qkv(q, k, v, "eager_attention")
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)  # [B, H, T, T]
    scores = scores.masked_fill(causal_mask(q.shape[-2], q.device), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p, training=True)
    return probs @ v


# NOTE [ query-blocked attention ]
# A query row's softmax needs its whole row of scores, but no other row's.  So the queries are taken
# `block` rows at a time: block [r0, r1) computes its scores against keys [0, r1) only (causal),
# [B, H, r1 - r0, r1], its softmax, its output rows, and the row's log-sum-exp `lse` [B, H, rows].
# Forward runs under no_grad and saves q, k, v, the output and lse (5 x [B, H, T, d]-sized tensors
# plus [B, H, T]).  Backward recomputes each block's probabilities from lse, P = exp(S - lse), then
# (FlashAttention's backward, Dao et al. 2022, per query block):
#   dV += Pᵀ dO,  dP = dO Vᵀ,  D = rowsum(dO ∘ O),  dS = P ∘ (dP - D),  dQ = dS K / sqrt(d),
#   dK += dSᵀ Q / sqrt(d)
# writing dQ's rows in place and accumulating dK, dV into one buffer each.  Peak beyond the saved
# tensors and the three gradients: one block's S/P and dP/dS, O(block·T).  No dropout: a dropout
# mask drawn per block would differ from the eager reference's draw (the techniques refuse it).
#
# The blocks are not one repeated loop body (the advisor reads them as a loop of growing bodies: NOTE [ growing
# loop bodies ] in memlab.advisor.structure): block i (0-based) has rows r = block and keys
# r1 = (i + 1)·block, the last block r = T - (k - 1)·block and r1 = T (k = ceil(T / block)).  Traced
# (float32, e = 4; B·H = 6, d = 5, T = 23, block 7: r1 = 7, 14, 21, 23), each forward block allocates the
# scores B·H·r·r1·e (``q kᵀ``), the int64 row and column indices 8·r and 8·r1, the bool mask r·r1,
# logsumexp's max and sum [B, H, r] (e each) and its shifted copy B·H·r·r1·e, and ``P v`` B·H·r·d·e;
# each backward block the probabilities and dP/dS, B·H·r·r1·e each, the mask and indices again,
# ``Pᵀ dO`` B·H·r1·d·e, ``dO ∘ O`` B·H·r·d·e with its row sums B·H·r·e, ``dS K`` B·H·r·d·e and
# ``dSᵀ Q`` B·H·r1·d·e.  So what a block holds grows linearly with its index, and the attention's
# peak is at the last full block (r·r1 = block·(k - 1)·block) or the last one (last·T), whichever is
# larger (tests/test_transformer.py).

@dataclass(frozen=True)
class _BlockSpec:
    """Settings of one :func:`chunked_attention` call (one argument to the autograd Function)."""

    block: int
    scale: float


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec: _BlockSpec):
        t = q.shape[-2]
        out = torch.empty_like(q)
        lse = q.new_empty(q.shape[:-1])
        for r0, r1 in chunk_bounds(t, spec.block):
            s = _block_scores(q, k, r0, r1, spec.scale)  # [B, H, rows, r1]
            lse[..., r0:r1] = torch.logsumexp(s, dim=-1)
            s.sub_(lse[..., r0:r1, None]).exp_()  # the probabilities, in place
            out[..., r0:r1, :] = s @ v[..., :r1, :]
            del s
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.spec = spec
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        spec: _BlockSpec = ctx.spec
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for r0, r1 in chunk_bounds(q.shape[-2], spec.block):
            p = _block_scores(q, k, r0, r1, spec.scale).sub_(lse[..., r0:r1, None]).exp_()  # [B, H, rows, r1]
            go = grad_out[..., r0:r1, :]
            dv[..., :r1, :] += p.transpose(-2, -1) @ go
            ds = go @ v[..., :r1, :].transpose(-2, -1)  # dP
            d = (go * out[..., r0:r1, :]).sum(-1, keepdim=True)  # [B, H, rows, 1]
            ds.sub_(d).mul_(p)
            del p
            dq[..., r0:r1, :] = (ds @ k[..., :r1, :]).mul_(spec.scale)
            dk[..., :r1, :] += (ds.transpose(-2, -1) @ q[..., r0:r1, :]).mul_(spec.scale)
            del ds
        return dq, dk, dv, None


def _block_scores(q, k, r0: int, r1: int, scale: float) -> torch.Tensor:
    """Scaled, causally masked scores of query rows [r0, r1) against keys [0, r1): [B, H, rows, r1]."""
    s = (q[..., r0:r1, :] @ k[..., :r1, :].transpose(-2, -1)).mul_(scale)
    rows = torch.arange(r0, r1, device=q.device)[:, None]
    cols = torch.arange(r1, device=q.device)[None, :]
    return s.masked_fill_(cols > rows, float("-inf"))


def chunked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, block: int) -> torch.Tensor:
    """Causal attention over query blocks of ``block`` rows (NOTE [ query-blocked attention ]).

    Saves q, k, v, the output [B, H, T, d] and the per-row log-sum-exp [B, H, T]; holds one
    block's scores [B, H, block, T] at a time in forward and backward: memory O(block·T), not O(T²).
    The backward recomputes each block's scores (one extra ``q kᵀ`` per block).

    Args:
        q, k, v: [B, H, T, d].
        block: query rows per block (the last may be shorter), at least 1.

    Returns:
        [B, H, T, d], equal to :func:`eager_attention` without dropout up to rounding.
    """
    _check_qkv(q, k, v, "chunked_attention")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"chunked_attention: block={block!r} must be a positive integer (query rows per block)")
    return _ChunkedAttention.apply(q, k, v, _BlockSpec(block, 1.0 / math.sqrt(q.shape[-1])))


def sdpa_backend(q: torch.Tensor, dropout_p: float = 0.0) -> str:
    """The backend ``F.scaled_dot_product_attention`` picks for causal attention on tensors like ``q``
    (``flash``, ``efficient``, ``math``, ``cudnn``), read from PyTorch's own choice function."""
    choice = SDPBackend(torch._fused_sdp_choice(q, q, q, None, dropout_p, True))
    return {SDPBackend.FLASH_ATTENTION: "flash", SDPBackend.EFFICIENT_ATTENTION: "efficient",
            SDPBackend.MATH: "math", SDPBackend.CUDNN_ATTENTION: "cudnn"}.get(choice, choice.name.lower())


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0, *,
                   backend: SdpaBackend = SdpaBackend.AUTO) -> torch.Tensor:
    """``F.scaled_dot_product_attention(q, k, v, dropout_p, is_causal=True)`` under ``backend``.

    A forced backend that cannot run these inputs raises PyTorch's RuntimeError ("No viable
    backend"): never a silent fall-back to another backend.
    """
    _check_qkv(q, k, v, "sdpa_attention")
    forced = backend.torch_backend()
    if forced is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)

    with sdpa_kernel(forced):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
