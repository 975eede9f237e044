"""``memlab sweep --shard i/n`` and ``memlab merge``: a sweep split over hosts and put back together,
exactly (NOTE [ shard partition ]); ``--device cuda --jobs N`` pins one GPU per worker (NOTE [ one
GPU per worker ]), tested here on the CPU through the children's ``CUDA_VISIBLE_DEVICES``."""
import json

import pytest

from memlab.cli import main
from memlab.sweep import SweepPoint, check_jobs, plan_sweep, run_sweep
from memlab.sweep.compare import compare_sweeps
from memlab.sweep.shard import parse_shard, select_shard, shard_indices, summarise

FAST = ["--iterations", "1", "--repeats", "1", "--time-budget", "0"]
PLAN = ["--technique", "unchunked", "--technique", "slice_loop", "--grid", "n=64,96,128", "--grid", "d=8",
        "--grid", "hidden=16"]


@pytest.mark.parametrize("text,expected", [("1/4", (1, 4)), (" 4 / 4 ", (4, 4)), ("1/1", (1, 1))])
def test_shard_parses(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text,match", [("0/4", "index 0 is out of range 1..4"), ("5/4", "index 5 is out of range 1..4"),
                                        ("1/0", "count 0 is out of range"), ("2", "not of the form i/n"),
                                        ("a/b", "not of the form i/n"), ("-1/4", "not of the form i/n")])
def test_bad_shard_names_the_value(text, match):
    with pytest.raises(ValueError, match=match):
        parse_shard(text)


def test_cli_bad_shard_is_one_line(capsys):
    assert main(["sweep", "--technique", "unchunked", "--shard", "3/2"]) == 2
    assert "the shard index 3 is out of range 1..2" in capsys.readouterr().err


def test_every_point_is_in_exactly_one_shard_and_the_partition_is_deterministic():
    points = plan_sweep()
    for count in (1, 2, 3, 4, 7):
        shards = shard_indices(points, count)
        assert shards == shard_indices(list(points), count)  # the same on every call (and host)
        assert set(shards) == set(range(count))
        joined = [p for i in range(1, count + 1) for p in select_shard(points, i, count)]
        assert sorted(map(repr, joined)) == sorted(map(repr, points))
    # the partition does not depend on the order the plan lists its points in
    shuffled = points[::-1]
    assert {repr(p): s for p, s in zip(points, shard_indices(points, 4))} == \
           {repr(p): s for p, s in zip(shuffled, shard_indices(shuffled, 4))}


def test_full_plan_shards_have_balanced_estimated_work():
    """The size model gives each of 4 shards of the full grid within 5% of a quarter of the work."""
    shares = summarise(plan_sweep(), 4).shares
    assert max(shares) / min(shares) < 1.05, shares


def test_balance_is_per_workload():
    """One huge workload cannot starve another: each shard gets about 1/n of each workload's points."""
    points = [SweepPoint(f"t{i}", {"i": i}) for i in range(8)]
    cost = lambda p: ("big" if p.params["i"] < 4 else "small", 1000.0 if p.params["i"] < 4 else 1.0)  # noqa: E731
    shards = shard_indices(points, 2, cost)
    for workload in (range(4), range(4, 8)):
        assert sorted(shards[i] for i in workload) == [0, 0, 1, 1]


def _run(args):
    return main(["sweep", *PLAN, *FAST, *args])


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """The plan run whole and as 3 shards (measured once for this module's tests), and what each
    shard's run wrote to stderr."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("shards")
    whole = root / "whole.jsonl"
    assert _run(["--out", str(whole)]) == 0
    shards, said = [root / f"s{i}.jsonl" for i in (1, 2, 3)], []
    for i, path in enumerate(shards, 1):
        with contextlib.redirect_stderr(io.StringIO()) as err:
            assert _run(["--shard", f"{i}/3", "--out", str(path)]) == 0
        said.append(err.getvalue())
    return whole, shards, said


def test_shards_merged_equal_the_whole_sweep(sharded, tmp_path, capsys):
    whole, shards, _ = sharded
    merged = tmp_path / "merged.jsonl"
    assert main(["merge", str(merged), *map(str, shards)]) == 0
    out = capsys.readouterr().out
    assert "merged 6 rows from 3 files" in out and "every shard present" in out and "missing points: none" in out
    result = compare_sweeps(whole, merged)
    assert result.identical and result.shared == 6 and result.only_old == result.only_new == 0
    assert result.fields_compared >= 6 * 5
    # rows are copied as written: every row of every shard appears byte for byte
    written = set(merged.read_text().splitlines())
    assert all(line in written for path in shards for line in path.read_text().splitlines())
    assert {json.loads(line)["extra"]["sweep_shard"]["plan"] for line in written} != set()
    assert len({json.loads(line)["extra"]["sweep_shard"]["plan"] for line in written}) == 1


def test_shard_announces_its_part(sharded):
    assert "memlab: shard 2/3: 2 of 6 points" in sharded[2][1]


def test_merge_names_missing_shards_and_points(sharded, tmp_path, capsys):
    _, paths, _ = sharded
    assert main(["merge", str(tmp_path / "m.jsonl"), str(paths[0]), str(paths[2])]) == 1
    out = capsys.readouterr().out
    lost = [json.loads(line) for line in paths[1].read_text().splitlines()]
    assert "missing shard 2/3" in out and f"missing points: {len(lost)}" in out
    for row in lost:
        assert f"{row['technique']} {json.dumps(row['params'], sort_keys=True)}" in out


def test_merge_refuses_two_exact_figures_for_one_point(sharded, tmp_path, capsys):
    a = sharded[1][0]
    row = json.loads(a.read_text().splitlines()[0])
    row["peak_allocated_bytes"] += 512
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps(row) + "\n")
    out = tmp_path / "m.jsonl"
    assert main(["merge", str(out), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "peak_allocated_bytes" in err and str(a) in err and str(b) in err and "refusing" in err
    assert not out.exists()


def test_merge_refuses_shards_of_two_plans_and_an_existing_output(sharded, tmp_path, capsys):
    a, b = sharded[1][0], tmp_path / "b.jsonl"
    assert main(["sweep", "--technique", "unchunked", "--grid", "n=32", "--grid", "d=8", "--grid", "hidden=16",
                 *FAST, "--shard", "1/1", "--out", str(b)]) == 0
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "m.jsonl"), str(a), str(b)]) == 2
    assert "shards of different sweeps" in capsys.readouterr().err
    assert main(["merge", str(b), str(a)]) == 2
    assert "exists; give a new file, or --force" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "m.jsonl"), str(tmp_path / "nope.jsonl")]) == 2
    assert "no such sweep file" in capsys.readouterr().err


def test_gpu_workers_each_see_one_pinned_device():
    """Worker k's children see only ``gpu_pins[k]``; run on the CPU, read back from each row."""
    points = [SweepPoint("unchunked", {"n": 32 * k, "d": 8, "hidden": 16}) for k in range(1, 7)]
    rows = list(run_sweep(points, None, jobs=2, gpu_pins=["7", "GPU-fake-uuid"], iterations=1, repeats=1,
                          time_budget=0, check=False))
    assert len(rows) == 6
    assert {r.environment["cuda_visible_devices"] for r in rows} <= {"7", "GPU-fake-uuid"}
    assert all(r.status == "ok" for r in rows)


@pytest.mark.parametrize("jobs,gpus,match", [(2, ["0"], "jobs=2 needs 2 GPUs .one per worker., but 1 is visible"),
                                             (3, [], "but 0 are visible .none.")])
def test_cuda_jobs_need_one_gpu_each(jobs, gpus, match):
    with pytest.raises(ValueError, match=match):
        check_jobs(jobs, "cuda", gpus)
    check_jobs(len(gpus) or 1, "cuda", gpus)  # one per visible GPU is fine


def test_a_technique_the_device_cannot_run_is_skipped_not_missing(sharded, tmp_path):
    """A CPU sweep skips a CUDA-only technique without a row (offload_activations): merge counts its
    points as skipped, not missing, and still names a point that is really missing."""
    from memlab.sweep.merge import merge_shards

    _, paths, _ = sharded
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines()]
    planned = [(r["technique"], r["params"]) for r in rows]
    offload = [("offload_activations", {"seq": 32}), ("offload_activations", {"seq": 64})]
    for r in rows:  # the plan as recorded grows by the two skipped points
        r["extra"]["sweep_shard"]["planned"] += len(offload)
    files = []
    for i, p in enumerate(paths):
        f = tmp_path / f"s{i}.jsonl"
        f.write_text("".join(json.dumps(r) + "\n" for r in rows if r["extra"]["sweep_shard"]["index"] == i + 1))
        files.append(f)
    report = merge_shards(tmp_path / "m.jsonl", files, replan=lambda _: planned + offload)
    assert report.complete and report.skipped_count == 2 and report.missing_count == 0, report.text("m")
    lost = planned[0]
    report = merge_shards(tmp_path / "m2.jsonl", files, replan=lambda _: planned + offload + [(lost[0], {"n": 999})])
    assert not report.complete and report.missing_count == 1 and report.skipped_count == 2
