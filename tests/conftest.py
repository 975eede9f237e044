from pathlib import Path

import pytest

PLUGIN = Path(__file__).parent / "plugins" / "patterns.py"

#: The test files that take longest (seconds of their tests' setup, call and teardown on 2 cores, in
#: docs/evidence/test-suite-time.md), longest first: :func:`pytest_collection_modifyitems` puts them
#: ahead of the rest.  A file renamed or removed is ignored; a file missing here only runs later.
LONG_FILES = ("test_site_browser.py", "test_sharding_sweep.py", "test_sweep_ray.py", "test_forkserver.py",
              "test_family_folder.py", "test_benchmarks.py", "test_site_machines.py", "test_plugin_family.py",
              "test_sharding_checkpoint.py", "test_advisor_declaration.py", "test_sweep_parallel.py",
              "test_reversible_memory_accounting.py", "test_model_contract.py", "test_advisor.py")


# NOTE [ longest files first ]
# `make test` hands whole files to two workers (pytest-xdist --dist loadfile), by default in order of
# their number of tests, most first: the files of a few long end-to-end tests (the browser's site
# builds, Ray, the sharded sweeps) went last, so the suite ended with one worker running such a file
# while the other had nothing left.  Longest first (the longest-processing-time rule) lets the short
# files fill in at the end.  Within a file the tests keep their order; the order of files does not
# change what any test asserts.
def pytest_configure(config):
    """Send files to the workers in collection order (:func:`pytest_collection_modifyitems`'), not by
    their number of tests (xdist's --loadscope-reorder, on by default): NOTE [ longest files first ]."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """:data:`LONG_FILES` first, longest first; every other file after them in its collection order."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order


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
