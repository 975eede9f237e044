"""One colour per technique, a function of its name alone (NOTE [ one visual language ] in
:mod:`memlab.site.figures`).

memlab's own techniques have fixed colours (:data:`BUILTIN_COLORS`: each family's baseline grey, its
other techniques distinct within the family); any other name (a plug-in's, a test's) takes one of
:data:`HASHED_COLORS`, chosen by a stable hash of the name, so it never moves a built-in's colour,
never takes one of them and is never the baselines' grey.  The same name has the same colour on
every page of every build, whatever else the build reads.  The site never imports torch, so the
built-in names are listed here; a test checks the list against the registry.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

__all__ = ["BASELINE_COLOR", "BUILTIN_COLORS", "HASHED_COLORS", "PALETTE", "technique_color", "technique_colors"]

#: The no-savings baseline of a built-in family, on every chart.
BASELINE_COLOR = "#7f7f7f"
_BLUE, _RED, _GREEN, _ORANGE, _PURPLE, _BROWN = "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"
#: three more for the family with nine techniques beside its baseline (transformer)
_NAVY, _TEAL, _GOLD = "#08306b", "#006d5b", "#b8860b"
#: and four for its peers (torchtune, cut-cross-entropy, Hugging Face GPT-2 with and without checkpointing)
_PLUM, _CRIMSON, _FOREST, _SIENNA = "#762a83", "#a50f15", "#00441b", "#a6611a"
#: memlab's techniques (and the reproductions' own), per family; the colours they had before plug-ins
#: could move them.
BUILTIN_COLORS: dict[str, str] = {
    # chunking
    "unchunked": BASELINE_COLOR, "checkpoint_chunk": _BLUE, "checkpoint_split_chunk": _RED, "einsum_chunk": _GREEN,
    "slice_accumulate": _ORANGE, "slice_loop": _PURPLE, "vmap_chunk": _BROWN,
    # tensor_train
    "dense": BASELINE_COLOR, "tt_chunked": _BLUE, "tt_factorized": _RED, "tt_reconstructed": _GREEN,
    "tt_report_einsum": _ORANGE, "tltorch_blocktt_factorized": _PURPLE, "tltorch_blocktt_reconstructed": _BROWN,
    # reversible (leaky_ctx_output: a reproduction's own technique)
    "residual": BASELINE_COLOR, "checkpoint_block": _BLUE, "reversible": _RED, "reversible_nosave": _GREEN,
    "memcnn": _ORANGE, "revlib": _PURPLE, "leaky_ctx_output": _BROWN,
    # resnet
    "resnet": BASELINE_COLOR, "resnet_checkpoint_block": _BLUE, "resnet_checkpoint_sqrt": _RED, "revnet": _GREEN,
    "revnet_autograd": _ORANGE, "revnet_nosave": _PURPLE,
    # transformer
    "eager_attention": BASELINE_COLOR, "sdpa": _BLUE, "sdpa_math": _RED, "sdpa_flash": _GREEN,
    "chunked_attention": _ORANGE, "checkpoint_layer": _PURPLE, "selective_checkpoint": _BROWN,
    "chunked_lm_loss": _NAVY, "autocast_bf16": _TEAL, "offload_activations": _GOLD,
    "torchtune_chunked_loss": _PLUM, "cut_cross_entropy": _CRIMSON, "gpt2_hf": _FOREST, "gpt2_hf_checkpointing": _SIENNA,
}
#: Colours for every other technique: none a built-in's, none grey.
HASHED_COLORS = ("#e377c2", "#17becf", "#bcbd22", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173",
                 "#3182bd", "#e6550d")
#: Every colour a technique may take but the baselines' grey (the browser test: no other series in one).
PALETTE = (_BLUE, _RED, _GREEN, _ORANGE, _PURPLE, _BROWN, _NAVY, _TEAL, _GOLD, _PLUM, _CRIMSON, _FOREST,
           _SIENNA) + HASHED_COLORS


def technique_color(name: str) -> str:
    """``name``'s colour: its fixed one when built in, else one of :data:`HASHED_COLORS` by a stable
    hash of the name (sha256: the same in every process, unlike ``hash()``)."""
    if name in BUILTIN_COLORS:
        return BUILTIN_COLORS[name]
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()
    return HASHED_COLORS[int.from_bytes(digest[:4], "big") % len(HASHED_COLORS)]


def technique_colors(names: Iterable[str]) -> dict[str, str]:
    """``{name: technique_color(name)}`` for every name, in sorted order."""
    return {n: technique_color(n) for n in sorted(set(names))}
