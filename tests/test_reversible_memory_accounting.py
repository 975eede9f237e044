"""The reversible-memory-accounting seed page: the report's networks, MemCNN's own models, the page's shape."""
from __future__ import annotations

import importlib.util
import json

import pytest

from memlab.families.reversible.reproductions import reversible_memory_accounting as R

needs_memcnn = pytest.mark.skipif(importlib.util.find_spec("memcnn") is None, reason="MemCNN peer not installed")
pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)


@needs_memcnn
def test_memcnn_models_give_the_reports_model_memory_to_the_byte():
    """MemCNN's ResNet32 / RevNet38 (experiments.json layouts, CIFAR-100): parameters and buffers
    rounded to the allocator's 512 bytes are exactly the report's "Model memory allocation"."""
    got = R.memcnn_models(classes=100, batch=None)
    assert got["resnet32"]["model_bytes"] == R.REPORT["resnet"]["model_bytes"] == 1_966_080
    assert got["revnet38"]["model_bytes"] == R.REPORT["revnet"]["model_bytes"] == 2_414_592
    assert "saved_bytes" not in got["resnet32"]


@needs_memcnn
def test_memcnn_saved_bytes_are_deterministic_and_revnet_saves_less():
    a, b = R.memcnn_models(classes=10, batch=2), R.memcnn_models(classes=10, batch=2)
    assert a == b
    assert a["resnet32"]["saved_bytes"] > 2 * a["revnet38"]["saved_bytes"] > 0


def test_memlab_model_bytes_round_every_tensor_to_512():
    cfg = R._configs(True)["nets"]
    got = R.memlab_model_bytes("resnet", cfg)
    assert got % 512 == 0 and got > 0


def test_quick_page_has_the_sites_shape(monkeypatch):
    import memlab

    # the page's step times are not asserted here: each measurement's timed phase stops after its one
    # checked step (time_budget 0) instead of sampling for 1 s; every other figure is the same
    measure = memlab.measure
    monkeypatch.setattr(memlab, "measure", lambda *a, **kw: measure(*a, **{**kw, "time_budget": 0}))
    data = R.reproduce(quick=True)
    json.dumps(data)  # JSON-serialisable
    assert data["verdict"] == "reproduced with caveat"
    s = data["summary"]
    for part in ("Claim:", "Configuration:", "Activation peak", "Predicted CUDA", "Leak:", "Verdict:"):
        assert part in s
    assert "quick mode" in s
    by = {(m["technique"], m["params"].get("depth")): m for m in data["measurements"]}
    res, rev = by["resnet", 32], by["revnet", 38]
    assert res["status"] == rev["status"] == "ok"
    assert res["params"]["classes"] == 10 and res["optimizer"] == "sgd_momentum"
    assert set(res["allocated_after_step_bytes"]) == {0} and set(rev["allocated_after_step_bytes"]) == {0}
    assert by["leaky_ctx_output", 8]["status"] == "leak"
    fig = data["figure"]
    assert fig["type"] == "bar" and all(len(v) == len(fig["x"]) for v in fig["series"].values())
    assert [t["id"] for t in data["tables"]] == ["report", "depth"]
    assert all(len(r) == len(t["columns"]) for t in data["tables"] for r in t["rows"])
    pc = data["predicted_cuda"]["resnet depth 32"]
    assert pc["reserved_peak_mib"] >= pc["allocated_peak_total_mib"] > 0
    assert data["configuration"]["report_networks"]["depths"] == {"resnet": 32, "revnet": 38}
