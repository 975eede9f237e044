"""Which heap a time represents (NOTE [ which heap a time represents ] in memlab.measurement.resident):
the kept heap by default, glibc's own rule on request, the row naming which."""
from __future__ import annotations

import pytest

import memlab
from memlab.measurement import resident

#: a small chunking point, looked up by its role (a technique with a chunk size), not by name
_PARAMS = {"n": 64, "d": 8, "hidden": 16, "chunk_size": 16}


def _chunked() -> str:
    return next(n for n in memlab.list_techniques("chunking")
                if not memlab.get_technique(n).baseline and "chunk_size" in memlab.get_technique(n).all_params())


def test_the_choice_is_kept_unless_default_is_asked_and_anything_else_is_refused():
    assert resident.timing_heap_choice({}) == "kept"
    assert resident.timing_heap_choice({resident.TIMING_HEAP_ENV: " Default "}) == "default"
    with pytest.raises(ValueError, match=r"MEMLAB_TIMING_HEAP='glibc' is not valid: expected one of kept, default"):
        resident.timing_heap_choice({resident.TIMING_HEAP_ENV: "glibc"})


def test_a_bad_choice_is_refused_before_any_child(monkeypatch):
    monkeypatch.setenv(resident.TIMING_HEAP_ENV, "never")
    with pytest.raises(ValueError, match="MEMLAB_TIMING_HEAP='never' is not valid"):
        memlab.measure(_chunked(), **_PARAMS)


def test_a_row_timed_on_glibcs_defaults_says_so(monkeypatch):
    kept = memlab.measure(_chunked(), iterations=2, repeats=3, time_budget=0.0, **_PARAMS)
    monkeypatch.setenv(resident.TIMING_HEAP_ENV, "default")
    default = memlab.measure(_chunked(), iterations=2, repeats=3, time_budget=0.0, **_PARAMS)
    assert kept.status == default.status == "ok", (kept.error, default.error)
    assert kept.environment["timing_heap"] == resident.TIMING_HEAP_KEPT
    assert default.environment["timing_heap"] == resident.TIMING_HEAP_DEFAULT
    # the exact figures do not depend on the timing heap
    assert default.peak_allocated_bytes == kept.peak_allocated_bytes
