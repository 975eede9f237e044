"""Reversible family analysis: the activation peak, and the issue's measurements as a script.

# NOTE [ activation peak ]
``Measurement.peak_allocated_bytes`` counts everything a step allocates above the baseline, parameter
gradients included.  On the coupling stack the gradients (8 MiB per block at width 512, hidden
1024, float32) outgrow the activations a block frees, so plain autograd peaks at the *end* of
backward with every gradient live, and ``peak - grad_bytes`` comes out near the reversible value:
the saving is hidden.  The activation peak here is instead

    max over forward and backward of  (bytes live above the baseline) - (bytes of final gradients live)

where "final gradients" are the storages that hold the leaves' ``.grad`` at the end of backward,
counted from the moment each was allocated (found by address in the profiler's allocation events:
the last allocation at that address before backward ends).  This is independent of how a design
delivers gradients (returned by a Function, accumulated inside backward, set by hand), and
temporaries such as a gradient later added in place into ``.grad`` count as activations.  Exact on
CPU, from the same profiler allocation events as the peak; one step without the optimizer.

Run ``python -m memlab.analysis.reversible [--quick] [--out FILE]`` for the issue's table: every
technique of the family (peers when installed) on depth 16, batch 512, width 512, hidden 1024, and
the depth sweep 4/16/64 of the designs compared in the issue, each subprocess-isolated.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
from typing import Any

__all__ = ["activation_peak", "LeakyCtxOutput", "ISSUE_CONFIG", "run_issue", "format_rows", "main"]

#: the issue's workload: 16 blocks, MLP 512 -> 1024 -> 512, input [512, 1024]
ISSUE_CONFIG = {"depth": 16, "batch": 512, "width": 512, "hidden": 1024}


def activation_peak(technique, problem) -> dict[str, Any]:
    """Trace forward and backward of ``technique`` on ``problem``; see NOTE [ activation peak ].

    Leaves' ``.grad`` are None before and after.  Returns bytes above the step's start::

        {"activation_peak_bytes": int, "activation_peak_phase": "forward" | "backward",
         "step_peak_bytes": int (forward + backward only), "final_grad_bytes": int}
    """
    from torch.profiler import record_function

    from ..measurement.alloc_trace import trace_allocations

    device = problem.grad_output.device
    leaves = problem.leaves()
    ptrs: set[int] = set()

    def step() -> None:
        with record_function("memlab::forward"):
            out = technique.forward(problem)
        with record_function("memlab::backward"):
            out.backward(problem.grad_output)
            del out
        ptrs.update(t.grad.untyped_storage().data_ptr() for t in leaves if t.grad is not None)
        for t in leaves:
            t.grad = None

    gc.collect()
    events, windows = trace_allocations(step, device, 1)
    gc.collect()
    marks = {w.name: (w.start_ns, w.end_ns) for w in windows}
    return _activation_curve([(e.time_ns, e.delta_bytes, e.ptr) for e in events], marks, ptrs)


def _activation_curve(events, windows, grad_ptrs: set[int]) -> dict[str, Any]:
    start, bwd_start, end = windows["forward"][0], windows["backward"][0], windows["backward"][1]
    inside = [e for e in events if start <= e[0] <= end]
    last_alloc: dict[int, int] = {}
    for i, (_, delta, ptr) in enumerate(inside):
        if delta > 0 and ptr in grad_ptrs:
            last_alloc[ptr] = i
    grad_alloc = set(last_alloc.values())
    live = grads = peak = step_peak = 0
    phase = "forward"
    for i, (t, delta, _) in enumerate(inside):
        live += delta
        if i in grad_alloc:
            grads += delta
        step_peak = max(step_peak, live)
        if live - grads > peak:
            peak, phase = live - grads, ("backward" if t >= bwd_start else "forward")
    return {"activation_peak_bytes": int(peak), "activation_peak_phase": phase,
            "step_peak_bytes": int(step_peak), "final_grad_bytes": int(grads)}


# ---------------------------------------------------------------------------------------------
# the classic leak, for the leak check and the reproduction

def _leaky_classes():
    import torch

    from ..technique import Technique
    from ..workloads.residual_stack import ResidualStack

    def couple(f, g, x1, x2):
        y1 = x1 + f(x2)
        return y1, x2 + g(y1)

    class _LeakyBlockFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, f, g, *params):
            ctx.f, ctx.g = f, g
            ctx.save_for_backward(x)
            y = torch.cat(couple(f, g, *x.detach().chunk(2, dim=1)), dim=1)
            ctx.y = y  # the bug: output -> grad_fn (this ctx) -> ctx.y -> output, freed only by gc
            return y

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            params = [*ctx.f.parameters(), *ctx.g.parameters()]
            with torch.enable_grad():
                xd = x.detach().requires_grad_()
                y = torch.cat(couple(ctx.f, ctx.g, *xd.view_as(xd).chunk(2, dim=1)), dim=1)
            dx, *dps = torch.autograd.grad(y, [xd, *params], dy)
            return (dx, None, None, *dps)

    class LeakyCtxOutput(Technique):  # no name=: never registered, never swept
        """A per-block Function that stores its output as ``ctx.y = y`` (the classic reference cycle).

        Correct values and gradients, but each step leaves every block's output [B, 2·C] alive until
        Python's cycle collector runs: ``allocated_after_step_bytes`` grows by about depth x
        [B, 2·C] bytes per step.  Measure it in-process: ``memlab.measure(LeakyCtxOutput,
        isolate=False, iterations=10, ...)``.
        """

        name = "leaky_ctx_output"
        workload = ResidualStack

        def forward(self, problem):
            x = problem.inputs["x"]
            for f, g in zip(problem.model.f, problem.model.g):
                x = _LeakyBlockFn.apply(x, f, g, *f.parameters(), *g.parameters())
            return x

    return LeakyCtxOutput


def __getattr__(name: str):
    # LeakyCtxOutput is built on first use so importing this module does not import torch
    if name == "LeakyCtxOutput":
        cls = _leaky_classes()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------
# the issue's measurements

def _techniques(include_peers: bool) -> list[str]:
    import memlab

    names = ["residual", "checkpoint_block", "reversible", "reversible_nosave"]
    if include_peers:
        names += [n for n in memlab.list_techniques("reversible") if n not in names]
    return names


def _row(m) -> dict[str, Any]:
    extra = m.extra or {}
    return {
        "technique": m.technique, "depth": m.params.get("depth"), "status": m.status, "error": m.error,
        "peak_allocated_bytes": m.peak_allocated_bytes, "grad_bytes": m.grad_bytes,
        "activation_peak_bytes": extra.get("activation_peak_bytes"), "flops": m.flops,
        "after_step_bytes": list(m.allocated_after_step_bytes), "matches_reference": m.matches_reference,
        "max_abs_error": m.max_abs_error, "errors_by_tensor": m.errors_by_tensor,
        "step_time_s": m.step_time_s,
    }


def run_issue(*, quick: bool = False, dtype: str = "float32", iterations: int = 10, sweep_iterations: int = 3,
              progress=lambda s: None) -> dict[str, Any]:
    """Measure the issue's table and depth sweep (subprocess-isolated, CPU).

    The table (every technique at depth 16) traces ``iterations`` steps; the depth sweep (4, 16, 64
    for residual, reversible and the peers) ``sweep_iterations``.
    ``quick`` shrinks the workload (batch 128, width 128, hidden 256) for a fast look.
    Returns ``{"config", "table": [row...], "depth_sweep": [row...]}``; rows as :func:`_row`.
    """
    import memlab

    cfg = dict(ISSUE_CONFIG)
    if quick:
        cfg.update(batch=128, width=128, hidden=256)
    table = []
    for name in _techniques(include_peers=True):
        progress(f"{name} depth={cfg['depth']}")
        table.append(_row(memlab.measure(name, dtype=dtype, iterations=iterations, repeats=1, **cfg)))
        progress(format_rows(table[-1:]))
    sweep = []
    sweep_names = [n for n in ("residual", "reversible", "memcnn", "revlib")
                   if n in memlab.list_techniques("reversible")]
    for name in sweep_names:
        for depth in (4, 16, 64):
            if depth == cfg["depth"]:
                sweep.append(next(r for r in table if r["technique"] == name))
                continue
            progress(f"{name} depth={depth}")
            sweep.append(_row(memlab.measure(name, dtype=dtype, iterations=sweep_iterations, repeats=1,
                                             **{**cfg, "depth": depth})))
            progress(format_rows(sweep[-1:]))
    return {"config": cfg, "dtype": dtype, "iterations": iterations, "table": table, "depth_sweep": sweep}


def format_rows(rows: list[dict[str, Any]], flops_base: int | None = None) -> str:
    """A fixed-width text table (MiB with one decimal, FLOPs relative to ``flops_base``)."""
    mib = lambda b: "-" if b is None else f"{b / 2**20:.1f}"  # noqa: E731
    lines = [f"{'technique':<18} {'depth':>5} {'peak':>8} {'grads':>8} {'activ.':>8} {'flops':>6} "
             f"{'after_step':>12} {'ref':>5} {'max_err':>9}"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"{r['technique']:<18} {r['depth']:>5} {r['status'].upper()}: {(r['error'] or '')[:80]}")
            continue
        fl = "-" if not flops_base or r["flops"] is None else f"{r['flops'] / flops_base:.3f}"
        after = r["after_step_bytes"]
        steady = "flat" if len(set(after)) == 1 else f"+{mib(max(after) - min(after))}"
        lines.append(f"{r['technique']:<18} {r['depth']:>5} {mib(r['peak_allocated_bytes']):>8} "
                     f"{mib(r['grad_bytes']):>8} {mib(r['activation_peak_bytes']):>8} {fl:>6} {steady:>12} "
                     f"{str(r['matches_reference']):>5} {r['max_abs_error'] or 0:>9.2e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memlab.analysis.reversible", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller widths (batch 128, width 128, hidden 256)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    data = run_issue(quick=args.quick, dtype=args.dtype, progress=lambda s: print(s, file=sys.stderr, flush=True))
    base = next((r["flops"] for r in data["table"] if r["technique"] == "residual"), None)
    print(f"config {data['config']} dtype {data['dtype']}; MiB above baseline; activ. = NOTE [ activation peak ]")
    print(format_rows(data["table"], base))
    print("\ndepth sweep")
    print(format_rows(data["depth_sweep"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
