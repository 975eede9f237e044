"""A new family as one plug-in file: workload, advisor declaration and two techniques, no other edit.

The file is written to a temporary folder and every step runs through the command line in its own
process (so the plug-in never enters this session's registry): checked, measured, swept, its advisor
model fitted on its tiny declared grid (``memlab advise --fit --family``), advised from the model
file alone (no ``--plugin``: the declaration travels in the file), and drawn on the site with its
own family page and on the Choose page, where the browser's evaluation agrees with Python's; and
benchmarked by asv: with the file in ``MEMLAB_PLUGINS`` asv's own discovery finds a benchmark class for
the family's workload (``benchmarks/bench_plugins.py``) whose combination measures what
``memlab measure`` does.  About 2 minutes on 2 loaded cores (the fit: ~1 minute).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.advisor import load_models, predict, predict_time
from process_checks import HANG_GUARD_S
from test_benchmarks import _asv
from test_site_browser import _close, _evaluate, _visit, browser, served  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
FAMILY = "two_layer_mlp"

PLUGIN = '''
"""A family in one file: the workload y = relu(x @ w1) @ w2, its advisor model and two techniques."""
import torch
from torch.utils.checkpoint import checkpoint

import memlab
from memlab.advisor import Entry, NoLoop


class TwoLayer(memlab.Workload, name="two_layer", family="two_layer_mlp"):
    """y = relu(x @ w1) @ w2 with x [batch, d], w1 [d, hidden], w2 [hidden, d]."""

    params = {
        "batch": memlab.Param(64, low=1, high=1_000_000, doc="rows of x"),
        "d": memlab.Param(16, low=1, high=100_000, doc="features of x and y"),
        "hidden": memlab.Param(32, low=1, high=100_000, doc="width of relu(x @ w1)"),
    }
    samples_param = "batch"
    check_params = {"batch": 7, "d": 3, "hidden": 5}

    @classmethod
    def sweep_grid(cls, quick):
        return [{"batch": 64, "d": 16, "hidden": h} for h in ((32,) if quick else (32, 64, 128))]

    def build(self, device, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        c = self.config
        model = torch.nn.Module()
        model.w1 = torch.nn.Parameter(torch.randn(c["d"], c["hidden"], generator=g).to(device, dtype))
        model.w2 = torch.nn.Parameter(torch.randn(c["hidden"], c["d"], generator=g).to(device, dtype))
        x = torch.randn(c["batch"], c["d"], generator=g).to(device, dtype).requires_grad_()
        grad_out = torch.randn(c["batch"], c["d"], generator=g).to(device, dtype)
        return memlab.Problem(model=model, inputs={"x": x}, grad_output=grad_out)

    def reference(self, problem):
        m = problem.model
        return torch.relu(problem.inputs["x"] @ m.w1) @ m.w2


class TwoLayerModel(memlab.AdvisorModel, family="two_layer_mlp"):
    """The family's advisor model: sizes batch, d, hidden; no loop."""

    workload = TwoLayer
    sizes = ("batch", "d", "hidden")
    loop = NoLoop()
    entries = (Entry("two_layer_plain"), Entry("two_layer_recompute"))
    held_out = {"batch": (2, 40), "d": (2, 20), "hidden": (2, 40)}
    time_sizes = ({"batch": 32, "d": 8, "hidden": 16}, {"batch": 64, "d": 16, "hidden": 32})
    work = "batch*d*hidden"


class Plain(memlab.Technique, name="two_layer_plain"):
    """Plain autograd: relu(x @ w1) is kept for backward."""

    workload = TwoLayer
    baseline = True

    def forward(self, problem):
        m = problem.model
        return torch.relu(problem.inputs["x"] @ m.w1) @ m.w2


class Recompute(memlab.Technique, name="two_layer_recompute"):
    """The hidden activation recomputed in backward (torch.utils.checkpoint)."""

    workload = TwoLayer

    def forward(self, problem):
        m = problem.model
        return checkpoint(lambda x: torch.relu(x @ m.w1) @ m.w2, problem.inputs["x"], use_reentrant=False)
'''


def _memlab(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("MEMLAB_PLUGINS", None)
    out = subprocess.run([sys.executable, "-m", "memlab", *args], capture_output=True, text=True, timeout=HANG_GUARD_S,
                         cwd=ROOT, env=env)
    if check:
        assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The plug-in file, swept, fitted and drawn: ``(root, plug-in path, data folder, site folder)``."""
    root = tmp_path_factory.mktemp("plugin_family")
    plugin = root / "two_layer.py"
    plugin.write_text(PLUGIN)
    data = root / "data"
    (data / "sweeps").mkdir(parents=True)
    # no step time of the sweep is asserted (rows' status and bytes, the site's pages): one timed step each
    _memlab("sweep", "--plugin", str(plugin), "--family", FAMILY, "--quick", "--time-budget", "0",
            "--out", str(data / "sweeps" / f"cpu-{FAMILY}.jsonl"))
    _memlab("advise", "--fit", "--family", FAMILY, "--optimizer", "sgd", "--models", str(data / "models"),
            "--plugin", str(plugin))
    (root / "results").mkdir()
    _memlab("site", "--results", str(root / "results"), "--data", str(data), "--out", str(root / "site"))
    return root, plugin, data, root / "site"


@pytest.fixture(scope="module")
def measured(built):
    """``memlab measure two_layer_recompute --plugin FILE --json`` run once for the two tests that read
    it (its bytes and status; no step time is asserted, so its timed phase stops after the one checked step)."""
    _, plugin, _, _ = built
    return json.loads(_memlab("measure", "two_layer_recompute", "--plugin", str(plugin), "--time-budget", "0",
                              "--json").stdout)


def test_checked_and_measured_from_the_one_file(built, measured):
    _, plugin, _, _ = built
    out = _memlab("check", "two_layer_plain", "two_layer_recompute", "--plugin", str(plugin))
    assert out.stdout.count("PASS") == 2, out.stdout
    m = measured
    assert m["status"] == "ok" and m["matches_reference"] is True and m["total_peak_bytes"] > 0


def test_swept_and_fitted_exactly_on_held_out_points(built):
    _, _, data, _ = built
    rows = [json.loads(line) for line in (data / "sweeps" / f"cpu-{FAMILY}.jsonl").read_text().splitlines()]
    assert {r["technique"] for r in rows} == {"two_layer_plain", "two_layer_recompute"}
    assert all(r["status"] == "ok" for r in rows)
    fam = load_models("sgd", data / "models")["families"][FAMILY]
    assert fam["declaration"]["family"] == FAMILY and fam["declaration"]["loop"] == {"kind": "none"}
    assert fam["declaration"]["declared_by"].endswith(".TwoLayerModel")
    for e in fam["entries"]:
        assert e["held_out_traced"]["max_abs_error_bytes"] == 0 and e["max_abs_error_bytes"] == 0, e["label"]
        assert e["recommendable"] and e["time"]["kind"] == "work"


def test_advised_from_the_model_file_without_the_plugin(built):
    _, _, data, _ = built
    out = _memlab("advise", "--family", FAMILY, "--budget", "1GiB", "--models", str(data / "models"),
                  "--param", "batch=4096", "--json")
    a = json.loads(out.stdout)
    assert {c["technique"] for c in a["fits"]} == {"two_layer_plain", "two_layer_recompute"}
    fam = load_models("sgd", data / "models")["families"][FAMILY]
    entry = next(e for e in fam["entries"] if e["technique"] == "two_layer_plain")
    first = next(c for c in a["fits"] if c["technique"] == "two_layer_plain")
    assert first["total_peak_bytes"] == predict(fam, entry, {"batch": 4096, "d": 16, "hidden": 32})["total_peak_bytes"]
    low = _memlab("advise", "--family", FAMILY, "--budget", "1KiB", "--models", str(data / "models"), check=False)
    assert low.returncode == 2 and low.stderr.strip().count("\n") == 0
    assert "no modelled two_layer_mlp technique fits" in low.stderr


def test_drawn_with_its_own_family_page_and_on_the_choose_page(built):
    _, _, _, site = built
    page = (site / f"family-{FAMILY}.html").read_text()
    assert "two_layer_plain" in page and "two_layer_recompute" in page
    assert f'href="family-{FAMILY}.html"' in (site / "index.html").read_text()
    choose = (site / "choose.html").read_text()
    assert f'>{FAMILY}</option>' in choose and f"<strong>{FAMILY}</strong>" in choose and "left out of the Choose page" not in (site / "methodology.html").read_text()


def test_the_browser_evaluates_the_plugin_model_as_python_does(built, browser, served):  # noqa: F811
    _, _, data, site = built
    fam = load_models("sgd", data / "models")["families"][FAMILY]
    state, errors, session = _visit(browser, served(site)("choose.html"))
    try:
        assert errors == [], errors
        points = [{"batch": b, "d": d, "hidden": h} for b, d, h in ((1, 1, 1), (64, 16, 32), (4096, 300, 7))]
        for entry in fam["entries"]:
            got = _evaluate(browser, session, "JSON.stringify(" + json.dumps(points) + ".map(p => memlabChoose.predict("
                            + json.dumps("sgd") + ", " + json.dumps(FAMILY) + ", " + json.dumps(entry["label"])
                            + ", p)))")
            for p, js in zip(points, got):
                py = predict(fam, entry, p)
                assert js["total"] == str(py["total_peak_bytes"]) and js["k"] == 1, (entry["label"], p)
                assert js["time"] == predict_time(fam, entry, p)
    finally:
        _close(browser, session)


ASV_PROBE = """
import json, sys
sys.path.insert(0, {root!r})
from asv_runner import discovery
names = sorted(b.name for b in discovery.disc_benchmarks({bench!r}))
from benchmarks import bench_plugins
cls = getattr(bench_plugins, "PluginTwoLayer")
b = cls()
b.setup({cache!r}, "two_layer_recompute", "cpu")
value = b.track_peak_allocated({cache!r}, "two_layer_recompute", "cpu")
print(json.dumps({{"names": [n for n in names if n.startswith("bench_plugins.")], "params": cls.params,
                  "param_names": cls.param_names, "allocated": value}}))
"""


def test_benchmarked_by_asv_through_memlab_plugins(built, measured, tmp_path):
    """asv's discovery (``asv_runner``, as ``asv run`` calls it) in a fresh process with the plug-in in
    ``MEMLAB_PLUGINS``: a benchmark class for the family's workload with both techniques, every metric
    of the built-in classes, and a combination that measures the bytes ``memlab measure`` gives."""
    pytest.importorskip("asv_runner.discovery")
    _, plugin, _, _ = built
    code = ASV_PROBE.format(root=str(ROOT), bench=str(ROOT / "benchmarks"), cache=str(tmp_path))
    env = {**os.environ, "MEMLAB_PLUGINS": str(plugin), "MEMLAB_ASV_DEVICES": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["param_names"] == ["technique", "device"]
    assert got["params"] == [["two_layer_plain", "two_layer_recompute"], ["cpu"]]
    assert {f"bench_plugins.PluginTwoLayer.{m}" for m in ("track_peak_allocated", "track_predicted_cuda_reserved",
                                                          "track_relative_step_time", "time_step")} <= set(got["names"])
    assert got["allocated"] == measured["peak_allocated_bytes"] > 0


@pytest.mark.asv
def test_asv_run_measures_the_plugin_family(built, tmp_path):
    """``asv run --quick --dry-run`` itself (this venv, nothing saved): both techniques of the plug-in's
    workload measured through asv's fork server, none failed."""
    _, plugin, _, _ = built
    out = _asv(tmp_path, "run", "--python=same", "--quick", "--dry-run", "--show-stderr", "--machine", "memlab-test",
               "-b", r"bench_plugins\.PluginTwoLayer\.track_peak_allocated", timeout=HANG_GUARD_S,
               env={"MEMLAB_PLUGINS": str(plugin), "MEMLAB_ASV_DEVICES": "cpu"})
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    for name in ("two_layer_plain", "two_layer_recompute"):  # asv's table: the technique, then its bytes
        assert re.search(name + r"\s+[\d.]+[kMG]", text), text
    assert "failed" not in text, text


def test_without_plugins_the_plugin_benchmarks_define_nothing():
    """The built-in suite is unchanged when no plug-in is named (asv's benchmark list stays the same)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import bench_plugins

    assert bench_plugins.plugin_classes({}) == {}
    assert bench_plugins.class_name("two_layer") == "PluginTwoLayer"
