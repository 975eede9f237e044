"""This host's side of running asv: its machine name and facts, scratch configurations, and the
comparison of exact figures with no tolerance.

Run from the repository root (``Makefile.asv`` does)::

    python -m benchmarks.asv_host name                 # the machine name derived from the host
    python -m benchmarks.asv_host register NAME [--config C] [--force | --scratch]   # record NAME in ~/.asv-machine.json
    python -m benchmarks.asv_host scratch-config OUT   # asv.conf.json with results under .asv/
    git rev-list --reverse A^..main | python -m benchmarks.asv_host spread   # commits, spread order
    python -m benchmarks.asv_host history-config OUT   # asv.conf.json installing commits from source
    git rev-list --reverse main | python -m benchmarks.asv_host missing-times --machine M [--config C]   # untimed commits
    python -m benchmarks.asv_host compare A B --machine M [--config C] [--exact-only]   # asv compare + exact figures

asv imports every module of ``benchmarks/`` while discovering benchmarks, in environments that have
``asv_runner`` but not ``asv``: this module defines no benchmark and imports asv only inside the
functions that use it.

NOTE [ one machine, one history ]
asv files results under ``results/<machine>/`` and compares, plots and publishes them per machine;
the machine's facts (OS, CPU, RAM...) are copied into every results file it writes, and
``asv publish`` draws a separate line for each distinct set.  So a name must stand for one host,
and its facts must not change from run to run:

- the default name is this host's short name, sanitised (``vm``, ``lab-a100``); the shared CI
  machine ``memlab-ci-2core`` is used only when asked for by name (``ASV_MACHINE=...``), never
  derived;
- a new name is registered with asv's own detection (``asv.machine.Machine.get_defaults``) plus
  the GPU model: ``asv machine --yes --machine NAME`` records no facts at all when NAME is not the
  host name (asv 0.6.6 keeps only the options that differ from the detected defaults);
- a name that already has ``results/<name>/machine.json`` keeps the facts recorded there, so the
  files of one machine stay one line; registration refuses when a fact recorded there differs from
  this host's: OS and kernel (``os``), architecture, CPU model, CPU count, RAM (beyond
  :data:`RAM_TOLERANCE`: the kernel's reserved memory moves ``MemTotal`` by kilobytes) or GPU
  (:data:`IDENTITY_KEYS`; one line naming each difference and ``ASV_MACHINE=<name>``).  ``--force``
  (``make ... ASV_FORCE=1``) registers the recorded facts anyway: only for that same host after an
  upgrade (a new kernel), so that its history stays one line.  A fact the file does not record is not
  compared (``memlab-ci-2core``'s hand-written facts record no ``arch``, ``num_cpu`` or ``gpu``).
- the results directory checked is the one asv will write: ``results_dir`` of the configuration
  given with ``--config`` (``asv.conf.json``: ``results/``).  The scratch targets (``make
  asv-continuous``, ``asv-quick``, ``asv-dry``) write to ``.asv/scratch-results`` under their own
  name, ``<name>-scratch``, registered with ``--scratch``: this host's detected facts, never a
  recorded set and never a refusal (those results are this clone's, thrown away, and asv measures
  both commits of ``asv continuous`` afresh); so they work on a host whose facts differ from
  ``results/<name>/machine.json``, and they never touch the ``~/.asv-machine.json`` entry of the
  committed name.

NOTE [ exact figures ]
asv compares every benchmark with one ``--factor`` (default 1.1, plus its Mann-Whitney test where a
benchmark has samples).  The figures of :data:`EXACT_METRICS` are exact (bytes of live tensors,
the CUDA allocator replayed from them, an exponent fitted to exact bytes): any change between two
commits is a change of the code measured, so a 5% memory regression must not hide under a 10%
factor.  :func:`exact_changes` compares them with no tolerance (``compare``, run by ``make
asv-compare`` and after ``asv continuous`` by ``make asv-continuous``; exit 1 when one rose or
newly failed), while times keep asv's statistics in the same ``asv continuous``/``asv compare``
run.  ``track_peak_reserved`` counts as exact on CUDA only (on CPU it was resident pages,
:data:`NOT_EXACT`).  ``asv.conf.json``'s ``regressions_thresholds`` (used by ``asv publish``'s
regression list only) gives the same benchmarks a threshold of 0.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

T = TypeVar("T")

__all__ = ["CI_MACHINE", "IDENTITY_KEYS", "RAM_TOLERANCE", "EXACT_METRICS", "NOT_EXACT", "MachineClash",
           "default_name", "valid_name", "detect", "detect_gpu", "fact_differences", "config_results_dir", "register",
           "scratch_config", "source_install_config", "spread_order", "TIME_METRIC", "timed_commits",
           "missing_history", "is_exact", "exact_changes", "compare"]

CI_MACHINE = "memlab-ci-2core"
#: facts that tell two hosts apart; a recorded one that differs from this host's refuses registration
IDENTITY_KEYS = ("os", "arch", "cpu", "num_cpu", "ram", "gpu")
#: relative difference of ``ram`` (bytes, asv's ``MemTotal``) still read as the same RAM: a kernel
#: update moved this host's by 128 KiB (25,276,071,936 -> 25,276,203,008 bytes); another VM size is GBs
RAM_TOLERANCE = 0.01
#: benchmarks whose figure is exact (NOTE [ exact figures ]), by method name
EXACT_METRICS = ("track_peak_allocated", "track_peak_reserved", "track_predicted_cuda_reserved",
                 "track_activation_exponent", "track_seq_exponent")
#: ``(method, device)`` pairs of :data:`EXACT_METRICS` that are not exact: CPU resident pages
NOT_EXACT = (("track_peak_reserved", "'cpu'"),)
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


class MachineClash(RuntimeError):
    """``results/<name>/`` belongs to a host with other hardware than this one."""


def valid_name(name: str) -> str:
    """``name`` if it can name a results directory (lower-case letters, digits, ``.``, ``_``, ``-``).

    Raises:
        ValueError: empty, too long, or other characters.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"asv machine name {name!r} is not valid: use 1-63 lower-case letters, digits, "
                         f"'.', '_' or '-', starting with a letter or digit (e.g. ASV_MACHINE=lab-a100)")
    return name


def default_name(hostname: str | None = None) -> str:
    """This host's machine name: the short host name, lower-cased, other characters as ``-``.

    Raises:
        ValueError: nothing usable is left, or the result is the CI machine's name (which is only
            ever used when given explicitly, see NOTE [ one machine, one history ]).
    """
    host = socket.gethostname() if hostname is None else hostname
    short = host.strip().split(".")[0].lower()
    name = re.sub(r"[^a-z0-9._-]+", "-", short).strip("-._")[:63]
    if not name:
        raise ValueError(f"cannot derive an asv machine name from the host name {host!r}; set ASV_MACHINE=<name>")
    if name == CI_MACHINE:
        raise ValueError(f"the host name {host!r} gives the CI machine's name {CI_MACHINE!r}; on the CI machine "
                         f"pass ASV_MACHINE={CI_MACHINE} explicitly, elsewhere choose another name")
    return valid_name(name)


def _count(names: list[str]) -> str:
    models = sorted(set(names))
    return ", ".join(f"{names.count(m)} x {m}" if names.count(m) > 1 else m for m in models)


def detect_gpu(run=subprocess.run, proc_dir: str = "/proc/driver/nvidia/gpus") -> str:
    """The GPU model(s) (``"2 x NVIDIA A100-SXM4-80GB"``) from ``nvidia-smi``, else from the driver's
    ``/proc`` files; ``"none"`` where neither shows a GPU."""
    exe = shutil.which("nvidia-smi")
    if exe is not None:
        try:
            out = run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
            if out.returncode == 0 and names:
                return _count(names)
        except (OSError, subprocess.SubprocessError):
            pass
    names = []
    try:
        for info in sorted(Path(proc_dir).glob("*/information")):
            model = re.search(r"^Model:\s*(.+)$", info.read_text(errors="replace"), re.M)
            names.append(model.group(1).strip() if model else "NVIDIA GPU")
    except OSError:
        pass
    return _count(names) if names else "none"


def detect() -> dict[str, str]:
    """asv's detection of this host (os, arch, cpu, num_cpu, ram) plus ``gpu``; no ``machine`` key."""
    from asv.machine import Machine  # asv is in the project's venv, not in asv's benchmark environments

    facts = {k: str(v) for k, v in Machine.get_defaults().items() if k != "machine"}
    facts["gpu"] = detect_gpu()
    return facts


def _recorded(results_dir: Path, name: str) -> dict[str, Any] | None:
    path = results_dir / name / "machine.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise MachineClash(f"{path} is not readable JSON ({exc}); fix or remove it before registering {name!r}")
    if not isinstance(data, dict) or data.get("machine") != name:
        raise MachineClash(f"{path} does not describe machine {name!r}")
    return {k: v for k, v in data.items() if k != "version"}


def _ram_bytes(v: Any) -> int | None:
    try:
        return int(str(v))
    except ValueError:
        return None


def fact_differences(recorded: Mapping[str, Any], host: Mapping[str, Any]) -> list[str]:
    """The facts of :data:`IDENTITY_KEYS` that ``recorded`` (a ``machine.json``) holds and this
    ``host`` does not share, each as ``"os: recorded 'Linux 6.1', this host 'Linux 6.2'"``.

    ``ram`` is bytes: two values within :data:`RAM_TOLERANCE` of each other are the same RAM.  A
    fact ``recorded`` lacks is not compared.
    """
    out = []
    for key in IDENTITY_KEYS:
        if key not in recorded:
            continue
        a, b = str(recorded[key]), str(host.get(key))
        ram_a, ram_b = _ram_bytes(a), _ram_bytes(b)
        if key == "ram" and ram_a and ram_b and abs(ram_a - ram_b) <= RAM_TOLERANCE * max(ram_a, ram_b):
            continue
        if a != b:
            out.append(f"{key}: recorded {a!r}, this host {b!r}")
    return out


def _config_path(conf_path: str | os.PathLike, key: str, default: str) -> Path:
    from asv.util import load_json

    conf = load_json(str(conf_path), js_comments=True)
    value = Path(conf.get(key, default))
    return value if value.is_absolute() else Path(conf_path).resolve().parent / value


def config_results_dir(conf_path: str | os.PathLike = "asv.conf.json") -> Path:
    """``results_dir`` of the asv configuration ``conf_path`` (asv's reader: ``//`` comments allowed),
    relative paths taken from the configuration's directory, as asv does."""
    return _config_path(conf_path, "results_dir", "results")


def _clash_message(name: str, folder: Path, differ: list[str]) -> str:
    try:
        folder = folder.resolve().relative_to(Path.cwd().resolve())
    except (OSError, ValueError):
        pass
    return (f"{folder}/ holds the results of another host ({'; '.join(differ)}): give this host its own name, "
            f"ASV_MACHINE=<name> (e.g. ASV_MACHINE={name}-2), or ASV_FORCE=1 if it is that host after an upgrade")


def register(name: str, *, results_dir: str | os.PathLike = "results", machine_file: str | os.PathLike | None = None,
             facts: Mapping[str, str] | None = None, force: bool = False, scratch: bool = False) -> dict[str, Any]:
    """Record machine ``name`` in asv's machine file (``~/.asv-machine.json`` by default).

    Args:
        name: the machine name (see :func:`valid_name`).
        results_dir: the results directory asv will write; ``<results_dir>/<name>/machine.json``,
            when present, supplies the facts (see NOTE [ one machine, one history ]).
        machine_file: asv's machine file; default ``~/.asv-machine.json``.
        facts: this host's facts (default :func:`detect`).
        force: register the recorded facts even when they differ from this host's.
        scratch: register this host's facts whatever ``results_dir`` records, never refusing (a
            throw-away results directory: ``.asv/scratch-results``).

    Returns:
        the entry written: ``machine`` plus the facts.

    Raises:
        ValueError: invalid name.
        MachineClash: ``results_dir/<name>/`` records another host's facts (:func:`fact_differences`;
            neither ``force`` nor ``scratch``); the message is one line.
    """
    from asv.machine import MachineCollection

    valid_name(name)
    host = dict(detect() if facts is None else facts)
    recorded = None if scratch else _recorded(Path(results_dir), name)
    if recorded is None:
        entry = {"machine": name, **host}
    else:
        differ = fact_differences(recorded, host)
        if differ and not force:
            raise MachineClash(_clash_message(name, Path(results_dir) / name, differ))
        entry = dict(recorded)
    path = None if machine_file is None else str(machine_file)
    MachineCollection.save(name, entry, _path=path)
    return entry


def scratch_config(conf_path: str | os.PathLike = "asv.conf.json", results_dir: str = ".asv/scratch-results",
                   html_dir: str = ".asv/scratch-html") -> dict[str, Any]:
    """``asv.conf.json`` with results and HTML under ``.asv/`` (untracked): for ``asv continuous``,
    ``-b`` selections and ``--quick`` runs, which asv saves as results (it has no ``--dry-run`` for
    ``continuous``).  The environment directory stays shared.

    asv changes into the directory of the configuration it is given, so every path in the copy is
    made absolute (relative ones are relative to ``conf_path``'s directory, the repository root).
    """
    from asv.util import load_json

    base = Path(conf_path).resolve().parent
    conf = load_json(str(conf_path), js_comments=True)
    conf.update(results_dir=results_dir, html_dir=html_dir)
    for key in ("repo", "benchmark_dir", "env_dir", "results_dir", "html_dir"):
        if key in conf and not Path(conf[key]).is_absolute() and "://" not in str(conf[key]):
            conf[key] = str(base / conf[key])
    return conf


#: asv commands of :func:`source_install_config`: memlab at the commit is asv's checkout of it, put on
#: the environment's path by a ``.pth`` file (NOTE [ source install ])
_PTH = "memlab-asv-source.pth"
_SOURCE_INSTALL = ("in-dir={env_dir} python -c 'import site, sys; "
                   "open(site.getsitepackages()[0] + \"/" + _PTH + "\", \"w\").write(sys.argv[1] + chr(10))' {build_dir}")
#: then checks that ``import memlab`` resolves to the checkout (an installed copy would shadow it)
_SOURCE_CHECK = ("in-dir={env_dir} python -c 'import sys, importlib.util as u; s = u.find_spec(\"memlab\"); "
                 "sys.exit(0 if s and s.origin.startswith(sys.argv[1]) else \"memlab resolves to %s, not to the "
                 "checkout %s: run pip uninstall memlab in this environment\" % (s and s.origin, sys.argv[1]))' "
                 "{build_dir}")
#: a pip-installed memlab (left by ``asv run``/``asv continuous`` with asv.conf.json, which shares
#: this environment) is removed first, as asv's own default uninstall does
_PIP_UNINSTALL = "return-code=any in-dir={env_dir} python -m pip uninstall -y -q memlab"
_SOURCE_UNINSTALL = ("in-dir={env_dir} python -c 'import os, site; p = os.path.join(site.getsitepackages()[0], "
                     "\"" + _PTH + "\"); os.path.exists(p) and os.remove(p)'")


def source_install_config(conf_path: str | os.PathLike = "asv.conf.json") -> dict[str, Any]:
    """``asv.conf.json`` (results in ``results/``, same environments) whose build and install of a
    commit is its source checkout on the environment's path: for ``make asv-history``.

    NOTE [ source install ]
    asv checks out each commit into its build directory, then builds a wheel and installs it with pip:
    on 2 shared cores under load, pip's uninstall, wheel build and install took 1-3 minutes per commit,
    more than measuring it.  memlab is pure Python and never reads its own installed metadata
    (``importlib.metadata``, entry points), so the commit's checkout on ``sys.path`` is the code the
    wheel would install.  This configuration keeps asv's checkout and replaces the three pip calls with
    one ``.pth`` file (written and removed by a bare ``python -c``).  The environment, its name and the
    results files are the same as with ``asv.conf.json``.  The environment must not hold a pip-installed
    memlab (it would shadow the checkout; ``make asv-continuous`` or ``asv run`` leave one there): the
    uninstall step removes it with pip, and the install step checks where ``import memlab`` resolves
    and fails the commit's install, naming the fix, otherwise.
    """
    conf = scratch_config(conf_path, results_dir="results", html_dir=".asv/html")
    conf.update(build_command=[], install_command=[_SOURCE_INSTALL, _SOURCE_CHECK], uninstall_command=[_PIP_UNINSTALL, _SOURCE_UNINSTALL])
    return conf


def spread_order(items: Sequence[T]) -> list[T]:
    """``items`` (a commit range, oldest first) in the order an interrupted run covers evenly: the
    first, the last, then the middles of the gaps left, halving (0, n-1, n/2, n/4, 3n/4, ...).

    ``make asv-history`` measures commits in this order, so when it stops early (a shared machine's
    load makes the minutes per commit unpredictable), the measured commits still span the history
    and a later run with ``--skip-existing-commits`` fills the gaps in between.
    """
    n, order, seen = len(items), [], set()
    gaps = [(0, n - 1)] if n else []
    for i in (0, n - 1):
        if 0 <= i < n and i not in seen:
            seen.add(i)
            order.append(i)
    while gaps:
        nxt = []
        for lo, hi in gaps:
            if hi - lo < 2:
                continue
            mid = (lo + hi) // 2
            seen.add(mid)
            order.append(mid)
            nxt += [(lo, mid), (mid, hi)]
        gaps = nxt
    return [items[i] for i in order]


#: the benchmark whose recorded value makes a commit part of the time history (``make asv-time-history``)
TIME_METRIC = "track_relative_step_time"


def timed_commits(results_dir: str | os.PathLike, machine: str, metric: str = TIME_METRIC) -> set[str]:
    """Full hashes of the commits whose results of ``machine`` in ``results_dir`` record ``metric``
    (any benchmark of that name) at some combination: a number, or a failure (None: that commit was
    measured and failed); a combination that was not run or was skipped (NaN) does not count."""
    from asv.results import iter_results_for_machine

    if not (Path(results_dir) / machine).is_dir():
        return set()
    found = set()
    for res in iter_results_for_machine(str(results_dir), machine):
        for key in res.get_all_result_keys():
            if key.rpartition(".")[2] != metric:
                continue
            if any(not _missing(v) for v in res.get_result_value(key, res.get_result_params(key))):
                found.add(res.commit_hash)
                break
    return found


def missing_history(commits: Sequence[str], timed: set[str], first: int = 50) -> list[str]:
    """The commits of ``commits`` (main, oldest first) that the time history lacks, oldest first.

    NOTE [ the time history appends ]
    The history spans main from its oldest timed commit to main's newest; a run measures only the
    commits in that span without a time figure (``timed``, :func:`timed_commits`): the newer commits
    since the last run, and any gap an interrupted run left.  With no timed commit yet, the span is
    the newest ``first`` commits.  A commit measured and failed counts as timed (it is in the
    history, as a failure); delete its file to measure it again.
    """
    if first < 1:
        raise ValueError(f"first={first!r} is not valid: expected a whole number of commits >= 1")
    start = next((i for i, c in enumerate(commits) if c in timed), max(0, len(commits) - first))
    return [c for c in commits[start:] if c not in timed]


def is_exact(benchmark: str, params: Sequence[str] = ()) -> bool:
    """Whether asv benchmark ``benchmark`` (``bench_x.Cls.track_peak_allocated``) at the parameter
    values ``params`` (asv's reprs, ``"'cpu'"``) is an exact figure (NOTE [ exact figures ])."""
    method = str(benchmark).rpartition(".")[2]
    if method not in EXACT_METRICS:
        return False
    return not any(method == m and value in params for m, value in NOT_EXACT)


def _exact_values(results_dir: Path, machine: str, commit: str) -> dict[tuple[str, str], tuple[Any, Any]] | None:
    """``{(environment, "bench(params)"): (value, benchmark version)}`` of the exact figures asv
    recorded for ``commit`` on ``machine`` (value None: failed; NaN: skipped); None when asv has no
    results file of that commit there."""
    from asv.results import iter_results_for_machine_and_hash

    found = list(iter_results_for_machine_and_hash(str(results_dir), machine, commit))
    if not found:
        return None
    out = {}
    for res in found:
        for key in res.get_all_result_keys():
            params = res.get_result_params(key)
            combos = list(itertools.product(*params)) if params else [()]
            for combo, value in zip(combos, res.get_result_value(key, params)):
                if is_exact(key, combo):
                    name = f"{key}({', '.join(combo)})" if combo else key
                    out[(res.env_name, name)] = (value, res.benchmark_version.get(key))
    return out


def _missing(v: Any) -> bool:
    return isinstance(v, float) and v != v


def _mark(before: tuple[Any, Any], after: tuple[Any, Any]) -> str | None:
    """asv compare's marks for one exact figure, with no tolerance: ``+`` larger, ``-`` smaller, ``!``
    newly failed, ``*`` fixed, ``x`` another benchmark version; None when unchanged or skipped."""
    (a, va), (b, vb) = before, after
    if _missing(a) or _missing(b):
        return None
    if va is not None and vb is not None and va != vb:
        return "x"
    if a is None or b is None:
        return None if a is None and b is None else ("!" if b is None else "*")
    return None if a == b else ("+" if b > a else "-")


def exact_changes(before: Mapping[tuple[str, str], tuple[Any, Any]],
                  after: Mapping[tuple[str, str], tuple[Any, Any]]) -> list[dict[str, Any]]:
    """Every exact figure that differs between two commits' :func:`_exact_values`, by name:
    ``mark`` (:func:`_mark`), ``env``, ``name``, ``before``/``after`` (value; None failed) and
    ``ratio`` (after / before; None where either is not a number or ``before`` is 0)."""
    rows = []
    for key in sorted(set(before) & set(after), key=lambda k: (k[1], k[0])):
        mark = _mark(before[key], after[key])
        if mark is None:
            continue
        a, b = before[key][0], after[key][0]
        ratio = b / a if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else None
        rows.append({"mark": mark, "env": key[0], "name": key[1], "before": a, "after": b, "ratio": ratio})
    return rows


def _shown(v: Any) -> str:
    if v is None:
        return "failed"
    if _missing(v):
        return "n/a"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:.6g}"


def _exact_report(rows: list[dict[str, Any]], compared: int) -> str:
    """The exact table: one line per changed figure (values in full: bytes to the byte)."""
    head = "Exact figures (NOTE [ exact figures ] in benchmarks/asv_host.py): every change, no tolerance"
    if not rows:
        return f"{head}\n  none of the {compared} exact figure(s) measured at both commits changed"
    lines = [head, f"  {'':1} {'before':>16} {'after':>16} {'ratio':>9}  benchmark (parameters)"]
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.4f}"
        lines.append(f"  {r['mark']:1} {_shown(r['before']):>16} {_shown(r['after']):>16} {ratio:>9}  {r['name']}")
    return "\n".join(lines)


def _commit(name: str, repo: Path) -> str:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0 or not out.stdout.strip():
        raise ValueError(f"commit {name!r} is not known to git in {repo}; give a hash, branch or tag of it")
    return out.stdout.strip()


def compare(a: str, b: str, machine: str, *, conf_path: str | os.PathLike = "asv.conf.json", exact_only: bool = False,
            asv: Sequence[str] = (sys.executable, "-m", "asv")) -> int:
    """``asv compare --split`` of commits ``a`` and ``b`` on ``machine`` (asv's factor and statistics;
    left out with ``exact_only``), then every change of an exact figure (:func:`exact_changes`).

    Returns:
        1 when an exact figure rose or newly failed (or ``asv compare`` failed), else 0.

    Raises:
        ValueError: a commit git does not know, or one without results of ``machine``.
    """
    results, repo = config_results_dir(conf_path), _config_path(conf_path, "repo", ".")
    hashes = [_commit(c, repo) for c in (a, b)]
    rc = 0
    if not exact_only:
        rc = subprocess.run([*asv, "compare", "--config", str(conf_path), "--machine", machine, "--split",
                             *hashes]).returncode
    from asv.util import UserError

    try:
        values = [_exact_values(results, machine, h) for h in hashes]
    except UserError as exc:  # an ambiguous prefix, a malformed file
        raise ValueError(f"asv could not read the results of machine {machine!r} in {results}: {exc}") from None
    for name, h, v in zip((a, b), hashes, values):
        if v is None:
            raise ValueError(f"commit {name} ({h[:8]}) has no results of machine {machine!r} in {results}; "
                             f"measure it first (make asv-run ASV_RANGE={h[:8]}^!)")
    rows = exact_changes(*values)
    both = [k for k in set(values[0]) & set(values[1])
            if all(isinstance(v[k][0], (int, float)) and not _missing(v[k][0]) for v in values)]
    print(_exact_report(rows, len(both)))
    return 1 if rc or any(r["mark"] in "+!" for r in rows) else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.asv_host", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("name", help="print the machine name derived from this host")
    reg = sub.add_parser("register", help="record a machine in ~/.asv-machine.json")
    reg.add_argument("machine")
    where = reg.add_mutually_exclusive_group()
    where.add_argument("--results", default=None, help="asv results directory (default: results)")
    where.add_argument("--config", default=None, help="asv configuration whose results_dir asv will write")
    how = reg.add_mutually_exclusive_group()
    how.add_argument("--force", action="store_true", help="register the recorded facts even if they differ from this host's")
    how.add_argument("--scratch", action="store_true", help="a throw-away results directory: this host's facts, no check")
    scr = sub.add_parser("scratch-config", help="write asv.conf.json with results under .asv/scratch-results")
    scr.add_argument("out")
    sub.add_parser("spread", help="the lines of standard input (commits, oldest first) in spread order")
    his = sub.add_parser("history-config", help="write asv.conf.json installing each commit from its checkout")
    his.add_argument("out")
    mis = sub.add_parser("missing-times", help="the lines of standard input (main, oldest first) that the time "
                         "history of --machine lacks (NOTE [ the time history appends ])")
    mis.add_argument("--machine", required=True)
    mis.add_argument("--config", default="asv.conf.json")
    mis.add_argument("--first", type=int, default=50, help="with no timed commit yet: the newest N commits")
    cmp_ = sub.add_parser("compare", help="asv compare, then every change of an exact figure (no tolerance)")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    cmp_.add_argument("--machine", required=True)
    cmp_.add_argument("--config", default="asv.conf.json")
    cmp_.add_argument("--exact-only", action="store_true", help="only the exact figures (after asv continuous)")
    return parser


def _register(args: argparse.Namespace) -> int:
    results = config_results_dir(args.config) if args.config else Path(args.results or "results")
    entry = register(args.machine, results_dir=results, force=args.force, scratch=args.scratch)
    facts = ", ".join(f"{k}={v}" for k, v in entry.items() if k not in ("machine", "version"))
    print(f"asv machine {args.machine!r}: {facts}\n"
          f"  in ~/.asv-machine.json; asv runs with --machine {args.machine} write {results}/{args.machine}/")
    return 0


def _write_json(out: str, conf: dict[str, Any]) -> int:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(conf, indent=4) + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "name":
            print(default_name())
            return 0
        if args.command == "register":
            return _register(args)
        if args.command == "history-config":
            return _write_json(args.out, source_install_config())
        if args.command == "scratch-config":
            return _write_json(args.out, scratch_config())
        if args.command == "compare":
            return compare(args.a, args.b, args.machine, conf_path=args.config, exact_only=args.exact_only)
        lines = [line.strip() for line in sys.stdin if line.strip()]
        if args.command == "missing-times":
            timed = timed_commits(config_results_dir(args.config), valid_name(args.machine))
            print("\n".join(missing_history(lines, timed, args.first)))
            return 0
        print("\n".join(spread_order(lines)))
    except (ValueError, MachineClash) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
