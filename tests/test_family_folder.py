"""A built-in family's folder, copied under a new name, is a family: no edit to any existing file.

The chunking folder (``memlab/families/chunking/``) is copied into a temporary folder as
``chunking_copy``, its family, workload and technique names renamed textually in the copy (each quoted
name gets ``_copy``), its advisor declaration cut to two entries and two time sizes (a small fit), and
loaded with ``--plugin DIR`` / ``MEMLAB_PLUGINS=DIR``.  Every step runs through the command line in its
own process: checked, measured (the same bytes as the built-in technique it copies), swept, its
advisor model fitted and advised from the model file, drawn on the site with its own family page and
the colours its ``meta.py`` names, its held-out time settings found by the time check, and
benchmarked by asv on its ``meta.py`` grid (``benchmarks/bench_plugins.py``).  What else the folder
holds comes with it: its seed reproduction (``reproductions/``, its ``SEED`` renamed too: ``memlab
reproduce`` and the site's seed pages find it), its site footnote (``meta.py``'s ``SITE_NOTES``) and
its bench-harness and limits points (``HARNESS_LOAD_POINTS``, ``LIMIT_POINTS``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pandas as pd

from memlab.advisor.time_check import held_out
from memlab.measurement.flop_limits import limit_points
from memlab.measurement.harness_cost import load_points
from memlab.registry import REPRODUCTIONS, builtin_families, family_meta
from memlab.site.colors import NAMED
from memlab.site.notes import footnotes
from memlab.site.seed_meta import seed_metadata
from process_checks import HANG_GUARD_S
from test_plugin_family import ROOT, _memlab

SOURCE = "chunking"
FAMILY = "chunking_copy"
WORKLOAD = "chained_matmul"
#: the two techniques swept, fitted and drawn (the baseline and one other, to keep the test short)
PLAIN, OTHER = "unchunked_copy", "slice_loop_copy"
#: the copy's advisor declaration: two entries, two small time sizes (the built-in's fits for minutes)
SMALL_MODEL = '''    entries = (
        Entry("unchunked"),
        Entry("slice_loop", knobs=("chunk_size",)),
    )
    held_out = {"n": (2, 400), "d": (2, 48), "hidden": (2, 96)}
    time_sizes = ({"n": 256, "d": 16, "hidden": 32}, {"n": 512, "d": 32, "hidden": 64})
'''


def _rename(text: str, techniques: list[str]) -> str:
    """The copy's names: every quoted family, workload and technique name (and an advisor label's
    ``name[...]``) gets ``_copy``; Python names and ``__all__`` are left alone."""
    names = "|".join(sorted([SOURCE, WORKLOAD, *techniques], key=len, reverse=True))
    return "\n".join(line if line.startswith("__all__") else re.sub(rf'"({names})(["\[])', r'"\1_copy\2', line)
                     for line in text.split("\n"))


def copy_family(dest: Path) -> Path:
    """The chunking folder copied to ``dest/chunking_copy``, renamed (its seed reproductions' ``SEED``
    too: a seed names one reproduction), its advisor model made small."""
    source = dict(builtin_families())[SOURCE]
    folder = dest / FAMILY
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__"))
    techniques = list(family_meta()[SOURCE].colors)
    for path in folder.rglob("*.py"):
        path.write_text(re.sub(r'(?m)^SEED = "([^"]+)"', r'SEED = "\1-copy"', _rename(path.read_text(), techniques)))
    workload = folder / "workload.py"
    text = workload.read_text()
    start, end = text.index("    entries = ("), text.index("    work = ")
    workload.write_text(text[:start] + SMALL_MODEL.replace('"unchunked"', f'"{PLAIN}"')
                        .replace('"slice_loop"', f'"{OTHER}"') + text[end:])
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The copied folder, swept, fitted and drawn: ``(root, folder, data folder, site folder)``."""
    root = tmp_path_factory.mktemp("family_folder")
    folder = copy_family(root)
    data = root / "data"
    (data / "sweeps").mkdir(parents=True)
    # the quick grid (one point); no step time is asserted: one timed step each
    _memlab("sweep", "--plugin", str(folder), "--family", FAMILY, "--technique", PLAIN, "--technique", OTHER, "--quick",
            "--time-budget", "0", "--out", str(data / "sweeps" / f"cpu-{FAMILY}.jsonl"))
    _memlab("advise", "--fit", "--family", FAMILY, "--optimizer", "sgd", "--models", str(data / "models"),
            "--plugin", str(folder))
    (root / "results").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "MEMLAB_PLUGINS": str(folder)}  # the site reads the folder's meta.py colours (no import)
    out = subprocess.run([sys.executable, "-m", "memlab", "site", "--results", str(root / "results"), "--data", str(data),
                          "--out", str(root / "site")], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return root, folder, data, root / "site"


def test_the_copy_is_found_and_differs_from_the_source_only_in_its_names(built):
    _, folder, _, _ = built
    out = _memlab("list", "--plugin", str(folder), "--family", FAMILY)
    for name in family_meta()[SOURCE].colors:
        assert f"{name}_copy" in out.stdout, out.stdout
    assert "checkpoint_split_chunk_copy" in (folder / "split.py").read_text()
    assert not list((ROOT / "memlab" / "families").glob(f"{FAMILY}*"))  # nothing written into memlab/


def test_checked_and_measured_with_the_source_s_bytes(built):
    _, folder, _, _ = built
    out = _memlab("check", PLAIN, OTHER, "--plugin", str(folder))
    assert out.stdout.count("PASS") == 2, out.stdout
    point = ["--param", "n=256", "--param", "d=16", "--param", "hidden=32", "--param", "chunk_size=64",
             "--time-budget", "0", "--json"]
    copy = json.loads(_memlab("measure", OTHER, "--plugin", str(folder), *point).stdout)
    source = json.loads(_memlab("measure", "slice_loop", *point).stdout)
    assert copy["status"] == "ok" and copy["matches_reference"] is True and copy["family"] == FAMILY
    assert copy["total_peak_bytes"] == source["total_peak_bytes"] > 0


def test_swept_fitted_and_advised(built):
    _, _, data, _ = built
    rows = [json.loads(line) for line in (data / "sweeps" / f"cpu-{FAMILY}.jsonl").read_text().splitlines()]
    assert {r["technique"] for r in rows} == {PLAIN, OTHER} and all(r["status"] == "ok" for r in rows)
    models = json.loads((data / "models" / "cpu-float32-sgd.json").read_text())
    fam = models["families"][FAMILY]
    assert fam["declaration"]["family"] == FAMILY and [e["technique"] for e in fam["entries"]] == [PLAIN, OTHER]
    for e in fam["entries"]:
        assert e["held_out_traced"]["max_abs_error_bytes"] == 0 and e["max_abs_error_bytes"] == 0, e["label"]
    out = _memlab("advise", "--family", FAMILY, "--budget", "1GiB", "--models", str(data / "models"),
                  "--param", "n=4096", "--param", "d=64", "--param", "hidden=128", "--json")
    assert {c["technique"] for c in json.loads(out.stdout)["fits"]} <= {PLAIN, OTHER}


def test_drawn_with_its_own_page_and_the_colours_its_meta_names(built):
    _, _, _, site = built
    page = (site / f"family-{FAMILY}.html").read_text()
    assert PLAIN in page and OTHER in page
    assert f'href="family-{FAMILY}.html"' in (site / "index.html").read_text()
    meta = family_meta()[SOURCE].colors
    assert NAMED[meta["unchunked"]] in page and NAMED[meta["slice_loop"]] in page  # grey and purple, not hashed


def test_its_held_out_time_settings_are_found(built):
    _, folder, _, _ = built
    copied = [(label, params) for f, label, params in held_out({"MEMLAB_PLUGINS": str(folder)}) if f == FAMILY]
    source = [(label, params) for f, label, params in held_out({}) if f == SOURCE]
    assert copied == [(re.sub(r"^(\w+)", r"\1_copy", label), params) for label, params in source] and copied


ASV_PROBE = """
import json, sys
sys.path.insert(0, {root!r})
from asv_runner import discovery
names = sorted(b.name for b in discovery.disc_benchmarks({bench!r}))
from benchmarks import bench_plugins
cls = bench_plugins.PluginChainedMatmul
b = cls()
b.setup({cache!r}, "slice_loop_copy", 500, "cpu")
value = b.track_peak_allocated({cache!r}, "slice_loop_copy", 500, "cpu")
print(json.dumps({{"names": [n for n in names if n.startswith("bench_plugins.")], "params": cls.params,
                  "param_names": cls.param_names, "allocated": value}}))
"""


def test_benchmarked_by_asv_on_its_meta_grid(built, tmp_path):
    """asv's discovery with the folder in ``MEMLAB_PLUGINS``: the grid of the copy's ``meta.py`` under
    ``bench_plugins.PluginChainedMatmul``, and a combination that measures what ``memlab measure`` does."""
    pytest.importorskip("asv_runner.discovery")
    _, folder, _, _ = built
    code = ASV_PROBE.format(root=str(ROOT), bench=str(ROOT / "benchmarks"), cache=str(tmp_path))
    env = {**os.environ, "MEMLAB_PLUGINS": str(folder), "MEMLAB_ASV_DEVICES": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["param_names"] == ["technique", "chunk_size", "device"]
    assert got["params"][0] == [f"{t}_copy" for t in family_meta()[SOURCE].benchmarks["ChainedMatmul"]["techniques"]]
    assert "bench_plugins.PluginChainedMatmul.track_peak_allocated" in got["names"]
    measured = json.loads(_memlab("measure", OTHER, "--plugin", str(folder), "--param", "n=2000", "--param", "d=256",
                                  "--param", "hidden=1024", "--param", "chunk_size=500", "--time-budget", "0",
                                  "--json").stdout)
    assert got["allocated"] == measured["peak_allocated_bytes"] > 0


@pytest.fixture(scope="module")
def copied(tmp_path_factory) -> Path:
    """A copied folder alone (the checks below measure nothing)."""
    return copy_family(tmp_path_factory.mktemp("family_folder_copy"))


def _seeds(folder: Path) -> list[str]:
    """The SEEDs of the copied folder's reproductions, read from their source."""
    return [m.group(1) for p in sorted((folder / REPRODUCTIONS).glob("[!_]*.py"))
            for m in [re.search(r'(?m)^SEED = "([^"]+)"', p.read_text())] if m]


def test_its_seed_reproductions_come_with_it(copied, monkeypatch):
    """``memlab reproduce`` finds the copy's reproductions (a wrong seed is refused with the list of
    seeds, the copy's among them; none is run: a reproduction takes minutes), each measures the
    copy's techniques, and the site reads its page's title from the copy's source."""
    folder = copied
    seeds = _seeds(folder)
    assert seeds and all(s.endswith("-copy") for s in seeds)
    out = _memlab("reproduce", "--plugin", str(folder), "--only", "no-such-seed", check=False)
    assert out.returncode == 2 and all(s in out.stderr and s[:-len("-copy")] in out.stderr for s in seeds), out.stderr
    module = (folder / REPRODUCTIONS / "chunked_slicing_backward_spike.py").read_text()
    assert '"slice_loop_copy"' in module and '"slice_loop"' not in module and '"unchunked_copy"' in module
    monkeypatch.setenv("MEMLAB_PLUGINS", str(folder))
    for seed in seeds:
        copied, source = seed_metadata(seed), seed_metadata(seed[:-len("-copy")])
        assert copied["SEED"] == seed and copied["SETTLES"] == source["SETTLES"] and copied["TITLE"] == source["TITLE"]
        if "CUDA_ANSWER_TECHNIQUE" in source:  # the hook's technique is the copy's
            assert copied["CUDA_ANSWER_TECHNIQUE"] == f"{source['CUDA_ANSWER_TECHNIQUE']}_copy"


def test_its_site_notes_and_bench_harness_points_come_with_it(copied, monkeypatch):
    """The copy's ``SITE_NOTES`` footnote its own technique's rows (not the source's), and its
    bench-harness and limits points join the tables beside the source's, in their positions."""
    folder = copied
    env = {"MEMLAB_PLUGINS": str(folder)}
    source_load, source_limits = load_points({}), limit_points({})
    load = [(f"{n}_copy", p) for n, p in source_load if n in family_meta()[SOURCE].colors]
    assert load and all(p in load_points(env) for p in load) and len(load_points(env)) == len(source_load) + len(load)
    assert [(f"{n}_copy", p) for n, p in source_limits if n in family_meta()[SOURCE].colors] == \
        [(n, p) for n, p in limit_points(env) if n.endswith("_copy")] != []
    noted = next(iter(family_meta()[SOURCE].site_notes))
    rows = pd.DataFrame([{"technique": f"{noted}_copy", "params": {"opt_einsum": True}, "extra": {}},
                         {"technique": noted, "params": {"opt_einsum": True}, "extra": {}}])
    assert [n["technique"] for n in footnotes(rows)] == [noted]  # no plug-in named: the source's note only
    monkeypatch.setenv("MEMLAB_PLUGINS", str(folder))
    notes = footnotes(rows)
    assert [n["technique"] for n in notes] == [noted, f"{noted}_copy"] and notes[0]["text"] == notes[1]["text"]


@pytest.mark.parametrize("text, message", [
    ('HARNESS_LOAD_POINTS = (("slice_loop", {}),)', r"HARNESS_LOAD_POINTS = \(\('slice_loop', \{\}\),\) is not \(\(position: int"),
    ('LIMIT_POINTS = ((1.5, "x", {}),)', r"LIMIT_POINTS = \(\(1\.5, 'x', \{\}\),\) is not \(\(position: int"),
    ('SITE_NOTES = {"x": {"text": "t", "when": ("rows.k",)}}', r"SITE_NOTES = .*rows\.k.* is not \{technique: \{'text': str, 'when'"),
    ('SITE_NOTES = {"x": {"txt": "t"}}', r"SITE_NOTES = \{'x': \{'txt': 't'\}\} is not"),
])
def test_a_folder_s_points_and_notes_are_checked_when_read(tmp_path, text, message):
    """A copied folder's ``meta.py`` is read, never run: a point or note of the wrong shape is refused
    with the file, the value and the shape expected."""
    from memlab.registry import read_family_meta

    (tmp_path / "meta.py").write_text(text + "\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(tmp_path / 'meta.py'))}: {message}"):
        read_family_meta("mine", tmp_path)
    assert read_family_meta("mine", tmp_path / "none").site_notes == {}  # no meta.py: nothing declared
