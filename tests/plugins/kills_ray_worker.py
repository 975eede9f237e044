"""Test plug-in: techniques that kill the process that started their measurement (under ``memlab
sweep --executor ray``, the Ray worker), as an OOM killer or a lost node would.  Each attempt's
worker pid is appended to the file named by ``MEMLAB_TEST_ATTEMPTS``."""
import os
import signal
from pathlib import Path

from memlab import Technique
from memlab.measurement.forkserver import PARENT_ENV
from memlab.families.chunking.workload import ChainedMatmul


def _plain(problem):
    m = problem.model
    return (problem.inputs["x"] @ m.w1) @ m.w2


def _attempt() -> tuple[Path, list[str]]:
    """Record this attempt's worker pid once; return the file and the pids recorded so far."""
    path = Path(os.environ["MEMLAB_TEST_ATTEMPTS"])
    worker = os.environ[PARENT_ENV]
    seen = path.read_text().split() if path.exists() else []
    if worker not in seen:
        with open(path, "a") as fh:
            fh.write(worker + "\n")
        seen.append(worker)
    return path, seen


class _Killer(Technique):
    workload = ChainedMatmul
    check_params = {"n": 37, "d": 8, "hidden": 16}


class KillsWorkerOnce(_Killer, name="kills_worker_once"):
    """Kills its worker on the first attempt; measures normally on the retry."""

    def forward(self, problem):
        _, seen = _attempt()
        if len(seen) == 1:
            os.kill(int(os.environ[PARENT_ENV]), signal.SIGKILL)
        return _plain(problem)


class KillsWorkerAlways(_Killer, name="kills_worker_always"):
    """Kills its worker on every attempt."""

    def forward(self, problem):
        _attempt()
        os.kill(int(os.environ[PARENT_ENV]), signal.SIGKILL)
        return _plain(problem)
