"""The history page's logic: asv results in commit order, grouped per technique, and the step
changes of the exact memory metrics (the regressions view).

Torch-free.  Everything but :func:`git_commits` is a pure function over the DataFrame that
:func:`memlab.results.load_asv_results` returns (one row per benchmark, parameter combination,
machine and commit; skipped and failed values are not in it) and the repository's commit list.

NOTE [ commit order ]
asv's results files carry a commit hash and the commit's date, not its place in the history nor its
subject.  The order is the repository's (``git log --reverse``, :func:`git_commits`); a measured
commit that git does not know (another clone's branch, a test tree) is placed by its date between
the known ones (:func:`commit_order`), and its subject is shown as unknown.  The x-axis of every
history chart is this order, one category per measured commit, not clock time: a day of commits
made minutes apart stays readable, and two machines' charts line up.

NOTE [ which metrics are exact ]
``track_peak_allocated`` (and any ``track_`` benchmark in bytes) is the exact peak of live tensor
bytes of one step on CPU: a different value between two commits is a change of the code measured,
never noise, so the regressions view lists *every* step change, with its factor.  Not exact, and
not listed: CPU resident bytes (``track_peak_reserved`` with ``device='cpu'``, in the files written
before the suite dropped it; it moved up to 2x between code-identical commits), and times
(``time_step``): on the shared 2-core machine they move with its load, and asv's own statistics
(``asv compare``: Mann-Whitney over the samples plus its 10% factor) are the test for them.
"""
from __future__ import annotations

import json
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

__all__ = ["Commit", "Line", "TechniqueHistory", "git_commits", "commit_order", "split_benchmark", "is_exact_memory",
           "technique_histories", "line_labels", "benchmark_order", "step_changes", "changes_by_commit", "SHORT"]

#: characters of a short hash: asv's (its results file names and ``asv compare`` use 8)
SHORT = 8


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
    """One parameter combination of one technique: ``points`` are ``(commit, value)`` in order."""

    label: str
    params: dict
    points: tuple


@dataclass(frozen=True)
class TechniqueHistory:
    """The lines of one technique (``technique`` is "" for a benchmark without that parameter)."""

    technique: str
    lines: tuple


def git_commits(repo: Path | str, rev: str = "HEAD", timeout: float = 30.0) -> list[tuple[str, str]]:
    """``[(hash, subject), ...]`` of ``rev``'s history, oldest first; ``[]`` when ``repo`` is not in
    a git repository or git is missing (the history is then ordered by commit date).  Local only."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "log", "--reverse", "--format=%H%x1f%s", rev, "--"],
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


def _date(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.inf
    return f if math.isfinite(f) else math.inf


def commit_order(frame: pd.DataFrame, known: Sequence[tuple[str, str]] = ()) -> list[Commit]:
    """The commits of ``frame`` in history order (NOTE [ commit order ]).

    Args:
        frame: :func:`memlab.results.load_asv_results` rows (``commit``, ``date_ms``).
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


def technique_histories(frame: pd.DataFrame, order: Sequence[Commit]) -> list[TechniqueHistory]:
    """One benchmark on one machine as lines per technique (in the order the techniques first appear in
    the benchmark's parameters), each line one combination of the other parameters (sorted by their
    values), its points in commit order.  Parameters whose value is the same on every line of the whole
    frame (``device='cpu'`` on a CPU host) are left out of the line labels."""
    if frame is None or not len(frame):
        return []
    pos = {c.hash: c for c in order}
    rows = [r for r in frame.itertuples(index=False) if r.commit in pos]
    varying = {}
    for r in rows:
        for k, v in _rest(r.params).items():
            varying.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    shown = {k for k, vals in varying.items() if len(vals) > 1}
    by_tech: dict[str, dict[str, list]] = {}
    for r in rows:
        tech = r.params.get("technique")
        tech = tech if isinstance(tech, str) else ("" if tech is None else str(tech))
        by_tech.setdefault(tech, {}).setdefault(r.params_key, []).append(r)
    out = []
    for tech, combos in by_tech.items():
        lines = []
        for _, group in combos.items():
            params = _rest(group[0].params)
            label = _param_text({k: v for k, v in params.items() if k in shown}) if shown else "all"
            points = tuple(sorted(((pos[r.commit], float(r.value)) for r in group), key=lambda p: p[0].position))
            lines.append(Line(label, params, points))
        lines.sort(key=lambda ln: [_sort_key(ln.params[k]) for k in sorted(ln.params)])
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


def step_changes(frame: pd.DataFrame, order: Sequence[Commit]) -> list[dict[str, Any]]:
    """Every change of an exact memory value between consecutive measured commits (the regressions view).

    For each machine, benchmark and parameter combination with exact values (:func:`is_exact_memory`),
    its values in commit order; each value that differs from the previous one gives a record:
    ``machine``, ``benchmark``, ``technique``, ``params`` (the others), ``before``/``after``
    (:class:`Commit`), ``before_value``/``after_value`` (bytes), ``factor`` (after / before, None
    from 0), ``between`` (the commits after ``before`` up to ``after`` in the repository's history,
    None when git does not know both) and ``unmeasured`` (measured commits in between where this
    combination has no value: skipped or failed there).  Sorted by commit, then benchmark and
    parameters.
    """
    if frame is None or not len(frame):
        return []
    pos = {c.hash: c for c in order}
    out = []
    for (machine, bench, key), group in frame.groupby(["machine", "benchmark", "params_key"], sort=True):
        first = group.iloc[0]
        if not is_exact_memory(bench, first["unit"], first["params"]):
            continue
        points = sorted(((pos[c], float(v)) for c, v in zip(group["commit"], group["value"]) if c in pos),
                        key=lambda p: p[0].position)
        for (a, va), (b, vb) in zip(points, points[1:]):
            if va == vb:
                continue
            params = first["params"]
            tech = params.get("technique")
            between = b.index - a.index if a.index is not None and b.index is not None else None
            out.append({"machine": machine, "benchmark": bench, "technique": "" if tech is None else str(tech),
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
                                    "techniques": set(), "_factors": []})
        g["count"] += 1
        g["techniques"].add(r["technique"] or "(none)")
        if r["factor"] is not None:
            g["_factors"].append(r["factor"])
    out = []
    for key in sorted(groups):
        g = groups[key]
        f = g.pop("_factors")
        out.append({**g, "techniques": sorted(g["techniques"]), "factors": (min(f), max(f)) if f else None})
    return out
