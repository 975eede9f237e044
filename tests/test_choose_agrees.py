"""``memlab advise`` (and the Choose page, which repeats its ranking: tests/test_site_choose.py) agrees
with what the committed sweeps measured (issue 43).

Every ``ok`` CPU row of ``data/sweeps/*.jsonl`` inside a modelled family's domain (its fixed workload
settings, a technique setting a model entry covers) is grouped into configurations: the optimizer,
the family's sizes and the knob values the rows were measured at.  At each configuration, for a
budget at every measured peak, ``advise`` is asked with the knobs held at the measured values, so its
candidates are the measured settings (and entries the sweeps did not run there).  Its first choice
must be the plain step when the measured plain step fits; otherwise a measured setting whose measured
relative time is the fastest measured one that fits, or within the band the answer allows: the
family's time error (NOTE [ plain fits first ]) on the prediction of each of the two.  A first choice
the sweeps did not run (einsum_chunk in the written order at 2 chunks) cannot be judged: it must tie
(one rank) with the first setting they ran, which is judged instead.  A
setting whose model entry is not recommendable (a held-out measurement of its fit was not ok: Adam's
chunked_lm_loss and chunked_attention) is never a first choice, so it is not the measured fastest
either.  Files only: nothing is measured.
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from memlab.advisor import AdviceError, advise, load_models
from memlab.advisor.decision import MEASURED_STATUSES
from memlab.results import list_input_files, ranking_status, sweep_records

REPO = Path(__file__).resolve().parents[1]
SWEEPS = REPO / "data" / "sweeps"
MODELS = REPO / "data" / "models"


def _rows() -> list[dict[str, Any]]:
    """The ranked CPU rows of the step the models are fitted to: one micro-batch, gradients set to None
    (issue 44's ``cpu-accumulate2.jsonl`` is SGD too, at two micro-batches: another setting)."""
    return [r for p in list_input_files(SWEEPS, ".jsonl") for _, r in sweep_records(p, lambda _: None)
            if r["device"] == "cpu" and ranking_status(r)[0] in MEASURED_STATUSES
            and r.get("accumulate", 1) == 1 and r.get("grads", "none") == "none"]


def _entry(fam: dict[str, Any], row: dict[str, Any]) -> dict[str, Any] | None:
    """The model entry that covers ``row`` (its technique and fixed parameters), or None."""
    for e in fam["entries"]:
        if e["technique"] == row["technique"] and all(row["params"].get(k) == v for k, v in e["fixed"].items()):
            return e
    return None


def configurations() -> dict[tuple, list[tuple[dict[str, Any], dict[str, Any]]]]:
    """``{(optimizer, family, sizes, knobs): [(entry, row)]}``: the measured rows in each model's domain;
    a row without a knob (the plain step) joins every knob setting measured at its sizes."""
    rows, out = _rows(), defaultdict(list)
    for optimizer in ("sgd", "adam"):
        models = load_models(optimizer, MODELS)
        for family, fam in models["families"].items():
            mine = [(e, r) for r in rows if r["family"] == family and r["optimizer"] == optimizer
                    and all(r["params"].get(k) == v for k, v in fam["workload_fixed"].items())
                    for e in [_entry(fam, r)] if e is not None]
            by_sizes = defaultdict(list)
            for e, r in mine:
                by_sizes[tuple((s, r["params"][s]) for s in sorted(fam["sizes"]))].append((e, r))
            for sizes, pairs in by_sizes.items():
                values = {k: sorted({r["params"][k] for e, r in pairs if k in e["knobs"]}) for k in fam["knobs"]}
                names = [k for k in sorted(values) if values[k]]
                for setting in itertools.product(*(values[k] for k in names)):
                    knobs = tuple(zip(names, setting))
                    held = dict(knobs)
                    out[(optimizer, family, sizes, knobs)] = [
                        (e, r) for e, r in pairs if all(r["params"].get(k) == v for k, v in held.items() if k in e["knobs"])]
    return dict(out)


CONFIGS = configurations()

def _check(key: tuple, pairs: list[tuple[dict[str, Any], dict[str, Any]]], sweeps: Path) -> list[str]:
    """The disagreements of one configuration, one line each (none: it agrees at every budget)."""
    optimizer, family, sizes, knobs = key
    params = [f"{k}={v}" for k, v in (*sizes, *knobs)]
    plain = [r for e, r in pairs if e.get("baseline")]
    problems = []
    for budget in sorted({r["total_peak_bytes"] for _, r in pairs}):
        fits = [(e, r) for e, r in pairs if r["total_peak_bytes"] <= budget and e.get("recommendable")]
        try:
            a = advise(family, budget, params, optimizer=optimizer, models_dir=MODELS, sweeps_dir=sweeps, host=None)
        except AdviceError as exc:
            problems.append(f"{key} at {budget} B: advise found nothing to fit where {len(fits)} measured fit ({exc})")
            continue
        first = a["fits"][0]
        if plain and plain[0]["total_peak_bytes"] <= budget:
            if not first["baseline"]:
                problems.append(f"{key} at {budget} B: plain fits as measured, first choice {first['label']}")
            continue
        err = a["time_error"]["fraction"] or 0
        best = min(r["relative_step_time"] for _, r in fits)
        measured = {e["label"] for e, _ in pairs}
        if first["label"] not in measured:
            # a setting the sweeps did not run cannot be judged; it must tie with the first one they ran
            first_run = next((c for c in a["fits"] if c["label"] in measured), None)
            if first_run is None or first_run.get("rank") != first.get("rank"):
                problems.append(f"{key} at {budget} B: first choice {first['label']} was not measured and ties with "
                                f"no measured setting")
                continue
            first = first_run
        chosen = [r["relative_step_time"] for e, r in fits if e["label"] == first["label"]]
        if not chosen:
            problems.append(f"{key} at {budget} B: first choice {first['label']} {first['knobs']} does not fit as measured")
        elif min(chosen) > best * (1 + err) ** 2:
            problems.append(f"{key} at {budget} B: first choice {first['label']} measured {min(chosen):.3f}x, the "
                            f"fastest that fits {best:.3f}x (band ±{100 * err:.1f}% on each)")
    return problems


def test_every_measured_configuration_is_checked():
    """The sweeps hold measured configurations in the models' domain for the families whose sweeps
    ran the models' fixed workload (chunking, reversible; the transformer with Adam)."""
    families = {(k[0], k[1]) for k in CONFIGS}
    assert {("sgd", "chunking"), ("sgd", "reversible"), ("adam", "chunking"), ("adam", "transformer")} <= families
    assert len(CONFIGS) >= 18 and sum(map(len, CONFIGS.values())) >= 90


@pytest.mark.parametrize("key", sorted(CONFIGS, key=str), ids=lambda k: f"{k[0]}-{k[1]}-" + "-".join(
    f"{n}{v}" for n, v in (*k[2], *k[3])))
def test_the_first_choice_is_the_measured_fastest_that_fits(key, tmp_path):
    # the answer's list of what is not modelled is not checked here: an empty sweeps folder spares reading
    assert _check(key, CONFIGS[key], tmp_path) == []


def test_settings_with_more_chunks_than_were_timed_read_slower_never_faster(tmp_path):
    """Issue 43 item 5 (docs/evidence/time-model-bias.md): a setting with more chunks than its time model
    measured is marked "likely slower"; no measured one of them ran faster than predicted by more than
    the family's held-out error, and at 100 chunks every one ran slower."""
    beyond = []
    for key, pairs in CONFIGS.items():
        optimizer, family, sizes, knobs = key
        a = advise(family, 2**80, [f"{k}={v}" for k, v in (*sizes, *knobs)], optimizer=optimizer, models_dir=MODELS,
                   sweeps_dir=tmp_path, host=None)
        for e, r in pairs:
            c = next((c for c in a["fits"] if c["label"] == e["label"]), None)
            if c is not None and c["chunks_timed"]:
                beyond.append((c, r["relative_step_time"], a["time_error"]["fraction"]))
    assert len(beyond) >= 10
    assert all(t >= c["relative_step_time"] * (1 - err) for c, t, err in beyond)
    at_100 = [(c, t) for c, t, _ in beyond if c["chunks"] == 100]
    assert at_100 and all(t > c["relative_step_time"] for c, t in at_100)
