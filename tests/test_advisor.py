"""The advisor: exact memory models (NOTE [ advisor models ]) and ``memlab advise`` over the committed ones.

Measurements here are small (isolated, a few seconds each); the models themselves are the committed
``data/models/*.json`` (``make models`` rebuilds them).
"""
import json
import random
import re
import subprocess
import sys

import pytest

import memlab
from memlab.advisor import AdviceError, advise, format_advice, load_models, parse_budget, predict
from memlab.advisor.decision import changes_dtype, order_fits
from memlab.core.declaration import Chunks
from memlab.advisor.fit import declaration_of
from memlab.advisor.model import MODELS_DIR, eval_poly
from memlab.advisor.structure import StructureError, infer_loops, pieces_of, prune, total_poly
from memlab.advisor.trace import SymEvent
from memlab.cli import main
from process_checks import HANG_GUARD_S

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

OPTIMIZERS = ("sgd", "adam")


def _entry(models, family, label):
    return next(e for e in models["families"][family]["entries"] if e["label"] == label)


def _measure(entry, family, models, params, optimizer):
    fixed = models["families"][family]["workload_fixed"]
    return memlab.measure(entry["technique"], iterations=2, repeats=1, time_budget=0, check=False,
                          optimizer=optimizer, **fixed, **entry["fixed"], **params)


# -- the form, on hand-made traces (no torch) -------------------------------------------------------

def _ev(sign, mono, phase="forward", cat="temporaries", q=4, op="op"):
    return SymEvent(sign, q, tuple(sorted(mono)), cat, phase, op)


def _loop_trace(k):
    """A toy step: allocate an [n, d] output, then k chunks each keep a [chunk, hidden] activation;
    backward frees them one by one after a [chunk, hidden] gradient each."""
    ev = [_ev(1, ("d", "n"), "pre", "inputs")]
    ev += [_ev(1, ("d", "n"))]
    ev += [_ev(1, ("chunk", "hidden"), cat="saved_activations") for _ in range(k)]
    for _ in range(k):
        ev += [_ev(1, ("chunk", "hidden"), "backward"), _ev(-1, ("chunk", "hidden"), "backward"),
               _ev(-1, ("chunk", "hidden"), "backward", "saved_activations")]
    return ev + [_ev(-1, ("d", "n"), "backward")]


def test_loop_structure_gives_k_linear_pieces():
    steps = {k: [e for e in _loop_trace(k) if e.phase != "pre"] for k in (3, 4, 5, 6)}
    st = infer_loops(steps[3], steps[4], 3, [(5, steps[5]), (6, steps[6])])
    assert len(st.insertions) == 2
    pieces = prune(pieces_of({"inputs": {("d", "n"): 4}}, st.base, st))
    for k in (4, 7, 50):
        vals = {"n": 1000, "d": 8, "chunk": 10, "hidden": 32, "m": k - 4}
        peak = max(eval_poly({"*".join(m) or "1": c for m, c in total_poly(p).items()}, vals) for p in pieces)
        # baseline + output + k saved activations + one gradient
        assert peak == 4 * (2 * 1000 * 8 + (k + 1) * 10 * 32)


def _toy_layers(p):
    """A toy step as ``raw_trace`` gives it, ``[(delta_bytes, category, phase, op)]``: ``layers`` layers,
    each keeping an [n, d] activation and, inside, causal query blocks of ``chunk`` rows whose scores
    grow with the block (block i: chunk x (i + 1) * chunk; the last: last x n), then the backward
    freeing each layer's activation after the same blocks and a [d, d] gradient per layer."""
    n, d, layers = p["n"], p["d"], p["layers"]
    c = min(p.get("chunk", n), n)
    k = -(-n // c)
    blocks = [(c, (i + 1) * c) for i in range(k - 1)] + [(n - (k - 1) * c, n)]

    def attend(phase):
        out = []
        for r, r1 in blocks:
            out += [(4 * r * r1, "temporaries", phase, "scores"), (8 * r1, "temporaries", phase, "cols"),
                    (-8 * r1, "temporaries", phase, "cols"), (-4 * r * r1, "temporaries", phase, "scores")]
        return out

    ev = [(4 * d * d * layers, "parameters", "pre", "w"), (4 * n * d, "inputs", "pre", "x")]
    for _ in range(layers):
        ev += [(4 * n * d, "saved_activations", "forward", "act"), *attend("forward")]
    for _ in range(layers):
        ev += [(4 * d * d, "gradients", "backward", "dw"), *attend("backward"),
               (-4 * n * d, "saved_activations", "backward", "act")]
    return ev + [(-4 * d * d, "gradients", "optimizer", "dw")] * layers  # one update per layer's weight


def _toy_peak(events):
    from memlab.advisor.fit import events_peak

    return events_peak(events, categories=())


def test_growing_loop_bodies_and_an_outer_loop_fit_exactly(monkeypatch):
    """NOTE [ growing loop bodies ] and NOTE [ outer loops ]: blocks whose scores grow with their index,
    inside each of ``layers`` layers (an outer loop), are fitted from traces at 1-6 layers and 1-6 blocks
    and predicted to the byte, every category, at 24 layers and 30 blocks."""
    from types import SimpleNamespace

    from memlab.advisor import trace as trace_mod
    from memlab.core.declaration import Declaration, Entry, Repeated
    from memlab.advisor.fit import fit_entry

    monkeypatch.setattr(trace_mod, "raw_trace", lambda name, params, optimizer="sgd": _toy_layers(params))

    def measure(technique, **kw):
        total, cats = _toy_peak(_toy_layers(kw))
        return SimpleNamespace(status="ok", error=None, total_peak_bytes=total, peak_by_category_bytes=cats,
                               predicted_cuda=None, relative_step_time=None)

    entry = Entry("toy", knobs=("chunk",))
    fam = Declaration(name="toy", workload="toy", sizes=("n", "d", "layers"), workload_fixed={}, entries=(entry,),
                      loop=Repeated("layers", Chunks("n", "chunk")), time_sizes=(), work="n*d")
    model = fit_entry(fam, entry, "sgd", measure_fn=measure)
    general = [c for c in model["classes"] if "k_min" in c and c.get("outer", {}).get("k_min") == 4]
    assert len(general) == 1 and any("layers" in mono for piece in general[0]["pieces"] for p in piece.values()
                                     for mono in p)
    assert model["held_out_traced"]["max_abs_error_bytes"] == 0 and model["held_out_traced"]["categories_exact"]
    for p in ({"n": 30 * 7 - 3, "d": 5, "layers": 24, "chunk": 7}, {"n": 40, "d": 9, "layers": 2, "chunk": 9},
              {"n": 12, "d": 3, "layers": 5, "chunk": 5}, {"n": 64, "d": 4, "layers": 13, "chunk": 64}):
        total, cats = _toy_peak(_toy_layers(p))
        pred = predict(fam, model, p)
        assert pred["total_peak_bytes"] == total, p
        assert {c: v for c, v in pred["peak_by_category_bytes"].items() if v} == {c: v for c, v in cats.items() if v}



def test_growing_bodies_are_refused_as_plain_loops_and_read_with_their_growth():
    def blocks(k):
        ev = []
        for i in range(k - 1):
            ev += [_ev(1, ("chunk", "chunk"), q=4 * (i + 1)), _ev(1, ("chunk",), q=8), _ev(-1, ("chunk",), q=8),
                   _ev(-1, ("chunk", "chunk"), q=4 * (i + 1))]
        return ev + [_ev(1, ("last", "n")), _ev(-1, ("last", "n"))]

    steps = {k: blocks(k) for k in (3, 4, 5, 6)}
    checks = [(5, steps[5]), (6, steps[6])]
    with pytest.raises(StructureError):
        infer_loops(steps[3], steps[4], 3, checks)
    st = infer_loops(steps[3], steps[4], 3, checks, grow=True)
    assert [i.growth for i in st.insertions] == [(4, 0, 0, 4)]  # q grows; the free has sign -1
    pieces = prune(pieces_of({}, st.base, st))
    for k in (4, 5, 9, 40):
        vals = {"chunk": 7, "last": 3, "n": 7 * (k - 1) + 3, "m": k - 4}
        peak = max(eval_poly({"*".join(m) or "1": c for m, c in total_poly(p).items()}, vals) for p in pieces)
        assert peak == max(4 * 7 * 7 * (k - 1) + 8 * 7, 4 * 3 * vals["n"])  # the last full block or the last


# -- the committed models ------------------------------------------------------------------------

@pytest.fixture(scope="module", params=OPTIMIZERS)
def models(request):
    return load_models(request.param)


#: model entries exact at one intra-op thread (the traces) but not at the held-out measurements' default
#: threads, and why; they must stay within 2% and err low only by that scratch
EXACT_AT_ONE_THREAD_ONLY = {
    ("resnet", "resnet_checkpoint_block"): "oneDNN's convolution backward takes scratch per thread at the moment "
                                           "of this entry's peak (17,600 B more at 2 threads, batch 16, depth 20)",
    ("resnet", "resnet"): "the same per-thread oneDNN scratch at the time size batch 8, depth 56 (24,600 B more "
                          "at 2 threads), measured since the time model's depth-over-batch sizes",
}


def test_models_are_versioned_and_exact_on_their_held_out_points(models):
    assert models["memlab_commit"] and models["schema"] == 1
    for family, fam in models["families"].items():
        for e in fam["entries"]:
            assert e["held_out_traced"]["max_abs_error_bytes"] == 0, (family, e["label"])
            ok = [r for r in e["held_out_measured"] if r["status"] == "ok"]
            if (family, e["label"]) in EXACT_AT_ONE_THREAD_ONLY:
                assert ok and e["max_rel_error"] <= 0.02 and all(r["error_bytes"] <= 0 for r in ok), e["label"]
            else:
                assert ok and e["max_abs_error_bytes"] == 0 and all(r["categories_exact"] for r in ok), e["label"]
            assert e["fitted_range"] and e["validated_range"]


def test_the_entries_exact_at_one_thread_only_are_modelled():
    modelled = {(f, e["label"]) for f, fam in load_models("sgd")["families"].items() for e in fam["entries"]}
    assert set(EXACT_AT_ONE_THREAD_ONLY) <= modelled


@pytest.mark.parametrize("optimizer,family,label,seed", [
    ("sgd", "chunking", "slice_loop", 11),
    ("adam", "chunking", "checkpoint_chunk", 13),
    ("sgd", "reversible", "reversible", 14),
    ("adam", "reversible", "checkpoint_block", 15),
    ("sgd", "transformer", "chunked_lm_loss", 16),
    ("sgd", "transformer", "chunked_attention", 17),
    ("adam", "transformer", "chunked_attention", 18),
])
def test_fit_reproduces_new_held_out_measurements(optimizer, family, label, seed):
    """Points the fit never saw (another seed, loop counts up to 40) are predicted within the stated
    bound (0 bytes), total and every category."""
    models = load_models(optimizer)
    entry = _entry(models, family, label)
    decl = declaration_of(family)
    for p in decl.for_entry(decl.entry(label)).random_points(bool(entry["knobs"]), 1, seed):  # the entry's loop
        m = _measure(entry, family, models, p, optimizer)
        assert m.status == "ok", m.error
        pred = predict(models["families"][family], entry, p)
        assert abs(pred["total_peak_bytes"] - m.total_peak_bytes) <= entry["max_abs_error_bytes"], p
        assert pred["peak_by_category_bytes"] == {k: m.peak_by_category_bytes.get(k, 0)
                                                  for k in pred["peak_by_category_bytes"]}


def _queries(n_queries, seed):
    """Generated (family, sizes, budget) queries whose budget lies between the smallest and the largest
    predicted need, at sizes that measure in about a second."""
    rng = random.Random(seed)
    out = []
    for i in range(n_queries):
        optimizer = OPTIMIZERS[i % 2]
        if i % 3 < 2:
            family = "chunking"
            sizes = {"n": rng.choice([400, 600, 900]), "d": rng.choice([16, 24, 32]),
                     "hidden": rng.choice([64, 96, 128])}
        else:
            family = "reversible"
            sizes = {"depth": rng.randint(2, 7), "batch": rng.choice([16, 32, 48]), "width": rng.choice([8, 16]),
                     "hidden": rng.choice([16, 32])}
        pairs = [f"{k}={v}" for k, v in sizes.items()]
        everything = advise(family, 1 << 40, pairs, optimizer=optimizer)
        needs = sorted(c["need_bytes"] for c in everything["fits"])
        budget = needs[0] + int(rng.uniform(0.05, 0.6) * (needs[-1] - needs[0])) + 1
        out.append((family, pairs, budget, optimizer))
    return out


def _queries_or_skip(n_queries, seed):
    try:
        return _queries(n_queries, seed)
    except AdviceError as exc:  # no committed models: test_models_dir_is_beside_the_sweeps fails instead
        return [pytest.param(None, None, None, None, marks=pytest.mark.skip(reason=str(exc)))]


@pytest.mark.parametrize("family,pairs,budget,optimizer", _queries_or_skip(6, 2024))
def test_first_recommendation_measured_fits_the_budget(family, pairs, budget, optimizer):
    a = advise(family, budget, pairs, optimizer=optimizer)
    first = a["fits"][0]
    assert first["need_bytes"] <= budget
    models = load_models(optimizer)
    entry = _entry(models, family, first["label"])
    sizes_knobs = {k: v for k, v in first["params"].items() if k not in entry["fixed"]}
    m = _measure(entry, family, models, sizes_knobs, optimizer)
    assert m.status == "ok" and m.total_peak_bytes <= budget
    assert m.total_peak_bytes == first["total_peak_bytes"]


def test_transformer_first_recommendation_and_its_chunk_measured_fit_the_budget():
    """The transformer family's answer names a technique and, for chunked_lm_loss, a chunk; measured,
    it is what the model said, to the byte, and within the budget (sizes 4x-180x the traced ones)."""
    pairs = ["seq=96", "batch=8", "vocab=4096"]
    needs = sorted(c["need_bytes"] for c in advise("transformer", 1 << 40, pairs)["fits"])
    budget = needs[0] + (needs[-1] - needs[0]) // 4
    a = advise("transformer", budget, pairs)
    assert any(c["label"] == "chunked_lm_loss" and c["knobs"].get("chunk") for c in a["fits"])
    first = a["fits"][0]
    models = load_models("sgd")
    entry = _entry(models, "transformer", first["label"])
    m = _measure(entry, "transformer", models, {k: v for k, v in first["params"].items() if k not in entry["fixed"]},
                 "sgd")
    assert m.status == "ok" and m.total_peak_bytes == first["total_peak_bytes"] <= budget


def test_transformer_layers_is_a_size_and_every_entry_measured_at_9_layers_is_exact():
    """``--param layers=N`` is a size of the transformer models (an outer loop: NOTE [ outer loops ]), not
    refused as a fixed parameter: every entry's cheapest setting at 9 layers (1.5x the traced 6), and
    its knob's, measured, is what the model said, to the byte, every category."""
    pairs = ["seq=40", "batch=3", "vocab=300", "layers=9"]
    a = advise("transformer", 1 << 40, pairs)
    assert a["sizes"]["layers"] == 9
    models = load_models("sgd")
    for label in dict.fromkeys(c["label"] for c in a["fits"]):
        c = min((c for c in a["fits"] if c["label"] == label), key=lambda c: c["need_bytes"])
        entry = _entry(models, "transformer", label)
        m = _measure(entry, "transformer", models, {k: v for k, v in c["params"].items() if k not in entry["fixed"]},
                     "sgd")
        assert m.status == "ok" and m.total_peak_bytes == c["total_peak_bytes"], (label, c["knobs"])
        assert {k: m.peak_by_category_bytes.get(k, 0) for k in c["peak_by_category_bytes"]} == c["peak_by_category_bytes"]


def test_transformer_answer_with_a_block_measured_is_exact_and_fits():
    """A budget under eager attention's need and over chunked_attention's smallest: the answer holds
    chunked_attention with a block (its blocks grow with their index: NOTE [ growing loop bodies ]); that
    setting and the first answer, measured at 7 layers and seq 160 (7x the traced seq), are what the
    model said, to the byte, and within the budget."""
    pairs = ["seq=160", "batch=2", "vocab=128", "layers=7"]
    everything = advise("transformer", 1 << 40, pairs)["fits"]
    eager = next(c["need_bytes"] for c in everything if c["label"] == "eager_attention")
    blocked = min((c for c in everything if c["label"] == "chunked_attention"), key=lambda c: c["need_bytes"])
    assert blocked["need_bytes"] < eager
    budget = (blocked["need_bytes"] + eager) // 2
    a = advise("transformer", budget, pairs)
    assert any(c["label"] == "chunked_attention" and c["knobs"].get("block") for c in a["fits"])
    assert not any(c["label"] == "eager_attention" for c in a["fits"])
    models = load_models("sgd")
    for c in {id(x): x for x in (a["fits"][0], blocked)}.values():
        entry = _entry(models, "transformer", c["label"])
        m = _measure(entry, "transformer", models, {k: v for k, v in c["params"].items() if k not in entry["fixed"]},
                     "sgd")
        assert m.status == "ok" and m.total_peak_bytes == c["total_peak_bytes"] <= budget, (c["label"], c["knobs"])


def test_transformer_advice_at_seq_4096_and_12_layers_names_a_technique(capsys):
    argv = ["advise", "--family", "transformer", "--budget", "24GiB", "--device", "cuda", "--param", "seq=4096",
            "--param", "layers=12"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "layers=12" in out and "seq=4096" in out
    a = advise("transformer", "24GiB", ["seq=4096", "layers=12"], device="cuda")
    assert a["fits"] and all(c["need_bytes"] <= 24 << 30 for c in a["fits"])
    deeper = advise("transformer", 1 << 50, ["seq=4096", "layers=24"], device="cuda")["fits"]
    shallow = advise("transformer", 1 << 50, ["seq=4096", "layers=12"], device="cuda")["fits"]
    need = {c["label"]: c["need_bytes"] for c in shallow if not c["knobs"]}
    assert all(c["need_bytes"] > need[c["label"]] for c in deeper if c["label"] in need)  # layers count


# -- the command ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,match", [
    (["--family", "nosuch", "--budget", "1GiB"], "unknown family 'nosuch'; modelled families (sgd): chunking, resnet, "
                                                 "reversible, tensor_train, transformer"),
    (["--family", "nosuch", "--fit"], "family 'nosuch' is not a known family; declared: chunking"),
    (["--family", "chunking", "--budget", "1GiB", "--param", "rank=4"], "family 'chunking' has no parameter 'rank'"),
    (["--family", "chunking", "--budget", "lots"], "--budget 'lots' is not a memory size"),
    (["--family", "chunking", "--budget", "1MiB", "--param", "n=400000"], "no modelled chunking technique fits 1.0 MiB"),
    (["--family", "chunking", "--budget", "1GiB", "--param", "n=0"], "n=0 is out of range"),
    (["--family", "chunking", "--budget", "1GiB", "--param", "x_requires_grad=false"], "cover x_requires_grad=True only"),
    (["--family", "chunking", "--budget", "1GiB", "--optimizer", "lion"], "no memory models for optimizer 'lion'"),
    (["--family", "chunking", "--budget", "1GiB", "--device", "tpu"], "--device 'tpu' is not valid"),
    (["--budget", "1GiB"], "memlab advise needs --family and --budget"),
])
def test_bad_input_is_one_line_exit_2(argv, match, capsys):
    assert main(["advise", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("memlab: error: ") and match in err and "\n" not in err, err


def test_a_declared_family_missing_from_the_models_is_one_line_naming_the_fit(tmp_path, capsys):
    """Every built-in family is fitted in the committed models; a models folder without one (here
    tensor_train) names the modelled families and the command that fits it."""
    data = json.loads((MODELS_DIR / "cpu-float32-sgd.json").read_text())
    del data["families"]["tensor_train"]
    (tmp_path / "cpu-float32-sgd.json").write_text(json.dumps(data))
    assert main(["advise", "--family", "tensor_train", "--budget", "1GiB", "--models", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    modelled = ", ".join(sorted(data["families"]))
    assert err == (f"memlab: error: family 'tensor_train' is declared but not fitted; modelled families (sgd): "
                   f"{modelled} (fit it: memlab advise --fit --family tensor_train)"), err


def test_advise_answers_from_committed_models_without_measuring(monkeypatch, capsys):
    def refuse(*a, **k):
        raise AssertionError("memlab advise measured something")

    monkeypatch.setattr(memlab, "measure", refuse)
    import memlab.measurement as measure_pkg

    monkeypatch.setattr(measure_pkg, "measure", refuse, raising=False)
    argv = ["advise", "--family", "chunking", "--budget", "8GiB", "--param", "n=400000", "--param", "d=1024",
            "--param", "hidden=4096"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "Fits (" in out and "Pareto front" in out and "Cannot fit at any setting" in out and "unchunked" in out
    assert "n=400000 is" in err and "beyond the validated range" in err  # extrapolation flagged with its factor
    assert main([*argv, "--json", "--optimizer", "adam", "--device", "cuda"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert a["fits"] and all(c["need_bytes"] <= 8 * 2**30 for c in a["fits"])
    ranks = [c["rank"] for c in a["fits"]]  # NOTE [ plain fits first ]: tied times share a rank
    assert ranks == sorted(ranks) and ranks[0] == 1
    for r in set(ranks):
        tied = [c for c in a["fits"] if c["rank"] == r]
        assert [c["relative_step_time"] for c in tied[1:]] == sorted(c["relative_step_time"] for c in tied[1:])
        spread = [c["relative_step_time"] for c in tied]
        assert max(spread) - min(spread) <= 2 * a["time_error"]["fraction"] * max(spread)
    assert a["cuda_margin"]["fraction"] == 0.10 and a["fits"][0]["need_bytes"] > a["fits"][0]["total_peak_bytes"]


def test_advisor_imports_no_torch_and_is_quick():
    """The advice needs no torch, through the CLI too (``memlab.cli`` reads the sweep's phase names,
    which import torch, only when it prints a measurement)."""
    cli = ("import sys; from memlab.cli import main; "
           "assert main(['advise', '--family', 'reversible', '--budget', '1GiB', '--param', 'depth=32']) == 0; "
           "assert 'torch' not in sys.modules, 'torch imported'")
    p = subprocess.run([sys.executable, "-c", cli], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    # quick because nothing heavy is imported: checked as the modules loaded, not as a time (a wall-clock
    # bound failed at 28 s under a load of 7 on two cores, for an answer that takes well under a second idle)
    code = ("import sys; from memlab.advisor import advise, format_advice; "
            "a = advise('reversible', '1GiB', ['depth=32']); text = format_advice(a); "
            "print(' '.join(m for m in ('torch', 'numpy', 'pandas', 'scipy', 'jinja2', 'plotly') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "", f"the advice imported {p.stdout.strip()}"


def test_budget_units_and_knob_candidates():
    assert parse_budget("2GiB") == 2 * 2**30 and parse_budget("1.5GB") == 1_500_000_000
    assert parse_budget("512M") == 512 * 2**20 and parse_budget("1e6") == 10**6
    with pytest.raises(AdviceError, match="not a memory size"):
        parse_budget("2 potatoes")
    cands = Chunks("n", "chunk_size").knob_candidates({"n": 1000}, 1, 10_000_000)
    assert cands[0] == 1 and cands[-1] == 1000 and len(cands) < 40


def test_models_dir_is_beside_the_sweeps():
    assert MODELS_DIR.parent.name == "data" and (MODELS_DIR / "cpu-float32-sgd.json").is_file()


def test_small_budgets_and_counts_read_right():
    """``--budget 10KiB`` is not shown as "0.0 MiB"; one chunk and one setting are singular (issue 29)."""
    from memlab.advisor.advise import _knobs, _plural, fmt_bytes

    assert fmt_bytes(10 * 1024) == "10.0 KiB" and fmt_bytes(512) == "512 B" and fmt_bytes(3 * 2**20) == "3.0 MiB"
    assert fmt_bytes(5 * 2**30) == "5.00 GiB"
    assert _plural(1, "setting") == "1 setting" and _plural(3, "setting") == "3 settings"
    assert _knobs({"knobs": {"chunk_size": 100}, "chunks": 1}) == "chunk_size=100 (1 chunk)"


def test_time_only_sizes_are_timed_but_never_counted_as_exact_bytes(monkeypatch):
    """``time_only_sizes`` (AdvisorModel): points beyond the sizes the memory model is exact at are
    fitted by the time model, and their bytes listed apart (``time_only_measured``), out of the
    held-out byte error and the validated range; here a fake step is 4,096 B off past n = 64, as
    tensor_train is past one cache block of rows."""
    from types import SimpleNamespace

    from memlab.advisor import trace as trace_mod
    from memlab.core.declaration import Declaration, Entry, NoLoop
    from memlab.advisor.fit import fit_entry

    def step(p):
        n, d = p["n"], p["d"]
        return [(4 * n * d, "inputs", "pre", "x"), (4 * n * d, "temporaries", "forward", "y"),
                (-4 * n * d, "temporaries", "backward", "y")]

    monkeypatch.setattr(trace_mod, "raw_trace", lambda name, params, optimizer="sgd": step(params))

    def measure(technique, **kw):
        total, cats = _toy_peak(step(kw))
        off = 4096 if kw["n"] > 64 else 0
        return SimpleNamespace(status="ok", error=None, total_peak_bytes=total + off,
                               peak_by_category_bytes={**cats, "temporaries": cats.get("temporaries", 0) + off},
                               predicted_cuda=None, relative_step_time=1.5 + 1e3 / (kw["n"] * kw["d"]),
                               relative_to="toy", step_time_s=1e-3, load_avg_before=0.0)

    entry = Entry("toy")
    fam = Declaration(name="toy", workload="toy", sizes=("n", "d"), workload_fixed={}, entries=(entry,), loop=NoLoop(),
                      time_sizes=({"n": 32, "d": 8}, {"n": 64, "d": 16}), work="n*d",
                      time_only_sizes=({"n": 512, "d": 8}, {"n": 2048, "d": 16}))
    model = fit_entry(fam, entry, "sgd", measure_fn=measure)
    assert model["max_abs_error_bytes"] == 0 and model["validated_range"]["n"][1] <= 64
    assert all(r["kind"] != "time_only" and r["error_bytes"] == 0 for r in model["held_out_measured"])
    apart = model["time_only_measured"]
    assert sorted(r["params"]["n"] for r in apart) == [512, 2048]
    assert all(r["kind"] == "time_only" and r["error_bytes"] == -4096 and not r["categories_exact"] for r in apart)
    # the time model is fitted at all four sizes: 1.5 + 1000 / (n d) (each point's relative time kept to 4 digits)
    assert len(model["time"]["points"]) == 4
    assert model["time"]["r"] == pytest.approx(1.5, abs=1e-4) and model["time"]["c"] == pytest.approx(1e3, rel=1e-2)


# -- the decision: plain fits first, ties, what is not modelled (issue 43) ---------------------------

CHOOSE_DEFAULTS = ["--family", "chunking", "--budget", "2GiB", "--param", "n=10000", "--param", "d=256",
                   "--param", "hidden=1024"]


def test_the_answer_says_first_that_plain_fits(capsys):
    assert main(["advise", *CHOOSE_DEFAULTS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("plain (unchunked) fits: peak 110.4 MiB of 2.00 GiB; no technique needed")
    assert lines[1].startswith("a technique would buy headroom: ") and "speed: " in lines[1]
    row = next(x for x in lines if x.startswith("1  "))
    assert row.split()[1] == "unchunked"  # the plain step is the first choice
    a = advise("chunking", "2GiB", ["n=10000", "d=256", "hidden=1024"])
    assert a["plain"]["plain_fits"] and a["fits"][0]["baseline"] and a["fits"][0]["rank"] == 1
    # what a technique buys in size: the largest n plain fits, and the largest a technique does
    assert ", a larger n: " not in lines[1] and "; a larger n: " in lines[1]
    top, reach = (int(x) for x in re.search(r"a larger n: (\d+) with .*plain up to (\d+)\)", lines[1]).groups()[::-1])
    at = lambda n: advise("chunking", "2GiB", [f"n={n}", "d=256", "hidden=1024"])  # noqa: E731
    assert at(top)["plain"]["plain_fits"] and not at(top + 1)["plain"]["plain_fits"]
    timed = lambda a: [c for c in a["fits"] if not c["baseline"] and not c["chunks_timed"]]  # noqa: E731
    assert timed(at(reach))  # a setting within the chunk counts its time was measured at reaches it
    beyond = at(reach + 1)  # only settings with more chunks than were timed fit further: not counted
    assert beyond["fits"] and not timed(beyond)


def test_plain_does_not_fit_and_the_first_choice_follows():
    a = advise("chunking", "60MiB", ["n=10000", "d=256", "hidden=1024"])
    first = a["fits"][0]
    assert not a["plain"]["plain_fits"] and not first["baseline"]
    assert a["plain"]["text"].startswith("plain (unchunked) does not fit: peak 110.4 MiB of 60.0 MiB; first choice: "
                                         + first["label"])
    assert format_advice(a).splitlines()[0] == a["plain"]["text"]


def test_tied_times_share_a_rank_and_unranked_times_come_last():
    def c(label, t, need, baseline=False, ranked=True):
        return {"label": label, "relative_step_time": t, "need_bytes": need, "baseline": baseline, "time_ranked": ranked}

    fits = [c("slow", 1.5, 10), c("a", 0.98, 50), c("plain", 1.0, 100, baseline=True), c("fast", 0.5, 80),
            c("fast2", 0.52, 70), c("bf16", 0.3, 5, ranked=False)]
    out = order_fits(fits, 0.05)
    assert [(x["label"], x["rank"]) for x in out] == [("plain", 1), ("a", 1), ("fast", 3), ("fast2", 3),
                                                      ("slow", 5), ("bf16", None)]
    assert [x["label"] for x in order_fits([f for f in fits if not f["baseline"]], None)][:2] == ["fast", "fast2"]


def test_a_parameter_a_label_fixes_selects_those_entries(capsys):
    a = advise("chunking", "2GiB", ["backward=manual"])
    labels = {c["label"] for c in a["fits"]}
    assert "slice_accumulate[backward=manual]" in labels and "slice_accumulate[backward=autograd]" not in labels
    assert "vmap_chunk" in labels  # entries that do not fix it stay
    assert main(["advise", "--family", "chunking", "--budget", "2GiB", "--param", "opt_einsum=true"]) == 2
    err = capsys.readouterr().err
    assert "cover opt_einsum only as in einsum_chunk[opt_einsum=false] (got opt_einsum=True)" in err


def test_what_the_sweeps_measured_and_no_entry_covers_is_listed_with_the_reason():
    a = advise("chunking", "2GiB", [])
    why = {(x["technique"], tuple(x["params"].items())): x["reason"] for x in a["not_modelled"]}
    assert why[("einsum_chunk", (("opt_einsum", True),))].startswith("modelled only with opt_einsum=False")
    assert ("checkpoint_split_chunk", ()) in why
    assert not any(t in ("slice_accumulate", "vmap_chunk", "unchunked") for t, _ in why)
    t = {x["technique"]: x["reason"] for x in advise("transformer", "1GiB", [])["not_modelled"]}
    assert {"sdpa", "autocast_bf16", "gpt2_hf"} <= set(t)
    assert "another dtype" in t["autocast_bf16"] and "peer library" in t["gpt2_hf"]
    assert "not modelled: einsum_chunk [opt_einsum=True]: modelled only with" in format_advice(a)
    assert "memlab advise: chunking d=256 (default) hidden=1024 (default) n=10000 (default), budget" in format_advice(a)


def test_on_cuda_the_time_is_marked_cpu_measured():
    a = advise("chunking", "2GiB", [], device="cuda")
    text = format_advice(a)
    assert "relative time measured on CPU" in text and "measured on CPU: a GPU's ratio can differ" in text
    assert a["plain"]["text"].startswith("plain (unchunked) fits: CUDA need ")
    assert changes_dtype({"technique": "autocast_bf16"}, "float32") and not changes_dtype({"technique": "sdpa"}, "float32")
    # a model file's kind, and what a fit records from memlab.Technique.changes_dtype
    assert changes_dtype({"technique": "gpt2__autocast_bf16"}, "float32")
    assert changes_dtype({"technique": "mine", "changes_dtype": True}, "float32")


def test_a_cuda_answer_leaves_a_dtype_changing_technique_unranked():
    """Item 7 of issue 43: on cuda a technique that changes the dtype keeps its CPU time, marked, and no
    rank; on cpu it is ranked by it."""
    from memlab.advisor.advise import time_cell, time_fields

    entry = {"technique": "gpt2__autocast_bf16", "knobs": [], "time": {"kind": "constant", "a": 6.0}}
    gpu = time_fields(None, entry, {}, "cuda", 1, "float32")
    cpu = time_fields(None, entry, {}, "cpu", 1, "float32")
    assert not gpu["time_ranked"] and cpu["time_ranked"] and gpu["relative_step_time"] == 6.0
    assert time_cell({**gpu, "chunks": 1}).endswith("(dtype: not ranked)")
    plain = {"label": "plain", "relative_step_time": 1.0, "need_bytes": 9, "baseline": True, "time_ranked": True}
    slow = {"label": "ckpt", "relative_step_time": 1.3, "need_bytes": 5, "baseline": False, "time_ranked": True}
    bf16 = {"label": "bf16", "need_bytes": 4, "baseline": False, **gpu}
    assert [(c["label"], c["rank"]) for c in order_fits([bf16, slow, plain], None)] == [
        ("plain", 1), ("ckpt", 2), ("bf16", None)]


def test_the_time_band_is_the_fits_largest_residual_or_unknown():
    """NOTE [ the time band ]: a fit through more points than coefficients states its largest relative
    residual; through as many it is unknown, with the measured ratios, never zero."""
    from memlab.advisor.fit import time_model
    from memlab.advisor.model import time_band
    from memlab.core.declaration import Declaration, Entry, NoLoop

    entry = Entry("toy")
    fam = Declaration(name="toy", workload="toy", sizes=("batch",), workload_fixed={}, entries=(entry,), loop=NoLoop(),
                      time_sizes=({"batch": 2}, {"batch": 6}), work="batch")

    def points(ratios):
        return [{"work": b, "chunks": 1, "relative_step_time": t, "params": {"batch": b}} for b, t in ratios]

    three = time_model(fam, entry, points([(2, 1.10), (4, 0.97), (6, 1.02)]))  # noisy: no r + c / b goes through all
    band = time_band({"time": three})
    assert band["points"] == 3 and band["fraction"] > 0.01 and band["text"].startswith("±")
    two = time_model(fam, entry, points([(2, 1.18), (6, 0.96)]))
    assert two["max_fit_rel_error"] == 0  # the exact fit: two coefficients through two points
    band = time_band({"time": two})
    assert band["fraction"] is None and band["text"] == "unknown (2 points: 1.18x, 0.96x measured)"
    assert time_band({"baseline": True, "time": two})["fraction"] == 0.0


def test_no_prediction_below_the_smallest_measured_ratio_unless_above_one():
    """NOTE [ no faster than plain unless measured so ]: the floor is min(1, the smallest measured ratio)."""
    from memlab.advisor.model import clamp_time, time_floor

    def entry(*ratios):
        return {"time": {"points": [{"relative_step_time": t, "chunks": 1} for t in ratios]}}

    recompute = entry(1.18, 0.96, 1.05)
    assert time_floor(recompute) == 0.96 and clamp_time(recompute, 0.82) == (0.96, True)
    assert clamp_time(recompute, 1.2) == (1.2, False)
    slower = entry(1.3, 1.4)  # never measured faster than plain: never predicted faster
    assert clamp_time(slower, 0.9) == (1.0, True) and clamp_time(slower, 1.1) == (1.1, False)
    assert clamp_time({**slower, "baseline": True}, 0.9) == (0.9, False) and clamp_time(entry(), 0.5) == (0.5, False)


def test_answers_are_floored_and_mark_more_chunks_than_were_timed(tmp_path):
    a = advise("chunking", "2GiB", ["n=10000", "d=256", "hidden=1024"], sweeps_dir=tmp_path)
    models = load_models("sgd")["families"]["chunking"]
    floors = {e["label"]: min([1.0] + [p["relative_step_time"] for p in e["time"]["points"]])
              for e in models["entries"] if not e.get("baseline")}
    for c in a["fits"]:
        if not c["baseline"]:
            assert c["relative_step_time"] >= round(floors[c["label"]], 3)
        assert (c["chunks_timed"] is not None) == (c["chunks"] > 16)  # the chunking time points: 1, 4 and 16 chunks
    assert any(c["chunks_timed"] for c in a["fits"]) and "16 timed: likely slower" in format_advice(a, limit=None)
    # what a technique buys is never backed by a time beyond the chunks timed
    assert "(500 chunks)" not in a["plain"]["buys"] and "16 chunks" in a["plain"]["buys"]
    assert "(largest residual of 12 points)" in format_advice(a)


def test_a_not_modelled_reason_declared_beside_the_family_is_shown():
    from memlab.advisor.decision import declared_not_modelled

    declared = declared_not_modelled("transformer")
    assert "flash" in declared["sdpa"] and "revnet" in declared_not_modelled("resnet")
    assert declared_not_modelled("chunking") == {}
    t = {x["technique"]: x["reason"] for x in advise("transformer", "1GiB", [])["not_modelled"]}
    assert t["sdpa"].startswith(declared["sdpa"]) and "declares no entry" not in t["sdpa"]


def test_a_plugin_folder_declares_its_reasons_too_and_a_bad_one_is_named(tmp_path, monkeypatch):
    from memlab.advisor.decision import declared_not_modelled

    folder = tmp_path / "toyfam"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    body = 'import memlab\n\nclass M(memlab.AdvisorModel, family="toyfam"):\n    not_modelled = NM\n'
    (folder / "workload.py").write_text(body.replace("NM", '{"fancy": "its scratch is no monomial"}'))
    monkeypatch.setenv("MEMLAB_PLUGINS", str(folder))
    assert declared_not_modelled("toyfam") == {"fancy": "its scratch is no monomial"}
    (folder / "workload.py").write_text(body.replace("NM", '{"fancy": 3}'))
    with pytest.raises(ValueError, match=r"workload.py: not_modelled=\{'fancy': 3\} must map technique names"):
        declared_not_modelled("toyfam")
