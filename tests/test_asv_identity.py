"""asv machine identity (benchmarks/asv_host.py, ``make asv-machine``): this host's own name and facts.

NOTE [ one machine, one history ] in ``benchmarks/asv_host.py``.  The ``make`` tests run the
Makefile's registration in a temporary HOME (asv keeps ``~/.asv-machine.json``) and check that
nothing under ``results/`` changes; about 5 s.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import asv_host  # noqa: E402
from process_checks import HANG_GUARD_S

FACTS = {"os": "Linux 6.1", "arch": "x86_64", "cpu": "Test CPU", "num_cpu": "8", "ram": "1000", "gpu": "none"}


@pytest.mark.parametrize("host, name", [
    ("vm", "vm"),
    ("LAB-A100.example.org", "lab-a100"),
    ("My_Host 01", "my_host-01"),
    ("-weird--", "weird"),
])
def test_default_name_is_the_sanitised_short_host_name(host, name):
    assert asv_host.default_name(host) == name


@pytest.mark.parametrize("host, match", [
    ("", "cannot derive"),
    ("...", "cannot derive"),
    ("memlab-ci-2core", "pass ASV_MACHINE=memlab-ci-2core explicitly"),
    ("MEMLAB-CI-2CORE.local", "pass ASV_MACHINE=memlab-ci-2core explicitly"),
])
def test_default_name_never_derives_the_ci_machine(host, match):
    with pytest.raises(ValueError, match=match):
        asv_host.default_name(host)


@pytest.mark.parametrize("name", ["", "../results", "Upper", "a b", "-x", "x" * 64])
def test_invalid_names_rejected(name):
    with pytest.raises(ValueError, match="is not valid"):
        asv_host.valid_name(name)


def _machines(path: Path) -> dict:
    return json.loads(path.read_text())


def test_register_a_new_machine_with_its_detected_facts(tmp_path):
    file = tmp_path / ".asv-machine.json"
    entry = asv_host.register("lab-a100", results_dir=tmp_path / "results", machine_file=file, facts=FACTS)
    assert entry == {"machine": "lab-a100", **FACTS}
    assert _machines(file)["lab-a100"] == entry
    assert not (tmp_path / "results").exists()  # asv run writes results/<name>/machine.json, not this


def test_register_keeps_the_recorded_facts_of_an_existing_history(tmp_path):
    """A recorded history whose facts this host shares keeps its file's facts verbatim (a new kernel
    build of the same RAM size: within the tolerance), so its results stay one line in asv publish."""
    results = tmp_path / "results"
    (results / "lab").mkdir(parents=True)
    recorded = {"machine": "lab", **FACTS, "ram": "1001", "version": 1}  # MemTotal moved by 0.1%
    (results / "lab" / "machine.json").write_text(json.dumps(recorded))
    entry = asv_host.register("lab", results_dir=results, machine_file=tmp_path / "m.json", facts=FACTS)
    assert entry == {k: v for k, v in recorded.items() if k != "version"}


def test_the_ci_machines_hand_written_facts_are_forced_not_matched(tmp_path):
    """memlab-ci-2core's facts were written by hand ('Linux 6.18', '24GB'): no host's detection
    matches them, so reusing the name takes ASV_FORCE=1 (--force) on that machine, and keeps them."""
    results = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "memlab-ci-2core", results / "memlab-ci-2core",
                    ignore=lambda d, names: [n for n in names if n != "machine.json"])
    recorded = json.loads((results / "memlab-ci-2core" / "machine.json").read_text())
    with pytest.raises(asv_host.MachineClash, match=r"os: recorded 'Linux 6\.18', this host 'Linux 6\.1'; cpu: "):
        asv_host.register("memlab-ci-2core", results_dir=results, machine_file=tmp_path / "m.json", facts=FACTS)
    entry = asv_host.register("memlab-ci-2core", results_dir=results, machine_file=tmp_path / "m.json", facts=FACTS,
                              force=True)
    assert entry == {k: v for k, v in recorded.items() if k != "version"}


@pytest.mark.parametrize("change, named", [
    ({"os": "Linux 6.2"}, ["os"]),
    ({"cpu": "Other CPU", "gpu": "NVIDIA H200"}, ["cpu", "gpu"]),
    ({"ram": "2000"}, ["ram"]),
    ({"ram": "1009"}, []),  # within RAM_TOLERANCE: the same RAM seen by another kernel
    ({"arch": "aarch64", "num_cpu": "4"}, ["arch", "num_cpu"]),
])
def test_fact_differences_name_each_differing_fact(change, named):
    assert [d.split(":")[0] for d in asv_host.fact_differences({**FACTS, **change}, FACTS)] == named


def test_fact_differences_skip_what_the_file_does_not_record():
    assert asv_host.fact_differences({"machine": "x", "os": "Linux 6.1"}, FACTS) == []
    assert asv_host.fact_differences({"ram": "24GB"}, FACTS) == ["ram: recorded '24GB', this host '1000'"]


def test_the_refusal_is_one_line_naming_the_differences_and_the_way_out(tmp_path):
    results = tmp_path / "results"
    (results / "vm").mkdir(parents=True)
    (results / "vm" / "machine.json").write_text(json.dumps({"machine": "vm", **FACTS, "os": "Linux 6.1-other"}))
    with pytest.raises(asv_host.MachineClash) as err:
        asv_host.register("vm", results_dir=results, machine_file=tmp_path / "m.json", facts=FACTS)
    msg = str(err.value)
    assert "\n" not in msg and "os: recorded 'Linux 6.1-other', this host 'Linux 6.1'" in msg
    assert "ASV_MACHINE=<name>" in msg and "ASV_MACHINE=vm-2" in msg and "ASV_FORCE=1" in msg
    assert not (tmp_path / "m.json").exists()


def test_scratch_registration_records_this_host_and_never_refuses(tmp_path):
    """The scratch targets' name (<name>-scratch, results in .asv/scratch-results): this host's facts."""
    results = tmp_path / "scratch"
    (results / "vm-scratch").mkdir(parents=True)
    (results / "vm-scratch" / "machine.json").write_text(json.dumps({"machine": "vm-scratch", **FACTS, "os": "old"}))
    entry = asv_host.register("vm-scratch", results_dir=results, machine_file=tmp_path / "m.json", facts=FACTS,
                              scratch=True)
    assert entry == {"machine": "vm-scratch", **FACTS}


def test_config_results_dir_is_the_one_asv_writes(tmp_path):
    assert asv_host.config_results_dir(ROOT / "asv.conf.json") == ROOT / "results"
    conf = tmp_path / "c.json"
    conf.write_text(json.dumps({"results_dir": "elsewhere"}))
    assert asv_host.config_results_dir(conf) == tmp_path / "elsewhere"


def test_register_refuses_a_name_whose_results_are_another_hosts(tmp_path):
    results = tmp_path / "results"
    (results / "lab").mkdir(parents=True)
    (results / "lab" / "machine.json").write_text(json.dumps(
        {"machine": "lab", **FACTS, "num_cpu": "64", "gpu": "NVIDIA A100", "version": 1}))
    file = tmp_path / "m.json"
    with pytest.raises(asv_host.MachineClash, match=r"num_cpu: recorded '64', this host '8'; gpu: recorded"):
        asv_host.register("lab", results_dir=results, machine_file=file, facts=FACTS)
    assert not file.exists()
    entry = asv_host.register("lab", results_dir=results, machine_file=file, facts=FACTS, force=True)
    assert entry["num_cpu"] == "64"  # forced: the recorded facts stay (one history)


def test_detect_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(asv_host.shutil, "which", lambda exe: "/usr/bin/nvidia-smi")

    class Out:
        returncode, stdout = 0, "NVIDIA H200\nNVIDIA H200\nNVIDIA A100\n"

    assert asv_host.detect_gpu(run=lambda *a, **k: Out) == "NVIDIA A100, 2 x NVIDIA H200"
    monkeypatch.setattr(asv_host.shutil, "which", lambda exe: None)
    assert asv_host.detect_gpu(proc_dir=str(tmp_path)) == "none"
    (tmp_path / "0000:3b:00.0").mkdir()
    (tmp_path / "0000:3b:00.0" / "information").write_text("Model: \t NVIDIA H200\nIRQ: 1\n")
    assert asv_host.detect_gpu(proc_dir=str(tmp_path)) == "NVIDIA H200"


def test_scratch_config_moves_only_the_output():
    conf = asv_host.scratch_config(ROOT / "asv.conf.json")
    # absolute: asv changes into the directory of the configuration file it is given (.asv/)
    assert conf["results_dir"] == str(ROOT / ".asv/scratch-results") and conf["html_dir"] == str(ROOT / ".asv/scratch-html")
    assert conf["env_dir"] == str(ROOT / ".asv/env") and conf["repo"] == str(ROOT)
    assert conf["benchmark_dir"] == str(ROOT / "benchmarks")


# -- the Makefile, as a contributor runs it ---------------------------------------------------------

def _tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _make(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    if not (ROOT / ".venv" / "bin" / "asv").exists():
        pytest.skip("no .venv with asv (make install)")
    env = {k: v for k, v in os.environ.items() if k not in ("ASV_MACHINE", "MAKEFLAGS", "MFLAGS")}
    # -o: treat the venv as installed; the registration must not reinstall anything
    return subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_GUARD_S, env={**env, "HOME": str(tmp_path)})


def _host_facts() -> dict[str, str]:
    return asv_host.detect()


def test_make_asv_machine_registers_this_host_or_refuses_with_one_line(tmp_path):
    """This host under its own name: registered with asv's detected facts where results/<name>/ is new
    or records this host, refused with one line where it records another (this development machine:
    results/vm/ records kernel 6.18.44-fc-v1147, this host runs another build).  Nothing under results/
    changes either way."""
    try:
        expected = asv_host.default_name()
    except ValueError as exc:
        pytest.skip(f"this host has no derivable name: {exc}")
    before = _tree_digest(ROOT / "results")
    out = _make(tmp_path, "asv-machine")
    recorded_file = ROOT / "results" / expected / "machine.json"
    recorded = json.loads(recorded_file.read_text()) if recorded_file.exists() else {}
    differ = asv_host.fact_differences(recorded, _host_facts())
    if differ:
        assert out.returncode == 2, out.stdout + out.stderr
        (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
        assert all(d in line for d in differ) and "ASV_MACHINE=<name>" in line, out.stderr
        assert not (tmp_path / ".asv-machine.json").exists()
    else:
        assert out.returncode == 0, out.stdout + out.stderr
        entry = _machines(tmp_path / ".asv-machine.json")[expected]
        for key in ("os", "arch", "cpu", "num_cpu", "ram"):
            assert entry[key] == str(recorded.get(key, _host_facts()[key])) and entry[key], (key, entry)
    assert _tree_digest(ROOT / "results") == before


def test_make_scratch_targets_work_whatever_results_records(tmp_path):
    """asv-continuous, asv-quick and asv-dry register <name>-scratch with this host's facts against
    .asv/scratch-results: usable on this host although results/vm/ records another kernel."""
    try:
        expected = asv_host.default_name() + "-scratch"
    except ValueError as exc:
        pytest.skip(f"this host has no derivable name: {exc}")
    before = _tree_digest(ROOT / "results")
    out = _make(tmp_path, "asv-scratch-machine", "ASV_SCRATCH=" + str(tmp_path / "scratch.conf.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    machines = _machines(tmp_path / ".asv-machine.json")
    assert set(machines) == {"version", expected} and machines[expected] == {"machine": expected, **_host_facts()}
    assert json.loads((tmp_path / "scratch.conf.json").read_text())["results_dir"] == str(ROOT / ".asv/scratch-results")
    assert _tree_digest(ROOT / "results") == before
    dry = _make(tmp_path, "-n", "asv-run", "asv-continuous", "asv-quick", "asv-dry", "A=x", "B=y")
    assert dry.returncode == 0, dry.stderr
    run = [ln for ln in dry.stdout.splitlines() if " run --config asv.conf.json" in ln]
    assert len(run) == 1 and f'--machine "{expected[:-8]}" --record-samples' in run[0], dry.stdout
    assert f'continuous --config .asv/scratch.conf.json --machine "{expected}"' in dry.stdout, dry.stdout
    assert f'compare --exact-only --config .asv/scratch.conf.json --machine "{expected}" x y' in dry.stdout
    assert dry.stdout.count(f'--machine "{expected}"') == 4 and asv_host.CI_MACHINE not in dry.stdout


def test_make_asv_run_and_history_keep_time_samples(tmp_path):
    """--record-samples on every run that writes results/: asv's Mann-Whitney test needs them."""
    dry = _make(tmp_path, "-n", "asv-run", "asv-history", "ASV_MACHINE=somehost")
    assert dry.returncode == 0, dry.stderr
    runs = [ln for ln in dry.stdout.splitlines() if "/asv run " in ln or ln.startswith("asv run ")]
    assert len(runs) == 2 and all("--record-samples" in ln for ln in runs), dry.stdout
    assert 'register "somehost" --config asv.conf.json' in dry.stdout and "--force" not in dry.stdout
    assert "MEMLAB_ASV_FORCE" not in dry.stdout
    forced = _make(tmp_path, "-n", "asv-machine", "ASV_MACHINE=somehost", "ASV_FORCE=1")
    assert 'register "somehost" --config asv.conf.json --force' in forced.stdout, forced.stdout
    # the benchmarks' own guard (benchmarks/machine_guard.py) is told too, on every run that files results
    forced = _make(tmp_path, "-n", "asv-run", "asv-run-full", "asv-history", "asv-time-history", "ASV_MACHINE=somehost",
                   "ASV_FORCE=1")
    runs = [ln for ln in forced.stdout.splitlines() if "/asv run " in ln]
    assert len(runs) == 4 and all("MEMLAB_ASV_FORCE=1 " in ln for ln in runs), forced.stdout


def _stub_asv(tmp_path: Path) -> tuple[Path, Path]:
    """An ``asv`` that only records its arguments (no benchmark ever runs in these tests)."""
    calls, stub = tmp_path / "asv-calls.txt", tmp_path / "asv-stub"
    stub.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    stub.chmod(0o755)
    return stub, calls


def test_make_asv_run_never_rewrites_another_hosts_results(tmp_path):
    """A results directory recording another host's facts (another kernel) refuses asv-run before asv
    starts: no result file changes.  The same directory recording this host's facts runs asv, with
    --record-samples."""
    results = tmp_path / "results"
    (results / "lab").mkdir(parents=True)
    theirs = {**_host_facts(), "os": "Linux 0.0-another-kernel"}
    (results / "lab" / "machine.json").write_text(json.dumps({"machine": "lab", **theirs, "version": 1}))
    (results / "lab" / "abcdef01-env.json").write_text('{"committed": "by the other host"}')
    conf = tmp_path / "asv.conf.json"
    conf.write_text(json.dumps({"version": 1, "results_dir": str(results), "repo": str(ROOT)}))
    stub, calls = _stub_asv(tmp_path)
    before = _tree_digest(results)
    out = _make(tmp_path, "asv-run", "ASV_MACHINE=lab", f"ASV_CONF={conf}", f"ASV={stub}")
    assert out.returncode == 2 and not calls.exists(), out.stdout + out.stderr
    assert "os: recorded 'Linux 0.0-another-kernel', this host" in out.stderr
    assert _tree_digest(results) == before
    (results / "lab" / "machine.json").write_text(json.dumps({"machine": "lab", **_host_facts(), "version": 1}))
    out = _make(tmp_path, "asv-run-full", "ASV_MACHINE=lab", f"ASV_CONF={conf}", f"ASV={stub}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert calls.read_text().split() == ["run", "--config", str(conf), "--machine", "lab", "--record-samples", "HEAD^!"]
    calls.unlink()
    out = _make(tmp_path, "asv-run", "ASV_MACHINE=lab", f"ASV_CONF={conf}", f"ASV={stub}")  # the default selection
    assert out.returncode == 0, out.stdout + out.stderr
    words = calls.read_text().split()
    assert words[:6] == ["run", "--config", str(conf), "--machine", "lab", "--record-samples"] and "-b" in words


def test_make_uses_the_ci_machine_only_when_named_and_forced_where_its_facts_differ(tmp_path):
    before = _tree_digest(ROOT / "results")
    recorded = json.loads((ROOT / "results" / asv_host.CI_MACHINE / "machine.json").read_text())
    out = _make(tmp_path, "asv-machine", f"ASV_MACHINE={asv_host.CI_MACHINE}")
    if asv_host.fact_differences(recorded, _host_facts()):  # its hand-written facts: every host, in practice
        assert out.returncode == 2 and "ASV_FORCE=1" in out.stderr, out.stdout + out.stderr
        out = _make(tmp_path, "asv-machine", f"ASV_MACHINE={asv_host.CI_MACHINE}", "ASV_FORCE=1")
    assert out.returncode == 0, out.stdout + out.stderr
    entry = _machines(tmp_path / ".asv-machine.json")[asv_host.CI_MACHINE]
    assert entry == {k: v for k, v in recorded.items() if k != "version"}
    assert _tree_digest(ROOT / "results") == before


def test_spread_order_covers_the_range_evenly():
    """``make asv-history`` measures commits first, last, middle, quarters...: an interrupted run
    still spans the history; every commit comes exactly once."""
    from benchmarks.asv_host import spread_order

    assert spread_order([]) == [] and spread_order(["a"]) == ["a"] and spread_order(["a", "b"]) == ["a", "b"]
    assert spread_order(list(range(10))) == [0, 9, 4, 2, 6, 1, 3, 5, 7, 8]
    order = spread_order(list(range(80)))
    assert sorted(order) == list(range(80)) and order[:5] == [0, 79, 39, 19, 59]
    # after the first 9 (first, last and 7 middles) no gap is wider than a ninth of the range
    first = sorted(order[:9])
    assert max(b - a for a, b in zip(first, first[1:])) <= 10


def test_history_config_installs_the_checkout_and_keeps_results_and_environments():
    """NOTE [ source install ]: same matrix, env and results directories as asv.conf.json; install
    writes a .pth to asv's checkout and checks that memlab resolves there; no pip, no wheel."""
    from benchmarks.asv_host import scratch_config, source_install_config

    conf, base = source_install_config(), scratch_config()
    root = Path(__file__).resolve().parent.parent
    assert conf["results_dir"] == str(root / "results") and conf["env_dir"] == base["env_dir"]
    assert conf["matrix"] == base["matrix"] and conf["build_command"] == []
    install, check = conf["install_command"]
    assert "memlab-asv-source.pth" in install and install.endswith("{build_dir}") and "pip" not in install
    assert "find_spec" in check and "pip uninstall memlab" in check
    pip_uninstall, remove_pth = conf["uninstall_command"]
    # a memlab pip-installed by asv run / asv continuous (same environment) would shadow the checkout
    assert "pip uninstall -y" in pip_uninstall and pip_uninstall.startswith("return-code=any ")
    assert "memlab-asv-source.pth" in remove_pth


# -- exact figures: any change flagged (NOTE [ exact figures ]) -------------------------------------

ASV_RESULT_COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
                      "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]
PEAK, TIME = "bench_chunking.ChainedMatmul.track_peak_allocated", "bench_chunking.ChainedMatmul.time_step"
GRID = [["'unchunked'", "'slice_loop'"], ["500"], ["'cpu'"]]


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(repo)}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _asv_results(tmp_path: Path, values: list[dict[str, list]]) -> tuple[Path, list[str]]:
    """A git repository with one commit per ``values`` entry and asv 0.6 results of machine ``box``
    for each (``values[i][benchmark]``: one value per combination of :data:`GRID`); its config path."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "results" / "box").mkdir(parents=True)
    (repo / "results" / "box" / "machine.json").write_text(json.dumps({"machine": "box", **FACTS, "version": 1}))
    (repo / "results" / "benchmarks.json").write_text(json.dumps({**{b: {
        "name": b, "param_names": ["technique", "chunk_size", "device"], "params": GRID, "type": kind, "unit": unit,
        "version": "1"} for b, kind, unit in ((PEAK, "track", "bytes"), (TIME, "time", "seconds"))}, "version": 2}))
    commits = []
    for i, vals in enumerate(values):
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"commit {i}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
        data = {"commit_hash": commits[-1], "env_name": "env", "date": 1_700_000_000_000 + i, "python": "3.11",
                "params": {"machine": "box"}, "requirements": {}, "env_vars": {}, "durations": {}, "version": 2,
                "result_columns": ASV_RESULT_COLUMNS,
                "results": {b: [v, GRID, "1", 1_700_000_000_000, 1.0] for b, v in vals.items()}}
        (repo / "results" / "box" / f"{commits[-1][:8]}-env.json").write_text(json.dumps(data))
    conf = repo / "asv.conf.json"
    conf.write_text(json.dumps({"version": 1, "project": "t", "repo": ".", "results_dir": "results",
                                "branches": ["main"], "dvcs": "git"}))
    return conf, commits


def test_a_five_percent_peak_is_flagged_and_an_unchanged_one_is_not(tmp_path, capsys):
    """Done when of issue 30, item 3, without running asv over commits: the exact comparison that
    make asv-continuous runs after asv continuous (and make asv-compare after asv compare) flags a 5%
    larger track_peak_allocated (asv's own default factor 1.1 would not) and nothing for a commit
    that changed no figure; a 5% slower time_step is left to asv's statistics."""
    base = {PEAK: [16_000_000, 18_000_000], TIME: [0.010, 0.020]}
    worse = {PEAK: [16_000_000, 18_900_000], TIME: [0.0105, 0.020]}  # slice_loop's peak +5%
    conf, commits = _asv_results(tmp_path, [base, worse, worse])
    assert asv_host.compare(commits[0], commits[1], "box", conf_path=conf, exact_only=True) == 1
    out = capsys.readouterr().out
    (row,) = [ln for ln in out.splitlines() if "track_peak_allocated" in ln]
    assert row.split()[:4] == ["+", "18,000,000", "18,900,000", "1.0500"] and "'slice_loop', 500, 'cpu'" in row
    assert "time_step" not in out
    assert asv_host.compare(commits[1], commits[2], "box", conf_path=conf, exact_only=True) == 0
    assert "none of the 2 exact figure(s) measured at both commits changed" in capsys.readouterr().out


def test_exact_changes_marks_like_asv_compare_with_no_tolerance():
    nan = float("nan")
    before = {("e", "a"): (100, "1"), ("e", "b"): (100, "1"), ("e", "c"): (100, "1"), ("e", "d"): (None, "1"),
              ("e", "f"): (100, "1"), ("e", "g"): (nan, "1"), ("e", "h"): (100, "1")}
    after = {("e", "a"): (101, "1"), ("e", "b"): (99, "1"), ("e", "c"): (None, "1"), ("e", "d"): (100, "1"),
             ("e", "f"): (150, "2"), ("e", "g"): (100, "1"), ("e", "h"): (100, "1")}
    got = {r["name"]: r["mark"] for r in asv_host.exact_changes(before, after)}
    assert got == {"a": "+", "b": "-", "c": "!", "d": "*", "f": "x"}  # g skipped before, h unchanged


def test_make_asv_compare_prints_asvs_table_then_the_exact_one(tmp_path):
    conf, commits = _asv_results(tmp_path, [{PEAK: [1_000_000, 2_000_000]}, {PEAK: [1_000_000, 2_000_001]}])
    out = _make(tmp_path, "asv-compare", "ASV_MACHINE=box", f"ASV_CONF={conf}", f"A={commits[0]}", f"B={commits[1]}")
    assert out.returncode == 2, out.stdout + out.stderr  # make's status for a recipe that exited 1
    assert "Benchmarks that have stayed the same" in out.stdout  # asv's table: 1 byte is within its 10%
    exact = out.stdout.split("Exact figures")[1]
    assert "+        2,000,000        2,000,001" in exact and "Error 1" in out.stderr


@pytest.mark.parametrize("name, params, exact", [
    (PEAK, ("'slice_loop'", "500", "'cpu'"), True),
    ("b.C.track_predicted_cuda_reserved", ("'cpu'",), True),
    ("bench_resnet.ResNetComplexity.track_activation_exponent", ("'revnet'", "'cpu'"), True),
    ("bench_transformer.TransformerComplexity.track_seq_exponent", ("'sdpa_math'", "'cpu'"), True),
    ("b.C.track_peak_reserved", ("'x'", "'cuda'"), True),
    ("b.C.track_peak_reserved", ("'x'", "'cpu'"), False),
    (TIME, ("'x'", "'cpu'"), False),
    ("b.C.track_relative_step_time", ("'x'", "'cpu'"), False),
])
def test_is_exact_and_regressions_thresholds_agree(name, params, exact):
    from asv.util import load_json

    assert asv_host.is_exact(name, params) is exact
    thresholds = load_json(str(ROOT / "asv.conf.json"), js_comments=True)["regressions_thresholds"]
    entry = f"{name}({', '.join(params)})"
    assert any(re.match(regex, entry) and t == 0 for regex, t in thresholds.items()) is exact


def test_every_exact_metric_is_a_benchmark_of_the_suite_and_every_exponent_is_exact():
    """The exact set names benchmarks the suite defines, and every complexity class's exponent (an
    exponent fitted to exact bytes: ``track_activation_exponent``, ``track_seq_exponent``) is in it."""
    from benchmarks import common

    names, exponents = set(), set()
    for path in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        module = __import__(f"benchmarks.{path.stem}", fromlist=["_"])
        for cls in vars(module).values():
            if isinstance(cls, type) and cls.__module__ == module.__name__:
                names |= {n for n in dir(cls) if n.startswith("track_")}
                if issubclass(cls, common.ComplexityBenchmark):
                    exponents.add(cls.metric)
    assert set(asv_host.EXACT_METRICS) <= names
    assert exponents and exponents <= set(asv_host.EXACT_METRICS)


# -- the time history appends what it lacks (NOTE [ the time history appends ]) ---------------------

REL = "bench_chunking.ChainedMatmul.track_relative_step_time"


def test_timed_commits_are_those_with_a_relative_time_measured_or_failed(tmp_path):
    nan = float("nan")
    conf, commits = _asv_results(tmp_path, [{REL: [1.0, 1.2]}, {PEAK: [1, 2]}, {REL: None}, {REL: [nan, nan]},
                                            {REL: [nan, 1.1], PEAK: [1, 2]}])
    results = asv_host.config_results_dir(conf)
    assert asv_host.timed_commits(results, "box") == {commits[0], commits[2], commits[4]}
    assert asv_host.timed_commits(results, "other") == set()


def test_missing_history_appends_the_newer_commits_and_fills_gaps():
    commits = [f"c{i}" for i in range(10)]
    # timed c2..c5 except c4: the gap c4 and everything after c5, never what precedes the history
    assert asv_host.missing_history(commits, {"c2", "c3", "c5"}) == ["c4", "c6", "c7", "c8", "c9"]
    assert asv_host.missing_history(commits, set(commits[2:])) == []  # current: nothing to measure
    assert asv_host.missing_history(commits, set(), first=3) == ["c7", "c8", "c9"]  # a new machine
    assert asv_host.missing_history(commits, set(), first=50) == commits
    assert asv_host.missing_history(commits, {"elsewhere"}, first=2) == ["c8", "c9"]  # not on main
    with pytest.raises(ValueError, match="first=0"):
        asv_host.missing_history(commits, set(), first=0)


def test_missing_times_reads_main_from_stdin_and_the_results_of_the_config(tmp_path):
    conf, commits = _asv_results(tmp_path, [{PEAK: [1, 2]}, {REL: [1.0, 1.2]}, {PEAK: [1, 2]}, {REL: [1.0, 1.1]},
                                            {PEAK: [1, 2]}])
    cmd = [sys.executable, "-m", "benchmarks.asv_host", "missing-times", "--machine", "box", "--config", str(conf)]
    out = subprocess.run(cmd, input="\n".join(commits) + "\n", cwd=ROOT, capture_output=True, text=True,
                         timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [commits[2], commits[4]]
    out = subprocess.run([*cmd[:-4], "--machine", "new", "--config", str(conf), "--first", "2"],
                         input="\n".join(commits) + "\n", cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0 and out.stdout.split() == commits[-2:], out.stderr


def test_make_asv_time_history_runs_asv_on_the_missing_commits_only(tmp_path):
    dry = _make(tmp_path, "-n", "asv-time-history", "ASV_MACHINE=somehost")
    assert dry.returncode == 0, dry.stderr
    text = dry.stdout
    assert "git rev-list --reverse main | " in text and "missing-times --machine \"somehost\" --config asv.conf.json" in text
    assert "-n 50" not in text and "--first 50" in text
    assert "spread < .asv/time-history-missing.txt > .asv/time-history-commits.txt" in text
    assert "|| exit 0" in text and "HASHFILE:" in text  # nothing missing: no asv run


def test_make_asv_time_history_appends_the_commits_after_the_newest_timed_one(tmp_path):
    """End to end with a stub asv: this repository's main, a results directory where main~3 has a
    relative time; the commits handed to asv are exactly those after it (main may move meanwhile)."""
    timed = _git(ROOT, "rev-parse", "main~3")
    results = tmp_path / "results"
    (results / "box").mkdir(parents=True)
    (results / "box" / "machine.json").write_text(json.dumps({"machine": "box", **_host_facts(), "version": 1}))
    data = {"commit_hash": timed, "env_name": "env", "date": 1_700_000_000_000, "python": "3.11",
            "params": {"machine": "box"}, "requirements": {}, "env_vars": {}, "durations": {}, "version": 2,
            "result_columns": ASV_RESULT_COLUMNS, "results": {REL: [[1.0, 1.1], GRID, "2", 1_700_000_000_000, 1.0]}}
    (results / "box" / f"{timed[:8]}-env.json").write_text(json.dumps(data))
    conf = tmp_path / "asv.conf.json"
    conf.write_text(json.dumps({"version": 1, "results_dir": str(results), "repo": str(ROOT)}))
    stub, calls = _stub_asv(tmp_path)
    before = set(_git(ROOT, "rev-list", f"{timed}..main").split())
    out = _make(tmp_path, "asv-time-history", "ASV_MACHINE=box", f"ASV_CONF={conf}", f"ASV={stub}")
    after = set(_git(ROOT, "rev-list", f"{timed}..main").split())
    assert out.returncode == 0, out.stdout + out.stderr
    handed = set((ROOT / ".asv" / "time-history-commits.txt").read_text().split())
    assert before <= handed <= after and timed not in handed, (before, handed)
    assert f"time history of box: {len(handed)} main commit(s) without a time figure" in out.stdout
    (call,) = calls.read_text().splitlines()
    assert call.startswith("run --config .asv/history.conf.json --machine box --skip-existing-successful")
    assert call.endswith(f"HASHFILE:{ROOT}/.asv/time-history-commits.txt")
