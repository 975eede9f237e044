"""Chunking family: ``y = (x @ w1) @ w2`` (workload ``chained_matmul``) over row-chunk sizes.

Swept: technique x chunk_size x device.  ``unchunked`` has no chunk size and is measured once
(at the first chunk_size).  Held fixed: n=2000 rows, d=256, hidden=1024 (the [2000, 1024] float32
hidden activation is 7.8 MiB); chunk sizes 2000, 500, 200 are 1, 4 and 10 chunks.
"""
from . import common

__all__ = ["ChainedMatmul", "TECHNIQUES"]

TECHNIQUES = ["unchunked", "slice_loop", "vmap_chunk", "einsum_chunk", "checkpoint_chunk",
              "slice_accumulate", "checkpoint_split_chunk"]


class ChainedMatmul(common.MemlabBenchmark):
    """One training step of ``(x @ w1) @ w2``, x [2000, 256], w1 [256, 1024], w2 [1024, 256]."""

    workload = "chained_matmul"
    workload_params = ("n", "d", "hidden")
    fixed = {"n": 2000, "d": 256, "hidden": 1024}
    params, param_names = common.class_params([
        ("technique", common.technique_list(TECHNIQUES, "chained_matmul")),
        ("chunk_size", [2000, 500, 200]),
        ("device", common.DEVICES),
    ])
