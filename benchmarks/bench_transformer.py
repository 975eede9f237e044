"""Transformer family (workload ``transformer``): one training step per technique, and the seq exponent.

``Transformer``: technique x seq x device, the five memory and time figures of
:class:`common.MemlabBenchmark` for a small decoder-only LM (2 layers, hidden 64, 4 heads, vocab 2048,
batch 2: a step of well under a second on one core at seq 256).  ``TransformerComplexity``: the fitted
log-log exponent of the exact activation peak against ``seq`` (:func:`memlab.complexity.fit_exponent`)
at seq 128, 256, 512 with heads 8 of size 2, so that the T² terms dominate the eager step: ~2 for
``eager_attention`` and ``sdpa_math``, ~1 for ``chunked_attention``; ``sdpa_flash`` (this CPU build's
flash kernel) sizes its backward scratch by seq blocks, so its exponent is not a clean 1 (NOTE [ SDPA on
this CPU build ] in memlab/techniques/transformer.py).  A complexity regression (a path that
starts materialising the [T, T] scores) moves the exponent by ~1, which a single-seq figure can hide.
"""
from __future__ import annotations

from . import common

__all__ = ["Transformer", "TransformerPeers", "TransformerComplexity", "TECHNIQUES", "PEER_TECHNIQUES", "COMPLEXITY_TECHNIQUES",
           "SEQS"]

TECHNIQUES = ["eager_attention", "sdpa", "chunked_attention", "checkpoint_layer", "selective_checkpoint",
              "chunked_lm_loss", "autocast_bf16", "offload_activations"]
#: the peers (memlab.families.transformer.peers), skipped where not installed, and the two memlab
#: techniques they are compared with
PEER_TECHNIQUES = ["torchtune_chunked_loss", "cut_cross_entropy", "gpt2_hf", "gpt2_hf_checkpointing"]
COMPLEXITY_TECHNIQUES = ["eager_attention", "sdpa_math", "sdpa_flash", "chunked_attention"]
SEQS = (128, 256, 512)
COMPLEXITY_FIXED = {"layers": 1, "batch": 1, "hidden": 16, "heads": 8, "vocab": 16}


class Transformer(common.MemlabBenchmark):
    """One training step of a 2-layer decoder-only LM on tokens [2, seq], vocab 2048."""

    workload = "transformer"
    workload_params = ("layers", "seq", "batch", "hidden", "heads", "vocab")
    fixed = {"layers": 2, "batch": 2, "hidden": 64, "heads": 4, "vocab": 2048, "block": 32, "chunk": 128}
    params, param_names = common.class_params([
        ("technique", common.technique_list(TECHNIQUES, "transformer")),
        ("seq", [64, 256]),
        ("device", common.DEVICES),
    ])


class TransformerPeers(Transformer):
    """The third-party comparators on the same step (seq 256 only, to keep a run within its budget):
    torchtune's chunked loss (compare ``chunked_lm_loss``), cut-cross-entropy (CUDA only) and Hugging
    Face GPT-2 with and without its own checkpointing (compare ``checkpoint_layer`` / ``eager_attention``)."""

    fixed = {"layers": 2, "batch": 2, "hidden": 64, "heads": 4, "vocab": 2048, "chunks": 8}
    params, param_names = common.class_params([
        ("technique", list(PEER_TECHNIQUES)),
        ("seq", [256]),
        ("device", common.DEVICES),
    ])


class TransformerComplexity(common.ComplexityBenchmark):
    """Log-log exponent of the activation peak against seq, per technique (CPU, exact bytes)."""

    techniques, size, sizes, fixed = COMPLEXITY_TECHNIQUES, "seq", SEQS, COMPLEXITY_FIXED
    metric = "track_seq_exponent"
