"""The asv suite: aligned params, the torch pin, plug-in discovery, skips vs failures, devices, and asv.

The tests marked ``asv`` run asv itself: ``asv check``, one ``--quick --dry-run`` combination, and a
good and a broken commit of a throw-away repository through ``asv run`` and ``asv compare``, once in
the current venv (``--python=same``, the broken memlab put first on the path) and once for real
(asv builds its virtualenv and both commits; skipped unless torch resolves to a local wheel).
About 3.5 minutes together on 2 cores, 2 of them the real build.  ``pytest -m "not asv"`` leaves
them out.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from process_checks import HANG_GUARD_S

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the benchmarks are a top-level package of the working tree, as asv sees them
    sys.path.insert(0, str(ROOT))
#: every benchmark module, found as asv finds them (``bench_*.py``), never listed by hand
MODULES = sorted(f"benchmarks.{p.stem}" for p in (ROOT / "benchmarks").glob("bench_*.py"))
METRICS = ("track_peak_allocated", "track_peak_reserved", "track_predicted_cuda_reserved", "track_relative_step_time",
           "track_time_limit_gap", "time_step")
#: asv's benchmark prefixes (asv_runner.discovery)
_PREFIXES = ("track_", "time_", "timeraw_", "peakmem_", "mem_")


def _benchmark_classes() -> list[type]:
    """Every class a bench module defines that asv runs: ``params``/``param_names`` and a benchmark method."""
    out = []
    for name in MODULES:
        mod = importlib.import_module(name)
        out += [c for _, c in inspect.getmembers(mod, inspect.isclass)
                if c.__module__ == name and isinstance(getattr(c, "param_names", None), list)
                and any(a.startswith(_PREFIXES) for a in dir(c))]
    return out


def _classes():
    from benchmarks.common import MemlabBenchmark

    return [c for c in _benchmark_classes() if issubclass(c, MemlabBenchmark)]


CLASSES = _classes()


def _builtin_techniques() -> list[str]:
    import memlab

    return [n for n in memlab.list_techniques() if memlab.get_technique(n).__module__.startswith("memlab.families.")]


def _asv_conf() -> dict:
    """asv.conf.json through asv's own reader (it allows // comments)."""
    from asv.util import load_json

    return load_json(str(ROOT / "asv.conf.json"), js_comments=True)


def test_every_builtin_technique_is_in_a_benchmarks_parameter_list():
    """Each technique of memlab.families (peers included) is measured by some benchmark class, so
    asv's history shows when any of them changes; and every benchmark names only known techniques."""
    listed = {t for c in _benchmark_classes() if c.param_names[0] == "technique" for t in c.params[0]}
    builtin = set(_builtin_techniques())
    assert builtin - listed == set(), "techniques no benchmark measures"
    assert listed - builtin == set(), "benchmarks name techniques memlab does not have"


def test_every_family_has_a_benchmark_class():
    import memlab

    covered = {memlab.get_technique(t).family() for c in _benchmark_classes() if c.param_names[0] == "technique"
               for t in c.params[0]}
    assert covered == {memlab.get_technique(t).family() for t in _builtin_techniques()}


def test_asv_discovers_exactly_the_benchmark_classes():
    """asv walks every class in every module: the abstract base must not show up as a benchmark, and
    every benchmark class of every bench module must."""
    discovery = pytest.importorskip("asv_runner.discovery")
    names = sorted(b.name for b in discovery.disc_benchmarks(str(ROOT / "benchmarks")))
    expected = sorted(f"{c.__module__.split('.')[1]}.{c.__name__}.{a}" for c in _benchmark_classes()
                      for a in dir(c) if a.startswith(_PREFIXES) and callable(getattr(c, a)))
    assert {f"{c.__name__}.{m}" for c in CLASSES for m in METRICS} <= {n.split(".", 1)[1] for n in expected}
    assert "bench_resnet.ResNetComplexity.track_activation_exponent" in expected  # the complexity tracker (issue 18)
    assert names == expected


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_params_and_param_names_aligned(cls):
    assert isinstance(cls.params, list) and isinstance(cls.param_names, list)
    assert len(cls.params) == len(cls.param_names), (cls.params, cls.param_names)
    assert len(set(cls.param_names)) == len(cls.param_names)
    assert all(isinstance(p, list) and p for p in cls.params)
    assert all(len(set(map(repr, p))) == len(p) for p in cls.params), "duplicate values in a param list"
    assert cls.param_names[0] == "technique" and cls.param_names[-1] == "device"
    from benchmarks.common import DEVICES, devices_from_env

    assert cls.params[-1] == DEVICES == devices_from_env()
    for metric in METRICS:
        assert callable(getattr(cls, metric))
    assert cls.track_peak_allocated.unit == "bytes" and cls.track_peak_reserved.unit == "bytes"
    # NOTE [ track_relative_step_time at one thread ]
    assert cls.track_relative_step_time.unit == "ratio"


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
    # the step options are the setting's, not a technique's (NOTE [ step options ] in benchmarks/common.py)
    from benchmarks.common import STEP_OPTIONS

    assert set(cls.param_names[1:-1]) <= known | set(STEP_OPTIONS)
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


def test_readme_table_lists_every_benchmark_file():
    """benchmarks/README.md's table (its first) names every bench_*.py, and no file that is gone."""
    text = (ROOT / "benchmarks" / "README.md").read_text()
    table = text.split("| benchmark file |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"^\| `(bench_\w+\.py)` \|", table, re.M))
    assert listed == {p.name for p in (ROOT / "benchmarks").glob("bench_*.py")}


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
from memlab.families.chunking.workload import ChainedMatmul
import memlab.families.tensor_train.workload as tt

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


def test_cuda_where_torch_cannot_use_it_fails_not_skips(tmp_path):
    """A ``cuda`` combination exists only where the host shows a GPU or MEMLAB_ASV_DEVICES asks for
    it; torch then failing to use CUDA (a CPU build in asv's environment) is a failure."""
    import torch

    from benchmarks.bench_chunking import ChainedMatmul
    from benchmarks.common import BenchmarkFailure

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(BenchmarkFailure, match=r"torch.cuda.is_available\(\) is False") as info:
        ChainedMatmul().setup(str(tmp_path), "unchunked", 2000, "cuda")
    assert not isinstance(info.value, NotImplementedError)


@pytest.mark.parametrize("environ, gpu, expected", [
    ({}, False, ["cpu"]),
    ({}, True, ["cpu", "cuda"]),
    ({"MEMLAB_ASV_DEVICES": ""}, True, ["cpu", "cuda"]),
    ({"MEMLAB_ASV_DEVICES": "cpu"}, True, ["cpu"]),
    ({"MEMLAB_ASV_DEVICES": " CUDA , cpu,cuda"}, False, ["cpu", "cuda"]),
    ({"MEMLAB_ASV_DEVICES": "cuda"}, False, ["cuda"]),
])
def test_devices_from_env(environ, gpu, expected):
    from benchmarks.common import devices_from_env

    assert devices_from_env(environ, gpu=gpu) == expected


def test_devices_from_env_rejects_unknown_names():
    from benchmarks.common import devices_from_env

    with pytest.raises(ValueError, match=r"MEMLAB_ASV_DEVICES='cpu,gpu' is not valid: unknown device\(s\) \['gpu'\]"):
        devices_from_env({"MEMLAB_ASV_DEVICES": "cpu,gpu"})


def test_gpu_probe_reads_the_driver_not_torch(tmp_path):
    """NOTE [ device ]: the probe looks at the driver's files; CUDA_VISIBLE_DEVICES="" hides GPUs."""
    from benchmarks.common import host_has_nvidia_gpu

    proc, dev = tmp_path / "gpus", tmp_path / "dev"
    proc.mkdir()
    dev.mkdir()
    assert not host_has_nvidia_gpu({}, proc_dir=str(proc), dev_dir=str(dev))
    (dev / "nvidiactl").touch()
    assert not host_has_nvidia_gpu({}, proc_dir=str(proc), dev_dir=str(dev))
    (dev / "nvidia0").touch()
    assert host_has_nvidia_gpu({}, proc_dir=str(proc), dev_dir=str(dev))
    (proc / "0000:3b:00.0").mkdir()
    assert host_has_nvidia_gpu({}, proc_dir=str(proc), dev_dir=str(tmp_path / "missing"))
    assert not host_has_nvidia_gpu({"CUDA_VISIBLE_DEVICES": ""}, proc_dir=str(proc), dev_dir=str(dev))


def test_device_list_follows_the_environment_in_a_fresh_import():
    """What asv's discovery and fork server see: MEMLAB_ASV_DEVICES decides, and CUDA stays untouched."""
    code = ("import torch, benchmarks.bench_chunking as b; "
            "print(b.ChainedMatmul.params[-1], torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                         env={**os.environ, "MEMLAB_ASV_DEVICES": "cuda,cpu"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['cpu',", "'cuda']", "False"]


def test_cpu_resident_is_not_measured_on_cpu(tmp_path):
    """NOTE [ CPU resident is not a regression metric ]: asv runs the benchmark's own setup after
    the class's; on CPU it skips, on CUDA it lets the combination run."""
    discovery = pytest.importorskip("asv_runner.discovery")
    from benchmarks.common import _cuda_only

    bench = {b.name: b for b in discovery.disc_benchmarks(str(ROOT / "benchmarks"))}
    for name in ("bench_chunking.ChainedMatmul", "bench_tensor_train.TTLinear", "bench_reversible.ResidualStack"):
        assert bench[f"{name}.track_peak_reserved"]._setups[-1] is _cuda_only
        assert _cuda_only not in bench[f"{name}.track_peak_allocated"]._setups
    with pytest.raises(NotImplementedError, match="CPU resident is not a regression metric"):
        _cuda_only(str(tmp_path), "unchunked", 2000, "cpu")
    assert _cuda_only(str(tmp_path), "unchunked", 2000, "cuda") is None


def _tiny_chained_matmul():
    from benchmarks.bench_chunking import ChainedMatmul

    class Tiny(ChainedMatmul):
        fixed = {"n": 64, "d": 8, "hidden": 16}

    return Tiny


def test_both_memory_metrics_come_from_one_measurement(tmp_path):
    tiny = _tiny_chained_matmul()
    combo = ("unchunked", 2000, "cpu")
    b = tiny()
    threads = torch.get_num_threads()
    b.setup(str(tmp_path), *combo)
    assert b._step is None  # NOTE [ only time_step builds a step in setup ]
    b.time_step.setup(str(tmp_path), *combo)  # asv runs time_step's own setup after the class's
    assert b._step is not None and torch.get_num_threads() == 1  # NOTE [ timing ]: one thread
    b.time_step(str(tmp_path), *combo)
    allocated = b.track_peak_allocated(str(tmp_path), *combo)
    # unchunked (x @ w1) @ w2 at n=64, d=8, hidden=16, float32: hidden h [64, 16] saved for backward,
    # then y [64, 8]; its peak is at least h + y + the three gradients (x, w1, w2)
    assert isinstance(allocated, int) and allocated >= 4 * (64 * 16 + 64 * 8 + 64 * 8 + 8 * 16 + 16 * 8)
    (cached,) = tmp_path.glob("memlab-chained_matmul-unchunked-cpu-*.json")
    assert json.loads(cached.read_text())["peak_allocated_bytes"] == allocated
    b.teardown(str(tmp_path), *combo)
    assert torch.get_num_threads() == threads  # restored for the rest of this process
    b2 = tiny()
    b2.setup(str(tmp_path), *combo)
    # called directly (asv's per-benchmark setup would skip it on CPU): read from the same file
    assert b2.track_peak_reserved(str(tmp_path), *combo) == json.loads(cached.read_text())["peak_reserved_bytes"]


def test_import_warms_the_fork_server():
    """NOTE [ warm the fork server ]: the lazy torch._dynamo import of the first optimizer is paid
    once at import, not once per forked combination (checked in a fresh interpreter)."""
    code = ("import sys, torch; assert 'torch._dynamo' not in sys.modules; "
            "import benchmarks.common; print('torch._dynamo' in sys.modules, torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["True", "False"]


def test_import_does_not_initialise_cuda():
    """asv imports the benchmarks in its fork server; CUDA must not be initialised there."""
    import torch

    for name in MODULES:
        importlib.import_module(name)
    assert not torch.cuda.is_initialized()


def _asv(tmp_path: Path, *args: str, timeout: float, env: dict | None = None,
         repo: Path | None = None) -> subprocess.CompletedProcess:
    """Run asv with a copy of asv.conf.json whose output paths lie under ``tmp_path``.

    Even ``--dry-run`` writes ``results/<machine>/machine.json``; the copy keeps the repository
    clean.  HOME points at ``tmp_path`` too, whose ``.asv-machine.json`` names a test machine, so
    the user's own machine file is neither needed nor touched.  ``repo``: another git repository
    (default: this one); the benchmarks are always this working tree's.
    """
    exe = Path(sys.executable).with_name("asv")
    if not exe.exists():
        pytest.skip("asv is not installed next to this Python (pip install -e '.[bench]')")
    conf = _asv_conf()
    conf.update(repo=str(repo or ROOT), benchmark_dir=str(ROOT / "benchmarks"), results_dir=str(tmp_path / "results"),
                env_dir=str(tmp_path / "env"), html_dir=str(tmp_path / "html"))
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))
    (tmp_path / ".asv-machine.json").write_text(json.dumps({"version": 1, "memlab-test": {
        "machine": "memlab-test", "os": "test", "arch": "test", "cpu": "test", "num_cpu": "2", "ram": "1GB"}}))
    cmd = [str(exe), *args[:1], "--config", str(tmp_path / "asv.conf.json"), *args[1:]]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {}), "HOME": str(tmp_path)})


@pytest.mark.asv
def test_asv_check(tmp_path):
    out = _asv(tmp_path, "check", "--python=same", timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "No problems found" in out.stdout, out.stdout


PLUGIN_CHUNKING = '''
import memlab
from memlab.families.chunking.workload import ChainedMatmul


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
               "-b", bench + r"\('plugin_unchunked', 2000, 'cpu'\)", timeout=HANG_GUARD_S,
               env={"MEMLAB_PLUGINS": str(plugin)})
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    # the measured values, e.g. "8.24M" in asv's table (first column: chunk_size 2000 on this host's
    # first device, cpu); a failure prints "failed" instead
    assert re.search(r"einsum_chunk\s+(2000\s+)?[\d.]+[kMG]", text), text
    assert re.search(r"plugin_unchunked\s+(2000\s+)?[\d.]+[kMG]", text), text
    assert "failed" not in text, text
    saved = [f for f in (tmp_path / "results").rglob("*.json") if f.name not in ("machine.json", "benchmarks.json")]
    assert not saved, saved


# -- failures are failures (NOTE [ skipped or failed ] in benchmarks/common.py) ------------------------

BROKEN_MEMLAB = 'raise ImportError("memlab is broken at this commit (deliberately)")\n'

SETUP_ONE = """
import sys
sys.path.insert(0, {root!r})  # the benchmarks package; a broken memlab, when given, goes first
from benchmarks.bench_chunking import ChainedMatmul
try:
    ChainedMatmul().setup({cache!r}, "unchunked", 2000, "cpu")
except Exception as exc:
    print("RAISED", type(exc).__name__, "skip" if isinstance(exc, NotImplementedError) else "fail", "|", exc)
else:
    print("RAN")
"""


def _setup_in_fresh_process(tmp_path: Path, pythonpath: str | None = None, env: dict | None = None) -> str:
    """Import the benchmarks in a fresh interpreter (as asv's fork server does) and run one setup."""
    code = SETUP_ONE.format(root=str(ROOT), cache=str(tmp_path))
    if pythonpath:
        code = f"import sys; sys.path.insert(0, {pythonpath!r})\n" + code.replace(
            f"sys.path.insert(0, {str(ROOT)!r})", f"sys.path.insert(1, {str(ROOT)!r})")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_GUARD_S,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_broken_memlab_fails_setup_instead_of_skipping(tmp_path):
    """A commit whose ``import memlab`` raises is a failure (asv: ``failed``), not ``n/a``."""
    broken = tmp_path / "broken"
    (broken / "memlab").mkdir(parents=True)
    (broken / "memlab" / "__init__.py").write_text(BROKEN_MEMLAB)
    line = _setup_in_fresh_process(tmp_path, pythonpath=str(broken))
    assert line.startswith("RAISED BenchmarkFailure fail | import memlab failed"), line
    assert "memlab is broken at this commit" in line, line


def test_broken_registry_fails_setup_instead_of_skipping(tmp_path):
    """A technique module (here a plug-in) that raises on import leaves the registry half-filled:
    the error recorded at import is raised again, techniques are not reported as absent."""
    plugin = tmp_path / "bad_plugin.py"
    plugin.write_text("raise RuntimeError('this plug-in is broken')\n")
    line = _setup_in_fresh_process(tmp_path, env={"MEMLAB_PLUGINS": str(plugin)})
    assert line.startswith("RAISED BenchmarkFailure fail | memlab.list_techniques() failed"), line
    assert "this plug-in is broken" in line, line


def test_working_memlab_runs_setup(tmp_path):
    assert _setup_in_fresh_process(tmp_path) == "RAN"


def test_invalid_value_fails_not_skips(tmp_path):
    """A value the memlab version rejects (ValueError from prepare) is a failure: the grid is valid
    in the working tree, so a version rejecting it changed or broke something."""
    from benchmarks.bench_chunking import ChainedMatmul

    class Bad(ChainedMatmul):
        params = [["slice_loop"], [0], ["cpu"]]

    with pytest.raises(ValueError, match="chunk_size"):
        Bad().setup(str(tmp_path), "slice_loop", 0, "cpu")


GOOD_BAD_CONF_BENCH = r"bench_chunking\.ChainedMatmul\.track_peak_allocated\('einsum_chunk', 2000, 'cpu'\)"


@pytest.mark.asv
def test_asv_records_a_broken_commit_as_failed(tmp_path):
    """``asv run`` and ``asv compare`` over a throw-away repository: a good commit, then one whose
    memlab does not import.  Both runs use this venv (``--python=same``); the broken commit's memlab
    is put first on the benchmark processes' path with ``ASV_PYTHONPATH`` (asv's way to set
    PYTHONPATH for them), and ``--set-commit-hash`` files each run under its commit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README").write_text("good\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "good"], check=True)
    (repo / "memlab").mkdir()
    (repo / "memlab" / "__init__.py").write_text(BROKEN_MEMLAB)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "break memlab"], check=True)
    good, bad = (subprocess.run([*git, "rev-parse", rev], check=True, capture_output=True, text=True).stdout.strip()
                 for rev in ("HEAD~1", "HEAD"))
    run = ("run", "--python=same", "--show-stderr", "--machine", "memlab-test", "-b", GOOD_BAD_CONF_BENCH)
    out_good = _asv(tmp_path, *run, "--set-commit-hash", good, timeout=HANG_GUARD_S, repo=repo)
    assert out_good.returncode == 0, out_good.stdout + out_good.stderr
    out_bad = _asv(tmp_path, *run, "--set-commit-hash", bad, timeout=HANG_GUARD_S, repo=repo,
                   env={"ASV_PYTHONPATH": str(repo)})
    text = out_bad.stdout + out_bad.stderr
    assert out_bad.returncode != 0, text  # asv run exits non-zero when a benchmark failed
    assert "failed" in text and "import memlab failed" in text and "memlab is broken at this commit" in text, text
    (saved,) = (tmp_path / "results" / "memlab-test").glob(f"{bad[:8]}-*.json")
    data = json.loads(saved.read_text())
    name = "bench_chunking.ChainedMatmul.track_peak_allocated"
    params = dict(zip(data["result_columns"], data["results"][name]))["params"]
    values = dict(zip(data["result_columns"], data["results"][name]))["result"]
    assert values is None or values[list(itertools.product(*params)).index(("'einsum_chunk'", "2000", "'cpu'"))] is None
    cmp = _asv(tmp_path, "compare", "--machine", "memlab-test", good, bad, timeout=HANG_GUARD_S, repo=repo)
    assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    # asv 0.6's markdown table: | Change | Before | After | Ratio | Benchmark (Parameter) |
    (row,) = [line for line in cmp.stdout.splitlines() if "('einsum_chunk', 2000, 'cpu')" in line]
    change, before, after = (cell.strip() for cell in row.strip().strip("|").split("|")[:3])
    assert (change, after) == ("!", "failed") and before.endswith("M"), cmp.stdout


def _matrix_resolves_with_a_local_torch() -> str | None:
    """Why asv's environment cannot be built here cheaply, or None.

    ``pip install --dry-run --report`` resolves the matrix (and asv's own packages) with the user's
    pip configuration, downloading nothing; the environment is built only where torch resolves to
    a local file (a wheelhouse or local index), never a multi-GB download from an index.
    """
    conf = _asv_conf()
    reqs = [f"{name}=={versions[0]}" for name, versions in conf["matrix"]["req"].items()]
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                          "--quiet", "--report", "-", *reqs, "asv_runner", "pympler", "build"],
                         capture_output=True, text=True, timeout=HANG_GUARD_S, env={**os.environ, "PIP_RETRIES": "0"})
    if out.returncode != 0:
        return f"pip cannot resolve asv's matrix here: {out.stderr.strip()[-300:]}"
    urls = {item["metadata"]["name"].lower(): item["download_info"]["url"] for item in json.loads(out.stdout)["install"]}
    if not urls.get("torch", "").startswith("file:"):
        return f"torch would be downloaded ({urls.get('torch')}), not read from a local wheel"
    return None


@pytest.mark.asv
@pytest.mark.slow  # ~2 min idle: `make test-slow`; the same verdict through --python=same is in `make test`
def test_asv_run_builds_a_broken_commit_and_records_it_as_failed(tmp_path):
    """The whole asv path, no shortcuts: a throw-away clone of this repository's HEAD plus a commit
    that breaks ``import memlab``; asv builds its virtualenv (torch from the local wheel), builds and
    installs memlab at both commits and runs one combination at each.  About 80 s on 2 cores."""
    why = _matrix_resolves_with_a_local_torch()
    if why:
        pytest.skip(why)
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(repo)], check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    (repo / "memlab" / "__init__.py").write_text(BROKEN_MEMLAB)
    subprocess.run([*git, "commit", "-q", "-am", "break memlab"], check=True)
    good, bad = (subprocess.run([*git, "rev-parse", rev], check=True, capture_output=True, text=True).stdout.strip()
                 for rev in ("HEAD~1", "HEAD"))
    (tmp_path / "commits.txt").write_text(f"{good}\n{bad}\n")
    run = _asv(tmp_path, "run", "--show-stderr", "--machine", "memlab-test", "-b", GOOD_BAD_CONF_BENCH,
               f"HASHFILE:{tmp_path / 'commits.txt'}", timeout=HANG_GUARD_S, repo=repo)
    text = run.stdout + run.stderr
    assert run.returncode != 0, text  # asv run exits non-zero when a benchmark failed
    assert re.search(r"track_peak_allocated\s+1/\d+ failed", text) and "import memlab failed" in text, text
    cmp = _asv(tmp_path, "compare", "--machine", "memlab-test", good, bad, timeout=HANG_GUARD_S, repo=repo)
    assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    (row,) = [line for line in cmp.stdout.splitlines() if "('einsum_chunk', 2000, 'cpu')" in line]
    change, before, after = (cell.strip() for cell in row.strip().strip("|").split("|")[:3])
    assert (change, after) == ("!", "failed") and before.endswith("M"), cmp.stdout


def common_samples(timed: dict):
    from benchmarks.common import relative_samples

    return relative_samples(timed)


def test_relative_step_time_is_measured_at_one_thread(tmp_path, monkeypatch):
    """NOTE [ track_relative_step_time at one thread ]: one intra-op thread during its measurement
    (load-robust), the caller's threads afterwards, cached apart from the memory figures."""
    import torch

    import memlab

    tiny = _tiny_chained_matmul()
    combo = ("slice_loop", 16, "cpu")
    seen = []
    real = memlab.measure

    @functools.wraps(real)  # the benchmarks read measure's signature (what this memlab version takes)
    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(memlab, "measure", spy)
    ours = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        b = tiny()
        b.setup(str(tmp_path), *combo)
        value = b.track_relative_step_time(str(tmp_path), *combo)
        assert torch.get_num_threads() == 2
        b.track_peak_allocated(str(tmp_path), *combo)
    finally:
        torch.set_num_threads(ours)
    assert seen == [1, 2]  # the relative time at one thread; the memory figures at the default
    (cached,) = tmp_path.glob("memlab-*.relative.json")
    timed = json.loads(cached.read_text())
    assert timed["relative_step_time"] > 0
    assert value == common_samples(timed)  # its per-round ratios as samples (tests/test_benchmarks_samples.py)
    assert b.track_relative_step_time(str(tmp_path), *combo) == value  # read back, not re-measured
    assert len(seen) == 2


def test_time_limit_gap_is_the_relative_time_over_the_flop_ratio(tmp_path):
    """issue 32: the gap is the cached relative time over (FLOPs / the family baseline's FLOPs),
    the baseline's FLOPs measured once (cached); the baseline's own gap is its relative time."""
    import memlab

    tiny = _tiny_chained_matmul()
    gaps = {}
    for technique, chunk in (("slice_accumulate", 16), ("unchunked", 2000)):
        combo = (technique, chunk, "cpu")
        b = tiny()
        b.setup(str(tmp_path), *combo)
        gaps[technique] = b.track_time_limit_gap(str(tmp_path), *combo)
        timed = json.loads(next(tmp_path.glob(f"memlab-*{technique}*.relative.json")).read_text())
        assert timed["relative_to"] == "unchunked" and timed["flops"] > 0
        base = memlab.measure("unchunked", isolate=False, iterations=1, repeats=1, time_budget=0, check=False,
                              **{k: v for k, v in b.config.items() if k != "chunk_size"})
        assert gaps[technique] == pytest.approx(timed["relative_step_time"] / (timed["flops"] / base.flops), rel=1e-12)
        assert b.track_time_limit_gap(str(tmp_path), *combo) == gaps[technique]  # read back, not re-measured
    (sa,) = tmp_path.glob("memlab-*slice_accumulate*.baseline-flops.json")
    assert json.loads(sa.read_text())["flops"] < json.loads(next(tmp_path.glob(
        "memlab-*slice_accumulate*.relative.json")).read_text())["flops"]  # it recomputes: more FLOPs than its baseline


def test_predicted_cuda_reserved_comes_from_the_same_measurement(tmp_path):
    """Deterministic bytes: the CUDA caching allocator replayed on the step's trace, read from the
    one cached measurement; skipped on CUDA, where reserved is measured."""
    import memlab
    from benchmarks.common import _cpu_only

    tiny = _tiny_chained_matmul()
    combo = ("slice_loop", 16, "cpu")
    b = tiny()
    b.setup(str(tmp_path), *combo)
    predicted = b.track_predicted_cuda_reserved(str(tmp_path), *combo)
    m = memlab.measure("slice_loop", isolate=False, iterations=1, repeats=1, check=False, time_budget=0,
                       n=64, d=8, hidden=16, chunk_size=16)
    assert predicted == m.predicted_cuda["reserved_peak_bytes"] and predicted % (2 * 1024 * 1024) == 0
    (cached,) = tmp_path.glob("memlab-*-cpu-*.json")
    assert json.loads(cached.read_text())["predicted_cuda_reserved_bytes"] == predicted
    with pytest.raises(NotImplementedError):
        _cpu_only(str(tmp_path), "slice_loop", 16, "cuda")
