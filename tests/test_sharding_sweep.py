"""``memlab sweep --shard-strategy`` end to end on the tiny MLP stack (ddp and fsdp at N = 1 and 2,
global batch 8): run as two shards and merged, then resumed; every rank's row holds the bytes
:func:`memlab.sharding.launch.run_sharded` gives directly; Ray gives the same bytes; the Sharding page
draws the merged file and names its machine.  Spawns gloo groups (skipped without gloo); asserts
bytes, never a time."""
from __future__ import annotations

import contextlib
import io
import json
import socket

import pytest
from gloo_checks import needs_gloo

from memlab.cli import main
from memlab.sharding.predict import leftover_bytes
from memlab.sharding.sweep_plan import SHARDED_KIND, parse_strategies, plan_runs, run_key

pytestmark = needs_gloo

ARGS = ["sweep", "--shard-strategy", "ddp,fsdp", "--world", "1,2", "--model", "mlp", "--batch", "8"]
PLAN = plan_runs(["mlp"], parse_strategies("ddp,fsdp"), [1, 2], 8)
#: the figures a rank's row must carry unchanged (bytes)
BYTES = ("peak_bytes", "peak_above_start_bytes", "start", "peak", "end", "max", "owned_numels")


def _figures(row: dict) -> dict:
    """``row``'s :data:`BYTES`, less DDP's rebuild leftover where a run has one: a 4- or 168-byte block
    whose free races gloo's thread, so two runs of the same step may differ by it on one rank (NOTE
    [ DDP's rebuild leftovers ] in memlab/sharding/predict.py; seen in a clean-clone .ci/run, 6 Dec 2026)."""
    left = leftover_bytes(row)
    out = {k: row[k] for k in BYTES}
    out["peak_bytes"] -= left
    for moment in ("start", "peak", "end", "max"):
        out[moment] = {**out[moment], "temporaries": out[moment]["temporaries"] - left}
    return out


def _main(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    return status, out.getvalue()


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep run as shards 1/2 and 2/2 into two files, merged into ``all.jsonl``."""
    tmp = tmp_path_factory.mktemp("sharded-sweep")
    shards = [tmp / f"shard{i}.jsonl" for i in (1, 2)]
    runs = [_main([*ARGS, "--shard", f"{i}/2", "--out", str(path)]) for i, path in enumerate(shards, 1)]
    merged = _main(["merge", str(tmp / "all.jsonl"), *map(str, shards)])
    return {"tmp": tmp, "shards": shards, "runs": runs, "merged": merged, "rows": _rows(tmp / "all.jsonl")}


def test_shards_write_one_row_per_rank_and_merge_to_the_plan(swept):
    assert [status for status, _ in swept["runs"]] == [0, 0] and swept["merged"][0] == 0
    assert "every shard present" in swept["merged"][1] and "missing points: none" in swept["merged"][1]
    by_shard = [{run_key(r) for r in _rows(p)} for p in swept["shards"]]
    assert by_shard[0] and by_shard[1] and not by_shard[0] & by_shard[1]
    rows = swept["rows"]
    for run in PLAN:
        mine = [r for r in rows if run_key(r) == run.key()]
        assert sorted(r["rank"] for r in mine) == list(range(run.world)), run
    for r in rows:
        assert r["kind"] == SHARDED_KIND and r["matches"] is True
        assert r["machine"] == socket.gethostname() and r["sweep"]["executor"] == "local"
        assert r["sweep"]["seconds"] > 0 and r["sweep"]["torch"].startswith("2.")
        assert r["sweep_shard"]["count"] == 2 and r["sweep_shard"]["planned"] == len(PLAN)
    table = swept["runs"][0][1] + swept["runs"][1][1]
    assert "per-rank peak (B) min..max" in table and " ok " in table


def test_rows_hold_the_bytes_run_sharded_gives(swept):
    from memlab.sharding.launch import run_sharded
    from memlab.sharding.model import Sizes

    direct = {}
    for world in (1, 2):
        for per_rank in run_sharded([(s, r) for s, r in parse_strategies("ddp,fsdp")], world, Sizes(batch=8)):
            for row in per_rank:
                direct[(row["strategy"], world, row["rank"])] = row
    assert len(direct) == len(swept["rows"]) == 6
    for row in swept["rows"]:
        want = direct[(row["strategy"], row["world"], row["rank"])]
        assert _figures(row) == _figures(want), (row["strategy"], row["world"], row["rank"])


def test_resume_runs_nothing_that_is_finished(swept):
    path = swept["tmp"] / "all.jsonl"
    before = path.read_text()
    status, out = _main([*ARGS, "--resume", "--out", str(path)])
    assert status == 0 and path.read_text() == before


def test_ray_gives_the_same_bytes(swept, tmp_path):
    from memlab.sweep.ray_executor import ray_available

    if ray_available():
        pytest.skip(ray_available())
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = tmp_path / "ray.jsonl"
        status, _ = _main(["sweep", "--shard-strategy", "ddp", "--world", "2", "--model", "mlp", "--batch", "8",
                           "--executor", "ray", "--out", str(out)])
    finally:
        ray.shutdown()
    assert status == 0
    on_ray, local = _rows(out), [r for r in swept["rows"] if (r["strategy"], r["world"]) == ("ddp", 2)]
    assert [r["rank"] for r in on_ray] == [0, 1] and all(r["sweep"]["executor"] == "ray" for r in on_ray)
    for got, want in zip(on_ray, sorted(local, key=lambda r: r["rank"])):
        assert _figures(got) == _figures(want)


def test_the_sharding_page_draws_the_sweep(swept):
    from memlab.site.context import build_context

    tmp = swept["tmp"]
    ctx = build_context(tmp / "results", tmp / "data", [tmp / "all.jsonl"])
    page = next(p for p in ctx["pages"] if p["path"] == "sharding.html")
    section, = page["sections"]
    records = json.loads(page["files"][section["table"]["json"]])
    assert {(r["strategy"], r["world"]) for r in records} == {(r.label, r.world) for r in PLAN}
    for rec in records:
        ranks = [r for r in swept["rows"] if (r["strategy"], r["world"]) == (rec["strategy"], rec["world"])]
        assert rec["machine"] == socket.gethostname()
        assert rec["measured_peak_bytes"] == max(r["peak_bytes"] for r in ranks)
