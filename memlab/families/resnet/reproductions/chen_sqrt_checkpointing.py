"""Reproduction of Chen, Xu, Zhang, Guestrin 2016, "Training Deep Nets with Sublinear Memory Cost".

The paper (arXiv:1604.06174): keeping only every sqrt(n)-th layer's output and recomputing the rest
in backward gives O(sqrt(n)) activation memory for one extra forward; their 1000-layer ResNet went
from 48 GB to 7 GB of memory (about 6.9x) for about 30% more time.

memlab measures the CIFAR ResNet of :mod:`memlab.families.resnet.workload` (basic blocks, 6n+2 layers) at
a small width over depths spanning 16x in blocks, with three techniques: plain autograd, a
``torch.utils.checkpoint`` per block, and ``checkpoint_sequential`` with round(sqrt(blocks))
segments; plus a 1001-layer bottleneck ResNet (9n+2, n = 111), the paper's depth.  Columns:

* activation peak: ``extra["activation_peak_bytes"]``, the highest saved activations + temporaries
  during forward and backward (exact CPU allocation trace; parameters, gradients, inputs excluded);
* memory ratio: plain's activation peak / the technique's (the paper's 48 GB / 7 GB is a total of
  a GPU run, of which feature maps are the bulk);
* time ratio: ``relative_step_time``, the technique's training step over the plain step interleaved
  with it in the same process (the paper's "+30%" is 1.30).
"""
from __future__ import annotations

from typing import Any

import memlab
from memlab.reproductions.papers import activation, badges, mib, paper_report, ratio, table

__all__ = ["SEED", "TITLE", "CLAIM", "reproduce", "report"]

SEED = "chen-2016-sqrt-checkpointing"
TITLE = "Training Deep Nets with Sublinear Memory Cost (Chen et al. 2016): sqrt(n) checkpointing"
CLAIM = ("Checkpointing every sqrt(n) layers makes activation memory O(sqrt n) for one extra forward: a "
         "1000-layer ResNet from 48 GB to 7 GB (6.9x) at about 30% more time.")

TECHNIQUES = ("resnet", "resnet_checkpoint_block", "resnet_checkpoint_sqrt")
LABELS = {"resnet": "plain", "resnet_checkpoint_block": "per-block", "resnet_checkpoint_sqrt": "sqrt(n)"}


def _configs(quick: bool) -> tuple[dict[str, Any], tuple[int, ...], dict[str, Any] | None]:
    if quick:
        return {"batch": 2, "width": 4, "image": 16}, (26, 98), None
    # n = 6, 24, 96 blocks per stage: 18 .. 288 blocks (16x); ResNet-1001 as the paper's depth
    return ({"batch": 4, "width": 4, "image": 32}, (38, 146, 578),
            {"depth": 1001, "block": "bottleneck", "batch": 4, "width": 4, "image": 32})


def reproduce(quick: bool = False) -> dict[str, Any]:
    """Measure plain, per-block and sqrt(n) checkpointing over the depths, then :func:`report`."""
    cfg, depths, deep = _configs(quick)
    opts = {"iterations": 2, "repeats": 3, "time_budget": 1.0}
    measurements = [memlab.measure(name, depth=depth, **cfg, **opts) for depth in depths for name in TECHNIQUES]
    if deep is not None:
        measurements += [memlab.measure(name, **deep, **opts) for name in TECHNIQUES]
    return report(measurements, quick)


def _row(label: str, depth: int, ms: dict[str, Any]) -> list[Any]:
    """One row of memlab's table: the network, its layers and blocks, then per technique of
    :data:`TECHNIQUES` its activation peak (MiB), plain's over it, and its relative step time."""
    plain = activation(ms["resnet"])
    blocks = ms["resnet"].extra.get("blocks") if ms["resnet"].status == "ok" else None
    cells = [label, depth, blocks]
    for name in TECHNIQUES:
        a = activation(ms[name])
        rel = ms[name].relative_step_time if ms[name].status == "ok" else None
        cells += [mib(a), ratio(plain, a), None if rel is None else round(rel, 2)]
    return cells


def _tables(cfg: dict[str, Any], depths, deep, series_rows, deep_rows) -> tuple[list[list[Any]], dict, dict]:
    """``(memlab's rows, the paper's table, memlab's table)``: a row per depth of ``series_rows``
    (technique -> depth -> measurement), and the deep network's from ``deep_rows`` when measured."""
    columns = ["network", "layers", "blocks"]
    for name in TECHNIQUES:
        lab = LABELS[name]
        columns += [f"{lab} activation MiB", f"{lab} memory ratio (plain / this)", f"{lab} time ratio (this / plain)"]
    rows = [_row(f"ResNet-{d} (basic)", d, {n: series_rows[n][d] for n in TECHNIQUES}) for d in depths]
    if deep_rows:
        rows.append(_row("ResNet-1001 (bottleneck)", deep["depth"], deep_rows))
    paper = table("paper", "The paper's figure (Chen et al. 2016, 1000-layer ResNet)",
                  ["network", "layers", "plain memory", "sqrt(n) memory", "memory ratio", "time ratio"],
                  [["ResNet (paper)", 1000, "48 GB", "7 GB", 6.9, 1.30]],
                  "GPU totals as reported; the ratio 48/7 = 6.9 and '+30% time' = 1.30.")
    ours = table("memlab", "memlab: activation peak and ratios by depth (CPU, exact)", columns, rows,
                 f"CPU, float32, batch {cfg['batch']}, width {cfg['width']}, {cfg['image']}x{cfg['image']} inputs; "
                 "activation MiB = the measured activation peak (saved activations + temporaries in forward "
                 "and backward); memory ratio = plain's activation peak / this technique's; time ratio = this "
                 "technique's training step / the plain step interleaved with it (relative_step_time).")
    return rows, paper, ours


def _summary(depths, series_rows, rows: list[list[Any]], badge_list: list[dict[str, Any]]) -> tuple[str, str]:
    """``(verdict, summary)``: the exponents of ``badge_list`` and the ratios of the deepest row."""
    by = {b["name"]: b for b in badge_list}
    last = rows[-1]
    sqrt_mem, sqrt_time = last[3 + 3 * 2 + 1], last[3 + 3 * 2 + 2]
    block_mem, block_time = last[3 + 3 + 1], last[3 + 3 + 2]
    sq = by.get("resnet_checkpoint_sqrt", {})
    exponent_ok = abs(sq.get("exponent", 9) - 0.5) <= 0.1
    memory_ok = exponent_ok and bool(sqrt_mem) and sqrt_mem >= 3
    time_ok = bool(sqrt_time) and sqrt_time <= 1.6
    verdict = "reproduced" if memory_ok and time_ok else "reproduced with caveat" if memory_ok else "not reproduced on this device"
    summary = " ".join([
        f"Claim: {CLAIM}",
        f"Activation memory against depth ({depths[0]} to {depths[-1]} layers, "
        f"{series_rows['resnet'][depths[0]].extra.get('blocks')} to {series_rows['resnet'][depths[-1]].extra.get('blocks')} "
        "blocks; log-log fit): " + "; ".join(f"{LABELS[b['name']]} {b['text']}" for b in badge_list) + ".",
        f"At {last[0]}: sqrt(n) checkpointing keeps {sqrt_mem}x less activation memory than plain autograd at "
        f"{sqrt_time}x its step time; per-block checkpointing {block_mem}x at {block_time}x.",
        "The paper: 6.9x at 1.30x for a 1000-layer ResNet. The memory ratio grows like sqrt(blocks), so it "
        "depends on depth (and, in a GPU total, on what else is counted): the memory claim is reproduced."
        + ("" if time_ok else " The time ratio is not: the extra compute is one forward (about 4/3 of a step), "
           "but at this small width a step is dominated by per-operation overhead, which checkpointing's "
           "per-segment bookkeeping and recomputation multiply (the ratio is the measuring thread's CPU time "
           "at one intra-op thread, so other jobs on the machine do not move it); read memlab's time column as "
           "an upper bound for small networks, not as the paper's GPU figure."),
        "Caveat: CPU, small width and batch (exact bytes; the ratios do not depend on the batch); the paper's "
        "figures are GPU totals with its own memory planner.",
    ])
    return verdict, summary


def report(measurements: list, quick: bool = False) -> dict[str, Any]:
    """The page's data from the measurements :func:`reproduce` took (``Measurement`` objects)."""
    cfg, depths, deep = _configs(quick)
    series_rows: dict[str, dict[int, Any]] = {}
    deep_rows = {}
    for m in measurements:
        if deep is not None and m.params.get("block") == deep["block"]:
            deep_rows[m.technique] = m
        else:
            series_rows.setdefault(m.technique, {})[m.params["depth"]] = m
    rows, paper, ours = _tables(cfg, depths, deep, series_rows, deep_rows)
    fit_ms = [m for name in TECHNIQUES for m in series_rows[name].values()]
    badge_list = badges(fit_ms, TECHNIQUES)
    verdict, summary = _summary(depths, series_rows, rows, badge_list)
    series = {f"{LABELS[n]} activation": [mib(activation(series_rows[n][d])) for d in depths] for n in TECHNIQUES}
    blocks = [series_rows["resnet"][d].extra.get("blocks", d) for d in depths]
    return paper_report(verdict, summary, measurements, [paper, ours],
                        {"type": "line", "title": "Activation peak against depth (log-log: the slope is the exponent)",
                         "x_label": "residual blocks (3n)", "y_label": "activation peak, MiB", "x": blocks,
                         "series": series, "log_x": True, "log_y": True},
                        badges=badge_list)
