"""What every family owes, checked from the registry (a new family is covered without an edit here):
one baseline, sweep grids every technique accepts, a twin that costs more than the technique saving
against it, and the harness's one technique per family."""
from __future__ import annotations

import functools

import pytest

import memlab
from memlab.measurement.harness_cost import quick_points, quick_techniques

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

FAMILIES = memlab.list_families()
BUILTIN = [n for n in memlab.list_techniques() if memlab.get_technique(n).__module__.startswith("memlab.families.")]
#: techniques whose ``twin`` pairs them with a technique on the same path without a claim to save
#: against it, and why (everything else with a twin must save against it)
TWIN_WITHOUT_SAVING = {
    "tt_report_einsum": "the report's own TT layer: the same activations as tt_factorized plus a transposed "
                        "upstream-gradient copy in backward (NOTE [ TT report einsum backward ]); it costs more",
}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_has_exactly_one_baseline(family):
    baselines = [n for n in memlab.list_techniques(family) if memlab.get_technique(n).baseline]
    assert len(baselines) == 1, (family, baselines)


def test_quick_techniques_are_one_baseline_per_family():
    names = quick_techniques()
    # families a test loaded since (a user's model file is a family too) come on top of the built-ins
    assert [f for f in (memlab.get_technique(n).family() for n in names) if f in FAMILIES] == FAMILIES
    assert all(memlab.get_technique(n).baseline for n in names)
    assert "resnet" in names  # the resnet family's baseline technique
    points = quick_points()
    assert [n for n, _ in points] == list(names)
    for name, params in points:  # each at its family's first quick-grid configuration, valid for it
        memlab.get_technique(name)(**params)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("quick", [True, False], ids=["quick", "full"])
def test_sweep_grids_are_valid_for_every_technique(family, quick):
    """Every configuration of the family's grid builds every technique of the family (keys a technique
    does not have are dropped, as the sweep drops them)."""
    workloads = {memlab.get_technique(n).workload for n in memlab.list_techniques(family)}
    for workload in workloads:
        grid = workload.sweep_grid(quick)
        assert grid and all(isinstance(cfg, dict) for cfg in grid), (workload.name, grid)
        known = set(workload.params).union(*(memlab.get_technique(n).all_params() for n in memlab.list_techniques(family)))
        for cfg in grid:
            assert set(cfg) <= known, (workload.name, cfg)
            for name in memlab.list_techniques(family):
                cls = memlab.get_technique(name)
                if cls.workload is workload:
                    cls(**{k: v for k, v in cfg.items() if k in cls.all_params()})


@functools.lru_cache(maxsize=None)
def _quick_peak(name: str) -> int:
    """Exact total peak (bytes) of one training step at the first quick-grid configuration of the family,
    in this process at one intra-op thread (on a loaded machine a multi-threaded step waits for time
    slices at every barrier; the exact bytes do not depend on the threads)."""
    import torch

    cls = memlab.get_technique(name)
    params = {k: v for k, v in cls.workload.sweep_grid(True)[0].items() if k in cls.all_params()}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        m = memlab.measure(name, isolate=False, iterations=1, repeats=1, check=False, time_budget=0, **params)
    finally:
        torch.set_num_threads(threads)
    assert m.status == "ok", (name, m.error)
    return m.total_peak_bytes


@pytest.mark.parametrize("name", [n for n in BUILTIN if memlab.get_technique(n).twin
                                  and n not in TWIN_WITHOUT_SAVING])
def test_saves_memory_against_its_twin(name):
    """The no-savings twin runs the same code path without the saving (STYLE: every saving technique has
    one), so the technique's exact peak is below the twin's, at the family's quick configuration."""
    twin = memlab.get_technique(name).twin
    assert memlab.get_technique(twin).family() == memlab.get_technique(name).family()
    assert _quick_peak(name) < _quick_peak(twin), (name, twin)


def test_exceptions_name_techniques_that_exist():
    assert set(TWIN_WITHOUT_SAVING) <= {n for n in BUILTIN if memlab.get_technique(n).twin}
