"""The machine guard inside the benchmarks (benchmarks/machine_guard.py, issue 47 item 4).

NOTE [ the guard inside the benchmarks ] in ``benchmarks/machine_guard.py``.  The unit tests feed the
guard a fake ``/proc``, fake asv command lines and a throw-away git repository; the test marked
``asv`` runs plain ``asv machine --yes`` then ``asv run`` (no ``--machine``, a fresh HOME, this venv)
against a copy whose committed ``results/<host name>/machine.json`` records another host, and checks
that no figure is filed there, then that the same run files one where the committed facts are this
host's.
"""
from __future__ import annotations

import itertools
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import asv_host, common, machine_guard  # noqa: E402
from process_checks import HANG_GUARD_S  # noqa: E402

HOST = {"os": "Linux 6.1", "arch": "x86_64", "cpu": "Test CPU", "num_cpu": "8", "ram": "1000000000", "gpu": "none"}


# -- the decision ----------------------------------------------------------------------------------

def test_nothing_committed_or_the_same_host_files():
    assert machine_guard.mismatch("results/lab", None, HOST) is None
    assert machine_guard.mismatch("results/lab", {"machine": "lab", **HOST, "version": 1}, HOST) is None
    # RAM within asv_host.RAM_TOLERANCE, and a fact this host cannot read, are not differences
    near = {**HOST, "ram": str(int(1e9 * (1 + asv_host.RAM_TOLERANCE / 2)))}
    assert machine_guard.mismatch("results/lab", near, {k: v for k, v in HOST.items() if k != "gpu"}) is None


@pytest.mark.parametrize("key, theirs", [("os", "Linux 0.0-another-kernel"), ("cpu", "Other CPU"), ("num_cpu", "2"),
                                         ("arch", "aarch64"), ("ram", "2000000000"), ("gpu", "NVIDIA A100")])
def test_another_host_is_one_line_naming_the_fact(key, theirs):
    line = machine_guard.mismatch("results/lab", {**HOST, key: theirs}, HOST)
    assert line is not None and "\n" not in line
    assert f"{key}: recorded {theirs!r}, this host {HOST[key]!r}" in line, line
    assert line.startswith("results/lab/ holds the committed results of another host") and "ASV_MACHINE=<name>" in line
    assert line.count(": recorded ") == 1, line


def test_forced_files_only_the_committed_facts():
    """MEMLAB_ASV_FORCE=1 (that host, upgraded): its differences from the host are accepted, but asv
    must be filing the committed facts, not this host's new ones."""
    committed = {**HOST, "os": "Linux 5.0"}
    assert machine_guard.mismatch("results/lab", committed, HOST, filed=committed, forced=True) is None
    line = machine_guard.mismatch("results/lab", committed, HOST, filed=HOST, forced=True)
    assert line is not None and "os: recorded 'Linux 5.0', filed 'Linux 6.1'" in line and "\n" not in line


# -- which asv, which machine, which results ------------------------------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["/v/bin/python3", "/v/bin/asv", "run", "--machine", "lab", "HEAD^!"], ("run", "asv.conf.json", "lab")),
    (["/v/bin/python3", "/v/bin/asv", "run", "--machine=lab", "--config", "/r/.asv/scratch.conf.json"],
     ("run", "scratch.conf.json", "lab")),
    (["python", "-m", "asv", "--config", "conf/x.json", "continuous", "-m", "lab", "a", "b"], ("continuous", "x.json", "lab")),
    (["python", "-m", "asv", "run", "-mlab", "--quick"], ("run", "asv.conf.json", "lab")),
    (["/v/bin/asv", "run", "--mach", "lab", "--conf=y.json"], ("run", "y.json", "lab")),
    (["/v/bin/asv", "run", "--python=same", "-b", "x"], ("run", "asv.conf.json", None)),
    (["/v/bin/asv", "check", "--python=same"], ("check", "asv.conf.json", None)),
])
def test_asv_command_lines_are_read_as_asv_reads_them(argv, expected):
    args = machine_guard._asv_args(argv)
    run = machine_guard.parse_asv_args(args, Path("/work/dir"))
    assert (run.command, run.conf, run.machine) == (expected[0], Path("/work/dir") / expected[1], expected[2])
    assert not run.dry_run


@pytest.mark.parametrize("args", [["run", "--dry-run"], ["run", "-n", "--quick"], ["run", "--dry", "-m", "lab"]])
def test_a_dry_run_files_nothing_and_is_not_guarded(args, tmp_path):
    assert machine_guard.parse_asv_args(args, tmp_path).dry_run
    repo, _ = _repo_with_machine(tmp_path, "lab", {**HOST, "os": "Linux 0.0-another-kernel"})
    assert machine_guard.check({"HOME": str(tmp_path)}, ancestor=([*args, "-m", "lab"], repo), host=HOST) is None
    assert machine_guard.check({"HOME": str(tmp_path)}, ancestor=(["run", "-m", "lab"], repo), host=HOST) is not None


def test_a_command_line_that_is_not_asvs_is_none():
    assert machine_guard._asv_args(["/usr/bin/python3", "-m", "pytest", "tests"]) is None
    assert machine_guard._asv_args(["/usr/bin/python3", "/x/asv_runner/server.py"]) is None
    assert machine_guard.parse_asv_args(["--verbose"], Path("/")) is None


def test_default_machine_is_asvs(tmp_path):
    """No --machine: the host name's entry of ~/.asv-machine.json, else its only entry, else the host name."""
    path = tmp_path / ".asv-machine.json"
    assert machine_guard.default_machine(path, node="vm") == "vm"
    path.write_text(json.dumps({"version": 1, "renamed": {"machine": "renamed", "os": "x"}}))
    assert machine_guard.default_machine(path, node="vm") == "renamed"
    path.write_text(json.dumps({"version": 1, "a": {"machine": "a"}, "vm": {"machine": "vm"}}))
    assert machine_guard.default_machine(path, node="vm") == "vm"
    assert machine_guard.default_machine(path, node="other") == "other"


def _fake_process(proc: Path, pid: int, ppid: int, argv: list[str], cwd: Path) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_text("\0".join(argv) + "\0")
    (d / "stat").write_text(f"{pid} (py (x)) S {ppid} 1 1 0 -1\n")
    (d / "cwd").symlink_to(cwd)


def test_the_asv_ancestor_is_found_above_the_fork_server(tmp_path):
    proc = tmp_path / "proc"
    _fake_process(proc, 300, 200, ["/v/bin/python", "-c", "fork server"], tmp_path)
    _fake_process(proc, 200, 100, ["/v/bin/python3", "/v/bin/asv", "run", "--machine", "lab"], tmp_path / "repo")
    _fake_process(proc, 100, 1, ["make", "asv-run"], tmp_path)
    assert machine_guard.asv_ancestor(300, proc=str(proc)) == (["run", "--machine", "lab"], tmp_path / "repo")
    assert machine_guard.asv_ancestor(100, proc=str(proc)) is None
    assert machine_guard.asv_ancestor(999, proc=str(proc)) is None


def test_host_facts_are_read_as_asv_records_them(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU @ 2GHz\nprocessor\t: 1\nmodel name\t: Test CPU @ 2GHz\n")
    (proc / "meminfo").write_text("MemTotal:       24683788 kB\nMemFree: 1 kB\n")
    facts = machine_guard.host_facts(proc=str(proc))
    assert facts["cpu"] == "Test CPU @ 2GHz" and facts["ram"] == str(24683788 * 1024)
    assert facts["os"] == f"{platform.system()} {platform.release()}" and facts["arch"] == platform.machine()
    assert facts["num_cpu"] == str(os.cpu_count())
    (proc / "cpuinfo").unlink()
    assert "cpu" not in machine_guard.host_facts(proc=str(proc))


def test_asvs_own_detection_agrees_with_the_guards():
    """The guard reads this host without asv (asv's benchmark environments lack it); asv's detection
    in the project venv must give the same facts, or the guard would refuse registered hosts."""
    pytest.importorskip("asv")
    assert machine_guard.host_facts() == {k: v for k, v in asv_host.detect().items() if v}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
                    *args], check=True, capture_output=True, timeout=HANG_GUARD_S)


def _repo_with_machine(tmp_path: Path, name: str, facts: dict) -> tuple[Path, Path]:
    """A git repository whose results/<name>/machine.json is committed with ``facts``; its asv.conf.json."""
    repo = tmp_path / "repo"
    (repo / "results" / name).mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, timeout=HANG_GUARD_S)
    (repo / "results" / name / "machine.json").write_text(json.dumps({"machine": name, **facts, "version": 1}))
    (repo / "asv.conf.json").write_text('{\n    // a comment line, as in the real one\n    "results_dir": "results"\n}\n')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "a committed machine")
    return repo, repo / "asv.conf.json"


def test_check_reads_the_committed_facts_not_the_rewritten_file(tmp_path):
    """asv rewrites results/<name>/machine.json with this host's facts before any benchmark runs: the
    guard compares the committed file, so the rewrite does not hide the other host."""
    repo, _ = _repo_with_machine(tmp_path, "lab", {**HOST, "os": "Linux 0.0-another-kernel"})
    (repo / "results" / "lab" / "machine.json").write_text(json.dumps({"machine": "lab", **HOST, "version": 1}))
    home = {"HOME": str(tmp_path)}
    line = machine_guard.check(home, ancestor=(["run", "--machine", "lab"], repo), host=HOST)
    assert line is not None and "os: recorded 'Linux 0.0-another-kernel', this host 'Linux 6.1'" in line, line
    assert line.startswith("results/lab/ holds"), line
    # the same through asv's default name: this host's name looked up in ~/.asv-machine.json
    (tmp_path / ".asv-machine.json").write_text(json.dumps({"version": 1, "lab": {"machine": "lab", **HOST}}))
    assert machine_guard.check(home, ancestor=(["run"], repo), host=HOST) == line
    # files nothing, another (uncommitted) name, this host's own facts, forced with the committed facts
    assert machine_guard.check(home, ancestor=(["check"], repo), host=HOST) is None
    assert machine_guard.check(home, ancestor=(["run", "--machine", "new"], repo), host=HOST) is None
    assert machine_guard.check(home, ancestor=(["run", "-m", "lab"], repo), host={**HOST, "os": "Linux 0.0-another-kernel"}) is None
    forced = {**home, machine_guard.FORCE_ENV: "1"}
    assert "filed 'Linux 6.1'" in machine_guard.check(forced, ancestor=(["run", "-m", "lab"], repo), host=HOST)
    _git(repo, "checkout", "--", "results/lab/machine.json")
    assert machine_guard.check(forced, ancestor=(["run", "-m", "lab"], repo), host=HOST) is None


def test_check_outside_asv_and_outside_git_is_none(tmp_path):
    assert machine_guard.check({}, host=HOST) is None  # pytest has no asv above it
    (tmp_path / "results" / "lab").mkdir(parents=True)
    (tmp_path / "results" / "lab" / "machine.json").write_text(json.dumps({"machine": "lab", "os": "other"}))
    (tmp_path / "asv.conf.json").write_text("{}")
    assert machine_guard.check({}, ancestor=(["run", "-m", "lab"], tmp_path), host=HOST) is None


# -- every benchmark fails with the line ----------------------------------------------------------

def test_every_benchmark_setup_fails_with_the_guards_line(tmp_path, monkeypatch):
    from benchmarks.bench_chunking import ChainedMatmul
    from benchmarks.bench_resnet import ResNetComplexity

    line = "results/lab/ holds the committed results of another host (os: recorded 'a', this host 'b')"
    monkeypatch.setattr(common, "_MACHINE_MISMATCH", line)
    with pytest.raises(common.BenchmarkFailure) as raised:
        ChainedMatmul().setup(str(tmp_path), "unchunked", 2000, "cpu")
    assert str(raised.value) == line
    with pytest.raises(common.BenchmarkFailure) as raised:
        ResNetComplexity().setup(ResNetComplexity.params[0][0], "cpu")
    assert str(raised.value) == line
    monkeypatch.setattr(common, "_MACHINE_MISMATCH", None)
    ChainedMatmul().setup(str(tmp_path), "unchunked", 2000, "cpu")


ONE = r"bench_chunking\.ChainedMatmul\.track_peak_allocated\('einsum_chunk', 2000, 'cpu'\)"
NAME = "bench_chunking.ChainedMatmul.track_peak_allocated"


def _plain_asv_run(tmp_path: Path, repo: Path) -> tuple[subprocess.CompletedProcess, list]:
    """``asv machine --yes`` then ``asv run`` with no ``--machine``, from a fresh HOME, in this venv;
    the values filed for ``repo``'s HEAD under the host's name."""
    exe = Path(sys.executable).with_name("asv")
    if not exe.exists():
        pytest.skip("asv is not installed next to this Python (pip install -e '.[bench]')")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / ".asv-machine.json").unlink(missing_ok=True)
    conf = tmp_path / "asv.conf.json"
    conf.write_text(json.dumps({"version": 1, "project": "memlab", "repo": str(repo), "branches": ["main"],
                                "environment_type": "virtualenv", "benchmark_dir": str(ROOT / "benchmarks"),
                                "results_dir": str(repo / "results"), "env_dir": str(tmp_path / "env"),
                                "html_dir": str(tmp_path / "html"), "launch_method": "forkserver"}))
    env = {**{k: v for k, v in os.environ.items() if k != machine_guard.FORCE_ENV}, "HOME": str(home)}
    subprocess.run([str(exe), "machine", "--yes", "--config", str(conf)], check=True, capture_output=True,
                   timeout=HANG_GUARD_S, env=env)
    out = subprocess.run([str(exe), "run", "--config", str(conf), "--python=same", "--set-commit-hash", "HEAD",
                          "--show-stderr", "-b", ONE], cwd=repo, capture_output=True, text=True, timeout=HANG_GUARD_S,
                         env=env)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    values = []
    for saved in (repo / "results" / platform.node()).glob(f"{head[:8]}-*.json"):
        data = json.loads(saved.read_text())
        row = dict(zip(data["result_columns"], data["results"].get(NAME, [None] * len(data["result_columns"]))))
        combos = list(itertools.product(*row["params"])) if row.get("params") else []
        values += [v for c, v in zip(combos, row["result"] or [None] * len(combos)) if c == ("'einsum_chunk'", "2000", "'cpu'")]
    return out, values


@pytest.mark.asv
def test_plain_asv_run_from_a_fresh_home_files_no_figure_under_another_hosts_machine(tmp_path):
    """Another host's committed results/<this host name>/: asv (plain run, its own registration)
    rewrites machine.json, but the benchmark fails with the guard's line and no figure is filed;
    committed as this host, the same run files the figure."""
    node = platform.node()
    try:
        asv_host.valid_name(node)
    except ValueError:
        pytest.skip(f"the host name {node!r} cannot name a results directory")
    here = machine_guard.host_facts()
    repo, _ = _repo_with_machine(tmp_path, node, {**here, "os": "Linux 0.0-another-kernel"})
    out, values = _plain_asv_run(tmp_path, repo)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert f"results/{node}/ holds the committed results of another host (os: recorded 'Linux 0.0-another-kernel'" in text, text
    assert all(v is None for v in values), values  # failed: no figure filed
    (repo / "results" / node / "machine.json").write_text(json.dumps({"machine": node, **here, "version": 1}))
    _git(repo, "commit", "-q", "-am", "this host's facts")
    out, values = _plain_asv_run(tmp_path, repo)
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(values) == 1 and values[0] > 0, values
