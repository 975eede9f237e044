"""The transformer family's metadata: plain data, read by :func:`memlab.registry.family_meta` without
importing torch or memlab (the site, the advisor's time check and the asv benchmarks read it)."""

#: each technique's colour on the site, a name of :data:`memlab.site.colors.NAMED` ("baseline": grey):
#: nine beside the baseline, and four for the peers
COLORS = {
    "eager_attention": "baseline", "sdpa": "blue", "sdpa_math": "red", "sdpa_flash": "green",
    "chunked_attention": "orange", "checkpoint_layer": "purple", "selective_checkpoint": "brown",
    "chunked_lm_loss": "navy", "autocast_bf16": "teal", "offload_activations": "gold",
    "torchtune_chunked_loss": "plum", "cut_cross_entropy": "crimson", "gpt2_hf": "forest",
    "gpt2_hf_checkpointing": "sienna",
}

#: the advisor's held-out time settings (``python -m memlab.advisor.time_check``): ``(entry label,
#: parameters)``.  layers is a size of its models (an outer loop): two settings at other layer
#: counts.  chunked_attention's query blocks: per-block costs repeat in every layer (chunk_cost_scale)
#: and split the attention's work (chunk_split_work); seq, batch and vocab none of the fitted time
#: sizes', 8 and 7 blocks (fitted: 1, 4, 16), at 4 layers (fitted: 2, 6, 24) and at 2
TIME_HELD_OUT = (
    ("checkpoint_layer", {"seq": 384, "batch": 2, "vocab": 1024, "layers": 2}),
    ("checkpoint_layer", {"seq": 128, "batch": 8, "vocab": 4096, "layers": 8}),
    ("selective_checkpoint", {"seq": 256, "batch": 8, "vocab": 1024, "layers": 2}),
    ("chunked_lm_loss", {"seq": 256, "batch": 2, "vocab": 4096, "chunk": 128, "layers": 2}),
    ("chunked_lm_loss", {"seq": 512, "batch": 2, "vocab": 2048, "chunk": 64, "layers": 4}),
    ("chunked_attention", {"seq": 320, "batch": 3, "vocab": 1536, "block": 40, "layers": 4}),
    ("chunked_attention", {"seq": 448, "batch": 2, "vocab": 2560, "block": 64, "layers": 2}),
)

#: the asv benchmark classes, by class name (``benchmarks/family_grid.py``).
#: ``Transformer``: a small decoder-only LM (2 layers, hidden 64, 4 heads, vocab 2048, batch 2).
#: ``TransformerPeers``: the third-party comparators (skipped where not installed) on the same step at
#: seq 256 only.  ``TransformerComplexity``: the exponent of the exact activation peak against seq at
#: 128, 256, 512 with heads 8 of size 2, so that the T² terms dominate the eager step.
BENCHMARKS = {
    "Transformer": {
        "doc": "One training step of a 2-layer decoder-only LM on tokens [2, seq], vocab 2048.",
        "workload": "transformer",
        "workload_params": ("layers", "seq", "batch", "hidden", "heads", "vocab"),
        "fixed": {"layers": 2, "batch": 2, "hidden": 64, "heads": 4, "vocab": 2048, "block": 32, "chunk": 128},
        "techniques": ["eager_attention", "sdpa", "chunked_attention", "checkpoint_layer", "selective_checkpoint",
                       "chunked_lm_loss", "autocast_bf16", "offload_activations"],
        "params": [("seq", [64, 256])],
    },
    "TransformerPeers": {
        "doc": "The third-party comparators on the same step (seq 256 only, to keep a run within its budget): "
               "torchtune's chunked loss (compare ``chunked_lm_loss``), cut-cross-entropy (CUDA only) and Hugging "
               "Face GPT-2 with and without its own checkpointing (compare ``checkpoint_layer`` / ``eager_attention``).",
        "workload": "transformer",
        "workload_params": ("layers", "seq", "batch", "hidden", "heads", "vocab"),
        "fixed": {"layers": 2, "batch": 2, "hidden": 64, "heads": 4, "vocab": 2048, "chunks": 8},
        "techniques": ["torchtune_chunked_loss", "cut_cross_entropy", "gpt2_hf", "gpt2_hf_checkpointing"],
        "plugins": False,
        "params": [("seq", [256])],
    },
    "TransformerComplexity": {
        "doc": "Log-log exponent of the activation peak against seq, per technique (CPU, exact bytes).",
        "kind": "complexity",
        "techniques": ["eager_attention", "sdpa_math", "sdpa_flash", "chunked_attention"],
        "size": "seq",
        "sizes": (128, 256, 512),
        "fixed": {"layers": 1, "batch": 1, "hidden": 16, "heads": 8, "vocab": 16},
        "metric": "track_seq_exponent",
    },
}
