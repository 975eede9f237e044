"""Tensor-train (TT) matrices: shapes, factorized contraction, reconstruction, TT-SVD, analytic sizes.

A TT matrix maps ``in_features = prod(in_modes)`` to ``out_features = prod(out_modes)`` with ``k``
cores; core ``i`` has shape ``[r_{i-1}, n_i, m_i, r_i]`` (``n`` input modes, ``m`` output modes,
ranks ``r_0 = r_k = 1``).  The matrix ``W`` [in_features, out_features] (``y = x @ W``) is::

    W[(i_1..i_k), (j_1..j_k)] = G_1[:, i_1, j_1, :] @ G_2[:, i_2, j_2, :] @ ... @ G_k[:, i_k, j_k, :]

with row-major multi-indices (``i_1`` slowest).  Note the convention: ``W`` is [in, out], the
transpose of ``nn.Linear.weight``.

# NOTE [ TT factorized activations ]
:func:`tt_contract` contracts a batch ``x`` [B, in] with the cores one at a time.  Every step's
input is saved by autograd (it is needed for the core's gradient), so after the forward the step
holds, besides the output, one intermediate per core boundary::

    T_i  [B, m_1..m_i, r_i, n_{i+1}..n_k]      i = 1..k-1

i.e. ``B * sum_{i=1}^{k} prod(m_1..m_i) * r_i * prod(n_{i+1}..n_k)`` elements counting the output
(``r_k = 1``).  For three equal cores (modes ``d``, rank ``r``) that is ``B d^3 (2r + 1)``: the
activation footprint of the tt-layer report.  The implementation keeps exactly that: the first core
is applied with a ``bmm`` against ``x`` viewed as [B, n_1, rest] (no copy of ``x``); every later
step permutes its input so that ``(r_{i-1}, n_i)`` is last, which makes ONE contiguous copy that
the ``mm`` saves (the un-permuted tensor is freed, nothing saves it); the cores are used as views.
No core copy is saved, so the activation bytes are exactly the formula times the element size.
Cost of that choice: ``torch.matmul(g1t, x3)`` would fold ``x`` into one GEMM but copies ``x`` and
saves the copy (``B * in`` more elements, measured); the ``bmm`` against a stride-0 batch instead
runs one small GEMM per row on CPU, which is slow for tiny chunks when the cores are oversubscribed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = [
    "TTShape", "tt_contract", "tt_reconstruct", "tt_svd", "tt_linear_reconstructed", "tt_shape_of",
]


def _check_modes(name: str, modes: Sequence[int]) -> tuple[int, ...]:
    if isinstance(modes, (str, bytes)) or not hasattr(modes, "__iter__"):
        raise TypeError(f"{name} must be a sequence of positive ints, got {modes!r}")
    modes = tuple(modes)
    if not modes:
        raise ValueError(f"{name}=() is not valid: expected at least one mode (a positive int)")
    for m in modes:
        if isinstance(m, bool) or not isinstance(m, int):
            raise TypeError(f"{name}={modes!r} is not valid: every mode must be an int, got {m!r}")
        if m < 1:
            raise ValueError(f"{name}={modes!r} is not valid: every mode must be a positive int (>= 1), got {m}")
    return modes


@dataclass(frozen=True)
class TTShape:
    """Shape of a TT matrix: modes and the full rank tuple ``(1, r_1, ..., r_{k-1}, 1)``.

    Build it with :meth:`create`, which validates; the analytic formulas below are element counts
    (multiply by the element size for bytes).
    """

    in_modes: tuple[int, ...]
    out_modes: tuple[int, ...]
    ranks: tuple[int, ...]

    @classmethod
    def create(cls, in_modes: Sequence[int], out_modes: Sequence[int],
               rank: int | Sequence[int]) -> "TTShape":
        """Validate and normalise.

        Args:
            in_modes, out_modes: positive ints, equally many (one pair per core).
            rank: one TT rank >= 1 for every inner boundary, or ``k - 1`` ranks.

        Raises:
            ValueError: a non-positive mode, different numbers of in and out modes, a rank < 1 or
                the wrong number of ranks.
            TypeError: non-integer modes or ranks.
        """
        in_modes = _check_modes("in_modes", in_modes)
        out_modes = _check_modes("out_modes", out_modes)
        if len(in_modes) != len(out_modes):
            raise ValueError(
                f"in_modes={in_modes!r} and out_modes={out_modes!r} must have the same length "
                f"(one input and one output mode per core); got {len(in_modes)} and {len(out_modes)}"
            )
        k = len(in_modes)
        if isinstance(rank, bool):
            raise TypeError(f"rank must be an int >= 1 or a sequence of {k - 1} ints, got {rank!r}")
        if isinstance(rank, int):
            inner = (rank,) * (k - 1)
            if rank < 1:
                raise ValueError(f"rank={rank} is not valid: a TT rank must be an int >= 1")
        else:
            inner = tuple(rank)
            if len(inner) != k - 1:
                raise ValueError(f"rank={rank!r} is not valid: {k} cores need {k - 1} inner ranks (or one int)")
            for r in inner:
                if isinstance(r, bool) or not isinstance(r, int):
                    raise TypeError(f"rank={rank!r} is not valid: every rank must be an int, got {r!r}")
                if r < 1:
                    raise ValueError(f"rank={rank!r} is not valid: every TT rank must be >= 1, got {r}")
        return cls(in_modes, out_modes, (1, *inner, 1))

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def n_cores(self) -> int:
        return len(self.in_modes)

    @property
    def in_features(self) -> int:
        return math.prod(self.in_modes)

    @property
    def out_features(self) -> int:
        return math.prod(self.out_modes)

    @property
    def core_shapes(self) -> tuple[tuple[int, int, int, int], ...]:
        """``(r_{i-1}, n_i, m_i, r_i)`` per core."""
        r = self.ranks
        return tuple((r[i], n, m, r[i + 1]) for i, (n, m) in enumerate(zip(self.in_modes, self.out_modes)))

    def param_count(self) -> int:
        """Elements of all cores: ``sum_i r_{i-1} n_i m_i r_i`` (``d^2 (r^2 + 2r)`` for 3 equal cores)."""
        return sum(math.prod(s) for s in self.core_shapes)

    def dense_param_count(self) -> int:
        """Elements of the dense weight: ``in_features * out_features`` (``d^6`` for 3 cores of d)."""
        return self.in_features * self.out_features

    def factorized_activation_elements(self, batch: int) -> int:
        """Elements :func:`tt_contract` keeps after its forward, output included.

        ``batch * sum_{i=1}^{k} prod(m_1..m_i) * r_i * prod(n_{i+1}..n_k)`` (``r_k = 1``; the
        ``i = k`` term is the output).  ``B d^3 (2r + 1)`` for three equal cores.  See
        NOTE [ TT factorized activations ].
        """
        return sum(self.intermediate_elements(batch))

    def intermediate_elements(self, batch: int) -> tuple[int, ...]:
        """Elements of ``T_1 .. T_k`` (``T_k`` is the output), see NOTE [ TT factorized activations ]."""
        return tuple(batch * math.prod(self.out_modes[:i]) * self.ranks[i] * math.prod(self.in_modes[i:])
                     for i in range(1, self.n_cores + 1))

    def factorized_inference_elements(self, batch: int) -> int:
        """Peak elements of :func:`tt_contract` under ``no_grad`` (above ``x`` and the cores).

        Step ``i + 1`` holds ``T_i`` and its permuted copy, then the copy and ``T_{i+1}``, so the
        peak is ``max_i(2 |T_i|, |T_i| + |T_{i+1}|)`` over ``i = 1..k-1`` (``|T_1|`` alone for one
        core): ``2 B d^3 r`` for three equal cores against the dense ``B d^3``.
        """
        t = self.intermediate_elements(batch)
        if len(t) == 1:
            return t[0]
        return max(max(2 * t[i], t[i] + t[i + 1]) for i in range(len(t) - 1))

    def reconstructed_elements(self, batch: int) -> int:
        """Elements of the reconstructed path beyond the cores: the dense-size weight
        ``in * out`` plus the dense activations (the output ``batch * out``)."""
        return self.dense_param_count() + batch * self.out_features

    def compression(self) -> float:
        """Dense parameters / TT parameters."""
        return self.dense_param_count() / self.param_count()


def tt_shape_of(cores: Sequence[torch.Tensor]) -> TTShape:
    """The :class:`TTShape` of a list of cores, checking that they chain.

    Raises:
        ValueError: no cores, a core that is not 4-D, mismatched neighbouring ranks, or end ranks != 1.
    """
    cores = list(cores)
    if not cores:
        raise ValueError("a TT matrix needs at least one core; got an empty list")
    for i, c in enumerate(cores):
        if c.dim() != 4:
            raise ValueError(f"TT core {i} must be 4-D [r_prev, n, m, r_next]; got shape {tuple(c.shape)}")
    for i in range(len(cores) - 1):
        if cores[i].shape[3] != cores[i + 1].shape[0]:
            raise ValueError(
                f"TT cores {i} and {i + 1} do not chain: rank {cores[i].shape[3]} vs {cores[i + 1].shape[0]}"
            )
    if cores[0].shape[0] != 1 or cores[-1].shape[3] != 1:
        raise ValueError(
            f"the first core must start and the last end with rank 1; got {cores[0].shape[0]} and {cores[-1].shape[3]}"
        )
    return TTShape(tuple(c.shape[1] for c in cores), tuple(c.shape[2] for c in cores),
                   (1, *(c.shape[3] for c in cores[:-1]), 1))


def _check_input(x: torch.Tensor, shape: TTShape) -> None:
    if x.dim() != 2 or x.shape[1] != shape.in_features:
        raise ValueError(
            f"x must be [batch, in_features={shape.in_features}] (in_modes={shape.in_modes}); "
            f"got shape {tuple(x.shape)}"
        )


def tt_contract(x: torch.Tensor, cores: Sequence[torch.Tensor]) -> torch.Tensor:
    """``x @ W`` with ``W`` in TT format, contracting ``x`` with one core at a time (plain autograd).

    Memory: keeps ``shape.factorized_activation_elements(B)`` elements after the forward (output
    included; ``B d^3 (2r + 1)`` for three equal cores), see NOTE [ TT factorized activations ];
    during the forward one extra intermediate exists transiently (the copy of the step input).

    Args:
        x: [B, in_features].
        cores: ``k`` tensors ``[r_{i-1}, n_i, m_i, r_i]``.

    Returns:
        [B, out_features].
    """
    shape = tt_shape_of(cores)
    _check_input(x, shape)
    n, m, r = shape.in_modes, shape.out_modes, shape.ranks
    b = x.shape[0]
    if shape.n_cores == 1:
        return torch.mm(x, cores[0].reshape(n[0], m[0]))
    # core 1 from the left, batched over B: [m1 r1, n1] @ [n1, rest] -> [B, m1 r1, rest]; x not copied
    g1t = cores[0].reshape(n[0], m[0] * r[1]).t()
    t = torch.bmm(g1t.expand(b, -1, -1), x.reshape(b, n[0], -1))
    t = t.view(b, m[0], r[1], *n[1:])  # [B, m1, r1, n2..nk]
    for i in range(1, shape.n_cores):
        # t: [B, m_1..m_i, r_i, n_{i+1}, n_{i+2}..n_k] -> (r_i, n_{i+1}) last, ONE contiguous copy
        a = 1 + i
        rest = list(range(a + 2, t.dim()))
        lhs = t.permute(*range(a), *rest, a, a + 1).reshape(-1, r[i] * n[i])
        del t
        out = torch.mm(lhs, cores[i].reshape(r[i] * n[i], m[i] * r[i + 1]))
        del lhs
        # out: [B, m_1..m_i, n_{i+2}..n_k, m_{i+1}, r_{i+1}] -> logical [B, m_1..m_{i+1}, r_{i+1}, n_{i+2}..]
        out = out.view(b, *m[:i], *n[i + 1:], m[i], r[i + 1])
        nm, nr = 1 + i, len(n) - i - 1
        t = out.permute(*range(nm), nm + nr, nm + nr + 1, *range(nm, nm + nr))
        del out
    return t.reshape(b, shape.out_features)


def _chain(cores: Sequence[torch.Tensor]) -> torch.Tensor:
    """Partial product ``A`` [(n_1..n_j), (m_1..m_j), r_j] of cores ``1..j`` (``r_0 = 1``)."""
    a = cores[0].reshape(cores[0].shape[1], cores[0].shape[2], cores[0].shape[3])
    for c in cores[1:]:
        rp, n, m, rn = c.shape
        pn, pm = a.shape[0], a.shape[1]
        prod = torch.mm(a.reshape(pn * pm, rp), c.reshape(rp, n * m * rn))  # [pn, pm, n, m, rn]
        a = prod.view(pn, pm, n, m, rn).permute(0, 2, 1, 3, 4).reshape(pn * n, pm * m, rn)
    return a


def tt_reconstruct(cores: Sequence[torch.Tensor]) -> torch.Tensor:
    """The full matrix ``W`` [in_features, out_features] of a TT matrix (plain autograd).

    Contracts the cores left to right into ``A`` [(n_1..n_i), (m_1..m_i), r_i]; the largest
    temporary is ``W`` itself plus its un-interleaved copy (2 x in x out elements, transient).
    """
    shape = tt_shape_of(cores)
    return _chain(cores).reshape(shape.in_features, shape.out_features)


def tt_svd(matrix: torch.Tensor, in_modes: Sequence[int], out_modes: Sequence[int],
           rank: int | Sequence[int]) -> list[torch.Tensor]:
    """TT cores approximating ``matrix`` [in_features, out_features] by sequential truncated SVDs.

    The matrix is reshaped to ``[n_1, m_1, n_2, m_2, ..., n_k, m_k]`` and split core by core
    (Oseledets' TT-SVD).  Rank ``i`` is ``min(requested r_i, r_{i-1} n_i m_i, remaining size)``: a
    larger rank than the matrix can use is capped (the returned cores show the ranks used; see
    :func:`tt_shape_of`).  Exact when the requested ranks reach the matrix's TT ranks.  Computed in
    float64, returned in ``matrix``'s dtype and device, detached.

    Raises:
        ValueError: bad modes or ranks (see :meth:`TTShape.create`) or a matrix whose shape is not
            ``[prod(in_modes), prod(out_modes)]``.
    """
    shape = TTShape.create(in_modes, out_modes, rank)
    want = (shape.in_features, shape.out_features)
    if matrix.dim() != 2 or tuple(matrix.shape) != want:
        raise ValueError(
            f"tt_svd: matrix shape {tuple(matrix.shape)} does not match in_modes={shape.in_modes} "
            f"(product {want[0]}) and out_modes={shape.out_modes} (product {want[1]}); expected {want}"
        )
    k = shape.n_cores
    n, m = shape.in_modes, shape.out_modes
    t = matrix.detach().to(torch.float64).reshape(*n, *m)
    t = t.permute(*[p for i in range(k) for p in (i, k + i)])  # [n1, m1, n2, m2, ...]
    cores = []
    r_prev = 1
    rest = t.reshape(-1)
    for i in range(k - 1):
        mat = rest.reshape(r_prev * n[i] * m[i], -1)
        u, s, vh = torch.linalg.svd(mat, full_matrices=False)
        r_i = min(shape.ranks[i + 1], s.shape[0])
        cores.append(u[:, :r_i].reshape(r_prev, n[i], m[i], r_i))
        rest = s[:r_i, None] * vh[:r_i]
        r_prev = r_i
    cores.append(rest.reshape(r_prev, n[-1], m[-1], 1))
    return [c.to(dtype=matrix.dtype, device=matrix.device).contiguous() for c in cores]


# -- reconstructed path with a weight-sized-once backward ------------------------------------------
# NOTE [ TT reconstructed backward ]
# Plain autograd on ``x @ tt_reconstruct(cores)`` saves W for grad_x and then, in MmBackward, holds
# W, grad_x and grad_W together: one weight more than a dense layer (whose W is a parameter, not
# an activation).  :func:`tt_linear_reconstructed` instead saves only ``x`` and the cores (both
# already resident), rebuilds W in backward for grad_x, frees it, and only then forms grad_W; the
# cores' gradients are pulled from grad_W through the last core by small bmm's over slices of
# grad_W (so no second weight-sized tensor) and through the rest of the chain by autograd on the
# small partial product ``A`` [(n_1..n_{k-1}), (m_1..m_{k-1}), r_{k-1}].


class _ReconstructedLinear(torch.autograd.Function):
    """Private: y = x @ tt_reconstruct(cores); saves x and cores only."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, *cores: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, *cores)
        w = tt_reconstruct(cores)
        return torch.mm(x, w)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y: torch.Tensor):
        x, *cores = ctx.saved_tensors
        need_x = ctx.needs_input_grad[0]
        need_c = ctx.needs_input_grad[1:]
        grad_x = None
        if need_x:
            w = tt_reconstruct(cores)
            grad_x = torch.mm(grad_y, w.t())
            del w
        if not any(need_c):
            return (grad_x, *(None for _ in cores))
        grad_w = torch.mm(x.t(), grad_y)  # [in, out]
        grads = _reconstruct_vjp(cores, grad_w, need_c)
        return (grad_x, *grads)


def _reconstruct_vjp(cores, grad_w, need):
    """Gradients of ``tt_reconstruct(cores)`` w.r.t. the cores given ``grad_w`` [in, out]."""
    shape = tt_shape_of(cores)
    if shape.n_cores == 1:
        return [grad_w.reshape(cores[0].shape)]
    last = cores[-1]
    rp, nk, mk, _ = last.shape
    pn, pm = shape.in_features // nk, shape.out_features // mk
    with torch.enable_grad():
        head = [c.detach().requires_grad_(bool(nd)) for c, nd in zip(cores[:-1], need[:-1])]
        a = _chain(head)  # [N', M', r]: W[(N', n_k), (M', m_k)] = sum_r a[N', M', r] G_k[r, n_k, m_k]
        gw = grad_w.view(pn, nk, pm, mk)
        g_a = torch.zeros_like(a)
        g_last = torch.zeros_like(last) if need[-1] else None
        ad = a.detach()
        for j in range(nk):
            gj = gw[:, j]  # [N', M', m_k] strided, no copy
            gk = last[:, j, :, 0]  # [r, m_k]
            # grad_A[N', M', r] += gj[N', M', m_k] @ gk.T[m_k, r]
            g_a.baddbmm_(gj, gk.t().expand(pn, -1, -1))
            if g_last is not None:
                # grad_Gk[r, j, m_k] = sum_N' A[N']^T [r, M'] @ gj[N'] [M', m_k]
                g_last[:, j, :, 0] += torch.bmm(ad.transpose(1, 2), gj).sum(0)
        del gw
        inputs = [h for h in head if h.requires_grad]
        got = iter(torch.autograd.grad(a, inputs, g_a) if inputs else ())
    out = [next(got) if h.requires_grad else None for h in head]
    return out + [g_last]


def tt_linear_reconstructed(x: torch.Tensor, cores: Sequence[torch.Tensor]) -> torch.Tensor:
    """``x @ W`` with ``W = tt_reconstruct(cores)`` formed in full, then one matmul.

    Memory/compute trade-off: the forward builds the dense-size weight, multiplies and frees it;
    only ``x`` and the cores are saved.  The backward rebuilds ``W`` (one extra reconstruction,
    ``~2 in out r`` FLOPs), computes ``grad_x = grad_y @ W.T``, frees ``W``, then forms ``grad_W =
    x.T @ grad_y`` and pulls the cores' gradients out of it without a second weight-sized tensor.
    So at most ONE weight-sized tensor is live at a time, as in a dense layer (whose weight gradient
    is weight-sized).  See NOTE [ TT reconstructed backward ].

    Args:
        x: [B, in_features].
        cores: ``[r_{i-1}, n_i, m_i, r_i]`` each.

    Returns:
        [B, out_features].
    """
    shape = tt_shape_of(cores)
    _check_input(x, shape)
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in (x, *cores)):
        with torch.no_grad():
            return torch.mm(x, tt_reconstruct(cores))
    return _ReconstructedLinear.apply(x, *cores)
