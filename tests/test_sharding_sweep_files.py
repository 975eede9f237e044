"""The sharded sweep (``memlab sweep --shard-strategy``) without a run: its values refused before torch,
its plan, shards that partition the plan and a merge that restores it, ``--resume``'s finished runs,
an output file of rank rows kept from an accidental replace, and the Sharding page drawn from a
sweep's ``--run`` file.  Rows are the committed ``data/sharding/mlp-g24.jsonl`` ones, marked as a
sweep's (real bytes; nothing is spawned here)."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from process_checks import HANG_GUARD_S

from memlab.sharding.sweep_plan import (SHARDED_KIND, ShardedRun, finished_runs, parse_strategies, plan_from_options,
                                        plan_runs, rank_key)

REPO = Path(__file__).resolve().parent.parent
MLP = REPO / "data" / "sharding" / "mlp-g24.jsonl"

#: (argv, what stderr must say): every one exit status 2, torch never imported
REFUSED = [
    (["--shard-strategy", "ddp,zero2", "--world", "1,2"], "--shard-strategy 'zero2' is not valid; valid: "
                                                           "comma-separated names of ddp, zero1, fsdp, fsdp_keep"),
    (["--shard-strategy", "ddp", "--world", "0,2"], "--world '0' is not valid; valid: comma-separated ints in 1..16"),
    (["--shard-strategy", "ddp", "--world", "2,17"], "--world '17' is not valid"),
    (["--shard-strategy", "ddp", "--world", "two"], "--world 'two' is not valid"),
    (["--shard-strategy", "ddp", "--world", "1,3", "--batch", "16"],
     "--batch 16 is not valid with --world 1,3: 16 rows do not split evenly over 3 ranks; valid: a multiple of "
     "every world size (of 3)"),
    (["--shard-strategy", "ddp"], "--shard-strategy needs --world N1,N2,..."),
    (["--model", "mlp"], "--model mlp needs --shard-strategy"),
    (["--world", "2", "--family", "chunking"], "--world needs --shard-strategy"),
    (["--shard-strategy", "ddp", "--world", "2", "--family", "chunking"], "--family does not apply with --shard-strategy"),
    (["--shard-strategy", "ddp", "--world", "2", "--optimizer", "adam"], "--optimizer does not apply"),
    (["--shard-strategy", "ddp", "--world", "2", "--model", "cnn"], "model file 'cnn' does not exist"),
    (["--shard-strategy", "ddp", "--world", "2", "--model", "absent.py"], "model file 'absent.py' does not exist"),
    (["--shard-strategy", "ddp", "--world", "2", "--device", "cuda:1"], "--device 'cuda:1' is not valid with "
                                                                       "--shard-strategy; valid: cpu (gloo) or cuda"),
    (["--shard-strategy", "ddp", "--world", "2", "--resume"], "--resume needs --out FILE"),
]


def test_bad_values_are_refused_before_torch():
    """One interpreter runs every refused command line and reports each exit status, its stderr, and
    whether torch was imported."""
    code = ("import contextlib, io, json, sys\nfrom memlab.cli import main\nout = []\n"
            f"for argv in {json.dumps([a for a, _ in REFUSED])}:\n"
            "    err = io.StringIO()\n    with contextlib.redirect_stderr(err):\n"
            "        rc = main(['sweep', *argv])\n    out.append([rc, err.getvalue()])\n"
            "print(json.dumps({'results': out, 'torch': 'torch' in sys.modules}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["torch"] is False
    for (argv, want), (rc, err) in zip(REFUSED, got["results"]):
        assert rc == 2 and want in err, (argv, rc, err)


def test_the_plan_and_its_defaults_match_the_torch_side():
    from memlab.sharding.launch import MAX_WORLD
    from memlab.sharding.model import MODELS, Sizes
    from memlab.sharding.strategies import strategy_label
    from memlab.sharding.sweep_plan import BUILTIN_MODELS, DEFAULT_BATCH
    from memlab.sharding.sweep_plan import MAX_WORLD as PLAN_MAX

    assert (BUILTIN_MODELS, PLAN_MAX, DEFAULT_BATCH) == (MODELS, MAX_WORLD, Sizes().batch)
    assert parse_strategies("fsdp_keep,ddp,fsdp(keep)") == [("fsdp", False), ("ddp", True)]
    runs = plan_from_options("ddp,fsdp_keep", "4,1,2,2", None, ["transformer", "mlp"])
    assert [r.key() for r in runs[:3]] == [("transformer", "ddp", 1, 16, False), ("transformer", "fsdp(keep)", 1, 16, False),
                                           ("transformer", "ddp", 2, 16, False)]
    assert len(runs) == 2 * 2 * 3 and all(r.label == strategy_label(r.strategy, r.reshard) for r in runs)
    with pytest.raises(ValueError, match=r"--model 'README.md' is not valid with --shard-strategy; valid: mlp, "
                                         r"transformer or a model file \(\*\.py\)"):
        plan_from_options("ddp", "2", None, ["README.md"])


def _sweep_rows(runs: list[ShardedRun], machine: str = "sweep-host", shard: dict | None = None) -> list[dict]:
    """The committed rank rows of ``runs`` (G = 24), marked as a sweep writes them."""
    from memlab.sharding.sweep_run import sweep_rows

    rows = [json.loads(line) for line in MLP.read_text().splitlines() if line.strip()]
    out = []
    for run in runs:
        mine = [{**r, "machine": machine} for r in rows if (r["model"], r["strategy"], r["world"]) ==
                (run.model, run.label, run.world)]
        assert len(mine) == run.world, run
        out += sweep_rows(mine, {"executor": "local", "seconds": 1.0}, shard)
    return out


PLAN = plan_runs(["mlp"], parse_strategies("ddp,zero1,fsdp"), [1, 2, 3, 4, 6, 8], 24)


def test_shards_partition_the_plan_and_balance_its_ranks():
    from memlab.sweep.sharded import run_cost
    from memlab.sweep.shard import select_shard

    shards = [select_shard(PLAN, i, 3, run_cost) for i in (1, 2, 3)]
    keys = [r.key() for s in shards for r in s]
    assert sorted(keys) == sorted(r.key() for r in PLAN) and len(set(keys)) == len(PLAN)
    # the same partition whatever the plan's order (NOTE [ shard partition ])
    assert [{r.key() for r in s} for s in shards] == \
        [{r.key() for r in select_shard(PLAN[::-1], i, 3, run_cost)} for i in (1, 2, 3)]
    ranks = [sum(r.world for r in s) for s in shards]
    assert max(ranks) - min(ranks) <= max(r.world for r in PLAN), ranks


def _shard_files(tmp: Path, count: int) -> list[Path]:
    from memlab.sweep.sharded import shard_of

    paths = []
    for i in range(1, count + 1):
        mine, record = shard_of(PLAN, f"{i}/{count}", "cpu")
        path = tmp / f"shard{i}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in _sweep_rows(mine, shard=record)))
        paths.append(path)
    return paths


def test_merge_restores_the_plan_and_names_what_is_missing(tmp_path):
    from memlab.sweep.merge import MergeConflict, merge_shards
    from memlab.sweep.shard import select_shard
    from memlab.sweep.sharded import run_cost

    paths = _shard_files(tmp_path, 3)
    report = merge_shards(tmp_path / "all.jsonl", paths)
    merged = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    assert report.complete and report.shard_count == 3 and report.planned == len(PLAN)
    assert sorted(map(rank_key, merged)) == sorted(map(rank_key, _sweep_rows(PLAN)))
    assert finished_runs(merged) == {r.key() for r in PLAN}
    missing = merge_shards(tmp_path / "part.jsonl", paths[:2])
    assert missing.missing_shards == [3] and not missing.complete
    assert missing.missing_points == [f"mlp {r.label} N={r.world} G=24" for r in select_shard(PLAN, 3, 3, run_cost)]
    bad = [json.loads(x) for x in paths[0].read_text().splitlines()]
    bad[0]["peak_bytes"] += 4
    (tmp_path / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad))
    with pytest.raises(MergeConflict, match="peak_bytes"):
        merge_shards(tmp_path / "no.jsonl", [paths[0], tmp_path / "bad.jsonl"])
    with pytest.raises(MergeConflict, match="mix a sharded sweep"):
        merge_shards(tmp_path / "no.jsonl", [paths[0], REPO / "data" / "sweeps" / "cpu.jsonl"])
    assert not (tmp_path / "no.jsonl").exists()


def test_resume_counts_a_run_finished_only_with_every_rank():
    rows = _sweep_rows(PLAN[:6])
    assert finished_runs(rows) == {r.key() for r in PLAN[:6]}
    partial = [r for r in rows if not (r["world"] == 2 and r["rank"] == 1 and r["strategy"] == "zero1")]
    assert finished_runs(partial) == {r.key() for r in PLAN[:6]} - {("mlp", "zero1", 2, 24, False)}
    assert finished_runs([{**r, "kind": "other"} for r in rows]) == set()
    # a checkpointed run is another run: the plain run's rows do not finish it, nor its rows the plain run
    checkpointed = [dataclasses.replace(r, checkpoint_blocks=True) for r in PLAN[:6]]
    assert not finished_runs(rows) & {r.key() for r in checkpointed}
    assert finished_runs([{**r, "checkpoint_blocks": True} for r in rows]) == {r.key() for r in checkpointed}


def test_an_out_of_rank_rows_is_not_replaced_without_force(tmp_path):
    from memlab.sweep import open_sweep_output

    path = tmp_path / "sweep.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _sweep_rows(PLAN[:2])))
    with pytest.raises(ValueError, match="holds 2 measured rows; give --resume"):
        open_sweep_output(path, append=False)
    with open_sweep_output(path, append=True) as out:
        out.append_row(_sweep_rows(PLAN[2:3])[0])
    assert [json.loads(x)["kind"] for x in path.read_text().splitlines()] == [SHARDED_KIND] * 3


def test_ray_asks_for_at_most_the_cluster_s_cpus():
    from memlab.sweep.sharded_ray import task_cpus

    assert [task_cpus(n, 2.0) for n in (1, 2, 4, 8)] == [1, 2, 2, 2]
    assert task_cpus(4, 0.5) == 1


def test_the_sharding_page_draws_a_sweep_file_and_names_its_machine(tmp_path):
    from memlab.site.context import build_context

    runs = plan_runs(["mlp"], parse_strategies("ddp,fsdp"), [1, 2, 4], 24)
    sweep = tmp_path / "my-sweep.jsonl"
    rows = _sweep_rows(runs)
    sweep.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"kind": "sharded", "model')  # a torn tail
    ctx = build_context(tmp_path / "results", tmp_path / "data", [sweep])
    page = next(p for p in ctx["pages"] if p["path"] == "sharding.html")
    assert {"title": "Sharding", "path": "sharding.html"} in ctx["nav"]
    section, = page["sections"]
    assert section["file"].endswith("my-sweep.jsonl") and "sweep" in section["heading"]
    assert [p for p in ctx["problems"] if "Sharding page" in p] == \
        [f"{sweep}:{len(rows) + 1}: not a rank row of a sharded sweep; left out of the Sharding page"]
    records = json.loads(page["files"][section["table"]["json"]])
    assert {(r["strategy"], r["world"]) for r in records} == {(r.label, r.world) for r in runs}
    for rec in records:
        ranks = [r for r in rows if (r["strategy"], r["world"]) == (rec["strategy"], rec["world"])]
        assert rec["machine"] == "sweep-host"
        assert rec["measured_peak_bytes"] == max(r["peak_bytes"] for r in ranks)
    assert all(row["machine"] == "sweep-host" for row in section["table"]["rows"])
    charts = {c["title"].split(":")[0]: json.loads(c["figure"]) for c in section["charts"]}
    assert set(charts) == {"ddp", "fsdp"} and charts["ddp"]["data"][0]["x"] == [1, 2, 4]
