"""The CLI answers bad input before torch is imported, every option says what it does and its default,
and the torch-free index of built-in names agrees with the registry (NOTE [ names before torch ])."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from process_checks import HANG_GUARD_S, cli_probe as _probe


@pytest.fixture(scope="module")
def a_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("folder")


REFUSED = [
    (["measure", "slice-loop"], "unknown technique 'slice-loop' (did you mean 'slice_loop'?); available: "),
    (["timeline", "slice-loop"], "unknown technique 'slice-loop' (did you mean 'slice_loop'?)"),
    (["check", "slice_loop", "nope"], "unknown technique 'nope'; available: "),
    (["sweep", "--family", "chunk"], "unknown family 'chunk' (did you mean 'chunking'?); available: chunking, "),
    (["list", "--family", "chunk"], "unknown family 'chunk' (did you mean 'chunking'?)"),
    (["timelines", "--family", "chunk"], "unknown family 'chunk' (did you mean 'chunking'?)"),
    (["sweep", "--technique", "slice_loop", "--technique", "nope"], "unknown technique 'nope'"),
    (["sweep", "--family", "chunking", "--grid", "chunksize=1,2"],
     "has no parameter 'chunksize' (did you mean 'chunk_size'?); valid parameters: chunk_size, d, hidden, n"),
    (["measure", "slice_loop", "--param", "chunksize=1000"],
     "technique 'slice_loop' has no parameter 'chunksize' (did you mean 'chunk_size'?); valid parameters: "),
    (["measure", "slice_loop", "--param", "chunk_size"],
     "--param 'chunk_size' is not of the form name=value: expected NAME=VALUE, e.g. --param chunk_size=1000"),
    (["measure", "slice_loop", "--param", "chunk_size", "1000"],
     "unrecognized arguments: 1000; expected NAME=VALUE, e.g. --param chunk_size=1000; see memlab measure --help"),
    (["sweep", "--grid", "chunk_size", "100,1000"], "expected NAME=V1,V2,..., e.g. --grid chunk_size=100,1000"),
    (["measure"], "memlab measure needs a technique name (or --model FILE.py)"),
    (["measure", "--model", "absent.py"], "model file 'absent.py' does not exist"),
    (["measure", "--model", "{folder}"], "is a directory, not a Python file"),
    (["advise", "--model", "absent.py", "--budget", "1GiB"], "model file 'absent.py' does not exist"),
    (["advise", "--family", "chunk", "--budget", "1GiB"], "unknown family 'chunk' (did you mean 'chunking'?); "
                                                          "modelled families (sgd): chunking, "),
    (["list", "--plugin", "absent.py"], "plug-in file 'absent.py' does not exist"),
    (["site", "--results", "{folder}", "--data", "no_such_folder"], "--data no_such_folder: no such folder"),
]


@pytest.mark.parametrize("argv, words", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_bad_input_is_refused_before_torch_is_imported(argv, words, a_folder):
    argv = [a.replace("{folder}", str(a_folder)) for a in argv]
    rc, torch_modules, err = _probe(argv, cwd=a_folder)
    assert rc == 2, err
    assert torch_modules == [], f"torch imported before the refusal: {torch_modules[:5]}"
    line = err.strip()
    assert line.startswith("memlab: error: ") and "\n" not in line and words in line, line


def test_a_plug_in_s_names_come_from_the_registry(tmp_path):
    """With ``--plugin`` (or ``MEMLAB_PLUGINS``) the index is not used: the plug-in's family is listed
    and its technique's parameters are checked by the registry."""
    plugin = tmp_path / "own_family.py"
    plugin.write_text(textwrap.dedent('''
        import memlab
        from memlab.families.chunking.workload import ChainedMatmul

        class Own(memlab.Workload, name="own_workload", family="own_family"):
            params = {"n": memlab.Param(4, low=1)}

        class OwnTechnique(memlab.Technique, name="own_technique"):
            """a plug-in's technique"""
            workload = Own
    '''))
    rc, torch_modules, err = _probe(["list", "--plugin", str(plugin), "--family", "own_family"])
    assert rc == 0 and torch_modules, err
    rc, torch_modules, err = _probe(["measure", "own_technique", "--param", "m=2"],
                                    env={**os.environ, "MEMLAB_PLUGINS": str(plugin)})
    assert rc == 2 and torch_modules and "technique 'own_technique' has no parameter 'm'; valid parameters: n" in err


def test_the_index_of_built_in_names_is_the_registry_s():
    from memlab.cli.names import builtin_index
    from memlab.registry import get_technique, list_techniques

    index = builtin_index()
    registry = {n: (get_technique(n).family(), frozenset(get_technique(n).all_params())) for n in list_techniques()
                if get_technique(n).__module__.startswith("memlab.families.")}
    assert {n: (t.family, t.params) for n, t in index.items()} == registry


# -- help ------------------------------------------------------------------------------------------------
def _parsers():
    from memlab.cli import build_parser

    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return [("memlab", top), *((f"memlab {name}", p) for name, p in sub.choices.items())]


def test_every_option_of_every_command_has_help_and_its_default():
    missing = []
    for prog, parser in _parsers():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            name = "/".join(action.option_strings) or action.dest
            text = action.help or ""
            if not text.strip() or text == argparse.SUPPRESS:
                missing.append(f"{prog} {name}: no help")
            elif action.default not in (None, False, argparse.SUPPRESS) and "default" not in text.lower():
                missing.append(f"{prog} {name}: the help does not say its default {action.default!r}")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("command, words", [
    ("site", "(default data)"), ("list", "only this family's techniques"), ("list", "print one JSON array"),
    ("check", "techniques to check (default: every one"), ("measure", "e.g. --param chunk_size=1000"),
])
def test_help_shows_it(command, words):
    p = subprocess.run([sys.executable, "-m", "memlab", command, "--help"], capture_output=True, text=True,
                       timeout=HANG_GUARD_S, env={**os.environ, "COLUMNS": "400"})
    assert p.returncode == 0 and words in " ".join(p.stdout.split()), p.stdout


# -- the timed phase's threads -----------------------------------------------------------------------------
def test_the_step_time_names_the_timed_phase_s_threads():
    from memlab.cli.measure import timed_threads_text

    assert timed_threads_text(SimpleNamespace(timing_threads=1, environment={"threads": 2})) == "1 thread"
    assert timed_threads_text(SimpleNamespace(timing_threads=4, environment={"threads": 2})) == "4 threads"
    assert timed_threads_text(SimpleNamespace(timing_threads=None, environment={"threads": 2})) == "2 threads"
    assert timed_threads_text(SimpleNamespace(timing_threads=None, environment={})) == "? threads"


def test_measure_prints_the_timed_phase_s_threads(capsys, frozen_heap):
    """The memory phase runs at one thread per core, the timed phase at one (``TIMING_THREADS``)."""
    from memlab.cli import main

    assert main(["measure", "unchunked", "--param", "n=64", "--param", "d=8", "--param", "hidden=16",
                 "--iterations", "1", "--repeats", "1", "--time-budget", "0", "--in-process"]) == 0
    step = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("step time"))
    assert "steps, 1 thread, load" in step, step


# -- the profiler's native log -------------------------------------------------------------------------------
def test_a_measurement_prints_no_profiler_lines(tmp_path):
    """Kineto's ``USDT: ... profiler_start/stop`` lines stay off stderr (NOTE [ the profiler's native log ])."""
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    p = subprocess.run([sys.executable, "-m", "memlab", "measure", "unchunked", "--param", "n=64", "--param", "d=8",
                        "--param", "hidden=16", "--iterations", "2", "--repeats", "1", "--time-budget", "0",
                        "--in-process"], capture_output=True, text=True, timeout=HANG_GUARD_S, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "profiler_start" not in p.stderr and "USDT" not in p.stderr, p.stderr
