"""The resnet family's metadata: plain data, read by :func:`memlab.registry.family_meta` without
importing torch or memlab (the site, the advisor's time check and the asv benchmarks read it)."""

#: each technique's colour on the site, a name of :data:`memlab.site.colors.NAMED` ("baseline": grey)
COLORS = {
    "resnet": "baseline", "resnet_checkpoint_block": "blue", "resnet_checkpoint_sqrt": "red", "revnet": "green",
    "revnet_autograd": "orange", "revnet_nosave": "purple",
}

#: the advisor's held-out time settings (``python -m memlab.advisor.time_check``): ``(entry label,
#: parameters)``.  Width 16 and 8x8 images are fixed (ResNetAdvisorModel); the baseline (resnet) is 1
#: by definition, so the five are resnet_checkpoint_block at other depths and batches than 20x16, 32x64
TIME_HELD_OUT = (
    ("resnet_checkpoint_block", {"depth": 44, "batch": 64}),
    ("resnet_checkpoint_block", {"depth": 56, "batch": 32}),
    ("resnet_checkpoint_block", {"depth": 20, "batch": 256}),
    ("resnet_checkpoint_block", {"depth": 26, "batch": 128}),
    ("resnet_checkpoint_block", {"depth": 110, "batch": 16}),
)

#: the asv benchmark classes, by class name (``benchmarks/family_grid.py``): the
#: log-log exponent of the activation peak against depth (in blocks).  Held fixed (cheap: a few seconds
#: per technique): basic blocks, depths 26, 98, 386 (n = 4, 16, 64; 12 to 192 blocks), batch 1, width
#: 2, 8x8 inputs, CPU (the exponent comes from exact bytes; a device would only add allocator rounding).
BENCHMARKS = {
    "ResNetComplexity": {
        "doc": "Log-log exponent of activation memory against depth (in blocks), per technique (CPU, exact bytes).",
        "kind": "complexity",
        "techniques": ["resnet", "resnet_checkpoint_sqrt", "revnet", "resnet_checkpoint_block", "revnet_nosave",
                       "revnet_autograd"],
        "size": "depth",
        "sizes": (26, 98, 386),
        "fixed": {"block": "basic", "batch": 1, "width": 2, "image": 8},
        "x_extra": "blocks",
        "metric": "track_activation_exponent",
    },
}
