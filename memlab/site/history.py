"""The history page's logic: asv results in commit order, grouped per machine and technique, the
failures asv recorded, and the step changes of the exact memory metrics (the regressions view).

Torch-free.  :func:`load_outcomes` and :func:`git_commits` read files; everything else is a pure
function over the DataFrame that :func:`memlab.results.load_asv_results` returns (one row per
benchmark, parameter combination, machine and commit; skipped and failed values are not in it),
the failures and versions :func:`load_outcomes` adds, and the repository's commit list.

NOTE [ commit order ]
asv's results files carry a commit hash and the commit's date, not its place in the history nor its
subject.  The order is the repository's (``git log --reverse``, :func:`git_commits`); a measured
commit that git does not know (another clone's branch, a test tree) is placed by its date between
the known ones (:func:`commit_order`), and its subject is shown as unknown.  The x-axis of a
machine's history charts is the commits *that machine* measured, in this order, one category per
commit, not clock time: a day of commits made minutes apart stays readable, a machine with 9
commits is not squeezed into a corner of another's 200, and where the machine skipped commits of the
history the gap is marked with the number of commits left out (:func:`history_gaps`).

NOTE [ the main line ]
The history's line is main's: the first-parent history of the branch asv measures (``branches`` in
asv.conf.json, :func:`main_branch`), the commits made on main and the merges into it.  A commit
measured elsewhere (a work-in-progress branch, a side branch's commits that a merge brought into
main's history, a commit of another clone) is no point of a chart and no step of the regressions
view: a change "between" it and a main commit would compare two lines of work.  It is listed apart,
per machine, with where it is (:func:`off_line`).  Without git every commit is drawn, by date.
Evidence: docs/evidence/code-notes-site.md, "the main line".

NOTE [ failed, skipped, version ]
asv writes null for a combination that *failed* (NOTE [ skipped or failed ] in benchmarks/common.py)
and NaN for one that was *skipped* (it does not exist in that version).  A failure is a result: the
chart marks it on its series (the line breaks there) and the regressions view lists where a series
started failing and its last good commit (:func:`failure_onsets`).  asv 0.6 keeps no error text in
its results files (``Results.save``: "stderr and errcode are not saved to files"), so a failure
reads "failed" and the page says how to see the traceback (``asv run -e``).  A skip is no result
and draws nothing.  Each results file also records every benchmark's ``version`` (its ``version``
attribute, else a hash of its code): a version bump starts a new series, never a step in the old
one (:func:`technique_histories` splits lines by version, :func:`step_changes` compares within one).

NOTE [ which metrics are exact ]
``track_peak_allocated`` (and any ``track_`` benchmark in bytes) is the exact peak of live tensor
bytes of one step on CPU: a different value between two commits is a change of the code measured,
never noise, so the regressions view lists *every* step change, with its factor.  Not exact, and
not listed: CPU resident bytes (``track_peak_reserved`` with ``device='cpu'``, in the files written
before the suite dropped it; it moved up to 2x between code-identical commits), and times
(``time_step``): on the shared 2-core machine they move with its load, and asv's own statistics
(``asv compare``: Mann-Whitney over the samples plus its 10% factor) are the test for them.
``make asv-compare`` and ``make asv-continuous`` apply the same rule to asv's own comparisons
(NOTE [ exact figures ] in benchmarks/asv_host.py).
"""
from __future__ import annotations

import ast
import itertools
import json
import math
import os
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from .. import results as R

__all__ = ["Commit", "Line", "TechniqueHistory", "Outcomes", "FAILURE_COLUMNS", "git_commits", "commit_order",
           "main_branch", "MainLine", "main_line", "off_line",
           "split_benchmark", "is_exact_memory", "load_outcomes", "with_versions", "machine_order", "history_gaps",
           "version_starts", "technique_histories", "line_labels", "benchmark_order", "step_changes",
           "changes_by_commit", "failure_onsets", "failures_by_commit", "SHORT"]

#: characters of a short hash: asv's (its results file names and ``asv compare`` use 8)
SHORT = 8
#: columns of :attr:`Outcomes.failures`: one row per combination asv recorded as failed (null)
FAILURE_COLUMNS = ("machine", "commit", "date_ms", "benchmark", "version", "params", "params_key", "error")


@dataclass(frozen=True)
class Commit:
    """A measured commit: ``position`` in the history (0 = oldest measured), ``subject`` ("" when
    git does not know it), ``index`` its place in the repository's history (None when unknown)."""

    hash: str
    subject: str
    position: int
    index: int | None = None
    date_ms: float | None = None

    @property
    def short(self) -> str:
        return self.hash[:SHORT]

    @property
    def label(self) -> str:
        """``short subject`` (the subject cut at 100 characters), or the short hash alone."""
        subject = self.subject if len(self.subject) <= 100 else self.subject[:99] + "…"
        return f"{self.short} {subject}" if subject else self.short


@dataclass(frozen=True)
class Line:
    """One parameter combination of one technique at one benchmark ``version``: ``points`` are
    ``(commit, value)`` in order, ``failed`` the ``(commit, error)`` where asv recorded a failure
    (``error`` "" when it kept no text)."""

    label: str
    params: dict
    points: tuple
    version: str = ""
    failed: tuple = ()


@dataclass(frozen=True)
class TechniqueHistory:
    """The lines of one technique (``technique`` is "" for a benchmark without that parameter)."""

    technique: str
    lines: tuple


@dataclass(frozen=True)
class Outcomes:
    """What :func:`memlab.results.load_asv_results` leaves out: ``failures`` (:data:`FAILURE_COLUMNS`)
    and ``versions``, ``{(machine, commit, benchmark): version}`` of every benchmark entry."""

    failures: pd.DataFrame
    versions: dict = field(default_factory=dict)


# -- reading what the loader leaves out --------------------------------------------------------------
def _objects(paths: Iterable[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """:func:`memlab.results.load_json_objects`, silent: the loader already warned about each file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", R.ResultsWarning)
        return R.load_json_objects(paths)


def _param_names(root: Path) -> dict[str, list[str]]:
    path = root / "benchmarks.json"
    objs = _objects([path]) if os.path.lexists(path) else []
    names = {}
    for name, meta in (objs[0][1].items() if objs else ()):
        p = meta.get("param_names") if isinstance(meta, dict) else None
        if isinstance(p, list) and all(isinstance(n, str) for n in p):
            names[name] = p
    return names


def _machine_folders(root: Path) -> list[Path]:
    out = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    for p in entries:
        try:
            if p.is_dir():
                out.append(p)
        except OSError:
            continue
    return out


def _literal(text: Any) -> Any:
    """asv stores parameter values as their repr (``"'cpu'"``); parsed as the loader parses them."""
    if not isinstance(text, str) or len(text) > 1000:
        return text if isinstance(text, str) else str(text)
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


def _entry_failures(row: list, columns: list, names: list[str] | None) -> Iterable[dict[str, Any]]:
    """The failed (null) combinations of one benchmark entry of a results file, as ``params``."""
    lists = row[columns.index("params")] if "params" in columns and len(row) > columns.index("params") else []
    if not isinstance(lists, list) or not all(isinstance(p, list) for p in lists):
        return
    result = row[columns.index("result")]
    combos = list(itertools.product(*lists))
    values = [None] * len(combos) if result is None else result if isinstance(result, list) else [result]
    if len(values) != len(combos):
        return
    names = names if names and len(names) == len(lists) else [f"param{i}" for i in range(len(lists))]
    for combo, value in zip(combos, values):
        if value is None:
            yield {n: _literal(v) for n, v in zip(names, combo)}


def _file_outcomes(folder: Path, data: dict, names: Mapping[str, list[str]]) -> tuple[dict, list[dict]]:
    """``(versions, failure rows)`` of one asv 0.6 results file (files the loader skips are skipped)."""
    columns, results = data.get("result_columns"), data.get("results")
    commit = data.get("commit_hash")
    if not (isinstance(columns, list) and "result" in columns and isinstance(results, dict)
            and isinstance(commit, str) and commit and data.get("version") in (None, 2)):
        return {}, []
    params = data.get("params")
    machine = params.get("machine") if isinstance(params, dict) else None
    machine = machine if isinstance(machine, str) and machine else folder.name
    date = data.get("date") if isinstance(data.get("date"), (int, float)) else None
    i_ver = columns.index("version") if "version" in columns else None
    versions, rows = {}, []
    for bench, row in results.items():
        if not isinstance(row, list) or len(row) <= columns.index("result"):
            continue
        version = row[i_ver] if i_ver is not None and len(row) > i_ver and isinstance(row[i_ver], str) else ""
        versions[(machine, commit, bench)] = version
        for p in _entry_failures(row, columns, names.get(bench)):
            rows.append({"machine": machine, "commit": commit, "date_ms": date, "benchmark": bench,
                         "version": version, "params": p, "params_key": R.canonical_params(p), "error": ""})
    return versions, rows


def load_outcomes(results_dir: Path | str) -> Outcomes:
    """The failures and benchmark versions of an asv results tree (NOTE [ failed, skipped, version ]).

    Reads the files :func:`memlab.results.load_asv_results` reads, as defensively and without
    warning again; a file or entry the loader skips is skipped here.
    """
    root, versions, rows = Path(results_dir), {}, []
    names = _param_names(root) if os.path.isdir(root) else {}
    for folder in _machine_folders(root) if os.path.isdir(root) else []:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", R.ResultsWarning)
            paths = [p for p in R.list_input_files(folder, ".json") if p.name != "machine.json"]
        for _, data in _objects(paths):
            v, r = _file_outcomes(folder, data, names)
            versions.update(v)
            rows += r
    return Outcomes(pd.DataFrame(rows, columns=list(FAILURE_COLUMNS)), versions)


def with_versions(frame: pd.DataFrame, versions: Mapping[tuple[str, str, str], str]) -> pd.DataFrame:
    """``frame`` (:func:`memlab.results.load_asv_results` rows) with a ``version`` column ("" unknown)."""
    out = frame.copy()
    out["version"] = [versions.get((m, c, b), "") for m, c, b in
                      zip(frame["machine"], frame["commit"], frame["benchmark"])] if len(frame) else []
    return out


# -- order -----------------------------------------------------------------------------------------
def git_commits(repo: Path | str, rev: str = "HEAD", timeout: float = 30.0,
                first_parent: bool = False) -> list[tuple[str, str]]:
    """``[(hash, subject), ...]`` of ``rev``'s history, oldest first (``first_parent``: its first-parent
    line only, the commits made on that branch and the merges into it); ``[]`` when ``repo`` is not in
    a git repository, ``rev`` is unknown or git is missing (the history is then ordered by commit
    date).  Local only."""
    line = ["--first-parent"] if first_parent else []
    try:
        out = subprocess.run(["git", "-C", str(repo), "log", "--reverse", *line, "--format=%H%x1f%s", rev, "--"],
                             capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    commits = []
    for line in out.stdout.decode("utf-8", "replace").splitlines():
        sha, _, subject = line.partition("\x1f")
        if len(sha) == 40:
            commits.append((sha, subject.strip()))
    return commits


def main_branch(results_dir: Path | str) -> str:
    """The branch asv measures: the first of ``branches`` in the ``asv.conf.json`` beside the results
    folder (asv's JSON with ``//`` comment lines), else ``"main"``."""
    try:
        text = (Path(results_dir).resolve().parent / "asv.conf.json").read_text(encoding="utf-8")
        branches = json.loads("\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("//")))["branches"]
    except (OSError, ValueError, KeyError, TypeError):
        return "main"
    return branches[0] if isinstance(branches, list) and branches and isinstance(branches[0], str) else "main"


@dataclass(frozen=True)
class MainLine:
    """What git says of the measured commits (NOTE [ the main line ]): ``line``, the main branch's
    first-parent history ``[(hash, subject)]`` oldest first (the history page's x-axis); ``merged``,
    the other commits of main's history (made on a branch, then merged) and ``elsewhere``, commits
    of other branches, each ``{hash: subject}``.  All empty without git."""

    line: tuple = ()
    merged: dict = field(default_factory=dict)
    elsewhere: dict = field(default_factory=dict)

    def where(self, commit: str) -> str:
        """Why a commit is not on the line, in words."""
        if commit in self.merged:
            return "made on a branch, then merged into main (not on main's own line)"
        if commit in self.elsewhere:
            return "on a branch not merged into main"
        return "not in this repository"

    def subject(self, commit: str) -> str:
        """The subject git knows for a commit off the line ("" when it does not know it)."""
        return self.merged.get(commit) or self.elsewhere.get(commit) or ""


def main_line(repo: Path | str, branch: str = "main") -> MainLine:
    """:class:`MainLine` of ``repo``: ``branch``'s first-parent history (``HEAD``'s when there is no
    such branch), the rest of its history, and every other branch's commits."""
    line = git_commits(repo, branch, first_parent=True)
    rev = branch if line else "HEAD"
    line = line or git_commits(repo, rev, first_parent=True)
    if not line:
        return MainLine()
    on = {sha for sha, _ in line}
    merged = {sha: s for sha, s in git_commits(repo, rev) if sha not in on}
    elsewhere = {sha: s for sha, s in git_commits(repo, "--all") if sha not in on and sha not in merged}
    return MainLine(tuple(line), merged, elsewhere)


def off_line(frames: Sequence[pd.DataFrame], main: MainLine) -> list[dict[str, Any]]:
    """The measured commits of ``frames`` (one machine's values and failures) that are not on the main
    line, oldest first (by date, then hash): ``hash``, ``short``, ``subject`` (cut at 100 characters),
    ``where`` (why not on the line) and ``benchmarks`` (how many it holds).  ``[]`` when git gave no line (then every
    commit is drawn, ordered by date)."""
    if not main.line:
        return []
    on = {sha for sha, _ in main.line}
    seen: dict[str, dict[str, Any]] = {}
    for f in frames:
        if f is None or not len(f):
            continue
        for c, d, b in zip(f["commit"], f["date_ms"], f["benchmark"]):
            if c not in on:
                e = seen.setdefault(c, {"date": _date(d), "benchmarks": set()})
                e["date"] = min(e["date"], _date(d))
                e["benchmarks"].add(b)
    cut = {c: (s if len(s) <= 100 else s[:99] + "…") for c in seen for s in [main.subject(c)]}
    return [{"hash": c, "short": c[:SHORT], "subject": cut[c], "where": main.where(c),
             "benchmarks": len(e["benchmarks"])} for c, e in sorted(seen.items(), key=lambda kv: (kv[1]["date"], kv[0]))]


def _date(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.inf
    return f if math.isfinite(f) else math.inf


def commit_order(frame: pd.DataFrame, known: Sequence[tuple[str, str]] = ()) -> list[Commit]:
    """The commits of ``frame`` in history order (NOTE [ commit order ]).

    Args:
        frame: rows with ``commit`` and ``date_ms`` (ms since the epoch), e.g.
            :func:`memlab.results.load_asv_results`.
        known: the repository's ``(hash, subject)`` list, oldest first (:func:`git_commits`).

    Returns:
        one :class:`Commit` per distinct commit of ``frame``: those in ``known`` in its order, the
        others merged in by date (ties by hash).
    """
    if frame is None or not len(frame):
        return []
    index = {sha: (i, subject) for i, (sha, subject) in enumerate(known)}
    dates = {c: _date(d) for c, d in frame.groupby("commit", sort=True)["date_ms"].min().items()}
    inside = sorted((c for c in dates if c in index), key=lambda c: index[c][0])
    outside = sorted((c for c in dates if c not in index), key=lambda c: (dates[c], c))
    merged, i, j = [], 0, 0
    while i < len(inside) or j < len(outside):
        if j < len(outside) and (i == len(inside) or dates[outside[j]] < dates[inside[i]]):
            merged.append(outside[j])
            j += 1
        else:
            merged.append(inside[i])
            i += 1
    return [Commit(c, index.get(c, (None, ""))[1], k, index.get(c, (None, ""))[0],
                   None if math.isinf(dates[c]) else dates[c]) for k, c in enumerate(merged)]


def machine_order(frame: pd.DataFrame, failures: pd.DataFrame | None, machine: str,
                  known: Sequence[tuple[str, str]] = ()) -> list[Commit]:
    """The commits ``machine`` measured (a value or a failure), in history order: its charts' x-axis."""
    parts = [f.loc[f["machine"] == machine, ["commit", "date_ms"]] for f in (frame, failures)
             if f is not None and len(f)]
    return commit_order(pd.concat(parts, ignore_index=True) if parts else None, known)


def history_gaps(order: Sequence[Commit]) -> list[tuple[int, int]]:
    """``(k, n)`` for each measured commit ``order[k]`` whose predecessor in ``order`` is ``n >= 1``
    commits earlier than the one right before it in the repository's history: ``n`` commits were not
    measured between them.  Commits git does not know give no gap."""
    out = []
    for k in range(1, len(order)):
        a, b = order[k - 1].index, order[k].index
        if a is not None and b is not None and b - a > 1:
            out.append((k, b - a - 1))
    return out


def _versions_along(frame: pd.DataFrame, order: Sequence[Commit]) -> list[tuple[Commit, str]]:
    pos = {c.hash: c for c in order}
    seen = {}
    for c, v in zip(frame["commit"], frame["version"]) if "version" in frame else ():
        if c in pos:
            seen.setdefault(c, str(v))
    return sorted(((pos[c], v) for c, v in seen.items()), key=lambda p: p[0].position)


def version_starts(frames: Sequence[pd.DataFrame], order: Sequence[Commit]) -> list[tuple[Commit, str]]:
    """Where one benchmark's version changes along ``order``: ``(first commit of the version, version)``,
    the first version left out.  ``frames``: its values and failures on one machine, with ``version``."""
    parts = [f[["commit", "version"]] for f in frames if f is not None and len(f) and "version" in f]
    points = _versions_along(pd.concat(parts, ignore_index=True), order) if parts else []
    return [(c, v) for (_, u), (c, v) in zip(points, points[1:]) if v != u]


# -- lines -----------------------------------------------------------------------------------------
def split_benchmark(name: str) -> tuple[str, str]:
    """``"bench_chunking.ChainedMatmul.track_peak_allocated"`` -> ``("bench_chunking.ChainedMatmul",
    "track_peak_allocated")``; a name without a dot is its own metric."""
    head, _, metric = str(name).rpartition(".")
    return head, metric


def is_exact_memory(benchmark: str, unit: Any, params: dict) -> bool:
    """Whether a value is an exact memory figure (NOTE [ which metrics are exact ]): a ``track_``
    benchmark in bytes, except CPU resident (``track_peak_reserved`` on ``device='cpu'``)."""
    metric = split_benchmark(benchmark)[1]
    if unit != "bytes" or not metric.startswith("track_"):
        return False
    return not (metric == "track_peak_reserved" and params.get("device") == "cpu")


def _param_text(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "(no parameters)"


def _sort_key(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


def _rest(params: dict) -> dict:
    return {k: v for k, v in params.items() if k != "technique"}


def _technique(params: dict) -> str:
    tech = params.get("technique")
    return tech if isinstance(tech, str) else ("" if tech is None else str(tech))


def _rows(frame: pd.DataFrame | None, pos: Mapping[str, Commit]) -> list:
    if frame is None or not len(frame):
        return []
    return [r for r in frame.itertuples(index=False) if r.commit in pos]


def _shown_params(rows: Iterable) -> set[str]:
    """The parameters (besides ``technique``) that take more than one value over ``rows``."""
    varying: dict[str, set] = {}
    for r in rows:
        for k, v in _rest(r.params).items():
            varying.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    return {k for k, vals in varying.items() if len(vals) > 1}


def _line(group: dict, shown: set[str]) -> Line:
    params = _rest(group["params"])
    label = _param_text({k: v for k, v in params.items() if k in shown}) if shown else "all"
    points = tuple(sorted(group["points"], key=lambda p: p[0].position))
    failed = tuple(sorted(group["failed"], key=lambda p: p[0].position))
    return Line(label, params, points, group["version"], failed)


def technique_histories(frame: pd.DataFrame, order: Sequence[Commit],
                        failures: pd.DataFrame | None = None) -> list[TechniqueHistory]:
    """One benchmark on one machine as lines per technique (in the order the techniques first appear),
    each line one combination of the other parameters at one benchmark version (sorted by their
    values, then by where the version starts), its points and failures in commit order.  Parameters
    whose value is the same on every line (``device='cpu'`` on a CPU host) are left out of the labels.

    Args:
        frame: the benchmark's values on one machine (optionally with ``version``).
        order: the commits to draw (:func:`machine_order`); other commits are left out.
        failures: the benchmark's :attr:`Outcomes.failures` rows on that machine.
    """
    pos = {c.hash: c for c in order}
    ok, bad = _rows(frame, pos), _rows(failures, pos)
    shown = _shown_params(ok + bad)
    by_tech: dict[str, dict[tuple, dict]] = {}
    for r, failed in [(r, False) for r in ok] + [(r, True) for r in bad]:
        version = str(getattr(r, "version", "") or "")
        group = by_tech.setdefault(_technique(r.params), {}).setdefault(
            (r.params_key, version), {"params": r.params, "version": version, "points": [], "failed": []})
        if failed:
            group["failed"].append((pos[r.commit], str(r.error or "")))
        else:
            group["points"].append((pos[r.commit], float(r.value)))
    out = []
    for tech, groups in by_tech.items():
        lines = [_line(g, shown) for g in groups.values()]
        lines.sort(key=lambda ln: ([_sort_key(ln.params[k]) for k in sorted(ln.params)],
                                   min(c.position for c, _ in ln.points + ln.failed)))
        out.append(TechniqueHistory(tech, tuple(lines)))
    return out


def line_labels(histories: Sequence[TechniqueHistory]) -> list[str]:
    """Every line label of ``histories`` once, ordered by its parameters' values (numbers as numbers:
    ``chunk_size=200`` before ``chunk_size=2000``): the legend's order, one entry per combination."""
    params = {}
    for h in histories:
        for ln in h.lines:
            params.setdefault(ln.label, ln.params)
    return sorted(params, key=lambda lab: ([_sort_key(params[lab][k]) for k in sorted(params[lab])], lab))


def benchmark_order(name: str) -> tuple:
    """Sort key of a benchmark on the history page: per class, the exact memory metric first, then
    other memory metrics, then times (``bench_x.Cls.track_peak_allocated`` < ``...time_step``)."""
    head, metric = split_benchmark(name)
    return (head, metric != "track_peak_allocated", not metric.startswith("track_"), metric)


# -- the regressions view --------------------------------------------------------------------------
def _series_keys(frame: pd.DataFrame) -> list[str]:
    return ["machine", "benchmark", "params_key"] + (["version"] if "version" in frame else [])


def step_changes(frame: pd.DataFrame, order: Sequence[Commit]) -> list[dict[str, Any]]:
    """Every change of an exact memory value between consecutive measured commits (the regressions view).

    For each machine, benchmark, parameter combination and benchmark version (when ``frame`` has a
    ``version`` column: a version bump starts a new series, NOTE [ failed, skipped, version ]) with
    exact values (:func:`is_exact_memory`), its values in commit order; each value that differs from
    the previous one gives a record: ``machine``, ``benchmark``, ``technique``, ``params`` (the
    others), ``before``/``after`` (:class:`Commit`), ``before_value``/``after_value`` (bytes),
    ``factor`` (after / before, None from 0), ``between`` (the commits after ``before`` up to
    ``after`` in the repository's history, None when git does not know both) and ``unmeasured``
    (commits of ``order`` in between where this combination has no value: skipped or failed there).
    Only commits in ``order`` count (give one machine's :func:`machine_order` with its rows).
    Sorted by commit, then benchmark and parameters.
    """
    if frame is None or not len(frame):
        return []
    pos = {c.hash: c for c in order}
    out = []
    for _, group in frame.groupby(_series_keys(frame), sort=True):
        first = group.iloc[0]
        bench, machine, params = first["benchmark"], first["machine"], first["params"]
        if not is_exact_memory(bench, first["unit"], params):
            continue
        points = sorted(((pos[c], float(v)) for c, v in zip(group["commit"], group["value"]) if c in pos),
                        key=lambda p: p[0].position)
        for (a, va), (b, vb) in zip(points, points[1:]):
            if va == vb:
                continue
            between = b.index - a.index if a.index is not None and b.index is not None else None
            out.append({"machine": machine, "benchmark": bench, "technique": _technique(params),
                        "params": _rest(params), "before": a, "after": b, "before_value": va, "after_value": vb,
                        "factor": vb / va if va else None, "between": between,
                        "unmeasured": b.position - a.position - 1})
    out.sort(key=lambda r: (r["after"].position, r["machine"], r["benchmark"], r["technique"],
                            [_sort_key(v) for _, v in sorted(r["params"].items())]))
    return out


def changes_by_commit(changes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step changes summed up per machine and commit range: ``before``, ``after``, ``machine``,
    ``count``, ``techniques`` (sorted), ``factors`` (min, max; None from 0).  In commit order."""
    groups: dict[tuple, dict[str, Any]] = {}
    for r in changes:
        key = (r["after"].position, r["before"].position, r["machine"])
        g = groups.setdefault(key, {"before": r["before"], "after": r["after"], "machine": r["machine"], "count": 0,
                                    "techniques": set(), "factor_list": []})
        g["count"] += 1
        g["techniques"].add(r["technique"] or "(none)")
        if r["factor"] is not None:
            g["factor_list"].append(r["factor"])
    out = []
    for key in sorted(groups):
        g = groups[key]
        f = g.pop("factor_list")
        out.append({**g, "techniques": sorted(g["techniques"]), "factors": (min(f), max(f)) if f else None})
    return out


def _combination_series(frame: pd.DataFrame | None, failures: pd.DataFrame, pos: Mapping[str, Commit]) -> dict:
    """``{(machine, benchmark, params_key): [(commit, value or None, error), ...]}`` in commit order,
    for the combinations that failed somewhere (any benchmark version)."""
    series: dict[tuple, list] = {}
    for r in _rows(failures, pos):
        series.setdefault((r.machine, r.benchmark, r.params_key), []).append((pos[r.commit], None, str(r.error or "")))
    for r in _rows(frame, pos):
        key = (r.machine, r.benchmark, r.params_key)
        if key in series:
            series[key].append((pos[r.commit], float(r.value), ""))
    return {k: sorted(v, key=lambda p: p[0].position) for k, v in series.items()}


def _onsets(points: list) -> Iterable[tuple[int, int, int | None]]:
    """``(start, end, last_good)`` indices of each run of failures in ``points`` (end exclusive)."""
    k = 0
    while k < len(points):
        if points[k][1] is not None:
            k += 1
            continue
        end = k
        while end < len(points) and points[end][1] is None:
            end += 1
        yield k, end, k - 1 if k else None
        k = end


def failure_onsets(frame: pd.DataFrame | None, failures: pd.DataFrame | None,
                   order: Sequence[Commit]) -> list[dict[str, Any]]:
    """Where each combination started failing (NOTE [ failed, skipped, version ]): one record per run
    of consecutive measured commits at which asv recorded it as failed: ``machine``, ``benchmark``,
    ``technique``, ``params`` (the others), ``failed_at`` and ``last_good`` (:class:`Commit`; None when
    it never had a value before), ``last_good_value``, ``failed_commits`` (measured commits in the run),
    ``fixed_at`` (the next commit with a value, or None) and ``error`` ("" when asv kept none).
    Only commits of ``order`` count (one machine's :func:`machine_order`).  Sorted by commit."""
    if failures is None or not len(failures):
        return []
    pos = {c.hash: c for c in order}
    params = {(r.machine, r.benchmark, r.params_key): r.params for r in _rows(failures, pos)}
    out = []
    for key, points in _combination_series(frame, failures, pos).items():
        for start, end, good in _onsets(points):
            p = params[key]
            out.append({"machine": key[0], "benchmark": key[1], "technique": _technique(p), "params": _rest(p),
                        "failed_at": points[start][0], "last_good": None if good is None else points[good][0],
                        "last_good_value": None if good is None else points[good][1], "failed_commits": end - start,
                        "fixed_at": points[end][0] if end < len(points) else None, "error": points[start][2]})
    out.sort(key=lambda r: (r["failed_at"].position, r["machine"], r["benchmark"], r["technique"],
                            [_sort_key(v) for _, v in sorted(r["params"].items())]))
    return out


def failures_by_commit(onsets: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failure onsets summed up per machine and commit: ``failed_at``, ``machine``, ``count``,
    ``benchmarks`` (``Class.metric``) and ``techniques`` (sorted), ``last_good`` (the latest last good commit of the
    group, None when none had a value before).  In commit order."""
    groups: dict[tuple, dict[str, Any]] = {}
    for r in onsets:
        g = groups.setdefault((r["failed_at"].position, r["machine"]), {
            "failed_at": r["failed_at"], "machine": r["machine"], "count": 0, "benchmarks": set(),
            "techniques": set(), "last_good": None})
        g["count"] += 1
        g["benchmarks"].add(str(r["benchmark"]).split(".", 1)[-1])
        g["techniques"].add(r["technique"] or "(none)")
        good = r["last_good"]
        if good is not None and (g["last_good"] is None or good.position > g["last_good"].position):
            g["last_good"] = good
    return [{**g, "benchmarks": sorted(g["benchmarks"]), "techniques": sorted(g["techniques"])}
            for _, g in sorted(groups.items(), key=lambda kv: kv[0])]
