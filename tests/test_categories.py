"""Memory by category (NOTE [ memory categories ]): exact on hand-computed patterns, summing to the
measured peak to the byte for every built-in technique, and the probe changes no figure."""
import pytest
import torch

import memlab
from activation_reference import activation_peak
from memlab.measurement.categories import CATEGORIES
from memlab.measurement.inprocess import traced_steps
from memlab.measurement.step import baseline_objects, make_step, tensors_bytes

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

CPU = torch.device("cpu")
FULL = 1000 * 1000 * 4      # bytes of one [1000, 1000] float32 tensor (x, grad_output, out)
W = 1000 * 4                # bytes of w [1000] and of its gradient
SMALL = {"batch": 8, "width": 8, "hidden": 16}


def _measure(name, **kw):
    return memlab.measure(name, isolate=False, iterations=2, repeats=1, time_budget=0, **kw)


def _cats(**nonzero) -> dict[str, int]:
    return {c: nonzero.get(c, 0) for c in CATEGORIES}


@pytest.fixture(scope="module")
def saved_exp(patterns):
    class SavedExp(memlab.Technique):  # no name=: not registered, so no other test sweeps it
        """out = exp(x * w): exp saves its result for backward."""

        name = "test_saved_exp"
        workload = patterns.PatternWorkload

        def forward(self, problem):
            return torch.exp(problem.inputs["x"] * problem.model.w)

    return SavedExp


def test_broadcast_mul_by_category(patterns):
    # baseline: w (parameters), x and grad_output (inputs).  Peak, in backward: out = x * w (saved by
    # nothing: x and w are the saved operands) and the product g * x (temporaries), grad_w.
    m = _measure("pattern_broadcast_mul")
    assert m.status == "ok", m.error
    assert m.peak_by_category_bytes == _cats(parameters=W, gradients=W, inputs=2 * FULL, temporaries=2 * FULL)
    assert m.end_by_category_bytes == _cats(parameters=W, inputs=2 * FULL)
    assert m.total_peak_bytes == m.allocated_baseline_bytes + m.peak_allocated_bytes == 4 * FULL + 2 * W


def test_saved_activation_is_its_own_category(saved_exp):
    # forward: x * w (FULL, freed once exp has run), exp's result FULL, saved by ExpBackward.
    # backward: grad * result FULL, then g * x FULL and its sum grad_w W, with out still held.
    m = _measure(saved_exp, check=False)
    assert m.status == "ok", m.error
    assert m.peak_allocated_bytes == 3 * FULL + W
    assert m.peak_by_category_bytes == _cats(parameters=W, gradients=W, inputs=2 * FULL,
                                             saved_activations=FULL, temporaries=2 * FULL)


def test_inference_is_temporaries_only(patterns):
    m = _measure("pattern_two_buffers", mode="infer")
    assert m.peak_by_category_bytes == _cats(parameters=W, inputs=2 * FULL, temporaries=FULL + FULL // 2)
    assert m.optimizer_class is None


def _peers_or_skip(cls):
    t = cls.for_check()
    try:
        t.check_available(CPU)
    except memlab.TechniqueUnavailable as exc:
        pytest.skip(str(exc))
    return t


def _check_sums(traced):
    first = sum(traced.categories[0].start.values())
    for c, peak, after in zip(traced.categories, traced.stats.peaks, traced.stats.after):
        for figures in (c.start, c.peak, c.end):
            assert set(figures) == set(CATEGORIES) and min(figures.values()) >= 0, figures
        assert sum(c.peak.values()) - sum(c.start.values()) == peak
        assert sum(c.end.values()) - first == after
        assert c.start["gradients"] == c.start["saved_activations"] == 0


@pytest.mark.parametrize("name", memlab.list_techniques())
def test_every_technique_sums_exactly_and_the_probe_changes_nothing(name):
    t = _peers_or_skip(memlab.get_technique(name))
    plain = traced_steps(t, CPU, torch.float32, iterations=2, probe=False)
    probed = traced_steps(t, CPU, torch.float32, iterations=2)
    assert probed.stats == plain.stats, (plain.stats, probed.stats)
    _check_sums(probed)
    # the known categories at the start are exactly the allocated baseline
    start = probed.categories[0].start
    known = start["parameters"] + start["optimizer_state"] + start["inputs"]
    assert known == tensors_bytes(baseline_objects(probed.problem, probed.optimizer))


@pytest.mark.parametrize("name", ["slice_loop", "reversible", "tt_factorized", "checkpoint_chunk"])
def test_adam_and_loss_sum_exactly_and_the_probe_changes_nothing(name):
    t = memlab.get_technique(name).for_check()
    kw = dict(iterations=2, optimizer="adam", loss="mse")
    plain = traced_steps(t, CPU, torch.float32, probe=False, **kw)
    probed = traced_steps(t, CPU, torch.float32, **kw)
    assert probed.stats == plain.stats
    _check_sums(probed)


@pytest.mark.parametrize("name", ["residual", "checkpoint_block", "reversible", "reversible_nosave"])
def test_activation_peak_equals_the_former_describe_trace(name):
    # activation_reference.activation_peak: live above the start minus the final gradients
    t = memlab.get_technique(name)(depth=5, **SMALL)
    p = t.build(CPU, torch.float32, 0)
    step, _ = make_step(t, p, "train")
    step()
    before = activation_peak(t, p)
    now = traced_steps(t, CPU, torch.float32, iterations=1).categories[0]
    assert (now.activation_peak_bytes, now.activation_peak_phase) == (before["activation_peak_bytes"], "backward")


def test_inference_row_has_a_forward_activation_peak():
    m = _measure("reversible", mode="infer", check=False, depth=3, **SMALL)
    assert m.extra["activation_peak_phase"] == "forward"
    assert m.extra["activation_peak_bytes"] == m.peak_by_category_bytes["temporaries"]


def test_a_technique_using_torch_func_is_measured_without_the_pack_hook(patterns):
    class FuncVjp(memlab.Technique):  # not registered
        """x * w through torch.func.vjp, which refuses saved-tensor hooks."""

        name = "test_func_vjp"
        workload = patterns.PatternWorkload

        def forward(self, problem):
            x = problem.inputs["x"]
            return torch.func.vjp(lambda w: x * w, problem.model.w)[0]

    m = _measure(FuncVjp)
    assert m.status == "ok", m.error
    assert m.extra["saved_activations_separated"] is False
    assert m.peak_allocated_bytes == 2 * FULL + W
    assert m.peak_by_category_bytes == _cats(parameters=W, gradients=W, inputs=2 * FULL, temporaries=2 * FULL)


def test_one_vocabulary_of_categories():
    """The categories, their labels, short labels and activation flag are declared once (memlab.core.record)."""
    from memlab.advisor.advise import format_categories as category_text
    from memlab.core.record import ACTIVATION_CATEGORIES, CATEGORY_LABELS, Category
    from memlab.site.notes import CATEGORY_NAMES
    from memlab.site.ranking import ACTIVATION_CATEGORIES as SITE_ACTIVATION

    assert CATEGORIES == tuple(Category) == ("parameters", "gradients", "optimizer_state", "inputs",
                                             "saved_activations", "temporaries")
    assert ACTIVATION_CATEGORIES == SITE_ACTIVATION == ("saved_activations", "temporaries")
    assert CATEGORY_NAMES == CATEGORY_LABELS and CATEGORY_LABELS["optimizer_state"] == "optimizer state"
    assert category_text({"peak_by_category_bytes": {"optimizer_state": 1024, "inputs": 0}}) == "opt 1.0 KiB"
