"""Reproduction of the tt-layer report: the factorized TT layer uses more memory than a dense layer.

The report (``shared/seeds/tt-layer-memory.txt``): a TT layer of three cores (modes d, rank r) holds
``d^2 (r^2 + 2r)`` parameters instead of ``d^6`` but keeps ``B d^3 (2r + 1)`` activation elements,
so at transformer batch sizes it uses more memory than the dense layer, in training and even under
``no_grad``; contracting the cores into the full weight first ("naive") brings it back to about a
dense layer.  Measured here on CPU (exact allocated bytes), d = 10, r = 8, at the report's batch
(B = 4096 in full mode, the report's "around 5000" tokens), with the reporter's own layer
(``tt_report_einsum``: one einsum per core, NOTE [ TT report einsum backward ]) beside memlab's
forms; each measurement also carries the predicted CUDA allocator figures (``predicted_cuda``).

The formula ``B d^3 (2r + 1)`` is checked against the reporter's layer, which contracts one core at
a time as the report describes; memlab's ``tt_factorized`` contracts by a block plan since issue 32
(NOTE [ TT contraction plans ]) and keeps one intermediate, ``B d^3 r``, and the output: its own
figure is checked against its plan's count.
"""
from __future__ import annotations

from typing import Any

import memlab
from ..tt import TTShape, plan_contraction
from memlab.core.units import MiB

SEED = "tt-layer-memory"
TITLE = "High GPU memory consumption (TT layer)"
#: what this page settles (its title; TITLE, the report's own, is shown beneath)
SETTLES = "TT layers: why a 3-core layer holds more activation memory than dense, and how much a plan saves"
CLAIM = ("A 3-core TT layer keeps B d^3 (2r+1) activation elements, so at large batch it uses more memory than "
         "the dense layer in training and in eval; reconstructing the full weight first costs about a dense layer.")

TECHNIQUES = ("dense", "tt_report_einsum", "tt_factorized", "tt_reconstructed", "tt_chunked")


def reproduce(quick: bool = False) -> dict[str, Any]:
    # full mode: chunk 256 (16 chunks); chunk 16 at B=4096 (256 chunks of per-row GEMMs) ran past the
    # 900 s measurement timeout on a loaded 2-core machine
    batch, rank, chunk = (1024, 8, 16) if quick else (4096, 8, 256)
    reps = 1 if quick else 3
    size = dict(batch=batch, rank=rank)
    ms: dict[tuple[str, str], Any] = {}
    for name in TECHNIQUES:
        kw = {"chunk_size": chunk} if name == "tt_chunked" else {}
        for mode in ("train", "infer"):
            ms[name, mode] = memlab.measure(name, mode=mode, repeats=reps, iterations=1, timeout=3600, **size, **kw)
    tl = memlab.timeline("tt_factorized", **size)
    tl_report = memlab.timeline("tt_report_einsum", **size)
    act_fact, act_measured = _forward_end(tl), _forward_end(tl_report)
    ok = all(m.status == "ok" for m in ms.values())
    plan = plan_contraction(TTShape.create((10,) * 3, (10,) * 3, rank), batch, True)
    plan_kept = (plan.activation_elements(batch) + plan.block_elements()) * 4
    plan_peak = plan.training_elements(batch) * 4
    act_formula = ms["tt_factorized", "train"].extra.get("analytic", {}).get("factorized_activation_bytes") \
        if ok else None

    def peak(name, mode):
        return ms[name, mode].peak_allocated_bytes

    def cuda(name, mode):
        """Predicted CUDA (caching-allocator replay): allocated peak above baseline, reserved peak."""
        p = ms[name, mode].predicted_cuda or {}
        return p.get("allocated_peak_bytes"), p.get("reserved_peak_bytes")

    if not ok:
        verdict = "not reproduced on this device"
        summary = "; ".join(f"{n} {mo}: {m.status} {m.error}" for (n, mo), m in ms.items() if m.status != "ok")
    else:
        verdict, summary = _verdict(ms, peak, cuda, dict(batch=batch, rank=rank, chunk=chunk, plan=plan,
                                                         act_measured=act_measured, act_fact=act_fact))
    figure = {
        "type": "bar", "title": f"TT layer d=10 r={rank} B={batch}: peak allocated above baseline (CPU exact)",
        "x_label": "technique", "y_label": "MiB", "x": list(TECHNIQUES),
        "series": {mode: [None if peak(n, mode) is None else peak(n, mode) / MiB for n in TECHNIQUES]
                   for mode in ("train", "infer")},
        "log_x": False, "log_y": True,
    }
    return {"verdict": verdict, "summary": summary, "measurements": [m.to_dict() for m in ms.values()],
            "timelines": [tl.to_dict(), tl_report.to_dict()], "figure": figure,
            "factorized_activation_bytes": {"measured": act_measured, "formula": act_formula,
                                            "measured_by": "tt_report_einsum",
                                            "tt_factorized": act_fact, "tt_factorized_plan": plan_kept},
            "tt_factorized_plan": {"kind": plan.kind, "sizes": list(plan.sizes),
                                   "training_peak_bytes": plan_peak},
            "configuration": {"d": 10, "rank": rank, "batch": batch, "chunk_size": chunk, "dtype": "float32",
                              "device": "cpu", "report_form": "tt_report_einsum"},
            "predicted_cuda": {f"{n} {mo}": dict(zip(("allocated_peak_bytes", "reserved_peak_bytes"), cuda(n, mo)))
                               for (n, mo) in ms}}


def _forward_end(timeline) -> int | None:
    """Live bytes after the last forward event of a timeline (what the forward keeps), or None."""
    fwd = [e.live_bytes for e in timeline.events if e.phase == "forward"]
    return fwd[-1] if fwd else None


def _mib_text(x: int | None) -> str:
    """Bytes as MiB with one decimal, ``-`` for None."""
    return "-" if x is None else f"{x / MiB:.1f}"


def _holds(peak, exact: bool) -> str:
    """The verdict: "reproduced" when the report's three claims hold (the TT layers above dense in
    training and inference, the reconstructed layer within 10% of dense in training; ``peak(name,
    mode)`` in bytes) and the byte counts are ``exact``, else "reproduced with caveat"."""
    more_train = min(peak("tt_factorized", "train"), peak("tt_report_einsum", "train")) > peak("dense", "train")
    more_infer = min(peak("tt_factorized", "infer"), peak("tt_report_einsum", "infer")) > peak("dense", "infer")
    naive_fix = peak("tt_reconstructed", "train") <= 1.1 * peak("dense", "train")
    return "reproduced" if (more_train and more_infer and naive_fix and exact) else "reproduced with caveat"


def _verdict(ms, peak, cuda, v: dict[str, Any]) -> tuple[str, str]:
    """The verdict and the summary text from the measurements ``ms`` (every one ``ok``); ``v`` holds
    the configuration (``batch``, ``rank``, ``chunk``), tt_factorized's ``plan`` and the live bytes at
    the end of the forward of the report's layer (``act_measured``) and of tt_factorized (``act_fact``)."""
    batch, rank, chunk, plan = v["batch"], v["rank"], v["chunk"], v["plan"]
    act_measured, act_fact, d3 = v["act_measured"], v["act_fact"], 1000
    fact = ms["tt_factorized", "train"]
    analytic = fact.extra.get("analytic", {})
    act_formula = analytic.get("factorized_activation_bytes")
    plan_kept = (plan.activation_elements(batch) + plan.block_elements()) * 4
    plan_peak = plan.training_elements(batch) * 4
    # the report's layer keeps the formula's activations and its transposed core copies (at most
    # the TT parameters twice); memlab's block contraction keeps exactly what its plan counts
    exact = (act_formula <= act_measured <= act_formula + 2 * analytic.get("tt_param_bytes", 0)
             and act_fact == plan_kept)
    verdict = _holds(peak, exact)
    rep_extra = peak("tt_report_einsum", "train") - peak("tt_factorized", "train")
    rep_formula = ms["tt_report_einsum", "train"].extra.get("analytic", {}).get("report_extra_backward_bytes")
    # the one-core-at-a-time contraction's exact training peak (tests/test_seed_forms.py):
    # B d^3 (3r + 1) + d^2 r^2 + d^2 r elements
    seq_peak = (batch * d3 * (3 * rank + 1) + 100 * rank * rank + 100 * rank) * 4
    rep_exact = peak("tt_report_einsum", "train") == seq_peak + rep_formula
    cuda_line = "; ".join(
        f"{n} {_mib_text(cuda(n, 'train')[0])} / {_mib_text(cuda(n, 'train')[1])}" for n in TECHNIQUES)
    summary = (
        f"Claim: {CLAIM} Configuration: d=10 (1000 -> 1000), r={rank}, B={batch}, float32, CPU, one "
        f"training step (forward, backward, SGD) and one no_grad forward. The user's own layer "
        f"(tt_report_einsum: one einsum per core on the transposed cores) peaks at "
        f"{peak('tt_report_einsum', 'train') / MiB:.1f} MiB in training, {rep_extra} bytes above memlab's "
        f"tt_factorized; it is {'exactly' if rep_exact else 'NOT'} the one-core-at-a-time contraction's "
        f"peak B d^3 (3r+1) + d^2 r^2 + d^2 r elements ({seq_peak} bytes, what tt_factorized ran before its "
        f"block plans) plus the derived B d^3 + 2 d^2 r = {rep_formula} bytes (a copy of the transposed "
        f"upstream gradient and two core copies), and "
        f"{peak('tt_report_einsum', 'infer') / MiB:.1f} MiB under no_grad. Parameters: TT {fact.param_count} vs dense "
        f"{ms['dense', 'train'].param_count} ({fact.extra.get('compression', 0):.0f}x fewer). The report's "
        f"layer at the end of the forward: {act_measured} bytes live, the formula B d^3 (2r+1) x 4 B = "
        f"{act_formula} bytes and {act_measured - act_formula} bytes of core copies. memlab's tt_factorized "
        f"contracts by a block plan ({plan.kind}, blocks {list(plan.sizes)}: NOTE [ TT contraction plans ]) "
        f"and keeps {act_fact} bytes ({'exactly' if act_fact == plan_kept else 'NOT'} its plan's "
        f"intermediates, output and blocks, {plan_kept} bytes; about B d^3 (r+1)), its training peak "
        f"{peak('tt_factorized', 'train')} bytes, {peak('tt_factorized', 'train') - plan_peak:+d} against the "
        f"plan's count ({plan_peak}: TTPlan.training_elements, which leaves out the first block's batched "
        f"partial-gradient products). Training peak above the "
        f"baseline: factorized {peak('tt_factorized', 'train') / MiB:.1f} MiB, report's layer "
        f"{peak('tt_report_einsum', 'train') / MiB:.1f} MiB, dense "
        f"{peak('dense', 'train') / MiB:.1f} MiB, reconstructed {peak('tt_reconstructed', 'train') / MiB:.1f} MiB, "
        f"chunked (chunk {chunk}) {peak('tt_chunked', 'train') / MiB:.1f} MiB. Inference (no_grad): factorized "
        f"{peak('tt_factorized', 'infer') / MiB:.1f} MiB vs dense {peak('dense', 'infer') / MiB:.1f} MiB "
        f"(the report's layer {peak('tt_report_einsum', 'infer') / MiB:.1f} MiB: its intermediates, B d^3 r each, "
        f"against the dense output's B d^3, so the eval-mode complaint holds for it; memlab's contraction "
        f"holds one cache block's intermediate at a time, {peak('tt_factorized', 'infer')} bytes against "
        f"dense's {peak('dense', 'infer')}). 2Br = {2 * batch * rank} > d^3 = {d3}: the "
        f"activation cost outweighs the parameter saving, as the report's maintainer computed. "
        f"Predicted CUDA (caching-allocator replay of the same trace; allocated peak above baseline / "
        f"reserved peak, MiB, training): {cuda_line}. Verdict: {verdict}."
    )
    return verdict, summary
