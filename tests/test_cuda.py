"""The CUDA path: runs only where a GPU is present (skipped on CPU-only machines)."""
import pytest
import torch

import memlab

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")

FULL = 1000 * 1000 * 4
W = 1000 * 4


def test_cuda_peak_allocated_matches_pattern(patterns):
    m = memlab.measure("pattern_broadcast_mul", device="cuda", iterations=3, repeats=2)
    assert m.status == "ok", m.error
    # CUDA allocations are rounded up to 512-byte blocks; the two FULL buffers are multiples of 512.
    assert 2 * FULL + W <= m.peak_allocated_bytes <= 2 * FULL + W + 4 * 512
    assert m.allocated_after_step_bytes == (0, 0, 0)
    assert m.peak_reserved_bytes is not None and m.device_used_bytes > 0
    assert m.environment["gpu"]


def test_cuda_oom_is_a_row(patterns):
    m = memlab.measure("pattern_huge", device="cuda", rows=10, cols=10)
    assert m.status == "oom", m.error


def test_cuda_timeline_has_events(patterns):
    tl = memlab.timeline("pattern_broadcast_mul", device="cuda")
    assert tl.device.startswith("cuda")
    assert tl.peak_bytes >= 2 * FULL
    assert {"forward", "backward"} <= {e.phase for e in tl.events}


def test_cuda_in_process_and_subprocess_agree(patterns):
    a = memlab.measure("slice_loop", device="cuda", n=3000, d=64, hidden=256, chunk_size=1000, iterations=2, repeats=1)
    b = memlab.measure("slice_loop", device="cuda", n=3000, d=64, hidden=256, chunk_size=1000, iterations=2, repeats=1)
    assert a.status == b.status == "ok"
    assert a.peak_allocated_bytes == b.peak_allocated_bytes
