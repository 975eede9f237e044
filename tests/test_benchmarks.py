"""The asv suite: aligned params, the torch pin, plug-in discovery, skips, and asv itself.

The last two tests run asv (``asv check`` and one ``--quick --dry-run`` combination) in the current
venv (``--python=same``), about 30-60 s together on 2 cores; they are marked ``asv`` so
``pytest -m "not asv"`` leaves them out.
"""
from __future__ import annotations

import importlib
import inspect
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the benchmarks are a top-level package of the working tree, as asv sees them
    sys.path.insert(0, str(ROOT))
MODULES = ["benchmarks.bench_chunking", "benchmarks.bench_tensor_train", "benchmarks.bench_reversible"]
METRICS = ("track_peak_allocated", "track_peak_reserved", "time_step")


def _classes():
    from benchmarks.common import MemlabBenchmark

    out = []
    for name in MODULES:
        mod = importlib.import_module(name)
        out += [c for _, c in inspect.getmembers(mod, inspect.isclass)
                if issubclass(c, MemlabBenchmark) and c is not MemlabBenchmark and c.__module__ == name]
    return out


CLASSES = _classes()


def _asv_conf() -> dict:
    """asv.conf.json through asv's own reader (it allows // comments)."""
    from asv.util import load_json

    return load_json(str(ROOT / "asv.conf.json"), js_comments=True)


def test_every_family_has_a_benchmark_class():
    assert sorted(c.__name__ for c in CLASSES) == ["ChainedMatmul", "ResidualStack", "TTLinear"]


def test_asv_discovers_exactly_the_workload_classes():
    """asv walks every class in every module: the abstract base must not show up as a benchmark."""
    discovery = pytest.importorskip("asv_runner.discovery")
    names = sorted(b.name for b in discovery.disc_benchmarks(str(ROOT / "benchmarks")))
    expected = sorted(f"{mod.split('.')[1]}.{cls}.{metric}" for mod, cls in [
        ("benchmarks.bench_chunking", "ChainedMatmul"), ("benchmarks.bench_tensor_train", "TTLinear"),
        ("benchmarks.bench_reversible", "ResidualStack")] for metric in METRICS)
    assert names == expected


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_params_and_param_names_aligned(cls):
    assert isinstance(cls.params, list) and isinstance(cls.param_names, list)
    assert len(cls.params) == len(cls.param_names), (cls.params, cls.param_names)
    assert len(set(cls.param_names)) == len(cls.param_names)
    assert all(isinstance(p, list) and p for p in cls.params)
    assert all(len(set(map(repr, p))) == len(p) for p in cls.params), "duplicate values in a param list"
    assert cls.param_names[0] == "technique" and cls.param_names[-1] == "device"
    assert cls.params[-1] == ["cpu", "cuda"]
    for metric in METRICS:
        assert callable(getattr(cls, metric))
    assert cls.track_peak_allocated.unit == "bytes" and cls.track_peak_reserved.unit == "bytes"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_swept_and_fixed_parameters_exist_in_this_tree(cls):
    """In the working tree nothing should be skipped for a missing name: catches renames."""
    import memlab

    workload = memlab.get_workload(cls.workload)
    assert set(cls.workload_params) <= set(workload.params), cls.workload_params
    known = set(workload.params)
    for tech in cls.params[0]:
        known |= set(memlab.get_technique(tech).all_params())
        assert memlab.get_technique(tech).workload is workload
    assert set(cls.param_names[1:-1]) <= known
    assert set(cls.fixed) <= known
    assert set(cls.ignored_by) <= set(cls.param_names)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_cpu_grid_within_budget(cls):
    """About 16 measured CPU combinations per class keep a full run within 15 minutes on 2 cores."""
    inst = cls()
    measured = 0
    for combo in itertools.product(*cls.params):
        if combo[-1] != "cpu":
            continue
        cfg = dict(zip(cls.param_names, combo))
        tech = cfg.pop("technique")
        cfg.pop("device")
        try:
            inst.technique_name, inst.device = tech, "cpu"
            inst._resolve_config(cfg)
        except NotImplementedError:
            continue
        measured += 1
    assert 4 <= measured <= 20, measured


def test_torch_pin_agrees_with_pyproject():
    """torch is pinned in pyproject.toml and named again in asv's matrix: the two must agree."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [d for d in deps if re.match(r"torch\s*==", d)]
    assert len(pins) == 1, deps
    version = pins[0].split("==")[1].strip()
    assert _asv_conf()["matrix"]["req"]["torch"] == [version]


def test_asv_conf_offline_and_paths():
    conf = _asv_conf()
    assert "--no-index" in conf["build_command"][0] and "--no-build-isolation" in conf["build_command"][0]
    assert "--no-deps" in conf["install_command"][0]
    assert conf["results_dir"] == "results"
    assert conf["html_dir"].startswith(".asv/") and conf["env_dir"].startswith(".asv/")
    assert conf["matrix"]["env_nobuild"]["MALLOC_MMAP_THRESHOLD_"] == ["131072"]
    assert "/.asv/" in (ROOT / ".gitignore").read_text().split()


def test_results_share_one_machine_history():
    results = ROOT / "results"
    if not (results / "benchmarks.json").exists():
        pytest.skip("no committed asv results yet")
    machines = [p for p in results.iterdir() if (p / "machine.json").exists()]
    assert machines, "results/ has benchmarks.json but no machine directory"
    for m in machines:
        commits = {json.loads(f.read_text())["commit_hash"] for f in m.glob("*.json") if f.name != "machine.json"}
        assert commits, m


PLUGIN = '''
import memlab
from memlab.workloads.chained_matmul import ChainedMatmul
import memlab.workloads.tt_linear as tt

class Mine(memlab.Technique, name="mine_chunk"):
    workload = ChainedMatmul

class Other(memlab.Technique, name="mine_tt"):
    workload = tt.TTLinear

class MyWorkload(memlab.Workload, name="my_workload", family="chunking"):
    pass

class OnMine(memlab.Technique, name="on_my_workload"):
    workload = MyWorkload

class Helper:  # not a technique
    workload = ChainedMatmul
'''


def test_plugin_techniques_read_from_source(tmp_path):
    from benchmarks.common import plugin_techniques, technique_list

    f = tmp_path / "plug.py"
    f.write_text(PLUGIN)
    env = {"MEMLAB_PLUGINS": str(f)}
    assert plugin_techniques("chained_matmul", env) == ["mine_chunk"]
    assert plugin_techniques("tt_linear", env) == ["mine_tt"]
    assert plugin_techniques("my_workload", env) == ["on_my_workload"]
    assert plugin_techniques("chained_matmul", {}) == []
    bad = tmp_path / "broken.py"
    bad.write_text("class (:\n")
    assert plugin_techniques("chained_matmul", {"MEMLAB_PLUGINS": f"{bad}:{tmp_path / 'missing.py'}"}) == []
    assert technique_list(["unchunked", "mine_chunk"], "chained_matmul") == ["unchunked", "mine_chunk"]


@pytest.mark.parametrize("combo, reason", [
    (("unchunked", 500, "cpu"), "does not apply"),
    (("no_such_technique", 2000, "cpu"), "not in this memlab version"),
    (("dense", 2000, "cpu"), "computes 'tt_linear', not 'chained_matmul'"),
])
def test_setup_skips_the_asv_way(tmp_path, combo, reason):
    from benchmarks.bench_chunking import ChainedMatmul

    with pytest.raises(NotImplementedError, match=reason):
        ChainedMatmul().setup(str(tmp_path), *combo)


def test_cuda_skipped_without_a_gpu(tmp_path):
    import torch

    from benchmarks.bench_chunking import ChainedMatmul

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(NotImplementedError, match="no CUDA device"):
        ChainedMatmul().setup(str(tmp_path), "unchunked", 2000, "cuda")


def _tiny_chained_matmul():
    from benchmarks.bench_chunking import ChainedMatmul

    class Tiny(ChainedMatmul):
        fixed = {"n": 64, "d": 8, "hidden": 16}

    return Tiny


def test_both_memory_metrics_come_from_one_measurement(tmp_path):
    tiny = _tiny_chained_matmul()
    combo = ("unchunked", 2000, "cpu")
    b = tiny()
    b.setup(str(tmp_path), *combo)
    b.time_step(str(tmp_path), *combo)
    allocated = b.track_peak_allocated(str(tmp_path), *combo)
    # unchunked (x @ w1) @ w2 at n=64, d=8, hidden=16, float32: hidden h [64, 16] saved for backward,
    # then y [64, 8]; its peak is at least h + y + the three gradients (x, w1, w2)
    assert isinstance(allocated, int) and allocated >= 4 * (64 * 16 + 64 * 8 + 64 * 8 + 8 * 16 + 16 * 8)
    (cached,) = tmp_path.glob("memlab-chained_matmul-unchunked-cpu-*.json")
    assert json.loads(cached.read_text())["peak_allocated_bytes"] == allocated
    b.teardown(str(tmp_path), *combo)
    b2 = tiny()
    b2.setup(str(tmp_path), *combo)
    assert b2.track_peak_reserved(str(tmp_path), *combo) == json.loads(cached.read_text())["peak_reserved_bytes"]


def test_import_warms_the_fork_server():
    """NOTE [ warm the fork server ]: the lazy torch._dynamo import of the first optimizer is paid
    once at import, not once per forked combination (checked in a fresh interpreter)."""
    code = ("import sys, torch; assert 'torch._dynamo' not in sys.modules; "
            "import benchmarks.common; print('torch._dynamo' in sys.modules, torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["True", "False"]


def test_import_does_not_initialise_cuda():
    """asv imports the benchmarks in its fork server; CUDA must not be initialised there."""
    import torch

    for name in MODULES:
        importlib.import_module(name)
    assert not torch.cuda.is_initialized()


def _asv(tmp_path: Path, *args: str, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run asv with a copy of asv.conf.json whose output paths lie under ``tmp_path``.

    Even ``--dry-run`` writes ``results/<machine>/machine.json``; the copy keeps the repository
    clean.  HOME points at ``tmp_path`` too, whose ``.asv-machine.json`` names a test machine, so
    the user's own machine file is neither needed nor touched.
    """
    exe = Path(sys.executable).with_name("asv")
    if not exe.exists():
        pytest.skip("asv is not installed next to this Python (pip install -e '.[bench]')")
    conf = _asv_conf()
    conf.update(repo=str(ROOT), benchmark_dir=str(ROOT / "benchmarks"), results_dir=str(tmp_path / "results"),
                env_dir=str(tmp_path / "env"), html_dir=str(tmp_path / "html"))
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    (tmp_path / ".asv-machine.json").write_text(json.dumps({"version": 1, "memlab-test": {
        "machine": "memlab-test", "os": "test", "arch": "test", "cpu": "test", "num_cpu": "2", "ram": "1GB"}}))
    cmd = [str(exe), *args[:1], "--config", str(tmp_path / "asv.conf.json"), *args[1:]]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {}), "HOME": str(tmp_path)})


@pytest.mark.asv
def test_asv_check(tmp_path):
    out = _asv(tmp_path, "check", "--python=same", timeout=150)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "No problems found" in out.stdout, out.stdout


PLUGIN_CHUNKING = '''
import memlab
from memlab.workloads.chained_matmul import ChainedMatmul


class PluginUnchunked(memlab.Technique, name="plugin_unchunked"):
    """(x @ w1) @ w2 in one piece, defined in a plug-in file."""

    workload = ChainedMatmul

    def forward(self, problem):
        m = problem.model
        return (problem.inputs["x"] @ m.w1) @ m.w2
'''


@pytest.mark.asv
def test_asv_quick_dry_run_of_one_combination(tmp_path):
    """One built-in and one plug-in combination through asv's fork server in this venv.

    The plug-in technique reaches the params through ``MEMLAB_PLUGINS`` and is measured by the
    memlab of the environment; nothing is saved (``--dry-run``).
    """
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(PLUGIN_CHUNKING)
    bench = r"bench_chunking\.ChainedMatmul\.track_peak_allocated"
    out = _asv(tmp_path, "run", "--python=same", "--quick", "--dry-run", "--show-stderr",
               "--machine", "memlab-test", "-b", bench + r"\('einsum_chunk', 2000, 'cpu'\)",
               "-b", bench + r"\('plugin_unchunked', 2000, 'cpu'\)", timeout=180,
               env={"MEMLAB_PLUGINS": str(plugin)})
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    # the measured values, e.g. "8.24M" in asv's table; a failure prints "failed" instead
    assert re.search(r"einsum_chunk\s+2000\s+[\d.]+[kMG]", text), text
    assert re.search(r"plugin_unchunked\s+2000\s+[\d.]+[kMG]", text), text
    assert "failed" not in text, text
    saved = [f for f in (tmp_path / "results").rglob("*.json") if f.name not in ("machine.json", "benchmarks.json")]
    assert not saved, saved
