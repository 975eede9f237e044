"""``python -m memlab.advisor.time_check``: held-out relative times, one family at a time."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from memlab.advisor import time_check
from memlab.registry import builtin_families


def _fake_measure(name, **params):
    return SimpleNamespace(relative_step_time=1.25, relative_to="eager_attention", status="ok",
                           load_avg_before=0.5, load_avg_after=0.5)


def test_one_family_is_checked_against_the_committed_model():
    rows = time_check.check_times("sgd", measure_fn=_fake_measure, families=("transformer",), say=lambda s: None)
    assert [r["family"] for r in rows] == ["transformer"] * sum(f == "transformer" for f, _, _ in time_check.HELD_OUT)
    assert {r["label"] for r in rows} == {"checkpoint_layer", "selective_checkpoint", "chunked_lm_loss", "chunked_attention"}
    for r in rows:
        assert r["predicted"] is not None and r["predicted"] > 0
        assert r["error"] == pytest.approx((r["predicted"] - 1.25) / 1.25)


def test_a_family_run_keeps_the_other_families_rows(tmp_path, monkeypatch):
    out = tmp_path / "time-check-sgd.json"
    out.write_text(json.dumps({"rows": [{"family": "chunking", "label": "old", "error": 0.02},
                                        {"family": "transformer", "label": "stale", "error": 0.5}]}))
    new = [{"family": "transformer", "label": "checkpoint_layer", "error": -0.03}]
    monkeypatch.setattr(time_check, "check_times", lambda optimizer, families=None, runs=1, settings=None: new)
    assert time_check.main(["--family", "transformer", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["label"] for r in data["rows"]] == ["old", "checkpoint_layer"]
    assert data["worst_abs_error"] == pytest.approx(0.03)


def test_a_file_that_is_not_a_check_is_named_and_kept(tmp_path, monkeypatch):
    out = tmp_path / "time-check-sgd.json"
    out.write_text("{not json")
    monkeypatch.setattr(time_check, "check_times", lambda optimizer, families=None, runs=1, settings=None: [])
    with pytest.raises(SystemExit, match="time-check-sgd.json: not a time-check file"):
        time_check.main(["--family", "transformer", "--out", str(out)])
    assert out.read_text() == "{not json"


#: modelled entries with a time model but no held-out time setting, and why
NOT_HELD_OUT: dict[tuple[str, str], str] = {}


def test_five_held_out_settings_per_family_none_of_them_a_fitted_time_point():
    """Five or more settings per family, every modelled entry but the baseline among them (but
    NOT_HELD_OUT), none of them a point its time model was fitted on."""
    from memlab.advisor.model import load_models

    families = {f for f, _, _ in time_check.HELD_OUT}
    assert families == {name for name, _ in builtin_families()}
    models = load_models("sgd")
    for family in families:
        assert sum(f == family for f, _, _ in time_check.HELD_OUT) >= 5, family
        held = {label for f, label, _ in time_check.HELD_OUT if f == family}
        timed = {e["label"] for e in models["families"][family]["entries"] if not e.get("baseline")}
        assert timed - held == {lab for f, lab in NOT_HELD_OUT if f == family}, family
    assert sum(f == "transformer" for f, _, _ in time_check.HELD_OUT) == 7
    for family, label, params in time_check.HELD_OUT:
        entry = next(e for e in models["families"][family]["entries"] if e["label"] == label)
        assert not entry.get("baseline"), (family, label)   # the baseline is 1 by definition: nothing to check
        fitted = [p["params"] for p in entry["time"]["points"]]
        assert params not in fitted, (family, label, params)


@pytest.mark.parametrize("family", ["tensor_train", "resnet"])
def test_the_new_families_are_predicted_at_each_held_out_setting(family):
    rows = time_check.check_times("sgd", measure_fn=_fake_measure, families=(family,), say=lambda s: None)
    assert len(rows) == 5 and all(r["predicted"] is not None and r["predicted"] > 0 for r in rows)


def test_several_runs_are_compared_by_their_median_and_each_is_kept():
    figures = iter([1.0, 2.0, 1.5, 1.1, 1.2, 1.3] * 5)   # run 1 over the five settings, then run 2, run 3

    def measure(name, **params):
        return SimpleNamespace(relative_step_time=next(figures), relative_to="resnet", status="ok",
                               load_avg_before=0.5, load_avg_after=0.7, environment={"timing_cpu": 0})

    rows = time_check.check_times("sgd", measure_fn=measure, families=("resnet",), say=lambda s: None, runs=3)
    assert len(rows) == 5
    # setting i got the i-th figure of each pass: setting 0 -> 1.0, 1.3, 1.2 (passes of five)
    assert rows[0]["measured_runs"] == [1.0, 1.3, 1.2] and rows[0]["measured"] == 1.2
    assert rows[0]["error"] == pytest.approx((rows[0]["predicted"] - 1.2) / 1.2)
    assert rows[0]["timing_cpu"] == [0, 0, 0] and rows[0]["load_avg"] == [0.5, 0.5, 0.5, 0.7]


@pytest.mark.parametrize("runs", [0, -2])
def test_runs_below_one_are_refused(runs, capsys):
    with pytest.raises(ValueError, match=rf"runs={runs} is out of range: expected 1 or more"):
        time_check.check_times("sgd", measure_fn=_fake_measure, families=("resnet",), say=lambda s: None, runs=runs)
    with pytest.raises(SystemExit) as exc:
        time_check.main(["--family", "resnet", "--runs", str(runs)])
    assert exc.value.code == 2 and f"--runs {runs} is out of range" in capsys.readouterr().err


UNSEEN = Path(__file__).resolve().parents[1] / "data" / "models" / "unseen-settings.json"


def test_the_unseen_settings_are_five_per_family_and_none_was_fitted_or_held_out():
    """The settings chosen before they were measured (issue 43): five per built-in family, each a
    modelled entry, none a time point its model was fitted on nor a held-out setting."""
    from memlab.advisor.model import load_models

    chosen = time_check.read_settings(UNSEEN)
    models = load_models("sgd")
    assert {f for f, _, _ in chosen} == {name for name, _ in builtin_families()}
    for family in {f for f, _, _ in chosen}:
        assert sum(f == family for f, _, _ in chosen) == 5, family
    for family, label, params in chosen:
        entry = next(e for e in models["families"][family]["entries"] if e["label"] == label)
        assert params not in [p["params"] for p in entry["time"]["points"]], (family, label, params)
        assert (family, label, params) not in time_check.HELD_OUT


def test_the_committed_unseen_check_is_within_the_goal_and_no_family_errs_one_way():
    """data/models/time-check-unseen-settings-sgd.json measured exactly the chosen settings; the
    prediction the advisor states (floored) is within GOAL of the median of three runs at each, and
    every family has errors of both signs."""
    doc = json.loads((UNSEEN.parent / "time-check-unseen-settings-sgd.json").read_text())
    chosen = time_check.read_settings(UNSEEN)
    assert [(r["family"], r["label"], r["params"]) for r in doc["rows"]] == list(chosen)
    signs: dict[str, set[bool]] = {}
    for r in doc["rows"]:
        assert len(r["measured_runs"]) == 3 and r["status"] == "ok", r
        error = (r["predicted_floored"] - r["measured"]) / r["measured"]
        assert abs(error) <= time_check.GOAL, (r["family"], r["label"], error)
        signs.setdefault(r["family"], set()).add(error > 0)
    assert all(s == {True, False} for s in signs.values()), signs


def test_a_settings_file_with_a_bad_row_is_named(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps({"settings": [["chunking", "slice_loop", {"n": 1}], ["chunking", 3]]}))
    with pytest.raises(SystemExit, match=r"row 1 is \['chunking', 3\]"):
        time_check.read_settings(bad)
    with pytest.raises(SystemExit, match="not a settings file"):
        time_check.read_settings(tmp_path / "missing.json")


def test_settings_replace_the_held_out_ones():
    chosen = (("tensor_train", "tt_chunked", {"batch": 2048, "chunk_size": 512}),)
    rows = time_check.check_times("sgd", measure_fn=_fake_measure, settings=chosen, say=lambda s: None)
    assert [(r["family"], r["label"], r["params"]) for r in rows] == list(chosen)
    assert rows[0]["predicted_floored"] >= rows[0]["predicted"]
    assert rows[0]["band"] is not None


UNSEEN_2 = UNSEEN.parent / "unseen-settings-2.json"


def test_the_second_unseen_chunking_settings_were_used_by_no_fit_check_or_sweep():
    """data/models/unseen-settings-2.json (chosen before the per-chunk size term was fitted, issue 43):
    one setting per chunked entry, none a time point, a held-out setting, an earlier unseen setting
    or a sweep's; five past the 16 chunks the time points reach."""
    import math

    from memlab.advisor.model import load_models
    from memlab.results import list_input_files, sweep_records

    chosen = time_check.read_settings(UNSEEN_2)
    fam = load_models("sgd")["families"]["chunking"]
    chunked = {e["label"] for e in fam["entries"] if e["knobs"]}
    assert sorted(label for _, label, _ in chosen) == sorted(chunked)
    used = [p["params"] for e in fam["entries"] for p in e["time"]["points"]]
    used += [p for _, _, p in time_check.HELD_OUT] + [p for _, _, p in time_check.read_settings(UNSEEN)]
    swept = [{k: r["params"][k] for k in ("n", "d", "hidden", "chunk_size") if k in r["params"]}
             for path in list_input_files(UNSEEN.parents[1] / "sweeps", ".jsonl")
             for _, r in sweep_records(path, lambda _: None) if r["family"] == "chunking"]
    for family, label, params in chosen:
        assert family == "chunking" and params not in used and params not in swept, (label, params)
    assert sum(math.ceil(p["n"] / p["chunk_size"]) > 16 for _, _, p in chosen) == 5


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_second_unseen_check_is_within_the_goal_with_errors_of_both_signs(optimizer):
    doc = json.loads((UNSEEN.parent / f"time-check-unseen-settings-2-{optimizer}.json").read_text())
    assert [(r["family"], r["label"], r["params"]) for r in doc["rows"]] == list(time_check.read_settings(UNSEEN_2))
    errors = []
    for r in doc["rows"]:
        assert len(r["measured_runs"]) == 3 and r["status"] == "ok", r
        errors.append((r["predicted_floored"] - r["measured"]) / r["measured"])
    assert all(abs(e) <= time_check.GOAL for e in errors), errors
    assert any(e > 0 for e in errors) and any(e < 0 for e in errors), errors


def test_repredict_keeps_the_measurements_and_predicts_from_the_models_given(tmp_path):
    from memlab.advisor.model import load_models, predict_time

    src = UNSEEN.parent / "time-check-unseen-settings-2-sgd.json"
    path = tmp_path / src.name
    doc = json.loads(src.read_text())
    for r in doc["rows"]:
        r["predicted"], r["error"] = 9.0, 7.0   # a stale prediction
    path.write_text(json.dumps(doc))
    rows = time_check.repredict(path, UNSEEN.parent)
    fam = load_models("sgd")["families"]["chunking"]
    for r, before in zip(rows, doc["rows"]):
        entry = next(e for e in fam["entries"] if e["label"] == r["label"])
        assert r["predicted"] == predict_time(fam, entry, r["params"])
        assert r["measured"] == before["measured"] and r["measured_runs"] == before["measured_runs"]
        assert r["error"] == pytest.approx((r["predicted"] - r["measured"]) / r["measured"])
    written = json.loads(path.read_text())
    assert written["repredicted"]["by"] == "python -m memlab.advisor.time_check --repredict"
    assert written["worst_abs_error"] == max(abs(r["error"]) for r in rows)
    with pytest.raises(SystemExit, match="not a time-check file"):
        bad = tmp_path / "time-check-x-sgd.json"
        bad.write_text("[]")
        time_check.repredict(bad)


def test_the_committed_checks_are_predicted_by_the_committed_models(tmp_path):
    """Every committed time-check file states what the committed models predict (a refit is followed
    by --repredict): repredicting a copy changes no prediction."""
    import shutil

    for src in sorted(UNSEEN.parent.glob("time-check-*.json")):
        shutil.copy(src, tmp_path / src.name)
        before = json.loads(src.read_text())["rows"]
        after = time_check.repredict(tmp_path / src.name, UNSEEN.parent)
        assert [r["predicted"] for r in after] == pytest.approx([r["predicted"] for r in before]), src.name


def test_the_family_time_error_reads_the_unseen_checks_too():
    from memlab.advisor.decision import time_error

    terr = time_error("chunking", "sgd")
    rows = [r for name in ("time-check-sgd.json", "time-check-unseen-settings-sgd.json",
                           "time-check-unseen-settings-2-sgd.json")
            for r in json.loads((UNSEEN.parent / name).read_text())["rows"] if r["family"] == "chunking"]
    assert terr["checks"] == len(rows) == 17
    assert terr["fraction"] == round(max(abs(r["error"]) for r in rows), 4)
