"""The sources of the techniques for gradients and optimizer state beside memlab's exact bytes
(NOTE [ the whole-step techniques' sources ] in memlab/reproductions/papers.py): each source's figure is
its formula on the measured model's parameter shapes, and each gap is its named term to the byte (the
optimizer in backward: bounded by the gradients).  The quick model: 8 nn.Linear(32, 32) with biases."""
from __future__ import annotations

import shutil
import warnings

import pytest

from memlab.reproductions import run_one
from memlab.reproductions import step_papers as sp
from memlab.reproductions.papers import STEP_COLUMNS, STEP_SOURCES, adafactor_rows, lora_rows
from memlab.results import ResultsWarning, load_reproductions
from memlab.site import build_site


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The quick reproduction's JSON.  ``reproduce`` measures its model file from a temporary folder,
    loaded as a plug-in (memlab.own_model.run) and deleted when it returns: it must leave the process's
    plug-in list as it was, else every later isolated measurement in this worker (another test file's)
    would hand the deleted file to its child and fail."""
    from memlab import registry

    before = registry.loaded_plugins()
    out = tmp_path_factory.mktemp("sources")
    yield run_one(sp, out, quick=True)
    assert registry.loaded_plugins() == before


def test_each_gap_is_its_named_term_to_the_byte(written):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultsWarning)
        (report,) = load_reproductions([written])  # the site reads it as any paper page
    assert report["verdict"] == "reproduced"
    (t,) = report["tables"]
    assert t["columns"] == STEP_COLUMNS
    rows = {(r[0], r[1]): r for r in t["rows"]}
    layers, width = sp.SIZES[True]
    weights, biases = layers * width * width * 4, layers * width * 4
    hooked, = [r for k, r in rows.items() if k[0] == STEP_SOURCES["in_backward"]]
    assert hooked[3] == weights + biases  # the tutorial's figure: the gradients' bytes
    assert 0 < hooked[4] <= hooked[3] and hooked[5] == hooked[3] - hooked[4]
    assert hooked[5] <= 2 * (width * width + width) * 4 + layers * width * 4 * 4  # a layer's gradient and a few [1, W]
    factored, = [r for k, r in rows.items() if k[0] == STEP_SOURCES["adafactor"]]
    assert factored[3] == layers * 2 * width * 4  # n + m per n x m matrix
    assert factored[5] == biases + sp.STEP_BYTES * 2 * layers  # full moments of the biases, a step counter each
    grads, state = [r for k, r in rows.items() if k[0] == STEP_SOURCES["lora"]]
    assert grads[3] == grads[4] == layers * sp.RANK * 2 * width * 4 and grads[5] == 0
    assert state[3] == 2 * grads[3] and state[5] == sp.STEP_BYTES * 2 * layers
    assert report["figure"]["series"]["memlab"] == [r[4] for r in t["rows"]]


def test_a_gap_the_named_term_does_not_explain_is_reported_as_such():
    """The row builders state what was measured, not what was expected: another state is another gap."""
    (row,) = adafactor_rows([((4, 3), 4), ((3,), 4)], 10_000, 4)
    assert row[3] == (4 + 3) * 4 and row[5] == 10_000 - 28
    grads, state = lora_rows([(8, 6)], 2, 4, 999, 5000, 4)
    assert grads[3] == 2 * (8 + 6) * 4 and grads[5] == 999 - 112 and "not the adapters' alone" in grads[6]
    assert state[5] == 5000 - 224


def test_the_site_shows_the_rows_as_a_paper_page(written, tmp_path):
    """The written JSON is a paper page: its table, each source and memlab's bytes, with no problem line."""
    data = tmp_path / "data"
    (data / "reproductions").mkdir(parents=True)
    shutil.copy(written, data / "reproductions")
    out = tmp_path / "site"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResultsWarning)
        build_site(tmp_path / "results", data, out)
    assert not [w for w in caught if sp.SEED in str(w.message)], [str(w.message) for w in caught]
    pages = [p for p in out.rglob("*.html") if sp.TITLE.split(":")[0] in p.read_text(encoding="utf-8")]
    text = max(pages, key=lambda p: len(p.read_text(encoding="utf-8"))).read_text(encoding="utf-8")
    assert "arXiv:1804.04235" in text and "arXiv:2106.09685" in text and "optimizer_step_in_backward_tutorial" in text
    (report,) = load_reproductions([written])
    for row in report["tables"][0]["rows"]:
        assert f"{row[4]:,}" in text or str(row[4]) in text, row[:2]
