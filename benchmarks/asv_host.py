"""This host's side of running asv: its machine name and facts, and a scratch configuration.

Run from the repository root (``Makefile.asv`` does)::

    python -m benchmarks.asv_host name                 # the machine name derived from the host
    python -m benchmarks.asv_host register NAME        # record NAME in ~/.asv-machine.json
    python -m benchmarks.asv_host scratch-config OUT   # asv.conf.json with results under .asv/
    git rev-list --reverse A^..main | python -m benchmarks.asv_host spread   # commits, spread order
    python -m benchmarks.asv_host history-config OUT   # asv.conf.json installing commits from source

asv imports every module of ``benchmarks/`` while discovering benchmarks, in environments that have
``asv_runner`` but not ``asv``: this module defines no benchmark and imports asv only inside
:func:`detect`.

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
  files of one machine stay one line; registration refuses when the architecture, CPU count or
  GPU recorded there differ from this host's (``--force`` after a real upgrade of that host).
"""
from __future__ import annotations

import argparse
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

__all__ = ["CI_MACHINE", "HARDWARE_KEYS", "MachineClash", "default_name", "valid_name", "detect", "detect_gpu",
           "register", "scratch_config", "source_install_config", "spread_order"]

CI_MACHINE = "memlab-ci-2core"
#: facts that tell two hosts apart; a recorded one that differs from this host's refuses registration
HARDWARE_KEYS = ("arch", "num_cpu", "gpu")
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


def register(name: str, *, results_dir: str | os.PathLike = "results", machine_file: str | os.PathLike | None = None,
             facts: Mapping[str, str] | None = None, force: bool = False) -> dict[str, Any]:
    """Record machine ``name`` in asv's machine file (``~/.asv-machine.json`` by default).

    Args:
        name: the machine name (see :func:`valid_name`).
        results_dir: asv's results directory; ``<results_dir>/<name>/machine.json``, when present,
            supplies the facts (see NOTE [ one machine, one history ]).
        machine_file: asv's machine file; default ``~/.asv-machine.json``.
        facts: this host's facts (default :func:`detect`).
        force: register even when the recorded hardware differs from this host's.

    Returns:
        the entry written: ``machine`` plus the facts.

    Raises:
        ValueError: invalid name.
        MachineClash: ``results/<name>/`` records other hardware (and not ``force``).
    """
    from asv.machine import MachineCollection

    valid_name(name)
    host = dict(detect() if facts is None else facts)
    recorded = _recorded(Path(results_dir), name)
    if recorded is None:
        entry = {"machine": name, **host}
    else:
        differ = {k: (recorded[k], host.get(k)) for k in HARDWARE_KEYS
                  if k in recorded and str(recorded[k]) != str(host.get(k))}
        if differ and not force:
            shown = "; ".join(f"{k}: recorded {a!r}, this host {b!r}" for k, (a, b) in differ.items())
            raise MachineClash(f"{Path(results_dir) / name}/ holds results of another host ({shown}); choose "
                               f"another name (ASV_MACHINE=<name>), or pass --force if this is that host, upgraded")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.asv_host", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("name", help="print the machine name derived from this host")
    reg = sub.add_parser("register", help="record a machine in ~/.asv-machine.json")
    reg.add_argument("machine")
    reg.add_argument("--results", default="results", help="asv results directory (default: results)")
    reg.add_argument("--force", action="store_true", help="register even if results/<name>/ records other hardware")
    scr = sub.add_parser("scratch-config", help="write asv.conf.json with results under .asv/scratch-results")
    scr.add_argument("out")
    spr = sub.add_parser("spread", help="the lines of standard input (commits, oldest first) in spread order")
    his = sub.add_parser("history-config", help="write asv.conf.json installing each commit from its checkout")
    his.add_argument("out")
    args = parser.parse_args(argv)
    try:
        if args.command == "name":
            print(default_name())
        elif args.command == "register":
            entry = register(args.machine, results_dir=args.results, force=args.force)
            facts = ", ".join(f"{k}={v}" for k, v in entry.items() if k not in ("machine", "version"))
            print(f"asv machine {args.machine!r}: {facts}\n"
                  f"  in ~/.asv-machine.json; asv runs with --machine {args.machine} write {args.results}/{args.machine}/")
        elif args.command == "history-config":
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(source_install_config(), indent=4) + "\n", encoding="utf-8")
        elif args.command == "spread":
            lines = [line.strip() for line in sys.stdin if line.strip()]
            print("\n".join(spread_order(lines)))
        else:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(scratch_config(), indent=4) + "\n", encoding="utf-8")
    except (ValueError, MachineClash) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
