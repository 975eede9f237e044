"""The history page's logic (memlab.site.history): commit order, per-technique charts, and the
regressions view, on small synthetic asv results trees (no torch, no asv run; < 5 s)."""
from __future__ import annotations

import html as htmlmod
import json
import re
import subprocess
import warnings
from pathlib import Path

from memlab import results as R
from memlab.site import build_site
from memlab.site import figures as F
from memlab.site import history as H
from memlab.site.history_chart import FAILED_COLOR, RANGE_SLIDER_FROM, history_figure

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
               dates: list[int] | None = None, versions: dict[str, str] | None = None) -> Path:
    """An asv 0.6 results tree: ``values[commit][benchmark]`` is the list of results (None: asv's one
    null for a benchmark whose every combination failed); ``versions[commit]`` the benchmarks' version
    there (default "1")."""
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
                "results": {b: [v, PARAMS, (versions or {}).get(commit, "1"), date, 1.0]
                            for b, v in values[commit].items()},
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
                     TIME: [x if x != x else 0.01 * (1 + 0.3 * ((i + j) % 3)) for j, x in enumerate(_values(BASE))]}
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
    fig = history_figure(mem, order, {"slice_loop": "#d62728", "unchunked": F.BASELINE_COLOR})
    layout = fig["layout"]
    panels = [a["text"] for a in layout["annotations"]]
    assert panels == ["<b>unchunked</b> (baseline)", "<b>slice_loop</b>", "<b>vmap_chunk</b>"]
    assert layout["xaxis"]["categoryarray"] == [c[:H.SHORT] for c in commits]
    assert layout["yaxis"]["title"]["text"] == "peak allocated<br>(MiB)" and "yaxis3" in layout
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
    assert "Commits of main's own line, in its history order" in page


def test_memory_sections_come_before_times():
    names = [TIME, RES, MEM, "bench_reversible.ResidualStack.time_step"]
    assert sorted(names, key=H.benchmark_order) == [MEM, RES, TIME, "bench_reversible.ResidualStack.time_step"]


# -- failures, versions, machines (issue 30) -----------------------------------------------------------
def _with_failures(peaks: dict[str, float], failed: set) -> list:
    """:func:`_values` with asv's null (failed) at each ``(technique, chunk)`` of ``failed``."""
    vals = _values(peaks)
    return [None if (t, c) in failed else vals[i] for i, (t, c) in enumerate((t, c) for t in TECHS for c in CHUNKS)]


def _repo(tmp_path: Path, subjects: list[str]) -> tuple[Path, list[str]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    commits = []
    for subject in subjects:
        _git(repo, "commit", "-q", "--allow-empty", "-m", subject)
        commits.append(_git(repo, "rev-parse", "HEAD"))
    return repo, commits


def _loaded(root: Path) -> tuple:
    outcomes = H.load_outcomes(root)
    return H.with_versions(R.load_asv_results(root), outcomes.versions), outcomes.failures


def test_a_failed_commit_is_a_point_on_every_series_and_a_row_of_the_regressions_view(tmp_path):
    """Done when of issue 30, item 1: asv's null for every benchmark at one commit (``import memlab``
    broken: every combination fails) is an x on every series, the lines break there, and the
    regressions view says "failed at X, last good Y"; equal values around it are no step change."""
    repo, commits = _repo(tmp_path, ["suite", "docs only", "break the import", "fix the import"])
    times = [x if x != x else 0.01 for x in _values(BASE)]
    vals = {c: ({MEM: None, RES: None, TIME: None} if i == 2 else {MEM: _values(BASE), RES: _values(BASE), TIME: times})
            for i, c in enumerate(commits)}
    write_tree(repo / "results", commits, vals)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole benchmark's null is asv's format, not a malformed entry
        R.load_asv_results(repo / "results")
    (tmp_path / "data").mkdir()
    build_site(repo / "results", tmp_path / "data", tmp_path / "out")
    page = (tmp_path / "out" / "history.html").read_text()
    figures = [json.loads(htmlmod.unescape(m)) for m in re.findall(r'data-figure="([^"]*)"', page)]
    broken, good = commits[2][:H.SHORT], commits[1][:H.SHORT]
    assert len(figures) == 3
    for fig in figures:
        marks = [t for t in fig["data"] if t["name"] == "failed" and t["x"] != [None]]
        lines = [t for t in fig["data"] if t["x"] != [None] and t["name"] != "failed"]
        assert lines and all(t["y"][t["x"].index(broken)] is None for t in lines)  # every series breaks there
        assert sum(len(t["x"]) for t in marks) == len(TECHS) * len(CHUNKS)  # every combination asv ran
        assert all(x == broken for t in marks for x in t["x"]) and all(t["marker"]["color"] == FAILED_COLOR for t in marks)
        hover = [h for t in marks for h in t["hovertext"]]
        assert all("<b>failed</b>" in h for h in hover) and any(f"last good: <b>{good}</b>" in h for h in hover)
    assert f"<strong>failed at</strong> <code>{broken}</code> break the import" in page
    assert f"last good <code>{good}</code>" in page
    assert "<h3>Memory step changes</h3>" not in page  # equal values around the failure: no step change
    assert not (tmp_path / "out" / "tables" / "history--memory-step-changes.json").exists()
    rows = json.loads((tmp_path / "out" / "tables" / "history--failures.json").read_text())
    measured = [r for r in rows if r["last_good_commit"]]
    assert {r["failed_commit"] for r in rows} == {commits[2]} and len(rows) == 3 * len(TECHS) * len(CHUNKS)
    assert len(measured) == 3 * 5  # unchunked has no second chunk size: never a value before
    assert all(r["last_good_commit"] == commits[1] and r["next_value_commit"] == commits[3]
               and r["measured_commits_failed"] == 1 for r in measured)


def test_failure_onsets_name_the_last_good_and_the_next_value(tmp_path):
    commits = [f"{k:x}" * 40 for k in (10, 11, 12, 13, 14)]
    failed_at = {1, 2, 4}  # slice_loop at 500: ok, failed, failed, ok, failed
    vals = {c: {MEM: _with_failures(BASE, {("slice_loop", 500)} if i in failed_at else set())}
            for i, c in enumerate(commits)}
    root = write_tree(tmp_path, commits, vals)
    frame, failures = _loaded(root)
    assert len(failures) == 3 and set(failures["params_key"]) == {R.canonical_params(
        {"technique": "slice_loop", "chunk_size": 500, "device": "cpu"})}
    order = H.machine_order(frame, failures, "box", [(c, f"s{i}") for i, c in enumerate(commits)])
    onsets = H.failure_onsets(frame, failures, order)
    got = [(o["failed_at"].hash, o["last_good"].hash, o["failed_commits"], o["fixed_at"] and o["fixed_at"].hash)
           for o in onsets]
    assert got == [(commits[1], commits[0], 2, commits[3]), (commits[4], commits[3], 1, None)]
    assert onsets[0]["last_good_value"] == BASE["slice_loop"] + 500 and onsets[0]["technique"] == "slice_loop"
    (g1, g2) = H.failures_by_commit(onsets)
    assert g1["count"] == 1 and g1["last_good"].hash == commits[0] and g1["benchmarks"] == ["ChainedMatmul.track_peak_allocated"]
    assert H.step_changes(frame, order) == []  # the value around the failures never changed


def test_a_version_bump_starts_a_new_series_not_a_step(tmp_path):
    """The benchmark's version 2 from the third commit doubles slice_loop: a new series (a dashed mark,
    no line across), not a change in the regressions view; without versions it would have been one."""
    commits = [f"{k:x}" * 40 for k in (10, 11, 12, 13)]
    doubled = {**BASE, "slice_loop": 2 * BASE["slice_loop"]}
    vals = {c: {MEM: _values(doubled if i >= 2 else BASE)} for i, c in enumerate(commits)}
    root = write_tree(tmp_path, commits, vals, versions={commits[2]: "2", commits[3]: "2"})
    frame, failures = _loaded(root)
    order = H.machine_order(frame, failures, "box", [(c, f"s{i}") for i, c in enumerate(commits)])
    assert H.step_changes(frame, order) == []
    assert len(H.step_changes(frame.drop(columns="version"), order)) == 2  # what a versionless view would list
    starts = H.version_starts([frame, failures], order)
    assert [(c.hash, v) for c, v in starts] == [(commits[2], "2")]
    (slice_loop,) = [h for h in H.technique_histories(frame, order) if h.technique == "slice_loop"]
    assert sorted((ln.label, ln.version, len(ln.points)) for ln in slice_loop.lines) == [
        ("chunk_size=2000", "1", 2), ("chunk_size=2000", "2", 2), ("chunk_size=500", "1", 2), ("chunk_size=500", "2", 2)]
    fig = history_figure(frame, order, {"slice_loop": "#d62728"}, failures=failures, versions=starts)
    dashed = [s for s in fig["layout"]["shapes"] if s["line"]["dash"] == "dash"]
    assert [s["x0"] for s in dashed] == [1.5]
    assert any(a["text"] == "version 2" for a in fig["layout"]["annotations"])
    shorts = [c[:H.SHORT] for c in commits]
    red = [t for t in fig["data"] if t.get("meta", {}).get("technique") == "slice_loop"]
    assert sorted(t["x"] for t in red) == [shorts[:2], shorts[:2], shorts[2:], shorts[2:]]  # never across versions


def test_each_machine_has_its_own_axis_with_its_gaps_and_a_range_slider_when_long(tmp_path):
    """Issue 30, item 5: a machine with 4 commits spread over 50 is not squeezed into another's axis;
    the 9 and 37 commits it left out are marked; the 50-commit machine gets the range slider."""
    known = [(f"{k:08x}" * 5, f"subject {k}") for k in range(1, 51)]
    every = [h for h, _ in known]
    spread = [every[i] for i in (0, 10, 11, 49)]
    write_tree(tmp_path, every, {c: {MEM: _values(BASE)} for c in every}, machine="big")
    write_tree(tmp_path, spread, {c: {MEM: _values(BASE)} for c in spread}, machine="small")
    frame, failures = _loaded(tmp_path)
    orders = {m: H.machine_order(frame, failures, m, known) for m in ("big", "small")}
    assert [c.hash for c in orders["small"]] == spread and len(orders["big"]) == 50 > RANGE_SLIDER_FROM
    assert H.history_gaps(orders["small"]) == [(1, 9), (3, 37)] and H.history_gaps(orders["big"]) == []
    figs = {m: history_figure(frame[frame["machine"] == m], orders[m], {}, gaps=H.history_gaps(orders[m]))
            for m in orders}
    small, big = figs["small"]["layout"], figs["big"]["layout"]
    assert small["xaxis"]["categoryarray"] == [c[:H.SHORT] for c in spread] and "rangeslider" not in small["xaxis"]
    assert [(s["x0"], s["line"]["dash"]) for s in small["shapes"]] == [(0.5, "dot"), (2.5, "dot")]
    gap_labels = [a for a in small["annotations"] if a["text"].startswith("+")]
    assert [a["text"] for a in gap_labels] == ["+9", "+37"] and "not measured on this machine" in gap_labels[1]["hovertext"]
    assert big["xaxis"]["rangeslider"] == {"visible": True, "thickness": 0.06, "range": [-0.5, 49.5]}
    assert len(big["xaxis"]["categoryarray"]) == 50 and big["shapes"] == []
    # one x-axis per chart, anchored under the bottom panel; every panel's traces on it
    assert all(t["xaxis"] == "x" for t in figs["big"]["data"]) and "xaxis2" not in big
    assert big["xaxis"]["anchor"] == f"y{len(TECHS)}"


def test_a_chart_first_shows_the_commits_that_hold_its_benchmark(tmp_path):
    """Issue 30, items 4-5: the time history covers the last 10 of 50 commits the memory history
    covers; its chart opens on those 10 (the slider still spans all 50), the memory chart on all 50."""
    known = [(f"{k:08x}" * 5, f"subject {k}") for k in range(1, 51)]
    every = [h for h, _ in known]
    timed = [x if x != x else 0.01 for x in _values(BASE)]
    write_tree(tmp_path, every, {c: {MEM: _values(BASE), **({TIME: timed} if i >= 40 else {})}
                                 for i, c in enumerate(every)})
    frame, failures = _loaded(tmp_path)
    order = H.machine_order(frame, failures, "box", known)
    figs = {b: history_figure(frame[frame["benchmark"] == b], order, {}) for b in (MEM, TIME)}
    mem, time_ = figs[MEM]["layout"]["xaxis"], figs[TIME]["layout"]["xaxis"]
    assert mem["range"] == [-0.5, 49.5] and time_["range"] == [39.5, 49.5]
    assert mem["rangeslider"]["range"] == time_["rangeslider"]["range"] == [-0.5, 49.5]
    assert len(time_["categoryarray"]) == 50


# -- issue 41: the line is main's ---------------------------------------------------------------------
def test_the_line_is_mains_first_parent_history_and_other_commits_are_listed_apart(tmp_path):
    """NOTE [ the main line ]: a WIP commit made on a branch and merged, a commit of a branch never
    merged and a commit git does not know are measured too; the charts' x-axis is main's own line
    (first parent), no step change is computed through the WIP commit (which doubled slice_loop),
    and the three are listed apart with where each is."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "suite")
    _git(repo, "checkout", "-q", "-b", "wip")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "WIP issue 32 (not on main)")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "wip", "-m", "merge the work")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "site")
    _git(repo, "checkout", "-q", "-b", "other")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "an experiment")
    _git(repo, "checkout", "-q", "main")
    log = _git(repo, "log", "--all", "--format=%H %s").splitlines()
    sha = {s: h for h, s in (line.split(" ", 1) for line in log)}
    main = [sha["suite"], sha["merge the work"], sha["site"]]
    wip, other, unknown = sha["WIP issue 32 (not on main)"], sha["an experiment"], "e" * 40
    line = H.main_line(repo)
    assert [c for c, _ in line.line] == main
    assert set(line.merged) == {wip} and set(line.elsewhere) == {other}
    doubled = {**BASE, "slice_loop": 2 * BASE["slice_loop"]}
    commits = [main[0], wip, main[1], other, main[2], unknown]
    values = {c: {MEM: _values(doubled if c == wip else BASE)} for c in commits}
    write_tree(repo / "results", commits, values)
    (tmp_path / "data").mkdir()
    build_site(repo / "results", tmp_path / "data", tmp_path / "out")
    page = (tmp_path / "out" / "history.html").read_text()
    figures = [json.loads(htmlmod.unescape(m)) for m in re.findall(r'data-figure="([^"]*)"', page)]
    assert figures and all(f["layout"]["xaxis"]["categoryarray"] == [c[:H.SHORT] for c in main] for f in figures)
    assert "No exact memory value changed between consecutive measured commits" in page  # WIP's doubling: not a step
    apart = page[page.index('<ul class="commits-apart">'):]
    apart = apart[:apart.index("</ul>")]
    assert [m for m in re.findall(r"<code>([0-9a-f]+)</code>", apart)] == [c[:H.SHORT] for c in (wip, other, unknown)]
    assert "WIP issue 32 (not on main)" in apart and "merged into main" in apart
    assert "an experiment" in apart and "on a branch not merged into main" in apart
    assert "(subject unknown) <small>(not in this repository" in apart
    assert "3 commit(s) on main, 3 apart" in page


def test_the_main_branch_is_the_one_asv_measures(tmp_path):
    (tmp_path / "results").mkdir()
    assert H.main_branch(tmp_path / "results") == "main"  # no asv.conf.json
    (tmp_path / "asv.conf.json").write_text('{\n    // asv\n    "version": 1,\n    "branches": ["trunk"]\n}\n')
    assert H.main_branch(tmp_path / "results") == "trunk"
    assert H.main_line(tmp_path) == H.MainLine()  # not a git repository: no line, every commit drawn by date
    assert H.off_line([], H.MainLine()) == []
