"""What benchmarks/README.md and the help texts say about the asv suite is true (issue 47, item 7).

The counts are computed by ``python -m benchmarks.suite_counts`` from the benchmark modules (found as
asv finds them, ``bench_*.py``), never written by hand into a test: each class's CPU combinations that apply (its ``setup`` does not
skip them as "does not apply"; a technique that cannot run on this host still counts, it applies
where it can run), its asv benchmark methods, and what the default selection of ``Makefile.asv``
selects (asv's ``-b`` rule: ``re.search`` over ``name(param, ...)``).  No asv run, no measurement.
"""
from __future__ import annotations

import functools
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import asv_host, common, suite_counts  # noqa: E402
from process_checks import HANG_GUARD_S  # noqa: E402

README = ROOT / "benchmarks" / "README.md"
_classes, _methods = suite_counts.classes, suite_counts.methods  # the script counts: python -m benchmarks.suite_counts


@functools.lru_cache(maxsize=None)
def _applicable(tmp: str) -> dict[str, list[tuple]]:
    return suite_counts.applicable(tmp)


@pytest.fixture(scope="module")
def applicable(tmp_path_factory) -> dict[str, list[tuple]]:
    return _applicable(str(tmp_path_factory.mktemp("cache")))


def _readme_counts(label: str) -> dict[str, int]:
    """The ``\\`Class\\` N`` pairs of the README paragraph that starts with ``label``."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    found = re.search(re.escape(label) + r"(.*?)(?:\.\s|$)", text)
    assert found, f"benchmarks/README.md has no paragraph starting {label!r}"
    return {name: int(n) for name, n in re.findall(r"`(\w+)` (\d+)", found.group(1))}


def _readme_number(pattern: str) -> int:
    text = " ".join(README.read_text(encoding="utf-8").split())
    found = re.search(pattern, text)
    assert found, f"benchmarks/README.md does not say {pattern!r}"
    return int(found.group(1).replace(",", ""))


def test_the_readme_counts_each_classs_cpu_combinations(applicable):
    counted = {key.split(".")[1]: len(v) for key, v in applicable.items()}
    assert _readme_counts("CPU combinations per class:") == counted
    assert _readme_number(r"(\d+) CPU combinations in all") == sum(counted.values())
    exponents = {key.split(".")[1]: len(cls.params[0]) for key, cls in _classes(common.ComplexityBenchmark).items()}
    assert _readme_counts("Activation exponents per class:") == exponents


def test_the_readme_counts_the_values_of_a_full_run(applicable):
    """Per commit on CPU: each applicable combination times the benchmarks that run on CPU (all but
    ``track_peak_reserved``, CUDA only), plus one exponent per complexity technique."""
    per_class = {key: [m for m in _methods(common.MemlabBenchmark) if m != "track_peak_reserved"] for key in applicable}
    assert {len(m) for m in per_class.values()} == {_readme_number(r"on CPU (\d+) of them run")}
    assert len(_methods(common.MemlabBenchmark)) == _readme_number(r"each have (\d+) benchmarks")
    total = sum(len(v) * len(per_class[k]) for k, v in applicable.items())
    total += sum(len(cls.params[0]) for cls in _classes(common.ComplexityBenchmark).values())
    assert _readme_number(r"([\d,]+) benchmark values per commit of the full suite") == total


def test_the_readme_table_names_every_benchmark_class():
    table = README.read_text(encoding="utf-8").split("## What is measured")[0]
    for key in {**_classes(common.MemlabBenchmark), **_classes(common.ComplexityBenchmark)}:
        module, name = key.split(".")
        rows = [ln for ln in table.splitlines() if ln.startswith(f"| `{module}.py`")]
        assert rows and f"`{name}`" in rows[0], (key, rows)


def _selection() -> list[str]:
    """The ``-b`` regexes ``make asv-run`` passes to asv (the default selection)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.installed", "asv-run", "ASV_MACHINE=x"],
                         cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    (line,) = [ln for ln in out.stdout.splitlines() if " run --config " in ln]
    words = shlex.split(line)
    return [words[i + 1] for i, w in enumerate(words) if w == "-b"]


def _selected(applicable: dict[str, list[tuple]], regexes: list[str]) -> dict[str, int]:
    """``{method: combinations}`` asv selects with ``regexes`` among the applicable CPU combinations
    and the complexity classes' techniques."""
    chosen: dict[str, int] = {}
    grids = {**applicable, **{k: [(t, "cpu") for t in c.params[0]]
                              for k, c in _classes(common.ComplexityBenchmark).items()}}
    classes = {**_classes(common.MemlabBenchmark), **_classes(common.ComplexityBenchmark)}
    for key, combos in grids.items():
        for method, combo in itertools.product(_methods(classes[key]), combos):
            name = f"{key}.{method}({', '.join(repr(v) for v in combo)})"
            if method == "track_peak_reserved" or not any(re.search(r, name) for r in regexes):
                continue
            chosen[method] = chosen.get(method, 0) + 1
    return chosen


def test_the_default_selection_is_every_exact_figure_and_the_time_historys_times(applicable):
    regexes = _selection()
    assert regexes, "make asv-run passes no -b: the default selection is the full suite"
    chosen = _selected(applicable, regexes)
    combos = sum(len(v) for v in applicable.values())
    expected = {m: combos for m in asv_host.EXACT_METRICS if m != "track_peak_reserved"}
    for cls in _classes(common.ComplexityBenchmark).values():  # each exponent: one value per technique
        expected[cls.metric] = len(cls.params[0])
    assert {m: chosen.get(m) for m in expected} == expected
    times = {m: n for m, n in chosen.items() if m not in asv_host.EXACT_METRICS}
    assert set(times) == {"track_relative_step_time", "time_step"} and len(set(times.values())) == 1, times
    assert _readme_number(r"at (\d+) configurations") == times["time_step"]
    assert _readme_number(r"([\d,]+) values per commit of the default selection") == sum(chosen.values())


def test_the_default_selection_and_the_full_suite_are_two_targets():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.installed", "asv-run-full",
                          "ASV_MACHINE=x"], cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    (line,) = [ln for ln in out.stdout.splitlines() if " run --config " in ln]
    assert " -b " not in line and "--record-samples" in line, line
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert "make asv-run-full" in text and "ASV_DEFAULT_BENCH" in text
    # the duration stated is one measured on an idle machine, with its run in the evidence file
    stated = re.search(r"default selection per commit on 2 idle cores: (\d+ min \d+ s)", text)
    assert stated, "benchmarks/README.md states no measured duration of the default selection"
    evidence = " ".join((ROOT / "docs" / "evidence" / "asv-runs.md").read_text(encoding="utf-8").split())
    assert f"**{stated.group(1)}** wall" in evidence and "load average" in evidence


def test_sweep_help_and_the_docs_agree_on_jobs_with_cuda():
    out = subprocess.run([sys.executable, "-m", "memlab", "sweep", "--help"], capture_output=True, text=True,
                         timeout=HANG_GUARD_S, env={**os.environ, "COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    help_text = " ".join(out.stdout.split())
    jobs = help_text.split("--jobs N ", 1)[1].split(" --resume ", 1)[0]
    assert "CPU only" not in jobs and "with --device cuda one worker on each of N visible GPUs" in jobs, jobs
    sweeps = " ".join((ROOT / "docs" / "sweeps.md").read_text(encoding="utf-8").split())
    assert "`--device cuda --jobs N` puts one worker on each of N visible GPUs" in sweeps
    cli = " ".join((ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split())
    assert "`--jobs N` (CPU workers, or one per GPU with `--device cuda`)" in cli
