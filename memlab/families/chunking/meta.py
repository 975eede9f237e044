"""The chunking family's metadata: plain data, read by :func:`memlab.registry.family_meta` without
importing torch or memlab (the site, the advisor's time check and the asv benchmarks read it)."""

#: each technique's colour on the site, a name of :data:`memlab.site.colors.NAMED` ("baseline": grey)
COLORS = {
    "unchunked": "baseline", "checkpoint_chunk": "blue", "checkpoint_split_chunk": "red", "einsum_chunk": "green",
    "slice_accumulate": "orange", "slice_loop": "purple", "vmap_chunk": "brown",
}

#: the advisor's held-out time settings (``python -m memlab.advisor.time_check``): ``(entry label,
#: parameters)``, none a fitted time point; the baseline is 1 by definition, so its other entries'
TIME_HELD_OUT = (
    ("slice_loop", {"n": 4096, "d": 256, "hidden": 1024, "chunk_size": 512}),
    ("checkpoint_chunk", {"n": 16384, "d": 128, "hidden": 512, "chunk_size": 2048}),
    ("slice_accumulate[backward=manual]", {"n": 8192, "d": 256, "hidden": 1024, "chunk_size": 1024}),
    ("einsum_chunk[opt_einsum=false]", {"n": 4096, "d": 128, "hidden": 2048, "chunk_size": 256}),
    ("vmap_chunk", {"n": 16384, "d": 64, "hidden": 512, "chunk_size": 4096}),
    ("slice_accumulate[backward=autograd]", {"n": 8192, "d": 128, "hidden": 1024, "chunk_size": 512}),
)

#: the asv benchmark classes, by class name (``benchmarks/family_grid.py``).
#: ``unchunked`` has no chunk size and is measured once (at the first chunk_size).  Held fixed: n=2000
#: rows, d=256, hidden=1024 (the [2000, 1024] float32 hidden activation is 7.8 MiB); chunk sizes 2000,
#: 500, 200 are 1, 4 and 10 chunks.
BENCHMARKS = {
    "ChainedMatmul": {
        "doc": "One training step of ``(x @ w1) @ w2``, x [2000, 256], w1 [256, 1024], w2 [1024, 256].",
        "workload": "chained_matmul",
        "workload_params": ("n", "d", "hidden"),
        "fixed": {"n": 2000, "d": 256, "hidden": 1024},
        "techniques": ["unchunked", "slice_loop", "vmap_chunk", "einsum_chunk", "checkpoint_chunk",
                       "slice_accumulate", "checkpoint_split_chunk"],
        "params": [("chunk_size", [2000, 500, 200])],
    },
}

#: ``memlab bench-harness``'s load experiment (:mod:`memlab.measurement.harness_cost`): ``(position in
#: its table, technique, parameters)``, a size that takes seconds, not minutes
HARNESS_LOAD_POINTS = (
    (1, "slice_loop", {"n": 4000, "d": 256, "hidden": 1024, "chunk_size": 100}),
)

#: ``memlab bench-harness --limits``' points (:mod:`memlab.measurement.flop_limits`, issue 32):
#: ``(position in its table, technique, parameters)``; chunk n/100
LIMIT_POINTS = (
    (8, "slice_accumulate", {"n": 4000, "d": 256, "hidden": 1024, "chunk_size": 40}),
)

#: the site's footnotes under a figure that shows the technique (:mod:`memlab.site.notes`): shown when
#: a row of it has one of ``when`` (``"extra.KEY"`` truthy, ``"params.KEY"`` True; none: any row);
#: ``{KEY}`` in ``text`` is the first such row's ``extra[KEY]``, else ``fill[KEY]``
SITE_NOTES = {
    "einsum_chunk": {
        "when": ("extra.opt_einsum_used", "params.opt_einsum"),
        "text": "einsum_chunk with opt_einsum: opt_einsum reorders the contraction to {contraction_order}, computing "
                "w1 @ w2 (a [d, d] matrix) first instead of the [n, hidden] hidden layer, so its memory and speed "
                "reflect that reordering, not chunking; rows with opt_einsum=False contract in the written order.",
        "fill": {"contraction_order": "x @ (w1 @ w2)"},
    },
}
