"""``memlab advise --model FILE --vary micro_batches``: the fewest micro-batches a batch fits in, from
a model of two accumulated micro-batches fitted as a function of the micro-batch size (NOTE [ the
micro-batch model ] in memlab/own_model/advice.py), checked against ``memlab measure --accumulate K``
to the byte at 4x the fitted sizes.  One cold fit of a tiny model file (plain only: about 2 min on 2
busy cores), shared by the tests."""
from __future__ import annotations

import pytest

import memlab
from memlab.advisor import AdviceError, format_verify, verify
from memlab.advisor.fit import events_peak
from memlab.advisor.model import CATEGORIES
from memlab.own_model import advice
from memlab.own_model.checks import MEASURED_MAX, check_micro
from memlab.own_model.advice import (MICRO_BATCHES, MICRO_TRACED, advise_model, fitted_family, format_model_advice,
                                     micro_batched, micro_declaration, model_declaration, predict_micro)

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

TINY = '''
import torch
from torch import nn

import memlab
from memlab.advisor import Entry

def build():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))

def batch(size, seq=3):
    return torch.randn(size, seq, 4)

class Advice(memlab.AdvisorModel):
    entries = (Entry("plain"),)
    held_out = {"batch": (1, 3)}
'''


@pytest.fixture(scope="module")
def fit(tmp_path_factory):
    """The model file, its cache and both fits (the batch model, K = 1; the micro-batch model, K >= 2).
    The cache key's memlab sources are held (a shared working tree edited meanwhile would refit)."""
    root = tmp_path_factory.mktemp("micro")
    path = root / "adv_micro.py"
    path.write_text(TINY)
    cache = root / "cache"
    said: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(advice, "source_key", lambda: "held")
        first = advise_model(path, 10**6, vary=(MICRO_BATCHES,), params={"batch": 64}, cache_root=cache,
                             say=said.append)
        models = {}
        for name, decl, parts in (("whole", model_declaration(path), 1),
                                  ("micro", micro_declaration(path), MICRO_TRACED)):
            fam, _path, cached = fitted_family(path, decl, "sgd", cache_root=cache, say=said.append, accumulate=parts)
            assert cached
            models[name] = {"decl": decl, "entry": fam["entries"][0]}
        yield {"path": path, "cache": cache, "first": first, **models}


def _peak(technique: str, micro: int, parts: int) -> tuple[int, dict]:
    from memlab.advisor import trace

    with micro_batched(parts):  # patches trace.raw_trace: look it up inside
        return events_peak(trace.raw_trace(technique, {"batch": micro}))


def test_more_micro_batches_of_one_size_differ_from_two_in_the_inputs_alone(fit):
    technique = fit["micro"]["entry"]["technique"]
    two = _peak(technique, 3, 2)
    for parts in (3, 4):
        total, cats = _peak(technique, 3, parts)
        # the whole batch's inputs (views feed the micro-batches): 3 * 4 floats of 4 bytes per sample
        assert cats["inputs"] - two[1]["inputs"] == (parts - 2) * 3 * (3 * 4 * 4)
        assert {c: v for c, v in cats.items() if c != "inputs"} == {c: v for c, v in two[1].items() if c != "inputs"}
        assert total - two[0] == cats["inputs"] - two[1]["inputs"]


@pytest.mark.parametrize("parts", [4, 2, 1])
def test_the_prediction_at_4x_the_fitted_micro_batch_size_is_measure_accumulate_to_the_byte(fit, parts):
    fitted = max(fit["micro"]["entry"]["validated_range"]["batch"][1], fit["whole"]["entry"]["validated_range"]["batch"][1])
    batch = 4 * fitted * parts  # parts micro-batches of 4x the largest fitted (micro-)batch
    pred = predict_micro(fit["whole"], fit["micro"], {"batch": batch}, parts)
    m = memlab.measure(fit["micro"]["entry"]["technique"], batch=batch, accumulate=parts, iterations=1, repeats=1,
                       time_budget=0, check=False)
    assert m.status == "ok", m.error
    assert pred["total_peak_bytes"] == m.total_peak_bytes
    assert pred["peak_by_category_bytes"] == {c: m.peak_by_category_bytes.get(c, 0) for c in CATEGORIES}


def test_the_answer_is_the_fewest_micro_batches_whose_peak_fits(fit):
    need = {k: predict_micro(fit["whole"], fit["micro"], {"batch": 64}, k)["total_peak_bytes"] for k in (1, 2, 4)}
    assert need[1] > need[2] > need[4]
    for budget, parts in ((need[1], 1), (need[1] - 1, 2), (need[2], 2), (need[2] - 1, 4)):
        a = advise_model(fit["path"], budget, vary=(MICRO_BATCHES,), params={"batch": 64}, cache_root=fit["cache"])
        (answer,) = a["answers"]
        assert a["cached"] and answer["size"] == parts and answer["micro_batch"] == 64 // parts
        assert answer["params"] == {"batch": 64, "accumulate": parts} and answer["total_peak_bytes"] == need[parts]
    text = format_model_advice(a)
    assert "fewest micro_batches of batch=64" in text and "4 x 16 = 64" in text


def test_without_a_batch_the_answer_is_the_largest_batch_for_each_micro_batch_count(fit):
    """No ``--param batch``: per K in MICRO_COUNTS the largest B = K m that fits; one more sample per
    micro-batch does not (the search's answer is the boundary)."""
    from memlab.own_model.advice import MICRO_COUNTS

    budget = predict_micro(fit["whole"], fit["micro"], {"batch": 96}, 2)["total_peak_bytes"]
    a = advise_model(fit["path"], budget, vary=(MICRO_BATCHES,), cache_root=fit["cache"])
    assert a["batch"] is None and [c["size"] for c in a["answers"]] == list(MICRO_COUNTS)
    for c in a["answers"]:
        k, m = c["size"], c["micro_batch"]
        assert c["params"] == {"batch": k * m, "accumulate": k} and c["need_bytes"] <= budget
        assert c["total_peak_bytes"] == predict_micro(fit["whole"], fit["micro"], {"batch": k * m}, k)["total_peak_bytes"]
        assert predict_micro(fit["whole"], fit["micro"], {"batch": k * (m + 1)}, k)["total_peak_bytes"] > budget
    assert next(c for c in a["answers"] if c["size"] == 2)["micro_batch"] >= 48
    assert "largest batch as K micro_batches" in format_model_advice(a)


def test_a_batch_that_fits_in_no_count_and_a_bad_batch_are_one_error_each(fit):
    with pytest.raises(AdviceError, match=r"--param batch=B, .*\(got '0'\).*from 1 to 1000000"):
        advise_model(fit["path"], 10**6, vary=(MICRO_BATCHES,), params={"batch": "0"}, cache_root=fit["cache"])
    with pytest.raises(AdviceError, match="no technique .* fits .* in 64 micro-batches of 1"):
        advise_model(fit["path"], 100, vary=(MICRO_BATCHES,), params={"batch": 64}, cache_root=fit["cache"])
    with pytest.raises(ValueError, match="micro_batches=3 does not split batch=64; valid: a divisor of 64"):
        predict_micro(fit["whole"], fit["micro"], {"batch": 64}, 3)


def test_verify_measures_the_micro_batched_first_answer_as_k_micro_batches(fit):
    """``advise --model --vary micro_batches --verify``: the first answer, K micro-batches of B/K, is
    measured with ``accumulate=K`` at the whole batch, and its prediction is the measurement to the byte."""
    need = predict_micro(fit["whole"], fit["micro"], {"batch": 64}, 4)["total_peak_bytes"]
    a = advise_model(fit["path"], need, vary=(MICRO_BATCHES,), params={"batch": 64}, cache_root=fit["cache"])
    asked: dict = {}

    def spy(technique, **kwargs):
        asked.update(kwargs)
        return memlab.measure(technique, **kwargs)

    v = verify(a, measure_fn=spy)
    assert asked["accumulate"] == 4 and asked["batch"] == 64
    assert v["measured"] and v["status"] == "ok", v.get("error")
    assert v["accumulate"] == 4 and v["predicted_total_peak_bytes"] == need
    assert v["measured_total_peak_bytes"] == need
    assert v["predicted_by_category_bytes"] == {c: v["measured_by_category_bytes"].get(c, 0) for c in CATEGORIES}
    assert "4 x 16 (--accumulate 4)" in format_verify(v) and "error +0 B" in format_verify(v)


def test_the_micro_batches_check_finds_0_bytes_of_error_at_4x_by_category(fit):
    """``python -m memlab.own_model.checks FILE --vary micro_batches``: K = 2 and 4 micro-batches of 4x
    the largest fitted batch, every category to the byte."""
    said: list[str] = []
    doc = check_micro(fit["path"], factors=(4,), parts=(2, 4), cache_root=fit["cache"], say=said.append)
    assert doc["cached"] and doc["vary"] == [MICRO_BATCHES] and doc["parts"] == [2, 4]
    assert [r["accumulate"] for r in doc["beyond"]] == [2, 4] and len(said) == 2
    for row in doc["beyond"]:
        assert row["status"] == "ok", row.get("error")
        assert row["micro_batch"] == 4 * MEASURED_MAX and row["params"]["batch"] == row["accumulate"] * row["micro_batch"]
        assert row["error_bytes"] == 0 and row["categories_exact"], row
        assert row["predicted_peak_by_category_bytes"] == {c: row["measured_peak_by_category_bytes"].get(c, 0)
                                                           for c in CATEGORIES}
