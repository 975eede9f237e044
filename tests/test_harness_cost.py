"""The harness's own cost is one figure (NOTE [ harness cost ] in memlab.measurement.harness_cost):
``memlab sweep``'s breakdown and ``memlab bench-harness`` both take it from ``harness_seconds``, and an
isolated measurement records every phase that figure subtracts."""
from __future__ import annotations

import memlab
from memlab.measurement import harness_cost
from memlab.sweep import breakdown

#: a small chunking point (seconds, not minutes), looked up by its role, not by name
_PARAMS = {"n": 64, "d": 8, "hidden": 16, "chunk_size": 16}


def _chunked_technique() -> str:
    """The first technique of the chunking family that takes a chunk size (not its baseline)."""
    for name in memlab.list_techniques("chunking"):
        cls = memlab.get_technique(name)
        if not cls.baseline and "chunk_size" in cls.all_params() and not cls.peer:
            return name
    raise AssertionError("the chunking family has no chunked technique")


class _Fake:
    """What overhead() reads of a Measurement."""

    status = "ok"
    extra = {"predict_cuda_s": 0.0}

    def to_dict(self):
        return {"extra": {"reference_check_s": 0.25, "harness_s": {"server_start": 0.0}}, "step_times_s": [0.5],
                "reference_step_time_s": 0.125}


def test_the_sweep_breakdown_and_bench_harness_take_the_cost_from_one_function(monkeypatch):
    assert breakdown.harness_seconds is harness_cost.harness_seconds
    calls = []

    def spy(rows, wall_s, jobs=1):
        calls.append((list(rows), wall_s, jobs))
        return {"inside": 1.0, "server_start": 0.0, "outside": 0.375, "per_point": 0.375}

    monkeypatch.setattr(harness_cost.memlab, "measure", lambda *a, **k: _Fake())
    monkeypatch.setattr(harness_cost, "shutdown_server", lambda: None)
    monkeypatch.setattr(harness_cost, "harness_seconds", spy)
    rows = harness_cost.overhead([("x", {})], modes=("spawn",))
    assert [r.outside_s for r in rows] == [0.375] and calls[0][0] == [_Fake().to_dict()] and calls[0][2] == 1
    # the sweep's breakdown prints the same function's figure
    monkeypatch.setattr(breakdown, "harness_seconds", spy)
    text = breakdown.time_breakdown([_Fake().to_dict()], wall_s=2.0, jobs=1)
    assert "outside the measured phases: 0.38 s per point" in text and calls[-1][1:] == (2.0, 1)


def test_an_isolated_measurement_records_every_phase_and_its_childrens_wall_time():
    m = memlab.measure(_chunked_technique(), isolate="fork", iterations=2, repeats=3, time_budget=0.0, **_PARAMS)
    assert m.status == "ok", m.error
    for key in ("reference_check_s", "recorded_steps_s", "step_check_s", "resident_step_s", "flop_step_s",
                "timing_setup_s", "timed_check_s"):
        assert isinstance(m.extra.get(key), float) and m.extra[key] >= 0.0, (key, m.extra.get(key))
    assert m.extra["step_check_s"] > 0 and m.extra["timed_check_s"] > 0 and m.extra["timing_setup_s"] > 0
    harness = m.extra["harness_s"]
    assert set(harness) == {"children", "server_start"} and all(v >= 0.0 for v in harness.values())
    cost = harness_cost.harness_seconds([m.to_dict()], harness["children"])
    # the phases are timed inside the children, so they fit inside the children's wall time as the parent saw it
    assert cost["inside"] + cost["server_start"] <= harness["children"]
    # a second measurement of the same thread finds its server running: no start counted again
    again = memlab.measure(_chunked_technique(), isolate="fork", iterations=2, repeats=3, time_budget=0.0, **_PARAMS)
    assert again.extra["harness_s"]["server_start"] == 0.0
