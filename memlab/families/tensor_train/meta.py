"""The tensor_train family's metadata: plain data, read by :func:`memlab.registry.family_meta` without
importing torch or memlab (the site, the advisor's time check and the asv benchmarks read it)."""

#: each technique's colour on the site, a name of :data:`memlab.site.colors.NAMED` ("baseline": grey)
COLORS = {
    "dense": "baseline", "tt_chunked": "blue", "tt_factorized": "red", "tt_reconstructed": "green",
    "tt_report_einsum": "orange", "tltorch_blocktt_factorized": "purple", "tltorch_blocktt_reconstructed": "brown",
}

#: the advisor's held-out time settings (``python -m memlab.advisor.time_check``): ``(entry label,
#: parameters)``.  Rank and modes are fixed (TTLinearModel), so the batch and the chunk vary: larger
#: steps than the fitted 256 and 1,024 rows, other chunk counts than 1, 4, 16
TIME_HELD_OUT = (
    ("tt_factorized", {"batch": 4096}),
    ("tt_reconstructed", {"batch": 2048}),
    ("tt_chunked", {"batch": 2048, "chunk_size": 256}),
    ("tt_chunked", {"batch": 4096, "chunk_size": 512}),
    ("tt_chunked", {"batch": 8192, "chunk_size": 2048}),
)

#: the asv benchmark classes, by class name (``benchmarks/family_grid.py``).
#: ``dense`` does not depend on the rank and is measured at the first rank only.  Held fixed: the
#: workload's default modes (10, 10, 10) -> (10, 10, 10), a 1000 x 1000 layer, and ``chunk_size=256``
#: rows for ``tt_chunked``.  The peers: the report's own TT layer and tensorly-torch's, beside
#: tt_factorized and the baseline, at one size.
BENCHMARKS = {
    "TTLinear": {
        "doc": "One training step of a 1000 x 1000 TT linear layer on x [batch, 1000].",
        "workload": "tt_linear",
        "workload_params": ("batch", "rank"),
        "fixed": {"chunk_size": 256},
        "ignored_by": {"rank": {"dense"}},
        "techniques": ["dense", "tt_factorized", "tt_reconstructed", "tt_chunked"],
        "params": [("rank", [4, 16]), ("batch", [256, 1024])],
    },
    "TTLinearPeers": {
        "doc": "The report's TT layer and tensorly-torch's beside ``tt_factorized`` and ``dense``: rank 8, x [1024, 1000].",
        "workload": "tt_linear",
        "workload_params": ("batch", "rank"),
        "fixed": {},
        "ignored_by": {"rank": {"dense"}},
        "techniques": ["dense", "tt_factorized", "tt_report_einsum", "tltorch_blocktt_factorized",
                       "tltorch_blocktt_reconstructed"],
        "plugins": False,
        "params": [("rank", [8]), ("batch", [1024])],
    },
}

#: ``memlab bench-harness``'s load experiment (:mod:`memlab.measurement.harness_cost`): ``(position in
#: its table, technique, parameters)``, a size that takes seconds, not minutes
HARNESS_LOAD_POINTS = (
    (2, "tt_chunked", {"batch": 1024, "rank": 8, "chunk_size": 16}),
)

#: ``memlab bench-harness --limits``' points (:mod:`memlab.measurement.flop_limits`, issue 32):
#: ``(position in its table, technique, parameters)``; tensorly-torch's layer beside the family's own
LIMIT_POINTS = (
    (1, "tt_chunked", {"batch": 1024, "rank": 8, "chunk_size": 16}),
    (2, "tt_chunked", {"batch": 1024, "rank": 8, "chunk_size": 128}),
    (3, "tt_chunked", {"batch": 4096, "rank": 8, "chunk_size": 16}),
    (4, "tt_factorized", {"batch": 1024, "rank": 8}),
    (5, "tt_factorized", {"batch": 4096, "rank": 8}),
    (6, "tltorch_blocktt_factorized", {"batch": 1024, "rank": 8}),
    (7, "tltorch_blocktt_factorized", {"batch": 4096, "rank": 8}),
)
