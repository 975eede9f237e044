"""The advisor's relative-time model: r + (c + (k - 1) * o) / W fitted at two sizes (NOTE [ advisor time model ])."""
import dataclasses

import pytest

from memlab.advisor.fit import declaration_of
from memlab.advisor.fit import time_model
from memlab.advisor.model import predict_time


def _plain_chunking():
    """The chunking declaration with a constant per-chunk cost only (no ``chunk_cost_work``): the
    tests of r + (c + (k - 1) * o) / W and of the page-fault term fit that form."""
    return dataclasses.replace(declaration_of("chunking"), chunk_cost_work={})


def _points(r, c, o, works, chunks):
    return [{"work": w, "chunks": k, "relative_step_time": r + (c + (k - 1) * o) / w} for w in works for k in chunks]


def test_a_chunked_entry_recovers_its_ratio_and_fixed_costs():
    fam = _plain_chunking()
    entry = fam.entry("slice_loop")
    model = time_model(fam, entry, _points(1.1, 3e6, 2e6, (33554432, 536870912), (1, 4, 16)))
    assert model["kind"] == "work" and model["work"] == "n*d*hidden"
    assert model["r"] == pytest.approx(1.1) and model["c"] == pytest.approx(3e6) and model["o"] == pytest.approx(2e6)
    assert model["max_fit_rel_error"] < 1e-9
    # at a size 64x the larger one, 10 chunks: the fixed costs weigh 64x less
    size = {"n": 65536, "d": 256, "hidden": 2048, "chunk_size": 6554}
    w = 65536 * 256 * 2048
    assert predict_time(fam, {**model, "knobs": ["chunk_size"], "time": model},
                        size) == pytest.approx(1.1 + (3e6 + 9 * 2e6) / w)


def test_an_entry_without_a_knob_has_no_per_chunk_cost():
    fam = declaration_of("reversible")
    model = time_model(fam, fam.entry("checkpoint_block"), _points(1.3, 4e6, 0.0, (8388608, 134217728), (1,)))
    assert model["kind"] == "work" and model["o"] == 0.0
    assert model["r"] == pytest.approx(1.3) and model["c"] == pytest.approx(4e6)
    entry = {"knobs": [], "time": model}
    big = {"depth": 64, "batch": 512, "width": 512, "hidden": 1024}
    assert predict_time(fam, entry, big) == pytest.approx(1.3 + 4e6 / (64 * 512 * 512 * 1024))


def test_one_size_only_is_a_constant_and_none_is_none():
    fam = declaration_of("reversible")
    entry = fam.entry("residual")
    pts = [{"work": 100, "chunks": 1, "relative_step_time": x} for x in (1.0, 1.2, 1.1)]
    assert time_model(fam, entry, pts)["kind"] == "constant" and time_model(fam, entry, pts)["a"] == 1.1
    assert time_model(fam, entry, [])["kind"] == "none"
    assert predict_time(fam, {"knobs": [], "time": {"kind": "none"}}, {}) is None


# -- the page-fault term (NOTE [ page faults in the time model ]) ----------------------------------------

MiB = 1024 * 1024


def _classes_with(allocations_k1, allocations_general):
    """Model classes whose pieces do not matter here: k = 1 and the general class (k >= 4)."""
    return [{"k": 1, "pieces": [{}], "allocations": allocations_k1},
            {"k_min": 4, "pieces": [{}], "allocations": allocations_general}]


def test_mmapped_bytes_counts_blocks_of_at_least_32_MiB_with_their_loop_counts():
    from memlab.advisor.model import MMAP_CEILING_BYTES, mmapped_bytes

    assert MMAP_CEILING_BYTES == 32 * MiB
    # 4 * n * hidden twice, 4 * chunk * hidden once per chunk beyond the third (1 + m of them), 4 * d * n once
    classes = _classes_with([[4, "hidden*n", 2, 0], [4, "d*n", 1, 0]],
                            [[4, "chunk*hidden", 1, 1], [4, "d*n", 1, 0]])
    assert mmapped_bytes(classes, 1, {"n": 16384, "hidden": 512, "d": 64}) == 2 * 32 * MiB
    assert mmapped_bytes(classes, 1, {"n": 16383, "hidden": 512, "d": 64}) == 0   # 8 KiB under: the heap's
    # k = 6 (m = 2): three chunk blocks of 32 MiB; d * n = 12 MiB stays on the heap
    assert mmapped_bytes(classes, 6, {"n": 98304, "chunk": 16384, "last": 16384, "hidden": 512, "d": 32}) == 3 * 32 * MiB
    assert mmapped_bytes(classes, 6, {"n": 98304, "chunk": 16384, "last": 16384, "hidden": 512, "d": 128}) \
        == 3 * 32 * MiB + 4 * 128 * 98304
    assert mmapped_bytes([{"k": 1, "pieces": [{}]}], 1, {}) is None   # fitted before allocations were kept


def _fault_family(f, r, c, o, points):
    """Synthetic time points of a technique and its baseline: relative = (r W + c + (k-1) o + f M) / (W + f M_base)."""
    out = []
    for p in points:
        w, k, mt, mb = p
        out.append({"params": {}, "work": w, "chunks": k, "mmap_bytes": mt, "baseline_mmap_bytes": mb,
                    "relative_step_time": (r * w + c + (k - 1) * o + f * mt) / (w + f * mb)})
    return out


def test_time_model_with_the_fault_term_recovers_r_c_o():
    fam = _plain_chunking()
    pts = _fault_family(0.5, 1.1, 3e6, 2e6, [(2 ** 25, 1, 0, 0), (2 ** 25, 4, 0, 0), (2 ** 29, 1, 2 ** 27, 2 ** 27),
                                               (2 ** 29, 4, 0, 2 ** 27), (2 ** 31, 16, 0, 2 ** 28)])
    model = time_model(fam, fam.entry("slice_loop"), pts, 0.5)
    assert model["r"] == pytest.approx(1.1) and model["c"] == pytest.approx(3e6) and model["o"] == pytest.approx(2e6)
    assert model["max_fit_rel_error"] < 1e-9


def test_fault_term_finds_the_family_cost_per_byte_and_predicts_with_it_on_cpu_only(monkeypatch):
    import memlab.advisor.fit as fit

    fam = _plain_chunking()
    # the technique's and the baseline's mapped bytes come from their classes: stand-ins keyed by the point
    mapped = {}
    monkeypatch.setattr(fit, "mmapped_bytes", lambda classes, k, values: mapped[(id(classes), values["n"], k)])
    base_classes = _classes_with([[4, "hidden*n", 3, 0]], [[4, "hidden*n", 3, 0]])
    tech_classes = _classes_with([[4, "hidden*n", 3, 0]], [[4, "chunk*hidden", 3, 3]])
    f = 0.8
    entries = []
    for label, r, c, o, classes in (("unchunked", 1.0, 0.0, 0.0, base_classes),
                                    ("slice_loop", 1.1, 3e6, 2e6, tech_classes),
                                    ("vmap_chunk", 1.05, 1e6, 7e5, tech_classes)):
        pts = []
        for n, w in ((2048, 2 ** 25), (8192, 2 ** 28), (16384, 2 ** 31), (16384, 2 ** 29)):
            mb = 3 * 4 * n * 512 if 4 * n * 512 >= 32 * MiB else 0
            for k in ((1,) if label == "unchunked" else (1, 4, 16)):
                mt = mb if k == 1 else 0
                mapped[(id(classes), n, k)] = mt
                mapped[(id(base_classes), n, 1)] = mb
                p = _fault_family(f, r, c, o, [(w, k, mt, mb)])[0]
                p["params"] = {"n": n, "d": w // (n * 512), "hidden": 512, "chunk_size": -(-n // k)}
                pts.append(p)
        e = fam.entry(label)
        entries.append({"label": label, "knobs": list(e.knobs), "classes": classes, "baseline": label == "unchunked",
                        "time": time_model(fam, e, pts)})
    assert fit.fault_term(fam, entries) == pytest.approx(f, rel=0.03)
    slice_loop = entries[1]
    assert slice_loop["time"]["r"] == pytest.approx(1.1, rel=1e-3)
    assert slice_loop["time"]["fault"]["baseline"] == [{"k": 1, "allocations": [[4, "hidden*n", 3, 0]]},
                                                       {"k_min": 4, "allocations": [[4, "hidden*n", 3, 0]]}]
    monkeypatch.undo()
    # at n = 16384, hidden = 512, d = 64 and 4 chunks: the baseline maps 3 x 32 MiB, the chunked step nothing
    size = {"n": 16384, "d": 64, "hidden": 512, "chunk_size": 4096}
    w, t = 16384 * 64 * 512, slice_loop["time"]
    cpu = predict_time(fam, slice_loop, size)
    assert cpu == pytest.approx((t["r"] * w + t["c"] + 3 * t["o"]) / (w + t["fault"]["per_byte"] * 3 * 32 * MiB))
    assert cpu < 0.9 * predict_time(fam, slice_loop, size, device="cuda")
    assert predict_time(fam, slice_loop, size, device="cuda") == pytest.approx(t["r"] + (t["c"] + 3 * t["o"]) / w)


def test_no_mapped_block_at_any_time_point_is_no_term():
    import memlab.advisor.fit as fit

    fam = declaration_of("reversible")
    cls = [{"k": 1, "pieces": [{}], "allocations": [[4, "batch*width", 5, 0]]},
           {"k_min": 4, "pieces": [{}], "allocations": [[4, "batch*width", 5, 1]]}]
    pts = [{"params": {"depth": 8, "batch": 128, "width": 64, "hidden": 128}, "work": 8 * 128 * 64 * 128, "chunks": 1,
            "relative_step_time": 1.3},
           {"params": {"depth": 16, "batch": 256, "width": 128, "hidden": 256}, "work": 16 * 256 * 128 * 256,
            "chunks": 1, "relative_step_time": 1.2}]
    entries = [{"label": "residual", "knobs": [], "classes": cls, "baseline": True,
                "time": time_model(fam, fam.entry("residual"), [dict(p, relative_step_time=1.0) for p in pts])},
               {"label": "checkpoint_block", "knobs": [], "classes": cls, "baseline": False,
                "time": time_model(fam, fam.entry("checkpoint_block"), pts)}]
    assert fit.fault_term(fam, entries) == 0.0
    assert "fault" not in entries[1]["time"] and entries[1]["time"]["points"][0]["mmap_bytes"] == 0


def test_the_family_baseline_is_one_by_definition():
    """Its fitted points are the baseline over itself (timing noise); the prediction ignores them."""
    fam = declaration_of("reversible")
    noisy = time_model(fam, fam.entry("residual"), _points(0.81, 2e7, 0.0, (8388608, 134217728), (1,)))
    size = {"depth": 8, "batch": 64, "width": 64, "hidden": 128}
    assert predict_time(fam, {"knobs": [], "time": noisy}, size) != pytest.approx(1.0)
    assert predict_time(fam, {"knobs": [], "time": noisy, "baseline": True}, size) == 1.0


# -- work components (NOTE [ work components ]) ------------------------------------------------------

#: a transformer baseline's step in ns: fixed, per token (layers), per token * seq (attention), per
#: token * vocab (head), about what a 2-layer width-64 step costs on one CPU thread
BASE_COST = {"1": 2e6, "layers": 9700.0, "attention": 40.0, "head": 8.0}
#: checkpoint_layer: the layers' and the attention's forward once more (4/3 of their cost), the head once
CHECKPOINT = {"layers": 9700.0 * 4 / 3, "attention": 40.0 * 4 / 3, "head": 8.0}


def _component_points(fam, r, c, o, chunks=(1,)):
    from memlab.advisor.model import base_work, work_of

    out = []
    for size in fam.time_sizes:
        for k in chunks:
            w = work_of(fam.work, size)
            base = base_work(BASE_COST, w)
            num = c + (k - 1) * o + sum(r[n] * w[n] for n in w)
            out.append({"params": dict(size), "work": w, "chunks": k, "relative_step_time": num / base,
                        "baseline_step_cpu_s": base / 1e9})
    return out


def test_the_transformer_names_its_work_components_and_enough_time_sizes():
    fam = declaration_of("transformer")
    # layers is a size of the transformer's models (an outer loop): the per-layer parts scale with it,
    # the LM head does not
    assert fam.work == {"layers": "layers*batch*seq", "attention": "layers*batch*seq*seq", "head": "batch*seq*vocab"}
    assert len(fam.time_sizes) >= len(fam.work) + 2 and len({p["layers"] for p in fam.time_sizes}) >= 2
    # the sizes vary the components' ratios: attention over layers is seq, head over layers is vocab
    assert len({p["seq"] for p in fam.time_sizes}) >= 4 and len({p["vocab"] for p in fam.time_sizes}) >= 4


def test_baseline_cost_is_recovered_from_the_baselines_cpu_time():
    from memlab.advisor.fit import baseline_cost

    fam = declaration_of("transformer")
    cost = baseline_cost(fam, _component_points(fam, CHECKPOINT, 2.5e6, 0.0))
    assert set(cost) == set(BASE_COST)
    for key, value in BASE_COST.items():
        assert cost[key] == pytest.approx(value, rel=1e-6), key
    # too few sizes: not determined
    assert baseline_cost(fam, _component_points(fam, CHECKPOINT, 2.5e6, 0.0)[:4]) is None


def test_baseline_cost_never_goes_negative():
    from memlab.advisor.fit import baseline_cost

    fam = declaration_of("transformer")
    pts = _component_points(fam, CHECKPOINT, 2.5e6, 0.0)
    # steps whose least-squares cost per attention unit is negative (timing noise can do that): held at 0
    for p in pts:
        w = p["work"]
        p["baseline_step_cpu_s"] = (2e6 + 9700.0 * w["layers"] + 8.0 * w["head"] - 5.0 * w["attention"]) / 1e9
    cost = baseline_cost(fam, pts)
    assert cost["attention"] == 0.0 and all(v > 0 for k, v in cost.items() if k != "attention"), cost


def test_a_components_model_recovers_what_a_technique_repeats_and_predicts_held_out_settings():
    fam = declaration_of("transformer")
    entry = fam.entry("checkpoint_layer")
    model = time_model(fam, entry, _component_points(fam, CHECKPOINT, 2.5e6, 0.0))
    assert model["kind"] == "components" and model["work"] == fam.work and model["o"] == 0.0
    for n, v in CHECKPOINT.items():
        assert model["r"][n] == pytest.approx(v, rel=1e-6), n
    assert model["c"] == pytest.approx(2.5e6, rel=1e-6) and model["max_fit_rel_error"] < 1e-9
    one = dataclasses.replace(fam, work="batch*seq", chunk_split_work={})  # no components to split
    flat = time_model(one, entry, [dict(p, work=p["params"]["layers"] * p["params"]["batch"] * p["params"]["seq"])
                                   for p in _component_points(fam, CHECKPOINT, 2.5e6, 0.0)])
    errors = []
    for size in ({"seq": 384, "batch": 2, "vocab": 1024, "layers": 2}, {"seq": 128, "batch": 8, "vocab": 4096, "layers": 8},
                 {"seq": 1024, "batch": 1, "vocab": 256, "layers": 3}):
        n_layers = size["layers"]
        w = {"layers": n_layers * size["batch"] * size["seq"], "attention": n_layers * size["batch"] * size["seq"] ** 2,
             "head": size["batch"] * size["seq"] * size["vocab"]}
        truth = (2.5e6 + sum(CHECKPOINT[n] * w[n] for n in w)) / (BASE_COST["1"] + sum(BASE_COST[n] * w[n] for n in w))
        assert predict_time(fam, {"knobs": [], "time": model}, size) == pytest.approx(truth, rel=1e-9)
        errors.append(abs(predict_time(one, {"knobs": [], "time": flat}, size) - truth) / truth)
    # one monomial (tokens) cannot tell a long sequence from a large vocabulary
    assert max(errors) > 0.05, errors


def test_a_chunked_components_model_recovers_its_per_chunk_cost():
    fam = declaration_of("transformer")
    entry = fam.entry("chunked_lm_loss")
    r = {"layers": 9700.0, "attention": 40.0, "head": 8.5}
    model = time_model(fam, entry, _component_points(fam, r, 2e6, 1e5, chunks=(1, 4, 16)))
    assert model["o"] == pytest.approx(1e5, rel=1e-6) and model["c"] == pytest.approx(2e6, rel=1e-6)
    size = {"seq": 512, "batch": 2, "vocab": 2048, "chunk": 64, "layers": 4}   # 16 chunks of the 1,024 tokens
    w = {"layers": 4 * 1024, "attention": 4 * 1024 * 512, "head": 1024 * 2048}
    truth = (2e6 + 15 * 1e5 + sum(r[n] * w[n] for n in w)) / (BASE_COST["1"] + sum(BASE_COST[n] * w[n] for n in w))
    assert predict_time(fam, {"knobs": ["chunk"], "time": model}, size) == pytest.approx(truth, rel=1e-9)


def test_a_components_model_recovers_a_per_chunk_cost_that_grows_with_the_sizes():
    """``chunk_cost_work`` in a family of work components: chunked_lm_loss with a further chunk costing
    ``o + q * batch * seq`` (NOTE [ per-chunk costs ]), recovered and predicted."""
    fam = dataclasses.replace(declaration_of("transformer"), chunk_cost_work={"chunk": "batch*seq"})
    entry = fam.entry("chunked_lm_loss")
    r = {"layers": 9700.0, "attention": 40.0, "head": 8.5}
    pts = _component_points(fam, r, 2e6, 1e5, chunks=(1, 4, 16))
    for p in pts:
        p["relative_step_time"] += (p["chunks"] - 1) * 30.0 * p["params"]["batch"] * p["params"]["seq"] \
            / (p["baseline_step_cpu_s"] * 1e9)
    model = time_model(fam, entry, pts)
    assert model["o_work"] == "batch*seq" and model["o_work_cost"] == pytest.approx(30.0, rel=1e-6)
    assert model["o"] == pytest.approx(1e5, rel=1e-6)
    size = {"seq": 512, "batch": 2, "vocab": 2048, "chunk": 64, "layers": 4}   # 16 chunks
    w = {"layers": 4 * 1024, "attention": 4 * 1024 * 512, "head": 1024 * 2048}
    truth = (2e6 + 15 * (1e5 + 30.0 * 1024) + sum(r[n] * w[n] for n in w)) / (
        BASE_COST["1"] + sum(BASE_COST[n] * w[n] for n in w))
    assert predict_time(fam, {"knobs": ["chunk"], "time": model}, size) == pytest.approx(truth, rel=1e-9)


def test_the_family_cost_is_pooled_over_entries_and_each_entry_refitted():
    from memlab.advisor.fit import pooled_baseline_cost

    fam = declaration_of("transformer")
    # each entry alone sees the baseline's time at half the sizes: pooled, all of them
    eager = _component_points(fam, {k: v for k, v in BASE_COST.items() if k != "1"}, 2e6, 0.0)
    ckpt = _component_points(fam, CHECKPOINT, 2.5e6, 0.0)
    for p in eager[1::2] + ckpt[::2]:
        p["baseline_step_cpu_s"] = None
    entries = [{"label": "eager_attention", "knobs": [], "time": {"points": eager}},
               {"label": "checkpoint_layer", "knobs": [], "time": {"points": ckpt}}]
    cost = pooled_baseline_cost(fam, entries)
    assert cost["layers"] == pytest.approx(9700.0, rel=1e-6)
    assert entries[1]["time"]["baseline_cost"] == cost
    assert entries[1]["time"]["r"]["attention"] == pytest.approx(40.0 * 4 / 3, rel=1e-6)
    # a one-monomial family is left as it is
    chunking = declaration_of("chunking")
    assert pooled_baseline_cost(chunking, [{"label": "unchunked", "knobs": [], "time": {"points": []}}]) is None


# -- NOTE [ per-chunk costs ]: a block loop in every layer, work the blocks split ------------------------


def _attention_points(fam, r, split, c, o, chunks=(1, 4, 16)):
    """chunked_attention's steps over the baseline's (BASE_COST): ``sum_j r_j W_j + sum_j split_j W_j /
    k + c + (k - 1) * layers * o`` nanoseconds, ``k`` query blocks of ``seq / k`` rows in every layer."""
    from memlab.advisor.model import base_work, work_of

    out = []
    for size in fam.time_sizes:
        for k in chunks:
            w = work_of(fam.work, size)
            num = (c + (k - 1) * size["layers"] * o + sum(r[n] * w[n] for n in w)
                   + sum(split[n] * w[n] / k for n in split))
            base = base_work(BASE_COST, w)
            out.append({"params": {**size, "block": size["seq"] // k}, "work": w, "chunks": k,
                        "relative_step_time": num / base, "baseline_step_cpu_s": base / 1e9})
    return out


def test_chunk_bodies_repeat_over_the_outer_loop_only_where_declared():
    from memlab.advisor.model import chunk_bodies

    assert chunk_bodies({}, {"layers": 12}, 4096) == 4095
    assert chunk_bodies({"o_scale": "layers"}, {"layers": 12}, 4096) == 4095 * 12
    assert chunk_bodies({"o_scale": "layers"}, {"layers": 12}, 1) == 0
    fam = declaration_of("transformer")
    # the query blocks run inside every layer; the loss chunks once per step, each holding 1/k of the logits
    assert fam.chunk_cost_scale == {"block": "layers"}
    assert fam.chunk_split_work == {"block": ("attention",), "chunk": ("head",)}


def test_a_block_loop_in_every_layer_costs_per_block_per_layer_and_splits_the_attention():
    """The fit recovers a per-block cost that repeats in every layer and the attention's split part,
    and predicts a 12-layer step of 4,096 blocks (a Python loop of 49,140 bodies) exactly, where the
    form without them (``(k - 1) * o``, the attention's cost whole) is far off."""
    fam = declaration_of("transformer")
    entry = fam.entry("chunked_attention")
    r = {"layers": 11000.0, "attention": 20.0, "head": 8.0}
    split = {"attention": 20.0}  # r_j = s_j: the causal blocks do W (k + 1) / (2k) of the attention
    model = time_model(fam, entry, _attention_points(fam, r, split, 1.6e6, 1e5))
    assert model["o_scale"] == "layers" and model["max_fit_rel_error"] < 1e-9
    assert model["o"] == pytest.approx(1e5, rel=1e-6) and model["c"] == pytest.approx(1.6e6, rel=1e-6)
    assert model["r_per_chunk"]["attention"] == pytest.approx(20.0, rel=1e-6)
    row = {"knobs": ["block"], "time": model}

    def truth(size, k):
        w = {"layers": size["layers"] * size["batch"] * size["seq"],
             "attention": size["layers"] * size["batch"] * size["seq"] ** 2, "head": size["batch"] * size["seq"] * size["vocab"]}
        num = 1.6e6 + (k - 1) * size["layers"] * 1e5 + sum(r[n] * w[n] for n in w) + split["attention"] * w["attention"] / k
        return num / (BASE_COST["1"] + sum(BASE_COST[n] * w[n] for n in w))

    tiny = {"seq": 4096, "batch": 1, "vocab": 1024, "layers": 12, "block": 1}
    assert predict_time(fam, row, tiny) == pytest.approx(truth(tiny, 4096), rel=1e-9)
    # more blocks in more layers: the per-block cost grows with blocks x layers
    one_layer = {**tiny, "layers": 1}
    assert predict_time(fam, row, tiny) - predict_time(fam, row, {**tiny, "block": 4096}) == pytest.approx(
        truth(tiny, 4096) - truth(tiny, 1), rel=1e-9)
    assert predict_time(fam, row, one_layer) == pytest.approx(truth(one_layer, 4096), rel=1e-9)
    # the old form, fitted to the same steps, prices the 12 layers' 49,140 block bodies as 4,095
    old_fam = dataclasses.replace(fam, chunk_cost_scale={}, chunk_split_work={})
    old = time_model(old_fam, entry, _attention_points(fam, r, split, 1.6e6, 1e5))
    assert "o_scale" not in old and "r_per_chunk" not in old and old["max_fit_rel_error"] > 0.05
    assert predict_time(old_fam, {"knobs": ["block"], "time": old}, tiny) < 0.8 * truth(tiny, 4096)


# -- a per-chunk cost that grows with the sizes (NOTE [ per-chunk costs ]: chunk_cost_work) ------------

def _sized_points(r, c, o, q, sizes, chunks):
    """Synthetic chunking time points: relative = r + (c + (k - 1) * (o + q * n * d)) / (n * d * hidden)."""
    out = []
    for n, d, h in sizes:
        w = n * d * h
        for k in chunks:
            out.append({"params": {"n": n, "d": d, "hidden": h, "chunk_size": -(-n // k)}, "work": w, "chunks": k,
                        "relative_step_time": r + (c + (k - 1) * (o + q * n * d)) / w})
    return out


SIZES = ((2048, 64, 256), (8192, 128, 512), (16384, 256, 512), (16384, 64, 1024))


def test_chunking_declares_a_per_chunk_cost_in_n_times_d():
    assert declaration_of("chunking").chunk_cost_work == {"chunk_size": "n*d"}


def test_a_per_chunk_cost_in_n_d_is_recovered_and_predicted_past_the_timed_chunks():
    fam = declaration_of("chunking")
    model = time_model(fam, fam.entry("slice_loop"), _sized_points(1.02, 1e6, 2e5, 4.5, SIZES, (1, 4, 16)))
    assert model["o_work"] == "n*d" and model["o_work_cost"] == pytest.approx(4.5)
    assert model["o"] == pytest.approx(2e5) and model["max_fit_rel_error"] < 1e-9
    entry = {"knobs": ["chunk_size"], "time": model}
    n, d, h = 10000, 256, 1024
    want = 1.02 + (1e6 + 99 * (2e5 + 4.5 * n * d)) / (n * d * h)  # 100 chunks: 99 further, each o + q n d
    assert predict_time(fam, entry, {"n": n, "d": d, "hidden": h, "chunk_size": 100}) == pytest.approx(want)
    # four coefficients: the band needs a fifth point to speak
    from memlab.advisor.model import time_band
    assert time_band({"time": {**model, "points": model["points"][:4]}})["fraction"] is None


def test_a_per_chunk_cost_that_would_shrink_with_the_sizes_is_left_out():
    """A negative ``o_work_cost`` (slice_accumulate, which adds each chunk's gradient into one buffer,
    fits one from noise) is no cost: the model is fitted again without the term."""
    fam = declaration_of("chunking")
    model = time_model(fam, fam.entry("slice_accumulate[backward=manual]"),
                       _sized_points(1.0, 1e6, 3e5, -0.5, SIZES, (1, 4, 16)))
    assert "o_work" not in model and "o_work_cost" not in model
    plain = time_model(_plain_chunking(), fam.entry("slice_accumulate[backward=manual]"),
                       _sized_points(1.0, 1e6, 3e5, -0.5, SIZES, (1, 4, 16)))
    assert {k: model[k] for k in ("r", "c", "o")} == {k: plain[k] for k in ("r", "c", "o")}


def test_chunk_cost_work_must_map_a_knob_to_a_product_of_sizes():
    base = declaration_of("chunking")
    with pytest.raises(ValueError, match=r"chunk_cost_work\['rows'\]='n\*d' must map a knob of the loop \(chunk_size\)"):
        dataclasses.replace(base, chunk_cost_work={"rows": "n*d"})
    with pytest.raises(ValueError, match=r"chunk_cost_work\['chunk_size'\]='n\*q' must map a knob"):
        dataclasses.replace(base, chunk_cost_work={"chunk_size": "n*q"})
    from memlab.core.declaration import Declaration
    assert Declaration.from_json(base.to_json()).chunk_cost_work == {"chunk_size": "n*d"}


def test_the_committed_time_models_are_what_a_refit_of_their_points_gives(tmp_path):
    """``python -m memlab.advisor.refit_time`` on a copy of data/models changes nothing: every committed
    time model is the fit's code applied to its stored points under the registered declaration."""
    import shutil
    from pathlib import Path

    from memlab.advisor.refit_time import refit_file

    models = Path(__file__).resolve().parents[1] / "data" / "models"
    for name in ("cpu-float32-sgd.json", "cpu-float32-adam.json"):
        shutil.copy(models / name, tmp_path / name)
        assert refit_file(tmp_path / name, say=lambda s: None) == {}
        assert (tmp_path / name).read_text() == (models / name).read_text(), name


def test_a_refit_leaves_a_family_alone_when_the_declared_time_points_differ(tmp_path):
    import json
    import shutil
    from pathlib import Path

    from memlab.advisor.refit_time import refit_file

    models = Path(__file__).resolve().parents[1] / "data" / "models"
    shutil.copy(models / "cpu-float32-sgd.json", tmp_path / "m.json")
    other = dataclasses.replace(declaration_of("chunking"), time_chunks=(1, 4, 16, 64))
    before = (tmp_path / "m.json").read_text()
    left = refit_file(tmp_path / "m.json", ("chunking",), declaration_for=lambda name: other, say=lambda s: None)
    assert "time_chunks [1, 4, 16] in the file, [1, 4, 16, 64] declared" in left["chunking"]
    assert (tmp_path / "m.json").read_text() == before
    with pytest.raises(ValueError, match="no family 'nope'"):
        refit_file(tmp_path / "m.json", ("nope",), say=lambda s: None)
    assert json.loads(before)["families"]["chunking"]["time_refitted"].startswith("time models refitted")
