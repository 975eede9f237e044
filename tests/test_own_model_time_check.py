"""``python -m memlab.own_model.time_check``: the model-file answer's relative time beyond the timed batches."""
from types import SimpleNamespace

import pytest

from memlab.core.declaration import Declaration, Entry, NoLoop
from memlab.own_model import time_check


def _fam():
    points = [{"params": {"batch": b}, "relative_step_time": t} for b, t in ((2, 1.10), (4, 1.06), (6, 1.05), (16, 1.02))]
    return {"entries": [
        {"technique": "m__plain", "label": "m__plain", "baseline": True, "knobs": []},
        {"technique": "m__recompute", "label": "m__recompute", "knobs": [],
         "time": {"kind": "work", "work": "batch", "r": 1.0, "c": 0.2, "o": 0.0, "points": points,
                  "max_fit_rel_error": 0.03}},
        {"technique": "m__faster", "label": "m__faster", "knobs": [],
         "time": {"kind": "work", "work": "batch", "r": 0.5, "c": 0.0, "o": 0.0, "points": points,
                  "max_fit_rel_error": 0.25}},
    ]}


@pytest.fixture
def patched(monkeypatch):
    decl = Declaration(name="m", workload="m", sizes=("batch",), workload_fixed={},
                       entries=(Entry("m__plain"), Entry("m__recompute"), Entry("m__faster")), loop=NoLoop(),
                       time_sizes=({"batch": 2}, {"batch": 4}, {"batch": 6}), time_only_sizes=({"batch": 16},),
                       work="batch", held_out={"batch": (1, 8)})
    monkeypatch.setattr(time_check, "model_declaration", lambda model, vary: decl)
    monkeypatch.setattr(time_check, "fitted_family", lambda *a, **k: (_fam(), "fit.json", True))
    monkeypatch.setattr(time_check, "predict_time", lambda fam, entry, p: entry["time"]["r"] + entry["time"]["c"] / p["batch"])


def test_each_technique_is_measured_at_each_factor_in_every_run_and_compared_by_the_median(patched):
    calls = []
    figures = iter([1.30, 0.70, 1.01, 0.66] * 1 + [1.02, 0.64, 1.00, 0.65] + [1.03, 0.69, 0.99, 0.62])

    def measure(name, **params):
        calls.append((name, params["batch"]))
        return SimpleNamespace(relative_step_time=next(figures), status="ok", load_avg_before=0.5)

    doc = time_check.check_times("m.py", factors=(4, 10), runs=3, measure_fn=measure, say=lambda s: None)
    assert calls[:4] == [("m__recompute", 32), ("m__faster", 32), ("m__recompute", 80), ("m__faster", 80)]
    assert len(calls) == 12 and doc["time_only_sizes"] == [{"batch": 16}]
    first = doc["rows"][0]
    assert first["measured_runs"] == [1.30, 1.02, 1.03] and first["measured"] == 1.03
    assert first["predicted"] == pytest.approx(1.0 + 0.2 / 32)
    assert first["within"]                                   # +-2.4%: inside the 10% goal
    faster = doc["rows"][1]                                  # 0.5 floored at 1.0 (its points never read below 1)
    assert faster["floored"] and faster["predicted"] == 1.0
    assert faster["measured"] == 0.69 and not faster["within"]   # +45%, outside the goal and its 25% band


def test_bad_runs_and_factors_are_refused(patched):
    with pytest.raises(ValueError, match="runs=0"):
        time_check.check_times("m.py", runs=0, measure_fn=lambda *a, **k: None)
    with pytest.raises(SystemExit):
        time_check.main(["m.py", "--factors", "4,x"])
