"""Reproduction of Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models".

The paper (arXiv:2205.05198, Section 4.1) counts the activations one transformer layer keeps for
backward, in bytes, with 16-bit activations and 1-byte dropout masks (s sequence, b batch, h hidden,
a heads; no tensor or sequence parallelism):

    attention  11sbh + 5as²b   QKV input 2sbh, Q and K 4sbh, V 2sbh, softmax output 2as²b, its
                               dropout mask as²b, the dropped probabilities 2as²b, the output
                               projection's input 2sbh, the residual dropout mask sbh
    MLP        19sbh           fc1 input 2sbh, GELU input 8sbh, fc2 input 8sbh, dropout mask sbh
    LayerNorms  4sbh           the two LayerNorms' inputs
    total      sbh(34 + 5as/h);  selective recomputation (the attention core recomputed) 34sbh;
               full recomputation (the layer input only) 2sbh

memlab measures its own decoder block (:mod:`memlab.families.transformer.workload`: GPT-2's pre-LayerNorm
layout, the same tensors) in bfloat16 with dropout on, at a size scaled down from the paper's GPT-3
175B (s 2048, h 12288, a 96) keeping ``as/h = 16``, so the formula's two terms keep the paper's
proportion (34 to 80).  Per layer, exactly:

* ``saved_activations`` per layer: the category (NOTE [ memory categories ]) at the step's peak with
  two layers minus with one layer (``eager_attention``, bfloat16, dropout 0.1); 8 bytes per layer (the
  softmax scale, a wrapped Python number autograd saves without the saved-tensor hooks) show in the
  temporaries category instead;
* the tensors behind it: one block's autograd graph walked node by node (every ``_saved_*`` tensor,
  one entry per storage, parameters left out), each named by the op that saved it;
* the recomputation rows: what ``checkpoint_layer`` and ``selective_checkpoint`` keep at the end of
  forward per layer (two layers minus one, exact allocation trace), beside 2sbh and 34sbh.

Every byte between the paper's figure and memlab's is one of :func:`differences` (a PyTorch tensor
the paper's Megatron kernels do not keep, or keep smaller); the test asserts the sum to the byte.
"""
from __future__ import annotations

from typing import Any

import memlab
from memlab.reproductions.papers import mib, table

__all__ = ["SEED", "TITLE", "CLAIM", "reproduce", "report", "paper_terms", "differences", "configs",
           "predicted_per_layer", "saved_category_per_layer", "saved_tensors", "kept_per_layer", "checked_line"]

SEED = "korthikanti-2022-activation-recomputation"
TITLE = ("Reducing Activation Recomputation in Large Transformer Models (Korthikanti et al. 2022): "
         "activation bytes per layer")
CLAIM = ("A transformer layer keeps sbh(34 + 5as/h) bytes of activations for backward (16-bit activations, 1-byte "
         "dropout masks): attention 11sbh + 5as²b, MLP 19sbh, LayerNorms 4sbh; selective recomputation keeps "
         "34sbh, full recomputation 2sbh.")

#: the paper's GPT-3 175B layer (its Table 3): s, b, h, a
PAPER_SIZE = {"seq": 2048, "batch": 1, "hidden": 12288, "heads": 96}
DROPOUT = 0.1
TECHNIQUES = ("eager_attention", "selective_checkpoint", "checkpoint_layer")
_ELEMENT = 2  # bfloat16
_SCALE_BYTES = 8  # q * (1/sqrt(d)): the Python float saved as a 0-dim float64 tensor


def configs(quick: bool) -> dict[str, Any]:
    """The measured size: as/h = 16 as in the paper's GPT-3 175B layer (96·2048/12288)."""
    if quick:
        return {"seq": 64, "batch": 2, "hidden": 16, "heads": 4, "vocab": 64, "dropout": DROPOUT}
    return {"seq": 256, "batch": 2, "hidden": 64, "heads": 4, "vocab": 256, "dropout": DROPOUT}


def paper_terms(c: dict[str, int]) -> dict[str, int]:
    """The paper's per-layer bytes by term (Section 4.1), for s = seq, b = batch, h = hidden, a = heads."""
    s, b, h, a = c["seq"], c["batch"], c["hidden"], c["heads"]
    sbh, as2b = s * b * h, a * s * s * b
    return {"attention_sbh": 11 * sbh, "attention_scores": 5 * as2b, "mlp": 19 * sbh, "layernorms": 4 * sbh}


def differences(c: dict[str, int], stats_bytes: int = _ELEMENT) -> list[tuple[str, int, str]]:
    """Every byte memlab's bfloat16 layer (CPU, dropout on) keeps beyond the paper's formula, by cause.

    ``stats_bytes``: the element size of LayerNorm's saved mean and rstd (the input's dtype on CPU when
    the weight has it too).  Returns ``(term, bytes, the PyTorch tensor that causes it)``.
    """
    s, b, h, a = c["seq"], c["batch"], c["hidden"], c["heads"]
    sbh, as2b = s * b * h, a * s * s * b
    return [
        ("q kept twice", 2 * sbh,
         "q·(1/sqrt d) is a new [b, a, s, h/a] tensor (saved by q kᵀ) while k and v are saved as views of the "
         "heads-first [3, b, a, s, h/a] copy, whose q third stays alive with them; Megatron folds the scale into "
         "the GEMM (baddbmm alpha) and keeps Q once"),
        ("residual dropout noise, 2 bytes", 2 * sbh,
         "CPU F.dropout multiplies by a noise tensor in the input's dtype (bfloat16: 2 bytes per element, scaled "
         "by 1/(1-p)), saved by that mul; the paper's mask is 1 byte (CUDA's native_dropout keeps a bool mask): "
         "+sbh for the attention branch's and +sbh for the MLP's"),
        ("attention dropout noise, 2 bytes", as2b,
         "the same CPU dropout noise on the [b, a, s, s] probabilities: 2 bytes per element against the paper's "
         "1-byte mask"),
        ("causal mask", s * s,
         "the [s, s] bool mask masked_fill saves (one per layer, shared by batch and heads); Megatron's fused "
         "scale-mask-softmax kernel builds it inside the kernel"),
        ("LayerNorm mean and rstd", 4 * s * b * stats_bytes,
         "each of the two LayerNorms saves its per-token mean and reciprocal std [b, s, 1] for backward "
         "(the paper leaves them out)"),
        ("softmax scale", _SCALE_BYTES,
         "q * (1/sqrt d) with a Python float: autograd saves the scalar as a 0-dim float64 tensor; it saves such a "
         "wrapped number without calling the saved-tensor hooks, so memlab's probe counts these 8 bytes as a "
         "temporary, not in saved_activations (NOTE [ memory categories ])"),
    ]


def saved_category_per_layer(c: dict[str, int], stats_bytes: int = _ELEMENT) -> int:
    """What memlab's ``saved_activations`` category shows per layer: :func:`predicted_per_layer` less the
    8-byte scale, which autograd saves without the saved-tensor hooks (a temporary in memlab's categories)."""
    return predicted_per_layer(c, stats_bytes) - _SCALE_BYTES


def predicted_per_layer(c: dict[str, int], stats_bytes: int = _ELEMENT) -> int:
    """The paper's per-layer bytes plus every stated difference: memlab's bfloat16 layer, exactly."""
    return sum(paper_terms(c).values()) + sum(d[1] for d in differences(c, stats_bytes))


# -- measured in this process: the saved tensors of one block, and the kept bytes per layer --------

def saved_tensors(c: dict[str, Any], seed: int = 0) -> list[dict[str, Any]]:
    """Every storage one block's autograd graph saves (bfloat16, eager attention, dropout on).

    Walks the graph from the block's output back to its input; each ``_saved_*`` attribute that is a
    tensor is one entry per storage (parameters left out), named by every ``Node.attribute`` that
    holds it, with its shape, dtype and bytes (the storage's).
    """
    import torch  # deferred: torch line

    from ..attention import eager_attention  # deferred: torch line
    from ..workload import Block  # deferred: torch line

    gen = torch.Generator().manual_seed(seed)
    block = Block(c["hidden"], c["heads"], c["dropout"], dtype=torch.bfloat16)
    h = torch.randn(c["batch"], c["seq"], c["hidden"], generator=gen).to(torch.bfloat16).requires_grad_()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = block(h, eager_attention)
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    names = {p.untyped_storage().data_ptr(): n for n, p in block.named_parameters()}
    found: dict[int, dict[str, Any]] = {}
    seen, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(nxt for nxt, _ in node.next_functions)
        by_weight = _weight_of(node, names)
        for attr in sorted(a for a in dir(node) if a.startswith("_saved_")):
            try:
                value = getattr(node, attr)
            except Exception:  # an attribute autograd did not save for this call
                continue
            for t in value if isinstance(value, (list, tuple)) else [value]:
                if not isinstance(t, torch.Tensor):
                    continue
                ptr = t.untyped_storage().data_ptr()
                if ptr in params:
                    continue
                where = f"{type(node).__name__}.{attr[len('_saved_'):]}" + (f" ({by_weight})" if by_weight else "")
                entry = found.setdefault(ptr, {"saved_by": [], "shape": list(t.shape), "dtype": str(t.dtype)[6:],
                                               "bytes": t.untyped_storage().nbytes()})
                if where not in entry["saved_by"]:
                    entry["saved_by"].append(where)
                if t.numel() > _numel(entry["shape"]):
                    entry["shape"] = list(t.shape)
    return sorted(found.values(), key=lambda e: (-e["bytes"], e["saved_by"]))


def paper_term(entry: dict[str, Any], c: dict[str, int]) -> str:
    """The paper's term a saved tensor of :func:`saved_tensors` stands for (or what the paper leaves out)."""
    s, b, h, a = c["seq"], c["batch"], c["hidden"], c["heads"]
    by, n = " ".join(entry["saved_by"]), _numel(entry["shape"])
    if "LayerNormBackward0.input" in by:
        return "LayerNorm input (LayerNorms, 2sbh)"
    if "LayerNormBackward0.result" in by:
        return "LayerNorm mean or rstd (not in the paper)"
    for linear, term in (("(qkv)", "QKV GEMM input (attention, 2sbh)"), ("(proj)", "projection input (attention, 2sbh)"),
                         ("(fc1)", "fc1 input (MLP, 2sbh)"), ("(fc2)", "fc2 input = GELU output (MLP, 8sbh)")):
        if linear in by:
            return term
    if "GeluBackward0" in by:
        return "GELU input (MLP, 8sbh)"
    if "SoftmaxBackward0" in by:
        return "softmax output (attention, 2as²b)"
    if "MaskedFill" in by:
        return "causal mask (not in the paper)"
    if "MulBackward0.other" in by:
        if n <= 1:
            return "softmax scale (not in the paper)"
        return ("attention dropout noise (paper: 1-byte mask, as²b)" if n == a * s * s * b
                else "residual dropout noise (paper: 1-byte mask, sbh)")
    if "BmmBackward0" in by and n == a * s * s * b:
        return "dropped probabilities (attention, 2as²b)"
    if "BmmBackward0.mat2" in by and entry["bytes"] == 3 * s * b * h * _ELEMENT:
        return "heads-first q, k, v copy (attention: K 2sbh, V 2sbh, and a second q 2sbh)"
    if "BmmBackward0.self" in by:
        return "q·(1/sqrt d) (attention: Q, 2sbh)"
    return "other"


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _weight_of(node, names: dict[int, str]) -> str | None:
    """The Linear a GEMM node belongs to (by its saved weight), e.g. ``fc1``."""
    import torch  # deferred: torch line

    for attr in ("_saved_mat2", "_saved_other"):
        try:
            t = getattr(node, attr)
        except Exception:
            continue
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in names:
            return names[t.untyped_storage().data_ptr()].split(".")[0]
    return None


def kept_per_layer(name: str, c: dict[str, Any], seed: int = 0) -> int:
    """Bytes a technique's forward keeps per layer (bfloat16): the exact allocation trace of one forward
    with two layers minus with one (what is alive at the end of forward, the output included)."""
    import torch  # deferred: torch line

    from memlab.measurement.alloc_trace import trace_allocations  # deferred: torch line

    kept = []
    for layers in (1, 2):
        t = memlab.get_technique(name)(**{**c, "layers": layers})
        p = t.build(torch.device("cpu"), torch.bfloat16, seed)
        outs: list = []
        events, _ = trace_allocations(lambda: outs.append(t.forward(p)), torch.device("cpu"), 1)
        kept.append(sum(e.delta_bytes for e in events))
    return kept[1] - kept[0]


def per_layer_category(rows: dict[tuple[str, int], Any], category: str) -> int | None:
    """A category's bytes at the step's peak, two layers minus one (eager rows), or None."""
    one, two = rows.get(("eager_attention", 1)), rows.get(("eager_attention", 2))
    if one is None or two is None or one.status != "ok" or two.status != "ok":
        return None
    return two.peak_by_category_bytes[category] - one.peak_by_category_bytes[category]


# -- the reproduction -------------------------------------------------------------------------------

# NOTE [ bfloat16 rows checked ]
# The page's rows are measured in bfloat16 with memlab's checks on: the float64 check of each technique,
# then every measured and timed bfloat16 step against the workload reference stepped in lockstep (NOTE
# [ every step checked ] in memlab/measurement/step_check.py: a later step may differ by
# ``(8 * d0 + 16 * eps) * max|reference|``, ``d0`` the first step's drift, ``eps`` = 2**-7 for
# bfloat16).  The rows were measured with ``check=False`` until the every-step check's bfloat16
# snapshots were fixed: the shadow reference started its second step from the int16 bits of the
# technique's bfloat16 weights read back as numbers (a weight of 0.5 became 16128.0), so even
# ``eager_attention`` "differed from itself" by 1.8e10 at step 2.  The bytes do not depend on the values.

def reproduce(quick: bool = False) -> dict[str, Any]:
    """Measure eager, selective and full recomputation at one and two layers, then :func:`report`."""
    c = configs(quick)
    # checked: NOTE [ bfloat16 rows checked ]
    opts = {"iterations": 1, "repeats": 2, "time_budget": 0.5, "dtype": "bfloat16"}
    ms = [memlab.measure(name, layers=layers, **c, **opts) for name in TECHNIQUES for layers in (1, 2)]
    kept = {name: kept_per_layer(name, c) for name in TECHNIQUES}
    return report(ms, quick, saved_tensors(c), kept)


def accounting(measurements: list, quick: bool, tensors: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-layer numbers the page states (bytes), computed from the measurements and one block's
    saved tensors: the configuration (``c``, ``s``, ``b``, ``h``, ``a``, ``sbh``), the measured
    ``saved`` and ``temps`` per layer, the ``walked`` saved tensors, the LayerNorm statistics' element
    size ``stats_bytes``, the paper's terms, the differences, memlab's ``predicted`` bytes and whether
    all agree to the byte (``exact``)."""
    c = configs(quick)
    rows = {(m.technique, m.params["layers"]): m for m in measurements}
    saved = per_layer_category(rows, "saved_activations")
    temps = per_layer_category(rows, "temporaries")
    walked = sum(t["bytes"] for t in tensors)
    stats = next((t for t in tensors if any(w.startswith("NativeLayerNormBackward0.result1") for w in t["saved_by"])),
                 None)
    stats_bytes = {"bfloat16": 2, "float32": 4}.get(stats["dtype"], _ELEMENT) if stats else _ELEMENT
    predicted = predicted_per_layer(c, stats_bytes)
    return {"c": c, "s": c["seq"], "b": c["batch"], "h": c["hidden"], "a": c["heads"],
            "sbh": c["seq"] * c["batch"] * c["hidden"], "saved": saved, "temps": temps, "walked": walked,
            "stats_bytes": stats_bytes, "paper": paper_terms(c), "diffs": differences(c, stats_bytes),
            "predicted": predicted,
            "exact": saved == predicted - _SCALE_BYTES and temps == _SCALE_BYTES and walked == predicted}


def _whole(x):
    return None if x is None else int(x)


def _terms_table(f: dict[str, Any]) -> dict[str, Any]:
    s, b, h, a, sbh, paper, stats_bytes = f["s"], f["b"], f["h"], f["a"], f["sbh"], f["paper"], f["stats_bytes"]
    saved, predicted, walked = f["saved"], f["predicted"], f["walked"]
    return table("terms", "Per layer: the paper's terms beside memlab's (bytes, bfloat16, dropout 0.1)",
                 ["term", "paper formula", "paper bytes", "memlab bytes", "difference", "the PyTorch tensor behind it"],
                 [["attention (s·b·h terms)", "11sbh", paper["attention_sbh"], 14 * sbh,
                   3 * sbh, "q kept twice (+2sbh), the residual dropout noise in 2 bytes (+sbh)"],
                  ["attention (s² terms)", "5as²b", paper["attention_scores"],
                   6 * a * s * s * b + s * s + _SCALE_BYTES, a * s * s * b + s * s + _SCALE_BYTES,
                   "attention dropout noise in 2 bytes (+as²b), the causal mask (+s²), the scale (+8)"],
                  ["MLP", "19sbh", paper["mlp"], 20 * sbh, sbh, "the MLP dropout noise in 2 bytes (+sbh)"],
                  ["LayerNorms", "4sbh", paper["layernorms"], 4 * sbh + 4 * s * b * stats_bytes,
                   4 * s * b * stats_bytes, f"mean and rstd, {stats_bytes} bytes each per token, of both"],
                  ["total", "sbh(34 + 5as/h)", sum(paper.values()), predicted, predicted - sum(paper.values()), ""],
                  ["measured saved_activations per layer", "", None, _whole(saved),
                   None if saved is None else saved - sum(paper.values()),
                   "the category at the step's peak, 2 layers minus 1 (memlab.measure, isolated)"],
                  ["measured temporaries per layer", "", None, _whole(f["temps"]), None,
                   "the same difference in the temporaries category: the 8-byte scale (saved without hooks)"],
                  ["one block's saved tensors, summed", "", None, walked, walked - sum(paper.values()),
                   "the autograd graph walked, one entry per storage (table below)"]],
                 f"s = {s}, b = {b}, h = {h}, a = {a} (sbh = {sbh:,} bytes at 1 byte per element; as/h = "
                 f"{a * s // h}, the paper's GPT-3 175B value). memlab bytes = paper bytes + the differences listed in "
                 "the next table; equal to the measured figure to the byte: " + ("yes." if f["exact"] else "NO."))


def _recompute_table(f: dict[str, Any], kept: dict[str, int]) -> dict[str, Any]:
    sbh, rng = f["sbh"], _rng_bytes(kept, f["sbh"])
    recompute_rows = [
        ["no recomputation (eager_attention)", "sbh(34 + 5as/h)", sum(f["paper"].values()), kept.get("eager_attention"),
         "everything above, kept at the end of forward (the forward-kept trace includes the block's output: the "
         "next block's input, counted in that block)"],
        ["selective recomputation (paper) / selective_checkpoint (memlab)", "34sbh", 34 * sbh,
         kept.get("selective_checkpoint"),
         f"memlab's policy saves the GEMM outputs only (qkv 6sbh, proj 2sbh, fc1 8sbh, fc2 2sbh) and the block input "
         f"2sbh: 20sbh + {rng:,} bytes, and recomputes LayerNorm, GELU and dropout too, where the paper keeps "
         "them; the paper's selective figure is memlab's eager row without its s² terms"],
        ["full recomputation (paper) / checkpoint_layer (memlab)", "2sbh", 2 * sbh, kept.get("checkpoint_layer"),
         f"the block input 2sbh + {rng:,} bytes: torch.utils.checkpoint stashes the CPU RNG state "
         "(torch.get_rng_state(), 5,056 bytes) to replay dropout, and 8 bytes more"],
    ]
    return table("recompute", "Recomputation: kept per layer at the end of forward (bytes)",
                 ["strategy", "paper formula", "paper bytes", "memlab bytes", "note"], recompute_rows,
                 "memlab bytes: the exact allocation trace of one forward, two layers minus one (bfloat16). "
                 "torch.utils.checkpoint with use_reentrant=False keeps what it saves out of the "
                 "saved_activations category, so these rows use the trace.")


def _tables(f: dict[str, Any], tensors: list[dict[str, Any]], kept: dict[str, int],
            big_paper: int, big_ours: int) -> list[dict[str, Any]]:
    """The terms, the differences, recomputation, one block's saved tensors and the paper's size."""
    diff_table = table("differences", "Every byte of difference, by the PyTorch tensor that causes it",
                       ["difference", "bytes", "why"], [[n, v, why] for n, v, why in f["diffs"]])
    walk = table("saved", "One block's saved tensors (the autograd graph, one row per storage)",
                 ["saved by (node.attribute, Linear)", "shape", "dtype", "bytes", "the paper's term"],
                 [["; ".join(t["saved_by"]), "x".join(map(str, t["shape"])) or "scalar", t["dtype"], t["bytes"],
                   paper_term(t, f["c"])] for t in tensors],
                 "Parameters (weights, LayerNorm scale and shift) left out; a tensor saved as a view counts its "
                 "whole storage (k and v are views of the heads-first copy, so the copy appears once, 3x q's size).")
    scale = table("scale", "At the paper's size (GPT-3 175B layer: s 2048, b 1, h 12288, a 96), from the formulas",
                  ["layer", "paper bytes", "memlab's exact model, bytes", "ratio"],
                  [["GPT-3 175B, one layer", big_paper, big_ours, round(big_ours / big_paper, 3)]],
                  "memlab's model = the paper's formula + the differences above, evaluated at the paper's size "
                  "(bfloat16 LayerNorm statistics); a prediction, not a measurement.")
    return [_terms_table(f), diff_table, _recompute_table(f, kept), walk, scale]


def _summary(f: dict[str, Any], kept: dict[str, int], big_paper: int, big_ours: int) -> str:
    s, b, h, a, sbh, paper, saved = f["s"], f["b"], f["h"], f["a"], f["sbh"], f["paper"], f["saved"]
    return " ".join([
        f"Claim: {CLAIM}",
        f"Measured: in bfloat16 with dropout {DROPOUT} at s {s}, b {b}, h {h}, a {a} (as/h = {a * s // h}, as in "
        f"GPT-3 175B), a layer keeps {_whole(saved):,} bytes ({mib(saved, 3)} MiB) of saved activations, measured; "
        f"the paper's sbh(34 + 5as/h) is {sum(paper.values()):,} bytes "
        f"({round((saved or 0) / sum(paper.values()), 3)}x).",
        "Every byte of the difference is a PyTorch tensor: " + "; ".join(f"{n} +{v:,}" for n, v, _ in f["diffs"]) + ".",
        f"To the byte: paper + differences = {f['predicted']:,} bytes = measured saved_activations per layer "
        f"({_whole(saved):,}) + measured temporaries per layer ({_whole(f['temps'])}: the scale, which autograd saves "
        f"without the saved-tensor hooks) = one block's saved tensors summed ({f['walked']:,}): "
        + ("equal to the byte." if f["exact"] else "NOT equal."),
        f"Recomputation: checkpoint_layer keeps {kept.get('checkpoint_layer'):,} bytes per layer (paper 2sbh = "
        f"{2 * sbh:,}); selective_checkpoint {kept.get('selective_checkpoint'):,} (paper's selective 34sbh = "
        f"{34 * sbh:,}; memlab's policy also recomputes LayerNorm, GELU and dropout).",
        f"At the paper's size: at GPT-3 175B's s, b, h, a the same accounting gives {round(big_ours / 2**30, 2)} GiB "
        f"per layer against the formula's {round(big_paper / 2**30, 2)} GiB ({round(big_ours / big_paper, 3)}x): the "
        "2-byte CPU dropout noise and the second copy of q are the bulk of it.",
        "Caveat: CPU, bfloat16 (CPU dropout keeps 2-byte noise where CUDA keeps a 1-byte mask); scaled from the paper's "
        "size keeping as/h; no tensor or sequence parallelism (t = 1).",
        checked_line(measurements),
    ])


def report(measurements: list, quick: bool, tensors: list[dict[str, Any]], kept: dict[str, int]) -> dict[str, Any]:
    """The page's data: the measurements, one block's saved tensors and the kept bytes per layer
    (:func:`accounting` computes, :func:`_tables` and :func:`_summary` write)."""
    f = accounting(measurements, quick, tensors)
    s, b, a, sbh, paper, stats_bytes = f["s"], f["b"], f["a"], f["sbh"], f["paper"], f["stats_bytes"]
    at_scale = {**PAPER_SIZE, "dropout": DROPOUT}
    big_paper, big_ours = sum(paper_terms(at_scale).values()), predicted_per_layer(at_scale)
    labels = ["attention (sbh)", "attention (s²)", "MLP", "LayerNorms"]
    ours = [11 * sbh + 3 * sbh, 6 * a * s * s * b + s * s + _SCALE_BYTES, 20 * sbh, 4 * sbh + 4 * s * b * stats_bytes]
    return {
        "verdict": "reproduced" if f["exact"] else "reproduced with caveat",
        "summary": _summary(f, kept, big_paper, big_ours),
        "measurements": [m.to_dict() for m in measurements],
        "timelines": [],
        "tables": _tables(f, tensors, kept, big_paper, big_ours),
        "per_layer": {"paper_bytes": sum(paper.values()), "predicted_bytes": f["predicted"],
                      "measured_saved_bytes": f["saved"], "walked_bytes": f["walked"], "kept_bytes": kept,
                      "config": f["c"]},
        "figure": {"type": "bar", "title": "Per layer: the paper's terms beside memlab's (KiB, bfloat16)",
                   "x_label": "term", "y_label": "bytes per layer, KiB", "x": labels,
                   "series": {"paper": [round(v / 1024, 1) for v in paper.values()],
                              "memlab": [round(v / 1024, 1) for v in ours]},
                   "log_x": False, "log_y": False},
    }


def checked_line(measurements: list) -> str:
    """What the rows' checks say (NOTE [ bfloat16 rows checked ]): how many are ok, the float64 check's
    largest error and the bfloat16 drift (a technique against the reference, both in bfloat16)."""
    bad = [f"{m.technique} ({m.params.get('layers')} layers): {m.status}, {m.error}" for m in measurements
           if m.status != "ok" or m.matches_reference is not True]
    if bad:
        return "Checks: NOT every row passes: " + "; ".join(bad) + "."
    f64 = max(m.max_abs_error for m in measurements)
    drift = max(m.drift_max_abs_error for m in measurements)
    return (f"Checked: all {len(measurements)} rows ok: the float64 check (max |error| {f64:.2g}) and every bfloat16 "
            f"step against the bfloat16 reference in lockstep (NOTE [ bfloat16 rows checked ]); bfloat16 drift, "
            f"technique against reference, at most {drift:.2g}.")


def _rng_bytes(kept: dict[str, int], sbh: int) -> int:
    """What checkpoint_layer keeps per layer beyond its input (2sbh bytes in bfloat16)."""
    v = kept.get("checkpoint_layer")
    return 0 if v is None else v - 2 * sbh
