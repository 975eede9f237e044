"""The relative step time reaches asv as samples (issue 47, item 1; NOTE [ the relative time as samples ]
in benchmarks/common.py).

What is checked here is the format and asv's use of it, never a time: ``track_relative_step_time``
returns memlab's per-round ratios as ``{"samples": [...], "number": 1}``; asv 0.6.6 stores their median
with its statistics (and the samples under ``--record-samples``) for a ``track_`` benchmark; and
``asv compare`` then needs the samples to differ (Mann-Whitney) as well as the factor, where one
number per commit gets the factor alone.  The asv tests run a two-line benchmark of their own in this
venv (``--python=same``), with synthetic ratios: no torch in the benchmark, seconds each.
"""
from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402
from process_checks import HANG_GUARD_S  # noqa: E402


def test_relative_samples_are_the_ratios_or_the_one_number():
    assert common.relative_samples({"relative_step_time": 1.2, "relative_step_ratios": None}) == 1.2
    assert common.relative_samples({"relative_step_time": 1.2}) == 1.2  # a cache written before them
    got = common.relative_samples({"relative_step_time": 1.2, "relative_step_ratios": [1.1, 1.2, 1.3]})
    assert got == {"samples": [1.1, 1.2, 1.3], "number": 1}


def _tiny_chained_matmul():
    from benchmarks.bench_chunking import ChainedMatmul

    class Tiny(ChainedMatmul):
        fixed = {"n": 64, "d": 8, "hidden": 16}

    return Tiny


def test_track_relative_step_time_returns_memlabs_per_round_ratios(tmp_path, monkeypatch):
    """The benchmark hands asv the ratios memlab recorded (``extra["relative_step_ratios"]``), whose
    median is the ``relative_step_time`` it cached; a memlab that records none gives the number."""
    import memlab

    combo = ("slice_loop", 16, "cpu")
    b = _tiny_chained_matmul()()
    b.setup(str(tmp_path), *combo)
    value = b.track_relative_step_time(str(tmp_path), *combo)
    (cached,) = tmp_path.glob("memlab-*.relative.json")
    timed = json.loads(cached.read_text())
    if timed["relative_step_ratios"] is None:
        pytest.skip("this memlab records no per-round ratios (extra['relative_step_ratios'])")
    assert value == {"samples": timed["relative_step_ratios"], "number": 1}
    assert len(value["samples"]) >= common.RELATIVE_STEPS
    assert statistics.median(value["samples"]) == pytest.approx(timed["relative_step_time"], rel=1e-12)
    # an older memlab: no ratios in extra, the one number
    real = memlab.measure

    @functools.wraps(real)  # the benchmarks read measure's signature (what this memlab version takes)
    def without_ratios(*args, **kwargs):
        m = real(*args, **kwargs)
        return m.replace(extra={k: v for k, v in m.extra.items() if k != "relative_step_ratios"})

    monkeypatch.setattr(memlab, "measure", without_ratios)
    cached.unlink()
    b.setup(str(tmp_path), *combo)
    assert isinstance(b.track_relative_step_time(str(tmp_path), *combo), float)


# -- asv itself, on a benchmark of its own ---------------------------------------------------------

RATIO_BENCH = '''
import json
import os


def track_ratio():
    return {"samples": json.loads(os.environ["RATIO_SAMPLES"]), "number": 1}


track_ratio.unit = "ratio"


def track_ratio_one_number():
    samples = sorted(json.loads(os.environ["RATIO_SAMPLES"]))
    return samples[len(samples) // 2]


track_ratio_one_number.unit = "ratio"
'''

#: a README-only pair, as issue 47 saw one (medians 1.146 and 1.265: past asv's 1.1 factor) with the
#: rounds of each commit scattered across the other's; and a +33% commit whose rounds all lie above
BASE = [1.00, 1.05, 1.10, 1.146, 1.20, 1.25, 1.30]
SAME = [1.10, 1.17, 1.22, 1.265, 1.30, 1.36, 1.42]
SLOWER = [round(1.33 * x, 4) for x in BASE]


def _asv_repo(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    exe = Path(sys.executable).with_name("asv")
    if not exe.exists():
        pytest.skip("asv is not installed next to this Python (pip install -e '.[bench]')")
    repo, bench = tmp_path / "repo", tmp_path / "bench"
    bench.mkdir()
    (bench / "__init__.py").write_text("")
    (bench / "bench_ratio.py").write_text(RATIO_BENCH)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, timeout=HANG_GUARD_S)
    commits = []
    for i in range(3):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
                        "commit", "-q", "--allow-empty", "-m", f"commit {i}"], check=True, timeout=HANG_GUARD_S)
        commits.append(subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                      check=True).stdout.strip())
    conf = tmp_path / "asv.conf.json"
    conf.write_text(json.dumps({"version": 1, "project": "ratio", "repo": str(repo), "branches": ["main"],
                                "environment_type": "virtualenv", "benchmark_dir": str(bench),
                                "results_dir": str(tmp_path / "results"), "env_dir": str(tmp_path / "env"),
                                "html_dir": str(tmp_path / "html")}))
    (tmp_path / ".asv-machine.json").write_text(json.dumps({"version": 1, "box": {
        "machine": "box", "os": "test", "arch": "test", "cpu": "test", "num_cpu": "2", "ram": "1"}}))
    return exe, conf, commits


def _asv(exe: Path, conf: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), args[0], "--config", str(conf), *args[1:]], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env={**os.environ, "HOME": str(conf.parent), **(env or {})})


@pytest.mark.asv
def test_asv_stores_a_track_benchmarks_samples_and_compares_by_them(tmp_path):
    exe, conf, commits = _asv_repo(tmp_path)
    for commit, samples in zip(commits, (BASE, SAME, SLOWER)):
        out = _asv(exe, conf, "run", "--python=same", "--machine", "box", "--record-samples", "--set-commit-hash",
                   commit, env={"RATIO_SAMPLES": json.dumps(samples)})
        assert out.returncode == 0, out.stdout + out.stderr
    (saved,) = (tmp_path / "results" / "box").glob(f"{commits[0][:8]}-*.json")
    data = json.loads(saved.read_text())
    row = dict(zip(data["result_columns"], data["results"]["bench_ratio.track_ratio"]))
    assert row["samples"] == [BASE] and row["result"] == [1.146]  # the median of the ratios
    assert row["stats_ci_99_a"][0] <= 1.146 <= row["stats_ci_99_b"][0] and row["stats_repeat"] == [len(BASE)]
    assert row["stats_q_25"][0] < 1.146 < row["stats_q_75"][0]
    one = dict(zip(data["result_columns"], data["results"]["bench_ratio.track_ratio_one_number"]))
    assert one["result"] == [1.146] and one.get("samples") is None and one.get("stats_ci_99_a") is None

    def changed(a: str, b: str) -> set[str]:
        out = _asv(exe, conf, "compare", "--machine", "box", "--only-changed", a, b)
        assert out.returncode == 0, out.stdout + out.stderr
        return {ln.split("bench_ratio.")[1].strip(" |") for ln in out.stdout.splitlines() if "bench_ratio." in ln}

    # the same medians: one number per commit is flagged by the factor; the samples are not different
    assert changed(commits[0], commits[1]) == {"track_ratio_one_number"}
    # +33% with every round above the base's: flagged both ways
    assert changed(commits[0], commits[2]) == {"track_ratio", "track_ratio_one_number"}
