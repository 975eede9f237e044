"""``memlab advise --model``: a model file's advisor declaration, the size search, the real-model
examples' blocks, and one-line errors.  No fit runs here (it measures: minutes on 2 cores); the
cheap parts are tested directly."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.advisor import AdviceError
from memlab.own_model.advice import TRACE_VALUES, cache_dir_for, largest_fitting, model_declaration
from memlab.own_model import load_model
from process_checks import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

TINY = '''
import torch
from torch import nn

def build():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))

def batch(size, seq=3):
    return torch.randn(size, seq, 4)
'''

OWN = TINY + '''
import memlab
from memlab.advisor import Entry

class Advice(memlab.AdvisorModel):
    entries = (Entry("plain"),)
    held_out = {"batch": (1, 3)}
'''


@pytest.fixture()
def model_file(tmp_path):
    def write(name: str, text: str) -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p
    return write


def test_default_declaration_varies_batch_and_models_the_cpu_techniques(model_file):
    path = model_file("adv_tiny.py", TINY)
    decl = model_declaration(path)
    assert decl.sizes == ("batch",) and decl.loop.kind == "none" and decl.trace_values == TRACE_VALUES
    kinds = {e.technique.split("__")[1] for e in decl.entries}
    # nn.Sequential of mixed children: no repeated blocks, so no checkpointing kind; offload is CUDA only
    assert kinds == {"plain", "autocast_bf16"}
    assert decl.entries[0].technique == "adv_tiny__plain"
    both = model_declaration(path, ("batch", "seq"))
    assert both.sizes == ("batch", "seq") and both.work == "batch*seq"
    assert all(p["seq"] == 3 for p in both.time_sizes)


def test_a_file_overrides_the_declaration_with_its_own_advisor_model(model_file):
    decl = model_declaration(model_file("adv_own.py", OWN))
    assert [e.technique for e in decl.entries] == ["adv_own__plain"]
    assert decl.held_out == {"batch": (1, 3)} and decl.declared_by.endswith(".Advice")


EVERY_FIELD = TINY + '''
import memlab
from memlab.advisor import Chunks, Entry

class Advice(memlab.AdvisorModel):
    sizes = ("batch", "seq")
    entries = (Entry("plain"),)
    loop = Chunks(rows="seq", knob="chunk_size")
    workload_fixed = {"blocks": "0"}
    held_out = {"batch": [1, 4], "seq": (2, 6)}
    time_sizes = [{"batch": 2, "seq": 3}, {"batch": 4, "seq": 3}, {"batch": 2, "seq": 6}, {"batch": 4, "seq": 6}]
    work = {"layers": "batch*seq", "head": "batch"}
    time_chunks = [1, 4]
    max_degree = 2
    max_quantum = 4096
    trace_values = [2, 3, 5, 7, 11]
    time_only_sizes = [{"batch": 9, "seq": 7}]
    chunk_cost_scale = {"chunk_size": "batch"}
    chunk_split_work = {"chunk_size": ["layers"]}
    chunk_cost_work = {"chunk_size": "batch"}
'''


def test_a_file_sets_every_declaration_field_and_each_is_honoured(model_file):
    """Every :class:`Declaration` field a model file's ``AdvisorModel`` sets reaches the declaration,
    lists read as tuples and mappings as dicts (``time_only_sizes``, ``chunk_cost_scale`` and
    ``chunk_split_work`` were once dropped without a word; ``chunk_cost_work`` is read the same way).  The file sets every field but the three
    ``model_declaration`` derives, so a field added to ``Declaration`` fails here until it is added above."""
    import dataclasses

    from memlab.core.declaration import Declaration

    decl = model_declaration(model_file("adv_every.py", EVERY_FIELD))
    want = dict(sizes=("batch", "seq"), entries=("adv_every__plain",), loop=("chunks", "seq", "chunk_size"),
                workload_fixed={"blocks": "0"}, held_out={"batch": (1, 4), "seq": (2, 6)},
                time_sizes=({"batch": 2, "seq": 3}, {"batch": 4, "seq": 3}, {"batch": 2, "seq": 6},
                            {"batch": 4, "seq": 6}),
                work={"layers": "batch*seq", "head": "batch"}, time_chunks=(1, 4), max_degree=2, max_quantum=4096,
                trace_values=(2, 3, 5, 7, 11), time_only_sizes=({"batch": 9, "seq": 7},),
                chunk_cost_scale={"chunk_size": "batch"}, chunk_split_work={"chunk_size": ("layers",)},
                chunk_cost_work={"chunk_size": "batch"})
    assert set(want) == {f.name for f in dataclasses.fields(Declaration)} - {"name", "workload", "declared_by"}
    got = {f: getattr(decl, f) for f in want}
    got["entries"] = tuple(e.technique for e in decl.entries)
    got["loop"] = (decl.loop.kind, decl.loop.rows, decl.loop.knob)
    assert got == want
    assert all(type(got[f]) is type(want[f]) for f in want if f not in ("entries", "loop"))
    assert Declaration.from_json(decl.to_json()) == decl


@pytest.mark.parametrize("name", ["workload", "family"])
def test_a_file_setting_what_it_may_not_is_one_error_naming_it(model_file, name):
    path = model_file(f"adv_bad_{name}.py", OWN + f"    {name} = 'model_x'\n")
    with pytest.raises(AdviceError, match=rf"adv_bad_{name}.py: Advice sets {name}, which a model file's "
                                          r"AdvisorModel may not set .*may set .*chunk_split_work"):
        model_declaration(path)


def test_declaration_round_trips_with_trace_values_and_a_large_quantum(model_file):
    from memlab.core.declaration import Declaration

    decl = model_declaration(model_file("adv_rt.py", TINY))
    assert Declaration.from_json(decl.to_json()) == decl
    with pytest.raises(ValueError, match=r"trace_values=\(1, 2\) must be 4 or more"):
        Declaration(**{**decl.__dict__, "trace_values": (1, 2)})


def test_bad_vary_is_one_error_naming_the_valid_sizes(model_file):
    path = model_file("adv_vary.py", TINY)
    with pytest.raises(AdviceError, match=r"--vary seq is not valid for adv_vary.py: give batch, then any of seq"):
        model_declaration(path, ("seq",))
    with pytest.raises(AdviceError, match=r"--vary batch,width"):
        model_declaration(path, ("batch", "width"))


def test_cache_key_changes_with_the_file(model_file):
    path = model_file("adv_cache.py", TINY)
    decl = model_declaration(path)
    first = cache_dir_for(path, decl, "sgd", Path("/c"))
    assert first == cache_dir_for(path, decl, "sgd", Path("/c")) and first.name.startswith("adv_cache-")
    assert cache_dir_for(path, decl, "adam", Path("/c")) != first
    path.write_text(TINY + "\n# edited\n")
    assert cache_dir_for(path, decl, "sgd", Path("/c")) != first


@pytest.mark.parametrize("budget", [0, 7, 99, 100, 12345, 10**9])
def test_largest_fitting_is_the_last_size_within_budget(budget):
    need = lambda n: 100 * n + 50 * (n // 7)  # noqa: E731 - non-decreasing, not linear
    got = largest_fitting(need, budget, high=10**6)
    brute = max((n for n in range(1, 20000) if need(n) <= budget), default=None)
    assert got == (brute if budget < 10**9 else 10**6)


@pytest.mark.parametrize("name, blocks, count, block_type", [
    ("gpt2.py", "transformer.h", 2, "GPT2Block"),
    ("gpt2_small.py", "transformer.h", 12, "GPT2Block"),
    ("resnet50.py", "layer1,layer2,layer3,layer4", 16, "Bottleneck"),
])
def test_checkpoint_blocks_finds_the_real_models_blocks_without_being_told(name, blocks, count, block_type):
    pytest.importorskip("transformers") if name.startswith("gpt2") else None
    facts = load_model(EXAMPLES / name)({}).meta_blocks().facts()
    assert (facts["blocks"], facts["block_count"], facts["block_type"], facts["blocks_found_by"]) == \
        (blocks, count, block_type, "guess")


def test_resnet50_has_torchvisions_parameter_count():
    import torch

    with torch.device("meta"):
        model = load_model(EXAMPLES / "resnet50.py").model_file.build()
    assert sum(p.numel() for p in model.parameters()) == 25_557_032  # torchvision resnet50(): 25,557,032


def test_cli_errors_are_one_line_exit_2(model_file):
    path = model_file("adv_cli.py", TINY)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args, message in ((["--vary", "seq", "--budget", "1GiB"], "--vary seq is not valid"),
                          (["--budget", "lots"], "--budget 'lots' is not a memory size"),
                          ([], "needs --budget")):
        out = subprocess.run([sys.executable, "-m", "memlab", "advise", "--model", str(path), *args],
                             capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
        assert out.stderr.strip().count("\n") == 0, out.stderr


def test_fit_skips_an_unidentified_entry_and_says_why(model_file, monkeypatch):
    """fit_family(skip_unidentified=True): an entry whose trace is no monomial is listed in
    ``not_modelled`` and left out of the declaration; with every entry so, or without the flag, it raises."""
    from memlab.advisor import fit
    from memlab.core.declaration import Declaration
    from memlab.advisor.trace import IdentificationError

    decl = model_declaration(model_file("adv_skip.py", TINY))
    plain, bf16 = (e.technique for e in decl.entries)
    said = []

    def fake_fit_entry(fam, entry, optimizer, **kw):
        if entry.technique == bf16:
            raise IdentificationError("no monomial matches allocation sizes [25600, 33792]")
        return {"technique": entry.technique, "label": entry.label, "classes": []}

    monkeypatch.setattr(fit, "fit_entry", fake_fit_entry)
    fam = fit.fit_family(decl, "sgd", say=said.append, skip_unidentified=True)
    assert [e["technique"] for e in fam["entries"]] == [plain] and fam["entries"][0]["baseline"] is True
    assert fam["not_modelled"] == [{"technique": bf16, "label": bf16,
                                    "reason": "no monomial matches allocation sizes [25600, 33792]"}]
    assert [e.technique for e in Declaration.from_json(fam["declaration"]).entries] == [plain]
    assert any("not modelled" in s and bf16 in s for s in said)
    with pytest.raises(IdentificationError, match="no monomial"):
        fit.fit_family(decl, "sgd", say=said.append)
    only_bf16 = Declaration(**{**decl.__dict__, "entries": decl.entries[1:]})
    with pytest.raises(IdentificationError, match=r"no entry could be modelled; .*autocast_bf16: no monomial"):
        fit.fit_family(only_bf16, "sgd", say=said.append, skip_unidentified=True)


def _loading(base, module: str) -> str:
    """A model file's text that takes ``build`` and ``batch`` from the file ``base``, loaded by path."""
    return f'''
import importlib.util
_spec = importlib.util.spec_from_file_location({module!r}, {str(base)!r})
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)
build, batch = base.build, base.batch
'''


def test_cache_key_follows_the_fitting_sources_and_a_sibling_file_not_the_commit(model_file):
    from memlab.own_model.advice import keyed_files

    names = {p.relative_to(ROOT / "memlab").as_posix() for p in keyed_files()}
    assert {"advisor/trace.py", "measurement/alloc_trace.py", "own_model/techniques.py",
            "own_model/workload.py", "own_model/advice.py", "core/record.py"} <= names
    assert not any(n.startswith(("site/", "sweep/", "reproductions/")) or n in ("cli.py", "own_model/checks.py")
                   for n in names)
    base = model_file("adv_base.py", TINY)
    child = model_file("adv_child.py", _loading(base, "_adv_base"))
    decl = model_declaration(child)
    first = cache_dir_for(child, decl, "sgd", Path("/c"))
    base.write_text(TINY + "\n# the sibling edited\n")
    assert cache_dir_for(child, decl, "sgd", Path("/c")) != first


def test_an_allocation_that_is_a_polynomial_of_the_batch_is_solved_exactly_from_further_traces(monkeypatch):
    """NOTE [ polynomial allocations ]: bfloat16 addmm's 9216 + 8192 * batch workspace is read from five
    traces and checked; a size rounded up to a block is no polynomial and stays an error."""
    from memlab.advisor import trace as T
    from memlab.advisor.structure import pieces_of, split_baseline

    def fake(workspace):
        def raw_trace(name, params, optimizer="sgd"):
            b = params["batch"]
            return [(400, "parameters", "pre", "w"), (16 * b, "inputs", "pre", "x"),
                    (workspace(b), "temporaries", "forward", "addmm"), (4 * b * b, "saved_activations", "forward", "mm"),
                    (-workspace(b), "temporaries", "forward", "addmm")]
        return raw_trace

    points, further = [{"batch": 2}, {"batch": 3}], [{"batch": 4}, {"batch": 5}, {"batch": 7}]
    monkeypatch.setattr(T, "raw_trace", fake(lambda b: 9216 + 8192 * b))
    with pytest.raises(T.IdentificationError, match="no monomial matches allocation sizes"):
        T.symbolic_trace("t", {}, points, ["batch"], dict)
    events = T.symbolic_trace("t", {}, points, ["batch"], dict, max_quantum=1 << 40, extra_points=further)
    assert events[2].poly() == {("batch",): 8192, (): 9216} and events[4].sign == -1
    assert events[3].poly() == {("batch", "batch"): 4} and events[3].terms == ()
    baseline, step = split_baseline(events)
    peak = max(sum(sum(c * 10 ** len(m) for m, c in p.items()) for p in piece.values())
               for piece in pieces_of(baseline, step))
    assert peak == 400 + 160 + 9216 + 81920 + 400  # at batch 10: the workspace and the saved product live
    monkeypatch.setattr(T, "raw_trace", fake(lambda b: 4096 * -(-b // 2)))  # rounded up to 2 samples
    with pytest.raises(T.IdentificationError, match=r"no polynomial of degree <= 3 in \['batch'\] matches"):
        T.symbolic_trace("t", {}, points, ["batch"], dict, max_quantum=1 << 40, extra_points=further)


def test_warm_up_allocations_that_are_no_polynomial_count_by_their_net(monkeypatch):
    """A build/warm-up allocation whose size is no polynomial (a kernel picked by the size) freed before
    the step drops out; the step's own events are read as before."""
    from memlab.advisor import trace as T

    odd = {2: 384, 3: 512, 4: 128, 5: 128, 7: 128}

    def raw_trace(name, params, optimizer="sgd"):
        b = params["batch"]
        return [(400, "parameters", "pre", "w"), (odd[b], "temporaries", "pre", "?"), (-odd[b], "temporaries", "pre", "?"),
                (16 * b, "saved_activations", "forward", "mm")]

    monkeypatch.setattr(T, "raw_trace", raw_trace)
    events = T.symbolic_trace("t", {}, [{"batch": 2}, {"batch": 3}], ["batch"], dict, max_quantum=1 << 40,
                              extra_points=[{"batch": 4}, {"batch": 5}, {"batch": 7}])
    assert [(e.phase, e.poly()) for e in events] == [("pre", {(): 400}), ("forward", {("batch",): 16})]


def test_a_small_step_allocation_that_is_no_polynomial_is_read_as_its_largest_size(monkeypatch):
    from memlab.advisor import trace as T

    scratch = {2: 128, 3: 384, 4: 384, 5: 128, 7: 128}  # GPT-2's bfloat16 forward, by batch

    def raw_trace(name, params, optimizer="sgd"):
        b = params["batch"]
        return [(400, "parameters", "pre", "w"), (scratch[b], "temporaries", "forward", "?"),
                (-scratch[b], "temporaries", "forward", "?"), (16 * b, "saved_activations", "forward", "mm")]

    monkeypatch.setattr(T, "raw_trace", raw_trace)
    events = T.symbolic_trace("t", {}, [{"batch": 2}, {"batch": 3}], ["batch"], dict, max_quantum=1 << 40,
                              extra_points=[{"batch": 4}, {"batch": 5}, {"batch": 7}])
    assert [(e.poly(), e.bound) for e in events[1:3]] == [({(): 384}, 256), ({(): 384}, 256)]
    assert events[3].poly() == {("batch",): 16} and events[3].bound == 0


def _scratch_trace(params_bytes: int, scratch):
    """A fake raw_trace: ``params_bytes`` of parameters, 16 B per sample of input, and in forward a
    scratch of ``scratch(batch)`` bytes allocated and freed, then 16 B per sample saved."""
    def raw_trace(name, params, optimizer="sgd"):
        b = params["batch"]
        return [(params_bytes, "parameters", "pre", "w"), (16 * b, "inputs", "pre", "x"),
                (scratch(b), "temporaries", "forward", "mm"), (-scratch(b), "temporaries", "forward", "mm"),
                (16 * b, "saved_activations", "forward", "mm")]
    return raw_trace


def test_a_larger_non_polynomial_allocation_is_a_bound_only_when_small_beside_the_step(monkeypatch):
    """NOTE [ polynomial allocations ]: over the 4 KiB floor, scratch that is no polynomial of the
    batch is read as its largest size while the largest sizes sum to at most BOUND_FRACTION of the
    smallest traced step's peak; else IdentificationError."""
    from memlab.advisor import trace as T

    points, further = [{"batch": 2}, {"batch": 3}], [{"batch": 4}, {"batch": 5}, {"batch": 7}]
    odd = {2: 20_000, 3: 60_000, 4: 20_000, 5: 40_000, 7: 20_000}  # picked by the size, largest at 3
    params = 10_000_000
    monkeypatch.setattr(T, "raw_trace", _scratch_trace(params, odd.__getitem__))
    events = T.symbolic_trace("t", {}, points, ["batch"], dict, max_quantum=1 << 40, extra_points=further)
    assert [(e.poly(), e.bound, e.sign) for e in events[2:4]] == [({(): 60_000}, 40_000, 1), ({(): 60_000}, 40_000, -1)]
    assert events[4].poly() == {("batch",): 16} and events[4].bound == 0
    assert T.SMALL_BOUND_BYTES < 60_000 <= T.BOUND_FRACTION * (params + 16 * 2 + 20_000)  # the peak at batch 2
    # the same scratch ten times larger: 600,000 B is 6% of the step's 10 MB peak
    monkeypatch.setattr(T, "raw_trace", _scratch_trace(params, lambda b: 10 * odd[b]))
    with pytest.raises(T.IdentificationError, match=r"may overstate it by 600000 B, over 1% of the smallest "
                                                    r"traced step's peak \(10200032 B\)"):
        T.symbolic_trace("t", {}, points, ["batch"], dict, max_quantum=1 << 40, extra_points=further)
    # a size rounded up to 2 samples, a real part of the step (params of 400 kB): refused
    monkeypatch.setattr(T, "raw_trace", _scratch_trace(400_000, lambda b: 8192 * -(-b // 2)))
    with pytest.raises(T.IdentificationError, match=r"no polynomial of degree <= 3 .* overstate it by 32768 B"):
        T.symbolic_trace("t", {}, points, ["batch"], dict, max_quantum=1 << 40, extra_points=further)


def test_a_free_of_memory_allocated_before_the_step_is_read_at_its_smallest(monkeypatch):
    """A free in the step of scratch the warm-up allocated (no polynomial: a oneDNN buffer evicted) is
    read at its smallest traced size, so what is live after it stays an upper bound."""
    from memlab.advisor import trace as T

    odd = {2: 20_000, 3: 60_000, 4: 20_000, 5: 40_000, 7: 20_000}

    def raw_trace(name, params, optimizer="sgd"):  # the warm-up's two buffers net 70,000 B at every batch
        b = params["batch"]
        return [(10_000_000, "parameters", "pre", "w"), (odd[b], "temporaries", "pre", "?"),
                (70_000 - odd[b], "temporaries", "pre", "?"), (-odd[b], "temporaries", "forward", "?"),
                (16 * b, "saved_activations", "forward", "mm")]

    monkeypatch.setattr(T, "raw_trace", raw_trace)
    events = T.symbolic_trace("t", {}, [{"batch": 2}, {"batch": 3}], ["batch"], dict, max_quantum=1 << 40,
                              extra_points=[{"batch": 4}, {"batch": 5}, {"batch": 7}])
    assert [(e.sign, e.poly(), e.bound, e.bound_low) for e in events if e.phase == "forward"] == [
        (-1, {(): 20_000}, 40_000, True), (1, {("batch",): 16}, 0, False)]


def test_step_peak_of_a_raw_trace():
    from memlab.advisor.trace import step_peak

    trace = [(100, "parameters", "pre", "w"), (50, "temporaries", "pre", "x"), (-50, "temporaries", "pre", "x"),
             (30, "temporaries", "forward", "a"), (-30, "temporaries", "forward", "a"), (20, "gradients", "backward", "g")]
    assert step_peak(trace) == 130  # the warm-up's 150 is not the step's
    assert step_peak(trace[:3]) == 100  # no step event: what is live


def test_the_bounds_reach_advise_and_say_by_how_much_at_most():
    """A fitted class's ``bounded`` records (allocations and their frees) become one line of advise's
    answer: the allocations counted once, their largest sizes and spreads summed."""
    from memlab.advisor.advise import bounded_reading
    from memlab.own_model.advice import format_model_advice

    rec = [{"op": "mm", "phase": "backward", "sign": s, "bytes": 107_648, "spread_bytes": 20_480} for s in (1, -1)]
    rec += [{"op": "?", "phase": "forward", "sign": 1, "bytes": 6144, "spread_bytes": 4608}]
    entry = {"classes": [{"k": 1, "pieces": [], "bounded": rec}]}
    b = bounded_reading(entry)
    assert (b["allocations"], b["early_frees"], b["at_most_bytes"], b["traced_spread_bytes"]) == (2, 0, 113_792, 25_088)
    assert "at most 111.1 KiB (113,792 B; 25,088 B at the traced sizes)" in b["text"]
    rec.append({"op": "?", "phase": "forward", "sign": -1, "bytes": 1536, "spread_bytes": 4608, "read": "smallest"})
    early = bounded_reading(entry)  # an early free read at its smallest may overstate by its spread
    assert (early["early_frees"], early["at_most_bytes"], early["traced_spread_bytes"]) == (1, 118_400, 29_696)
    assert early["text"].startswith("2 allocations and 1 free of memory allocated before the step (mm in "
                                    "backward; an unnamed op in forward), no polynomial")
    assert bounded_reading({"classes": [{"k": 1, "pieces": []}]}) is None
    older = bounded_reading({"classes": [{"k": 1, "pieces": [], "bounded": [{"op": "?", "phase": "forward", "bytes": 512,
                                                                          "spread_bytes": 384}]}]})
    assert older["at_most_bytes"] is None and "not a bound" in older["text"]  # a fit before "sign": no claim
    answer = {"kind": "autocast_bf16", "size": 10, "need_bytes": 10**6, "relative_step_time": 1.0,
              "error_bound": {"text": "exact"}, "peak_by_category_bytes": {}, "bounded": b, "validated_max": 8}
    text = format_model_advice({"model_file": "m.py", "family": "model:m", "vary": "batch", "budget_bytes": 10**7,
                                "held": {}, "optimizer": "sgd", "device": "cpu", "models": "x", "cached": True,
                                "seconds": 0.0, "answers": [answer], "cannot_fit": []})
    assert "bounds: 2 allocations (mm in backward; an unnamed op in forward), no polynomial of the sizes" in text


def test_a_reduced_fit_says_it_has_no_measured_held_out_check():
    from memlab.advisor.advise import error_bound

    entry = {"held_out_measured": [], "held_out_traced": {"points": 12, "max_abs_error_bytes": 89_088},
             "max_abs_error_bytes": None, "max_rel_error": None}
    assert error_bound(entry)["text"] == "no measured held-out check in the fit; 12 traced held-out, at most 89,088 B off"
    assert error_bound({**entry, "held_out_traced": {"points": 0}})["text"] == "no measured held-out check in the fit"


def test_a_cached_advice_reads_the_index_without_importing_the_model_file(model_file, tmp_path, monkeypatch):
    """NOTE [ advise without the model file ]: the first advise imports the file and writes the index;
    the next one (a fresh process) answers the same without importing torch; a changed sibling
    file or library version sends it back through the import (and the same cached fit)."""
    import json

    from memlab.advisor import fit
    from memlab.own_model.advice import advise_model

    base = model_file("adv_idx_base.py", TINY)
    path = model_file("adv_idx.py", _loading(base, "_adv_idx_base"))

    def fake_fit_entry(fam, entry, optimizer, **kw):  # a peak of 1000 bytes per sample plus 500
        return {"technique": entry.technique, "label": entry.label, "fixed": {}, "knobs": [],
                "classes": [{"k": 1, "pieces": [{"temporaries": {"batch": 1000}, "parameters": {"1": 500}}]}],
                "recommendable": True, "validated_range": {"batch": [1, 8]}, "time": {"kind": "constant", "a": 1.0}}

    monkeypatch.setattr(fit, "fit_entry", fake_fit_entry)
    root = tmp_path / "cache"
    first = advise_model(path, 10**6, cache_root=root, say=lambda s: None)
    assert not first["cached"] and [a["size"] for a in first["answers"]] == [999, 999]
    [index] = (root / "index").glob("*.json")
    code = ("import json, sys; from memlab.own_model.advice import advise_model; "
            f"a = advise_model({str(path)!r}, 10**6, cache_root={str(root)!r}, say=print); "
            "print(json.dumps([a['cached'], 'torch' in sys.modules, a['answers'], a['held'], a['model_file']]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [True, False, first["answers"], first["held"],
                                                            first["model_file"]]
    entry = json.loads(index.read_text())
    index.write_text(json.dumps({**entry, "distributions": {**entry["distributions"], "torch": "0.0"}}))
    assert advise_model(path, 10**6, cache_root=root, say=lambda s: None)["cached"]  # the same fit ...
    assert json.loads(index.read_text()) == entry  # ... found through the import, and the index rewritten
    base.write_text(TINY + "\n# the sibling edited\n")  # the index misses, the fit's key changes: refitted
    assert not advise_model(path, 10**6, cache_root=root, say=lambda s: None)["cached"]


def test_model_checks_keep_the_notes_written_beside_the_rows(tmp_path):
    """python -m memlab.own_model.checks rewrites data/model-files/<stem>-<optimizer>.json: the notes saying why a
    check is not exact are written by hand, and a rerun keeps them."""
    import json

    from memlab.own_model.checks import write_checks

    doc = {"model_file": str(ROOT / "examples" / "toy.py"), "optimizer": "sgd", "beyond": [], "fit_path": "/x"}
    path = write_checks(doc, tmp_path)
    assert path.name == "toy-sgd.json" and json.loads(path.read_text())["model_file"] == "examples/toy.py"
    path.write_text(json.dumps({**json.loads(path.read_text()), "notes": {"toy__plain batch=32": "scratch"}}))
    again = json.loads(write_checks({**doc, "beyond": [{"technique": "toy__plain"}]}, tmp_path).read_text())
    assert again["notes"] == {"toy__plain batch=32": "scratch"} and again["beyond"] == [{"technique": "toy__plain"}]
    assert "fit_path" not in again


def test_a_cold_fit_says_its_plan_and_estimate_first_then_each_trace_and_measurement(model_file, tmp_path):
    """NOTE [ a cold fit announced ]: one technique of a tiny model, fitted cold (its own declaration
    keeps it to plain); the plan and the estimate come before any trace of the fit, every trace and
    measurement has a line with the time left, and the last line sets the fit's time beside the estimate."""
    from memlab.own_model.advice import advise_model

    path = model_file("adv_progress.py", OWN)
    said: list[str] = []
    a = advise_model(path, 10**6, cache_root=tmp_path / "cache", say=said.append)
    assert not a["cached"] and [x["kind"] for x in a["answers"]] == ["plain"]
    ours = [line for line in said if line.startswith("memlab: ")]
    # 6 measurements: two small held-out ones, one at each of the three TIME_BATCHES and the time-only batch 16
    assert ours[1].startswith("memlab: plan: 1 techniques (plain); about 19 traces (18 each, at batch 2..7 and "
                              "held out) and 6 measurements (6 each)")
    assert ours[2].startswith("memlab: estimated ") and "19 traces of about" in ours[2]
    traces = [line for line in ours if line.startswith("memlab: trace ")]
    measured = [line for line in ours if line.startswith("memlab: measured ")]
    assert traces[0].startswith("memlab: trace 1/~19 (batch=") and len(measured) == 6
    assert all(" so far, about " in line and line.endswith(" left") for line in traces + measured)
    assert measured[-1].startswith("memlab: measured 6/6: adv_progress__plain (batch=16)")
    assert ours[-1].startswith("memlab: fitted in ") and f"{len(traces)} traces and 6 measurements" in ours[-1]


def test_model_answers_are_ordered_by_time_plain_first_and_cuda_leaves_autocast_unranked(model_file, tmp_path,
                                                                                         monkeypatch):
    """Issue 43 item 7: ``advise --model`` orders the answers that fit by predicted time, the plain step
    first (not by the largest batch); on cuda a technique that changes the dtype keeps its CPU time,
    marked and unranked; each answer carries its time band (two points: unknown, never exact)."""
    from memlab.advisor import fit
    from memlab.own_model.advice import advise_model, format_model_advice

    path = model_file("adv_order.py", TINY)
    # per kind: (bytes per sample, relative times measured at batch 2 and 6)
    shape = {"plain": (1000, None), "autocast_bf16": (500, (6.0, 6.2))}

    def fake_fit_entry(fam, entry, optimizer, **kw):
        kind = entry.technique.split("__")[1]
        per, ratios = shape.get(kind, (800, (1.3, 1.2)))
        points = [{"work": b, "chunks": 1, "relative_step_time": t, "params": {"batch": b}}
                  for b, t in zip((2, 6), ratios or ())]
        return {"technique": entry.technique, "label": entry.label, "fixed": {}, "knobs": [],
                "classes": [{"k": 1, "pieces": [{"temporaries": {"batch": per}}], "allocations": []}], "recommendable": True,
                "validated_range": {"batch": [1, 8]},
                "time": fit.time_model(fam, entry, points) if ratios else {"kind": "none"}}

    monkeypatch.setattr(fit, "fit_entry", fake_fit_entry)
    root = tmp_path / "cache"
    cpu = advise_model(path, 10**6, cache_root=root, say=lambda s: None)
    kinds = [a["kind"] for a in cpu["answers"]]
    assert kinds[0] == "plain" and kinds[-1] == "autocast_bf16"  # 6x: the slowest on CPU, yet the largest batch
    assert max(cpu["answers"], key=lambda a: a["size"])["kind"] == "autocast_bf16"
    assert [a["rank"] for a in cpu["answers"]] == list(range(1, len(kinds) + 1))
    bf16 = cpu["answers"][-1]
    assert bf16["time_band"]["fraction"] is None and bf16["time_band"]["text"].startswith("unknown (2 points")
    gpu = advise_model(path, 2**28, cache_root=root, device="cuda", say=lambda s: None)  # above the CUDA margin
    last = gpu["answers"][-1]
    assert last["kind"] == "autocast_bf16" and last["rank"] is None and not last["time_ranked"]
    assert all(a["time_ranked"] for a in gpu["answers"][:-1])
    text = format_model_advice(gpu)
    assert "relative time measured on CPU" in text and "(dtype: not ranked)" in text
