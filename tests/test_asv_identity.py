"""asv machine identity (benchmarks/asv_host.py, ``make asv-machine``): this host's own name and facts.

NOTE [ one machine, one history ] in ``benchmarks/asv_host.py``.  The ``make`` tests run the
Makefile's registration in a temporary HOME (asv keeps ``~/.asv-machine.json``) and check that
nothing under ``results/`` changes; about 5 s.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import asv_host  # noqa: E402

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
    """The CI machine's committed facts (no arch, num_cpu or gpu recorded) are kept verbatim, so its
    results files stay one line in asv publish."""
    results = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "memlab-ci-2core", results / "memlab-ci-2core",
                    ignore=lambda d, names: [n for n in names if n != "machine.json"])
    recorded = json.loads((results / "memlab-ci-2core" / "machine.json").read_text())
    entry = asv_host.register("memlab-ci-2core", results_dir=results, machine_file=tmp_path / "m.json", facts=FACTS)
    assert entry == {k: v for k, v in recorded.items() if k != "version"}


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
                          capture_output=True, text=True, timeout=120, env={**env, "HOME": str(tmp_path)})


def test_make_asv_machine_registers_this_host_not_the_ci_machine(tmp_path):
    try:
        expected = asv_host.default_name()
    except ValueError as exc:
        pytest.skip(f"this host has no derivable name: {exc}")
    before = _tree_digest(ROOT / "results")
    out = _make(tmp_path, "asv-machine")
    assert out.returncode == 0, out.stdout + out.stderr
    machines = _machines(tmp_path / ".asv-machine.json")
    assert set(machines) == {"version", expected}, machines
    entry = machines[expected]
    from asv.machine import Machine

    detected = Machine.get_defaults()
    # asv's own detection, not fixed strings; where results/<name>/ already holds this host's history
    # (this development machine: "vm") its recorded facts are kept (NOTE [ one machine, one history ]),
    # so a kernel update does not split the history
    recorded_file = ROOT / "results" / expected / "machine.json"
    recorded = json.loads(recorded_file.read_text()) if recorded_file.exists() else {}
    for key in ("os", "arch", "cpu", "num_cpu", "ram"):
        assert entry[key] == str(recorded.get(key, detected[key])) and entry[key], (key, entry)
    assert entry["gpu"]
    assert _tree_digest(ROOT / "results") == before

    dry = _make(tmp_path, "-n", "asv-run", "asv-continuous", "A=x", "B=y")
    assert dry.returncode == 0, dry.stderr
    assert f'--machine "{expected}"' in dry.stdout and asv_host.CI_MACHINE not in dry.stdout, dry.stdout
    assert "continuous --config .asv/scratch.conf.json" in dry.stdout, dry.stdout


def test_make_uses_the_ci_machine_only_when_named(tmp_path):
    before = _tree_digest(ROOT / "results")
    out = _make(tmp_path, "asv-machine", f"ASV_MACHINE={asv_host.CI_MACHINE}")
    assert out.returncode == 0, out.stdout + out.stderr
    recorded = json.loads((ROOT / "results" / asv_host.CI_MACHINE / "machine.json").read_text())
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
