"""memlab.site: analysis, page contexts, rendering; determinism, escaping, offline, no torch."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlab import results as R
from memlab.site import analysis as A
from memlab.site import build_site
from memlab.site.context import build_context
from memlab.site.render import MARKER
from site_fixtures import EVIL, MiB, chunking_records, make_inputs, measurement, write_jsonl

REPO = Path(__file__).resolve().parents[1]


def _runs(tmp_path, records):
    return R.load_runs([write_jsonl(tmp_path / "r.jsonl", records)])


def _figures(html: str) -> list[dict]:
    import html as htmlmod

    return [json.loads(htmlmod.unescape(m)) for m in re.findall(r'data-figure="([^"]*)"', html)]


# -- analysis -----------------------------------------------------------------------------------
def test_pareto_front():
    points = [(10, 100), (5, 50), (5, 40), (20, 100), (1, 10), (30, 200)]
    assert A.pareto_front(points) == [4, 1, 0, 5]
    assert A.pareto_front([]) == []


def test_swept_param_and_labels(tmp_path):
    df = _runs(tmp_path, chunking_records())
    assert A.swept_param(df[df["status"] == "ok"]) == "chunk_size"
    labels = A.line_labels(df, "chunk_size")
    assert list(labels) == ["unchunked", "slice_loop", "slice_loop", "slice_loop", "vmap_chunks", "slice_loop"]
    more = _runs(tmp_path, chunking_records() + [measurement("unchunked", "chunking", {"n": 4000, "d": 256}, MiB)])
    assert A.swept_param(more) == "chunk_size"
    assert A.line_labels(more, "chunk_size").iloc[-1] == "unchunked (n=4000)"
    assert A.swept_param(df.iloc[:1]) is None


def test_savings_against_the_baseline(tmp_path):
    df = _runs(tmp_path, chunking_records())
    out = A.savings(df, "unchunked")
    assert out["baseline"]["technique"] == "unchunked"
    got = [(e["row"]["technique"], e["row"]["peak_allocated_bytes"], round(e["saving"], 4), e["throughput_ratio"])
           for e in out["techniques"]]
    assert got == [("vmap_chunks", 10 * MiB, 0.5, 0.25), ("slice_loop", 13 * MiB, 0.35, 2750 / 4000),
                   ("unchunked", 20 * MiB, 0.0, 1.0)]
    assert A.savings(df, "nope") is None


def test_comparable_ignores_other_workload_configs(tmp_path):
    recs = chunking_records() + [measurement("slice_loop", "chunking", {"n": 9999, "d": 256, "chunk_size": 1}, MiB)]
    out = A.savings(_runs(tmp_path, recs), "unchunked")
    assert [e["row"]["peak_allocated_bytes"] for e in out["techniques"]][1] == 13 * MiB


# -- contexts -----------------------------------------------------------------------------------
def test_context_pages_and_overview(tmp_path):
    results, data = make_inputs(tmp_path)
    ctx = build_context(results, data)
    assert [p["path"] for p in ctx["pages"]] == [
        "index.html", "family-chunking.html", "seed-chunked-slicing.html", "history.html", "timelines.html",
        "methodology.html"]
    entry = ctx["pages"][0]["entries"][0]
    assert (entry["family"], entry["device"], entry["baseline"]) == ("chunking", "cpu", "unchunked")
    assert entry["best"]["technique"] == "vmap_chunks" and entry["best"]["peer"] is True
    assert (entry["best"]["peak"], entry["best"]["saving"], entry["best"]["throughput"]) == ("10.0 MiB", "-50%", "-75%")
    assert entry["environments"] == ["cpu: CPU Test CPU, 2 threads · torch 2.13.0+cpu · memlab 0.1.0 @ 0123456789ab (run chunking)"]
    assert [n["title"] for n in ctx["nav"]] == ["Overview", "Family: chunking", "Timelines", "History",
                                                "Seed: chunked-slicing", "Methodology"]
    assert ctx["problems"] == []
    timelines = next(p for p in ctx["pages"] if p["path"] == "timelines.html")
    assert [(f["family"], f["setting"], len(f["sections"])) for f in timelines["families"]] == [
        ("chunking", "cpu · float32 · train", 2)]
    assert timelines["families"][0]["sections"][0]["top"][0]["stack"] == (
        "SliceBackward0 › aten::slice_backward › aten::zeros › aten::empty")


def test_family_figures_mark_floor_peers_and_pareto(tmp_path):
    results, data = make_inputs(tmp_path)
    family = build_context(results, data)["pages"][1]
    section = family["sections"][0]
    assert section["swept"] == "chunk_size"
    alloc, resident, step, scatter = (json.loads(c["figure"]) for c in section["charts"])
    names = [t["name"] for t in alloc["data"]]
    assert names == ["slice_loop", "slice_loop analytic floor", "unchunked (no chunk_size)",
                     "unchunked (no chunk_size) analytic floor", "vmap_chunks (peer)"]
    assert alloc["data"][0]["x"] == [250, 500, 1000] and alloc["data"][0]["y"] == [13.0, 14.0, 16.0]
    assert alloc["data"][1]["y"] == [7.0, 8.0, 10.0] and alloc["data"][1]["line"]["dash"] == "dot"
    assert alloc["data"][2]["x"] == [250, 1000] and alloc["data"][2]["y"] == [20.0, 20.0]
    peer = alloc["data"][4]
    assert peer["line"]["dash"] == "dash" and peer["marker"]["symbol"] == "diamond-open"
    assert resident["layout"]["yaxis"]["title"]["text"] == "peak resident (MiB)"
    front = scatter["data"][0]
    assert front["name"] == "Pareto front" and front["x"] == [10.0, 13.0, 20.0] and front["y"] == [1000.0, 2750.0, 4000.0]
    assert [r["status"] for r in section["rows"]].count("oom") == 1


# -- the built site ----------------------------------------------------------------------------
def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_build_site_writes_every_page(tmp_path):
    results, data = make_inputs(tmp_path)
    index = build_site(results, data, tmp_path / "out")
    assert index == tmp_path / "out" / "index.html"
    names = sorted(p.name for p in (tmp_path / "out").glob("*.html"))
    assert names == ["family-chunking.html", "history.html", "index.html", "methodology.html",
                     "seed-chunked-slicing.html", "timelines.html"]
    html = index.read_text()
    assert "Best for memory" in html and "vmap_chunks" in html and "-50%" in html
    seed = (tmp_path / "out" / "seed-chunked-slicing.html").read_text()
    assert "slicing in a loop spikes memory in backward" in seed and "reproduced" in seed
    history = _figures((tmp_path / "out" / "history.html").read_text())
    assert len(history) == 1 and len(history[0]["data"]) == 4
    assert history[0]["data"][0]["x"] == ["2023-11-14 22:13:20", "2023-11-15 22:13:20"]
    timelines = _figures((tmp_path / "out" / "timelines.html").read_text())
    assert len(timelines) == 3  # overlay + one per timeline
    assert "aten::slice_backward" in (tmp_path / "out" / "timelines.html").read_text()


def test_same_inputs_same_bytes(tmp_path):
    results, data = make_inputs(tmp_path)
    build_site(results, data, tmp_path / "one")
    build_site(results, data, tmp_path / "two")
    one, two = _digest(tmp_path / "one"), _digest(tmp_path / "two")
    assert one == two and len(one) > 8
    build_site(results, data, tmp_path / "one")  # rebuilding over a previous build replaces it
    assert _digest(tmp_path / "one") == two


def test_no_torch_import(tmp_path):
    results, data = make_inputs(tmp_path)
    code = ("import sys; from pathlib import Path; from memlab.site import build_site; "
            f"build_site(Path({str(results)!r}), Path({str(data)!r}), Path({str(tmp_path / 'o')!r})); "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_strings_from_results_are_escaped(tmp_path):
    results, data = make_inputs(tmp_path, evil=True)
    build_site(results, data, tmp_path / "out")
    pages = {p.name: p.read_text() for p in (tmp_path / "out").glob("*.html")}
    assert any(EVIL.replace("<", "&lt;")[:20] in html or "&lt;script&gt;" in html for html in pages.values())
    for name, html in pages.items():
        assert "<script>window" not in html, name
        assert "<img src=x" not in html, name
        assert "onerror=window" not in html or "&lt;img" in html, name
        for fig in _figures(html):  # plotly renders pseudo-HTML: names must arrive entity-escaped
            text = json.dumps(fig)
            assert "<script" not in text and "<img" not in text, name
    evil_pages = [n for n in pages if n.startswith("family-") and n != "family-chunking.html"]
    assert len(evil_pages) == 1 and re.fullmatch(r"family-[a-z0-9_-]+\.html", evil_pages[0])


def test_offline_no_remote_references(tmp_path):
    results, data = make_inputs(tmp_path)
    build_site(results, data, tmp_path / "out")
    for path in (tmp_path / "out").rglob("*"):
        if path.suffix in (".html", ".css") or path.name == "site.js":
            text = path.read_text()
            assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), path
            assert not re.search(r"url\(\s*[\"']?(https?:)?//", text), path
            assert "@import" not in text, path
    html = (tmp_path / "out" / "index.html").read_text()
    assert '<script src="static/plotly.min.js" defer></script>' in html
    assert "default-src 'self'" in html


def test_shipped_plotly_is_the_packaged_one():
    plotly = pytest.importorskip("plotly")
    packaged = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    shipped = REPO / "site" / "static" / "plotly.min.js"
    assert shipped.read_bytes()[:200] == packaged.read_bytes()[:200]  # the same plotly.js version


def test_malformed_input_warns_and_is_listed(tmp_path):
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "zz-partial.jsonl", chunking_records(), truncate_last=True)
    (data / "timelines" / "bad.json").write_text("{")
    with pytest.warns(R.ResultsWarning) as record:
        index = build_site(results, data, tmp_path / "out")
    messages = [str(w.message) for w in record]
    assert any("zz-partial.jsonl:6" in m for m in messages)
    assert any("bad.json" in m for m in messages)
    html = index.read_text()
    assert "Data problems" in html and "2 problem(s) in the input files" in html
    method = (tmp_path / "out" / "methodology.html").read_text()
    assert "zz-partial.jsonl:6: not valid JSON" in method and "bad.json" in method


def test_extra_runs_are_included(tmp_path):
    results, data = make_inputs(tmp_path)
    extra = write_jsonl(tmp_path / "quick.jsonl", [measurement("slice_loop", "chunking",
                                                               {"n": 2000, "d": 256, "chunk_size": 125}, 11 * MiB)])
    ctx = build_context(results, data, extra_runs=[extra])
    assert "quick" in set(ctx["runs"]["run"])
    build_site(results, data, tmp_path / "out", extra_runs=[extra])
    assert "quick.jsonl" in (tmp_path / "out" / "index.html").read_text()


def test_empty_inputs_still_build(tmp_path):
    index = build_site(tmp_path / "no-results", tmp_path / "no-data", tmp_path / "out")
    assert "No sweep measurements found" in index.read_text()
    assert "No asv results found" in (tmp_path / "out" / "history.html").read_text()


def test_refuses_to_overwrite_a_foreign_folder(tmp_path):
    results, data = make_inputs(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(ValueError, match="non-empty folder that memlab did not build"):
        build_site(results, data, tmp_path / "mine")
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"
    build_site(results, data, tmp_path / "site")
    assert (tmp_path / "site" / MARKER).exists()


def test_config_groups_split_workload_configs(tmp_path):
    quick = [measurement("unchunked", "chunking", {"n": 4000, "d": 256}, 40 * MiB),
             measurement("slice_loop", "chunking", {"n": 4000, "d": 256, "chunk_size": 400}, 30 * MiB)]
    df = _runs(tmp_path, chunking_records() + quick)
    ok = df[df["status"] == "ok"]
    assert A.swept_param(ok) == "chunk_size"
    groups = A.config_groups(df, "chunk_size")
    assert [(cfg, len(rows)) for cfg, rows in groups] == [({"n": 2000}, 6), ({"n": 4000}, 2)]
    (config, rows), = A.config_groups(df.iloc[:1], "chunk_size")
    assert config == {} and len(rows) == 1
    results, data = make_inputs(tmp_path / "in")
    extra = write_jsonl(tmp_path / "quick.jsonl", quick)
    ctx = build_context(results, data, extra_runs=[extra])
    entries = ctx["pages"][0]["entries"]
    assert [(e["config"], e["best"]["technique"], e["best"]["saving"]) for e in entries] == [
        ("n=2000", "vmap_chunks", "-50%"), ("n=4000", "slice_loop", "-25%")]
    sections = ctx["pages"][1]["sections"]
    assert [s["config"] for s in sections] == ["n=2000", "n=4000"]


def test_savings_compares_at_the_largest_baseline_configuration(tmp_path):
    recs = [measurement("residual", "reversible", {"depth": d}, d * MiB) for d in (4, 16)]
    recs += [measurement("reversible", "reversible", {"depth": d}, d * MiB // 2) for d in (4, 16)]
    out = A.savings(_runs(tmp_path, recs), "residual")
    assert out["baseline"]["params"] == {"depth": 16}
    assert [(e["row"]["technique"], e["row"]["peak_allocated_bytes"]) for e in out["techniques"]] == [
        ("reversible", 8 * MiB), ("residual", 16 * MiB)]


def test_one_pareto_front_per_workload_configuration(tmp_path):
    recs = [measurement(t, "reversible", {"depth": d}, d * MiB * k, samples_per_s=100.0 * k)
            for d in (4, 16) for t, k in (("residual", 2), ("reversible", 1))]
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "reversible.jsonl", recs)
    page = next(p for p in build_context(results, data)["pages"] if p["path"] == "family-reversible.html")
    section, = page["sections"]
    assert section["swept"] == "depth"
    scatter = json.loads(section["charts"][-1]["figure"])
    fronts = [(t["name"], t["x"], t["y"]) for t in scatter["data"] if t["name"].startswith("Pareto")]
    assert fronts == [("Pareto front (depth=4)", [4.0, 8.0], [100.0, 200.0]),
                      ("Pareto front (depth=16)", [16.0, 32.0], [100.0, 200.0])]


def test_activation_chart_when_techniques_state_activation_memory(tmp_path):
    """Reversible rows carry measured and expected activation bytes: a chart draws both."""
    def rev(technique, depth, measured, expected):
        rec = measurement(technique, "reversible", {"depth": depth, "batch": 8}, 40 * MiB, workload="stack")
        rec["extra"] = {"activation_peak_bytes": measured * MiB,
                        "expected_activation_bytes": {technique: expected * MiB}}
        return rec

    records = [rev("residual", 4, 20, 19), rev("residual", 16, 70, 68),
               rev("reversible", 4, 11, 11), rev("reversible", 16, 11, 11)]
    data = tmp_path / "data" / "sweeps"
    data.mkdir(parents=True)
    write_jsonl(data / "rev.jsonl", records)
    ctx = build_context(tmp_path / "results", tmp_path / "data")
    (page,) = [p for p in ctx["pages"] if p.get("family") == "reversible"]
    charts = [json.loads(c["figure"]) for c in page["sections"][0]["charts"]]
    (act,) = [c for c in charts if c["layout"]["title"]["text"].startswith("Activation peak vs depth")]
    lines = {t["name"]: t["y"] for t in act["data"]}
    assert lines == {"residual": [20.0, 70.0], "residual expected": [19.0, 68.0],
                     "reversible": [11.0, 11.0], "reversible expected": [11.0, 11.0]}
    # families that state no activation figures get no such chart
    chunk = build_context(*make_inputs(tmp_path / "other"))["pages"][1]
    assert not any("Activation" in json.loads(c["figure"])["layout"]["title"]["text"]
                   for c in chunk["sections"][0]["charts"])


def test_a_cross_of_workload_sweeps_gives_one_section_per_swept_parameter(tmp_path):
    """depth swept at batch 512 and batch swept at depth 16 (a cross): two sweeps, not one sweep
    per depth with single points; the centre row (depth 16, batch 512) is in both."""
    cross = [(4, 512), (16, 512), (64, 512), (16, 128), (16, 1024)]
    records = [measurement(t, "reversible", {"depth": d, "batch": b, "width": 8}, (d * b) * 1024, workload="stack")
               for t in ("residual", "reversible") for d, b in cross]
    records.append(measurement("residual", "reversible", {"depth": 2, "batch": 32, "width": 4}, MiB, workload="stack"))
    sections = A.sweep_sections(_runs(tmp_path, records))
    summary = [(swept, config, sorted({(p["depth"], p["batch"]) for p in group["params"]}))
               for config, swept, group in sections]
    assert summary == [
        ("batch", {"depth": 16, "width": 8}, [(16, 128), (16, 512), (16, 1024)]),
        ("depth", {"batch": 512, "width": 8}, [(4, 512), (16, 512), (64, 512)]),
        (None, {"batch": 32, "depth": 2, "width": 4}, [(2, 32)]),
    ]
    # one varying workload parameter: unchanged, one sweep per configuration
    one = A.sweep_sections(_runs(tmp_path, chunking_records()))
    assert [(swept, config) for config, swept, _ in one] == [("chunk_size", {})]


def test_step_times_show_their_spread_relative_time_and_load(tmp_path):
    """Issue 12 on the site: median ± IQR in tables, the relative step time as a column and the
    charted figure, quartiles as error bars, points under load ringed; schema-1 rows show '-'."""
    from site_fixtures import timed

    base = {"n": 2000, "d": 256}
    recs = [timed(measurement("unchunked", "chunking", base, 20 * MiB, baseline=True), [0.010, 0.010, 0.011, 0.012],
                  relative=1.0, reference=0.010),
            *[timed(measurement("slice_loop", "chunking", {**base, "chunk_size": c}, (12 + c // 250) * MiB),
                    [0.018, 0.019, 0.020, 0.024], relative=1.8, reference=0.011, load=(3.1, 2.8) if c == 500 else (0.2, 0.3))
              for c in (250, 500, 1000)]]
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "chunking.jsonl", recs)
    ctx = build_context(results, data)
    family = next(p for p in ctx["pages"] if p["path"] == "family-chunking.html")
    section, = family["sections"]
    rows = {(r["technique"], r["params"]): r for r in section["rows"]}
    loaded = rows[("slice_loop", "chunk_size=500")]
    assert (loaded["step"], loaded["relative"], loaded["under_load"]) == ("19.5 ± 2.2 ms", "1.80×", True)
    assert loaded["load"] == "load 3.10 → 2.80 on 2 cores" and not rows[("slice_loop", "chunk_size=250")]["under_load"]
    step = next(json.loads(c["figure"]) for c in section["charts"] if "error bars" in c["caption"]
                and "Step time" in c["caption"])
    assert step["layout"]["yaxis"]["title"]["text"] == "step time (× the workload's reference step)"
    line = next(t for t in step["data"] if t["name"] == "slice_loop")
    assert line["y"] == [1.8, 1.8, 1.8]
    # quartiles 0.01875 and 0.021 around the median 0.0195, scaled by 1.8 / 0.0195
    assert line["error_y"]["arrayminus"][0] == pytest.approx(1.8 * (0.0195 - 0.01875) / 0.0195, abs=1e-6)
    assert line["error_y"]["array"][0] == pytest.approx(1.8 * (0.021 - 0.0195) / 0.0195, abs=1e-6)
    ring, = [t for t in step["data"] if t["name"].startswith("under load")]
    assert ring["x"] == [500] and ring["y"] == [1.8]
    scatter = json.loads(section["charts"][-1]["figure"])
    marks = next(t for t in scatter["data"] if t["name"] == "slice_loop")
    assert marks["error_y"]["array"][0] > 0 and any(t["name"].startswith("under load") for t in scatter["data"])
    html = build_site(results, data, tmp_path / "out").read_text()
    assert "relative step" in html and "1.80×" in html and "the reference step" in html
    fam_html = (tmp_path / "out" / "family-chunking.html").read_text()
    assert "19.5 ± 2.2 ms" in fam_html and "⚠ under load" in fam_html and "Ringed points" in fam_html


def test_schema1_rows_show_a_dash_for_missing_timing(tmp_path):
    results, data = make_inputs(tmp_path)
    section = build_context(results, data)["pages"][1]["sections"][0]
    ok = next(r for r in section["rows"] if r["technique"] == "unchunked")
    assert (ok["step"], ok["relative"], ok["load"], ok["under_load"]) == ("500.0 ms", "-", "-", False)
    step = next(json.loads(c["figure"]) for c in section["charts"] if "Step time in ms" in c["caption"])
    assert step["layout"]["yaxis"]["title"]["text"] == "step time (ms)"
    assert not any("error_y" in t for t in step["data"])
