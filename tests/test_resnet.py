"""The deep-network family (CIFAR ResNet / RevNet) and the complexity fit."""
import math

import pytest
import torch

import memlab
from memlab.core.complexity import badge, fit_exponent, fit_groups
from memlab.families.resnet.workload import ResNet, blocks_per_stage

RESNET = ["resnet", "resnet_checkpoint_block", "resnet_checkpoint_sqrt"]
REVNET = ["revnet", "revnet_nosave", "revnet_autograd"]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny convolutions on a shared 2-core machine: one thread avoids OpenMP hand-off stalls."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _workload(**given):
    return ResNet(ResNet.resolve(given))


# -- layouts and shapes ------------------------------------------------------------------------

@pytest.mark.parametrize("depth,block,n", [(110, "basic", 18), (20, "basic", 3), (164, "bottleneck", 18),
                                           (1001, "bottleneck", 111), (29, "bottleneck", 3)])
def test_layouts(depth, block, n):
    assert blocks_per_stage(depth, block) == n


def test_bad_depth_names_the_nearest_layouts():
    with pytest.raises(ValueError, match=r"depth=111 is not a basic layout 6n\+2 .*nearest valid: 110, 116"):
        memlab.get_technique("resnet")(depth=111)
    with pytest.raises(ValueError, match=r"RevNet needs an even n .*depth=20 gives n=3: use depth=26"):
        memlab.get_technique("revnet")(depth=20)


@pytest.mark.parametrize("depth,block,params", [(110, "basic", 1.73e6), (164, "bottleneck", 1.70e6)])
def test_paper_networks_have_the_papers_parameter_counts(depth, block, params):
    """He et al.'s ResNet-110 (1.7M) and ResNet-164 (1.7M) at width 16, within 2%."""
    p = _workload(depth=depth, block=block, batch=1).build(torch.device("cpu"), torch.float32, 0)
    assert sum(t.numel() for t in p.model.parameters()) == pytest.approx(params, rel=0.02)


@pytest.mark.parametrize("block", ["basic", "bottleneck"])
def test_shapes(block, one_thread):
    depth = 26 if block == "basic" else 38
    w = _workload(depth=depth, block=block, batch=3, width=2, image=8, classes=5)
    p = w.build(torch.device("cpu"), torch.float32, 0)
    assert p.inputs["x"].shape == (3, 3, 8, 8) and p.grad_output.shape == (3, 5)
    assert len(p.model.blocks) == 3 * w.n() == 12
    h = p.model.stem(p.inputs["x"])
    outs = [4 * 2, 4 * 4, 4 * 8] if block == "bottleneck" else [2, 4, 8]
    for i, b in enumerate(p.model.blocks):
        h = b(h)
        assert h.shape[1:] == (outs[i // 4], 8 >> (i // 4), 8 >> (i // 4))
    assert w.reference(p).shape == (3, 5)
    r = w.build_revnet(torch.device("cpu"), torch.float32, 0)
    assert torch.equal(r.inputs["x"], p.inputs["x"])  # same seeded input for both networks
    assert r.model(r.inputs["x"]).shape == (3, 5)
    # n = 4: two units per stage; the stages that change shape start with a transition block
    assert [len(f) for f in r.model.f] == ([2, 1, 1] if block == "basic" else [1, 1, 1])


@pytest.mark.parametrize("name", RESNET + REVNET)
def test_bottleneck_matches_reference_float64(name, one_thread):
    t = memlab.get_technique(name)(depth=20, block="bottleneck", batch=1, width=4, image=4)
    v = memlab.verify_technique(t, torch.device("cpu"), torch.float64)
    assert v.ok, v.line()


def test_sqrt_segments():
    from memlab.families.resnet.techniques import sqrt_segments

    assert [sqrt_segments(b) for b in (1, 3, 12, 18, 288)] == [1, 2, 3, 4, 17]


# -- memory: exact properties ----------------------------------------------------------------------

def _saved_bytes(name, depth):
    """Bytes of the distinct storages autograd saves for backward during one forward (float64)."""
    t = memlab.get_technique(name)(depth=depth, batch=1, width=2, image=8)
    p = t.build(torch.device("cpu"), torch.float64, 0)
    seen = {}

    def pack(x):
        seen[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        t.forward(p)
    params = {q.untyped_storage().data_ptr() for q in p.model.parameters()} | {
        b.untyped_storage().data_ptr() for b in p.model.buffers()}
    return sum(v for k, v in seen.items() if k not in params)


def test_saved_activations_by_depth():
    """RevNet saves the same bytes at 2 and 4 coupling units per stage, to the byte; the same RevNet
    under plain autograd, and the ResNet, save more at the larger depth."""
    assert _saved_bytes("revnet", 26) == _saved_bytes("revnet", 50)  # n = 4 and 8 blocks per stage
    assert _saved_bytes("revnet_autograd", 50) > _saved_bytes("revnet_autograd", 26) > _saved_bytes("revnet", 26)
    assert _saved_bytes("resnet", 50) > _saved_bytes("resnet", 26)


def test_committed_sweep_exponents():
    """The committed resnet depth scan, depths 38 to 578 (16x the blocks): ``make data``'s grid in
    data/sweeps/cpu.jsonl and the two depths between them in data/sweeps/cpu-resnet.jsonl; the
    exponents the issue asks for (memlab.core.complexity)."""
    import json
    from pathlib import Path

    sweeps = Path(__file__).resolve().parents[1] / "data" / "sweeps"
    rows = [json.loads(line) for name in ("cpu.jsonl", "cpu-resnet.jsonl")
            for line in (sweeps / name).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["family"] == "resnet" and r["status"] == "ok"
            and {r["params"][k] for k in ("batch", "width")} == {4} and r["params"]["image"] == 32]
    for name in ("resnet", "resnet_checkpoint_sqrt", "resnet_checkpoint_block", "revnet"):
        assert sorted(r["params"]["depth"] for r in rows if r["technique"] == name) == [38, 74, 146, 290, 578], name
    fits = fit_groups(rows, x=lambda r: r["extra"]["blocks"], y=lambda r: r["extra"]["activation_peak_bytes"])
    assert fits["resnet_checkpoint_sqrt"].span >= 16
    assert abs(fits["resnet_checkpoint_sqrt"].exponent - 0.5) <= 0.1
    assert abs(fits["resnet"].exponent - 1) <= 0.1
    assert abs(fits["resnet_checkpoint_block"].exponent - 1) <= 0.2
    assert abs(fits["revnet"].exponent) <= 0.05


# -- the complexity fit ---------------------------------------------------------------------------

@pytest.mark.parametrize("k,label", [(0.0, "O(1)"), (0.5, "O(sqrt n)"), (1.0, "O(n)"), (2.0, "O(n^2)"), (1.5, "O(n^1.50)")])
def test_fit_recovers_known_exponents(k, label):
    xs = [16, 32, 64, 128, 256]
    f = fit_exponent(xs, [3e6 * x ** k for x in xs])
    assert f.exponent == pytest.approx(k, abs=1e-12)
    assert f.coefficient == pytest.approx(3e6, rel=1e-9)
    assert f.r2 == pytest.approx(1.0) and f.span == 16 and f.points == 5
    assert badge(f).label == label
    assert badge(f).text.startswith(f"{label}: exponent {k:.2f}, R² 1.000 over 16x")


def test_fit_with_noise_and_offset():
    xs = [16, 32, 64, 128, 256]
    noisy = [1e5 * x ** 0.5 * (1 + 0.03 * (-1) ** i) for i, x in enumerate(xs)]
    f = fit_exponent(xs, noisy)
    assert abs(f.exponent - 0.5) < 0.02 and 0.99 < f.r2 < 1.0
    # a fixed cost bends a linear law down at small depths: the fit says so (exponent < 1)
    g = fit_exponent(xs, [1000 * x + 50_000 for x in xs])
    assert 0.5 < g.exponent < 0.9 and g.r2 > 0.95


def test_fit_rejects_bad_input():
    with pytest.raises(ValueError, match="two distinct x"):
        fit_exponent([4, 4], [1, 2])
    with pytest.raises(ValueError, match="positive and finite"):
        fit_exponent([1, 2], [0, 1])
    with pytest.raises(ValueError, match="2 x values but 1 y values"):
        fit_exponent([1, 2], [1])


def test_fit_groups_skips_bad_rows_and_takes_medians():
    rows = [{"technique": "a", "status": "ok", "x": x, "y": y} for x, y in ((1, 1), (4, 2), (4, 2), (4, 100), (16, 4))]
    rows += [{"technique": "a", "status": "mismatch", "x": 64, "y": 1e9}, {"technique": "b", "x": 1, "y": 1}]
    fits = fit_groups(rows, x=lambda r: r["x"], y=lambda r: r["y"])
    assert set(fits) == {"a"} and math.isclose(fits["a"].exponent, 0.5)


# -- the site's badges and paper tables -----------------------------------------------------------

def test_site_family_badges_and_paper_tables():
    import pandas as pd

    from memlab.site.complexity import family_badges, reproduction_extras
    from memlab.site.page import Page

    rows = [{"technique": "t", "status": "ok", "params": {"depth": d, "batch": 4}, "extra": {"blocks": 3 * d},
             "activation_peak_bytes": 1000 * d ** 0.5} for d in (4, 16, 64)]
    rows += [{"technique": "short", "status": "ok", "params": {"depth": d}, "extra": {}, "activation_peak_bytes": d}
             for d in (4, 8)]  # a 2x span: no badge
    (b,) = family_badges(pd.DataFrame(rows))
    assert (b["technique"], b["label"], b["x"], b["fixed"]) == ("t", "O(sqrt n)", "blocks", "batch=4")
    data = {"tables": [{"title": "Paper", "columns": ["net", "ratio"], "rows": [["ResNet-164", 2.5], ["x", None]],
                        "note": "n"},
                       {"title": "bad", "columns": ["a"], "rows": [["too", "many"]]}, "junk"],
            "badges": [{"name": "revnet", "label": "O(1)", "text": "O(1): exponent 0.00"}, {"name": 3}]}
    out = reproduction_extras(Page("seed-x.html"), data)
    (t,) = out["paper_tables"]
    assert t["title"] == "Paper" and [c["label"] for c in t["table"]["columns"]] == ["net", "ratio"]
    assert t["table"]["rows"][0]["c1"] == 2.5 and t["table"]["rows"][1]["c1"] == "-"
    assert out["badges"] == [{"name": "revnet", "label": "O(1)", "text": "O(1): exponent 0.00"}]
