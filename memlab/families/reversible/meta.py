"""The reversible family's metadata: plain data, read by :func:`memlab.registry.family_meta` without
importing torch or memlab (the site, the advisor's time check and the asv benchmarks read it)."""

#: each technique's colour on the site, a name of :data:`memlab.site.colors.NAMED` ("baseline": grey);
#: leaky_ctx_output is a reproduction's own technique
COLORS = {
    "residual": "baseline", "checkpoint_block": "blue", "reversible": "red", "reversible_nosave": "green",
    "memcnn": "orange", "revlib": "purple", "leaky_ctx_output": "brown",
}

#: the advisor's held-out time settings (``python -m memlab.advisor.time_check``): ``(entry label,
#: parameters)``, none a fitted time point
TIME_HELD_OUT = (
    ("checkpoint_block", {"depth": 32, "batch": 256, "width": 256, "hidden": 512}),
    ("reversible", {"depth": 16, "batch": 512, "width": 256, "hidden": 512}),
    ("reversible_nosave", {"depth": 32, "batch": 128, "width": 256, "hidden": 512}),
    ("reversible", {"depth": 24, "batch": 256, "width": 128, "hidden": 256}),
    ("checkpoint_block", {"depth": 8, "batch": 1024, "width": 128, "hidden": 256}),
)

#: the asv benchmark classes, by class name (``benchmarks/family_grid.py``).  Held
#: fixed: width=128 channels per half, hidden=256, additive coupling, MLP blocks.  The peers: the
#: third-party reversible stacks, beside memlab's reversible and the baseline, at one size.
BENCHMARKS = {
    "ResidualStack": {
        "doc": "One training step of ``depth`` coupling blocks on x [batch, 256].",
        "workload": "residual_stack",
        "workload_params": ("depth", "batch", "width", "hidden", "coupling", "block"),
        "fixed": {"width": 128, "hidden": 256, "coupling": "additive", "block": "mlp"},
        "techniques": ["residual", "checkpoint_block", "reversible", "reversible_nosave"],
        "params": [("depth", [4, 16]), ("batch", [128, 512])],
    },
    "ResidualStackPeers": {
        "doc": "MemCNN and RevLib beside memlab's reversible and residual stacks: 16 blocks on x [512, 256].",
        "workload": "residual_stack",
        "workload_params": ("depth", "batch", "width", "hidden", "coupling", "block"),
        "fixed": {"width": 128, "hidden": 256, "coupling": "additive", "block": "mlp"},
        "techniques": ["residual", "reversible", "memcnn", "revlib"],
        "plugins": False,
        "params": [("depth", [16]), ("batch", [512])],
    },
    # issue 44's sizes (x [128, 512], hidden 512): ``accumulate`` is a step option, sent to memlab.measure
    # as a setting keyword, skipped by time_step and, above 1, by memlab versions without it (NOTE [ step
    # options ] in benchmarks/common.py); a class of its own, so the classes above keep their history
    "ResidualStackAccumulate": {
        "doc": "Two micro-batches accumulated into .grad against one batch: depth blocks on x [128, 512], "
               "memlab's stacks and the peers.",
        "workload": "residual_stack",
        "workload_params": ("depth", "batch", "width", "hidden", "coupling", "block"),
        "fixed": {"batch": 128, "width": 256, "hidden": 512, "coupling": "additive", "block": "mlp"},
        "techniques": ["residual", "checkpoint_block", "reversible", "reversible_nosave", "memcnn", "revlib"],
        "plugins": False,
        "params": [("depth", [8, 32]), ("accumulate", [1, 2])],
    },
}

#: ``memlab bench-harness``'s load experiment (:mod:`memlab.measurement.harness_cost`): ``(position in
#: its table, technique, parameters)``, a size that takes seconds, not minutes
HARNESS_LOAD_POINTS = (
    (3, "reversible", {"depth": 16, "batch": 256, "width": 256, "hidden": 512}),
)

#: ``memlab bench-harness --limits``' points (:mod:`memlab.measurement.flop_limits`, issue 32):
#: ``(position in its table, technique, parameters)``; against ``residual``
LIMIT_POINTS = (
    (9, "reversible", {"depth": 16, "batch": 256, "width": 256, "hidden": 512}),
)

#: the site's footnotes under a figure that shows the technique (:mod:`memlab.site.notes`; the keys
#: as in the chunking folder's ``meta.py``)
SITE_NOTES = {
    "memcnn": {
        "text": "memcnn (peer): MemCNN 1.5.2's InvertibleModuleWrapper returns the input's gradient doubled when the "
                "input requires grad (a known defect; parameter gradients are right), so its rows fail the reference "
                "check and are listed under Not ranked, never called best.",
    },
}
