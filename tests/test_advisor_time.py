"""The advisor's relative-time model: r + (c + (k - 1) * o) / W fitted at two sizes (NOTE [ advisor time model ])."""
import pytest

from memlab.advisor.fit import declaration_of
from memlab.advisor.fit import time_model
from memlab.advisor.model import predict_time


def _points(r, c, o, works, chunks):
    return [{"work": w, "chunks": k, "relative_step_time": r + (c + (k - 1) * o) / w} for w in works for k in chunks]


def test_a_chunked_entry_recovers_its_ratio_and_fixed_costs():
    fam = declaration_of("chunking")
    entry = fam.entry("slice_loop")
    model = time_model(fam, entry, _points(1.1, 3e6, 2e6, (33554432, 536870912), (1, 4, 16)))
    assert model["kind"] == "work" and model["work"] == "n*d*hidden"
    assert model["r"] == pytest.approx(1.1) and model["c"] == pytest.approx(3e6) and model["o"] == pytest.approx(2e6)
    assert model["max_fit_rel_error"] < 1e-9
    # at a size 64x the larger one, 10 chunks: the fixed costs weigh 64x less
    size = {"n": 65536, "d": 256, "hidden": 2048, "chunk_size": 6554}
    w = 65536 * 256 * 2048
    assert predict_time(fam, {**model, "knobs": ["chunk_size"], "time": model},
                        size) == pytest.approx(1.1 + (3e6 + 9 * 2e6) / w)


def test_an_entry_without_a_knob_has_no_per_chunk_cost():
    fam = declaration_of("reversible")
    model = time_model(fam, fam.entry("checkpoint_block"), _points(1.3, 4e6, 0.0, (8388608, 134217728), (1,)))
    assert model["kind"] == "work" and model["o"] == 0.0
    assert model["r"] == pytest.approx(1.3) and model["c"] == pytest.approx(4e6)
    entry = {"knobs": [], "time": model}
    big = {"depth": 64, "batch": 512, "width": 512, "hidden": 1024}
    assert predict_time(fam, entry, big) == pytest.approx(1.3 + 4e6 / (64 * 512 * 512 * 1024))


def test_one_size_only_is_a_constant_and_none_is_none():
    fam = declaration_of("reversible")
    entry = fam.entry("residual")
    pts = [{"work": 100, "chunks": 1, "relative_step_time": x} for x in (1.0, 1.2, 1.1)]
    assert time_model(fam, entry, pts)["kind"] == "constant" and time_model(fam, entry, pts)["a"] == 1.1
    assert time_model(fam, entry, [])["kind"] == "none"
    assert predict_time(fam, {"knobs": [], "time": {"kind": "none"}}, {}) is None
