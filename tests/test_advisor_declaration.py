"""Advisor declarations (``memlab.AdvisorModel``): checked when declared, written into the model files and
read back from them, the loops' rules, the migration of files fitted before declarations, the one-line
answers for families without a model, a small fit of a declared family (tensor_train), and the resnet and
tensor_train models checked at four times their fitted sizes."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import memlab
from memlab.core.declaration import BASE_K, Chunks, ChunksOf, Count, Declaration, Entry, Loop, NoLoop
from memlab.advisor.fit import declaration_of, fit_family
from memlab.advisor.migrate import migrate_dir, mismatch
from memlab.advisor.model import MODELS_DIR, load_models, predict
from memlab.core.host import KERNEL_INDEPENDENT_CATEGORIES, kernel_host
from memlab.registry import builtin_families, list_advisors
from memlab.families.chunking.workload import ChainedMatmulModel
from test_advisor import EXACT_AT_ONE_THREAD_ONLY
from process_checks import HANG_GUARD_S

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

ROOT = Path(__file__).resolve().parents[1]


# -- the registered declarations ---------------------------------------------------------------------

def test_builtin_families_declare_their_models_beside_their_workloads():
    assert list_advisors() == [name for name, _ in builtin_families()]  # every family folder declares one
    for family in list_advisors():
        d = declaration_of(family)
        assert memlab.get_workload(d.workload).family == family
        assert d.declared_by.startswith(memlab.get_workload(d.workload).__module__)
        assert memlab.get_technique(d.entries[0].technique).baseline, "the baseline first"
        for e in d.entries:
            assert memlab.get_technique(e.technique).family() == family, e.label


@pytest.mark.parametrize("family", [name for name, _ in builtin_families()])
def test_a_declaration_round_trips_through_json(family):
    d = declaration_of(family)
    assert Declaration.from_json(json.loads(json.dumps(d.to_json()))) == d


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_committed_models_carry_the_registered_declarations(optimizer):
    for name, fam in load_models(optimizer)["families"].items():
        # declared_by names the class where it was when the model was fitted (a family folder may move)
        committed = {k: v for k, v in fam["declaration"].items() if k != "declared_by"}
        assert committed == {k: v for k, v in declaration_of(name).to_json().items() if k != "declared_by"}, name
        assert fam["declaration"]["declared_by"].rsplit(".", 1)[1] == declaration_of(name).declared_by.rsplit(".", 1)[1]
        assert mismatch(declaration_of(name), fam) is None


# -- bad declarations: one error naming the field ------------------------------------------------------

@pytest.mark.parametrize("attrs, match", [
    ({"sizes": ("n", "zz")}, r"\['zz'\] are not parameters of workload 'chained_matmul'; its parameters: n, d"),
    ({"loop": Count("n")}, r"entry 'slice_loop' has knobs \['chunk_size'\]; the 'count' loop supports none"),
    ({"loop": Chunks("rows", "chunk_size")}, r"loop Chunks\(rows='rows'.*reads \['rows'\], which is not in sizes"),
    ({"work": "n*q"}, r"work='n\*q' must be a product of sizes like 'n\*d\*hidden'"),
    ({"time_sizes": ({"n": 4, "d": 2, "hidden": 2},)}, r"time_sizes has one size"),
    ({"time_sizes": ({"n": 4, "d": 2}, {"n": 8, "d": 2})}, r"time size \{'n': 4, 'd': 2\} must give every size"),
    ({"held_out": {"d": (5, 2)}}, r"held_out\['d'\]=\(5, 2\) must be a \(low, high\) range"),
    ({"entries": ()}, r"entries is empty"),
    ({"entries": (Entry("unchunked"), Entry("unchunked"))}, r"entries repeat a label"),
    ({"max_degree": 9}, r"max_degree=9 is out of range: expected 1 to 6"),
    # work components (NOTE [ work components ]): one or more, each its own monomial, enough time sizes
    ({"work": {}}, r"work=\{\} must name one or more components"),
    ({"work": {"a": "n*d", "b": "n*q"}}, r"must name one or more components, each a product of sizes"),
    ({"work": {"a": "n*d", "b": "n*d"}}, r"repeats a monomial"),
    ({"work": {"a": "n*d", "b": "n*hidden", "c": "d*hidden"}},
     r"4 time_sizes for 3 work components; give at least 5"),
    # NOTE [ per-chunk costs ] and time-only sizes
    ({"chunk_cost_scale": {"blk": "n"}}, r"chunk_cost_scale\['blk'\]='n' must map a knob of the loop \(chunk_size\) "
                                         r"to a product of sizes"),
    ({"chunk_cost_scale": {"chunk_size": "n*q"}}, r"chunk_cost_scale\['chunk_size'\]='n\*q' must map"),
    ({"chunk_split_work": {"chunk_size": ("n",)}}, r"chunk_split_work\['chunk_size'\]=\('n',\) must map a knob of the "
                                                   r"loop \(chunk_size\) to one or more work components \(none: work "
                                                   r"is one monomial\)"),
    ({"time_only_sizes": ({"n": 4},)}, r"time size \{'n': 4\} must give every size"),
    ({"time_sizes": (), "time_only_sizes": ({"n": 4, "d": 2, "hidden": 2},)}, r"time_only_sizes=.* without time_sizes"),
])
def test_a_bad_declaration_names_the_field_and_what_is_valid(attrs, match):
    bad = type("Bad", (ChainedMatmulModel,), attrs)  # no family= keyword: not registered
    with pytest.raises(ValueError, match=match):
        bad.declaration()


def test_a_second_declaration_of_a_family_is_refused_and_names_the_first():
    with pytest.raises(ValueError, match=r"advisor model of family name 'chunking' is already registered by "
                                         r"memlab.families.chunking.workload.ChainedMatmulModel; a family declares one"):
        type("Again", (ChainedMatmulModel,), {}, family="chunking")
    with pytest.raises(ValueError, match=r"family 'not a name' must be an identifier"):
        type("Odd", (ChainedMatmulModel,), {}, family="not a name")


# -- loops -------------------------------------------------------------------------------------------

def test_a_count_loop_with_a_stride_reads_and_refuses_the_counted_size():
    loop = Count("depth", per=12, offset=2)
    assert loop.loop_of({"depth": 26, "batch": 3}, ("depth", "batch"), False) == (2, {"batch": 3})
    assert loop.to_params(("depth", "batch"), 3, {"batch": 5}, False) == {"depth": 38, "batch": 5}
    with pytest.raises(ValueError, match=r"depth=27 is not 12k\+2 \(k >= 1\); nearest valid: 26, 38"):
        loop.check({"depth": 27})
    assert loop.page_rule(("depth", "batch")) == {"kind": "count", "count": "depth", "sizes": ["batch"],
                                                  "order": ["depth", "batch"], "per": 12, "offset": 2}
    # a plain count states no stride, so the Choose page of the committed families is byte-for-byte the same
    assert "per" not in Count("depth").page_rule(("depth", "batch"))


def test_chunks_and_no_loop():
    chunks = Chunks("n", "chunk_size")
    assert chunks.loop_of({"n": 10, "d": 2, "chunk_size": 4}, ("n", "d"), True) == (
        3, {"n": 10, "d": 2, "chunk": 4, "last": 2})
    assert chunks.loop_of({"n": 10, "d": 2, "chunk_size": 4}, ("n", "d"), False)[0] == 1
    assert chunks.knob_candidates({"n": 1000}, 1, 10_000_000)[0] == 1
    assert NoLoop().loop_of({"a": 3, "b": 4}, ("a", "b"), False) == (1, {"a": 3, "b": 4})
    assert NoLoop().knob_candidates({"a": 3}, 1, 9) == [] and not NoLoop().looped(True)
    with pytest.raises(ValueError, match=r"loop kind 'spiral' is not known; known: chunks, chunks_of, count, none, "
                                         r"product_chunks"):
        Loop.from_json({"kind": "spiral"})


def test_chunks_of_gives_each_knob_its_own_rows():
    """The transformer's two knobs: ``block`` splits seq, ``chunk`` the batch * seq tokens."""
    loop, sizes = ChunksOf({"block": "seq", "chunk": "batch*seq"}), ("seq", "batch", "vocab")
    p = {"seq": 10, "batch": 3, "vocab": 7}
    assert loop.knobs() == ("block", "chunk") and loop.looped(True) and not loop.looped(False)
    assert loop.loop_of({**p, "block": 4}, sizes, True) == (3, {**p, "chunk": 4, "last": 2})
    assert loop.loop_of({**p, "chunk": 8}, sizes, True) == (4, {**p, "chunk": 8, "last": 6})  # 30 tokens: 8 8 8 6
    assert loop.loop_of(p, sizes, False) == (1, p)
    with pytest.raises(ValueError, match=r"a chunked configuration gives one of the knobs block, chunk"):
        loop.loop_of(p, sizes, True)
    assert loop.for_knobs(()) == NoLoop() and loop.for_knobs(("block",)) == Chunks("seq", "block")
    tokens = loop.for_knobs(("chunk",))
    assert tokens.kind == "product_chunks" and tokens.loop_sizes() == ()
    assert tokens.knob_for_count({"seq": 10, "batch": 3}, 4) == 8
    assert tokens.knob_candidates({"seq": 10, "batch": 3}, 1, 100)[-1] == 30
    for lp in (loop, tokens):
        assert Loop.from_json(json.loads(json.dumps(lp.to_json()))) == lp
    for k in range(2, BASE_K + 4):  # a traced point of class k has exactly k chunks of the tokens
        point = tokens.trace_point(sizes, k, True, (11, 7, 5, 13))
        assert tokens.loop_of(tokens.to_params(sizes, k, point, True), sizes, True) == (k, point)
    assert tokens.trace_point(sizes, 6, True, (5, 5, 2, 3)) is None  # 25 tokens: no chunk gives 6 chunks


def test_the_transformer_fits_each_entry_with_its_knobs_loop():
    d = declaration_of("transformer")
    # layers is a size, the outer loop around each entry's own (NOTE [ outer loops ])
    assert d.sizes == ("seq", "batch", "vocab", "layers") and "layers" not in d.workload_fixed
    assert d.loop.kind == "repeated" and d.loop.outer_size() == "layers"
    assert {e.label: e.knobs for e in d.entries}["chunked_attention"] == ("block",)  # NOTE [ growing loop bodies ]
    for entry in d.entries:
        one = d.for_entry(entry)
        assert one.loop == d.loop.for_knobs(entry.knobs) and one.entries == (entry,)
        assert Loop.from_json(json.loads(json.dumps(one.loop.to_json()))) == one.loop
        chunked = bool(entry.knobs)
        for k in range(1, (BASE_K + 4) if chunked else 2):
            for point in one.trace_points(k, chunked, lambda pts, v: True):
                k_got, values = one.loop_of({**one.to_params(k, point, chunked), "layers": 7}, chunked)
                assert k_got == k and values["layers"] == 7, (entry.label, k, point)
    with pytest.raises(ValueError, match=r"has knobs \['rows'\]; the 'repeated' loop supports \['block', 'chunk'\]"):
        dataclasses.replace(d, entries=(*d.entries, Entry("eager_attention", {"hidden": 32}, knobs=("rows",))))


def test_predict_reads_the_declaration_from_the_model_file():
    models = load_models("sgd")
    fam = models["families"]["chunking"]
    entry = next(e for e in fam["entries"] if e["label"] == "slice_loop")
    p = {"n": 1000, "d": 64, "hidden": 256, "chunk_size": 100}
    from memlab.advisor import predict

    assert predict(fam, entry, p) == predict(declaration_of("chunking"), entry, p)
    bare = {k: v for k, v in fam.items() if k != "declaration"}
    with pytest.raises(ValueError, match=r"without an advisor declaration; add it with python -m memlab.advisor.migrate"):
        predict(bare, entry, p)


# -- the migration of files fitted before declarations -------------------------------------------------

def _undeclared_copy(tmp_path: Path) -> Path:
    out = tmp_path / "models"
    out.mkdir()
    for p in sorted(MODELS_DIR.glob("cpu-float32-*.json")):
        data = json.loads(p.read_text())
        for fam in data["families"].values():
            fam.pop("declaration")
        (out / p.name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return out


def test_migration_adds_only_the_declarations_and_is_idempotent(tmp_path):
    old = _undeclared_copy(tmp_path)
    with pytest.raises(ValueError, match="without an advisor declaration"):
        load_models("sgd", old)
    fitted = sorted(load_models("sgd")["families"])  # every family of the committed files
    assert len(fitted) == 5
    assert migrate_dir(old) == {"cpu-float32-adam.json": fitted, "cpu-float32-sgd.json": fitted}
    for p in sorted(old.glob("*.json")):
        committed, text = (MODELS_DIR / p.name).read_text(), p.read_text()
        for name, fam in json.loads(committed)["families"].items():  # declared_by: the class where it was at the fit
            text = text.replace(json.dumps(declaration_of(name).declared_by), json.dumps(fam["declaration"]["declared_by"]))
        assert text == committed, p.name
    assert migrate_dir(old) == {"cpu-float32-adam.json": [], "cpu-float32-sgd.json": []}


def test_migration_refuses_a_declaration_that_does_not_describe_the_fit(tmp_path):
    old = _undeclared_copy(tmp_path)
    path = old / "cpu-float32-sgd.json"
    data = json.loads(path.read_text())
    data["families"]["reversible"]["entries"][1]["label"] = "checkpoint_every_other_block"
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"family 'reversible' was fitted with another declaration \(entries "):
        migrate_dir(old)
    assert path.read_bytes() == before


# -- families without a model: one line, exit 2 ---------------------------------------------------------

UNDECLARED = '''
import memlab
from memlab.families.chunking.workload import ChainedMatmul


class Copy(memlab.Workload, name="copy_of_matmul", family="undeclared_family"):
    params = ChainedMatmul.params


class CopyTechnique(memlab.Technique, name="copy_technique"):
    workload = Copy
'''


@pytest.mark.parametrize("extra", [["--budget", "1GiB"], ["--fit", "--models", "{tmp}/models"]], ids=["advise", "fit"])
def test_an_undeclared_family_is_one_line_exit_2(tmp_path, extra):
    """Advice from the committed models, and a fit into a fresh folder: refused before anything runs."""
    plugin = tmp_path / "undeclared.py"
    plugin.write_text(UNDECLARED)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    extra = [x.format(tmp=tmp_path) for x in extra]
    out = subprocess.run([sys.executable, "-m", "memlab", "advise", "--family", "undeclared_family", *extra,
                          "--plugin", str(plugin)],
                         capture_output=True, text=True, timeout=HANG_GUARD_S, env=env, cwd=ROOT)
    lines = [line for line in out.stderr.splitlines() if line.startswith("memlab")]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "family 'undeclared_family' declares no advisor model" in lines[0]
    assert "class M(memlab.AdvisorModel, family='undeclared_family')" in lines[0]
    assert not (tmp_path / "models").exists()


# -- a newly declared family fits exactly on a tiny grid ---------------------------------------------------

@pytest.mark.slow  # 6 min at load ~24 on the shared 2-core machine (30 s of CPU time): `make test-slow`
def test_tensor_train_fits_exactly_on_a_tiny_grid():
    """Two of the tensor_train entries (the baseline and the chunked one, whose knob splits the batch)
    at tiny time sizes, measured in this process: every traced and measured held-out point exact.
    (The full fit, ``memlab advise --fit --family tensor_train``, took 139 s for SGD, 288 s for SGD and
    Adam, at load 20-29.)"""
    import torch

    full = declaration_of("tensor_train")
    tiny = dataclasses.replace(full, entries=(full.entries[0], full.entry("tt_chunked")),
                               time_sizes=({"batch": 20}, {"batch": 30}, {"batch": 40}), time_chunks=(1, 4),
                               time_only_sizes=())  # tiny: not the full model's 3,072 and 6,144 rows
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fam = fit_family(tiny, "sgd", say=lambda s: None, measure_fn=functools.partial(memlab.measure, isolate=False))
    finally:
        torch.set_num_threads(threads)
    assert fam["declaration"] == tiny.to_json() and set(fam["sizes"]) == {"batch"}
    assert set(fam["knobs"]) == {"chunk_size"} and "chunk" in fam["variables"]
    for e in fam["entries"]:
        assert e["held_out_traced"]["max_abs_error_bytes"] == 0 and e["held_out_traced"]["categories_exact"]
        assert e["max_abs_error_bytes"] == 0 and e["recommendable"], e["label"]
    chunked = fam["entries"][1]
    assert any("k_min" in c for c in chunked["classes"])  # the loop class of NOTE [ advisor models ]


# -- resnet and tensor_train: predicted at four times their fitted sizes -------------------------------------


def _four_times_fitted(decl, entry: dict) -> dict[str, int]:
    """Every size and knob at four times the largest traced value (a counted size snapped to its
    ``per * k + offset`` form, rounding down)."""
    point = {s: 4 * hi for s, (_lo, hi) in entry["fitted_range"].items()}
    loop = decl.loop
    if loop.kind == "count":
        k = (point[loop.size] - loop.offset) // loop.per
        point[loop.size] = loop.per * k + loop.offset
    return point


@pytest.mark.parametrize("family,label", [("tensor_train", "dense"), ("tensor_train", "tt_factorized"),
                                          ("tensor_train", "tt_reconstructed"), ("tensor_train", "tt_chunked"),
                                          ("resnet", "resnet"), ("resnet", "resnet_checkpoint_block")])
def test_resnet_and_tensor_train_predict_four_times_their_fitted_sizes(family, label):
    """The committed SGD model, as it holds on this host's CPU kernels (resnet's convolutions: its variant
    for them, NOTE [ host-dependent bytes ] in :mod:`memlab.core.host`), at every size and knob 4x the largest
    traced, measured in this process: exact at one thread, and at the default threads exact or
    (``EXACT_AT_ONE_THREAD_ONLY``) within 2%.  A model fitted on other kernels with no variant for this
    host's is compared on the categories every host allocates alike."""
    import torch

    models = load_models("sgd", host=kernel_host())
    fam = models["families"][family]
    entry = next(e for e in fam["entries"] if e["label"] == label)
    decl = declaration_of(family)
    point = _four_times_fitted(decl.for_entry(decl.entry(label)), entry)
    assert all(point[s] >= 3 * hi for s, (_lo, hi) in entry["fitted_range"].items()), point
    pred = predict(fam, entry, point)
    params = {**fam["workload_fixed"], **entry["fixed"], **point}
    for threads in (1, torch.get_num_threads()):
        m = memlab.measure(entry["technique"], isolate=False, iterations=2, repeats=1, check=False, time_budget=0,
                           threads=threads, **params)
        assert m.status == "ok", m.error
        if fam.get("other_kernels"):
            assert {c: pred["peak_by_category_bytes"][c] for c in KERNEL_INDEPENDENT_CATEGORIES} == \
                {c: m.peak_by_category_bytes.get(c, 0) for c in KERNEL_INDEPENDENT_CATEGORIES}, threads
        elif threads == 1 or (family, label) not in EXACT_AT_ONE_THREAD_ONLY:
            assert pred["total_peak_bytes"] == m.total_peak_bytes, (threads, point)
            assert pred["peak_by_category_bytes"] == {c: m.peak_by_category_bytes.get(c, 0)
                                                      for c in pred["peak_by_category_bytes"]}, threads
        else:
            assert abs(pred["total_peak_bytes"] - m.total_peak_bytes) <= 0.02 * m.total_peak_bytes, (threads, point)
