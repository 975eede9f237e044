"""The timed phase pinned to one CPU (NOTE [ one CPU per timed phase ] in memlab.measurement.cpu_pin)."""
from __future__ import annotations

import fcntl
import os
import tempfile

import pytest

import memlab
from memlab.measurement import cpu_pin

pytestmark = [pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform"),
              pytest.mark.usefixtures("frozen_heap")]  # in-process measurements (conftest.frozen_heap)


@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
    """Lock files in a folder of this test's own, so timed phases elsewhere on the machine do not hold them."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(cpu_pin.TIMING_CPU_ENV, raising=False)


def _hold(cpu: int) -> int:
    fd = os.open(cpu_pin.lock_path(cpu), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_pins_the_lowest_free_cpu_and_restores_the_mask():
    mask = os.sched_getaffinity(0)
    with cpu_pin.pinned_to_one_cpu() as cpu:
        assert cpu == min(mask)
        assert os.sched_getaffinity(0) == {cpu}
    assert os.sched_getaffinity(0) == mask


def test_a_held_cpu_is_skipped_and_all_held_means_unpinned():
    mask = sorted(os.sched_getaffinity(0))
    held = [_hold(mask[0])]
    try:
        with cpu_pin.pinned_to_one_cpu() as cpu:
            assert cpu == (mask[1] if len(mask) > 1 else None)
        held += [_hold(c) for c in mask[1:]]
        with cpu_pin.pinned_to_one_cpu() as cpu:
            assert cpu is None
            assert os.sched_getaffinity(0) == set(mask)
    finally:
        for fd in held:
            os.close(fd)


def test_the_lock_is_released_after_the_phase():
    with cpu_pin.pinned_to_one_cpu() as first:
        pass
    with cpu_pin.pinned_to_one_cpu() as again:
        assert again == first


def test_environment_names_the_cpu_or_turns_pinning_off(monkeypatch):
    mask = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv(cpu_pin.TIMING_CPU_ENV, str(mask[-1]))
    with cpu_pin.pinned_to_one_cpu() as cpu:
        assert cpu == mask[-1]
    monkeypatch.setenv(cpu_pin.TIMING_CPU_ENV, "none")
    with cpu_pin.pinned_to_one_cpu() as cpu:
        assert cpu is None
    for bad in ("x", str(max(mask) + 1000)):
        monkeypatch.setenv(cpu_pin.TIMING_CPU_ENV, bad)
        with pytest.raises(ValueError, match=f"{cpu_pin.TIMING_CPU_ENV}=.*{bad}.*expected 'none' or one of"):
            with cpu_pin.pinned_to_one_cpu():
                pass


def test_disabled_leaves_the_thread_alone():
    mask = os.sched_getaffinity(0)
    with cpu_pin.pinned_to_one_cpu(False) as cpu:
        assert cpu is None and os.sched_getaffinity(0) == mask


def test_a_measurement_records_its_timing_cpu():
    m = memlab.measure("unchunked", isolate=False, iterations=1, repeats=2, time_budget=0.0, check=False,
                       n=64, d=8, hidden=16)
    assert m.status == "ok", m.error
    assert m.environment["timing_cpu"] == min(os.sched_getaffinity(0))
    threads = memlab.measure("unchunked", isolate=False, iterations=1, repeats=2, time_budget=0.0, check=False,
                             threads=2, n=64, d=8, hidden=16)
    assert threads.environment["timing_cpu"] is None  # several threads: not pinned
