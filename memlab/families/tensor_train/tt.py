"""Tensor-train (TT) matrices: shapes, block contraction plans, reconstruction, TT-SVD, analytic sizes.

A TT matrix maps ``in_features = prod(in_modes)`` to ``out_features = prod(out_modes)`` with ``k``
cores; core ``i`` has shape ``[r_{i-1}, n_i, m_i, r_i]`` (``n`` input modes, ``m`` output modes,
ranks ``r_0 = r_k = 1``).  The matrix ``W`` [in_features, out_features] (``y = x @ W``) is::

    W[(i_1..i_k), (j_1..j_k)] = G_1[:, i_1, j_1, :] @ G_2[:, i_2, j_2, :] @ ... @ G_k[:, i_k, j_k, :]

with row-major multi-indices (``i_1`` slowest).  Note the convention: ``W`` is [in, out], the
transpose of ``nn.Linear.weight``.

# NOTE [ TT factorized activations ]
The tt-layer report's accounting, for contracting a batch ``x`` [B, in] with ONE core at a time,
first core first (what :func:`tt_contract` did before issue 32, and what ``tt_report_einsum``
does): every step's input is saved for the core's gradient, so after the forward the step holds,
besides the output, one intermediate per core boundary::

    T_i  [B, m_1..m_i, r_i, n_{i+1}..n_k]      i = 1..k-1

i.e. ``B * sum_{i=1}^{k} prod(m_1..m_i) * r_i * prod(n_{i+1}..n_k)`` elements counting the output
(``r_k = 1``): ``B d^3 (2r + 1)`` for three equal cores (modes ``d``, rank ``r``).
:meth:`TTShape.factorized_activation_elements` and :meth:`TTShape.factorized_inference_elements`
are these formulas; :meth:`TTShape.sequential_training_elements` adds the gradient of the largest
intermediate, what that contraction held at its backward's peak.  They are the memory bound of the
block contraction memlab uses now (NOTE [ TT contraction plans ]), which keeps less: for the
default layer one intermediate ``B n_1 r_1 m_2 m_3`` instead of two.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from memlab.functional.huge_pages import advise_huge_pages
from memlab.functional.slice_accumulate import check_chunk_size, slice_accumulate

__all__ = [
    "TTShape", "TTPlan", "TTStep", "BLOCKS_LAST_FIRST", "BLOCKS_FIRST_FIRST", "SEQUENTIAL", "tt_contract",
    "tt_contract_chunked", "tt_blocks", "plan_contraction", "plan_candidates", "plan_cost", "plan_report",
    "plan_block_rows", "tt_reconstruct", "tt_svd", "tt_linear_reconstructed", "tt_shape_of",
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
        """Elements the one-core-at-a-time contraction keeps after its forward, output included.

        ``batch * sum_{i=1}^{k} prod(m_1..m_i) * r_i * prod(n_{i+1}..n_k)`` (``r_k = 1``; the
        ``i = k`` term is the output).  ``B d^3 (2r + 1)`` for three equal cores.  See
        NOTE [ TT factorized activations ].
        """
        return sum(self.intermediate_elements(batch))

    def intermediate_elements(self, batch: int) -> tuple[int, ...]:
        """Elements of the one-core-at-a-time contraction's ``T_1 .. T_k`` (``T_k`` is the output), see
        NOTE [ TT factorized activations ]."""
        return tuple(batch * math.prod(self.out_modes[:i]) * self.ranks[i] * math.prod(self.in_modes[i:])
                     for i in range(1, self.n_cores + 1))

    def sequential_training_elements(self, batch: int) -> int:
        """What the one-core-at-a-time contraction held at its training peak, in elements: its
        activations (:meth:`factorized_activation_elements`) plus the gradient of its largest
        intermediate (``B d^3 (3r + 1)`` for three equal cores); the memory bound of
        :func:`plan_contraction` in training.  See NOTE [ TT factorized activations ]."""
        t = self.intermediate_elements(batch)
        return sum(t) + max(t[:-1], default=0)

    def factorized_inference_elements(self, batch: int) -> int:
        """Peak elements of the one-core-at-a-time contraction under ``no_grad`` (above ``x`` and the
        cores); the memory bound of :func:`plan_contraction` without autograd.

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


# -- contraction plans -----------------------------------------------------------------------------
# NOTE [ TT contraction plans ]
# :func:`tt_contract` groups consecutive cores into blocks and contracts ``x`` with one block at a
# time in ``x``'s own row-major layout ("batch first").  A block of cores ``a..b`` is the partial TT
# product ``[rho_in, n_a, m_a, .., n_b, m_b, rho_out]`` (a single core: the core itself; a group: a
# small chain of products) kept as a matrix ``[Mo, K]``: output side by contracted side.  Two orders:
#
# * last block first (:data:`BLOCKS_LAST_FIRST`): ``x`` [B, N_1..N_g]; the step of block ``j`` reads
#   ``S_j`` as ``[L, (N_j rho_j), R]`` with ``L = B N_1..N_{j-1}``, ``R = M_{j+1}..M_g`` and writes
#   ``S_{j-1}[l] = [(rho_{j-1} M_j), (N_j rho_j)] @ S_j[l]`` (``S_g = x``, ``S_0 = y``);
# * first block first (:data:`BLOCKS_FIRST_FIRST`): block ``j`` reads ``T_{j-1}`` as ``[L, (rho_{j-1}
#   N_j), R]`` with ``L = B M_1..M_{j-1}``, ``R = N_{j+1}..N_g`` and writes ``T_j[l] = [(M_j rho_j),
#   (rho_{j-1} N_j)] @ T_{j-1}[l]`` (``T_0 = x``, ``T_g = y``).
#
# Either way every step's input is already in the layout its product wants (the contracted pair is
# adjacent, the modes still to come stay last), so no intermediate is ever permuted or copied and
# ``y`` comes out as [B, M_1..M_g] itself.  The step with ``R = 1`` (the last block's) is ONE product
# over all rows (that block is stored transposed, ``[K, Mo]``); the others are batched products
# against a stride-0 expansion of the block (no copy).  In backward each intermediate's gradient is
# written into that intermediate's buffer (its block gradient taken first), so backward allocates
# no intermediate-sized tensor; a retained graph's second backward recomputes the intermediates.
# Rows are processed in cache blocks of at most :data:`ROW_BLOCK_BYTES` of intermediates (the same
# tensors, each block's next product reading data still in cache).
#
# Why blocks: with one core per block the default layer's (10x10x10, r = 8) middle step is ``B*10``
# products ``[80, 80] @ [80, 10]`` in the first order (an output 10 wide runs at ~1/5 of the big
# products' rate), and the one-core-at-a-time contraction memlab used before needed a permuted copy
# of every intermediate (29% of its step).  Merging cores 2 and 3 (80,800 elements against the dense
# weight's 1,000,000) makes the heavy step ONE product (``[10 B, 100] @ [100, 800]`` last block
# first, ``[10 B, 800] @ [800, 100]`` first block first) and leaves a per-row ``[10, 80] @ [80, 100]``
# (or ``[80, 10] @ [10, 100]``) for core 1; 10% more FLOPs (1.76 vs 1.6 MFLOP per row forward) and
# one intermediate (``B d^3 r``) instead of two.  The order matters for a chunked contraction,
# whose backward recomputes the intermediates: last block first, that is the heavy product again
# (1.6 MFLOP per row); first block first, the light one (0.16): 5.44 instead of 6.88 MFLOP per row
# for the whole step (dense: 6).  Without recomputation the last-block-first order is faster here
# (its heavy products are the wide ones).  Which grouping and order win depends on the modes, ranks,
# rows and recomputation, so :func:`plan_contraction` scores every grouping but the full merge
# (that is the reconstructed path), in both orders, and the one-core-at-a-time contraction
# (:data:`SEQUENTIAL`, kept as is), with a cost model (:func:`plan_cost`), and keeps the cheapest
# whose memory does not exceed the sequential one's (:func:`plan_contraction`); the sequential plan
# is the fallback, so no figure can exceed what memlab measured before.  The plan that ran is in the
# techniques' ``describe()`` (``extra["contraction"]``, every candidate with its score).

#: cost model (NOTE [ TT contraction plans ]): a product [m, k] @ [k, n] runs at the fraction
#: ``m/(m+16) * k/(k+4) * n/(n+32)`` of the full rate.  Fitted by eye to this CPU's MKL at one thread
#: (against a 1000x1000 product): an inner dimension of 10 at ~0.7, 10 output rows at ~0.4, an
#: output 10 wide at ~0.2, 100 wide at ~0.75; orders of magnitude, enough to rank the groupings
HALF_RATE_DIMS = (16, 4, 32)
#: cost of writing one element of an intermediate, in FLOP-equivalents (fresh memory is faulted in
#: and streamed; a measured 131 MB intermediate cost about as much as 2 FLOPs per byte of it)
WRITE_COST = 8.0
#: cost of one element of a permuted copy whose contiguous runs are a few elements long (the
#: sequential plan's copies of its intermediates), in FLOP-equivalents: measured, a [10240, 80, 10]
#: permute took 0.65x as long as a 1000x1000x1024 product (2 GFLOP for 8.2 M elements)
PERMUTE_COST = 128.0


def _rate(m: int, k: int, n: int) -> float:
    """Fraction of the full product rate for [m, k] @ [k, n] (see :data:`HALF_RATE_DIMS`)."""
    hm, hk, hn = HALF_RATE_DIMS
    return m / (m + hm) * k / (k + hk) * n / (n + hn)


@dataclass(frozen=True)
class TTStep:
    """One step of a plan at a given batch: ``L`` products ``[Mo, K] @ [K, R]`` (one ``[L, K] @ [K, Mo]``
    when ``R == 1``); ``block`` is the block's index (0-based), ``flops`` the forward FLOPs (``2 L Mo K
    R``), ``rate`` the cost model's fraction of the full product rate (:data:`HALF_RATE_DIMS`)."""

    block: int
    L: int
    Mo: int
    K: int
    R: int

    @property
    def flops(self) -> int:
        return 2 * self.L * self.Mo * self.K * self.R

    @property
    def rate(self) -> float:
        return _rate(self.L, self.K, self.Mo) if self.R == 1 else _rate(self.Mo, self.K, self.R)


#: :attr:`TTPlan.kind` values: block by block, last block first or first block first (NOTE [ TT
#: contraction plans ]), or one core at a time, first core first, through permuted copies and plain
#: autograd (memlab's path before issue 32: the fallback whenever no block plan fits its memory)
BLOCKS_LAST_FIRST, BLOCKS_FIRST_FIRST, SEQUENTIAL = "blocks_last_first", "blocks_first_first", "sequential"


@dataclass(frozen=True)
class TTPlan:
    """How :func:`tt_contract` contracts a TT matrix: ``groups`` holds ``(first, stop)`` core indices
    per block; ``kind`` is :data:`BLOCKS_LAST_FIRST` or :data:`BLOCKS_FIRST_FIRST` (NOTE [ TT
    contraction plans ]) or :data:`SEQUENTIAL` (one core per group, first to last, NOTE [ TT
    factorized activations ]).  Element counts below are per call at ``batch`` rows; multiply by
    the element size for bytes."""

    shape: TTShape
    groups: tuple[tuple[int, int], ...]
    kind: str = BLOCKS_LAST_FIRST

    @classmethod
    def from_sizes(cls, shape: TTShape, sizes: Sequence[int], kind: str = BLOCKS_LAST_FIRST) -> "TTPlan":
        """The block plan of ``kind`` whose blocks hold ``sizes[0]``, ``sizes[1]``, ... consecutive cores.

        Raises:
            ValueError: sizes that are not positive or do not add up to the number of cores, or a
                kind that is not a block kind.
        """
        if kind not in (BLOCKS_LAST_FIRST, BLOCKS_FIRST_FIRST):
            raise ValueError(f"kind={kind!r} is not valid: expected {BLOCKS_LAST_FIRST!r} or {BLOCKS_FIRST_FIRST!r}")
        sizes = tuple(sizes)
        if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes) \
                or sum(sizes) != shape.n_cores:
            raise ValueError(f"block sizes {sizes!r} are not valid: expected positive ints adding up to "
                             f"{shape.n_cores} (the number of cores)")
        stops = list(itertools.accumulate(sizes))
        return cls(shape, tuple(zip([0] + stops[:-1], stops)), kind)

    @classmethod
    def sequential(cls, shape: TTShape) -> "TTPlan":
        """The one-core-at-a-time plan (:data:`SEQUENTIAL`)."""
        return cls(shape, tuple((i, i + 1) for i in range(shape.n_cores)), SEQUENTIAL)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in self.groups)

    @property
    def blocks(self) -> tuple[tuple[int, int, int, int], ...]:
        """``(rho_in, N, M, rho_out)`` per block."""
        s = self.shape
        return tuple((s.ranks[a], math.prod(s.in_modes[a:b]), math.prod(s.out_modes[a:b]), s.ranks[b])
                     for a, b in self.groups)

    def block_matrix_shapes(self) -> tuple[tuple[int, int], ...]:
        """The stored block matrices ``(Mo, K)`` (output side, contracted side): ``(rho_in M, N
        rho_out)`` last block first, ``(M rho_out, rho_in N)`` first block first; the last block
        (the one product over all rows) is stored transposed, ``(K, Mo)``."""
        if self.kind == BLOCKS_FIRST_FIRST:
            shapes = [(m * ro, ri * n) for ri, n, m, ro in self.blocks]
        else:
            shapes = [(ri * m, n * ro) for ri, n, m, ro in self.blocks]
        shapes[-1] = shapes[-1][::-1]
        return tuple(shapes)

    def block_axes(self, j: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Block ``j`` as its chain product ``[rho_in, n_a, m_a, .., n_b, m_b, rho_out]``: the sizes,
        and the axes that become the rows and the columns of its stored matrix."""
        a, b = self.groups[j]
        s, t = self.shape, b - a
        modes = [d for n, m in zip(s.in_modes[a:b], s.out_modes[a:b]) for d in (n, m)]
        ns, ms, last = [1 + 2 * i for i in range(t)], [2 + 2 * i for i in range(t)], 2 * t + 1
        if self.kind == BLOCKS_FIRST_FIRST:
            rows, cols = (*ms, last), (0, *ns)  # (M, rho_out) and (rho_in, N)
        else:
            rows, cols = (0, *ms), (*ns, last)  # (rho_in, M) and (N, rho_out)
        if j == len(self.groups) - 1:
            rows, cols = cols, rows
        return (s.ranks[a], *modes, s.ranks[b]), rows, cols

    def block_is_view(self, j: int) -> bool:
        """Whether block ``j`` is a view of its chain product (a single core: of the core itself):
        each of its row and column axes must follow one another in the product's own order, with
        only size-1 axes between (what ``reshape`` of a permuted contiguous tensor needs to be a view)."""
        sizes, rows, cols = self.block_axes(j)
        for axes in (rows, cols):
            big = [i for i in axes if sizes[i] != 1]
            if any(q < p or any(sizes[i] != 1 for i in range(p + 1, q)) for p, q in zip(big, big[1:])):
                return False
        return True

    def block_elements(self) -> int:
        """Elements of the stored block matrices: every merged block (its chain product, or a
        permuted copy of it) and every single core that is not a view (:meth:`block_is_view`); 0 for
        the sequential plan, which uses the cores as views."""
        if self.kind == SEQUENTIAL:
            return 0
        return sum(m * k for j, ((m, k), (a, b)) in enumerate(zip(self.block_matrix_shapes(), self.groups))
                   if b - a > 1 or not self.block_is_view(j))

    def chain_elements(self) -> tuple[tuple[int, ...], ...]:
        """Per block, the elements of its chain products before the permuted copy: core ``t``'s
        product ``[rho_in, n_a, m_a, .., n_t, m_t, r_t]`` for each core ``t`` after the block's first."""
        s = self.shape
        return tuple(tuple(s.ranks[a] * math.prod(n * m for n, m in zip(s.in_modes[a:t + 1], s.out_modes[a:t + 1]))
                           * s.ranks[t + 1] for t in range(a + 1, b)) for a, b in self.groups)

    def saved_chain_elements(self) -> int:
        """Chain products autograd saves while the blocks are built in training (all but each
        block's last, which only the permuted copy reads)."""
        return sum(sum(c[:-1]) for c in self.chain_elements())

    def merge_peak_elements(self) -> int:
        """Peak while the blocks are built without autograd: the finished blocks plus the block in
        progress (two consecutive chain products, or the last one and its permuted copy)."""
        if self.block_elements() == 0:
            return 0
        done = peak = 0
        for j, ((m, k), chain) in enumerate(zip(self.block_matrix_shapes(), self.chain_elements())):
            size = m * k if chain or not self.block_is_view(j) else 0
            copy = 0 if self.block_is_view(j) else size
            group = max([p + q for p, q in zip(chain, chain[1:])] + [chain[-1] + copy]) if chain else size
            peak, done = max(peak, done + group), done + size
        return peak

    def steps(self, batch: int) -> tuple[TTStep, ...]:
        """The products of one forward, in execution order (the first reads ``x``, the last writes ``y``)."""
        if self.kind == SEQUENTIAL:
            return self._sequential_steps(batch)
        blocks, out = self.blocks, []
        last_first = self.kind == BLOCKS_LAST_FIRST
        for j in (range(len(blocks) - 1, -1, -1) if last_first else range(len(blocks))):
            ri, n, m, ro = blocks[j]
            if last_first:  # S_j [L, (N_j rho_j), M_{j+1}..] -> [L, (rho_{j-1} M_j), M_{j+1}..]
                lead, mo, k, rest = math.prod(b[1] for b in blocks[:j]), ri * m, n * ro, [b[2] for b in blocks[j + 1:]]
            else:  # T_{j-1} [L, (rho_{j-1} N_j), N_{j+1}..] -> [L, (M_j rho_j), N_{j+1}..]
                lead, mo, k, rest = math.prod(b[2] for b in blocks[:j]), m * ro, ri * n, [b[1] for b in blocks[j + 1:]]
            out.append(TTStep(j, batch * lead, mo, k, math.prod(rest)))
        return tuple(out)

    def _sequential_steps(self, batch: int) -> tuple[TTStep, ...]:
        n, m, r = self.shape.in_modes, self.shape.out_modes, self.shape.ranks
        if len(n) == 1:
            return (TTStep(0, batch, m[0], n[0], 1),)
        out = [TTStep(0, batch, m[0] * r[1], n[0], math.prod(n[1:]))]  # one product per row
        for i in range(1, len(n)):
            out.append(TTStep(i, batch * math.prod(m[:i]) * math.prod(n[i + 1:]), m[i] * r[i + 1], r[i] * n[i], 1))
        return tuple(out)

    def intermediate_elements(self, batch: int) -> tuple[int, ...]:
        """Elements of the intermediates the forward keeps for backward, in execution order: the
        output of every step but the last (sequential: ``T_1 .. T_{k-1}``); empty for one block."""
        if self.kind == SEQUENTIAL:
            return self.shape.intermediate_elements(batch)[:-1]
        return tuple(st.L * st.Mo * st.R for st in self.steps(batch)[:-1])

    def written_elements(self, batch: int) -> int:
        """Elements one forward writes: the intermediates and the output."""
        return sum(self.intermediate_elements(batch)) + batch * self.shape.out_features

    def permuted_elements(self, batch: int) -> int:
        """Elements one forward copies through a permutation: the sequential plan's copy of each
        intermediate; none for a block plan."""
        return sum(self.intermediate_elements(batch)) if self.kind == SEQUENTIAL else 0

    def flops(self, batch: int) -> int:
        """Forward FLOPs of the contraction (``2 m k n`` per product), the block merges excluded."""
        return sum(st.flops for st in self.steps(batch))

    def activation_elements(self, batch: int) -> int:
        """What the forward keeps for backward beyond the blocks: the intermediates and the output."""
        return sum(self.intermediate_elements(batch)) + batch * self.shape.out_features

    def training_elements(self, batch: int, input_grad: bool = True) -> int:
        """The training step's holding at its peak as the planner counts it: for a block plan the
        stored blocks, every block's gradient, the chain products autograd saves, the input gradient
        (allocated while the intermediates live; not with ``input_grad=False``, for a chunk whose
        gradient rows go to an input gradient preallocated on every path) and
        :meth:`activation_elements` (each intermediate's gradient reuses its buffer); for the
        sequential plan :meth:`TTShape.sequential_training_elements`, the bound the block plans are
        held to."""
        if self.kind == SEQUENTIAL:
            return self.shape.sequential_training_elements(batch)
        grads = sum(m * k for m, k in self.block_matrix_shapes())
        x_grad = batch * self.shape.in_features if input_grad else 0
        return (self.block_elements() + grads + self.saved_chain_elements() + x_grad
                + self.activation_elements(batch))

    def inference_elements(self, batch: int, block_rows: int | None = None) -> int:
        """Peak under ``no_grad`` above ``x`` and the cores (exact for :func:`tt_contract`).

        Sequential: :meth:`TTShape.factorized_inference_elements`.  Blocks: the larger of
        :meth:`merge_peak_elements` and the blocks plus the steps' peak.  Over all rows at once the
        steps hold a step's input and output together (``S_j`` and ``S_{j-1}``, ``S_0 = y``); in row
        blocks of ``block_rows`` (fewer than ``batch``) the output is allocated first and a block
        holds its own intermediates, two consecutive ones at a time.
        """
        if self.kind == SEQUENTIAL:
            return self.shape.factorized_inference_elements(batch)
        rows = batch if block_rows is None else min(batch, block_rows)
        t = self.intermediate_elements(rows)
        out = batch * self.shape.out_features
        seq, base = ((*t, out), 0) if rows == batch else (t, out)
        step = base + max([p + q for p, q in zip(seq, seq[1:])] + [seq[0]])
        return max(self.merge_peak_elements(), self.block_elements() + step)

    def describe(self, batch: int) -> dict[str, Any]:
        """JSON-ready: the kind, the grouping, the block shapes, each step's product and FLOPs."""
        return {
            "kind": self.kind,
            "groups": [list(range(a, b)) for a, b in self.groups],
            "block_matrix_shapes": None if self.kind == SEQUENTIAL else [list(s) for s in self.block_matrix_shapes()],
            "block_elements": self.block_elements(),
            "steps": [{"block": st.block, "products": st.L if st.R > 1 else 1,
                       "product": [st.Mo, st.K, st.R] if st.R > 1 else [st.L, st.K, st.Mo],
                       "flops": st.flops} for st in self.steps(batch)],
            "forward_flops": self.flops(batch),
            "intermediate_elements": list(self.intermediate_elements(batch)),
        }


def plan_cost(plan: TTPlan, batch: int, grad: bool = True, recompute: bool = False) -> float:
    """The cost model's score of ``plan`` (FLOP-equivalents; lower is faster).

    Each product's FLOPs divided by its rate (:data:`HALF_RATE_DIMS`), three times over in training
    (forward, then the input and block gradients, each as many FLOPs as the forward), plus
    :data:`WRITE_COST` per element of every intermediate written (twice in training: the
    intermediate, then its gradient), :data:`PERMUTE_COST` per element of a permuted copy (twice in
    training: the copy, then its gradient's) and the merges' FLOPs.  ``recompute`` (a chunked
    contraction, whose backward recomputes the intermediates): every step but the last once more.
    """
    steps = plan.steps(batch)
    compute = sum(st.flops / st.rate for st in steps)
    again = sum(st.flops / st.rate for st in steps[:-1]) if grad and recompute else 0.0
    memory = WRITE_COST * plan.written_elements(batch) + PERMUTE_COST * plan.permuted_elements(batch)
    merge = 2 * sum(map(sum, plan.chain_elements())) * max(plan.shape.ranks)
    return (3 if grad else 1) * compute + again + (2 if grad else 1) * memory + merge


def _compositions(k: int) -> Iterator[tuple[int, ...]]:
    for cuts in itertools.product((False, True), repeat=k - 1):
        sizes, run = [], 1
        for cut in cuts:
            if cut:
                sizes.append(run)
                run = 1
            else:
                run += 1
        yield (*sizes, run)


def plan_candidates(shape: TTShape) -> tuple[TTPlan, ...]:
    """The sequential plan, then every grouping of the cores into consecutive blocks but the single
    block of all cores (the dense-size weight: the reconstructed path), more blocks first, each
    first block first and last block first; for one core only the sequential plan (a product with
    the core's view)."""
    sizes = sorted((s for s in _compositions(shape.n_cores) if len(s) > 1), key=lambda s: (-len(s), s))
    return (TTPlan.sequential(shape), *(TTPlan.from_sizes(shape, s, kind) for s in sizes
                                        for kind in (BLOCKS_FIRST_FIRST, BLOCKS_LAST_FIRST)))


def _memory(plan: TTPlan, batch: int, grad: bool, recompute: bool = False) -> tuple[int, int]:
    """Training: (peak, kept after the forward: blocks and activations); inference: (peak, peak)."""
    if not grad:
        return plan.inference_elements(batch), plan.inference_elements(batch)
    return plan.training_elements(batch, not recompute), plan.block_elements() + plan.activation_elements(batch)


def _fits(plan: TTPlan, batch: int, grad: bool, recompute: bool, bound: tuple[int, int]) -> bool:
    return all(a <= b for a, b in zip(_memory(plan, batch, grad, recompute), bound))


@functools.lru_cache(maxsize=256)
def plan_contraction(shape: TTShape, batch: int, grad: bool = True, recompute: bool = False) -> TTPlan:
    """The cheapest plan by :func:`plan_cost` among those whose memory does not exceed the
    sequential plan's (NOTE [ TT contraction plans ]); ties go to the sequential plan.

    Args:
        shape: the TT matrix.
        batch: rows contracted at once (the chunk's rows for a chunked contraction).
        grad: plan a training step (memory: :meth:`TTPlan.training_elements` and what the forward
            keeps, the blocks and :meth:`TTPlan.activation_elements`, bounded by
            :meth:`TTShape.sequential_training_elements` and
            :meth:`TTShape.factorized_activation_elements`) or a forward without autograd
            (:meth:`TTPlan.inference_elements` over all rows, bounded by
            :meth:`TTShape.factorized_inference_elements`).
        recompute: plan a chunked contraction, whose backward recomputes the intermediates
            (:func:`plan_cost`).

    Raises:
        ValueError: ``batch`` is not an int >= 1.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r} is not valid: expected an int >= 1 (rows contracted at once)")
    candidates = plan_candidates(shape)
    bound = _memory(candidates[0], batch, grad)
    return min((p for p in candidates if _fits(p, batch, grad, recompute, bound)),
               key=lambda p: plan_cost(p, batch, grad, recompute))


def plan_report(shape: TTShape, batch: int, grad: bool = True, recompute: bool = False) -> dict[str, Any]:
    """The chosen plan (:meth:`TTPlan.describe`) with every candidate's cost-model score and memory
    (elements), for ``Measurement.extra``."""
    chosen, candidates = plan_contraction(shape, batch, grad, recompute), plan_candidates(shape)
    bound = _memory(candidates[0], batch, grad)
    return {
        **chosen.describe(batch), "rows": batch, "mode": "train" if grad else "infer", "recompute": recompute,
        "chosen_by": "cost model (memlab.families.tensor_train.tt.plan_cost) within the sequential plan's memory",
        "memory_bound_elements": list(bound),
        "candidates": [{"kind": p.kind, "sizes": list(p.sizes), "cost": plan_cost(p, batch, grad, recompute),
                        "memory_elements": list(_memory(p, batch, grad, recompute)),
                        "fits": _fits(p, batch, grad, recompute, bound)} for p in candidates],
    }


# -- blocks ----------------------------------------------------------------------------------------
def tt_blocks(cores: Sequence[torch.Tensor], plan: TTPlan) -> list[torch.Tensor]:
    """The block matrices of ``plan`` (autograd tracks them), each in the orientation its products want.

    Each block is ``[Mo, K]`` (:meth:`TTPlan.block_matrix_shapes`), except the last (the one product
    over all rows, ``R = 1``), stored ``[K, Mo]`` so the forward multiplies by it untransposed and its
    gradient accumulates as ``[K, L] @ [L, Mo]``.  A single core is a view of the core where its
    layout allows (:meth:`TTPlan.block_is_view`), else a permuted copy.  A group is its chain of
    products ``[rho_in, n_a, m_a, ..., n_b, m_b, r]`` (each product's rank index last, so the chain
    needs no copy), then one permuted copy (or a view of the last product).
    """
    out = []
    for j, (a, b) in enumerate(plan.groups):
        chain = cores[a]
        for c in cores[a + 1:b]:
            chain = torch.mm(chain.reshape(-1, c.shape[0]), c.reshape(c.shape[0], -1))
        sizes, rows, cols = plan.block_axes(j)
        full = chain.view(sizes)
        out.append(full.permute(*rows, *cols).reshape(math.prod(sizes[i] for i in rows),
                                                       math.prod(sizes[i] for i in cols)))
    return out


# -- the contraction -------------------------------------------------------------------------------
#: the block-gradient sum over a batched step is taken this many elements of partial products at a
#: time (``p`` products ``[Mo, R] @ [R, K]`` into a ``[p, Mo, K]`` temporary, then summed)
PARTIAL_ELEMENTS = 65536


def _add_batched_products(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``acc [M, N] += sum_l a[l] [M, R] @ b[l] [R, N]`` in bmm's of at most :data:`PARTIAL_ELEMENTS`
    output elements (one small temporary, not one per product as ``addbmm_``'s loop pays for)."""
    per = max(1, PARTIAL_ELEMENTS // acc.numel())
    if per >= a.shape[0]:
        acc.add_(torch.bmm(a, b).sum(0))
        return
    for s in range(0, a.shape[0], per):
        acc.add_(torch.bmm(a[s:s + per], b[s:s + per]).sum(0))


@functools.lru_cache(maxsize=1024)
def _steps(plan: TTPlan, rows: int) -> tuple[TTStep, ...]:
    return plan.steps(rows)


def _forward_steps(plan: TTPlan, x: torch.Tensor, blocks: Sequence[torch.Tensor], keep: bool,
                   final: bool = True, out: torch.Tensor | None = None,
                   kept_out: Sequence[torch.Tensor] | None = None) -> tuple[torch.Tensor | None, list]:
    """The steps of NOTE [ TT contraction plans ] on ``x`` [rows, in_features] (no autograd).

    Returns ``(y [rows, out_features] or None, intermediates)``: the intermediates (every step's
    output but the last's, in execution order) when ``keep``, else an empty list; ``final=False``
    stops before the last step (a recomputation for backward needs the intermediates, not ``y``).
    ``out`` and ``kept_out`` (tensors of ``rows`` contiguous rows, e.g. rows of larger buffers)
    receive ``y`` and the intermediates instead of new tensors.
    """
    rows, s, kept = x.shape[0], x, []
    steps = _steps(plan, rows)
    last = len(steps) - 1
    for i, st in enumerate(steps):
        if i == last and not final:
            break
        blk = blocks[st.block]
        dest = out if i == last else (None if kept_out is None else kept_out[i])
        if st.R == 1:  # the last block, stored [K, Mo]: one product over all rows
            res = torch.mm(s.reshape(st.L, st.K), blk, out=None if dest is None else dest.view(st.L, st.Mo))
        else:  # [Mo, K] against s[l] [K, R] for every l, the block expanded with stride 0
            res = torch.bmm(blk.expand(st.L, st.Mo, st.K), s.reshape(st.L, st.K, st.R),
                            out=None if dest is None else dest.view(st.L, st.Mo, st.R))
        if keep and i < last:
            kept.append(res)
        s = res
    return (s.view(rows, plan.shape.out_features) if final else None), kept


def _backward_steps(plan: TTPlan, x: torch.Tensor, grad_y: torch.Tensor, blocks: Sequence[torch.Tensor],
                    kept: list[torch.Tensor], grad_blocks: Sequence[torch.Tensor | None], need_x: bool,
                    grad_x_out: torch.Tensor | None = None) -> torch.Tensor | None:
    """Backward of :func:`_forward_steps`, last step first; consumes ``kept`` (popped).

    Adds each block's gradient into ``grad_blocks[j]`` (skipped where None; same orientation as the
    block).  Each intermediate's gradient is written into that intermediate's own buffer once its
    block gradient has been taken (no new intermediate-sized tensor in backward); the input gradient
    goes into ``grad_x_out`` (a [rows, in_features] view whose rows are contiguous, e.g. rows of a
    preallocated gradient) or a new tensor, and is returned (None when ``need_x`` is False).
    """
    rows, g = x.shape[0], grad_y
    steps = _steps(plan, rows)
    for i in range(len(steps) - 1, -1, -1):
        st = steps[i]
        src = x if i == 0 else kept.pop()
        blk, acc = blocks[st.block], grad_blocks[st.block]
        if st.R == 1:
            gv, sv = g.reshape(st.L, st.Mo), src.reshape(st.L, st.K)
            if acc is not None:
                acc.addmm_(sv.t(), gv)  # [K, L] @ [L, Mo]
        else:
            gv, sv = g.reshape(st.L, st.Mo, st.R), src.reshape(st.L, st.K, st.R)
            if acc is not None:
                _add_batched_products(acc, gv, sv.transpose(1, 2))
        if i == 0 and not need_x:
            return None
        if i > 0:
            dest = src  # its block gradient is taken: the buffer now takes the gradient of the intermediate
        elif grad_x_out is None:
            dest = torch.empty_like(x, memory_format=torch.contiguous_format)
        else:
            dest = grad_x_out
        del src, sv
        if st.R == 1:
            torch.mm(gv, blk.t(), out=dest.view(st.L, st.K))  # [L, Mo] @ [Mo, K]
        else:
            torch.bmm(blk.t().expand(st.L, st.K, st.Mo), gv, out=dest.view(st.L, st.K, st.R))
        g = dest
    return g


# NOTE [ the kept intermediate's fresh pages ]
# ``tt_factorized``'s one kept intermediate is [10 B, 800] float32 for the default layer (d = 10,
# r = 8): 131 MB at B = 4096, above glibc's 32 MiB mmap ceiling, so it is a fresh mapping every step
# and its first touch faults 32,001 small pages a step: about a fifth of the step's thread CPU time.
# The cost is the kernel zeroing and mapping each page (MADV_POPULATE_WRITE, which only saves the
# traps, barely moved the forward's writes).  :func:`_forward_rows` therefore asks for transparent
# huge pages behind every kept buffer of 32 MiB or more before writing it (NOTE [ huge pages for a
# fresh buffer ] in :mod:`memlab.functional.huge_pages`): ``memlab bench-harness --limits``' point
# then reads a clearly smaller time relative to dense, for the same bytes.  B = 1024's intermediate
# (32.8 MB) is under the ceiling, reused from glibc's heap, and left as it is.  Tried before and left
# out: the intermediate in row segments under the ceiling (glibc trims the freed heap, and the
# faults come back).  Where free 2 MiB blocks are short the kernel compacts memory to find them,
# which shows as slow rounds among fast ones: the median is what memlab reports.
# Evidence: docs/evidence/code-notes.md#the-kept-intermediates-fresh-pages

#: cache blocking (NOTE [ TT contraction plans ]): rows are contracted in blocks whose intermediates
#: take at most this many bytes (half this CPU's 2 MiB L2), so a block's intermediate is still in
#: cache when the next step, or the backward's next product, reads it
ROW_BLOCK_BYTES = 1 << 20


def plan_block_rows(plan: TTPlan, element_size: int, device_type: str = "cpu") -> int:
    """Rows per cache block on a CPU: the most whose intermediates fit :data:`ROW_BLOCK_BYTES` (at
    least 1); unlimited for a single block (no intermediate) and on other devices (a GPU wants one
    launch per product over all rows)."""
    per_row = sum(plan.intermediate_elements(1)) * element_size
    if not per_row or device_type != "cpu":
        return 1 << 62
    return max(1, ROW_BLOCK_BYTES // per_row)


def _forward_rows(plan: TTPlan, x: torch.Tensor, blocks: Sequence[torch.Tensor], keep: bool, block_rows: int,
                  out: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """:func:`_forward_steps` over blocks of ``block_rows`` rows of ``x``, into one output (``out``
    or new) and, when ``keep``, one full-size buffer per intermediate ([rows, elements per row],
    in execution order): the same tensors as one pass over all rows, each block's products on data
    still in cache."""
    rows = x.shape[0]
    if rows <= block_rows:
        y, kept = _forward_steps(plan, x, blocks, keep, out=out)
        return y, kept
    y = x.new_empty(rows, plan.shape.out_features) if out is None else out
    kept = [x.new_empty(rows, e) for e in plan.intermediate_elements(1)] if keep else []
    for buffer in kept:  # a fresh mapping every step: NOTE [ huge pages for a fresh buffer ]
        advise_huge_pages(buffer)
    for r0 in range(0, rows, block_rows):
        part = slice(r0, min(r0 + block_rows, rows))
        _forward_steps(plan, x[part], blocks, False, out=y[part], kept_out=[k[part] for k in kept] if keep else None)
    return y, kept


def _backward_rows(plan: TTPlan, x: torch.Tensor, grad_y: torch.Tensor, blocks: Sequence[torch.Tensor],
                   kept: list[torch.Tensor], grad_blocks: Sequence[torch.Tensor | None], need_x: bool,
                   block_rows: int) -> torch.Tensor | None:
    """:func:`_backward_steps` over the row blocks of :func:`_forward_rows` (same ``block_rows``)."""
    rows = x.shape[0]
    if rows <= block_rows:
        return _backward_steps(plan, x, grad_y, blocks, kept, grad_blocks, need_x)
    grad_x = torch.empty_like(x, memory_format=torch.contiguous_format) if need_x else None
    for r0 in range(0, rows, block_rows):
        part = slice(r0, min(r0 + block_rows, rows))
        _backward_steps(plan, x[part], grad_y[part], blocks, [k[part] for k in kept], grad_blocks, need_x,
                        None if grad_x is None else grad_x[part])
    return grad_x


class _BlockContract(torch.autograd.Function):
    """Private: ``y = x @ W`` by the steps of ``plan`` in row blocks; saves ``x``, the blocks and the
    intermediates (NOTE [ TT contraction plans ]); the backward reuses the intermediates' buffers for
    their gradients."""

    @staticmethod
    def forward(ctx, plan: TTPlan, block_rows: int, x: torch.Tensor, *blocks: torch.Tensor) -> torch.Tensor:
        y, kept = _forward_rows(plan, x, blocks, True, block_rows)
        ctx.plan, ctx.block_rows, ctx.n_blocks, ctx.consumed = plan, block_rows, len(blocks), False
        ctx.save_for_backward(x, *blocks, *kept)
        ctx.inputs = (x, blocks)  # a second backward (retained graph) recomputes from these
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y: torch.Tensor):
        if ctx.consumed:  # a retained graph's second backward: the saved buffers hold gradients now
            x, blocks = ctx.inputs
            kept = _forward_rows(ctx.plan, x, blocks, True, ctx.block_rows)[1]
        else:
            saved = ctx.saved_tensors
            x, blocks, kept = saved[0], saved[1:1 + ctx.n_blocks], list(saved[1 + ctx.n_blocks:])
            del saved
        ctx.consumed = True
        grads = [torch.zeros_like(b) if need else None for b, need in zip(blocks, ctx.needs_input_grad[3:])]
        grad_x = _backward_rows(ctx.plan, x, grad_y, blocks, kept, grads, ctx.needs_input_grad[2], ctx.block_rows)
        return (None, None, grad_x, *grads)


def _contract_sequential(x: torch.Tensor, cores: Sequence[torch.Tensor]) -> torch.Tensor:
    """The :data:`SEQUENTIAL` plan (plain autograd): ``x`` with one core at a time, first to last.

    Memory: keeps ``shape.factorized_activation_elements(B)`` elements after the forward (NOTE [ TT
    factorized activations ]); each step makes ONE contiguous copy of its permuted input, which the
    ``mm`` saves (the un-permuted tensor is freed); the cores are used as views.  The first core is
    applied with a ``bmm`` against ``x`` viewed as [B, n_1, rest] (``torch.matmul(g1t, x3)`` would
    fold ``x`` into one GEMM but copies ``x`` and saves the copy).
    """
    shape = tt_shape_of(cores)
    n, m, r = shape.in_modes, shape.out_modes, shape.ranks
    b = x.shape[0]
    if len(n) == 1:
        return torch.mm(x, cores[0].reshape(n[0], m[0]))
    # core 1 from the left, batched over B: [m1 r1, n1] @ [n1, rest] -> [B, m1 r1, rest]; x not copied
    g1t = cores[0].reshape(n[0], m[0] * r[1]).t()
    t = torch.bmm(g1t.expand(b, -1, -1), x.reshape(b, n[0], -1))
    t = t.view(b, m[0], r[1], *n[1:])  # [B, m1, r1, n2..nk]
    for i in range(1, len(n)):
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


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def tt_contract(x: torch.Tensor, cores: Sequence[torch.Tensor], plan: TTPlan | None = None) -> torch.Tensor:
    """``x @ W`` with ``W`` in TT format, contracted block by block (NOTE [ TT contraction plans ]).

    Memory: keeps the blocks (each a copy of its cores), the intermediates ``S_1 .. S_{g-1}``
    (:meth:`TTPlan.intermediate_elements`) and ``x`` for backward, whose intermediate gradients
    reuse the intermediates' buffers; see :meth:`TTPlan.training_elements` and
    :meth:`TTPlan.inference_elements`.  A second backward through a retained graph recomputes the
    intermediates.

    Args:
        x: [B, in_features].
        cores: ``k`` tensors ``[r_{i-1}, n_i, m_i, r_i]``.
        plan: the grouping of the cores; default :func:`plan_contraction` for this batch and
            whether autograd records the call.

    Returns:
        [B, out_features].
    """
    shape = tt_shape_of(cores)
    _check_input(x, shape)
    grad = _needs_grad(x, *cores)
    plan = plan_contraction(shape, max(1, x.shape[0]), grad) if plan is None else _checked_plan(plan, shape)
    if plan.kind == SEQUENTIAL:
        return _contract_sequential(x, cores)
    rows = plan_block_rows(plan, x.element_size(), x.device.type)
    if not grad:
        with torch.no_grad():
            return _forward_rows(plan, x, tt_blocks(cores, plan), False, rows)[0]
    return _BlockContract.apply(plan, rows, x, *tt_blocks(cores, plan))


def _checked_plan(plan: TTPlan, shape: TTShape) -> TTPlan:
    if not isinstance(plan, TTPlan) or plan.shape != shape:
        raise ValueError(f"plan {plan!r} is not a TTPlan of this TT matrix ({shape})")
    return plan


def tt_contract_chunked(x: torch.Tensor, cores: Sequence[torch.Tensor], chunk_size: int,
                        plan: TTPlan | None = None) -> torch.Tensor:
    """:func:`tt_contract` over row chunks of ``x`` with a recomputing backward (``slice_accumulate``).

    Forward: the block contraction of each chunk under ``no_grad``, written into the output; saves
    ``x`` and the blocks.  Backward, per chunk: recompute the chunk's intermediates (not its
    output), add the blocks' gradients into one accumulator each and write the chunk's input
    gradient into its rows of one preallocated ``grad_x``, reusing the intermediates' buffers
    (see :func:`_backward_steps`).  Live beyond the output, ``grad_x`` and the blocks with their
    gradients: one chunk's intermediates.

    Args:
        x: [B, in_features].
        cores: ``[r_{i-1}, n_i, m_i, r_i]`` each.
        chunk_size: rows per chunk (int >= 1); the last chunk may be shorter.
        plan: default :func:`plan_contraction` for ``min(chunk_size, B)`` rows and a recomputing backward.

    Returns:
        [B, out_features].
    """
    shape = tt_shape_of(cores)
    _check_input(x, shape)
    check_chunk_size(chunk_size)
    grad = _needs_grad(x, *cores)
    if plan is None:
        plan = plan_contraction(shape, max(1, min(chunk_size, x.shape[0])), grad, recompute=True)
    plan = _checked_plan(plan, shape)
    if plan.kind == SEQUENTIAL:  # per chunk the sequential contraction, differentiated by autograd
        return slice_accumulate(lambda xc, *cs: _contract_sequential(xc, cs), x, *cores, chunk_size=chunk_size)
    block_rows = plan_block_rows(plan, x.element_size(), x.device.type)

    def per_chunk(xc: torch.Tensor, *blocks: torch.Tensor) -> torch.Tensor:
        return _forward_rows(plan, xc, blocks, False, block_rows)[0]

    def chunk_forward(xc: torch.Tensor, blocks: Sequence[torch.Tensor], out: torch.Tensor) -> None:
        _forward_rows(plan, xc, blocks, False, block_rows, out=out)

    def chunk_vjp(xc, grad_c, blocks, grad_x_c, grad_blocks) -> None:
        if xc.shape[0] <= block_rows:
            kept = _forward_steps(plan, xc, blocks, keep=True, final=False)[1]
            _backward_steps(plan, xc, grad_c, blocks, kept, grad_blocks, grad_x_c is not None, grad_x_c)
            return
        for r0 in range(0, xc.shape[0], block_rows):  # recompute and differentiate one row block at a time
            part = slice(r0, r0 + block_rows)
            kept = _forward_steps(plan, xc[part], blocks, keep=True, final=False)[1]
            _backward_steps(plan, xc[part], grad_c[part], blocks, kept, grad_blocks, grad_x_c is not None,
                            None if grad_x_c is None else grad_x_c[part])

    with torch.set_grad_enabled(grad):
        blocks = tt_blocks(cores, plan)
    return slice_accumulate(per_chunk, x, *blocks, chunk_size=chunk_size, chunk_vjp=chunk_vjp,
                            chunk_forward=chunk_forward)


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
