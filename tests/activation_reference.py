"""The activation peak as the reversible family first traced it, kept as an independent check of
the measurement's memory categories (tests only; the measurement reports it from the categories,
NOTE [ memory categories ] in ``memlab/measurement/categories.py``).

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
"""
from __future__ import annotations

import gc
from typing import Any

__all__ = ["activation_peak"]


def activation_peak(technique, problem) -> dict[str, Any]:
    """Trace forward and backward of ``technique`` on ``problem``; see NOTE [ activation peak ].

    Leaves' ``.grad`` are None before and after.  Returns bytes above the step's start::

        {"activation_peak_bytes": int, "activation_peak_phase": "forward" | "backward",
         "step_peak_bytes": int (forward + backward only), "final_grad_bytes": int}
    """
    from torch.profiler import record_function

    from memlab.measurement.alloc_trace import trace_allocations

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
    return _activation_curve([(e.time_ns, e.delta_bytes, e.address) for e in events], marks, ptrs)


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
