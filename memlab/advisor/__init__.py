"""The advisor: memory models of each technique from exact traces, and ``memlab advise`` over them.

``memlab advise --family chunking --budget 2GiB --param n=400000 ...`` answers from the committed
models in ``data/models/`` (torch is not imported); ``memlab advise --fit`` (``make models``)
rebuilds them.  See NOTE [ advisor models ] in :mod:`memlab.advisor.model`.
"""
from __future__ import annotations

from .advise import AdviceError, advise, format_advice, format_verify, parse_budget, verify
from ..core.declaration import AdvisorModel, Chunks, ChunksOf, Count, Declaration, Entry, NoLoop, ProductChunks, Repeated
from .model import load_models, predict, predict_time
from .fit import fit_all as impl

__all__ = ["AdvisorModel", "Entry", "NoLoop", "Chunks", "ChunksOf", "ProductChunks", "Repeated", "Count", "Declaration", "AdviceError", "advise", "format_advice", "format_verify", "parse_budget", "verify", "load_models",
           "predict", "predict_time", "fit_all"]


def fit_all(*args, **kwargs):
    """Fit and write the models (see :func:`memlab.advisor.fit.fit_all`; imports torch)."""
    return impl(*args, **kwargs)
