"""Tensor-train family: ``y = x @ W`` with W in TT format (workload ``tt_linear``).

Swept: technique x rank x batch x device.  ``dense`` does not depend on the rank and is measured
at the first rank only.  Held fixed: the workload's default modes (10, 10, 10) -> (10, 10, 10),
a 1000 x 1000 layer, and ``chunk_size=256`` rows for ``tt_chunked``.
"""
from . import common

__all__ = ["TTLinear", "TTLinearPeers", "TECHNIQUES", "PEERS"]

TECHNIQUES = ["dense", "tt_factorized", "tt_reconstructed", "tt_chunked"]
#: the report's own TT layer and tensorly-torch's, beside tt_factorized and the baseline, at one size
PEERS = ["dense", "tt_factorized", "tt_report_einsum", "tltorch_blocktt_factorized", "tltorch_blocktt_reconstructed"]


class TTLinear(common.MemlabBenchmark):
    """One training step of a 1000 x 1000 TT linear layer on x [batch, 1000]."""

    workload = "tt_linear"
    workload_params = ("batch", "rank")
    fixed = {"chunk_size": 256}
    ignored_by = {"rank": {"dense"}}
    params, param_names = common.class_params([
        ("technique", common.technique_list(TECHNIQUES, "tt_linear")),
        ("rank", [4, 16]),
        ("batch", [256, 1024]),
        ("device", common.DEVICES),
    ])


class TTLinearPeers(common.MemlabBenchmark):
    """The report's TT layer and tensorly-torch's beside ``tt_factorized`` and ``dense``: rank 8, x [1024, 1000]."""

    workload = "tt_linear"
    workload_params = ("batch", "rank")
    fixed = {}
    ignored_by = {"rank": {"dense"}}
    params, param_names = common.class_params([
        ("technique", PEERS),
        ("rank", [8]),
        ("batch", [1024]),
        ("device", common.DEVICES),
    ])
