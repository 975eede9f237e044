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
