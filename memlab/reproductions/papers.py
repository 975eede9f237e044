"""Helpers shared by the paper reproductions (in the family folders' ``reproductions/``; not a reproduction itself).

A paper page adds two optional keys to the reproduction contract (:mod:`memlab.reproductions`),
which the site renders generically:

* ``tables``: ``[{"id", "title", "columns": [str], "rows": [[cell]], "note"}]``, e.g. the paper's
  table beside memlab's; cells are strings, numbers or None;
* ``badges``: ``[{"name", "label", "text"}]``, a complexity badge per technique
  (:func:`memlab.core.complexity.badge`).
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from ..core.complexity import badge, fit_groups
from ..core.units import MiB

__all__ = ["activation", "mib", "ratio", "badges", "table", "BATCH_NOTE", "paper_report", "STEP_SOURCES",
           "in_backward_row", "adafactor_rows", "lora_rows", "STEP_COLUMNS"]

BATCH_NOTE = ("Activation bytes are linear in the batch (every saved map is [B, C, H, W]), so the activation "
              "ratios do not depend on it; time ratios depend on it only through how well small "
              "convolutions use the CPU.")


def activation(m) -> int | None:
    """The measured activation peak (bytes): saved activations + temporaries in forward and backward."""
    return None if m is None or m.status != "ok" else m.extra.get("activation_peak_bytes")


def mib(b: int | float | None, digits: int = 2) -> float | None:
    return None if b is None else round(b / MiB, digits)


def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    return None if a is None or b in (None, 0) else round(a / b, digits)


def badges(measurements: Iterable[Any], names: Iterable[str]) -> list[dict[str, Any]]:
    """A complexity badge per technique: exponent of the activation peak against blocks (3n)."""
    rows = [m.to_dict() for m in measurements]
    fits = fit_groups(rows, x=lambda r: r["extra"]["blocks"], y=lambda r: r["extra"]["activation_peak_bytes"])
    out = []
    for name in names:
        if name in fits:
            b = badge(fits[name])
            out.append({"name": name, "label": b.label, "text": b.text, "exponent": round(fits[name].exponent, 4),
                        "r2": round(fits[name].r2, 4), "span": fits[name].span})
    return out


def table(id_: str, title: str, columns: list[str], rows: list[list[Any]], note: str = "") -> dict[str, Any]:
    return {"id": id_, "title": title, "columns": columns, "rows": rows, "note": note}


def paper_report(verdict: str, summary: list[str], measurements: Iterable[Any], tables: list[dict[str, Any]],
                 figure: dict[str, Any], **more: Any) -> dict[str, Any]:
    """A paper page's report dict (the shape every paper reproduction writes): ``verdict``, ``summary``
    lines, the ``measurements`` as dicts, no timelines, its paper-and-ours ``tables`` and ``figure``;
    ``more``: the page's own keys (``badges``, ``badge_axis``, ``loss_heads``...)."""
    return {"verdict": verdict, "summary": summary, "measurements": [m.to_dict() for m in measurements],
            "timelines": [], "tables": tables, **more, "figure": figure}


# NOTE [ the whole-step techniques' sources ]
# A row per claim of the tutorial or paper behind each technique for gradients and optimizer state
# (docs/techniques-step.md): what it says is saved, its figure as its own formula evaluated on the
# measured model's parameter shapes (bytes), memlab's figure (exact bytes of a measurement), the gap
# and what the gap is.  Only figures a source's formula gives are stated: the tutorial states its
# saving as the gradients' memory; Adafactor (Shazeer & Stern 2018, section 3, factored second-moment
# estimation) keeps for an n x m weight matrix a row and a column accumulator, n + m numbers instead of
# Adam's n m second moment; LoRA (Hu et al. 2021, section 4.1, the update W0 + BA with B d x r and A r x k)
# trains r (d + k) numbers per adapted d x k weight, so gradients and Adam's two moments are of those.
# Evidence: tests/test_papers_step.py (each gap equals its named term to the byte, or is bounded)
STEP_SOURCES = {
    "in_backward": "PyTorch tutorial: How to save memory by fusing the optimizer step into the backward pass "
                   "(pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html)",
    "adafactor": "Shazeer & Stern 2018, Adafactor: Adaptive Learning Rates with Sublinear Memory Cost "
                 "(arXiv:1804.04235), section 3",
    "lora": "Hu et al. 2021, LoRA: Low-Rank Adaptation of Large Language Models (arXiv:2106.09685), section 4.1",
}
#: the columns of the whole-step sources' table
STEP_COLUMNS = ["source", "what it saves", "source's figure", "source's figure (B)", "memlab (B)", "gap (B)",
                "the gap"]


def in_backward_row(grad_bytes: int, plain_peak: int, hooked_peak: int, largest_grad: int) -> list[Any]:
    """The tutorial's row: its saving, the gradients' bytes ``grad_bytes``, beside the measured drop of the
    peak (``plain_peak - hooked_peak``, bytes, the same optimizer after and in backward); the gap is what
    stays live in backward (at least the gradient being applied, ``largest_grad`` bytes at most)."""
    drop = plain_peak - hooked_peak
    return [STEP_SOURCES["in_backward"], "gradients: each is applied and freed as backward produces it",
            "the gradients' memory (one set of the parameters' size)", grad_bytes, drop, grad_bytes - drop,
            f"in backward the gradient being applied (at most {largest_grad:,} B) and what backward still "
            f"holds (the saved inputs of the layers not reached yet) are live at the stepped peak"]


def adafactor_rows(shapes: list[tuple[tuple[int, ...], int]], measured_state: int, step_bytes: int) -> list[list[Any]]:
    """Adafactor's row: per weight matrix ``[..., n, m]`` (``shapes``: each parameter's shape and bytes
    per element) n + m factored second moments, against the measured ``optimizer_state`` (bytes) of
    ``torch.optim.Adafactor``; the gap is its ``step`` counter per parameter (``step_bytes``) and the full
    second moment it keeps for each vector."""
    factored = sum((math.prod(s) // s[-1] + math.prod(s) // s[-2]) * size for s, size in shapes if len(s) >= 2)
    adam = sum(2 * math.prod(s) * size for s, size in shapes)
    vectors = sum(math.prod(s) * size for s, size in shapes if len(s) < 2)
    counters = step_bytes * len(shapes)
    return [[STEP_SOURCES["adafactor"], "optimizer state: factored second moments",
             "n + m per n x m matrix (Adam: 2 n m)", factored, measured_state, measured_state - factored,
             f"torch.optim.Adafactor's step counter ({step_bytes} B per parameter: {counters:,} B) and the full "
             f"second moment of each vector ({vectors:,} B); Adam's two moments would be {adam:,} B"]]


def lora_rows(adapted: list[tuple[int, int]], rank: int, size: int, grads: int, state: int,
              step_bytes: int) -> list[list[Any]]:
    """LoRA's rows: ``rank * (d + k)`` trainable numbers per adapted ``d x k`` weight (``adapted``; ``size``
    bytes each) as the gradients, and Adam's two moments of them as the optimizer state, against the
    measured ``gradients`` and ``optimizer_state`` (bytes, after a step with the gradients kept); the state's
    gap is Adam's step counter per adapter tensor (two per adapted weight, ``step_bytes`` each)."""
    trainable = sum(rank * (d + k) for d, k in adapted) * size
    counters = step_bytes * 2 * len(adapted)
    return [[STEP_SOURCES["lora"], "gradients: of the adapters only", "r (d + k) per adapted d x k weight",
             trainable, grads, grads - trainable, "none: the gradients are the adapters'" if grads == trainable
             else "the measured gradients are not the adapters' alone"],
            [STEP_SOURCES["lora"], "optimizer state (Adam): of the adapters only", "2 r (d + k) per adapted weight",
             2 * trainable, state, state - 2 * trainable,
             f"Adam's step counter, {step_bytes} B per adapter tensor ({counters:,} B)"]]
