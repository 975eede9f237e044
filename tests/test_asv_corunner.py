"""``make asv-corunner`` (benchmarks/corunner.py, NOTE [ co-runner comparison ]): what can be checked
without running it: the plan (two real memlab sweeps, both pairs, the selection), the two commits,
that the co-runners are started, restarted and stopped, the load record, and the reading of asv's output."""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tabulate

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import memlab  # noqa: E402
from benchmarks import corunner  # noqa: E402

#: asv's name of the combination issue 47's README-only pair flagged
FLAGGED = "bench_chunking.ChainedMatmul.track_relative_step_time('slice_loop', 200, 'cpu')"
#: a process that runs until a signal ends it (no sleep, no busy loop)
WAITS = (sys.executable, "-c", "import signal; signal.pause()")


def test_the_plan_runs_two_memlab_sweeps_beside_both_pairs():
    plan = corunner.make_plan(work="/tmp/x", machine="h-scratch", asv="/v/asv", python="/v/python")
    families = [c[c.index("--family") + 1] for c in plan.sweeps]
    assert [c[:4] for c in plan.sweeps] == [("/v/python", "-m", "memlab", "sweep")] * 2
    assert len(set(families)) == 2 and set(families) <= set(memlab.list_families())
    for commit in ("C1", "C2"):
        cmd = plan.continuous(commit, "B0")
        assert cmd[-2:] == ["B0", commit] and cmd[:2] == ["/v/asv", "continuous"]
        assert cmd[cmd.index("--machine") + 1] == "h-scratch" and cmd[cmd.index("--config") + 1] == str(plan.config)
        assert cmd[cmd.index("-b") + 1] == plan.bench
    assert re.search(corunner.DEFAULT_BENCH, FLAGGED)
    assert not re.search(corunner.DEFAULT_BENCH, FLAGGED.replace("track_relative_step_time", "track_peak_allocated"))
    text = "\n".join(plan.lines())
    assert "expected: unchanged" in text and "expected: decreased" in text and text.count("memlab sweep") == 2
    with pytest.raises(ValueError, match=r"families=\['chunking', 'chunking'\] is not valid"):
        corunner.make_plan(machine="m", families=("chunking", "chunking"))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_the_two_commits_change_one_file_each(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    source = tmp_path / "source"
    (source / Path(corunner.SLOW_FILE).parent).mkdir(parents=True)
    (source / "README.md").write_text("memlab\n")
    (source / corunner.SLOW_FILE).write_text((ROOT / corunner.SLOW_FILE).read_text(encoding="utf-8"))
    _git(source, "init", "-q")
    _git(source, "add", ".")
    _git(source, "commit", "-q", "-m", "base")
    commits = corunner.make_commits(source, tmp_path / "work")
    repo = tmp_path / "work" / "repo"
    assert commits["base"] == _git(source, "rev-parse", "HEAD")
    for name, path in (("readme-only", "README.md"), ("slowdown", corunner.SLOW_FILE)):
        assert _git(repo, "rev-parse", commits[name] + "^") == commits["base"]
        assert _git(repo, "diff", "--name-only", commits["base"], commits[name]) == path
    added = [ln[1:].strip() for ln in _git(repo, "diff", "-U0", commits["base"], commits["slowdown"]).splitlines()
             if ln.startswith("+") and not ln.startswith("+++")]
    assert added[0].startswith("with torch.no_grad():") and added[1:] == ["x[st:ed] @ w1", "x[st:ed] @ w1"]


def test_a_slice_loop_that_moved_is_named():
    with pytest.raises(ValueError, match="expected the slice loop's line .* exactly once, found 0"):
        corunner._slower("def f():\n    pass\n")


def test_the_co_runners_are_started_and_stopped(tmp_path):
    runners = corunner.CoRunners([WAITS, WAITS], tmp_path)
    runners.start()
    try:
        assert runners.starts == [1, 1] and [p.poll() for p in runners.procs] == [None, None]
    finally:
        codes = runners.stop()
    assert codes == [-signal.SIGTERM, -signal.SIGTERM]
    assert not any(t.is_alive() for t in runners._threads)


def test_a_co_runner_that_ends_is_started_again(tmp_path):
    runners = corunner.CoRunners([(sys.executable, "-c", "print('done')")], tmp_path, max_restarts=2)
    runners.start()
    runners._threads[0].join(120)
    assert not runners._threads[0].is_alive() and runners.starts == [3]
    assert runners.stop() == [0]
    assert (tmp_path / "corunner-1.log").read_text().count("done") == 3


def test_loads_are_sampled_at_the_start_and_the_end():
    with corunner.LoadSampler(3600, read=lambda: 4.256) as s:
        pass
    assert s.samples == [4.26, 4.26]
    assert corunner.load_summary([3.0, 5.0, 4.0]) == {"min": 3.0, "median": 4.0, "max": 5.0, "samples": 3}
    assert corunner.load_summary([])["samples"] == 0


def _output(closing: str, before="1.15±0.02", after="1.16±0.03", ratio="1.01", mark=" ") -> str:
    """asv continuous's output as asv 0.6.6 prints it (its table through tabulate, github format)."""
    table = tabulate.tabulate([[mark, before, after, ratio, FLAGGED]], tablefmt="github",
                              headers=["Change", "Before [4a5b6c7d] ", "After [8e9f0a1b] ", "Ratio",
                                       "Benchmark (Parameter)"])
    return f"· Running 2 total benchmarks (2 commits * 1 environments * 1 benchmarks)\n\nAll benchmarks:\n\n{table}\n\n{closing}\n"


def test_asvs_output_is_read_as_flagged_or_not():
    assert corunner.verdict(_output("BENCHMARKS NOT SIGNIFICANTLY CHANGED.")) == "unchanged"
    slow = _output("SOME BENCHMARKS HAVE CHANGED SIGNIFICANTLY.\nPERFORMANCE DECREASED.", after="1.53±0.04",
                   ratio="1.33", mark="+")
    assert corunner.verdict(slow) == "decreased"
    assert corunner.table_rows(slow) == [{"mark": "+", "before": "1.15±0.02", "after": "1.53±0.04", "ratio": "1.33",
                                          "benchmark": FLAGGED}]
    faster = "SOME BENCHMARKS HAVE CHANGED SIGNIFICANTLY.\nPERFORMANCE INCREASED."
    assert corunner.verdict(_output(faster, mark="-")) == "increased"
    # a comparison of nothing is no pass: both failed, or skipped, or no closing line
    assert corunner.verdict(_output("BENCHMARKS NOT SIGNIFICANTLY CHANGED.", before="failed", after="failed",
                                    ratio="n/a")) == "failed"
    assert corunner.verdict(_output("BENCHMARKS NOT SIGNIFICANTLY CHANGED.", ratio="n/a")) == "failed"
    assert corunner.verdict("· Creating environments\nasv: error\n") == "failed"
    # asv lists the combinations -b did not select as n/a in both columns: not the selection's rows
    other = FLAGGED.replace("'slice_loop'", "'unchunked'")
    both = _output("BENCHMARKS NOT SIGNIFICANTLY CHANGED.").replace(
        f"| {FLAGGED} |", f"| {FLAGGED} |\n|          | n/a | n/a | n/a | {other} |")
    assert len(corunner.table_rows(both)) == 2
    assert corunner.verdict(both, corunner.DEFAULT_BENCH) == "unchanged" and corunner.verdict(both) == "failed"
    assert {corunner.EXPECTED[p] for p in corunner.PAIRS} == {"unchanged", "decreased"}


def test_make_asv_corunner_runs_the_comparison_under_the_scratch_machine():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.installed", "asv-corunner",
                          "ASV_MACHINE=box"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert re.search(r"-m benchmarks\.corunner run --asv \S+ --machine \"box-scratch\" --base HEAD", out), out
