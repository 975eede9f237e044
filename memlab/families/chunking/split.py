"""Chunking family: ``checkpoint_chunk`` with the rows of x taken by ``torch.split`` instead of slicing.

# NOTE [ split vs slice checkpoint ]
``checkpoint_chunk`` (:mod:`memlab.families.chunking.techniques`) hands ``x[st:ed]`` to one checkpoint per
chunk.  Every slice is its own autograd node, and its backward (``slice_backward``) allocates a
zero-filled gradient the size of ``x`` and copies the chunk's gradient into it; autograd adds each
into the running gradient of ``x`` (the report's ``slice_backward`` allocations).
``checkpoint_split_chunk`` takes the same chunks as the views ``torch.split(x, chunk_size)``
returns: ONE autograd node (``SplitBackward0``) for all chunks, whose backward runs once,
when every chunk's gradient has arrived, and concatenates them into one x-sized gradient.  No
zero-filled x-sized buffer is made per chunk; what it costs instead is that the chunk gradients
wait in autograd's input buffer until the last one arrives.  Everything else (the checkpointed
``(x_c @ w1) @ w2`` per chunk, recomputed in backward; ``torch.cat`` of the chunk outputs) is
``checkpoint_chunk``'s, so the two differ only in how the rows of ``x`` are taken.

At the training peak (the recomputation of a chunk in backward, CPU, exact allocation trace) the
slicing form holds the x-sized running gradient of ``x`` (``n d``) where the split form holds the
``n - c`` rows of chunk gradients still waiting for the concatenation: the split form's peak is
lower by one chunk's gradient, ``c d * element_size`` bytes (:func:`split_saving_bytes`), plus
whichever of the checkpoints' saved CPU RNG states (``torch.get_rng_state()``, 5,056 bytes each,
one per chunk in both forms) happen to be live at one peak and not the other.  Measured at
n = 10000, d = 256, hidden = 1024, float32: 1,064,448 bytes at c = 1000 (1,024,000 + 8 RNG
states), 2,570,112 at c = 2500 (2,560,000 + 2).

The chunked-slicing seed page measures both: ``checkpoint_chunk`` (the slicing form, as the
report's loop slices) and this split form beside it.
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from .chained_matmul import chained_matmul
from memlab.core.params import Param
from memlab.technique import Technique
from .workload import ChainedMatmul, analytic_floor

__all__ = ["CheckpointSplitChunk", "split_saving_bytes"]

CHUNK_SIZE = Param(2500, low=1, high=10_000_000, doc="rows of x per chunk (the last may be shorter)")


def split_saving_bytes(n: int, d: int, chunk_size: int, element_size: int) -> int:
    """Training-peak bytes ``checkpoint_split_chunk`` saves against ``checkpoint_chunk`` (at least).

    One chunk's gradient: ``c * d * element_size`` with ``c = min(chunk_size, n)``, 0 for a single
    chunk (nothing is sliced).  The measured saving adds up to one saved RNG state per chunk; see
    NOTE [ split vs slice checkpoint ].
    """
    c = min(chunk_size, n)
    return 0 if c >= n else c * d * element_size


class CheckpointSplitChunk(Technique, name="checkpoint_split_chunk"):
    """``torch.utils.checkpoint`` per chunk of ``torch.split(x, chunk_size)``; outputs ``torch.cat``-ed.

    ``checkpoint_chunk`` with split views in place of slices: no per-chunk x-sized
    ``slice_backward`` zeros (NOTE [ split vs slice checkpoint ]).

    Example:
        >>> m = memlab.measure("checkpoint_split_chunk", chunk_size=1000)   # x [10000, 256]
    """

    workload = ChainedMatmul
    twin = "checkpoint_chunk"
    params = {"chunk_size": CHUNK_SIZE}
    #: 5 does not divide the check size (n=37), so the last chunk is short
    check_params = {"chunk_size": 5}

    def forward(self, problem):
        m = problem.model
        chunks = torch.split(problem.inputs["x"], self.config["chunk_size"])
        return torch.cat([checkpoint(chained_matmul, xc, m.w1, m.w2, use_reentrant=False) for xc in chunks])

    def describe(self, problem, mode="train"):
        cfg = self.problem_spec.config
        e = problem.inputs["x"].element_size()
        floor = analytic_floor(cfg, self.config["chunk_size"], e)
        return {**floor.to_extra(mode), "num_chunks": -(-cfg["n"] // floor.chunk_rows), "rows_taken_by": "split",
                "split_saving_bytes": split_saving_bytes(cfg["n"], cfg["d"], self.config["chunk_size"], e)}
