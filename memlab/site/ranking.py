"""Summaries of measurement rows (tidy DataFrames from :mod:`memlab.results`) for the site.

Pure functions on DataFrames: which parameter a family sweeps, how rows group into lines, the
Pareto front of throughput against peak memory, and the best technique for memory against the
family's baseline.  Only :func:`ranked` rows (shown status ``ok``: see NOTE [ what the site ranks ]
in :mod:`memlab.results`) are ever swept, ranked or put on a front.  Memory in bytes, throughput
in samples/s.
"""
from __future__ import annotations

import json
import math
import numbers
from typing import Any

import pandas as pd

from ..core.record import ACTIVATION_CATEGORIES, Status
from ..core.record import is_number as _num
from ..core.setting import DEFAULTS, in_backward

__all__ = ["SETTING", "ranked", "not_ranked", "settings", "setting_text", "machines_apart",
           "in_setting", "swept_param", "config_groups", "sweep_sections", "split_by", "line_labels", "line_variants",
           "pareto_front", "comparable", "savings", "param_text", "sort_key",
           "ACTIVATION_CATEGORIES", "memory_measure", "activation_bytes", "configurations", "compare", "fastest_within",
           "speed_measure"]

#: A family's rows are only compared within one setting: device, dtype, mode, the training step's
#: optimizer, loss, micro-batches accumulated and gradients between steps (rows from before each choice
#: are ``sgd`` / ``given`` / 1 / ``none``), and the machine the row ran on, always last (NOTE [ the
#: machine a row ran on ] in :mod:`memlab.results`: rows of two machines are never ranked, drawn or
#: averaged together).
SETTING = ("device", "dtype", "mode", "optimizer", "loss", "accumulate", "grads", "machine")
#: the step's fields of :data:`SETTING` (after device, dtype and mode), named only when not the default
_DEFAULT_STEP = {"optimizer": DEFAULTS.optimizer, "loss": DEFAULTS.loss, "accumulate": DEFAULTS.accumulate,
                 "grads": DEFAULTS.grads}
_STEP_TEXT = {"optimizer": "{}", "loss": "loss {}", "accumulate": "{} micro-batches accumulated",
              "grads": "grads {}"}


# NOTE [ leak unknown rows are ranked, never called ok ]
# A row with fewer than three measured steps reads ``leak unknown`` (issue 46: a leak every other step
# needs a third step to show).  Its bytes are exact and its outputs and gradients matched the
# reference; only the verdict on memory kept across steps is missing.  Such rows are ranked and drawn
# beside ``ok`` rows, their status shown as "leak unknown" (amber) in every table, never as ``ok``; a
# mismatch, a leak, an error or an unverified row is only listed.  Evidence: the committed CPU sweeps
# were measured at two steps (data/sweeps/README.md); left out, the site would rank nothing until they
# are measured again at three.
RANKED_STATUSES = ("ok", Status.LEAK_UNKNOWN.label)


def ranked(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that may be ranked, called best and drawn: shown status ``ok`` or ``leak unknown``
    (NOTE [ leak unknown rows are ranked, never called ok ])."""
    return rows[rows["status_shown"].isin(RANKED_STATUSES)]


def not_ranked(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that are only listed, with their status and reason."""
    return rows[~rows["status_shown"].isin(RANKED_STATUSES)]


def sort_key(value: Any) -> tuple:
    """Numbers before strings, numbers by value; a total order for mixed parameter values."""
    if isinstance(value, bool):
        return (1, str(value))
    if isinstance(value, numbers.Real):
        return (0, float(value), "")
    return (1, json.dumps(value, sort_keys=True, default=str))


def settings(rows: pd.DataFrame) -> list[tuple[str, ...]]:
    """The distinct settings (:data:`SETTING`) of ``rows``, sorted."""
    return sorted({tuple(r) for r in rows[list(SETTING)].itertuples(index=False)})


def setting_text(setting: tuple[str, ...], *, machine: bool = False) -> str:
    """``'cpu · float32 · train'``; the step's fields only when not memlab's defaults (sgd, given, one
    micro-batch, gradients set to None): ``'adam'``, ``'adam stepped in backward'`` (for
    ``adam_in_backward``: NOTE [ optimizer in backward ] in :mod:`memlab.core.setting`), ``'loss mse'``,
    ``'2 micro-batches accumulated'``, ``'grads zero'``; the machine (``'on node-3 · AMD EPYC'``) only
    when ``machine`` (where rows of several machines share the rest of the setting: :func:`machines_apart`)."""
    parts = list(setting[:3])
    for name, v in zip(SETTING[3:-1], setting[3:len(SETTING) - 1]):
        if v != _DEFAULT_STEP[name]:
            built, stepped_in_backward = in_backward(v) if name == "optimizer" else (v, False)
            parts.append(f"{built} stepped in backward" if stepped_in_backward else _STEP_TEXT[name].format(v))
    if machine and len(setting) == len(SETTING):
        parts.append(f"on {setting[-1]}")
    return " · ".join(parts)


def machines_apart(settings: list[tuple[str, ...]]) -> bool:
    """Whether two of ``settings`` differ in their machine alone: then each names its machine
    (a CPU section and a GPU section are told apart by their device already)."""
    rest = [s[:len(SETTING) - 1] for s in settings]
    return len(set(rest)) < len(rest)


def in_setting(rows: pd.DataFrame, setting: tuple[str, ...]) -> pd.DataFrame:
    """The rows of one setting (:data:`SETTING`)."""
    mask = pd.Series(True, index=rows.index)
    for column, value in zip(SETTING, setting):
        mask &= rows[column] == value
    return rows[mask]


def _key(value: Any) -> str:
    """A hashable, order-independent text for a parameter value (or a list of values)."""
    return json.dumps(value, sort_keys=True, default=str)


def _values(rows: pd.DataFrame) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for params in rows["params"]:
        for k, v in params.items():
            seen.setdefault(k, set()).add(_key(v))
    return seen


def _varying_common(rows: pd.DataFrame, exclude: Any = ()) -> list[str]:
    """Sorted names of the parameters every row has (the workload's) that take several values."""
    params = list(rows["params"])
    common = set.intersection(*(set(p) for p in params)) - set(exclude)
    return sorted(k for k in common if len({_key(p[k]) for p in params}) > 1)


def _split(rows: pd.DataFrame, keys: list[str]) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """``[(values of keys, rows having them)]`` per distinct combination, sorted by the values."""
    groups: dict[str, list] = {}
    for idx, p in zip(rows.index, rows["params"]):
        groups.setdefault(_key([p[k] for k in keys]), []).append(idx)
    out = [({k: rows.at[ix[0], "params"][k] for k in keys}, rows.loc[ix]) for ix in groups.values()]
    return sorted(out, key=lambda g: [sort_key(g[0][k]) for k in keys])


def swept_param(rows: pd.DataFrame) -> str | None:
    """The parameter a set of rows sweeps: of those taking more than one value, the one with the
    most distinct values (ties by name); None when no parameter varies."""
    varying = {k: len(v) for k, v in _values(rows).items() if len(v) > 1}
    if not varying:
        return None
    return sorted(varying, key=lambda k: (-varying[k], k))[0]


def config_groups(rows: pd.DataFrame, swept: str | None) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """Split rows by the workload configuration: the parameters every row has (the workload's),
    other than ``swept``, that take several values (e.g. a quick sweep at n=4000 beside a full one
    at n=10000).  Memory is only compared within one group.

    Returns:
        ``[(varying config, rows)]`` sorted by config; ``[({}, rows)]`` when nothing varies.
    """
    keys = _varying_common(rows, exclude={swept}) if len(rows) else []
    return _split(rows, keys) if keys else [({}, rows)]


def sweep_sections(rows: pd.DataFrame) -> list[tuple[dict[str, Any], str | None, pd.DataFrame]]:
    """Split one setting's rows into ``(fixed config, x-axis parameter or None, rows)`` sections.

    NOTE [ a section's x-axis ]: a section is drawn against a parameter that varies *within* its
    series (a series: one technique at fixed values of every other parameter), never against one
    that is constant within each series.  Candidates are every varying parameter, a workload's
    (``depth``) or a technique's own knob (``chunk_size``, a plug-in's ``split``).  Greedily, the
    candidate putting the most ranked rows of no section yet on lines of two or more points wins,
    if it puts two or more there (a baseline measured at one more size does not make that size an axis);
    its sections split the rows by the other workload parameters that vary (:func:`split_by` names
    them), so a cross (depth swept at one batch, batch at one depth) gives a sweep of each, the
    centre row in both.  A knob's section holds the rows that have the knob plus the rows of
    techniques with no knob at all (the baseline: one measurement, drawn flat); a technique with a
    knob of its own is drawn in that knob's section, never flat across another's.  Rows on no
    line are grouped by their workload configuration, with no x-axis.  Order: workload sweeps by
    parameter name, then knob sweeps, then the rest, each by configuration.
    """
    if not len(rows):
        return [({}, None, rows)]
    shared = _varying_common(rows)
    common = set.intersection(*(set(p) for p in rows["params"]))
    knobless = _knobless_techniques(rows, common)
    distinct = {k: len(v) for k, v in _values(ranked(rows)).items() if len(v) > 1}
    candidates = sorted(distinct)
    sections: list[tuple[dict[str, Any], str, pd.DataFrame]] = []
    placed: set = set()
    while candidates:
        k, found = _best_axis(rows, candidates, distinct, shared, knobless, placed)
        if not found:
            break
        sections += [(config, k, members) for config, k, members, _ in found]
        placed.update(i for *_, members, _ in found for i in members.index)
        candidates.remove(k)
    sections.sort(key=lambda s: (s[1] not in shared, s[1], [sort_key(s[0][k]) for k in sorted(s[0])]))
    rest = rows.loc[[i for i in rows.index if i not in placed]]
    others = [(config, None, group) for config, group in _split(rest, shared)] if len(rest) else []
    return sections + others


def _best_axis(rows: pd.DataFrame, candidates: list[str], distinct: dict[str, int], shared: list[str],
               knobless: set[str], placed: set) -> tuple[str, list[tuple]]:
    """The candidate putting the most ranked rows not ``placed`` yet on lines (ties: more distinct
    values, then the name), with its sections (:func:`_axis_sections`); no sections when it puts
    fewer than two there."""
    def gain(k: str) -> tuple[int, list[tuple]]:
        found = _axis_sections(rows, k, shared, knobless)
        return len(set().union(*(lined for *_, lined in found)) - placed), found

    scored = [(k, *gain(k)) for k in candidates]
    k, n, found = max(scored, key=lambda s: (s[1], distinct[s[0]]))  # the first (by name) of equals
    return k, found if n >= 2 else []


def _knobless_techniques(rows: pd.DataFrame, common: set[str]) -> set[str]:
    """Techniques whose rows have no parameter of their own (only those every row has): baselines."""
    with_knob = {t for t, p in zip(rows["technique"], rows["params"]) if set(p) - common}
    return set(rows["technique"]) - with_knob


def _axis_sections(rows: pd.DataFrame, k: str, shared: list[str], knobless: set[str]) -> list[tuple]:
    """``(config, k, members, lined row index)`` per group of ``rows`` (split by the varying workload
    parameters other than ``k``) in which ``k`` varies within a series of ranked rows."""
    out = []
    for config, group in _split(rows, [o for o in shared if o != k]):
        members = group[[k in p or t in knobless for t, p in zip(group["technique"], group["params"])]]
        lined = _on_lines(ranked(members), k)
        if lined:
            out.append((config, k, members, lined))
    return out


def _on_lines(ok: pd.DataFrame, k: str) -> set:
    """The rows of ``ok`` on a series (technique + every parameter but ``k``) with two or more values of ``k``."""
    series: dict[str, list] = {}
    for idx, t, p in zip(ok.index, ok["technique"], ok["params"]):
        if k in p:
            series.setdefault(_key([t, {n: v for n, v in p.items() if n != k}]), []).append((idx, _key(p[k])))
    return {i for pts in series.values() if len({v for _, v in pts}) > 1 for i, _ in pts}


def split_by(rows: pd.DataFrame, swept: str | None) -> list[str]:
    """The workload parameters that vary across ``rows`` (one setting), other than ``swept``: what
    :func:`sweep_sections` split them by (each section fixes them)."""
    return _varying_common(rows, exclude={swept}) if len(rows) else []


def line_labels(rows: pd.DataFrame, swept: str | None) -> pd.Series:
    """One label per row naming its line: the technique plus every other varying parameter, and
    the run file when the same configuration comes from several runs."""
    varying = sorted(k for k, v in _values(rows).items() if len(v) > 1 and k != swept)

    def label(row) -> str:
        others = [f"{k}={row.params[k]}" for k in varying if k in row.params]
        return row.technique + (f" ({', '.join(others)})" if others else "")

    labels = pd.Series([label(r) for r in rows.itertuples()], index=rows.index, dtype=object)
    keys = labels + "\0" + rows["params_key"]
    if keys.duplicated().any() and rows["run"].nunique() > 1:
        labels = labels + " [" + rows["run"] + "]"
    return labels


def line_variants(rows: pd.DataFrame, swept: str | None) -> pd.Series:
    """Per row, what tells its line apart from the technique's other lines in one chart: the other
    varying parameters (``'opt_einsum=True'``) and the run file when the same configuration comes
    from several runs; ``''`` for a technique's only line.  Legends name the technique; the variant
    is a marker symbol and the hover text."""
    varying = sorted(k for k, v in _values(rows).items() if len(v) > 1 and k != swept)
    variants = pd.Series([", ".join(f"{k}={p[k]}" for k in varying if k in p) for p in rows["params"]],
                         index=rows.index, dtype=object)
    keys = rows["technique"] + "\0" + variants + "\0" + rows["params_key"]
    if keys.duplicated().any() and rows["run"].nunique() > 1:
        variants = (variants + " [run " + rows["run"] + "]").str.lstrip(" ")
    return variants


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points (memory, throughput) no other point beats on both counts (less or
    equal memory and more or equal throughput, one strictly), sorted by memory."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1], i))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def comparable(base_params: dict, params: dict) -> bool:
    """True when ``params`` agree with ``base_params`` on every parameter both have (the workload
    configuration the baseline ran)."""
    return all(params[k] == v for k, v in base_params.items() if k in params)


def param_text(params: dict, skip: dict | None = None) -> str:
    """``k=v`` pairs in name order, leaving out those equal in ``skip`` and those with no value (None
    or an empty string: a model file's ``blocks`` left to the guess), which would read ``blocks=``."""
    skip = skip or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items())
                     if not (k in skip and skip[k] == v) and v is not None and str(v).strip() != "")


def savings(rows: pd.DataFrame, baseline: str) -> dict[str, Any] | None:
    """The best technique for memory against ``baseline`` in one family and setting.

    Picks the baseline row (ranked) with the most comparable rows, then the highest peak (the largest
    configuration, where saving matters most), then the lowest ``params_key``;
    then, per technique, its comparable ranked row with the lowest ``peak_allocated_bytes``.
    Rows that are not ranked (:func:`ranked`) take no part.

    Returns:
        None without a ranked baseline row; else ``{"baseline": row, "techniques": [entries]}``,
        entries sorted by peak (the first is the best, possibly the baseline itself), each with
        ``row``, ``saving`` (1 - peak / baseline peak) and ``throughput_ratio`` (samples/s over the
        baseline's, None when either is unknown).
    """
    ok = ranked(rows)
    bases = ok[ok["technique"] == baseline].sort_values("params_key", kind="stable")
    if bases.empty:
        return None
    scores = [(sum(comparable(b.params, p) for p in ok["params"]), b.peak_allocated_bytes, -i)
              for i, b in enumerate(bases.itertuples())]
    base = bases.iloc[-max(scores)[2]]
    cands = ok[[comparable(base["params"], p) for p in ok["params"]]]
    entries = []
    for tech, group in cands.groupby("technique", sort=True):
        best = group.sort_values(["peak_allocated_bytes", "params_key"], kind="stable").iloc[0]
        tp, btp = best["samples_per_s"], base["samples_per_s"]
        ratio = float(tp / btp) if _num(tp) and _num(btp) and btp > 0 else None
        peak, bpeak = best["peak_allocated_bytes"], base["peak_allocated_bytes"]
        entries.append({"row": best, "saving": (1 - peak / bpeak) if bpeak else None, "throughput_ratio": ratio})
    entries.sort(key=lambda e: (e["row"]["peak_allocated_bytes"], e["row"]["technique"]))
    return {"baseline": base, "techniques": entries}


# -- the questions the overview answers ---------------------------------------------------------
# NOTE [ the overview's questions ]
# Per family, per configuration (a ranked baseline row and the ranked rows comparable with it, in
# one setting), the overview answers:
# * lowest memory: the technique whose lowest-memory row holds least.  Memory is the *total* peak
#   (``total_peak_bytes``: everything live at the step's peak, baseline included) when every row of
#   the configuration carries it, else the peak allocated above the step's baseline (older rows);
#   the page says which.
# * lowest activation memory: ``activation_peak_bytes`` where techniques state it, else the
#   activation categories (saved activations + temporaries) at the step's peak.
# * fastest within a memory budget: of all rows (every configuration of every technique) whose memory
#   is at most ``budget`` times the baseline's, the one with the lowest relative step time when every
#   such row has it (load-robust), else the shortest median step (same workload, same samples).
def memory_measure(rows: pd.DataFrame) -> str:
    """``total_peak_bytes`` when every row has it, else ``peak_allocated_bytes``."""
    if len(rows) and rows["total_peak_bytes"].notna().all():
        return "total_peak_bytes"
    return "peak_allocated_bytes"


def activation_bytes(row: Any) -> tuple[float | None, str]:
    """``(bytes, source)``: the row's activation memory and where it comes from (``'stated'``: the
    technique's ``activation_peak_bytes``; ``'categories'``: saved activations + temporaries at the
    step's peak); ``(None, '')`` when the row has neither."""
    stated = row["activation_peak_bytes"]
    if _num(stated):
        return float(stated), "stated"
    cats = row["peak_by_category_bytes"]
    if isinstance(cats, dict) and cats:
        return float(sum(cats.get(c, 0) for c in ACTIVATION_CATEGORIES)), "categories"
    return None, ""


def configurations(rows: pd.DataFrame, baseline: str) -> list[dict[str, Any]]:
    """One configuration per ranked row of ``baseline``: ``{"setting", "base", "rows", "default"}``,
    ``rows`` the ranked rows of its setting comparable with it (:func:`comparable`).  Sorted by setting
    and parameters; ``default`` is True on the one :func:`savings` would pick (most comparable rows,
    then the highest peak) in the first setting."""
    out = []
    for setting in settings(rows):
        ok = ranked(in_setting(rows, setting))
        bases = ok[ok["technique"] == baseline].sort_values("params_key", kind="stable")
        if bases.empty:
            continue
        scores = [(sum(comparable(b.params, p) for p in ok["params"]), b.peak_allocated_bytes, -i)
                  for i, b in enumerate(bases.itertuples())]
        pick = -max(scores)[2]
        for i, (_, base) in enumerate(bases.iterrows()):
            cands = ok[[comparable(base["params"], p) for p in ok["params"]]]
            out.append({"setting": setting, "base": base, "rows": cands, "default": i == pick})
    seen = False
    for c in out:  # the pick of the first setting only
        c["default"], seen = c["default"] and not seen, seen or c["default"]
    return sorted(out, key=lambda c: (c["setting"], [sort_key(c["base"]["params"][k]) for k in sorted(c["base"]["params"])],
                                      c["base"]["params_key"]))


def compare(cands: pd.DataFrame, base: pd.Series, measure: str = "peak_allocated_bytes") -> list[dict[str, Any]]:
    """Per technique its row with the least ``measure`` among ``cands`` (ties: ``params_key``), sorted
    by that memory (the baseline first on a tie, then by name): ``{"row", "saving", "throughput_ratio"}``; ``saving`` is
    1 - memory / the baseline's, ``throughput_ratio`` samples/s over the baseline's (None if unknown)."""
    entries = []
    for _, group in cands.groupby("technique", sort=True):
        group = group[group[measure].notna()]
        if group.empty:
            continue
        best = group.sort_values([measure, "params_key"], kind="stable").iloc[0]
        tp, btp = best["samples_per_s"], base["samples_per_s"]
        ratio = float(tp / btp) if _num(tp) and _num(btp) and btp > 0 else None
        m, bm = best[measure], base[measure]
        entries.append({"row": best, "saving": (1 - m / bm) if _num(bm) and bm else None, "throughput_ratio": ratio})
    # a technique holding exactly the baseline's memory does not beat it: the baseline first on a tie
    entries.sort(key=lambda e: (e["row"][measure], e["row"]["technique"] != base["technique"], e["row"]["technique"]))
    return entries


def speed_measure(rows: pd.DataFrame) -> str | None:
    """``relative_step_time`` when every row has it, else ``step_time_s`` when every row has it, else None."""
    for column in ("relative_step_time", "step_time_s"):
        if len(rows) and rows[column].notna().all():
            return column
    return None


def fastest_within(cands: pd.DataFrame, base: pd.Series, measure: str, budget: float) -> tuple[pd.Series, str] | None:
    """The fastest row among ``cands`` whose ``measure`` is at most ``budget`` times the baseline's,
    with the speed column used (:func:`speed_measure` over those rows); None when no row fits or
    their speed is not known for all."""
    limit = budget * base[measure] if _num(base[measure]) else None
    if limit is None:
        return None
    fit = cands[cands[measure].notna() & (cands[measure] <= limit)]
    speed = speed_measure(fit)
    if speed is None:
        return None
    return fit.sort_values([speed, measure, "technique", "params_key"], kind="stable").iloc[0], speed
