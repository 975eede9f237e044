from pathlib import Path

import pytest

PLUGIN = Path(__file__).parent / "plugins" / "patterns.py"


@pytest.fixture(scope="session")
def patterns():
    """The hand-computed allocation patterns plug-in, loaded once."""
    import memlab

    memlab.load_plugin(PLUGIN)
    import sys

    return next(m for n, m in sys.modules.items() if n.startswith("memlab_plugin_") and n.endswith("_patterns"))


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module's in-process steps: on a loaded 2-core machine a two-thread step
    waits for time slices at every barrier (before this, test_seq_exponents took 1,032 s of the two
    transformer test files' 1,879 s at load ~25, under the lowest CPU weight).  For modules that assert
    exact bytes and float64 values."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def frozen_heap():
    """Keep what exists when a test module starts (torch, every collected test module, pytest itself)
    out of the garbage collector's scans, as memlab's fork server and workers do for their children
    (NOTE [ fork server ]): an in-process measurement calls ``gc.collect()`` a dozen times, each a
    scan of the whole heap (0.05-0.09 s in a pytest process) unless it is frozen.  Objects created by
    the tests themselves stay collectable.  A module that measures in process uses it with
    ``pytestmark = pytest.mark.usefixtures("frozen_heap")``."""
    import gc

    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()  # the next module starts with the collector as it was
