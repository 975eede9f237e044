"""Predicted CUDA memory on the site, from synthetic inputs (no GPU, no torch): the predicted columns
and chart of a family section, the allocator settings and the chunked-slicing answer on a seed page,
and the per-technique error of a ``make gpu-check`` table on the methodology page."""
from __future__ import annotations

import json
import re
import warnings

import pytest

from memlab.results import ResultsWarning, load_runs
from memlab.site import build_site
from site_fixtures import MiB, chunking_records, make_inputs, write_jsonl

CONFS = ["", "expandable_segments:True", "max_split_size_mb:20"]


def _predicted(rec: dict, k: int) -> dict:
    return {**rec, "predicted_cuda": {"predicted": True, "allocated_peak_total_bytes": rec["peak_allocated_bytes"] + 6 * MiB,
                                      "reserved_peak_bytes": (40 + 2 * k) * MiB, "fragmentation_at_peak_bytes": 2 * MiB,
                                      "conf": ""}}


def _inputs(tmp_path, gpu_check: dict | str | None = None):
    results, data = make_inputs(tmp_path)
    records = [_predicted(r, i) if r["status"] == "ok" else r for i, r in enumerate(chunking_records())]
    write_jsonl(data / "sweeps" / "chunking.jsonl", records)
    rows = [{"technique": t, "params": {"n": 2000, "d": 256, **({"chunk_size": 250} if t == "slice_loop" else {})},
             "mode": "train", "optimizer": "sgd", "loss": "given", "conf": c,
             "allocated_peak_total_bytes": 26 * MiB, "reserved_peak_bytes": (40 + 20 * j) * MiB,
             "fragmentation_at_peak_bytes": 14 * MiB} for t in ("unchunked", "slice_loop") for j, c in enumerate(CONFS)]
    answer = {"question": "Does reserved grow with the chunks?", "answer": "No: predicted reserved stays flat (test).",
              "rows": [{"conf": c, "chunks": k, "predicted_allocated_total_bytes": (30 + k) * MiB,
                        "predicted_reserved_bytes": (60 + k) * MiB, "fragmentation_bytes": 30 * MiB, "segments_peak": 4}
                       for c in CONFS[:2] for k in (1, 4, 10)]}
    (data / "cuda-variants").mkdir()
    (data / "cuda-variants" / "chunked-slicing.json").write_text(json.dumps(
        {"seed": "chunked-slicing", "confs": CONFS, "rows": rows, "slice_backward": answer, "predicted": True}))
    if gpu_check is not None:
        (data / "gpu-check").mkdir()
        text = gpu_check if isinstance(gpu_check, str) else json.dumps(gpu_check)
        (data / "gpu-check" / "synthetic-gpu.json").write_text(text)
    return results, data


GPU_CHECK = {"gpu": "Synthetic GPU 80GB", "cuda": "12.4", "torch": "2.13.0", "memlab_commit": "abc",
             "rows": [{"technique": "slice_loop", "params": {"chunk_size": 250}, "status": "ok",
                       "measured_allocated_bytes": 100 * MiB, "predicted_allocated_bytes": 110 * MiB,
                       "measured_reserved_bytes": 200 * MiB, "predicted_reserved_bytes": 190 * MiB},
                      {"technique": "slice_loop", "params": {"chunk_size": 500}, "status": "ok",
                       "measured_allocated_bytes": 100 * MiB, "predicted_allocated_bytes": 101 * MiB,
                       "measured_reserved_bytes": 100 * MiB, "predicted_reserved_bytes": 100 * MiB},
                      {"technique": "unchunked", "params": {}, "status": "oom", "measured_allocated_bytes": None,
                       "predicted_allocated_bytes": 20 * MiB, "measured_reserved_bytes": None,
                       "predicted_reserved_bytes": 22 * MiB}]}


def test_rows_read_the_prediction_and_reject_a_malformed_one(tmp_path):
    rec = _predicted(chunking_records()[0], 0)
    bad = {**chunking_records()[1], "predicted_cuda": {"reserved_peak_bytes": "lots"}}
    path = write_jsonl(tmp_path / "s.jsonl", [rec, bad])
    with pytest.warns(ResultsWarning, match="predicted_cuda: field 'reserved_peak_bytes' must be"):
        runs = load_runs([path])
    assert len(runs) == 1
    assert runs.iloc[0]["predicted_cuda_reserved_bytes"] == 40 * MiB
    assert runs.iloc[0]["predicted_cuda_allocated_bytes"] == 26 * MiB


def test_family_seed_and_methodology_pages_show_the_predictions(tmp_path):
    results, data = _inputs(tmp_path, GPU_CHECK)
    out = tmp_path / "site"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultsWarning)
        build_site(results, data, out)
    family = (out / "family-chunking.html").read_text()
    assert "GPU allocated (predicted)" in family and "GPU reserved (predicted)" in family
    assert "Predicted GPU reserved vs chunk_size" in family and "42.0 MiB" in family  # slice_loop, k=1: 40 + 2
    table = json.loads(next((out / "tables").glob("family-chunking--*measurements.json")).read_text())
    assert any(r["predicted_cuda_reserved_bytes"] == 42 * MiB for r in table)
    seed = (out / "seed-chunked-slicing.html").read_text()
    assert "Predicted on a GPU" in seed and "No: predicted reserved stays flat (test)." in seed
    assert "reserved: expandable_segments:True" in seed and "reserved: max_split_size_mb:20" in seed
    assert "Predicted reserved and allocated vs the number of chunks" in seed and "80.0 MiB" in seed  # 40 + 20 * 2
    ids = re.findall(r' id="([^"]+)"', seed)
    assert len(ids) == len(set(ids)), "duplicate ids on the seed page"
    method = (out / "methodology.html").read_text()
    assert "What it cannot see" in method and "CUDA context" in method and "Synthetic GPU 80GB" in method
    summary = json.loads(next((out / "tables").glob("methodology--gpu-check-error-per-technique.json")).read_text())
    by = {r["technique"]: r for r in summary}
    assert by["slice_loop"]["allocated_worst_error"] == pytest.approx(0.10)
    assert by["slice_loop"]["reserved_worst_error"] == pytest.approx(-0.05)
    assert by["unchunked"]["allocated_worst_error"] is None and by["unchunked"]["configurations"] == 1
    assert "+10.0%" in method and "-5.0%" in method


def test_without_a_gpu_table_the_methodology_says_so_and_a_bad_one_is_a_problem_line(tmp_path):
    results, data = _inputs(tmp_path / "b", {"rows": [{"technique": "x", "measured_allocated_bytes": -1}]})
    with pytest.warns(ResultsWarning, match="invalid GPU check"):
        build_site(results, data, tmp_path / "b" / "site")
    method = (tmp_path / "b" / "site" / "methodology.html").read_text()
    assert "invalid GPU check" in method and "no such table is in this build yet" in method


def test_a_seed_configuration_measured_on_a_gpu_shows_on_its_seed_page(tmp_path):
    from site_fixtures import reproduction

    seed_rec = reproduction("chunked-slicing")["measurements"][1]
    row = {"technique": seed_rec["technique"], "params": seed_rec["params"], "mode": seed_rec.get("mode", "train"),
           "optimizer": seed_rec.get("optimizer") or "sgd", "status": "ok",
           "measured_allocated_bytes": 200 * MiB, "predicted_allocated_bytes": 100 * MiB,
           "measured_reserved_bytes": 0, "predicted_reserved_bytes": 0}
    other = {**row, "params": {**seed_rec["params"], "n": 12345}}  # not a configuration of the seed
    results, data = _inputs(tmp_path, {**GPU_CHECK, "rows": [row, other]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultsWarning)
        build_site(results, data, tmp_path / "out")
    seed = (tmp_path / "out" / "seed-chunked-slicing.html").read_text()
    assert "Measured on a GPU" in seed and "largest error -50.0%" in seed
    # issue 29: a page's rows from one run unless it says otherwise: this one lists its three runs
    runs = seed[seed.index("This page shows 3 runs"):seed.index("</ul></div>")]
    assert "data/reproductions/" in runs and "data/cuda-variants/" in runs and "data/gpu-check/" in runs
    assert "memlab <code>abc</code>, on Synthetic GPU 80GB" in runs
    table = json.loads(next((tmp_path / "out" / "tables").glob("seed-chunked-slicing--gpu-measured-vs-predicted.json")).read_text())
    assert [(r["technique"], r["allocated_error"]) for r in table] == [(seed_rec["technique"], -0.5)]

    results, data = _inputs(tmp_path / "none", {**GPU_CHECK, "rows": [other]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultsWarning)
        build_site(results, data, tmp_path / "none" / "out")
    assert "Measured on a GPU" not in (tmp_path / "none" / "out" / "seed-chunked-slicing.html").read_text()


def test_a_gpu_row_that_failed_shows_its_reason_on_the_seed_page(tmp_path):
    from site_fixtures import reproduction

    seed_rec = reproduction("chunked-slicing")["measurements"][1]
    reason = "TechniqueUnavailable: peer comparator needs somepeer==1.0 (not installed)"
    row = {"technique": seed_rec["technique"], "params": seed_rec["params"], "mode": seed_rec.get("mode", "train"),
           "optimizer": seed_rec.get("optimizer") or "sgd", "status": "error", "error": reason}
    results, data = _inputs(tmp_path, {**GPU_CHECK, "rows": [row]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultsWarning)
        build_site(results, data, tmp_path / "out")
    seed = (tmp_path / "out" / "seed-chunked-slicing.html").read_text()
    section = seed[seed.index("Measured on a GPU"):]
    assert "peer comparator needs somepeer==1.0" in section
