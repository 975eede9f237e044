"""The history page's logic (memlab.site.history): commit order, per-technique charts, and the
regressions view, on small synthetic asv results trees (no torch, no asv run; < 5 s)."""
from __future__ import annotations

import html as htmlmod
import json
import re
import subprocess
from pathlib import Path

import pytest

from memlab import results as R
from memlab.site import build_site
from memlab.site import figures as F
from memlab.site import history as H

COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
           "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]
MEM = "bench_chunking.ChainedMatmul.track_peak_allocated"
RES = "bench_chunking.ChainedMatmul.track_peak_reserved"
TIME = "bench_chunking.ChainedMatmul.time_step"
TECHS, CHUNKS = ["unchunked", "slice_loop", "vmap_chunk"], [2000, 500]
PARAMS = [[repr(t) for t in TECHS], [str(c) for c in CHUNKS], ["'cpu'"]]
BASE = {"unchunked": 16_000_000, "slice_loop": 18_000_000, "vmap_chunk": 9_000_000}


def _values(peaks: dict[str, float], skip: tuple = ()) -> list:
    """One value per combination in asv's product order; ``unchunked`` only at the first chunk size,
    ``skip`` = ``(technique, chunk)`` pairs left NaN (skipped there)."""
    out = []
    for t in TECHS:
        for c in CHUNKS:
            out.append(float("nan") if (t == "unchunked" and c != CHUNKS[0]) or (t, c) in skip
                       else peaks[t] + c)
    return out


def write_tree(root: Path, commits: list[str], values: dict[str, dict[str, list]], machine: str = "box",
               dates: list[int] | None = None) -> Path:
    """An asv 0.6 results tree: ``values[commit][benchmark]`` is the list of results."""
    (root / machine).mkdir(parents=True, exist_ok=True)
    meta = {b: {"name": b, "param_names": ["technique", "chunk_size", "device"], "params": PARAMS,
                "type": "time" if b == TIME else "track", "unit": "seconds" if b == TIME else "bytes",
                "version": "1"} for b in (MEM, RES, TIME)}
    (root / "benchmarks.json").write_text(json.dumps({**meta, "version": 2}))
    (root / machine / "machine.json").write_text(json.dumps({"machine": machine, "num_cpu": "2", "version": 1}))
    for i, commit in enumerate(commits):
        date = (dates or [1_700_000_000_000 + k * 60_000 for k in range(len(commits))])[i]
        data = {"commit_hash": commit, "env_name": "env", "date": date, "params": {"machine": machine},
                "python": "3.11", "requirements": {}, "env_vars": {}, "result_columns": COLUMNS,
                "results": {b: [v, PARAMS, "1", date, 1.0] for b, v in values[commit].items()},
                "durations": {}, "version": 2}
        (root / machine / f"{commit[:8]}-env.json").write_text(json.dumps(data))
    return root


def _doubling_tree(root: Path) -> tuple[Path, list[str]]:
    """Four commits; the third doubles slice_loop's peak (both chunk sizes); times wobble everywhere;
    CPU resident jumps at the second commit (not exact: never listed)."""
    commits = [f"{k:x}" * 40 for k in (10, 11, 12, 13)]
    doubled = {**BASE, "slice_loop": 2 * BASE["slice_loop"]}
    values = {}
    for i, c in enumerate(commits):
        peaks = doubled if i >= 2 else BASE
        values[c] = {MEM: _values(peaks),
                     RES: _values({t: v * (1 + i % 2) for t, v in BASE.items()}),
                     TIME: [None if x != x else 0.01 * (1 + 0.3 * ((i + j) % 3)) for j, x in enumerate(_values(BASE))]}
    return write_tree(root, commits, values), commits


def _frame(root: Path):
    return R.load_asv_results(root)


# -- order -----------------------------------------------------------------------------------------
def test_commit_order_follows_git_not_dates(tmp_path):
    commits = ["a" * 40, "b" * 40, "c" * 40]
    vals = {c: {MEM: _values(BASE)} for c in commits}
    # dates say c, b, a; the history says a, b, c
    root = write_tree(tmp_path, commits, vals, dates=[3_000, 2_000, 1_000])
    frame = _frame(root)
    known = [("a" * 40, "first"), ("f" * 40, "not measured"), ("b" * 40, "second"), ("c" * 40, "third")]
    order = H.commit_order(frame, known)
    assert [c.hash[0] for c in order] == ["a", "b", "c"]
    assert [c.subject for c in order] == ["first", "second", "third"]
    assert [c.index for c in order] == [0, 2, 3] and [c.position for c in order] == [0, 1, 2]
    assert H.commit_order(frame)[0].hash == "c" * 40  # no git: by date


def test_unknown_commits_are_merged_in_by_date(tmp_path):
    commits = ["a" * 40, "b" * 40, "c" * 40, "d" * 40]
    vals = {c: {MEM: _values(BASE)} for c in commits}
    root = write_tree(tmp_path, commits, vals, dates=[1_000, 2_000, 3_000, 1_500])
    order = H.commit_order(_frame(root), [("a" * 40, "A"), ("b" * 40, "B"), ("c" * 40, "C")])
    assert [c.hash[0] for c in order] == ["a", "d", "b", "c"]
    assert order[1].subject == "" and order[1].index is None and order[1].label == "d" * H.SHORT


# -- the regressions view ----------------------------------------------------------------------------
def test_regressions_view_flags_exactly_the_doubling_commit(tmp_path):
    root, commits = _doubling_tree(tmp_path)
    frame = _frame(root)
    known = [(c, f"commit {i}") for i, c in enumerate(commits)]
    changes = H.step_changes(frame, H.commit_order(frame, known))
    assert len(changes) == 2  # slice_loop at both chunk sizes; nothing for time or CPU resident
    for change in changes:
        assert change["after"].hash == commits[2] and change["before"].hash == commits[1]
        assert change["benchmark"] == MEM and change["technique"] == "slice_loop"
        assert f"{change['factor']:.2f}" == "2.00" and change["between"] == 1 and change["unmeasured"] == 0
    assert sorted(c["params"]["chunk_size"] for c in changes) == [500, 2000]
    (group,) = H.changes_by_commit(changes)
    assert group["after"].subject == "commit 2" and group["count"] == 2 and group["techniques"] == ["slice_loop"]
    assert [f"{f:.2f}" for f in group["factors"]] == ["2.00", "2.00"]


def test_a_skipped_commit_widens_the_range(tmp_path):
    commits = ["a" * 40, "b" * 40, "c" * 40]
    vals = {commits[0]: {MEM: _values(BASE)},
            commits[1]: {MEM: _values(BASE, skip={("vmap_chunk", 2000)})},
            commits[2]: {MEM: _values({**BASE, "vmap_chunk": BASE["vmap_chunk"] // 2})}}
    frame = _frame(write_tree(tmp_path, commits, vals))
    order = H.commit_order(frame, [(c, c[0]) for c in commits])
    changes = H.step_changes(frame, order)
    # vmap_chunk at 2000: a -> c across b (skipped there); at 500: b -> c
    got = {(c["params"]["chunk_size"], c["before"].hash[0], c["after"].hash[0], c["unmeasured"], c["between"])
           for c in changes}
    assert got == {(2000, "a", "c", 1, 2), (500, "b", "c", 0, 1)}
    assert all(c["factor"] < 0.51 for c in changes)


def test_only_exact_memory_counts():
    assert H.is_exact_memory(MEM, "bytes", {"device": "cpu"})
    assert H.is_exact_memory(RES, "bytes", {"device": "cuda"})
    assert not H.is_exact_memory(RES, "bytes", {"device": "cpu"})
    assert not H.is_exact_memory(TIME, "seconds", {"device": "cpu"})
    assert not H.is_exact_memory("x.y.peakmem_step", "bytes", {})


# -- the chart ---------------------------------------------------------------------------------------
def test_history_chart_one_panel_per_technique_in_commit_order(tmp_path):
    root, commits = _doubling_tree(tmp_path)
    frame = _frame(root)
    order = H.commit_order(frame, [(c, f"subject {i}") for i, c in enumerate(commits)])
    mem = frame[frame["benchmark"] == MEM]
    fig = F.history(mem, {"slice_loop": "#d62728", "unchunked": F.BASELINE_COLOR}, order)
    layout = fig["layout"]
    panels = [a["text"] for a in layout["annotations"]]
    assert panels == ["<b>unchunked</b> (baseline)", "<b>slice_loop</b>", "<b>vmap_chunk</b>"]
    assert layout["xaxis"]["categoryarray"] == [c[:H.SHORT] for c in commits]
    assert layout["yaxis"]["title"]["text"] == "peak allocated (MiB)" and "yaxis3" in layout
    traces = [t for t in fig["data"] if t["x"] != [None]]
    assert len(traces) == 5  # unchunked once, 2 chunk sizes for the others
    # the legend: one neutral entry per combination, by dash and marker (a line's colour is its panel's)
    legend = [t for t in fig["data"] if t.get("showlegend", True)]
    assert [t["name"] for t in legend] == ["chunk_size=500", "chunk_size=2000"] and all(t["x"] == [None] for t in legend)
    assert all(t["line"]["color"] not in F.PALETTE and t["line"]["color"] != F.BASELINE_COLOR for t in legend)
    assert {t["legendgroup"] for t in legend} == {t["legendgroup"] for t in traces}
    assert H.line_labels(H.technique_histories(mem, order)) == ["chunk_size=500", "chunk_size=2000"]
    slice_loop = [t for t in traces if t["yaxis"] == "y2"]
    assert all(t["x"] == [c[:H.SHORT] for c in commits] for t in slice_loop)
    assert all(t["line"]["color"] == "#d62728" for t in slice_loop)
    assert "subject 2" in slice_loop[0]["hovertext"][2] and "36,000,500 bytes" in slice_loop[0]["hovertext"][2]
    for t in traces:  # every value inside its panel's range
        lo, hi = layout["yaxis" + t["yaxis"][1:]]["range"]
        assert all(lo <= y <= hi for y in t["y"])


# -- the page ------------------------------------------------------------------------------------------
def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(repo)}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def test_history_page_lists_the_doubling_commit(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    subjects = ["suite", "docs only", "slice_loop keeps a copy", "site"]
    commits = []
    for s in subjects:
        _git(repo, "commit", "-q", "--allow-empty", "-m", s)
        commits.append(_git(repo, "rev-parse", "HEAD"))
    assert [c for c, _ in H.git_commits(repo)] == commits
    root, _ = _doubling_tree(tmp_path / "synthetic")
    results = repo / "results"
    results.mkdir()
    for path in sorted(root.rglob("*.json")):  # the synthetic tree, renamed to the repository's commits
        text = path.read_text()
        for i in range(4):
            text = text.replace(f"{i + 10:x}" * 40, commits[i])
        target = results / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    data = tmp_path / "data"
    data.mkdir()
    build_site(results, data, tmp_path / "out")
    page = (tmp_path / "out" / "history.html").read_text()
    assert "Regressions view" in page and "slice_loop keeps a copy" in page
    assert f"<code>{commits[2][:H.SHORT]}</code> slice_loop keeps a copy" in page
    assert "2 combination(s) of slice_loop, factor 2.00×" in page
    rows = json.loads((tmp_path / "out" / "tables" / "history--memory-step-changes.json").read_text())
    assert [(r["after_commit"], r["technique"], f"{r['factor']:.2f}") for r in rows] == \
        [(commits[2], "slice_loop", "2.00")] * 2
    figures = [json.loads(htmlmod.unescape(m)) for m in re.findall(r'data-figure="([^"]*)"', page)]
    assert len(figures) == 3  # one per benchmark on the one machine
    assert all(f["layout"]["xaxis"]["categoryarray"] == [c[:H.SHORT] for c in commits] for f in figures)
    assert "in the repository&#39;s history order" in page or "in the repository's history order" in page


def test_memory_sections_come_before_times():
    names = [TIME, RES, MEM, "bench_reversible.ResidualStack.time_step"]
    assert sorted(names, key=H.benchmark_order) == [MEM, RES, TIME, "bench_reversible.ResidualStack.time_step"]
