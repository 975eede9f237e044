"""The per-rank figures beside the ZeRO paper's model-state formula, the differences named.

Measured model state of a rank (bytes, from :func:`memlab.sharding.worker.run_strategy`'s dict):
parameters and optimizer state live at the measured step's start (they live between steps), gradients
the most the ``gradients`` category held at any moment of the step (all of a rank's gradients are live
together after backward).  Against :func:`~memlab.sharding.formulas.zero_model_state` the optimizer
state differs by two named terms: Adam's 4-byte ``step`` counter per owned tensor, and for ZeRO-1 the
partition's imbalance (``ZeroRedundancyOptimizer`` gives each rank whole tensors, so it owns
``8 x owned elements``, not ``8Ψ/N``); whatever is left is printed as ``unexplained``.  The whole
peak's difference from the formula's total is split by category (inputs, saved activations and
temporaries are outside the formula; DDP's gradient buckets, FSDP's gathered parameters and
unsharded gradients are temporaries).
"""
from __future__ import annotations

from .formulas import ADAM_FLOAT32_K, ADAM_STEP_BYTES, zero_model_state
from .reserved import cuda_floor, live_blocks

__all__ = ["model_state", "formula", "optimizer_terms", "peak_differences", "rank_line", "with_formula",
           "suspect_held_bytes", "suspect_unfreed_bytes", "COLLECTIVE_RANGES", "COLLECTIVE_BUFFERS", "collective_bytes",
           "listed_at_peak_bytes", "with_collectives", "measure_lines"]

#: enclosing ranges of a collective's own buffers (gloo's copies, FSDP's all-gather outputs and
#: reduce-scatter inputs, DDP's coalesced broadcast at construction): such a block held across the
#: step, or never freed, is a free the trace dropped (NOTE [ frees the gloo threads drop ] in
#: :mod:`memlab.sharding.trace`), not memory the step keeps
COLLECTIVE_RANGES = ("c10d::", "gloo:", "aten::flatten_dense_tensors", "FSDP::all_gather", "FSDP::post_backward_reduce")

_SHORT = {"parameters": "params", "gradients": "grads", "optimizer_state": "opt", "inputs": "inputs",
          "saved_activations": "saved", "temporaries": "temp"}


def _base(row: dict) -> str:
    return row["strategy"].split("(")[0]


def model_state(row: dict) -> dict[str, int]:
    """Measured per-rank model state: parameters and optimizer state at the step's start, gradients at most."""
    return {"parameters": row["start"]["parameters"], "gradients": row["max"]["gradients"],
            "optimizer_state": row["start"]["optimizer_state"]}


def formula(row: dict) -> dict[str, float]:
    """The ZeRO paper's per-rank model state for the row's strategy, Ψ and world (float32, Adam)."""
    f = zero_model_state(_base(row), row["psi"], row["world"])
    return {"parameters": f.parameters, "gradients": f.gradients, "optimizer_state": f.optimizer_state}


def optimizer_terms(row: dict) -> dict[str, float]:
    """Measured optimizer state minus the formula's, split: ``step_counters`` (4 B per owned tensor),
    ``partition`` (owned elements beyond Ψ/N, 8 B each; 0 but for zero1) and ``unexplained``."""
    owned = row["owned_numels"]
    steps = ADAM_STEP_BYTES * len(owned)
    part = ADAM_FLOAT32_K * sum(owned) - formula(row)["optimizer_state"]
    rest = model_state(row)["optimizer_state"] - formula(row)["optimizer_state"] - steps - part
    return {"step_counters": steps, "partition": part, "unexplained": rest}


def peak_differences(row: dict) -> dict[str, float]:
    """Bytes at the peak minus the formula, per category (the formula has no inputs or activations)."""
    f = formula(row)
    return {c: row["peak"][c] - f.get(c, 0.0) for c in row["peak"]}


def suspect_held_bytes(row: dict) -> int:
    """Bytes held across the whole step in blocks a collective allocated (:data:`COLLECTIVE_RANGES`):
    live from before the step to after it, so in its peak too; ``peak_bytes`` minus them is the peak
    had their frees been seen."""
    held = row.get("held_outside_categories", {})
    return sum(v for k, v in held.items() if any(r in k for r in COLLECTIVE_RANGES))


def suspect_unfreed_bytes(row: dict) -> int:
    """Bytes a collective allocated inside the step and the trace never saw freed: the peak may count
    them after their real free, so it is over by at most this much."""
    unfreed = row.get("unfreed_in_step", {})
    return sum(v for k, v in unfreed.items() if any(r in k for r in COLLECTIVE_RANGES))


def with_formula(row: dict) -> dict:
    """``row`` with ``model_state``, ``formula``, ``optimizer_terms``, ``peak_minus_formula``,
    ``suspect_held_bytes``, ``peak_without_suspect_bytes`` and ``suspect_unfreed_bytes`` added."""
    suspect = suspect_held_bytes(row)
    return {**row, "model_state": model_state(row), "formula": formula(row), "optimizer_terms": optimizer_terms(row),
            "peak_minus_formula": peak_differences(row), "suspect_held_bytes": suspect,
            "peak_without_suspect_bytes": row["peak_bytes"] - suspect, "suspect_unfreed_bytes": suspect_unfreed_bytes(row)}


def _b(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "-") + _b(abs(x))


def rank_line(row: dict) -> str:
    """One line: the rank's peak, its categories at the peak, the model state against the formula
    with the differences named, and the reference check."""
    m, f, o = model_state(row), formula(row), optimizer_terms(row)
    cats = " ".join(f"{_SHORT[c]} {_b(v)}" for c, v in row["peak"].items())
    ms = " ".join(f"{_SHORT[c]} {_b(m[c])}/{_b(f[c])}" for c in m)
    diff = " ".join(f"{_SHORT[c]} {_signed(v)}" for c, v in peak_differences(row).items())
    check = "ok" if row["matches"] else "MISMATCH"
    bound = f" (upper bound: {row['dropped_frees']} dropped frees, {_b(row['dropped_free_bytes'])} B)" \
        if row.get("dropped_frees") else ""
    suspect = suspect_held_bytes(row)
    if suspect:
        bound += f" (collective buffers held across the step {_b(suspect)} B: {_b(row['peak_bytes'] - suspect)} B without)"
    if suspect_unfreed_bytes(row):
        bound += f" (collective buffers never seen freed: over by at most {_b(suspect_unfreed_bytes(row))} B)"
    return (f"{row.get('model', 'mlp')} {row['strategy']} rank {row['rank']}/{row['world']}: peak {_b(row['peak_bytes'])} B{bound} "
            f"[{cats}] | model state measured/ZeRO {ms}; opt diff = step counters {_b(o['step_counters'])}"
            f" + partition {_signed(o['partition'])} + unexplained {_signed(o['unexplained'])}"
            f" | peak - ZeRO: {diff}; between steps outside model state: temp {_b(row['start']['temporaries'])}"
            f" | check {check}: loss rel {row['loss_rel_diff']:.1e}, params max |diff| {row['max_param_diff']:.1e},"
            f" grads rel {row.get('grad_rel_diff', float('nan')):.1e}")


# NOTE [ the bytes each collective holds ]
# A rank's figures list every block live at its peak by allocating call (its last three enclosing
# ranges) and size (``at_peak["blocks"]``, per category).  The bytes a collective holds at the peak
# are those of the blocks whose call lies under the collective's range, the first match of
# COLLECTIVE_BUFFERS naming it: FSDP's reduce-scatter (its input, the unsharded gradients flattened,
# is a temporary; its output becomes the rank's gradient shard), the gathered parameters FSDP2 copies
# out of the all-gather, the all-gather output itself, DDP's gradient buckets (allocated when the
# buckets are rebuilt, in forward; all-reduced in backward; with the rebuild broadcast's index
# tensors where their free went unseen, NOTE [ DDP's rebuild leftovers ] in predict.py: 4 bytes or
# 4·(tensors + 1) more on such a rank), and what else runs under c10d, gloo or FSDP.  Exact when the listed blocks add up to the peak (``listed_at_peak_bytes`` equal to
# ``peak_bytes``; the trace keeps the 25 largest (call, size) groups per category, which held every
# block in all 224 committed rows); else each figure is a lower bound, by at most the difference.
# Evidence: docs/sharding.md#memlab-measure---shard-strategy.

#: (label, a substring of the allocating call) in the order tried: the first match names the buffer
COLLECTIVE_BUFFERS = (
    ("reduce-scatter (FSDP)", "FSDP::post_backward_reduce"),
    ("gathered parameters (FSDP all-gather copy-out)", "FSDP::all_gather_copy_out"),
    ("all-gather output (FSDP)", "FSDP::all_gather"),
    ("other FSDP", "FSDP::"),
    ("gradient buckets (DDP all-reduce)", "DistributedDataParallel.forward > aten::empty"),
    ("other c10d / gloo", "c10d::"), ("other c10d / gloo", "gloo:"),
    ("other c10d / gloo", "aten::flatten_dense_tensors"),
)


def _blocks(row: dict):
    """``(category, call, bytes per block, count)`` of every block listed at the rank's peak."""
    for category, calls in row.get("at_peak", {}).get("blocks", {}).items():
        for key, count in calls.items():
            call, nbytes = key.rsplit(" | ", 1)
            yield category, call, int(nbytes), count


def listed_at_peak_bytes(row: dict) -> int:
    """Bytes of the blocks listed live at the peak (``peak_bytes`` when none was left out)."""
    return sum(n * k for _, _, n, k in _blocks(row))


def collective_bytes(row: dict) -> dict[str, dict[str, int]]:
    """The bytes each collective holds at the rank's peak (NOTE [ the bytes each collective holds ]):
    ``{label: {category: bytes}}``, labels of :data:`COLLECTIVE_BUFFERS` in their order, only those
    holding any."""
    out: dict[str, dict[str, int]] = {}
    for category, call, nbytes, count in _blocks(row):
        label = next((lab for lab, part in COLLECTIVE_BUFFERS
                      if part in call and not (part.startswith("Distributed") and not call.endswith(part))), None)
        if label is not None:
            cats = out.setdefault(label, {})
            cats[category] = cats.get(category, 0) + nbytes * count
    order = list(dict.fromkeys(lab for lab, _ in COLLECTIVE_BUFFERS))
    return {lab: out[lab] for lab in order if lab in out}


def with_collectives(row: dict) -> dict:
    """:func:`with_formula`'s dict with ``collective_bytes``, ``collectives_exact`` (the blocks listed
    at the peak add up to it) and ``cuda_floor`` (:func:`memlab.sharding.reserved.cuda_floor` of
    those blocks: a floor from the allocator's rules, not measured) added."""
    return {**with_formula(row), "collective_bytes": collective_bytes(row),
            "collectives_exact": listed_at_peak_bytes(row) == row["peak_bytes"],
            "cuda_floor": cuda_floor(live_blocks(row))}


def measure_lines(row: dict) -> list[str]:
    """``memlab measure --shard-strategy``'s lines for one rank: its peak and where, the reference
    check, its categories at the peak, the bytes each collective holds there, its model state beside
    the ZeRO paper's."""
    check = "ok" if row["matches"] else "MISMATCH"
    at = row.get("at_peak", {})
    cats = ", ".join(f"{c.replace('_', ' ')} {_b(v)}" for c, v in row["peak"].items())
    coll = collective_bytes(row)
    exact = listed_at_peak_bytes(row) == row["peak_bytes"]
    held = "; ".join(f"{lab} {_b(sum(v.values()))}" + (f" ({', '.join(f'{c} {_b(b)}' for c, b in v.items())})"
                                                     if len(v) > 1 else f" ({next(iter(v))})")
                     for lab, v in coll.items()) or "none"
    m, f = model_state(row), formula(row)
    ms = ", ".join(f"{c.replace('_', ' ')} {_b(m[c])} / {_b(f[c])}" for c in m)
    gpu = cuda_floor(live_blocks(row))
    return [f"rank {row['rank']}/{row['world']}: peak {_b(row['peak_bytes'])} B in {at.get('phase', '?')} "
            f"({at.get('op', '?')}); check {check}: params max |diff| {row['max_param_diff']:.1e}, loss rel "
            f"{row['loss_rel_diff']:.1e}, grads rel {row.get('grad_rel_diff', float('nan')):.1e}",
            f"  at the peak (bytes): {cats}",
            f"  held by collectives at the peak (bytes{'' if exact else ', at least: not every block was listed'}): "
            f"{held}",
            f"  model state measured / ZeRO formula (bytes): {ms}",
            f"  on a GPU, from the caching allocator's rounding rules (a floor, not measured): these live blocks take "
            f">= {_b(gpu['allocated_floor_bytes'])} B allocated, >= {_b(gpu['reserved_floor_bytes'])} B reserved; "
            f"cached free blocks and fragmentation come on top"]
