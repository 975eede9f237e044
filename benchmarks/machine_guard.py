"""The machine guard inside the benchmarks: no figure is filed under a committed machine's name
from a host whose facts are not the ones committed for it, whichever command started asv.

NOTE [ the guard inside the benchmarks ]
``make asv-machine`` refuses a name whose ``results/<name>/machine.json`` records another host
(NOTE [ one machine, one history ] in ``benchmarks/asv_host.py``), but only the Makefile ran that
check: with a fresh HOME, plain ``asv machine --yes`` then ``asv run`` rewrote the committed
``results/vm/machine.json`` with this host's facts and would have filed figures under ``vm``.  asv
passes a benchmark neither the machine name nor the results directory (asv 0.6.6: the benchmark
processes get ``os.environ`` plus ``ASV_CONF_DIR``, ``ASV_ENV_NAME``... from
``asv/environment.py``; ``asv/commands/run.py`` writes ``results/<machine>/machine.json`` from
``~/.asv-machine.json`` before any benchmark runs).  So :func:`check` finds the asv process that
started this one (its command line and working directory, from ``/proc``), resolves the machine
name as asv does (``--machine``/``-m``, else the host name looked up in ``~/.asv-machine.json``, or
its only entry) and the results directory from the configuration asv read, and compares the facts
committed in git for that machine (``git show HEAD:<results>/<name>/machine.json``) with this
host's (:func:`host_facts`: os, arch, cpu, num_cpu, ram, gpu; the comparison is
:func:`benchmarks.asv_host.fact_differences`, the Makefile's).  On a difference every benchmark's
setup fails (``common.py``) with one line naming each differing fact: asv records every
combination as failed, so no figure is filed there, and ``asv run`` exits non-zero.

What it cannot stop: asv itself rewrites ``results/<name>/machine.json`` (and writes a results
file holding only failures) before and after the benchmarks run; ``git status`` shows both and
``git checkout results/<name>/machine.json`` restores the committed facts.  Where the guard does
not apply: a machine with no committed ``machine.json`` (a new name, the scratch names of ``make
asv-continuous``/``asv-quick``), asv commands that file nothing (``check``, ``profile``, ``run
--dry-run``...), a process not started by asv (the tests), and a host without ``/proc`` (no
ancestor is found).
``MEMLAB_ASV_FORCE=1`` (``make ... ASV_FORCE=1``: that same host after an upgrade) accepts the
host's differences but still fails when the facts asv files (the working tree's ``machine.json``)
are not the committed ones.  A fact this module cannot read on this host is not compared.
Evidence: docs/asv.md#the-machine-guard
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import asv_host

__all__ = ["FORCE_ENV", "FILING_COMMANDS", "AsvRun", "host_facts", "asv_ancestor", "parse_asv_args",
           "default_machine", "committed_facts", "mismatch", "check"]

#: set to 1 to file under a committed machine whose facts differ from this host's (same host, upgraded)
FORCE_ENV = "MEMLAB_ASV_FORCE"
#: asv commands that write results into ``results/<machine>/`` (``run`` unless ``--dry-run``/``-n``)
FILING_COMMANDS = ("run", "continuous")
#: ancestors walked up from this process looking for asv (fork server, then asv itself)
MAX_DEPTH = 16


@dataclass(frozen=True)
class AsvRun:
    """The asv command that started this process: ``command`` (``run``...), ``conf`` (the
    configuration file asv read, absolute), ``machine`` (the ``--machine`` given, or None),
    ``dry_run`` (``--dry-run``/``-n``: asv saves no results)."""

    command: str
    conf: Path
    machine: str | None
    dry_run: bool = False


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _first_line_value(text: str | None, key: str) -> str | None:
    for line in (text or "").splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == key:
            return value.strip()
    return None


def host_facts(proc: str = "/proc") -> dict[str, str]:
    """This host's facts as asv records them: ``os`` ("Linux 6.18.44-..."), ``arch``, ``cpu`` (the
    first ``model name`` of ``cpuinfo``), ``num_cpu``, ``ram`` (bytes of ``MemTotal``) and ``gpu``
    (:func:`benchmarks.asv_host.detect_gpu`).  A fact that cannot be read here is left out."""
    facts = {"os": f"{platform.system()} {platform.release()}", "arch": platform.machine(),
             "num_cpu": str(os.cpu_count() or "")}
    cpu = _first_line_value(_read(Path(proc) / "cpuinfo"), "model name")
    if cpu:
        facts["cpu"] = cpu
    mem = _first_line_value(_read(Path(proc) / "meminfo"), "MemTotal")
    if mem and mem.split()[0].isdigit():
        facts["ram"] = str(int(mem.split()[0]) * (1024 if mem.endswith("kB") else 1))
    facts["gpu"] = asv_host.detect_gpu(proc_dir=str(Path(proc) / "driver" / "nvidia" / "gpus"))
    return {k: v for k, v in facts.items() if v}


def _asv_args(argv: Sequence[str]) -> list[str] | None:
    """The arguments after asv's own name in a command line (``.../bin/asv run ...``, ``python -m
    asv run ...``, ``.../asv/__main__.py run ...``), or None when it is not asv's."""
    for i, arg in enumerate(argv):
        if os.path.basename(arg) == "asv" or arg.endswith(os.path.join("asv", "__main__.py")):
            return list(argv[i + 1:])
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] == "asv":
            return list(argv[i + 2:])
    return None


def _parent(pid: int, proc: Path) -> int | None:
    """The parent pid from ``/proc/<pid>/stat`` (the field after the parenthesised command name)."""
    stat = _read(proc / str(pid) / "stat")
    if not stat or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def asv_ancestor(pid: int | None = None, proc: str = "/proc") -> tuple[list[str], Path] | None:
    """``(asv's arguments, asv's working directory)`` of the nearest ancestor of ``pid`` (default:
    this process's parent) that runs asv, walking up at most :data:`MAX_DEPTH` processes; None
    when there is none or ``/proc`` cannot be read."""
    root = Path(proc)
    current = os.getppid() if pid is None else pid
    for _ in range(MAX_DEPTH):
        if not current or current <= 1:
            return None
        raw = _read(root / str(current) / "cmdline")
        args = _asv_args([a for a in (raw or "").split("\0") if a])
        if args is not None:
            try:
                return args, Path(os.readlink(root / str(current) / "cwd"))
            except OSError:
                return None
        current = _parent(current, root)
    return None


def _option(arg: str, rest: Sequence[str], long: str, short: str | None) -> tuple[bool, str | None, int]:
    """Whether ``arg`` is option ``long`` (or a unique abbreviation of it from 5 characters on, as
    argparse accepts, or ``short``), its value, and how many of ``rest`` it consumed."""
    name, eq, value = arg.partition("=")
    if name.startswith("--") and len(name) >= 5 and long.startswith(name):
        if eq:
            return True, value, 0
        return True, (rest[0] if rest else None), 1
    if short and arg == short:
        return True, (rest[0] if rest else None), 1
    if short and arg.startswith(short) and not arg.startswith("--"):
        return True, arg[len(short):], 0
    return False, None, 0


def parse_asv_args(args: Sequence[str], cwd: Path) -> AsvRun | None:
    """The command, configuration and ``--machine`` of asv's arguments ``args``; ``cwd`` is asv's
    working directory, which asv moved to the configuration's directory (``asv/main.py``).  None
    when no command is named."""
    command, config, machine, dry_run, i = None, None, None, False, 0
    while i < len(args):
        arg, rest = args[i], args[i + 1:]
        found, value, used = _option(arg, rest, "--config", None)
        if found:
            config, i = value, i + 1 + used
            continue
        found, value, used = _option(arg, rest, "--machine", "-m") if command else (False, None, 0)
        if found:
            machine, i = value, i + 1 + used
            continue
        if command is None and not arg.startswith("-"):
            command = arg
        elif command and (arg == "-n" or (len(arg) >= 5 and "--dry-run".startswith(arg))):
            dry_run = True
        i += 1
    if command is None:
        return None
    conf = cwd / (os.path.basename(config) if config else "asv.conf.json")
    return AsvRun(command=command, conf=conf, machine=machine, dry_run=dry_run)


def default_machine(machine_file: Path, node: str | None = None) -> str:
    """The machine asv runs as without ``--machine`` (``asv/machine.py``): the host name's entry in
    ``machine_file`` (``~/.asv-machine.json``), else its only entry, its ``machine`` value; else
    the host name itself."""
    node = platform.node() if node is None else node
    try:
        entries = {k: v for k, v in json.loads(machine_file.read_text(encoding="utf-8")).items() if k != "version"}
    except (OSError, ValueError, AttributeError):
        entries = {}
    entry = entries.get(node) or (next(iter(entries.values())) if len(entries) == 1 else None)
    return str(entry.get("machine", node)) if isinstance(entry, dict) else node


def _results_dir(conf: Path) -> Path | None:
    """``results_dir`` of asv's configuration (``//`` comment lines allowed), relative to its
    directory; None when it cannot be read."""
    try:
        lines = conf.read_text(encoding="utf-8").splitlines()
        data = json.loads("\n".join(ln for ln in lines if not ln.lstrip().startswith("//")))
    except (OSError, ValueError):
        return None
    value = Path(data.get("results_dir", "results")) if isinstance(data, dict) else Path("results")
    return value if value.is_absolute() else conf.parent / value


def committed_facts(results_dir: Path, name: str) -> dict[str, Any] | None:
    """The ``machine.json`` of ``name`` as committed in git (``HEAD``) in ``results_dir``'s
    repository, or None where the directory is not in git or the file is not committed."""
    if not results_dir.is_dir():
        return None
    try:
        out = subprocess.run(["git", "-C", str(results_dir), "show", f"HEAD:./{name}/machine.json"],
                             capture_output=True, text=True, timeout=60)
        data = json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def mismatch(folder: str, committed: Mapping[str, Any] | None, host: Mapping[str, str],
             filed: Mapping[str, Any] | None = None, forced: bool = False) -> str | None:
    """One line saying why figures must not be filed in ``folder`` (``results/<name>``), or None.

    ``committed``: its committed ``machine.json`` (None: nothing committed, nothing to guard);
    ``host``: this host's facts (a fact missing here is not compared); ``filed``: the facts asv is
    filing (the working tree's ``machine.json``); ``forced``: :data:`FORCE_ENV` is set, so only
    ``filed`` must equal ``committed``.
    """
    if committed is None:
        return None
    if forced:
        differ = asv_host.fact_differences(committed, dict(filed or {}))
        if not differ:
            return None
        return (f"{folder}/machine.json is committed with other facts than asv is filing "
                f"({'; '.join(differ).replace('this host', 'filed')}) although {FORCE_ENV}=1: register the "
                f"committed facts (make asv-machine ASV_MACHINE=<name> ASV_FORCE=1) before asv run")
    differ = asv_host.fact_differences({k: v for k, v in committed.items() if k in host}, host)
    if not differ:
        return None
    return (f"{folder}/ holds the committed results of another host ({'; '.join(differ)}): every benchmark "
            f"fails so that no figure is filed there; give this host its own machine name (make asv-run "
            f"ASV_MACHINE=<name>, or asv run --machine <name> after make asv-machine ASV_MACHINE=<name>), or "
            f"{FORCE_ENV}=1 (make ... ASV_FORCE=1) if it is that host after an upgrade")


def _facts_file(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check(environ: Mapping[str, str] | None = None, ancestor: tuple[list[str], Path] | None = None,
          host: Mapping[str, str] | None = None) -> str | None:
    """The guard (NOTE [ the guard inside the benchmarks ]): one line naming each fact by which this
    host differs from the committed facts of the machine the asv process above this one files
    under, or None (no asv above, a command that files nothing, nothing committed, or the same
    host).  ``ancestor`` and ``host`` default to :func:`asv_ancestor` and :func:`host_facts`."""
    environ = os.environ if environ is None else environ
    found = asv_ancestor() if ancestor is None else ancestor
    run = parse_asv_args(*found) if found else None
    if run is None or run.command not in FILING_COMMANDS or run.dry_run:
        return None
    results = _results_dir(run.conf)
    if results is None:
        return None
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    name = run.machine or default_machine(home / ".asv-machine.json")
    committed = committed_facts(results, name)
    if committed is None:
        return None
    folder = os.path.relpath(results / name, run.conf.parent)
    return mismatch(folder, committed, host_facts() if host is None else host,
                    filed=_facts_file(results / name / "machine.json"),
                    forced=environ.get(FORCE_ENV, "").strip() not in ("", "0"))
