"""The model pages (memlab.site.models_page): a model file's check document in, the largest batch per
GPU, the peak by category and the checks beyond the measured batches out; bad files are left out
with a problem line.  Torch-free: the document is written here by hand."""
from __future__ import annotations

import json

from memlab.advisor.advise import cuda_need
from memlab.core.loops import NoLoop
from memlab.site.models_page import GPU_BUDGETS_GIB, add_model_pages
from memlab.site.render import render_site

PER_SAMPLE, PARAMS = 1_000_000, 4000


def _entry(kind: str, per_sample: int, baseline: bool = False) -> dict:
    return {"technique": f"toy__{kind}", "label": f"toy__{kind}", "fixed": {}, "knobs": [], "baseline": baseline,
            "recommendable": True, "classes": [{"k": 1, "pieces": [
                {"parameters": {"1": PARAMS}, "saved_activations": {"batch": per_sample}}]}],
            "held_out_measured": [], "held_out_traced": {"points": 12}, "max_abs_error_bytes": 0,
            "max_rel_error": 0.0, "validated_range": {"batch": [1, 8]},
            "time": {"kind": "work", "r": 1.0 if baseline else 1.3, "c": 0.0, "o": 0.0, "work": "batch"}}


def _bounded(entry: dict) -> dict:
    """``entry`` with a scratch allocation of 6144 B (4608 B of spread) read as a bound, and its free."""
    entry["classes"][0]["bounded"] = [{"op": "?", "phase": "forward", "sign": s, "bytes": 6144, "spread_bytes": 4608}
                                      for s in (1, -1)]
    return entry


def _doc() -> dict:
    decl = {"family": "model:toy", "workload": "model_toy", "sizes": ["batch"], "workload_fixed": {},
            "entries": [{"technique": "toy__plain"}, {"technique": "toy__checkpoint_blocks"}],
            "loop": NoLoop().to_json(), "time_sizes": [{"batch": 2}, {"batch": 6}], "work": "batch",
            "held_out": {"batch": [1, 8]}, "max_quantum": 1 << 40, "trace_values": [2, 3, 4, 5, 7]}
    fam = {"declaration": decl, "sizes": {"batch": {"default": 4, "low": 1, "high": 10**6, "doc": ""}},
           "entries": [_entry("plain", PER_SAMPLE, True), _bounded(_entry("checkpoint_blocks", PER_SAMPLE // 4))],
           "not_modelled": [{"technique": "toy__autocast_bf16", "label": "toy__autocast_bf16", "reason": "no monomial"}]}
    beyond = [{"technique": "toy__plain", "factor": 4, "params": {"batch": 32}, "status": "ok",
               "predicted_total_peak_bytes": PARAMS + 32 * PER_SAMPLE, "measured_total_peak_bytes": PARAMS + 32 * PER_SAMPLE,
               "error_bytes": 0, "rel_error": 0.0, "categories_exact": True, "measured_relative_step_time": 1.0,
               "predicted_relative_step_time": 1.0}]
    return {"schema": 1, "optimizer": "sgd", "model_file": "examples/toy.py", "families": {"model:toy": fam},
            "beyond": beyond, "measured_max": 8, "factors": [4, 10], "fit_seconds": 1.0,
            "notes": {"toy__plain batch=32": "a oneDNN scratch the traces did not show"}}


def test_a_model_page_answers_per_gpu_and_renders(tmp_path):
    data = tmp_path / "data"
    (data / "model-files").mkdir(parents=True)
    (data / "model-files" / "toy-sgd.json").write_text(json.dumps(_doc()))
    (data / "model-files" / "bad-sgd.json").write_text(json.dumps({"schema": 1}))
    ctx = add_model_pages({"data_dir": data, "pages": [], "problems": [], "colors": {}})
    assert ctx["model_paths"] == {"Model: toy": "model-toy-sgd.html"}
    assert ctx["problems"] == ["bad-sgd.json: no single fitted family; left out of the model pages"]
    page = ctx["pages"][0]
    by_kind = {r["technique"]: r for r in page["budgets"]["rows"]}
    for gib in GPU_BUDGETS_GIB:
        brute = (gib * 2**30 - 64 * 2**20) // PER_SAMPLE + 2
        while cuda_need(PARAMS + brute * PER_SAMPLE) > gib * 2**30:
            brute -= 1
        assert by_kind["toy__plain"][f"b{gib}__sort"] == brute
        assert by_kind["toy__checkpoint_blocks"][f"b{gib}__sort"] > 3.9 * brute
    assert page["at"] == 80 and page["worst"] == "every prediction exact to the byte"
    assert page["not_modelled"][0]["reason"] == "no monomial"
    assert [b["technique"] for b in page["bounded"]] == ["toy__checkpoint_blocks"]
    index = render_site({"pages": ctx["pages"], "nav": [], "footer": None}, tmp_path / "site")
    html = (index.parent / "model-toy-sgd.html").read_text()
    assert "Largest batch per GPU" in html and "toy__autocast_bf16" in html and "examples/toy.py" in html
    assert "<code>toy__plain batch=32</code>: a oneDNN scratch the traces did not show" in html
    assert "Read as upper bounds" in html
    assert ("1 allocation (an unnamed op in forward), no polynomial of the sizes (kernel scratch), read at the largest "
            "traced size: the peak overstated by at most 6.0 KiB (6,144 B; 4,608 B at the traced sizes)") in html
    assert (index.parent / "tables" / "model-toy-sgd--largest-batch-per-gpu.csv").is_file()


def test_a_model_page_has_no_empty_chart_and_no_empty_held_value(tmp_path):
    """Issue 41: every chart of a model page draws data (a figure whose series are all 0 is replaced by
    one line saying why), and no held-fixed value is empty."""
    import html as htmlmod
    import re

    from memlab.site import figures as F

    data = tmp_path / "data"
    (data / "model-files").mkdir(parents=True)
    doc = _doc()
    (data / "model-files" / "toy-sgd.json").write_text(json.dumps(doc))
    zero = _doc()
    fam = zero["families"]["model:toy"]
    for e in fam["entries"]:  # nothing at all predicted: every category 0
        e["classes"] = [{"k": 1, "pieces": [{"parameters": {"1": 0}}]}]
    (data / "model-files" / "zero-sgd.json").write_text(json.dumps(zero))
    ctx = add_model_pages({"data_dir": data, "pages": [], "problems": [], "colors": {}})
    pages = {p["path"]: p for p in ctx["pages"]}
    assert F.draws_data(json.loads(pages["model-toy-sgd.html"]["chart"]["figure"]))
    assert pages["model-zero-sgd.html"]["chart"]["figure"] == "" and pages["model-zero-sgd.html"]["chart"]["absent"]
    index = render_site({"pages": ctx["pages"], "nav": [], "footer": None}, tmp_path / "site")
    for name in ("model-toy-sgd.html", "model-zero-sgd.html"):
        html = (index.parent / name).read_text()
        for fig in re.findall(r'data-figure="([^"]*)"', html):
            assert F.draws_data(json.loads(htmlmod.unescape(fig))), name
        assert not re.search(r"held at [^<]*=(,|\)|$)", html) and "<code></code>" not in html, name
    assert "Not drawn:" in (index.parent / "model-zero-sgd.html").read_text()
