"""The reference shared by a sweep's checks (memlab.measurement.reference_cache): computed once per
workload configuration, the same verdict and errors bit for bit, and never taken from or given to a
problem that a technique changed."""
import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import memlab
from memlab import sweep as sweep_module
from memlab.sweep import run as sweep_run
from memlab.measurement.reference_cache import ReferenceCache
from memlab.measurement.verify import verify_technique
from memlab.registry import get_technique
from memlab.families.chunking.workload import ChainedMatmul

HOSTILE = Path(__file__).parent / "plugins" / "hostile_maths.py"
SIZE = {"n": 300, "d": 16, "hidden": 64}
CPU, F64 = torch.device("cpu"), torch.float64


@pytest.fixture
def reference_calls(monkeypatch):
    """How many times the chained-matmul workload's reference ran."""
    calls = []
    plain = ChainedMatmul.reference

    def counted(self, problem):
        calls.append(1)
        return plain(self, problem)

    monkeypatch.setattr(ChainedMatmul, "reference", counted)
    return calls


def _verdict(v):
    return v.ok, v.errors, v.rel_errors, v.reason


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_techniques_of_one_workload_configuration_share_one_reference(tmp_path, reference_calls, mode):
    cache = ReferenceCache(tmp_path)
    base = get_technique("unchunked")(**SIZE)
    chunked = get_technique("slice_loop")(**SIZE, chunk_size=100)
    without = [_verdict(verify_technique(t, CPU, F64, mode=mode)) for t in (base, chunked)]
    assert len(reference_calls) == 2
    with_cache = [_verdict(verify_technique(t, CPU, F64, mode=mode, cache=cache)) for t in (base, chunked)]
    assert len(reference_calls) == 3  # the second technique loaded the first one's reference
    assert with_cache == without      # the same errors, bit for bit
    assert len(list(tmp_path.glob("*.pt"))) == 1
    # another size, dtype or seed is another reference
    verify_technique(get_technique("slice_loop")(**{**SIZE, "n": 200}, chunk_size=100), CPU, F64, mode=mode, cache=cache)
    verify_technique(chunked, CPU, torch.float32, mode=mode, cache=cache)
    verify_technique(chunked, CPU, F64, mode=mode, seed=1, cache=cache)
    assert len(reference_calls) == 6 and len(list(tmp_path.glob("*.pt"))) == 4


def test_a_technique_that_changes_its_problem_is_checked_against_the_problem_as_built(tmp_path, reference_calls):
    memlab.load_plugin(HOSTILE)
    cache = ReferenceCache(tmp_path)
    zeroes = get_technique("hostile_zero_weights")(**SIZE)
    fresh = verify_technique(zeroes, CPU, F64)
    assert not fresh.ok and fresh.errors["output"] > 0  # the reference ran before the weights were zeroed
    assert "modified parameter 'w1'" in fresh.reason
    assert _verdict(verify_technique(zeroes, CPU, F64, cache=cache)) == _verdict(fresh)
    calls = len(reference_calls)
    ok = verify_technique(get_technique("unchunked")(**SIZE), CPU, F64, cache=cache)
    assert ok.ok and len(reference_calls) == calls  # the zeroing technique's reference was a pristine one


def test_a_technique_with_its_own_problem_is_not_cached_and_a_bad_file_is_recomputed(tmp_path):
    cache = ReferenceCache(tmp_path)
    tt = get_technique("tt_factorized").for_check()  # builds its own problem
    assert cache.key(tt, F64, CPU, "train", 0) is None
    base = get_technique("unchunked")(**SIZE)
    key = cache.key(base, F64, CPU, "train", 0)
    (tmp_path / key).write_bytes(b"not a tensor file")
    assert cache.load(key, CPU, 3) is None
    assert verify_technique(base, CPU, F64, cache=cache).ok
    out, grads = cache.load(key, CPU, 3)
    assert out.dtype == F64 and len(grads) == 3


def test_a_sweep_shares_references_and_removes_its_folder(tmp_path, monkeypatch):
    made = []

    def mkdtemp(**kw):
        made.append(tempfile.mkdtemp(dir=tmp_path, **kw))
        return made[-1]

    monkeypatch.setattr(sweep_run, "tempfile", SimpleNamespace(mkdtemp=mkdtemp))
    points = [sweep_module.SweepPoint("unchunked", SIZE), sweep_module.SweepPoint("slice_loop", {**SIZE, "chunk_size": 100})]
    rows = list(sweep_module.run_sweep(points, None, iterations=1, repeats=1, time_budget=0))
    assert [r.status for r in rows] == ["ok", "ok"]
    assert len(made) == 1 and not Path(made[0]).exists()
    alone = memlab.measure("slice_loop", iterations=1, repeats=1, time_budget=0, **SIZE, chunk_size=100)
    assert (rows[1].errors_by_tensor, rows[1].drift_max_abs_error) == (alone.errors_by_tensor, alone.drift_max_abs_error)
    assert json.loads(rows[1].to_json())["matches_reference"] is True


def test_a_sweep_given_a_folder_fills_it_and_keeps_it(tmp_path):
    refs = tmp_path / "refs"
    points = [sweep_module.SweepPoint("slice_loop", {**SIZE, "chunk_size": c}) for c in (100, 150)]
    rows = list(sweep_module.run_sweep(points, None, iterations=1, repeats=1, time_budget=0, reference_cache=str(refs)))
    assert [r.status for r in rows] == ["ok", "ok"]
    assert len(list(refs.glob("*.pt"))) == 2  # float64 and float32, shared by both chunk sizes
