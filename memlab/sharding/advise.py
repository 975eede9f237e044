"""The largest per-rank batch whose predicted per-rank peak fits a memory budget at N ranks (issue 48:
``memlab advise --shard-strategy fsdp --world 64 --budget 80GiB``); torch-free.

# NOTE [ the largest per-rank batch ]
Each phase's predicted highest point on rank r is affine in the per-rank batch b (NOTE [ the
per-rank peak as a function of N ] in :mod:`memlab.sharding.predict`): ``a(r, p) + s(p)·b`` bytes,
``a`` the model state from the shapes plus each fitted category's constant and buffer counts at
(N, r), ``s`` the sum of the categories' per-sample bytes ``c1`` (the same on every rank).  The
rank's peak is the highest phase, so every rank fits at b when every line does: the largest b is
``min floor((budget - a) / s)`` over the lines with ``s > 0``, exact in rationals; a line with
``s <= 0`` does not grow with b and must fit on its own.  :func:`largest_batch` then evaluates
:func:`~memlab.sharding.predict.predict_rank` on every rank at b and b + 1 (the worst rank's peak
at b within the budget, at b + 1 above it).  What it inherits: the fit's assumptions (the same
buffers at each phase's highest point at every N and b, shown at the fit's held-out worlds only)
and bytes of the device the rows ran on (CPU: c10 allocates what is asked; a GPU's caching
allocator reserves more, not included).  Evidence: docs/sharding.md#memlab-advise---shard-strategy.

# NOTE [ a sharded answer on CUDA ]
``--device cuda`` answers in the advisor's CUDA need (:func:`memlab.advisor.advise.cuda_need`): the
exact allocated peak plus the stated allocator margin (:data:`~memlab.advisor.advise.CUDA_MARGIN`: a
fraction for segment rounding and fragmentation, a fixed part, cuBLAS's workspaces), the same margin
every built-in family's CUDA answer uses.  The budget is turned into the largest allocated peak whose
need fits it (:func:`allocated_budget`) and the batch is solved against that.  It is a stated margin,
not a measurement: it was checked against GPUs for the built-in families (data/gpu-check), not for a
sharded step, and NCCL's own buffers (outside the caching allocator) and the CUDA context are not in it.
"""
from __future__ import annotations

from fractions import Fraction
from math import floor

from ..advisor.advise import CUDA_MARGIN, cuda_need
from .layout import model_state_bytes
from .predict import ANALYTIC, Fit, base_strategy, features, predict_rank

__all__ = ["phase_lines", "worst_rank", "largest_batch", "answer_json", "format_answer", "MAX_TARGET_WORLD",
           "allocated_budget", "DEVICES"]

#: the devices an answer is given for (NOTE [ a sharded answer on CUDA ])
DEVICES = ("cpu", "cuda")

#: the largest N an answer is predicted for (the issue's range: N = 8 ... 1024)
MAX_TARGET_WORLD = 1024


def phase_lines(f: Fit, label: str, world: int, rank: int) -> dict[str, tuple[Fraction, Fraction]]:
    """``{phase: (a, s)}``: rank ``rank``'s predicted highest point of each phase at ``world`` ranks is
    ``a + s·b`` bytes at per-rank batch ``b`` (NOTE [ the largest per-rank batch ])."""
    if label not in f.categories:
        raise ValueError(f"strategy={label!r} is not valid for this fit; valid: {', '.join(f.categories)}")
    state = model_state_bytes(base_strategy(label), f.shapes, world, rank)
    feats = features(label, f.shapes, f.units, world, rank)
    fixed = sum(Fraction(state[c]) for c in ANALYTIC)
    return {phase: (fixed + sum(cf.value(0, feats) for cf in fits.values()), sum(cf.c1 for cf in fits.values()))
            for phase, fits in f.categories[label].items()}


def worst_rank(f: Fit, label: str, world: int, b: int) -> dict:
    """The rank whose predicted peak is highest at per-rank batch ``b``: :func:`predict_rank`'s dict
    with ``rank`` added (the lowest such rank)."""
    best = None
    for r in range(world):
        p = predict_rank(f, label, world, r, b)
        if best is None or p["peak"] > best["peak"]:
            best = {**p, "rank": r}
    return best


def _check(label: str, world: int, budget: int) -> None:
    if not isinstance(world, int) or isinstance(world, bool) or not 1 <= world <= MAX_TARGET_WORLD:
        raise ValueError(f"world={world!r} is not valid; valid: an int in 1..{MAX_TARGET_WORLD}")
    if base_strategy(label) == "fsdp" and world == 1:
        raise ValueError(f"world=1 is not valid for {label}; valid: 2..{MAX_TARGET_WORLD} (FSDP's fit is of N >= 2: "
                         f"on one rank it gathers nothing)")
    if not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget={budget!r} is not valid; valid: an int >= 1 (bytes)")


def allocated_budget(budget: int, device: str) -> int:
    """The largest allocated peak (bytes) whose need on ``device`` is at most ``budget`` bytes: the budget
    itself on ``cpu``, on ``cuda`` the largest ``P`` with ``cuda_need(P) <= budget`` (0 when even an
    empty step's margin is over it; NOTE [ a sharded answer on CUDA ]).  ValueError naming ``device``
    (valid: :data:`DEVICES`)."""
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is not valid; valid: {', '.join(DEVICES)}")
    if device == "cpu":
        return budget
    if cuda_need(0) > budget:
        return 0
    p = int((budget - cuda_need(0)) / (1 + CUDA_MARGIN["fraction"]))
    while cuda_need(p + 1) <= budget:
        p += 1
    while p > 0 and cuda_need(p) > budget:
        p -= 1
    return p


def largest_batch(f: Fit, label: str, world: int, budget: int) -> dict:
    """The largest per-rank batch ``b >= 1`` whose predicted peak on every one of ``world`` ranks is at
    most ``budget`` bytes (NOTE [ the largest per-rank batch ]).  Returns ``{"strategy", "world",
    "budget_bytes", "batch_per_rank"`` (0: not even b = 1 fits), ``"at_b"`` and ``"at_b_plus_1"``
    (:func:`worst_rank` at b, or at 1 when 0, and at b + 1: ``peak`` bytes, ``phase``, ``rank`` and
    the categories), ``"limiting"``: ``{"rank", "phase", "a", "s"}`` of the line that sets b}``.
    ValueError naming ``world`` (1..:data:`MAX_TARGET_WORLD`; fsdp 2..), ``budget`` or a fit whose
    peak does not grow with b."""
    _check(label, world, budget)
    bound, limiting, fixed_ok = None, None, True
    for r in range(world):
        for phase, (a, s) in phase_lines(f, label, world, r).items():
            if s > 0:
                b = floor((budget - a) / s)
                if bound is None or b < bound:
                    bound, limiting = b, {"rank": r, "phase": phase, "a": a, "s": s}
            elif a > budget:
                fixed_ok = False
    if bound is None:
        raise ValueError(f"the fit of {label} has no phase whose peak grows with the batch (c1 = 0); valid: rows "
                         f"at two or more per-rank batches")
    b = max(bound, 0) if fixed_ok else 0
    at = worst_rank(f, label, world, max(b, 1))
    if b and at["peak"] > budget:   # a line with s <= 0 above the budget at b: nothing fits
        b, at = 0, worst_rank(f, label, world, 1)
    return {"strategy": label, "world": world, "budget_bytes": budget, "batch_per_rank": b, "at_b": at,
            "at_b_plus_1": worst_rank(f, label, world, b + 1), "limiting": limiting}


def _n(x) -> int | float:
    x = Fraction(x)
    return int(x) if x.denominator == 1 else float(x)


def _c(x) -> str:
    """Bytes with thousands separators; one decimal where a fit constant made them fractional."""
    return f"{x:,}" if isinstance(x, int) else f"{x:,.1f}"


def _gib(x) -> str:
    """Bytes in the largest binary unit that keeps them >= 1 (``79.99 GiB``, ``1.1 MiB``)."""
    x = float(x)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= size:
            return f"{x / size:.2f} {unit}"
    return f"{x:.0f} B"


def answer_json(ans: dict) -> dict:
    """:func:`largest_batch`'s answer with every byte figure an int (a float where a fit constant is
    fractional)."""
    def one(p: dict) -> dict:
        return {k: v if k in ("phase", "rank") else _n(v) for k, v in p.items()}

    lim = ans["limiting"]
    return {**ans, "at_b": one(ans["at_b"]), "at_b_plus_1": one(ans["at_b_plus_1"]),
            "limiting": {**lim, "a": _n(lim["a"]), "s": _n(lim["s"])}}


def format_answer(ans: dict, model: str, unit: str, fitted: str, checked: list[str], device: str = "cpu",
                  budget: int | None = None) -> str:
    """The answer in words: the largest per-rank batch (``unit``: what one sample is, e.g. ``sequences
    of 16 tokens``), the worst rank's predicted peak at b and b + 1, where it peaks, and what the fit
    rests on (``fitted``: the fit points; ``checked``: one line per held-out check)."""
    j, b = answer_json(ans), ans["batch_per_rank"]
    at, nxt = j["at_b"], j["at_b_plus_1"]
    allocated = f"{_c(j['budget_bytes'])} B ({_gib(j['budget_bytes'])})"
    cuda = device == "cuda"
    budget_text = f"CUDA budget {_c(budget)} B ({_gib(budget)}): allocated peak at most {allocated}" if cuda \
        else f"budget {allocated}"
    need = cuda_need(int(at["peak"]))
    need_line = [f"  CUDA need at b = {max(b, 1):,}: {_c(need)} B ({_gib(need)})"] if cuda else []
    cats = ", ".join(f"{c.replace('_', ' ')} {_c(v)}" for c, v in at.items() if c not in ("peak", "phase", "rank"))
    lines = [f"{model} under {ans['strategy']} at N = {ans['world']} ranks, {budget_text} per rank"]
    if b:
        lines += [f"  largest per-rank batch: b = {b:,} {unit} (global batch {b * ans['world']:,})",
                  f"  predicted per-rank peak at b = {b:,}: {_c(at['peak'])} B ({_gib(at['peak'])}), highest on rank "
                  f"{at['rank']}, in {at['phase']}", *need_line,
                  f"  at b = {b + 1:,}: {_c(nxt['peak'])} B ({_gib(nxt['peak'])}) on rank {nxt['rank']}, in "
                  f"{nxt['phase']}: over the budget by {_c(nxt['peak'] - j['budget_bytes'])} B"]
    else:
        lines += [f"  nothing fits: at b = 1 the predicted per-rank peak is {_c(at['peak'])} B ({_gib(at['peak'])}) "
                  f"on rank {at['rank']}, in {at['phase']}, over the budget", *need_line]
    lines += [f"  rank {at['rank']} at b = {max(b, 1):,} (bytes): {cats}",
              f"  fitted on {fitted}", *(f"  {c}" for c in checked)]
    if cuda:
        lines.append(f"  on CUDA: the allocated peak plus the advisor's stated allocator margin "
                     f"({100 * CUDA_MARGIN['fraction']:.0f}% + {CUDA_MARGIN['fixed_bytes'] // 2**20} MiB + "
                     f"{_gib(CUDA_MARGIN['workspace_bytes'])} of cuBLAS workspaces), as every built-in family's CUDA "
                     f"answer; checked on GPUs for those families, not for a sharded step; NCCL's own buffers and the "
                     f"CUDA context not included (NOTE [ a sharded answer on CUDA ])")
    else:
        lines.append("  bytes as the fit's device allocates them (CPU: exactly what c10 is asked for); a GPU's caching "
                     "allocator reserves more on top: --device cuda adds the advisor's stated margin")
    return "\n".join(lines)
