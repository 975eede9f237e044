"""memlab.cuda.variants: a seed's own question is answered by its reproduction module's hook, not by a
seed-name branch in the general layer."""
from __future__ import annotations

from memlab.cuda import variants
from memlab.reproductions import find_reproduction, list_reproductions
import pytest

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)


def test_hook_adds_the_seeds_own_keys(monkeypatch):
    mod = find_reproduction("chunked-slicing-backward-spike")
    seen = []

    def hook(confs, quick=False):
        seen.append((confs, quick))
        return {"slice_backward": {"answer": "stub"}}

    monkeypatch.setattr(mod, "cuda_variants", hook)
    out = variants.seed_variants({"seed": mod.SEED, "quick": True, "measurements": []}, confs=("",), say=lambda m: None)
    assert seen == [(("",), True)]
    assert out["slice_backward"] == {"answer": "stub"} and out["rows"] == []


def test_no_hook_no_extra_keys():
    seeds = [s for s, m in list_reproductions().items() if not hasattr(m, "cuda_variants")]
    assert seeds, "every reproduction has a hook: pick another seed for this test"
    out = variants.seed_variants({"seed": seeds[0], "measurements": []}, confs=("",), say=lambda m: None)
    assert set(out) == {"seed", "confs", "rows", "predicted", "method", "torch", "memlab_commit"}


def test_unknown_seed_has_no_reproduction():
    assert find_reproduction("no-such-seed") is None
