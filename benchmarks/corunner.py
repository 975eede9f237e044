"""``make asv-corunner``: ``asv continuous`` beside two memlab sweeps (issue 47, item 2).

Not a benchmark (asv imports it and finds nothing to run).  In a throw-away clone of this repository
(``.asv/corunner/repo``) it makes two children of the base commit: a README-only commit, and a
commit whose chunked slice loop does a third more work (two more ``[chunk, d] @ [d, hidden]``
products per chunk under ``no_grad``; a training step is six such products: +33%, as issue 47's
c92e4cd).  Then, while two real ``memlab sweep`` processes (full grids of two families, restarted
when they end) run beside it, it runs ``asv continuous`` over each pair with the relative time's
samples (NOTE [ the relative time as samples ] in ``common.py``), records the 1-minute load average
every ``--load-every`` seconds, stops the sweeps, and says per pair whether asv flagged it.

NOTE [ co-runner comparison ]
What a user on a shared runner needs from ``asv continuous`` is that a change it flags is the code's,
not the neighbours'.  Busy loops do not test that: thread CPU time ignores a descheduled thread but
not a memory-bound step slowed by memory-heavy neighbours (NOTE [ CPU time and load ] in
memlab/measurement/timing.py), so the neighbours here are memlab's own sweeps.  Expected: the
README-only pair ``unchanged`` (asv prints "BENCHMARKS NOT SIGNIFICANTLY CHANGED."), the +33% pair
``decreased`` ("PERFORMANCE DECREASED.").  Exit 0 only when both come out so; a pair whose benchmarks
failed or were skipped is ``failed``, never ``unchanged``.  The results, the clone and the sweeps'
output stay under ``.asv/corunner`` (untracked); the loads and verdicts are printed and written to
``.asv/corunner/summary.json``.  Runs: docs/evidence/asv-runs.md#co-runner-comparison
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["PAIRS", "EXPECTED", "DEFAULT_BENCH", "DEFAULT_FAMILIES", "SLOW_FILE", "Plan", "make_plan",
           "make_commits", "CoRunners", "LoadSampler", "load_summary", "verdict", "table_rows", "main"]

ROOT = Path(__file__).resolve().parents[1]
#: the two pairs, base against each, and what a good comparison says of each
PAIRS = ("readme-only", "slowdown")
EXPECTED = {"readme-only": "unchanged", "slowdown": "decreased"}
#: the relative time of the slice loop at the chunk sizes of the chunking grid (issue 47's false alarm: 200)
DEFAULT_BENCH = r"ChainedMatmul\.track_relative_step_time\('slice_loop', (2000|500|200), 'cpu'\)"
#: the co-runners: each family's full grid at memlab's default settings
DEFAULT_FAMILIES = ("chunking", "tensor_train")
#: the file the slowdown commit changes, and the line of the slice loop it follows
SLOW_FILE = "memlab/families/chunking/techniques.py"
_SLOW_LINE = "            y[st:ed] = (x[st:ed] @ w1) @ w2\n"
_SLOW_EXTRA = ("            with torch.no_grad():  # +1/3 of a step's six products (asv-corunner's slowdown)\n"
               "                x[st:ed] @ w1\n"
               "                x[st:ed] @ w1\n")
_VERDICTS = (("PERFORMANCE DECREASED.", "decreased"), ("PERFORMANCE INCREASED.", "increased"),
             ("BENCHMARKS NOT SIGNIFICANTLY CHANGED.", "unchanged"))


@dataclass(frozen=True)
class Plan:
    """What one co-runner comparison runs (paths absolute; commands as argument lists)."""

    work: Path
    base: str
    bench: str
    machine: str
    sweeps: tuple[tuple[str, ...], ...]
    asv: str
    load_every_s: float = 10.0

    @property
    def config(self) -> Path:
        return self.work / "asv.conf.json"

    def continuous(self, commit: str, base: str | None = None) -> list[str]:
        """``asv continuous`` of ``base`` (default: the plan's) against ``commit``: every row shown."""
        return [self.asv, "continuous", "--config", str(self.config), "--machine", self.machine,
                "--no-only-changed", "--show-stderr", "-b", self.bench, base or self.base, commit]

    def lines(self) -> list[str]:
        """The plan in words, one step a line."""
        out = [f"scratch clone: {self.work / 'repo'}, base {self.base}; commits: {', '.join(PAIRS)}",
               *(f"co-runner {k + 1}: {' '.join(c)} (restarted when it ends)" for k, c in enumerate(self.sweeps)),
               f"asv setup (the environment, before the co-runners start); load average every {self.load_every_s:g} s"]
        out += [f"{name}: {' '.join(self.continuous(f'<{name}>'))} (expected: {EXPECTED[name]})" for name in PAIRS]
        return out


def make_plan(*, work: str | os.PathLike = ".asv/corunner", base: str = "HEAD", bench: str = DEFAULT_BENCH,
              machine: str, families: Sequence[str] = DEFAULT_FAMILIES, asv: str = "asv",
              python: str = sys.executable, load_every_s: float = 10.0) -> Plan:
    """The plan; ``families`` must name two distinct families (the two sweeps beside the comparison)."""
    if len(families) != 2 or families[0] == families[1]:
        raise ValueError(f"families={list(families)!r} is not valid: expected two distinct family names")
    if not load_every_s > 0:
        raise ValueError(f"load_every_s={load_every_s!r} is not valid: expected seconds > 0")
    sweeps = tuple((python, "-m", "memlab", "sweep", "--family", f) for f in families)
    return Plan(Path(work).resolve(), base, bench, machine, sweeps, asv, load_every_s)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, base: str, path: str, change: Callable[[str], str], message: str) -> str:
    """A child of ``base`` in ``repo`` whose only change is ``change`` applied to ``path``; its hash."""
    _git(repo, "checkout", "-q", "--detach", base)
    file = repo / path
    file.write_text(change(file.read_text(encoding="utf-8")), encoding="utf-8")
    _git(repo, "-c", "user.name=memlab asv-corunner", "-c", "user.email=asv-corunner@localhost",
         "commit", "-q", "-m", message, "--", path)
    return _git(repo, "rev-parse", "HEAD")


def _slower(text: str) -> str:
    """``SLOW_FILE`` with a third more work in the slice loop; a ValueError naming the line if it is not there once."""
    if text.count(_SLOW_LINE) != 1:
        raise ValueError(f"{SLOW_FILE}: expected the slice loop's line {_SLOW_LINE.strip()!r} exactly once, found "
                         f"{text.count(_SLOW_LINE)}")
    return text.replace(_SLOW_LINE, _SLOW_LINE + _SLOW_EXTRA)


def make_commits(source: Path, work: Path, base: str = "HEAD") -> dict[str, str]:
    """Clone ``source`` into ``work/repo`` (replacing it) and make the two children of ``base``:
    ``{"base": hash, "readme-only": hash, "slowdown": hash}``."""
    repo = work / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(source), str(repo)], check=True)
    sha = _git(source, "rev-parse", base)
    readme = _commit(repo, sha, "README.md", lambda t: t + "\nA README-only change (make asv-corunner).\n",
                     "README: one more line (asv-corunner's README-only commit)")
    slow = _commit(repo, sha, SLOW_FILE, _slower, "slice loop: a third more work (asv-corunner's slowdown commit)")
    return {"base": sha, "readme-only": readme, "slowdown": slow}


@dataclass
class CoRunners:
    """Processes started beside a comparison, each restarted when it ends (at most ``max_restarts``
    times), each the leader of its own session so that :meth:`stop` ends it with its children."""

    commands: Sequence[Sequence[str]]
    log_dir: Path
    max_restarts: int = 100
    starts: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _spawn(self, k: int) -> subprocess.Popen:
        with open(self.log_dir / f"corunner-{k + 1}.log", "ab") as log:
            proc = subprocess.Popen(list(self.commands[k]), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.starts[k] += 1
        return proc

    def _watch(self, k: int) -> None:
        while True:
            self.procs[k].wait()
            with self._lock:
                if self._stop.is_set() or self.starts[k] > self.max_restarts:
                    return
                self.procs[k] = self._spawn(k)

    def start(self) -> None:
        """Start every command (each running when this returns) and a thread that restarts it."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.starts = [0] * len(self.commands)
        self.procs = [self._spawn(k) for k in range(len(self.commands))]
        self._threads = [threading.Thread(target=self._watch, args=(k,), daemon=True) for k in range(len(self.commands))]
        for t in self._threads:
            t.start()

    def stop(self, grace_s: float = 30.0) -> list[int | None]:
        """SIGTERM each process group (a sweep keeps its finished rows and stops its measurement),
        SIGKILL after ``grace_s``; returns their exit codes."""
        with self._lock:
            self._stop.set()
            procs = list(self.procs)
        for p in procs:
            _signal_group(p, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()
        for t in self._threads:
            t.join(grace_s)
        return [p.returncode for p in procs]


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LoadSampler:
    """The 1-minute load average every ``every_s`` seconds while it runs (``with LoadSampler(10) as s``)."""

    def __init__(self, every_s: float, read: Callable[[], float] = lambda: os.getloadavg()[0]):
        self.every_s, self.read, self.samples = every_s, read, []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append(round(self.read(), 2))
            if self._done.wait(self.every_s):
                return

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        self.samples.append(round(self.read(), 2))


def load_summary(samples: Sequence[float]) -> dict[str, float | int | None]:
    """``{"min", "median", "max", "samples"}`` of 1-minute load averages (None without samples)."""
    if not samples:
        return {"min": None, "median": None, "max": None, "samples": 0}
    return {"min": min(samples), "median": statistics.median(samples), "max": max(samples), "samples": len(samples)}


def table_rows(output: str) -> list[dict[str, str]]:
    """asv's comparison table rows (``tablefmt="github"``): ``{"mark", "before", "after", "ratio", "benchmark"}``."""
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if len(cells) == 5 and cells[0] != "Change" and "(" in cells[4]:  # not the header, not the rule
            rows.append(dict(zip(("mark", "before", "after", "ratio", "benchmark"), cells)))
    return rows


def verdict(output: str, bench: str | None = None) -> str:
    """``decreased``, ``increased`` or ``unchanged`` as asv continuous's closing line says; ``failed``
    when it has none, or when a row of the selection compared nothing (a failed or skipped benchmark).
    ``bench``: the ``-b`` regex; asv lists every combination of a selected benchmark, those it did not
    run as ``n/a`` in both columns, which are not the selection's."""
    rows = [r for r in table_rows(output) if bench is None or re.search(bench, r["benchmark"])]
    if not rows or any("failed" in (r["before"], r["after"]) or r["ratio"] == "n/a" for r in rows):
        return "failed"
    return next((word for line, word in _VERDICTS if line in output), "failed")


def _config(plan: Plan, repo: Path) -> dict:
    """asv.conf.json installing each commit of the scratch clone from its checkout (NOTE [ source
    install ] in asv_host.py), results under the plan's folder, the environment shared."""
    from benchmarks.asv_host import source_install_config

    conf = source_install_config(ROOT / "asv.conf.json")
    conf.update(repo=str(repo), results_dir=str(plan.work / "results"), html_dir=str(plan.work / "html"))
    return conf


def _compare(plan: Plan, name: str, commits: dict[str, str]) -> dict:
    """Run one pair under the load sampler; its verdict, loads, asv's exit code and table rows."""
    started = time.monotonic()
    with open(plan.work / f"{name}.log", "w", encoding="utf-8") as log, LoadSampler(plan.load_every_s) as loads:
        proc = subprocess.Popen(plan.continuous(commits[name], commits["base"]), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:  # shown as asv prints it, kept for the verdict
            lines.append(line)
            log.write(line)
            print(line, end="", flush=True)
        code = proc.wait()
    output = "".join(lines)
    said = verdict(output, plan.bench)
    return {"pair": name, "commit": commits[name], "verdict": said, "expected": EXPECTED[name],
            "as_expected": said == EXPECTED[name], "asv_exit": code, "minutes": (time.monotonic() - started) / 60,
            "load": load_summary(loads.samples), "rows": table_rows(output)}


def run(plan: Plan) -> int:
    """Make the commits, start the co-runners, compare both pairs, stop them; 0 when both are as expected."""
    from benchmarks.asv_host import register

    print("\n".join(plan.lines()), flush=True)
    began = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    commits = make_commits(ROOT, plan.work, plan.base)
    plan.config.write_text(json.dumps(_config(plan, plan.work / "repo"), indent=4) + "\n", encoding="utf-8")
    register(plan.machine, results_dir=plan.work / "results", scratch=True)
    # the environment before the co-runners: building it (torch installed once) is not what is compared.
    # Its exit code is not read: asv 0.6.6's setup returns its list of environments, which asv's main
    # turns into exit status 1 even when every environment was made; asv continuous fails if one was not
    subprocess.run([plan.asv, "setup", "--config", str(plan.config)])
    sweeps = CoRunners(plan.sweeps, plan.work)
    sweeps.start()
    try:
        pairs = [_compare(plan, name, commits) for name in PAIRS]
    finally:
        codes = sweeps.stop()
    summary = {"began": began, "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": os.uname().nodename,
               "cores": os.cpu_count(), "commits": commits, "pairs": pairs, "co_runners": [" ".join(c) for c in plan.sweeps],
               "co_runner_starts": sweeps.starts, "co_runner_exit": codes}
    (plan.work / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for p in pairs:
        load = p["load"]
        print(f"{p['pair']}: {p['verdict']} (expected {p['expected']}), asv exit {p['asv_exit']}, "
              f"{p['minutes']:.1f} min, load {load['min']}-{load['max']} (median {load['median']}, "
              f"{load['samples']} samples)")
    print(f"co-runners started {sweeps.starts} time(s), stopped with exit codes {codes}")
    return 0 if all(p["as_expected"] for p in pairs) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.corunner", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("plan", "run"))
    parser.add_argument("--machine", required=True, help="the asv machine name (a scratch name: results stay here)")
    parser.add_argument("--asv", default=str(Path(sys.executable).with_name("asv")))
    parser.add_argument("--base", default="HEAD")
    parser.add_argument("--bench", default=DEFAULT_BENCH, help="asv -b regex (default: %(default)s)")
    parser.add_argument("--families", default=",".join(DEFAULT_FAMILIES), help="the two co-runners' families")
    parser.add_argument("--work", default=str(ROOT / ".asv" / "corunner"))
    parser.add_argument("--load-every", type=float, default=10.0, help="seconds between load samples")
    args = parser.parse_args(argv)
    try:
        plan = make_plan(work=args.work, base=args.base, bench=args.bench, machine=args.machine,
                         families=[f.strip() for f in args.families.split(",") if f.strip()], asv=args.asv,
                         load_every_s=args.load_every)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "plan":
        print("\n".join(plan.lines()))
        return 0
    return run(plan)


if __name__ == "__main__":
    sys.exit(main())
