"""NOTE [ no garbage into the trace ] (memlab.measurement.inprocess): garbage an earlier in-process
measurement left behind is freed before the next one's recording opens, not counted in its categories.
Found when ``pytest -n 2 --dist loadfile`` ran tests/test_resume_keys.py after
tests/test_reversible_memory_accounting.py in one worker: the resume test's row had total_peak_bytes
-195968, so ``--resume`` refused it as invalid."""
import pytest

import memlab
from memlab.families.reversible.reproductions._leaky_ctx import LeakyCtxOutput
from memlab.families.reversible.reproductions.reversible_memory_accounting import LEAK_CFG

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

SMALL = {"isolate": False, "iterations": 1, "repeats": 1, "time_budget": 0, "n": 16, "d": 4, "hidden": 8}
FIGURES = ("peak_allocated_bytes", "total_peak_bytes", "peak_by_category_bytes", "end_by_category_bytes",
           "allocated_baseline_bytes", "allocated_after_step_bytes")


def test_a_leaky_in_process_measurement_changes_no_figure_of_the_next_one():
    clean = memlab.measure("unchunked", **SMALL)
    # autograd ctx.y = y cycles through 8 blocks: one gc.collect() frees one layer of them
    leaky = memlab.measure(LeakyCtxOutput, isolate=False, iterations=3, repeats=1, time_budget=0, **LEAK_CFG)
    assert leaky.status == "leak", leaky.error
    after = memlab.measure("unchunked", **SMALL)
    assert (clean.status, after.status) == ("ok", "ok"), (clean.error, after.error)
    assert min(after.peak_by_category_bytes.values()) >= 0 and after.total_peak_bytes > 0, after.peak_by_category_bytes
    for name in FIGURES:
        assert getattr(after, name) == getattr(clean, name), name
