"""``memlab check``: one isolated child per technique with a time limit, so a technique that exits,
kills itself or never returns is its own ERROR line and never hides the others' verdicts."""
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from memlab.measurement.technique_checks import CheckOutcome, check_all, check_timeout
from memlab.cli import main

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

#: A plug-in of techniques that attack the checking process (written to a temporary file per test).
PLUGIN = textwrap.dedent('''
    import os
    import signal
    import sys

    import torch

    from memlab import Param, Problem, Technique, TechniqueUnavailable, Workload


    class Scale(torch.nn.Module):
        def __init__(self, w):
            super().__init__()
            self.w = torch.nn.Parameter(w)


    class Tiny(Workload, name="chkiso_tiny", family="testing"):
        """out = x * w, x [4, 3], w [3]."""

        params = {"rows": Param(4, low=1), "cols": Param(3, low=1)}
        samples_param = "rows"
        check_params = {"rows": 4, "cols": 3}

        def build(self, device, dtype, seed):
            g = torch.Generator().manual_seed(seed)
            r, c = self.config["rows"], self.config["cols"]
            x = torch.randn(r, c, generator=g, dtype=torch.float64).to(device, dtype)
            w = torch.randn(c, generator=g, dtype=torch.float64).to(device, dtype)
            gy = torch.randn(r, c, generator=g, dtype=torch.float64).to(device, dtype)
            return Problem(model=Scale(w), inputs={"x": x}, grad_output=gy)

        def reference(self, problem):
            return problem.inputs["x"] * problem.model.w


    class Wrong(Technique, name="chkiso_wrong"):
        """Twice the right output."""
        workload = Tiny

        def forward(self, problem):
            return 2 * problem.inputs["x"] * problem.model.w


    class SysExit(Technique, name="chkiso_sys_exit"):
        """sys.exit(0) in forward."""
        workload = Tiny

        def forward(self, problem):
            sys.exit(0)


    class OsExit(Technique, name="chkiso_os_exit"):
        """os._exit(0) in forward: no cleanup, no exception."""
        workload = Tiny

        def forward(self, problem):
            os._exit(0)


    class Sigkill(Technique, name="chkiso_sigkill"):
        """SIGKILL to itself in forward."""
        workload = Tiny

        def forward(self, problem):
            os.kill(os.getpid(), signal.SIGKILL)


    class Loops(Technique, name="chkiso_loop"):
        """Never returns (busy)."""
        workload = Tiny

        def forward(self, problem):
            while True:
                pass


    class Unavailable(Technique, name="chkiso_unavailable"):
        """Unavailable everywhere: SKIP, not a failure."""
        workload = Tiny

        def check_available(self, device):
            raise TechniqueUnavailable("needs hardware this test machine lacks")

        def forward(self, problem):
            return problem.inputs["x"] * problem.model.w
''')

TIMEOUT_S = 8  # the busy loop runs this long: long enough for the forked checks, which take well under 1 s idle
EXPECTED = {  # technique: (verdict, words its line must hold)
    "chkiso_wrong": ("FAIL", "output differs from the reference"),
    "chkiso_sys_exit": ("ERROR", "exited with code 0 before writing a result"),
    "chkiso_os_exit": ("ERROR", "exited with code 0 before writing a result"),
    "chkiso_sigkill": ("ERROR", "killed by signal 9 (SIGKILL)"),
    "chkiso_loop": ("ERROR", f"timed out after {TIMEOUT_S} s"),
    "chkiso_unavailable": ("SKIP", "unavailable: needs hardware"),
    "unchunked": ("PASS", "float64: max |error|"),
}


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "chkiso_plugin.py"
    path.write_text(PLUGIN)
    return path


def test_hostile_techniques_each_get_a_line_and_the_good_one_passes(plugin):
    started = time.monotonic()
    with subprocess.Popen([sys.executable, "-m", "memlab", "check", *EXPECTED, "--plugin", str(plugin),
                           "--timeout", str(TIMEOUT_S)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as p:
        watchdog = threading.Timer(300, p.kill)  # a hung `memlab check` fails the test instead of hanging it
        watchdog.start()
        try:
            arrived = [(time.monotonic(), line.rstrip("\n")) for line in p.stdout]  # each line when printed
            stderr = p.stderr.read()
            rc = p.wait(60)
        finally:
            watchdog.cancel()
    elapsed = time.monotonic() - started
    lines = [line for _, line in arrived]
    assert rc == 1, (lines, stderr)
    assert len(lines) == len(EXPECTED), lines
    for line, (name, (verdict, words)) in zip(lines, EXPECTED.items()):
        assert line.startswith(f"{verdict:<5} {name}: ") and words in line, line
    loop = list(EXPECTED).index("chkiso_loop")  # the lines before it were printed before its time limit ran out
    assert arrived[loop][0] - arrived[loop - 1][0] >= TIMEOUT_S - 1, "lines were held back"
    assert "Traceback" not in "\n".join(lines) + stderr
    failed = [line for line in stderr.splitlines() if line.startswith("memlab: ")]
    assert failed == ["memlab: 5 of 7 techniques failed the reference check: chkiso_wrong, chkiso_sys_exit, "
                      "chkiso_os_exit, chkiso_sigkill, chkiso_loop"]
    assert elapsed < TIMEOUT_S + 150, f"memlab check took {elapsed:.0f} s"  # one timeout, the rest quick


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-5", "abc", "", "1e9"])
def test_bad_timeout_exits_2_with_one_line(value, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["check", "unchunked", f"--timeout={value}"])  # "=": "-inf" is no option
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("memlab: error: argument --timeout: ")
    assert f"{value!r} is not valid: expected seconds" in captured.err  # the shared --timeout check of cli.py


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0, -1.0, 1e9, True, None, "abc"])
def test_check_all_rejects_a_bad_timeout_before_any_check(value):
    with pytest.raises(ValueError, match=r"^timeout=.* is not valid: expected seconds in \(0, 604800\]"):
        check_all(["unchunked"], timeout=value)


def test_outcome_round_trips_through_json_and_in_process_mode_still_works():
    import json

    [outcome] = check_all(["unchunked"], isolate=False)
    assert outcome.verdict == "PASS"
    back = CheckOutcome.from_dict(json.loads(json.dumps(outcome.to_dict())))
    assert back == outcome and back.line() == outcome.line()
    assert check_timeout(0.5) == 0.5 and check_timeout(300) == 300.0
