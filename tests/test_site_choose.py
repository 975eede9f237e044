"""The Choose page: the committed memory models evaluated in the browser agree with ``memlab advise``.

The same model files (``data/models/*.json``) are evaluated by :func:`memlab.advisor.advise` (and
:func:`memlab.advisor.model.predict`) in Python and by ``static/choose.js`` in headless Chromium; the
bytes (total peak, every category, the CUDA need, the headroom), the loop count, the relative step
time, the ranking, the Pareto front, what cannot fit and the extrapolation flags must be identical.
A permalink with the inputs in the URL reopens the answer; the page has no console errors and draws
its chart.  Without Chromium the browser part skips (fails under CI), as in ``test_site_browser.py``.
"""
from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from memlab.advisor import AdviceError, advise, load_models, predict, predict_time
from memlab.advisor.advise import fmt_bytes
from memlab.results import ResultsWarning
from memlab.site import build_site
from memlab.site.choose import compact_models
from memlab.site.text import fmt_mib
from process_checks import HANG_GUARD_S
from test_site_browser import REPO, _close, _evaluate, _visit, browser, served  # noqa: F401 (fixtures)

MODELS = REPO / "data" / "models"

#: (family, sizes, knobs, budget, optimizer, device): fits and not, knob given or tried, cpu and
#: cuda, beyond the validated range, sizes whose bytes pass 2**53
QUERIES = [
    ("chunking", {"n": 400000, "d": 1024, "hidden": 4096}, {}, "8GiB", "adam", "cpu"),
    ("chunking", {"n": 10000, "d": 256, "hidden": 1024}, {}, "64MiB", "sgd", "cpu"),
    ("chunking", {"n": 10000, "d": 256, "hidden": 1024}, {}, "2GiB", "sgd", "cpu"),  # the page's defaults: plain fits
    ("chunking", {"n": 10000, "d": 256, "hidden": 1024}, {"chunk_size": 700}, "1GiB", "sgd", "cuda"),
    ("chunking", {"n": 2049, "d": 3, "hidden": 5}, {}, "76.9 MB", "adam", "cuda"),
    ("chunking", {"n": 10000000, "d": 1000000, "hidden": 1000000}, {}, "9000TiB", "sgd", "cpu"),
    ("reversible", {"depth": 64, "batch": 256, "width": 512, "hidden": 2048}, {}, "2.05GiB", "sgd", "cpu"),
    ("reversible", {"depth": 3, "batch": 7, "width": 11, "hidden": 13}, {}, "73.25MiB", "adam", "cuda"),
    # a knob over a product of sizes (ChunksOf: chunk splits batch * seq tokens), tried and given
    ("transformer", {"seq": 4096, "batch": 8, "vocab": 32000}, {}, "24GiB", "sgd", "cuda"),
    ("transformer", {"seq": 256, "batch": 4, "vocab": 2048}, {"chunk": 100}, "1GiB", "adam", "cpu"),
    # an outer loop (Repeated: layers), exact classes and the general one where layers is a variable
    ("transformer", {"seq": 4096, "batch": 2, "vocab": 512, "layers": 12}, {}, "24GiB", "sgd", "cuda"),
    ("transformer", {"seq": 300, "batch": 3, "vocab": 700, "layers": 3}, {}, "64MiB", "adam", "cpu"),
    # a counted size of the form 6k + 2 (Count(per=6, offset=2)), and a chunked batch held at one chunk size
    ("resnet", {"depth": 110, "batch": 64}, {}, "64MiB", "sgd", "cpu"),
    ("tensor_train", {"batch": 1000}, {"chunk_size": 100}, "1GiB", "adam", "cuda"),
    ("reversible", {"depth": 4096, "batch": 10**6, "width": 10**6, "hidden": 10**6}, {}, "3e20", "adam", "cpu"),
]
#: a budget nothing meets: Python refuses it (AdviceError); the page says the same smallest need
NOTHING = ("chunking", {"n": 400000, "d": 1024, "hidden": 4096}, {}, "100MiB", "sgd", "cpu")


def _query(q):
    family, sizes, knobs, budget, optimizer, device = q
    return {"family": family, "sizes": {k: str(v) for k, v in sizes.items()},
            "knobs": {k: str(v) for k, v in knobs.items()}, "budget": budget, "optimizer": optimizer, "device": device}


def _row(c):
    return {"label": c["label"], "knobs": c["knobs"], "total_peak_bytes": str(c["total_peak_bytes"]),
            "need_bytes": str(c["need_bytes"]), "headroom_bytes": str(c["headroom_bytes"]),
            "peak_by_category_bytes": {k: str(v) for k, v in c["peak_by_category_bytes"].items()},
            "relative_step_time": c["relative_step_time"], "chunks": c["chunks"]}


def _python(q, models_dir):
    family, sizes, knobs, budget, optimizer, device = q
    a = advise(family, budget, [f"{k}={v}" for k, v in {**sizes, **knobs}.items()], optimizer=optimizer,
               device=device, models_dir=models_dir, sweeps_dir=models_dir.parent / "sweeps",
               host=None)  # as fitted, as the page holds them, whatever this host's kernels
    return {"fits": [{**_row(c), **{k: c[k] for k in ("rank", "time_ranked", "time_floored", "chunks_timed", "time_band")}}
                     for c in a["fits"]],
            "pareto": [_row(c) for c in a["pareto"]],
            "plain": None if a["plain"] is None else {**a["plain"], "need_bytes": str(a["plain"]["need_bytes"])},
            "not_modelled": a["not_modelled"], "time_error": a["time_error"],
            "cannot_fit": [{"label": c["label"], "smallest_need_bytes": str(c["smallest_need_bytes"]), "knobs": c["knobs"],
                            "chunks": c["chunks"]} for c in a["cannot_fit"]],
            "extrapolation": a["extrapolation"], "budget_bytes": str(a["budget_bytes"]), "sizes": a["sizes"]}


def memlab_advise_first_line() -> str:
    """The first line ``memlab advise`` prints at the Choose page's defaults (issue 43's done-when)."""
    argv = ["advise", "--family", "chunking", "--budget", "2GiB", "--param", "n=10000", "--param", "d=256",
            "--param", "hidden=1024"]
    out = subprocess.run([sys.executable, "-m", "memlab", *argv], capture_output=True, text=True, cwd=REPO,
                         timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[0]


def _points(family: str, entry: dict, rng: random.Random, count: int) -> list[dict[str, int]]:
    """Random technique parameters over the whole valid range (log-uniform), plus small exact classes."""
    fam = load_models("sgd", MODELS)["families"][family]
    specs = {**fam["sizes"], **{k: fam["knobs"][k] for k in entry["knobs"]}}
    out = []
    loop = fam["declaration"]["loop"]
    for i in range(count):
        hi = 10 ** rng.uniform(0, 7) if i % 2 else 60
        point = {k: max(s["low"], min(s["high"], int(rng.uniform(1, hi)))) for k, s in specs.items()}
        if loop["kind"] == "count":  # a counted size takes per * k + offset values only (a 6k+2 ResNet)
            per, offset = loop.get("per", 1), loop.get("offset", 0)
            point[loop["size"]] = offset + per * max(1, (point[loop["size"]] - offset) // per)
        out.append(point)
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A site built from an empty results folder and data holding the committed models and the
    committed Adam sweep (one row per technique at its defaults: what the page lists as not modelled)."""
    root = tmp_path_factory.mktemp("choose")
    data = root / "data"
    shutil.copytree(MODELS, data / "models")
    (data / "sweeps").mkdir()
    shutil.copy(REPO / "data" / "sweeps" / "cpu-adam.jsonl", data / "sweeps")
    out = root / "site"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultsWarning)
        build_site(root / "results", data, out)
    return out, data / "models"


def test_the_page_and_its_models_are_built(site):
    out, _ = site
    html = (out / "choose.html").read_text()
    assert 'href="choose.html"' in (out / "index.html").read_text()  # in the nav
    assert "static/choose.js" in html and "data-app=" in html
    assert "<strong>chunking</strong>: not yet checked on a GPU for this family" in html  # no data/gpu-check here
    # before its script runs, the page says at its defaults what memlab advise says first (issue 43)
    text = memlab_advise_first_line()
    assert text.startswith("plain (unchunked) fits: peak ") and text.endswith("; no technique needed")
    answer = html[html.index('id="choose-answer"'):]
    assert answer.index(text) < answer.index("Not modelled (with the reason)") < answer.index(
        "modelled only with opt_einsum=False")
    for opt in ("sgd", "adam"):
        shipped = json.loads((out / "models" / f"cpu-float32-{opt}.json").read_text())
        assert shipped == json.loads((MODELS / f"cpu-float32-{opt}.json").read_text())


def test_the_page_ships_each_entrys_time_band_floor_and_timed_chunks(site):
    """Issue 43 items 4-6: what choose.js needs to floor, mark and state each setting's time as advise
    does (tests/test_site_choose.py's browser test compares the answers), and the declared reasons."""
    import html as html_lib

    out, _ = site
    page = (out / "choose.html").read_text()
    app = json.loads(html_lib.unescape(re.search(r'data-app="([^"]*)"', page).group(1)))
    chunking = {e["label"]: e for e in app["models"]["sgd"]["families"]["chunking"]["entries"]}
    assert chunking["unchunked"]["time_floor"] is None and chunking["unchunked"]["chunks_timed"] is None
    vmap = chunking["vmap_chunk"]
    assert vmap["chunks_timed"] == 16 and 0 < vmap["time_floor"] < 1
    assert vmap["time_band"]["fraction"] > 0 and vmap["time_band"]["text"].startswith("±")
    reasons = {x["technique"]: x["reason"] for x in app["models"]["sgd"]["families"]["transformer"]["not_modelled"]}
    assert "flash" in reasons["sdpa"] and "bfloat16" in reasons["autocast_bf16"]


def test_what_a_gpu_measured_for_a_family_is_on_the_page(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(MODELS, data / "models")
    (data / "gpu-check").mkdir()
    row = {"technique": "reversible", "params": {"depth": 4}, "mode": "train", "status": "ok",
           "measured_allocated_bytes": 102 * 2**20, "cpu_peak_allocated_bytes": 100 * 2**20}
    (data / "gpu-check" / "some-gpu.json").write_text(json.dumps({"gpu": "Some GPU", "torch": "9.9", "rows": [row]}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultsWarning)
        build_site(tmp_path / "results", data, tmp_path / "site")
    html = (tmp_path / "site" / "choose.html").read_text()
    assert "<strong>reversible</strong>: checked on Some GPU (data/gpu-check/some-gpu.json, torch 9.9)" in html
    assert "+2.0% off the exact CPU figure at 1 configuration(s)" in html


def test_no_models_no_page_and_a_bad_model_is_left_out_with_a_line(tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    (data / "models").mkdir(parents=True)
    build_site(results, data, tmp_path / "a")
    assert not (tmp_path / "a" / "choose.html").exists()
    good = json.loads((MODELS / "cpu-float32-sgd.json").read_text())
    good["families"]["chunking"]["entries"][1]["classes"][0]["pieces"][0]["gradients"] = {"d*bogus": 4}
    # a work-components time model (NOTE [ work components ]) without the baseline's cost
    assert good["families"]["transformer"]["entries"][1]["label"] == "checkpoint_layer"
    del good["families"]["transformer"]["entries"][1]["time"]["baseline_cost"]
    # ... and one whose per-chunk cost repeats over a size the family does not have (NOTE [ per-chunk costs ])
    assert good["families"]["transformer"]["entries"][3]["label"] == "chunked_lm_loss"
    good["families"]["transformer"]["entries"][3]["time"]["o_scale"] = "layers*bogus"
    good["families"]["nope"] = {k: v for k, v in good["families"]["reversible"].items() if k != "declaration"}
    good["families"]["alias"] = good["families"]["reversible"]  # another family's declaration
    (data / "models" / "cpu-float32-sgd.json").write_text(json.dumps(good))
    (data / "models" / "cpu-float32-adam.json").write_text("[1, 2")
    with pytest.warns(ResultsWarning) as caught:
        build_site(results, data, tmp_path / "b")
    lines = " | ".join(str(w.message) for w in caught)
    assert "family 'nope': a model family without an advisor declaration" in lines
    assert "family 'alias': its advisor declaration is family 'reversible'" in lines
    assert "slice_loop: a class whose pieces" in lines
    assert "checkpoint_layer: a work-components time model without work, r, baseline_cost, c, o" in lines
    assert "cpu-float32-adam.json" in lines
    compact, _ = compact_models(good, "x")
    assert [e["label"] for e in compact["families"]["chunking"]["entries"]].count("slice_loop") == 0
    assert "checkpoint_layer" not in [e["label"] for e in compact["families"]["transformer"]["entries"]]
    assert "chunked_lm_loss: a work-components time model without work, r, baseline_cost, c, o, or with an o_scale" in lines
    assert "chunked_lm_loss" not in [e["label"] for e in compact["families"]["transformer"]["entries"]]
    from memlab.registry import builtin_families

    assert set(compact["families"]) == {name for name, _ in builtin_families()}
    methodology = (tmp_path / "b" / "methodology.html").read_text()
    assert "without an advisor declaration" in methodology


def test_browser_evaluation_agrees_with_python_to_the_byte(browser, served, site):  # noqa: F811
    out, models_dir = site
    state, errors, session = _visit(browser, served(out)("choose.html"))
    try:
        assert errors == [], errors
        # every entry of every model at random sizes: bytes, categories, loop count, time
        rng = random.Random(16)
        checked = 0
        for opt in ("sgd", "adam"):
            models = load_models(opt, models_dir)
            for family, fam in models["families"].items():
                for entry in fam["entries"]:
                    points = _points(family, entry, rng, 25)
                    got = _evaluate(browser, session, "JSON.stringify(" + json.dumps(points) + ".map(p => memlabChoose.predict("
                                    + json.dumps(opt) + ", " + json.dumps(family) + ", " + json.dumps(entry["label"])
                                    + ", p)))")
                    for p, js in zip(points, got):
                        py = predict(fam, entry, p)
                        assert js["total"] == str(py["total_peak_bytes"]), (opt, entry["label"], p)
                        assert js["categories"] == {k: str(v) for k, v in py["peak_by_category_bytes"].items()}
                        assert js["k"] == py["k"]
                        assert js["time"] == predict_time(fam, entry, p), (opt, entry["label"], p)
                        checked += 1
        assert checked >= 500
        assert all(int(c["total_peak_bytes"]) > 2 ** 53 for c in _python(QUERIES[-1], models_dir)["fits"])
        # the advisor's whole answer
        for q in QUERIES:
            js = _evaluate(browser, session, f"JSON.stringify(memlabChoose.evaluate({json.dumps(_query(q))}))")
            py = _python(q, models_dir)
            assert js["fits"], q
            for key in ("fits", "pareto", "cannot_fit", "extrapolation", "budget_bytes", "sizes", "plain",
                        "not_modelled", "time_error"):
                assert js[key] == py[key], (q, key)
            assert js["plain"]["plain_fits"] == (js["fits"][0]["label"] == js["plain"]["label"]), q
        js = _evaluate(browser, session, f"JSON.stringify(memlabChoose.evaluate({json.dumps(_query(NOTHING))}))")
        with pytest.raises(AdviceError) as exc:
            _python(NOTHING, models_dir)
        assert js["fits"] == [] and fmt_bytes(int(js["smallest"]["need_bytes"])) in str(exc.value)
        assert js["smallest"]["label"] in str(exc.value)
        # Python's number formats, ties included (half to even on an exact binary tie)
        cases = [(0.0625, 3), (0.125, 2), (0.25, 1), (2.5, 0), (1.0625, 3), (1 / 3, 2), (12.35, 1), (0.05, 1)]
        shown = _evaluate(browser, session, "JSON.stringify(" + json.dumps(cases) + ".map(c => memlabChoose.pyFixed(c[0], c[1])))")
        assert shown == [f"{x:.{n}f}" for x, n in cases]
    finally:
        _close(browser, session)


def test_a_permalink_opens_the_answer_and_the_page_draws_it(browser, served, site):  # noqa: F811
    out, models_dir = site
    q = QUERIES[0]
    family, sizes, knobs, budget, optimizer, device = q
    hash_ = "&".join(f"{k}={v}" for k, v in {"family": family, "optimizer": optimizer, "device": device,
                                                 "budget": budget, **sizes}.items())
    state, errors, session = _visit(browser, served(out)("choose.html#" + hash_))
    try:
        assert errors == [], errors
        assert [c["drawn"] for c in state["charts"]] == ["6"] or all(int(c["drawn"]) > 0 for c in state["charts"])
        shown = _evaluate(browser, session, """JSON.stringify({
            rows: [...document.querySelectorAll('#fits-table tbody tr')].slice(0, 3).map(r => [...r.cells].map(c => c.textContent.trim())),
            n: document.querySelectorAll('#fits-table tbody tr').length,
            budget: document.getElementById('choose-budget').value,
            link: document.getElementById('choose-permalink').getAttribute('href'),
            charts: [...document.querySelectorAll('div.chart')].map(d => d.getAttribute('data-drawn')),
            extrapolated: !!document.getElementById('choose-extrapolation')})""")
        py = advise(family, budget, [f"{k}={v}" for k, v in sizes.items()], optimizer=optimizer, device=device,
                    models_dir=models_dir)
        assert shown["budget"] == budget and shown["n"] == len(py["fits"])
        for row, c in zip(shown["rows"], py["fits"]):
            assert row[1].startswith(c["label"]) and row[3] == fmt_mib(c["need_bytes"]), (row, c["label"])
            assert row[4] == fmt_mib(c["headroom_bytes"])
        assert shown["extrapolated"] and shown["charts"] and all(int(c) > 0 for c in shown["charts"])
        assert f"n={sizes['n']}" in shown["link"] and f"budget={budget}" in shown["link"]
        # sorting the dynamic table by a numeric column
        up = _evaluate(browser, session, """(() => { const th = [...document.querySelectorAll('#fits-table th')]
            .find(h => h.textContent === 'headroom'); th.click();
            return JSON.stringify([...document.querySelectorAll('#fits-table tbody tr')].map(r => Number(r.cells[4].getAttribute('data-sort')))); })()""")
        assert up == sorted(up)
        folder = Path(os.environ.get("MEMLAB_TEST_ARTIFACTS", REPO / "test-artifacts"))
        folder.mkdir(parents=True, exist_ok=True)
        shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=session)
        (folder / "site-choose.png").write_bytes(base64.b64decode(shot["data"]))
        # a bad size says why, in one line, and the answer is cleared
        bad = _evaluate(browser, session, """(() => { const i = document.querySelector('input[name="p:n"]'); i.value = '0';
            document.querySelector('#choose-form button').click();
            const e = document.getElementById('choose-error'); return JSON.stringify([e.hidden, e.textContent]); })()""")
        assert bad[0] is False and "n=0 is out of range" in bad[1]
    finally:
        _close(browser, session)


def test_the_page_s_first_choice_at_every_measured_configuration_is_advise_s(browser, served, site):  # noqa: F811
    """The Choose page answers the measured configurations of tests/test_choose_agrees.py (issue 43) with
    the first choice ``memlab advise`` gives there, which that test checks against the measurements."""
    from test_choose_agrees import CONFIGS

    out, models_dir = site
    state, errors, session = _visit(browser, served(out)("choose.html"))
    try:
        assert errors == [], errors
        checked = 0
        for (optimizer, family, sizes, knobs), pairs in sorted(CONFIGS.items(), key=str):
            for budget in sorted({r["total_peak_bytes"] for _, r in pairs}):
                q = (family, dict(sizes), dict(knobs), str(budget), optimizer, "cpu")
                js = _evaluate(browser, session, f"JSON.stringify(memlabChoose.evaluate({json.dumps(_query(q))}))")
                py = _python(q, models_dir)
                assert js["fits"][:1] == py["fits"][:1] and js["plain"] == py["plain"], q
                checked += 1
        assert checked >= 80  # 86 (configuration, budget) pairs in the committed sweeps
    finally:
        _close(browser, session)
