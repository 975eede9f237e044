"""The Choose page's micro-batch answer (``static/choose.js``: ``adviseMicro``) agrees with
``memlab advise --family F --vary micro_batches`` (:func:`memlab.advisor.micro.advise_micro`) to the byte:
the bounds, the fewest micro-batches, the setting, the ranking, the reasons and what cannot fit; the page
draws the section for a family with a batch and says why not for one without.  Without Chromium the
browser part skips, as in ``test_site_browser.py``."""
from __future__ import annotations

import json

from memlab.advisor.micro import advise_micro
from test_site_browser import _close, _evaluate, _visit, browser, served  # noqa: F401 (fixtures)
from test_site_choose import site  # noqa: F401 (fixture)

#: (family, sizes, budget, optimizer, device): exact answers, bounds only, nothing fits, CUDA needs
QUERIES = [
    ("transformer", {"batch": 64, "seq": 512, "vocab": 8192}, "1GiB", "sgd", "cpu"),
    ("transformer", {"batch": 4, "layers": 1, "seq": 64, "vocab": 1024}, "3MiB", "adam", "cuda"),
    ("reversible", {"batch": 1024, "depth": 8, "width": 256, "hidden": 512}, "40MiB", "sgd", "cpu"),
    ("resnet", {"batch": 256, "depth": 110}, "64MiB", "sgd", "cpu"),
    ("tensor_train", {"batch": 4096}, "8MiB", "adam", "cpu"),
    ("tensor_train", {"batch": 4096}, "100KiB", "sgd", "cpu"),
]


def _row(c):
    return {"label": c["label"], "knobs": c["knobs"], "size": c["size"], "micro_batch": c["micro_batch"],
            "exact": c["exact"], "low_bytes": str(c["low_bytes"]), "high_bytes": str(c["high_bytes"]),
            "need_bytes": str(c["need_bytes"]), "need_low_bytes": str(c["need_low_bytes"]),
            "peak_by_category_bytes": {k: str(v) for k, v in c["peak_by_category_bytes"].items()},
            "relative_step_time": c["relative_step_time"], "why": c["why"], "may_fit_from": c["may_fit_from"],
            "rank": c.get("rank")}


def _python(q, models_dir):
    family, sizes, budget, optimizer, device = q
    a = advise_micro(family, budget, [f"{k}={v}" for k, v in sizes.items()], optimizer=optimizer, device=device,
                     models_dir=models_dir, host=None)  # as fitted, as the page holds them
    return {"answers": [_row(c) for c in a["answers"]], "unranked": [_row(c) for c in a["unranked"]],
            "batch": a["batch"], "cannot_fit": [
                {"label": c["label"], "at": c["at"],
                 "smallest_need_bytes": None if c["smallest_need_bytes"] is None else str(c["smallest_need_bytes"])}
                for c in a["cannot_fit"]]}


def _query(q):
    family, sizes, budget, optimizer, device = q
    return {"family": family, "sizes": {k: str(v) for k, v in sizes.items()}, "knobs": {}, "budget": budget,
            "optimizer": optimizer, "device": device}


def test_the_page_s_micro_batch_answer_is_advise_s_to_the_byte(browser, served, site):  # noqa: F811
    out, models_dir = site
    state, errors, session = _visit(browser, served(out)("choose.html"))
    try:
        assert errors == [], errors
        kinds = set()
        for q in QUERIES:
            js = _evaluate(browser, session, f"JSON.stringify(memlabChoose.evaluateMicro({json.dumps(_query(q))}))")
            py = _python(q, models_dir)
            for key in ("answers", "unranked", "cannot_fit", "batch"):
                assert js[key] == py[key], (q, key)
            kinds |= {kind for kind, rows in (("exact", py["answers"]), ("bounds", py["unranked"]),
                                              ("cannot", py["cannot_fit"])) if rows}
        assert kinds == {"exact", "bounds", "cannot"}
        assert _evaluate(browser, session, "JSON.stringify(memlabChoose.evaluateMicro({family: 'chunking', "
                                           "optimizer: 'sgd', budget: '1GiB', sizes: {}, knobs: {}}))") is None
    finally:
        _close(browser, session)


def test_the_page_draws_the_micro_batch_section(browser, served, site):  # noqa: F811
    out, models_dir = site
    family, sizes, budget, optimizer, device = QUERIES[0]
    hash_ = "&".join(f"{k}={v}" for k, v in {"family": family, "optimizer": optimizer, "device": device,
                                                 "budget": budget, **sizes}.items())
    state, errors, session = _visit(browser, served(out)("choose.html#" + hash_))
    try:
        assert errors == [], errors
        shown = _evaluate(browser, session, """JSON.stringify({
            head: (document.getElementById('micro-batches') || {}).textContent,
            rows: [...document.querySelectorAll('#micro-table tbody tr')].map(r => [...r.cells].map(c => c.textContent.trim()))})""")
        py = _python(QUERIES[0], models_dir)
        assert "micro-batches" in shown["head"]
        assert len(shown["rows"]) == len(py["answers"]) + len(py["unranked"])
        for row, c in zip(shown["rows"], py["answers"]):
            assert row[0] == str(c["rank"]) and row[1].startswith(c["label"]) and row[3] == f"{c['size']} x {c['micro_batch']}"
            assert row[6] == "exact"
        assert all(r[6].startswith("bounds, unranked: ") for r in shown["rows"][len(py["answers"]):])
        none = _evaluate(browser, session, """(() => { const f = document.getElementById('choose-family');
            f.value = 'chunking'; f.dispatchEvent(new Event('change'));
            return JSON.stringify(document.getElementById('choose-answer').textContent); })()""")
        assert "chunking has no batch size" in none
    finally:
        _close(browser, session)
