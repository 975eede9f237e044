"""``memlab sweep --executor ray`` against a local 2-CPU Ray instance (NOTE [ Ray executor ]): the same
exact figures as ``--jobs 2``, one retry for a point whose worker was killed, an ``error`` row (never a
lost or doubled one) for a point whose retry died too."""
import json
import os
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.sweep import SweepPoint, run_sweep
from memlab.sweep.ray_executor import ray_available

pytestmark = pytest.mark.skipif(ray_available() is not None, reason=str(ray_available()))

PLUGIN = str(Path(__file__).parent / "plugins" / "kills_ray_worker.py")
POINTS = [SweepPoint("slice_loop", {"n": 256, "d": 16, "hidden": 32, "chunk_size": c}) for c in (32, 64, 128)] + \
         [SweepPoint("unchunked", {"n": 256, "d": 16, "hidden": 32})]
FAST = {"iterations": 1, "repeats": 1, "time_budget": 0}


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A local Ray instance of 2 CPUs, started by the test (the workers inherit this environment)."""
    import ray

    attempts = tmp_path_factory.mktemp("ray") / "attempts"
    os.environ["MEMLAB_TEST_ATTEMPTS"] = str(attempts)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield attempts
    finally:
        ray.shutdown()
        os.environ.pop("MEMLAB_TEST_ATTEMPTS", None)


def _key(m):
    return m.technique, json.dumps(m.params, sort_keys=True)


def test_ray_gives_the_same_exact_figures_as_two_local_jobs(local_ray):
    local = {_key(m): m for m in run_sweep(POINTS, None, jobs=2, **FAST)}
    on_ray = {_key(m): m for m in run_sweep(POINTS, None, executor="ray", **FAST)}
    assert on_ray.keys() == local.keys()
    for key, m in on_ray.items():
        assert m.status == "ok", (key, m.error)
        for name in ("peak_allocated_bytes", "total_peak_bytes", "peak_by_category_bytes", "allocated_after_step_bytes"):
            assert getattr(m, name) == getattr(local[key], name), (key, name)


def test_a_killed_worker_is_retried_once_and_its_row_written_once(local_ray, tmp_path):
    out = tmp_path / "ray.jsonl"
    local_ray.unlink(missing_ok=True)
    assert main(["sweep", "--plugin", PLUGIN, "--technique", "kills_worker_once", "--technique", "unchunked",
                 "--grid", "n=64", "--grid", "d=8", "--grid", "hidden=16", "--iterations", "1", "--repeats", "1",
                 "--time-budget", "0", "--executor", "ray", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["technique"] for r in rows) == ["kills_worker_once", "unchunked"]  # none lost, none doubled
    assert all(r["status"] == "ok" for r in rows)
    assert len(local_ray.read_text().split()) == 2  # two workers ran the point: the killed one and the retry


def test_a_point_whose_retry_dies_too_is_an_error_row(local_ray, tmp_path):
    local_ray.unlink(missing_ok=True)
    from memlab.registry import load_plugin

    load_plugin(PLUGIN)
    rows = list(run_sweep([SweepPoint("kills_worker_always", {"n": 64, "d": 8, "hidden": 16})], None,
                          executor="ray", **FAST))
    assert len(rows) == 1 and rows[0].status == "error"
    assert "died 2 times" in rows[0].error and "Ray retried it 1 time" in rows[0].error
    assert len(local_ray.read_text().split()) == 2


def test_bad_executor_settings_are_one_line(capsys):
    assert main(["sweep", "--technique", "unchunked", "--executor", "ray", "--jobs", "2"]) == 2
    assert "--jobs 2 with --executor ray" in capsys.readouterr().err
    assert main(["sweep", "--technique", "unchunked", "--address", "auto"]) == 2
    assert "--address 'auto' needs --executor ray" in capsys.readouterr().err
    with pytest.raises(ValueError, match="executor='dask' is not valid"):
        list(run_sweep(POINTS, None, executor="dask"))
