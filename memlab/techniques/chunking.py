"""Chunking family: ways to compute ``y = (x @ w1) @ w2`` over row chunks of x.

See the chunked-slicing report: a Python loop over slices lowers the forward peak, but autograd's
``slice_backward`` allocates a full-size zero gradient per slice in backward.
"""
from __future__ import annotations

import torch

from ..params import Param
from ..technique import Technique
from ..workloads.chained_matmul import ChainedMatmul

__all__ = ["Unchunked", "SliceLoop"]

CHUNK_SIZE = Param(2500, low=1, high=10_000_000, doc="rows of x per chunk (the last may be shorter)")


class Unchunked(Technique, name="unchunked"):
    """The reference: one (x @ w1) @ w2 over all rows; saves the full [n, hidden] activation."""

    workload = ChainedMatmul
    baseline = True

    def forward(self, problem):
        m = problem.model
        return (problem.inputs["x"] @ m.w1) @ m.w2


class SliceLoop(Technique, name="slice_loop"):
    """The report's loop: ``y[st:ed] = (x[st:ed] @ w1) @ w2`` into an empty y.

    Forward holds one chunk's hidden [chunk, hidden] at a time but autograd saves each chunk's
    hidden for backward, and each ``x[st:ed]`` slice's backward allocates a zero-filled
    gradient the size of x (``slice_backward``).
    """

    workload = ChainedMatmul
    params = {"chunk_size": CHUNK_SIZE}

    def forward(self, problem):
        x = problem.inputs["x"]
        m = problem.model
        c = self.config["chunk_size"]
        y = x.new_empty(x.shape[0], m.w2.shape[1])
        for st in range(0, x.shape[0], c):
            y[st : st + c] = (x[st : st + c] @ m.w1) @ m.w2
        return y
