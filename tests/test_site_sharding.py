"""The Sharding page (issue 48): built from the committed data/sharding rows, its charts and tables
hold the rows' bytes; it is in the navigation, loads nothing from the network, and is left out when
there is no data."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from memlab.sharding.formulas import zero_model_state
from memlab.site import build_site
from memlab.site.context import build_context
from memlab.site.sharding_page import load_sharding_rows, sharding_page

REPO = Path(__file__).resolve().parent.parent
MLP = REPO / "data" / "sharding" / "mlp-g24.jsonl"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def mlp_section():
    """The page built from the committed MLP file alone, and its section."""
    page, problems = sharding_page([(MLP, _rows(MLP))])
    assert problems == [] and page is not None
    section, = page["sections"]
    return page, section


def _figures(section: dict) -> dict[str, dict]:
    """Each chart's figure by strategy (the chart title starts with it)."""
    return {c["title"].split(":")[0]: json.loads(c["figure"]) for c in section["charts"]}


def _trace(fig: dict, prefix: str) -> dict:
    trace, = [t for t in fig["data"] if t["name"].startswith(prefix)]
    return trace


def test_chart_points_are_the_rows(mlp_section):
    _, section = mlp_section
    rows = _rows(MLP)
    figs = _figures(section)
    assert set(figs) == {"ddp", "zero1", "fsdp"}
    for strategy, fig in figs.items():
        measured = _trace(fig, "measured")
        assert measured["x"] == [1, 2, 3, 4, 6, 8]
        for n, got, y in zip(measured["x"], measured["customdata"], measured["y"]):
            want = max(r["peak_bytes"] for r in rows if r["strategy"] == strategy and r["world"] == n)
            assert got == want and y == pytest.approx(want / 2 ** 20)
        fitted, checked = _trace(fig, "predicted at a fitted"), _trace(fig, "predicted at a checked")
        assert checked["x"] == [2, 4] and checked["marker"]["symbol"] != fitted["marker"]["symbol"]
        # FSDP on one rank is another program: measured, not predicted
        assert fitted["x"] == ([3, 6, 8] if strategy == "fsdp" else [1, 3, 6, 8])
        psi = rows[0]["psi"]
        assert _trace(fig, "model state")["customdata"] == [zero_model_state(strategy, psi, n).total
                                                            for n in measured["x"]]


def test_table_holds_the_rows_bytes(mlp_section):
    page, section = mlp_section
    rows = _rows(MLP)
    table = section["table"]
    records = json.loads(page["files"][table["json"]])
    assert len(records) == len(table["rows"]) == 18
    for rec, row in zip(records, table["rows"]):
        ranks = [r for r in rows if r["strategy"] == rec["strategy"] and r["world"] == rec["world"]]
        top = max(ranks, key=lambda r: r["peak_bytes"])
        assert rec["measured_peak_bytes"] == row["measured__sort"] == top["peak_bytes"]
        assert row["measured"] == f"{top['peak_bytes']:,}"
        assert rec["batch_per_rank"] == 24 // rec["world"]
        assert {c: rec[f"{c}_bytes"] for c in top["peak"]} == top["peak"]
        assert rec["zero_formula_model_state_bytes"] == pytest.approx(
            zero_model_state(rec["strategy"], top["psi"], rec["world"]).total, abs=0.5)
        if rec["role"] == "not predicted":
            assert (rec["strategy"], rec["world"], row["predicted"]) == ("fsdp", 1, "-")
            continue
        diffs = rec["diff_bytes_by_rank"]
        worst = max(diffs.values(), key=abs)
        assert row["diff__sort"] == worst and row["diff"].startswith("0 on every rank" if worst == 0 else f"{worst:+,}")
        if rec["role"] == "checked":  # the MLP stack's checked ranks are exact (docs/sharding.md#prediction)
            assert set(diffs.values()) == {0}
            left = max(rec["rebuild_leftover_bytes_by_rank"].values(), default=0)
            assert top["peak_bytes"] - left <= rec["predicted_peak_bytes"] <= top["peak_bytes"]
    n2 = next(r for r in records if (r["strategy"], r["world"]) == ("ddp", 2))
    assert n2["measured_peak_bytes"] == max(r["peak_bytes"] for r in rows if (r["strategy"], r["world"]) == ("ddp", 2))
    assert section["summary"] == "every checked rank predicted to the byte"


def test_gpt2_fitted_as_the_docs_fit_it():
    """GPT-2's G = 24 rows fitted at N = 1, 3, 6 and FSDP's also on the G = 32, N = 8 file
    (FIT_PLANS): every rank at N = 2 and 4 predicted to the byte; N = 8 checked, not fitted."""
    files, problems = load_sharding_rows(REPO / "data")
    assert problems == []
    page, problems = sharding_page([f for f in files if f[0].name.startswith("gpt2-tiny-")])
    assert problems == []
    g24, n8 = sorted(page["sections"], key=lambda s: s["file"])
    assert g24["file"].endswith("gpt2-tiny-g24.jsonl") and g24["extra"] == ["data/sharding/gpt2-tiny-g32-fsdp-n8.jsonl"]
    records = json.loads(page["files"][g24["table"]["json"]])
    near = [r for r in records if r["world"] in (2, 4)]
    assert len(near) == 6 and all(r["role"] == "checked" for r in near)
    assert [(r["strategy"], r["world"], r["diff_bytes_by_rank"]) for r in near
            if set(r["diff_bytes_by_rank"].values()) != {0}] == []
    assert {r["role"] for r in records if r["world"] == 8} == {"checked"}
    assert "not every rank at" in g24["summary"] and "N=8" in g24["summary"].split("not every rank at")[1]
    assert n8["checked_worlds"] == "" and n8["summary"].startswith("no N checked")  # one world: all fit
    fig, = _figures(n8).values()
    assert _trace(fig, "measured")["x"] == [8] and not [t for t in fig["data"] if "checked" in t["name"]]


def test_page_in_nav_and_offline(tmp_path):
    data = tmp_path / "data"
    (data / "sharding").mkdir(parents=True)
    shutil.copy(MLP, data / "sharding" / MLP.name)
    (data / "sharding" / "broken.jsonl").write_text("{not json\n")
    ctx = build_context(tmp_path / "results", data)
    assert {"title": "Sharding", "path": "sharding.html"} in ctx["nav"]
    assert any("broken.jsonl" in p for p in ctx["problems"])
    out = tmp_path / "out"
    build_site(tmp_path / "results", data, out)
    html = (out / "sharding.html").read_text(encoding="utf-8")
    assert 'href="sharding.html"' in (out / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", html), "a remote URL on the Sharding page"
    assert 'src="static/plotly.min.js"' in html and html.count('class="chart"') == 3
    assert "gloo" in html and "reserved" in html and "collectives freed on the caller" in html
    csv = out / "tables" / "sharding--mlp-g24-peaks.csv"
    assert csv.is_file() and "measured_peak_bytes" in csv.read_text(encoding="utf-8").splitlines()[0]


def test_no_data_no_page(tmp_path):
    ctx = build_context(tmp_path / "results", tmp_path / "data")
    assert all(p["path"] != "sharding.html" for p in ctx["pages"])
    assert all(n["path"] != "sharding.html" for n in ctx["nav"])
