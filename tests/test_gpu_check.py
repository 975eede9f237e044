"""memlab.cuda.gpu_check's plumbing, on CPU: the CPU half written once and reused, rows kept in order when
measured concurrently, a failing configuration a row, a bad predictions file a clear error.  (Its GPU
half runs only on a GPU host: ``make gpu-check``.)"""
import json

import pytest

from memlab.cuda import gpu_check
from memlab.technique import TechniqueUnavailable

CFG = {"technique": "slice_loop", "params": {"n": 600, "d": 16, "hidden": 32, "chunk_size": 200}, "mode": "train",
       "optimizer": "sgd"}
OTHER = {**CFG, "params": {**CFG["params"], "chunk_size": 300}}


def test_predict_only_writes_a_file_the_gpu_half_reuses(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "configurations", lambda reproductions, quick=False: [CFG])
    target = tmp_path / "pred.json"
    assert gpu_check.main(["--predict-only", "--predictions", str(target)]) == 0
    pred = gpu_check.load_predictions(target)
    half = pred["rows"][gpu_check.config_key(CFG)]
    assert half["cpu_status"] == "ok"
    # the prediction replays the CPU trace with CUDA's 512-byte rounding: at or above the CPU's exact peak
    assert half["predicted_allocated_bytes"] >= half["cpu_peak_allocated_bytes"] > 0
    assert half["predicted_reserved_bytes"] >= 0  # the warm-up's cached segments may already hold the peak
    assert half["predicted_reserved_total_bytes"] >= half["predicted_allocated_bytes"]

    # a configuration found in the file is not predicted again; one missing from it is
    sentinel = {**half, "predicted_allocated_bytes": 12345}
    rows = {gpu_check.config_key(CFG): sentinel}
    reused = gpu_check.row_for(CFG, rows, device="cpu", shared=True)
    fresh = gpu_check.row_for(OTHER, rows, device="cpu")
    assert reused["predicted_allocated_bytes"] == 12345
    assert reused["measured_allocated_bytes"] == half["cpu_peak_allocated_bytes"]
    assert reused["device_used_bytes"] is None  # shared device: the driver's figure is not this row's
    assert reused["measured_reserved_total_bytes"] >= reused["measured_reserved_bytes"]
    assert fresh["predicted_allocated_bytes"] >= fresh["measured_allocated_bytes"] > 0
    assert fresh["predicted_allocated_bytes"] != 12345


def test_rows_keep_the_configurations_order_and_a_failure_is_a_row():
    cfgs = [{**CFG, "params": {"i": i}} for i in range(6)]
    seen = []

    def half(cfg):
        if cfg["params"]["i"] == 3:
            raise RuntimeError("boom")
        if cfg["params"]["i"] == 4:
            raise TechniqueUnavailable("peer comparator needs revlib==1.7.2 (not installed)")
        return {"status": "ok"}

    rows = gpu_check.check_all(cfgs, half, jobs=3, on_row=lambda done, row: seen.append(done))
    assert [r["params"]["i"] for r in rows] == list(range(6))
    assert rows[3]["status"] == "error" and rows[3]["error"] == "RuntimeError: boom"
    assert rows[4]["status"] == "unavailable" and "revlib" in rows[4]["error"]
    assert sorted(seen) == list(range(1, 7))


@pytest.mark.parametrize("text", ["{not json", json.dumps({"rows": []}), json.dumps([1])])
def test_a_bad_predictions_file_is_named(tmp_path, text):
    path = tmp_path / "pred.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="pred.json"):
        gpu_check.load_predictions(path)


def test_predict_only_needs_a_file_and_jobs_are_checked(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--predict-only"])
    assert "--predictions" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_check.main(["--jobs", "0"])
    assert "--jobs 0" in capsys.readouterr().err


def test_a_given_commit_overrides_git(monkeypatch):
    from memlab.measurement import environment

    monkeypatch.setenv("MEMLAB_COMMIT", "8c95ccb-as-copied")
    environment.git_commit.cache_clear()
    try:
        assert environment.git_commit() == "8c95ccb-as-copied"
    finally:
        environment.git_commit.cache_clear()
