"""Every registered built-in technique matches its workload reference (outputs and all gradients)."""
import pytest

import memlab
from memlab.measurement.technique_checks import check_technique

BUILTIN = [n for n in memlab.list_techniques() if memlab.get_technique(n).__module__.startswith("memlab.")]


@pytest.mark.parametrize("name", BUILTIN)
def test_technique_matches_reference_float64(name):
    try:
        v = check_technique(name)
    except memlab.TechniqueUnavailable as exc:
        pytest.skip(str(exc))
    assert v.ok, f"{name}: errors {v.errors} exceed rtol={v.rtol} atol={v.atol}"


@pytest.mark.parametrize("name", BUILTIN)
def test_technique_matches_reference_inference(name):
    try:
        v = check_technique(name, mode="infer")
    except memlab.TechniqueUnavailable as exc:
        pytest.skip(str(exc))
    assert v.ok, f"{name}: errors {v.errors}"
