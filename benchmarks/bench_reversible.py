"""Reversible family: a stack of additive coupling blocks (workload ``residual_stack``).

Swept: technique x depth x batch x device.  Held fixed: width=128 channels per half, hidden=256,
additive coupling, MLP blocks.
"""
from . import common

__all__ = ["ResidualStack", "ResidualStackPeers", "TECHNIQUES", "PEERS"]

TECHNIQUES = ["residual", "checkpoint_block", "reversible", "reversible_nosave"]
#: the third-party reversible stacks, beside memlab's reversible and the baseline, at one size
PEERS = ["residual", "reversible", "memcnn", "revlib"]


class ResidualStack(common.MemlabBenchmark):
    """One training step of ``depth`` coupling blocks on x [batch, 256]."""

    workload = "residual_stack"
    workload_params = ("depth", "batch", "width", "hidden", "coupling", "block")
    fixed = {"width": 128, "hidden": 256, "coupling": "additive", "block": "mlp"}
    params, param_names = common.class_params([
        ("technique", common.technique_list(TECHNIQUES, "residual_stack")),
        ("depth", [4, 16]),
        ("batch", [128, 512]),
        ("device", common.DEVICES),
    ])


class ResidualStackPeers(common.MemlabBenchmark):
    """MemCNN and RevLib beside memlab's reversible and residual stacks: 16 blocks on x [512, 256]."""

    workload = "residual_stack"
    workload_params = ("depth", "batch", "width", "hidden", "coupling", "block")
    fixed = {"width": 128, "hidden": 256, "coupling": "additive", "block": "mlp"}
    params, param_names = common.class_params([
        ("technique", PEERS),
        ("depth", [16]),
        ("batch", [512]),
        ("device", common.DEVICES),
    ])
