"""The sources behind the techniques for gradients and optimizer state, beside memlab's exact bytes:
PyTorch's optimizer-in-backward tutorial, Adafactor (Shazeer & Stern 2018) and LoRA (Hu et al. 2021)
(NOTE [ the whole-step techniques' sources ] in :mod:`memlab.reproductions.papers`).

::

    python -m memlab.reproductions.step_papers [--quick] [--out data/reproductions]

writes ``<out>/step-techniques-sources.json`` in the reproduction contract (:mod:`memlab.reproductions`),
which the site renders as a paper page (its ``tables``).  It is not a family's seed reproduction (these
techniques are options of every family's step, and LoRA the model-file family's), so ``memlab
reproduce`` does not list it; this module writes it.

One model file, written here: a stack of ``nn.Linear(W, W)`` layers with biases at batch 1, so that the
gradients dominate the step (the optimizer-in-backward saving shows only where gradients are live at
the peak: docs/techniques-step.md).  The sources' figures are their formulas on its parameter shapes.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from . import run_one
from ..registry import forget_plugin
from .papers import STEP_COLUMNS, adafactor_rows, in_backward_row, lora_rows, paper_report, table

__all__ = ["SEED", "TITLE", "CLAIM", "MODEL", "SIZES", "reproduce", "main"]

SEED = "step-techniques-sources"
TITLE = "Gradients and optimizer state: the tutorial's and the papers' figures beside memlab's bytes"
CLAIM = ("Stepping the optimizer in backward saves the gradients' memory; Adafactor keeps n + m second moments per "
         "n x m matrix; LoRA trains r (d + k) numbers per adapted d x k weight")

#: the measured model file: ``layers`` linear layers ``width`` wide, with biases (vectors: Adafactor's full moments)
MODEL = '''import torch
from torch import nn

LAYERS, WIDTH = {layers}, {width}


def build():
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])


def batch(size):
    return torch.randn(size, WIDTH)
'''
#: (layers, width) of the model, quick and full; the LoRA rank
SIZES = {True: (8, 32), False: (64, 256)}
RANK = 8
#: every torch.optim step counter: a float32 0-d tensor (bytes)
STEP_BYTES = 4
_RUN = {"batch": 1, "iterations": 2, "repeats": 1, "time_budget": 0, "check": False}


def _shapes(path: Path) -> tuple[list[tuple[tuple[int, ...], int]], list[tuple[int, int]]]:
    """``(each parameter's shape and bytes per element, each nn.Linear's (out, in))`` of the model file."""
    from torch import nn  # deferred: torch line

    spec = importlib.util.spec_from_file_location("memlab_step_sources_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build()
    params = [(tuple(p.shape), p.element_size()) for p in model.parameters()]
    linears = [(m.out_features, m.in_features) for m in model.modules() if isinstance(m, nn.Linear)]
    return params, linears


def reproduce(quick: bool = False) -> dict[str, Any]:
    """Measure the model file (isolated, exact CPU bytes) as each source's claim needs and lay the
    sources' figures beside memlab's (bytes)."""
    from ..own_model import measure_model  # deferred: torch line

    layers, width = SIZES[quick]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "linear_stack.py"
        path.write_text(MODEL.format(layers=layers, width=width))
        try:
            shapes, linears = _shapes(path)
            runs = {"plain": measure_model(path, "plain", optimizer="sgd_momentum", **_RUN),
                    "in_backward": measure_model(path, "plain", optimizer="sgd_momentum_in_backward", **_RUN),
                    "adafactor": measure_model(path, "plain", optimizer="adafactor", **_RUN),
                    "lora": measure_model(path, "lora", rank=RANK, optimizer="adam", grads="zero", **_RUN)}
        finally:  # the folder goes: a later isolated measurement must not hand its file to a child
            forget_plugin(path)
    bad = {k: m.error for k, m in runs.items() if m.status != "ok"}
    if bad:
        raise RuntimeError(f"step sources: measurements not ok: {bad}")
    grads = sum(size * math.prod(s) for s, size in shapes)
    rows = [in_backward_row(grads, runs["plain"].peak_allocated_bytes, runs["in_backward"].peak_allocated_bytes,
                            max(size * math.prod(s) for s, size in shapes)),
            *adafactor_rows(shapes, runs["adafactor"].end_by_category_bytes["optimizer_state"], STEP_BYTES),
            *lora_rows(linears, RANK, shapes[0][1], runs["lora"].end_by_category_bytes["gradients"],
                       runs["lora"].end_by_category_bytes["optimizer_state"], STEP_BYTES)]
    vectors = sum(size * math.prod(s) for s, size in shapes if len(s) < 2)
    explained = [0 < rows[0][4] <= grads, rows[1][5] == STEP_BYTES * len(shapes) + vectors, rows[2][5] == 0,
                 rows[3][5] == STEP_BYTES * 2 * len(linears)]  # each gap is its named term (in backward: a bound)
    verdict = "reproduced" if all(explained) else "reproduced with caveat"
    return _report(verdict, rows, list(runs.values()), layers, width)


def _report(verdict: str, rows: list[list[Any]], measurements: list[Any], layers: int, width: int) -> dict[str, Any]:
    """The report dict (:func:`~memlab.reproductions.papers.paper_report`) of ``rows`` (``STEP_COLUMNS``)."""
    what = f"{layers} nn.Linear({width}, {width}) layers with biases, batch 1, float32, CPU, exact allocation bytes"
    summary = " ".join([f"Model: {what}."] + [f"{r[1]}: {r[0].split(',')[0].split(':')[0]} gives {r[3]:,} B, memlab "
                                              f"{r[4]:,} B (gap {r[5]:,} B: {r[6]})." for r in rows])
    figure = {"type": "bar", "title": "The sources' figures and memlab's bytes", "x_label": "claim",
              "y_label": "bytes", "x": [r[1].split(":")[0] + f" ({i + 1})" for i, r in enumerate(rows)],
              "series": {"source's figure": [r[3] for r in rows], "memlab": [r[4] for r in rows]},
              "log_x": False, "log_y": False}
    return paper_report(verdict, summary, measurements,
                        [table("sources", "The tutorial's and the papers' figures beside memlab's", STEP_COLUMNS, rows,
                               note=f"{what}; the sources' figures are their formulas on the model's parameter "
                                    "shapes (NOTE [ the whole-step techniques' sources ] in "
                                    "memlab/reproductions/papers.py)")], figure)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memlab.reproductions.step_papers", description=TITLE)
    ap.add_argument("--quick", action="store_true", help=f"the small model ({SIZES[True]} layers, width)")
    ap.add_argument("--out", type=Path, default=Path("data/reproductions"), help="folder of the written JSON")
    args = ap.parse_args(argv)
    print(run_one(sys.modules[__name__], args.out, quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
