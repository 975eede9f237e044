import subprocess
import sys
import textwrap

import pytest

import memlab
from memlab import Technique
from memlab.families.chunking.workload import ChainedMatmul
from process_checks import HANG_GUARD_S


def test_builtin_techniques_are_discovered_and_sorted():
    names = memlab.list_techniques()
    assert names == sorted(names)
    assert {"unchunked", "slice_loop"} <= set(names)
    assert memlab.get_technique("slice_loop").workload is ChainedMatmul


def test_unknown_technique_lists_what_exists():
    with pytest.raises(ValueError, match=r"unknown technique 'nope'; available: .*slice_loop.*unchunked"):
        memlab.get_technique("nope")


def test_duplicate_name_is_an_error():
    with pytest.raises(ValueError, match=r"technique name 'slice_loop' is already registered by memlab\.families\.chunking\.techniques\.SliceLoop"):
        class Again(Technique, name="slice_loop"):
            workload = ChainedMatmul


def test_technique_needs_a_workload():
    with pytest.raises(TypeError, match="must set `workload`"):
        class NoWorkload(Technique, name="no_workload_here"):
            pass


def test_parameter_out_of_range_names_value():
    with pytest.raises(ValueError, match=r"chunk_size=0 is out of range"):
        memlab.get_technique("slice_loop")(chunk_size=0)


USER_FILE = textwrap.dedent('''
    import memlab
    from memlab.families.chunking.workload import ChainedMatmul

    class MyTwoChunks(memlab.Technique, name="{name}"):
        """A user's technique: two halves, concatenated."""
        workload = ChainedMatmul

        def forward(self, problem):
            x, m = problem.inputs["x"], problem.model
            h = x.shape[0] // 2
            return __import__("torch").cat([(x[:h] @ m.w1) @ m.w2, (x[h:] @ m.w1) @ m.w2])

    if __name__ == "__main__":
        raise SystemExit("main block must not run when loaded as a plug-in")
''')


def test_plugin_file_registers_and_is_checked(tmp_path):
    path = tmp_path / "my_technique.py"
    path.write_text(USER_FILE.format(name="user_two_chunks"))
    assert memlab.load_plugin(path) == ["user_two_chunks"]
    assert memlab.load_plugin(path) == []  # idempotent
    assert "user_two_chunks" in memlab.list_techniques("chunking")
    from memlab.measurement.technique_checks import check_technique

    assert check_technique("user_two_chunks").ok
    # measured in a fresh subprocess, which must load the same file
    m = memlab.measure("user_two_chunks", n=64, d=8, hidden=16, iterations=1, repeats=1, time_budget=0)
    assert m.status == "ok", m.error
    assert m.matches_reference


def test_plugin_via_cli_list_and_measure(tmp_path):
    path = tmp_path / "cli_technique.py"
    path.write_text(USER_FILE.format(name="cli_two_chunks"))
    out = subprocess.run([sys.executable, "-m", "memlab", "list", "--plugin", str(path)],
                         capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    assert "cli_two_chunks" in out.stdout
    out = subprocess.run([sys.executable, "-m", "memlab", "measure", "cli_two_chunks", "--plugin", str(path),
                          "--param", "n=32", "--param", "d=4", "--param", "hidden=8", "--iterations", "1",
                          "--repeats", "1", "--json"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    rec = memlab.Measurement.from_json(out.stdout.strip().splitlines()[-1])
    assert rec.technique == "cli_two_chunks" and rec.status == "ok"


def test_describe_gets_the_mode_and_old_plugins_still_work():
    """``describe(problem, mode)``; an override written before the mode was passed (``describe(self,
    problem)``) is called without it."""
    from memlab.technique import described

    class Old(memlab.Technique):  # no name=: not registered
        workload = ChainedMatmul

        def describe(self, problem):
            return {"old": True}

    class New(memlab.Technique):
        workload = ChainedMatmul

        def describe(self, problem, mode="train"):
            return {"mode": mode}

    assert described(Old(), None, "infer") == {"old": True}
    assert described(New(), None, "infer") == {"mode": "infer"}


def test_broken_plugin_gives_clear_error(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ImportError, match=r"plug-in .*broken.py' failed to import: boom"):
        memlab.load_plugin(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        memlab.load_plugin(tmp_path / "missing.py")
