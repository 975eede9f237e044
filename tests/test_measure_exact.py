"""CPU allocated peaks are exact to the byte on patterns computed by hand, and reproducible."""
import pytest

import memlab
from memlab.measurement.alloc_trace import trace_allocations, iteration_stats

import torch

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

FULL = 1000 * 1000 * 4      # bytes of one [1000, 1000] float32 tensor
W = 1000 * 4                # bytes of w [1000] and of its gradient


def test_trace_of_known_allocations_is_exact():
    def step():
        a = torch.empty(1000, 250)       # 1,000,000 B
        b = torch.empty(3, 7, dtype=torch.float64)   # 168 B
        del a
        c = torch.empty(500, 500)        # 1,000,000 B
        del b, c

    events, windows = trace_allocations(step, torch.device("cpu"), iterations=2)
    stats = iteration_stats(events, windows)
    assert stats.peaks == (1_000_168, 1_000_168)
    assert stats.after == (0, 0)
    assert [e.delta_bytes for e in events][:4] == [1_000_000, 168, -1_000_000, 1_000_000]


def test_inference_pattern_peak_is_hand_computed(patterns):
    # ones_like(x) FULL + ones(rows/2) FULL/2, free FULL, then x*w FULL -> peak 1.5 FULL + ... :
    # live after `del a` = FULL/2; out allocates FULL -> 1.5 FULL; never above FULL + FULL/2.
    m = memlab.measure("pattern_two_buffers", mode="infer", isolate=False, repeats=1, iterations=3, time_budget=0)
    assert m.status == "ok", m.error
    assert m.peak_allocated_bytes == FULL + FULL // 2
    assert m.allocated_after_step_bytes == (0, 0, 0)
    assert m.matches_reference


def test_backward_temporaries_are_counted(patterns):
    # forward: out = x * w                      -> FULL live
    # backward: grad_w = (g * x) -> FULL temporary, reduced with sum_to_size -> W
    #           peak = out FULL + temporary FULL + reduced W
    m = memlab.measure("pattern_broadcast_mul", isolate=False, repeats=1, iterations=3, time_budget=0)
    assert m.status == "ok", m.error
    assert m.peak_allocated_bytes == 2 * FULL + W
    assert m.allocated_after_step_bytes == (0, 0, 0)
    # baseline: x FULL + w W + grad_output FULL (SGD without momentum keeps no state)
    assert m.allocated_baseline_bytes == 2 * FULL + W
    assert m.grad_bytes == W


def test_same_figure_in_two_fresh_processes(patterns):
    # exact bytes only: each timing child stops after its one checked step (time_budget 0)
    a = memlab.measure("slice_loop", n=3000, d=64, hidden=256, chunk_size=1000, iterations=2, repeats=1, time_budget=0)
    b = memlab.measure("slice_loop", n=3000, d=64, hidden=256, chunk_size=1000, iterations=2, repeats=1, time_budget=0)
    assert a.status == b.status == "ok", (a.error, b.error)
    assert a.peak_allocated_bytes == b.peak_allocated_bytes
    assert a.peak_allocated_per_iteration_bytes == b.peak_allocated_per_iteration_bytes
    assert a.environment["malloc_mmap_threshold"] == "131072"


def test_timeline_matches_measure(patterns):
    tl = memlab.timeline("pattern_broadcast_mul", isolate=False)
    assert tl.peak_bytes == 2 * FULL + W
    assert tl.events[-1].live_bytes == 0
    phases = {e.phase for e in tl.events}
    assert {"forward", "backward"} <= phases
    assert any(e.op == "aten::mul" and e.phase == "forward" and e.delta_bytes == FULL for e in tl.events)


def test_measurement_json_round_trip(patterns):
    m = memlab.measure("pattern_broadcast_mul", isolate=False, repeats=1, iterations=1, time_budget=0, rows=10, cols=10)
    again = memlab.Measurement.from_json(m.to_json())
    assert again == m
    with pytest.raises(ValueError, match="missing field"):
        memlab.Measurement.from_dict({"technique": "x"})
