"""Every measured step is checked, leaks are net growth, a technique's own optimizer is verified, and
steps are timed against the family baseline without the resident malloc setting (issue 24)."""
from pathlib import Path

import pytest
import torch

import memlab
from memlab.measurement import resident
from memlab.measurement.step import make_step
from memlab.measurement.step_check import Shadow, StepLog, checker_for, compare_logs
from memlab.measurement.timing import family_baseline

LATER = Path(__file__).parent / "plugins" / "later_steps.py"
pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)
SMALL = dict(n=512, d=64, hidden=128)
FAST = dict(iterations=5, repeats=3, time_budget=0)


@pytest.fixture(scope="module", autouse=True)
def later():
    memlab.load_plugin(LATER)


@pytest.mark.parametrize("name", ["later_stale_weights", "later_doubled"])
def test_right_on_the_first_step_only_is_a_mismatch_naming_the_step(name):
    m = memlab.measure(name, isolate="fork", **FAST, **SMALL)
    assert m.matches_reference is True             # the float64 check alone passes it
    assert m.status == "mismatch" and m.error.startswith("measured step 2: output differs")


def test_a_fault_after_the_traced_steps_is_caught_in_the_timed_steps():
    # wrong from a problem's 5th step on: the memory phase compares its steps 1-3 (warm-up and two traced),
    # its steps 4-5 are the resident and FLOP-counted ones; the timed phase's step 5 is compared
    m = memlab.measure("later_wrong_from_fifth", isolate="fork", iterations=2, repeats=5, time_budget=0, **SMALL)
    assert m.status == "mismatch" and m.error.startswith("timed step 5: output differs"), m.error


def test_leak_at_every_other_step_is_a_leak():
    m = memlab.measure("later_alternating_leak", isolate="fork", **FAST, **SMALL)
    assert m.allocated_after_step_bytes == (65536, 65536, 131072, 131072, 196608)
    assert m.status == "leak" and m.leak_bytes_per_step == (196608 - 65536) / 4


def test_a_wrong_update_of_the_techniques_own_optimizer_is_a_mismatch():
    m = memlab.measure("later_wrong_optimizer", isolate="fork", **FAST, **SMALL)
    assert m.status == "mismatch" and "measured step" in m.error
    assert m.optimizer_class.endswith("_SharedScheduleSGD")      # the optimizer that ran


def test_a_correct_technique_passes_every_step_in_memory_and_timed_phases():
    m = memlab.measure("slice_loop", isolate="fork", chunk_size=100, **FAST, **SMALL)
    assert m.status == "ok", m.error
    assert m.extra["measured_steps_checked"] == 6 and m.steps_checked == 4   # warm-up + 5 / warm-up + 3


def test_checking_allocates_nothing_in_the_traced_steps():
    # the same exact figures with the step check as without it (samples are NumPy views and indexing)
    from memlab.measurement.inprocess import traced_steps

    t = memlab.get_technique("slice_loop")(chunk_size=100, **SMALL)
    traced = traced_steps(t, torch.device("cpu"), torch.float32, iterations=2)
    plain = memlab.measure("slice_loop", isolate=False, check=False, iterations=2, repeats=1, time_budget=0,
                           chunk_size=100, **SMALL)
    assert list(traced.stats.peaks) == list(plain.peak_allocated_per_iteration_bytes)
    assert len([s for s in traced.log.steps() if s]) == 3


def test_compare_logs_names_the_first_step_that_drifts_beyond_the_first_steps_error():
    t = memlab.get_technique("unchunked")(**SMALL)
    shadow = Shadow(t, torch.device("cpu"), torch.float32, "train", 0, "sgd", "given")
    log = StepLog()
    problem = t.build(torch.device("cpu"), torch.float32, 0)
    step, _ = make_step(t, problem, "train", capture=log)
    for _ in range(3):
        step()
        shadow()
    assert compare_logs(log, shadow.log, checker_for(t, torch.float32, "step")).ok
    log.steps()[2]["output"][1][0] += 1.0       # step 3's first sampled output entry
    result = compare_logs(log, shadow.log, checker_for(t, torch.float32, "timed step"))
    assert not result.ok and result.reason.startswith("timed step 3: output differs")


@pytest.mark.parametrize("name,baseline", [("slice_loop", "unchunked"), ("tt_chunked", "dense"),
                                           ("reversible", "residual"), ("revnet", "resnet"),
                                           ("unchunked", "unchunked")])
def test_relative_time_is_against_the_family_baseline(name, baseline):
    assert family_baseline(memlab.get_technique(name)()).name == baseline


def test_timed_phase_records_cpu_times_and_runs_without_the_malloc_setting():
    m = memlab.measure("slice_loop", isolate="fork", chunk_size=100, iterations=1, repeats=3, time_budget=0, **SMALL)
    assert m.relative_to == "unchunked" and m.timing_threads == 1
    assert len(m.step_cpu_times_s) == len(m.step_times_s) == 3
    assert m.extra["relative_time_clock"] == "thread_cpu"
    assert m.environment["timing_heap"] == resident.TIMING_HEAP_KEPT       # the timing child's heap
    assert m.environment["malloc_mmap_threshold"] == resident.MMAP_THRESHOLD  # the memory phase's


def test_timed_steps_reuse_the_heap_instead_of_faulting_in_fresh_pages():
    """NOTE [ the timing heap ]: ``unchunked`` at n=4096, hidden 1024 frees and reallocates 4-16 MiB
    blocks every step; under glibc's untouched default the median step faulted in 1,300-3,300 pages
    (the threshold's history decides); under the timing heap (32 MiB threshold, no trim) a handful.
    The heap still grows by a 16 MiB block (~4,100 faults) in a few steps as it settles, how many
    depending on where the fork server's heap starts (ASLR): 0-3 of 16 baseline steps in 8 server
    starts under four busy loops, but 4 of the first 8 in one CI run, whose median read 517.5.  So
    the medians are of 15 and 16 steps, which read 1-8 faults in those 8 starts."""
    m = memlab.measure("slice_loop", isolate="fork", n=4096, d=256, hidden=1024, chunk_size=512, iterations=1,
                       repeats=15, time_budget=0, check=False)
    assert m.status == "ok", m.error
    assert 0 <= m.extra["baseline_minor_faults"] < 512, m.extra
    assert 0 <= m.extra["timed_minor_faults"] < 512, m.extra
    assert m.environment["timing_heap"] == resident.TIMING_HEAP_KEPT


def test_threads_override_the_timed_phase_and_time_it_by_the_wall_clock():
    m = memlab.measure("unchunked", isolate="fork", threads=2, iterations=1, repeats=2, time_budget=0, **SMALL)
    assert m.timing_threads == 2 and m.extra["relative_time_clock"] == "wall"
    assert m.relative_step_time == m.relative_step_time_wall


def test_a_timeline_names_blocks_by_their_order_not_their_address():
    a = memlab.timeline("slice_loop", isolate="fork", chunk_size=100, **SMALL)
    b = memlab.timeline("slice_loop", isolate="fork", chunk_size=100, **SMALL)
    assert a.to_dict() == b.to_dict()                     # byte-identical whenever the figures are
    allocs = [e.address for e in a.events if e.delta_bytes > 0]
    assert allocs == list(range(1, len(allocs) + 1))
    assert all(e.address in allocs or e.address == 0 for e in a.events if e.delta_bytes < 0)


def test_an_overflowed_reference_records_no_error_number():
    """A reference that overflowed where the technique did too has an infinite error: the row keeps
    None (JSON has no infinity, and the results reader refuses a non-finite figure), not inf."""
    import math

    from memlab.measurement.step_check import StepComparison, StepChecker

    checker = StepChecker.__new__(StepChecker)
    checker.steps, checker.d0, checker.worst, checker.reason = 2, 1e-7, math.inf, None
    assert StepChecker.result(checker) == StepComparison(2, 1e-7, None, None)
    checker.worst = 3e-6
    assert StepChecker.result(checker).max_error == 3e-6


# -- NOTE [ drift arbitrated in float64 ] ------------------------------------------------------------------

def _sampled(**tensors):
    import numpy as np

    return {name: ((len(v),), np.array(v, dtype=np.float64)) for name, v in tensors.items()}


def test_a_later_step_whose_float32_reference_rounds_worse_is_arbitrated_in_float64():
    """RevNet-578 (revnet_nosave) at its second step: 1.2e-3 from float32 autograd, 3.6e-6 from the
    float64 step; float32 autograd itself 2.0e-3 from it.  The reference's rounding, not a mismatch."""
    from memlab.measurement.step_check import StepChecker

    exact = _sampled(output=[1.0, 2.0], **{"grad:0": [0.2, -0.1]})
    calls = []
    checker = StepChecker(2.0 ** -23, "measured step", arbiter=lambda k: calls.append(k) or exact)
    checker.add(1, _sampled(output=[1.0, 2.0], **{"grad:0": [0.2, -0.1000001]}),
                _sampled(output=[1.0, 2.0], **{"grad:0": [0.2, -0.1]}))            # d0 = 5e-7
    technique = _sampled(output=[1.0, 2.0], **{"grad:0": [0.2000007, -0.1]})      # 3.5e-6 from float64
    reference = _sampled(output=[1.0, 2.0], **{"grad:0": [0.2004, -0.1]})         # float32 autograd: 2e-3 off
    checker.add(2, technique, reference)
    assert checker.result().ok and calls == [2] and checker.arbitrated == [2]


def test_a_technique_far_from_the_float64_step_too_stays_a_mismatch():
    from memlab.measurement.step_check import StepChecker

    exact = _sampled(output=[1.0, 2.0], **{"grad:0": [0.2, -0.1]})
    checker = StepChecker(2.0 ** -23, "timed step", arbiter=lambda k: exact)
    same = _sampled(output=[1.0, 2.0], **{"grad:0": [0.2, -0.1]})
    checker.add(1, same, same)
    stale = _sampled(output=[1.0, 2.0], **{"grad:0": [0.19, -0.1]})               # off by 5% of the largest entry
    checker.add(2, stale, same)
    result = checker.result()
    assert not result.ok and result.reason.startswith("timed step 2: grad:0 differs")
    assert "against the float64 reference grad:0 differs by 0.05" in result.reason
    # no arbiter: the drift rule alone; a float64 measurement never arbitrates
    alone = StepChecker(2.0 ** -23, "timed step")
    alone.add(1, same, same)
    alone.add(2, _sampled(output=[1.0, 2.0], **{"grad:0": [0.2004, -0.1]}), same)
    assert not alone.result().ok
    t = memlab.get_technique("unchunked")(**SMALL)
    assert checker_for(t, torch.float64, "step", arbiter=lambda k: exact).arbiter is None


def test_an_updated_parameter_beyond_the_drift_is_not_arbitrated():
    from memlab.measurement.step_check import StepChecker

    checker = StepChecker(2.0 ** -23, "measured step", arbiter=lambda k: pytest.fail("arbitrated a parameter"))
    same = _sampled(output=[1.0], **{"param:0": [0.5]})
    checker.add(1, same, same)
    checker.add(2, _sampled(output=[1.0], **{"param:0": [0.6]}), same)
    assert checker.result().reason.startswith("measured step 2: param:0 differs")


# -- NOTE [ updates of undetermined sign ] -----------------------------------------------------------------

def _adam_like_step(grad_ref, grad_got, param_ref, param_got):
    """``(technique's samples, reference's samples)`` of one step with one parameter."""
    return (_sampled(output=[1.0], **{"grad:0": grad_got, "param:0": param_got}),
            _sampled(output=[1.0], **{"grad:0": grad_ref, "param:0": param_ref}))


def test_an_update_whose_gradient_is_rounding_is_not_compared():
    """The key bias's gradient is zero in exact arithmetic (5e-10 of rounding in float32, either sign)
    and Adam moves each such entry by about lr in the direction the rounding picks: the two updates of
    entry 1 disagree by 2e-5 where the drift allows ~1e-6 of 0.5."""
    from memlab.measurement.step_check import StepChecker

    checker = StepChecker(2.0 ** -23, "measured step")
    checker.add(1, *_adam_like_step([0.02, 5e-10], [0.02, -3e-10], [0.5, 0.1 - 1e-5], [0.5, 0.1 + 1e-5]))
    assert checker.result().ok, checker.result().reason
    assert checker.undetermined["param:0"].tolist() == [False, True]


def test_an_update_whose_gradient_is_determined_is_still_compared():
    from memlab.measurement.step_check import StepChecker

    checker = StepChecker(2.0 ** -23, "measured step")
    checker.add(1, *_adam_like_step([0.02, 0.01], [0.02, 0.01], [0.5, 0.1 - 1e-5], [0.5, 0.1 + 1e-5]))
    assert checker.result().reason.startswith("measured step 1: param:0 differs")


def test_an_entry_whose_gradients_were_always_exactly_zero_must_not_move():
    from memlab.measurement.step_check import StepChecker

    checker = StepChecker(2.0 ** -23, "measured step")
    checker.add(1, *_adam_like_step([0.02, 0.0], [0.02, 0.0], [0.5, 0.1], [0.5, 0.1]))
    checker.add(2, *_adam_like_step([0.02, 0.0], [0.02, 0.0], [0.5, 0.1], [0.5, 0.1 + 1e-5]))
    assert checker.result().reason.startswith("measured step 2: param:0 differs")


def test_an_entry_once_rounding_stays_uncompared_when_its_gradients_later_read_exactly_zero():
    """sdpa, timed step 9: both gradients of a key-bias entry were exactly 0, and Adam's momentum of
    the earlier steps' rounding still moved the two copies 2.0e-6 apart."""
    from memlab.measurement.step_check import StepChecker

    checker = StepChecker(2.0 ** -23, "timed step")
    checker.add(1, *_adam_like_step([0.02, 4e-10], [0.02, -2e-10], [0.5, 0.1], [0.5, 0.1]))
    checker.add(2, *_adam_like_step([0.02, 0.0], [0.02, 0.0], [0.5, 0.1 - 1e-5], [0.5, 0.1 + 1e-5]))
    assert checker.result().ok, checker.result().reason


@pytest.mark.parametrize("technique", ["sdpa", "chunked_attention"])
def test_attention_under_adam_agrees_with_its_reference_at_every_step(technique):
    """Both were ``mismatch`` in the committed Adam sweep (param:5, the first block's qkv bias, at
    measured step 1) before the key bias's undetermined updates were left out."""
    m = memlab.measure(technique, isolate="fork", optimizer="adam", iterations=2, repeats=12, time_budget=0)
    assert m.status == "ok", m.error
    assert m.steps_checked >= 12


def test_the_float64_arbiter_steps_the_reference_from_the_techniques_start():
    from memlab.measurement.step_check import Float64Arbiter

    t = memlab.get_technique("unchunked")(**SMALL)
    log = StepLog(snapshots=True)
    problem = t.build(torch.device("cpu"), torch.float32, 0)
    step, _ = make_step(t, problem, "train", capture=log)
    for _ in range(2):
        step()
    arbiter = Float64Arbiter(t, torch.device("cpu"), "train", 0, "sgd", "given", lambda k: log.start_of(k - 1))
    assert arbiter(1) is None                      # the first step's start is not kept: nothing to arbitrate
    exact = arbiter(2)
    got = log.steps()[1]
    assert set(exact) == set(got)
    for name, (shape, b) in exact.items():
        assert shape == got[name][0]
        assert abs(got[name][1] - b).max() <= 1e-5 * max(abs(b).max(), 1.0), name


def test_float64_samples_are_copies_not_views_of_the_tensor():
    """A float64 tensor of at most SAMPLES entries was kept as a view of its memory: once freed and
    reused, the samples read whatever the allocator put there."""
    from memlab.measurement.step_check import _samples

    t = torch.arange(6, dtype=torch.float64)
    s = _samples(t)
    t.fill_(-1.0)
    assert s.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_bfloat16_starting_values_reach_the_shadow_as_numbers():
    """A bfloat16 leaf's snapshot was its int16 bits, and ``Shadow.sync`` copied the bits back as
    integers (a weight of 0.5 became 16128.0): the bfloat16 transformer then 'diverged' from itself at
    measured step 2 (output off by 1.6e10).  The shadow and the float64 arbiter must start from the
    technique's values."""
    from types import SimpleNamespace

    leaf = torch.tensor([0.5, -1.25, 3.0e-3, -7.5e30, 0.0], dtype=torch.bfloat16)
    log = StepLog(snapshots=True)
    for _ in range(2):
        log.begin([leaf])
        log.next_step()
    for dtype in (torch.bfloat16, torch.float64):  # the bfloat16 shadow, the float64 arbiter
        into = torch.zeros(5, dtype=dtype)
        Shadow.sync(SimpleNamespace(problem=SimpleNamespace(leaves=lambda: [into])), log.start_of(1))
        assert torch.equal(into, leaf.to(dtype)), (dtype, into)


def test_a_step_where_both_overflowed_compares_quietly():
    """Both NaN (the reference overflowed where the technique did too): no error number, no NumPy
    RuntimeWarning (an All-NaN slice warned from every such step of reversible's quick page)."""
    import math
    import warnings

    from memlab.measurement.step_check import StepChecker

    checker = StepChecker(2.0 ** -23, "measured step")
    both = _sampled(output=[math.nan, math.nan], **{"grad:0": [math.inf, math.nan], "param:0": [math.nan, 1.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checker.add(1, both, both)
        checker.add(2, both, both)
    assert checker.result().ok
