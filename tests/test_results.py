"""memlab.results (its modules reading, runs, asv, timelines, seeds): sweeps, asv results, timelines and
reproductions -> validated DataFrames."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from memlab import results as R
from memlab.results import reading, runs
from site_fixtures import (BENCH, MiB, chunking_records, measurement, reproduction, timeline, write_asv_tree,
                           write_jsonl)


def test_load_runs_one_row_per_measurement(tmp_path):
    path = write_jsonl(tmp_path / "chunking.jsonl", chunking_records())
    df = R.load_runs([path])
    assert list(df.columns) == list(R.RUN_COLUMNS)
    assert len(df) == 6
    assert list(df["technique"]) == ["unchunked", "slice_loop", "slice_loop", "slice_loop", "vmap_chunks", "slice_loop"]
    assert list(df["peak_allocated_bytes"][:4]) == [20 * MiB, 13 * MiB, 14 * MiB, 16 * MiB]
    assert list(df["status"]) == ["ok"] * 5 + ["oom"]
    assert list(df["line"]) == [1, 2, 3, 4, 5, 6]
    assert set(df["run"]) == {"chunking"}
    assert df["peer"].tolist() == [False, False, False, False, True, False]
    assert df["params_key"][1] == '{"chunk_size": 250, "d": 256, "n": 2000}'
    assert df["analytic_floor_bytes"][0] == 14 * MiB
    assert math.isnan(df["analytic_floor_bytes"][4])  # the peer states no floor


def test_analytic_floor_follows_the_row_mode(tmp_path):
    rec = measurement("t", "f", {}, MiB, mode="infer")
    rec["extra"] = {"analytic_floor_bytes": 7, "analytic_floor_mode": "train"}
    other = measurement("t", "f", {}, MiB, mode="infer")
    other["extra"] = {"analytic_floor_bytes_by_mode": {"infer": 3, "train": 7}}
    df = R.load_runs([write_jsonl(tmp_path / "a.jsonl", [rec, other])])
    assert df["analytic_floor_bytes"][0] is None or math.isnan(df["analytic_floor_bytes"][0])
    assert df["analytic_floor_bytes"][1] == 3


def test_truncated_last_line_warns_naming_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "partial.jsonl", chunking_records(), truncate_last=True)
    with pytest.warns(R.ResultsWarning, match=r"partial\.jsonl:6: not valid JSON"):
        df = R.load_runs([path])
    assert len(df) == 5


def test_invalid_records_warn_and_the_rest_load(tmp_path):
    good = measurement("a", "f", {}, MiB)
    bad_status = {**measurement("b", "f", {}, MiB), "status": "exploded"}
    negative = {**measurement("c", "f", {}, MiB), "peak_allocated_bytes": -5}
    not_object = [1, 2]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (good, bad_status, negative, not_object)) + "\n")
    with pytest.warns(R.ResultsWarning) as record:
        df = R.load_runs([path])
    assert list(df["technique"]) == ["a"]
    messages = [str(w.message) for w in record]
    assert any("mixed.jsonl:2" in m and "status='exploded'" in m for m in messages)
    assert any("mixed.jsonl:3" in m and "peak_allocated_bytes" in m for m in messages)
    assert any("mixed.jsonl:4" in m and "JSON object" in m for m in messages)


def test_unreadable_file_and_unknown_fields_warn(tmp_path):
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00junk")
    extra = write_jsonl(tmp_path / "newer.jsonl", [{**measurement("a", "f", {}, MiB), "shiny_new": 1}])
    with pytest.warns(R.ResultsWarning) as record:
        df = R.load_runs([binary, extra])
    assert len(df) == 1
    messages = " | ".join(str(w.message) for w in record)
    assert "binary.jsonl:1: not UTF-8 (byte 0xff at column 1); line skipped" in messages
    assert "newer.jsonl: unknown measurement field(s) ignored: shiny_new" in messages


def test_empty_input_has_the_columns():
    df = R.load_runs([])
    assert list(df.columns) == list(R.RUN_COLUMNS) and len(df) == 0


def test_validate_measurement_messages():
    assert R.validate_measurement(measurement("a", "f", {}, MiB)) == []
    problems = R.validate_measurement({**measurement("a", "f", {}, MiB), "mode": "eval", "params": None})
    assert any("mode='eval'" in p for p in problems) and any("'params'" in p for p in problems)
    assert R.validate_measurement({**measurement("a", "f", {}, MiB), "peak_allocated_bytes": None}) == [
        "status 'ok' but peak_allocated_bytes is null"]


def test_family_baselines_from_data(tmp_path):
    recs = [
        measurement("mine", "custom", {}, MiB, baseline=True),
        measurement("other", "custom", {}, MiB, baseline=False),
        measurement("tt", "tensor_train", {}, MiB, baseline="dense_ref"),
        measurement("rev", "reversible", {}, MiB),
        measurement("x", "unknown_family", {}, MiB),
    ]
    df = R.load_runs([write_jsonl(tmp_path / "b.jsonl", recs)])
    # the rows say (the technique's ``baseline = True``, recorded in extra); no second list to go stale
    assert R.family_baselines(df) == {"custom": "mine", "tensor_train": "dense_ref"}


def test_conflicting_baselines_warn(tmp_path):
    recs = [measurement("b", "f", {}, MiB, baseline=True), measurement("a", "f", {}, MiB, baseline=True)]
    df = R.load_runs([write_jsonl(tmp_path / "c.jsonl", recs)])
    with pytest.warns(R.ResultsWarning, match=r"family 'f': several techniques claim to be the baseline \(a, b\)"):
        assert R.family_baselines(df) == {"f": "a"}


def test_asv_results_columnar_format(tmp_path):
    root = write_asv_tree(tmp_path / "results")
    df = R.load_asv_results(root)
    assert list(df.columns) == list(R.ASV_COLUMNS)
    # 2 commits x (4 cpu combinations); cuda entries are NaN / null (skipped) and left out
    assert len(df) == 8
    assert set(df["benchmark"]) == {BENCH} and set(df["unit"]) == {"bytes"} and set(df["type"]) == {"track"}
    first = df[df["commit"] == "a" * 40].sort_values("params_key")
    assert first["params"].iloc[0] == {"technique": "slice_loop", "device": "cpu", "chunk_size": 100}
    assert sorted(first["value"]) == [100.0, 200.0, 1000.0, 2000.0]
    second = df[(df["commit"] == "b" * 40) & (df["params_key"] == first["params_key"].iloc[-1])]
    assert second["value"].tolist() == [2000.0]  # unchunked, chunk_size=1000 doubled on commit b
    assert R.load_asv_machines(root) == {"box": {"cpu": "Test CPU", "machine": "box", "num_cpu": "2",
                                                 "os": "Linux", "ram": "8GB"}}


def test_asv_malformed_files_warn_and_the_rest_load(tmp_path):
    root = write_asv_tree(tmp_path / "results")
    (root / "box" / "broken-env.json").write_text('{"commit_hash": "c", "results": ')
    (root / "box" / "wrong-env.json").write_text(json.dumps({"commit_hash": "d", "results": {}, "version": 1}))
    bad_len = json.loads((root / "box" / "aaaaaaaa-existing-py.json").read_text())
    bad_len["results"][BENCH][0] = [1, 2, 3]
    bad_len["commit_hash"] = "e" * 40
    (root / "box" / "short-env.json").write_text(json.dumps(bad_len))
    with pytest.warns(R.ResultsWarning) as record:
        df = R.load_asv_results(root)
    assert len(df) == 8
    messages = " | ".join(str(w.message) for w in record)
    assert "broken-env.json: not valid JSON (Expecting value at line 1 column 33); skipped" in messages
    assert "wrong-env.json: not an asv 0.6 results file (asv results api_version 1 is not 2)" in messages
    assert "short-env.json: benchmark 'bench_chunking.ChainedMatmul.track_peak_allocated' has 3 results for 8" in messages


def test_asv_without_benchmarks_json_names_params_by_position(tmp_path):
    root = write_asv_tree(tmp_path / "results")
    (root / "benchmarks.json").unlink()
    with pytest.warns(R.ResultsWarning, match="benchmarks.json: missing"):
        df = R.load_asv_results(root)
    assert set(df["params"].iloc[0]) == {"param0", "param1", "param2"}


def test_missing_asv_dir_warns(tmp_path):
    with pytest.warns(R.ResultsWarning, match="no asv results directory"):
        assert len(R.load_asv_results(tmp_path / "nope")) == 0


def test_timelines_valid_and_malformed(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(timeline("slice_loop", {"chunk_size": 250})))
    bad = tmp_path / "bad.json"
    broken = timeline("x", {})
    del broken["events"][2]["live_bytes"]
    bad.write_text(json.dumps(broken))
    with pytest.warns(R.ResultsWarning, match=r"bad\.json: invalid timeline \(event 2 lacks"):
        out = R.load_timelines([good, bad])
    assert [t["technique"] for t in out] == ["slice_loop"]
    assert max(e["live_bytes"] for e in out[0]["events"]) == 14 * MiB


def test_reproductions_validated(tmp_path):
    ok = tmp_path / "seed-b.json"
    ok.write_text(json.dumps(reproduction("seed-b")))
    wrong = tmp_path / "seed-a.json"
    wrong.write_text(json.dumps(reproduction("seed-a", verdict="probably")))
    partial = reproduction("seed-c")
    partial["measurements"].append({"technique": "half"})
    (tmp_path / "seed-c.json").write_text(json.dumps(partial))
    with pytest.warns(R.ResultsWarning) as record:
        out = R.load_reproductions(sorted(tmp_path.glob("*.json")))
    assert [s["seed"] for s in out] == ["seed-b", "seed-c"]
    assert len(out[0]["measurements"]) == 2 and len(out[1]["measurements"]) == 2
    messages = " | ".join(str(w.message) for w in record)
    assert "seed-a.json: invalid reproduction (verdict 'probably' is not one of" in messages
    assert "seed-c.json: measurement 2 invalid" in messages


def test_activation_figures_read_per_technique(tmp_path):
    """Families that state activation memory (reversible) get measured and expected columns."""
    from memlab.core.record import activation_figures

    expected = {"residual": 40 * MiB, "reversible": 11 * MiB}
    assert activation_figures({"activation_peak_bytes": 12 * MiB, "expected_activation_bytes": expected},
                              "reversible") == (12 * MiB, 11 * MiB)
    assert activation_figures({"activation_peak_bytes": 12 * MiB, "expected_activation_bytes": expected},
                              "memcnn") == (12 * MiB, None)
    assert activation_figures({"activation_peak_bytes": -1, "expected_activation_bytes": [1]}, "x") == (None, None)
    assert activation_figures(None, "x") == (None, None)
    rec = measurement("reversible", "reversible", {"depth": 4}, 30 * MiB)
    rec["extra"] = {"activation_peak_bytes": 12 * MiB, "expected_activation_bytes": expected}
    df = R.load_runs([write_jsonl(tmp_path / "r.jsonl", [rec, measurement("dense", "tt", {}, MiB)])])
    assert df["activation_peak_bytes"][0] == 12 * MiB and df["expected_activation_bytes"][0] == 11 * MiB
    assert df["activation_peak_bytes"][1] is None or math.isnan(df["activation_peak_bytes"][1])


def test_statuses_and_fields_follow_the_record():
    """The reader's statuses and known fields are the record's (declared once, in memlab.core.record)."""
    import dataclasses

    from memlab.core.record import STATUSES, Measurement

    assert R.STATUSES == STATUSES
    assert {f.name for f in dataclasses.fields(Measurement)} <= runs._KNOWN_FIELDS


def test_ranking_status_per_case():
    ok = measurement("a", "f", {}, MiB)
    assert R.ranking_status(ok) == ("ok", None)
    assert R.ranking_status({**ok, "status": "leak", "error": "grows"}) == ("leak", "grows")
    assert R.ranking_status({**ok, "status": "error", "error": None}) == ("error", "no reason recorded")
    assert R.ranking_status({**ok, "max_abs_error": float("nan")}) == ("mismatch", "non-finite values in output")
    assert R.ranking_status({**ok, "errors_by_tensor": {"grad:x": float("inf")}})[0] == "mismatch"
    assert R.ranking_status({**ok, "matches_reference": False}) == (
        "unverified", "verified in float32 only (schema 1); re-measure")
    assert R.ranking_status({**ok, "matches_reference": False, "dtype": "float64"})[0] == "mismatch"
    assert R.ranking_status({**ok, "matches_reference": False, "schema": 2})[0] == "mismatch"
    assert R.ranking_status({**ok, "matches_reference": None})[0] == "unverified"


def test_json_reader_bounds_nesting_and_number_range():
    assert reading.json_depth('{"a": [1, {"b": "[[[[[["}]}') == 3
    with pytest.raises(ValueError, match="nested 100000 levels deep"):
        reading.loads("[" * 100_000 + "]" * 100_000)
    value = reading.loads('{"big": 1' + "0" * 400 + ', "also": 1e999, "fine": 1' + "0" * 300 + "}")
    assert isinstance(value["big"], reading.OutOfRange) and isinstance(value["also"], reading.OutOfRange)
    assert value["fine"] == 10 ** 300
    assert R.validate_measurement({**measurement("a", "f", {"n": 1}, MiB), "params": value}) == [
        "field 'params.big' must be a finite number, got 1000000000... (401 digits), outside float range",
        "field 'params.also' must be a finite number, got 1e999, outside float range"]


def test_schema2_rows_carry_the_check(tmp_path):
    rec = {**measurement("a", "f", {}, MiB), "schema": 2, "check_dtype": "float64", "max_abs_error": 3e-13,
           "max_rel_error": 1e-12, "drift_max_abs_error": 2e-6, "drift_max_rel_error": 1e-5,
           "tolerance": [1e-6, 1e-8], "leak_bytes_per_step": None}
    df = R.load_runs([write_jsonl(tmp_path / "s2.jsonl", [rec])])
    check = df["check"][0]
    assert (check["dtype"], check["drift_dtype"], check["drift_abs"], check["rtol"], check["atol"]) == (
        "float64", "float32", 2e-6, 1e-6, 1e-8)
    assert (df["status_shown"][0], df["reason"][0]) == ("ok", None)


def test_step_times_with_their_spread_and_load(tmp_path):
    """Issue 12: every sample, quartiles, relative step time, load averages and cores are read;
    rows from before (schema 1) keep None where they have nothing."""
    from site_fixtures import timed

    new = timed(measurement("a", "f", {}, MiB), [0.010, 0.011, 0.012, 0.013, 0.030], relative=1.8,
                reference=0.006, load=(3.5, 2.1), cores=2)
    idle = timed(measurement("b", "f", {}, MiB), [0.02, 0.02], relative=1.0, load=(0.4, 0.5), cores=2)
    old = measurement("c", "f", {}, MiB)
    old["step_times_s"] = [0.3, 0.1, 0.2]
    df = R.load_runs([write_jsonl(tmp_path / "t.jsonl", [new, idle, old])])
    a, b, c = (df.iloc[i] for i in range(3))
    assert a["step_times_s"] == (0.010, 0.011, 0.012, 0.013, 0.030) and a["step_time_s"] == 0.012
    assert (a["step_time_q1_s"], a["step_time_q3_s"]) == pytest.approx((0.011, 0.013))
    assert a["step_time_iqr_s"] == pytest.approx(0.002)
    assert (a["relative_step_time"], a["reference_step_time_s"], a["cores"]) == (1.8, 0.006, 2)
    assert (a["load_avg_before"], a["load_avg_after"], bool(a["under_load"])) == (3.5, 2.1, True)
    assert not b["under_load"] and b["step_time_iqr_s"] == 0
    # schema 1: no relative time, no load, no cores; the IQR comes from its samples
    assert pd.isna(c["relative_step_time"]) and pd.isna(c["cores"]) and not c["under_load"]
    assert (c["step_time_q1_s"], c["step_time_q3_s"]) == pytest.approx((0.15, 0.25))
    assert (c["optimizer"], c["loss"], c["peak_by_category_bytes"]) == ("sgd", "given", None)
    assert pd.isna(c["total_peak_bytes"])


def test_memory_categories_and_bad_timing_values(tmp_path):
    cats = {"parameters": 2 * MiB, "gradients": 2 * MiB, "inputs": MiB, "saved_activations": 3 * MiB,
            "temporaries": MiB, "optimizer_state": 0}
    rec = {**measurement("a", "f", {}, MiB), "total_peak_bytes": 9 * MiB, "peak_by_category_bytes": cats,
           "end_by_category_bytes": {"parameters": 2 * MiB}, "optimizer": "adam", "loss": "mse"}
    bad_cat = {**measurement("b", "f", {}, MiB), "peak_by_category_bytes": {"gradients": -1}}
    bad_load = {**measurement("c", "f", {}, MiB), "load_avg_before": "high"}
    bad_rel = {**measurement("d", "f", {}, MiB), "relative_step_time": -1.0}
    with pytest.warns(R.ResultsWarning) as record:
        df = R.load_runs([write_jsonl(tmp_path / "c.jsonl", [rec, bad_cat, bad_load, bad_rel])])
    assert list(df["technique"]) == ["a"]
    assert df["peak_by_category_bytes"][0] == dict(sorted(cats.items())) and df["total_peak_bytes"][0] == 9 * MiB
    assert (df["optimizer"][0], df["loss"][0]) == ("adam", "mse")
    text = " | ".join(str(w.message) for w in record)
    assert "c.jsonl:2" in text and "peak_by_category_bytes" in text
    assert "c.jsonl:3" in text and "load_avg_before" in text and "c.jsonl:4" in text


def test_field_kinds_come_from_the_record():
    """Every record field declares its kind on the field (not read from its annotation's spelling), and
    the reader's checks follow it: a count field refuses a negative number whatever its annotation."""
    import dataclasses

    from memlab.core.record import FieldKind, Measurement, fields_of_kind

    fields = dataclasses.fields(Measurement)
    assert all(isinstance(f.metadata.get("kind"), FieldKind) for f in fields)
    assert sum(len(fields_of_kind(k)) for k in FieldKind) == len(fields)
    assert fields_of_kind(FieldKind.KEY) == ("technique", "workload", "family", "device", "dtype", "mode", "status")
    assert fields_of_kind(FieldKind.CHOICE) == ("optimizer", "loss", "grads")
    assert "peak_allocated_bytes" in fields_of_kind(FieldKind.COUNT)
    assert fields_of_kind(FieldKind.CATEGORIES) == ("peak_by_category_bytes", "end_by_category_bytes")
