"""Reproduction of Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models".

The paper (arXiv:2411.09009, ICLR 2025): the cross-entropy of a large-vocabulary LM materialises the
[tokens, vocab] logits, and for small models that one layer dominates training memory; Cut
Cross-Entropy never materialises them.  "Taking the Gemma 2 (2B) model as an example, CCE reduces
the memory footprint of the loss computation from 24 GB to 1 MB, and the total training-time memory
consumption of the classifier head from 28 GB to 1 GB" (8,192 tokens, vocabulary 256,000, hidden
2,304; A100).

memlab's ``chunked_lm_loss`` (:func:`memlab.families.transformer.lm_loss.chunked_lm_loss`) is the same idea at
a coarser grain: the LM head and the cross-entropy over ``chunk`` tokens at a time, saving only the
per-token log-sum-exp.  Its loss memory has an exact model (NOTE [ loss peak ] in
:mod:`memlab.families.transformer.bytes`), for N tokens, vocabulary V, hidden D, element size e:

    plain:    3·N·V·e + N·e          (log-softmax output, nll's input gradient, the logits' gradient)
    chunked:  c·V·e + c·D·e + 2·N·e  (one chunk's [c, V], its [c, D] input gradient, loss and lse)

The page measures both (a) the loss head alone, in this process, exactly, against the formula, and
(b) a one-layer model's whole training step (``eager_attention`` with the plain loss vs
``chunked_lm_loss``, memlab.measure) across vocab and tokens, scaled from the paper's size (hidden
2,304 -> 64, tokens 8,192 -> 256..1,024, vocab 256,000 -> 4,096..65,536; float32), then evaluates
the exact model at the paper's size.
"""
from __future__ import annotations

from typing import Any

import memlab
from memlab.reproductions.papers import activation, mib, paper_report, ratio, table

__all__ = ["SEED", "TITLE", "CLAIM", "reproduce", "report", "loss_head_peak", "configs", "paper_scale"]

SEED = "wijmans-2024-cut-your-losses"
TITLE = "Cut Your Losses in Large-Vocabulary Language Models (Wijmans et al. 2024): the loss's [tokens, vocab] memory"
CLAIM = ("Never materialising the [tokens, vocab] logits cuts the loss's memory for Gemma 2 (2B) from 24 GB to 1 MB, and "
         "the classifier head's training memory from 28 GB to 1 GB.")

#: the paper's example: tokens, vocabulary, hidden (Gemma 2 2B)
PAPER = {"tokens": 8192, "vocab": 256_000, "hidden": 2304}
CHUNK = 128


def configs(quick: bool) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """The fixed model and the (batch, vocab) points; tokens = batch·seq."""
    if quick:
        return {"layers": 1, "seq": 64, "hidden": 16, "heads": 2}, [(2, 1024), (2, 4096), (1, 4096)]
    base = {"layers": 1, "seq": 256, "hidden": 64, "heads": 4}
    return base, [(2, 4096), (2, 32000), (2, 65536), (1, 32000), (4, 32000)]


def plain_bytes(n: int, v: int, e: int = 4) -> int:
    """NOTE [ loss peak ]: the plain loss head's activation peak, bytes."""
    return 3 * n * v * e + n * e


def chunked_bytes(n: int, v: int, d: int, chunk: int, e: int = 4) -> int:
    """NOTE [ loss peak ]: the chunked loss head's activation peak, bytes."""
    c = min(chunk, n)
    return c * v * e + c * d * e + 2 * n * e


def loss_head_peak(kind: str, n: int, v: int, d: int, chunk: int = CHUNK, seed: int = 0) -> int:
    """The loss head's activation peak, measured: h [N, D] -> per-token loss [N], forward and backward,
    float32, live bytes above the start with the final gradients' storages left out (exact trace)."""
    import torch  # deferred: torch line

    from ..lm_loss import chunked_lm_loss, plain_lm_loss  # deferred: torch line
    from ..bytes import measured_loss_peak  # deferred: torch line

    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g).requires_grad_()
    w = (torch.randn(v, d, generator=g) / d ** 0.5).requires_grad_()
    tg, go = torch.randint(v, (n,), generator=g), torch.rand(n, generator=g)
    fn = plain_lm_loss if kind == "plain" else (lambda a, b, t: chunked_lm_loss(a, b, t, chunk=chunk))
    return measured_loss_peak(fn, h, w, tg, go)


def paper_scale(chunk: int, e: int = 4) -> dict[str, int]:
    """The exact model at the paper's size: loss peaks and the classifier's weight gradient, bytes."""
    n, v, d = PAPER["tokens"], PAPER["vocab"], PAPER["hidden"]
    return {"plain": plain_bytes(n, v, e), "chunked": chunked_bytes(n, v, d, chunk, e), "weight_grad": v * d * e,
            "hidden_grad": n * d * e}


def reproduce(quick: bool = False) -> dict[str, Any]:
    """Measure the loss head alone (in process) and the whole step (isolated), then :func:`report`."""
    base, points = configs(quick)
    opts = {"iterations": 1, "repeats": 2, "time_budget": 0.5}
    ms, heads = [], {}
    for batch, vocab in points:
        n = batch * base["seq"]
        ms.append(memlab.measure("eager_attention", batch=batch, vocab=vocab, **base, **opts))
        ms.append(memlab.measure("chunked_lm_loss", batch=batch, vocab=vocab, chunk=CHUNK, **base, **opts))
        heads[f"{n}x{vocab}"] = {k: loss_head_peak(k, n, vocab, base["hidden"]) for k in ("plain", "chunked")}
    return report(ms, quick, heads)


def _gb(b: float) -> float:
    """Bytes as GB (10^9), three decimals."""
    return round(b / 1e9, 3)


def _rows(base: dict[str, Any], points, measurements: list,
          heads: dict[str, dict[str, int]]) -> tuple[list[list[Any]], bool]:
    """``(memlab's table rows, whether every loss-head peak equals its exact model)``: per point
    ``(batch, vocab)``, the formulas and measured loss bytes and the whole step's activation peaks."""
    d = base["hidden"]
    got = {(m.technique, m.params["batch"], m.params["vocab"]): m for m in measurements}
    rows, exact = [], True
    for batch, vocab in points:
        n = batch * base["seq"]
        hp = heads.get(f"{n}x{vocab}", {})
        fp, fc = plain_bytes(n, vocab), chunked_bytes(n, vocab, d, CHUNK)
        exact &= hp.get("plain") == fp and hp.get("chunked") == fc
        pe, ce = activation(got.get(("eager_attention", batch, vocab))), activation(got.get(("chunked_lm_loss", batch, vocab)))
        cm = got.get(("chunked_lm_loss", batch, vocab))
        rel = round(cm.relative_step_time, 2) if cm is not None and cm.status == "ok" and cm.relative_step_time else None
        rows.append([n, vocab, fp, hp.get("plain"), fc, hp.get("chunked"), ratio(hp.get("plain"), hp.get("chunked"), 1),
                     mib(pe), mib(ce), ratio(pe, ce), rel])
    return rows, exact


def _paper_table(big: dict[int, dict[str, int]]) -> dict[str, Any]:
    """The paper's figures beside the exact model at the paper's size (``big``: :func:`paper_scale` by chunk)."""
    wg16 = PAPER["vocab"] * PAPER["hidden"] * 2
    gb = _gb
    paper_rows = [["paper: PyTorch loss", "24 GB", "28 GB", "", ""],
                  ["paper: Cut Cross-Entropy", "1 MB", "1 GB", "", ""]]
    p = big[CHUNK]
    paper_rows.append(["memlab model: plain loss", f"{gb(p['plain'])} GB", f"{gb(p['plain'] + p['weight_grad'])} GB",
                       f"{gb(p['plain'] + wg16)} GB", ""])
    for c in (1, CHUNK, 1024):
        q = big[c]
        paper_rows.append([f"memlab model: chunked loss, chunk {c}", f"{round(q['chunked'] / 1e6, 3)} MB",
                           f"{gb(q['chunked'] + q['weight_grad'])} GB", f"{gb(q['chunked'] + wg16)} GB",
                           round(q["plain"] / q["chunked"], 1)])
    paper = table("paper", "At the paper's size (Gemma 2 2B: 8,192 tokens, vocab 256,000, hidden 2,304), from the exact model",
                  ["loss", "loss memory", "classifier head (loss + weight gradient, float32)",
                   "classifier head (weight gradient in bfloat16)", "loss ratio plain / chunked"], paper_rows,
                  "memlab model: the formulas above (float32 logits, e = 4), measured exact at memlab's sizes, evaluated "
                  "at the paper's; the head adds the classifier's weight gradient V·D (every method produces it: "
                  f"{gb(p['weight_grad'])} GB in float32, {gb(wg16)} GB in bfloat16). A prediction, not a measurement.")
    return paper


def _summary(rows: list[list[Any]], exact: bool, big: dict[int, dict[str, int]]) -> str:
    """The page's summary: the exact-model check, the ratios, the paper's size and the caveat."""
    wg16 = PAPER["vocab"] * PAPER["hidden"] * 2
    gb, p, q1 = _gb, big[CHUNK], big[1]
    summary = " ".join([
        f"Claim: {CLAIM}",
        "Exact model: memlab's loss memory equals its exact model at every measured point, to the byte: " + ("yes" if exact else "NO")
        + f" (plain 3·N·V·e + N·e, chunked c·V·e + c·D·e + 2·N·e; {len(rows)} points, N {min(r[0] for r in rows)} to "
          f"{max(r[0] for r in rows)}, V {min(r[1] for r in rows):,} to {max(r[1] for r in rows):,}).",
        "Loss ratio plain / chunked (chunk " + str(CHUNK) + "): " + "; ".join(f"N {r[0]}, V {r[1]:,}: {r[6]}x" for r in rows)
        + "; the whole step's activation peak: " + "; ".join(f"{r[9]}x" for r in rows) + ".",
        f"At the paper's size: the exact model predicts the plain loss at {gb(p['plain'])} GB (paper: 24 GB) and the "
        f"head with its float32 weight gradient at {gb(p['plain'] + p['weight_grad'])} GB (paper: 28 GB); the chunked "
        f"loss at {round(big[CHUNK]['chunked'] / 1e6, 1)} MB with chunk {CHUNK} ({round(big[CHUNK]['plain'] / big[CHUNK]['chunked'])}x "
        f"less) and {round(q1['chunked'] / 1e6, 2)} MB with chunk 1 (paper's CCE: 1 MB; {round(q1['plain'] / q1['chunked']):,}x), "
        f"the head then being its weight gradient: {gb(wg16)} GB in bfloat16 (paper: 1 GB).",
        "Caveat: CPU, float32, small hidden; memlab's chunks materialise [chunk, V] in memory where CCE keeps its "
        "blocks in on-chip SRAM, so memlab reaches CCE's 1 MB only at chunk 1 (at a large time cost); the paper's GB "
        "are GPU measurements with their own dtype choices.",
    ])
    return summary


def report(measurements: list, quick: bool, heads: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The page's data: whole-step rows (Measurement objects) and the loss-head peaks by ``"NxV"``."""
    base, points = configs(quick)
    d = base["hidden"]
    rows, exact = _rows(base, points, measurements, heads)
    ours = table("memlab", "memlab: loss memory and the whole step's activation peak, plain vs chunked",
                 ["tokens N", "vocab V", "plain formula, bytes", "plain measured, bytes", "chunked formula, bytes",
                  "chunked measured, bytes", "loss ratio (plain / chunked)", "step: plain activation MiB",
                  "step: chunked activation MiB", "step ratio", "chunked step time / plain step"], rows,
                 f"CPU, float32, hidden {d}, chunk {CHUNK} tokens. Loss columns: the loss head alone (h [N, D] -> "
                 "per-token loss, forward and backward, the final gradients excluded), exact allocation trace, "
                 "beside plain = 3·N·V·e + N·e and chunked = c·V·e + c·D·e + 2·N·e (e = 4). Step columns: a one-layer "
                 f"model (seq {base['seq']}, heads {base['heads']}), its activation peak (memlab.measure), and the relative "
                 "step time (thread CPU time, one thread, against eager_attention with the plain loss).")
    big = {c: paper_scale(c) for c in (1, CHUNK, 1024)}
    paper = _paper_table(big)
    # the bar: >= 10x less loss memory at vocab 32,000 (N = 4 chunks or more: the ratio is about 3N/c)
    at32 = [r for r in rows if r[1] == 32000 and r[0] >= 4 * CHUNK and r[6] is not None]
    ten = all(r[6] >= 10 for r in at32) and bool(at32)
    verdict = "reproduced" if exact and ten else "reproduced with caveat" if exact else "not reproduced on this device"
    summary = _summary(rows, exact, big)
    vs = [r for r in rows if r[0] == 2 * base["seq"]]
    return paper_report(verdict, summary, measurements, [paper, ours],
                        {"type": "line", "title": f"Loss memory against vocabulary ({2 * base['seq']} tokens; log-log)",
                         "x_label": "vocabulary size", "y_label": "loss memory, MiB", "x": [r[1] for r in vs],
                         "series": {"eager_attention (plain loss)": [mib(r[3]) for r in vs],
                                    "chunked_lm_loss": [mib(r[5]) for r in vs]},
                         "log_x": True, "log_y": True},
                        loss_heads=heads)
