"""memlab.site: ranking, page contexts, rendering; determinism, escaping, offline, no torch."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlab import results as R
from memlab.site import ranking as A
from memlab.site import figures as F
from memlab.site import build_site
from memlab.site.context import build_context
from memlab.site.render import MARKER
from process_checks import HANG_GUARD_S
from site_fixtures import (EVIL, MiB, chunking_records, chunking_variants, make_inputs, measurement,
                           reproduction, reversible_records, write_jsonl)

REPO = Path(__file__).resolve().parents[1]


def _runs(tmp_path, records):
    return R.load_runs([write_jsonl(tmp_path / "r.jsonl", records)])


def _figures(html: str) -> list[dict]:
    import html as htmlmod

    return [json.loads(htmlmod.unescape(m)) for m in re.findall(r'data-figure="([^"]*)"', html)]


# -- ranking ------------------------------------------------------------------------------------
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
    assert (entry["family"], entry["baseline"], entry["n_configs"]) == ("chunking", "unchunked", 1)
    panel, = entry["panels"]
    memory = panel["answers"][0]
    assert (memory["head"], memory["technique"], memory["peer"]) == ("Lowest memory", "vmap_chunks", True)
    assert memory["text"] == "10.0 MiB, -50% against unchunked (20.0 MiB)"
    assert memory["why"] == "its peak holds 10.0 MiB less than the baseline's (20.0 MiB → 10.0 MiB)."
    techniques = [(r["technique"], r["saving"], r["throughput"]) for r in panel["table"]["rows"]]
    assert techniques == [("vmap_chunks", "-50%", "-75%"), ("slice_loop", "-35%", "-31%"),
                          ("unchunked", "baseline", "baseline")]
    assert entry["environments"] == ["cpu: CPU Test CPU, 2 threads · torch 2.13.0+cpu · memlab 0.1.0 @ 0123456789ab (run chunking)"]
    assert [n["title"] for n in ctx["nav"]] == ["Overview", "Family: chunking", "Timelines", "History",
                                                "Seed: chunked-slicing", "Methodology"]
    assert ctx["problems"] == []
    timelines = next(p for p in ctx["pages"] if p["path"] == "timelines.html")
    assert [(f["family"], f["setting"], len(f["sections"])) for f in timelines["families"]] == [
        ("chunking", "cpu · float32 · train", 2)]
    assert timelines["families"][0]["sections"][0]["top"]["rows"][0]["stack"] == (
        "SliceBackward0 › aten::slice_backward › aten::zeros › aten::empty")


def test_family_figures_mark_floor_peers_and_pareto(tmp_path):
    results, data = make_inputs(tmp_path)
    family = build_context(results, data)["pages"][1]
    section = family["sections"][0]
    assert section["swept"] == "chunk_size"
    assert [c["title"] for c in section["charts"]] == ["Peak allocated vs chunk_size", "Peak resident vs chunk_size",
                                                       "Step time vs chunk_size", "Throughput vs peak allocated"]
    alloc, resident, step, scatter = (json.loads(c["figure"]) for c in section["charts"])
    assert "title" not in alloc["layout"]  # the heading is HTML, never under plotly's toolbar
    names = [(t["name"], t.get("showlegend", True)) for t in alloc["data"]]
    assert names == [("slice_loop", True), ("slice_loop: analytic floor", False), ("unchunked", True),
                     ("unchunked: analytic floor", False), ("vmap_chunks (peer)", True)]
    assert alloc["data"][0]["x"] == [250, 500, 1000] and alloc["data"][0]["y"] == [13.0, 14.0, 16.0]
    assert alloc["data"][1]["y"] == [7.0, 8.0, 10.0] and alloc["data"][1]["line"]["dash"] == "dot"
    assert alloc["data"][2]["x"] == [250, 1000] and alloc["data"][2]["y"] == [20.0, 20.0]
    assert alloc["data"][2]["line"]["dash"] == "dashdot" and "no chunk_size" in alloc["data"][2]["hovertext"][0]
    peer = alloc["data"][4]
    assert peer["line"]["dash"] == "dash" and peer["marker"]["symbol"] == "diamond-open"
    assert resident["layout"]["yaxis"]["title"]["text"] == "peak resident (MiB)"
    front = scatter["data"][0]
    assert front["name"] == "Pareto front" and front["x"] == [10.0, 13.0, 20.0] and front["y"] == [1000.0, 2750.0, 4000.0]
    assert [r["status"] for r in section["table"]["rows"]].count("oom") == 1


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
    assert "Lowest memory" in html and "vmap_chunks" in html and "-50%" in html
    downloads = sorted(p.name for p in (tmp_path / "out" / "tables").iterdir())
    assert "family-chunking--cpu-float32-train-measurements.csv" in downloads and len(downloads) % 2 == 0
    seed = (tmp_path / "out" / "seed-chunked-slicing.html").read_text()
    assert "slicing in a loop spikes memory in backward" in seed and "reproduced" in seed
    history = _figures((tmp_path / "out" / "history.html").read_text())
    drawn = [t for t in history[0]["data"] if t["x"] != [None]]  # not the legend entries
    assert len(history) == 1 and len([t for t in drawn if t["name"] != "failed"]) == 4
    # the fixture's slice_loop on cuda is null (failed) at both commits: one x mark each (NOTE [ failed, skipped,
    # version ] in memlab.site.history)
    assert [len(t["x"]) for t in drawn if t["name"] == "failed"] == [4]
    assert history[0]["data"][0]["x"] == ["aaaaaaaa", "bbbbbbbb"]  # commits in order (by date: not in git)
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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=REPO)
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
    entry, = ctx["pages"][0]["entries"]  # one section for the family, a panel per configuration
    assert [(p["label"], p["answers"][0]["technique"], p["table"]["rows"][0]["saving"]) for p in entry["panels"]] == [
        ("n=2000", "vmap_chunks", "-50%"), ("n=4000", "slice_loop", "-25%")]
    # the --run file's configuration is "your run": first in the summary table, its panel shown first
    assert [(r["config"], r["yours"]) for r in entry["summary"]["rows"]] == [("n=4000", "your run"), ("n=2000", "")]
    assert [(p["yours"], p["default"]) for p in entry["panels"]] == [("", False), ("your run", True)]
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
    (act,) = [json.loads(c["figure"]) for c in page["sections"][0]["charts"] if c["title"] == "Activation peak vs depth"]
    lines = {t["name"]: t["y"] for t in act["data"]}
    assert lines == {"residual": [20.0, 70.0], "residual: expected": [19.0, 68.0],
                     "reversible": [11.0, 11.0], "reversible: expected": [11.0, 11.0]}
    # families that state no activation figures get no such chart
    chunk = build_context(*make_inputs(tmp_path / "other"))["pages"][1]
    assert not any("Activation" in c["title"] for c in chunk["sections"][0]["charts"])


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


def _demo_like_chunking() -> list[dict]:
    """The committed sweep's shape (chunk sizes at x_requires_grad=True, two at False, the baseline at
    both) plus a demo run's rows at d=128 (one chunk size) and a plug-in with a knob of its own."""
    big, small = {"n": 10000, "d": 256}, {"n": 2000, "d": 128}
    recs = []
    for xg, sizes in ((True, (100, 250, 1000, 2500)), (False, (100, 2500))):
        recs.append(measurement("unchunked", "chunking", {**big, "x_requires_grad": xg}, 40 * MiB, baseline=True))
        recs += [measurement(t, "chunking", {**big, "x_requires_grad": xg, "chunk_size": c}, (c // 100 + 1) * MiB)
                 for t in ("slice_loop", "vmap_chunk") for c in sizes]
    recs.append(measurement("unchunked", "chunking", {**small, "x_requires_grad": True}, 9 * MiB, baseline=True))
    recs += [measurement(t, "chunking", {**small, "x_requires_grad": True, "chunk_size": 200}, 5 * MiB)
             for t in ("slice_loop", "vmap_chunk")]
    recs += [measurement("half_and_half", "chunking", {**big, "x_requires_grad": True, "split": s}, s * MiB)
             for s in (2, 4, 8)]
    return recs


def test_a_section_is_drawn_against_what_varies_within_its_series(tmp_path):
    """Issue 29: the demo's d=128 rows beside the committed sweep made x_requires_grad the x-axis
    (constant within every chunk size's series); now chunk_size, one section per x_requires_grad,
    the d=128 rows a section of their own, and a plug-in's own knob (split) an axis of its own with
    the baseline as its flat reference; no chunk_size section holds the plug-in."""
    sections = A.sweep_sections(_runs(tmp_path, _demo_like_chunking()))
    summary = [(swept, config, sorted(set(g["technique"]))) for config, swept, g in sections]
    assert summary == [
        ("chunk_size", {"d": 256, "n": 10000, "x_requires_grad": False}, ["slice_loop", "unchunked", "vmap_chunk"]),
        ("chunk_size", {"d": 256, "n": 10000, "x_requires_grad": True}, ["slice_loop", "unchunked", "vmap_chunk"]),
        ("split", {"d": 256, "n": 10000, "x_requires_grad": True}, ["half_and_half", "unchunked"]),
        (None, {"d": 128, "n": 2000, "x_requires_grad": True}, ["slice_loop", "unchunked", "vmap_chunk"]),
    ]
    for config, swept, group in sections:  # the x-axis varies within at least one series
        if swept:
            assert A._on_lines(A.ranked(group), swept), (swept, config)
    assert A.split_by(_runs(tmp_path, _demo_like_chunking()), "chunk_size") == ["d", "n", "x_requires_grad"]


def test_the_family_page_says_what_a_section_is_split_by(tmp_path):
    data = tmp_path / "data" / "sweeps"
    data.mkdir(parents=True)
    write_jsonl(data / "c.jsonl", _demo_like_chunking())
    ctx = build_context(tmp_path / "results", tmp_path / "data")
    (page,) = [p for p in ctx["pages"] if p.get("family") == "chunking"]
    first = page["sections"][0]
    assert first["swept"] == "chunk_size" and first["split_by"] == ["d", "n", "x_requires_grad"]
    assert [c["title"] for c in first["charts"]][0] == "Peak allocated vs chunk_size"
    plug = next(s for s in page["sections"] if s["swept"] == "split")
    fig = json.loads(plug["charts"][0]["figure"])
    drawn = {t["name"]: (t["x"], t["line"]["dash"]) for t in fig["data"] if t.get("meta", {}).get("technique")
             and "floor" not in t["name"]}
    assert drawn["half_and_half"] == ([2, 4, 8], "solid")  # a technique, drawn by its knob; not a flat line
    assert drawn["unchunked"][1] == "dashdot"  # the baseline: one measurement across the range


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
    for r in recs:
        r["relative_to"] = "unchunked"  # issue 24: timed against the family baseline, which the row names
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "chunking.jsonl", recs)
    ctx = build_context(results, data)
    family = next(p for p in ctx["pages"] if p["path"] == "family-chunking.html")
    section, = family["sections"]
    rows = {(r["technique"], r["params"]): r for r in section["table"]["rows"]}
    loaded = rows[("slice_loop", "chunk_size=500")]
    assert (loaded["step"], loaded["relative"], loaded["under_load"]) == ("19.5 ± 2.2 ms", "1.80×", True)
    assert loaded["load"] == "load 3.10 → 2.80 on 2 cores" and not rows[("slice_loop", "chunk_size=250")]["under_load"]
    step = next(json.loads(c["figure"]) for c in section["charts"] if c["title"] == "Step time vs chunk_size")
    assert step["layout"]["yaxis"]["title"]["text"] == "step time (× unchunked's step)"
    line = next(t for t in step["data"] if t["name"] == "slice_loop")
    assert "1.80× unchunked's step" in line["hovertext"][0]
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
    assert "relative step" in html and "1.80×" in html and "its family baseline's step" in html
    fam_html = (tmp_path / "out" / "family-chunking.html").read_text()
    assert "19.5 ± 2.2 ms" in fam_html and "⚠ under load" in fam_html and "Ringed points" in fam_html


def test_schema1_rows_show_a_dash_for_missing_timing(tmp_path):
    results, data = make_inputs(tmp_path)
    section = build_context(results, data)["pages"][1]["sections"][0]
    ok = next(r for r in section["table"]["rows"] if r["technique"] == "unchunked")
    assert (ok["step"], ok["relative"], ok["load"], ok["under_load"]) == ("500.0 ms", "-", "-", False)
    step = next(json.loads(c["figure"]) for c in section["charts"] if "Step time in ms" in c["caption"])
    assert step["layout"]["yaxis"]["title"]["text"] == "step time (ms)"
    assert not any("error_y" in t for t in step["data"])


# -- issue 17: one visual language, tables, the index's answers, permalinks ---------------------------
def _trace_colors(fig: dict) -> dict[str, str]:
    """Technique -> colour as a figure draws it (line or marker colour; per bar for bar charts)."""
    out = {}
    for t in fig["data"]:
        color = (t.get("line") or {}).get("color") or (t.get("marker") or {}).get("color")
        if isinstance(color, list):
            for name, c in zip(t.get("y") if t.get("orientation") == "h" else t["x"], color):
                out[name.split(" (")[0]] = c
        elif color and not t["name"].startswith(("Pareto", "under load")):
            out[t["name"].split(" (")[0].split(":")[0]] = color
    return out


def test_one_colour_per_technique_on_every_page_and_chart(tmp_path):
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "chunking.jsonl", chunking_variants())
    ctx = build_context(results, data)
    colors = ctx["colors"]
    assert colors["unchunked"] == F.BASELINE_COLOR and len({colors[t] for t in ("slice_loop", "einsum_chunk",
                                                                                 "vmap_chunks")}) == 3
    seen: dict[str, set] = {}
    for page in ctx["pages"]:
        charts = [c for s in page.get("sections", []) for c in s.get("charts", [])]
        charts += [p["chart"] for e in page.get("entries", []) for p in e["panels"]]
        charts += [c for f in page.get("families", []) for c in [f["overlay"]] + [s["chart"] for s in f["sections"]] if c]
        for c in charts:
            for tech, color in _trace_colors(json.loads(c["figure"])).items():
                seen.setdefault(tech, set()).add(color)
    for tech in ("unchunked", "slice_loop", "einsum_chunk", "vmap_chunks"):
        assert seen[tech] == {colors[tech]}, tech


def test_legends_list_techniques_and_axes_have_clean_log_ticks(tmp_path):
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "chunking.jsonl", chunking_variants())
    section, = build_context(results, data)["pages"][1]["sections"]
    assert section["swept"] == "chunk_size"
    alloc = json.loads(section["charts"][0]["figure"])
    legend = [t["name"] for t in alloc["data"] if t.get("showlegend", True)]
    assert legend == ["einsum_chunk", "slice_loop", "unchunked", "vmap_chunks (peer)"]  # techniques, once each
    einsum = [t for t in alloc["data"] if t["name"] == "einsum_chunk"]
    assert len(einsum) == 2 and einsum[0]["marker"]["symbol"] != einsum[1]["marker"]["symbol"]
    assert "opt_einsum=True" in einsum[1]["hovertext"][0] and einsum[0]["legendgroup"] == einsum[1]["legendgroup"]
    x = alloc["layout"]["xaxis"]
    assert x["type"] == "log" and x["title"]["text"] == "chunk_size"
    assert x["tickvals"] == [100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0]
    assert x["ticktext"] == ["100", "200", "500", "1,000", "2,000", "5,000", "10,000"]
    ticks = F.chart_axis("bytes", [1, 10 ** 6])
    assert all(str(v).startswith("1") for v in ticks["tickvals"]) and len(ticks["tickvals"]) == 7  # powers of ten


def test_tables_sort_as_numbers_carry_mode_and_run_columns_and_download(tmp_path):
    results, data = make_inputs(tmp_path)
    infer = [measurement("slice_loop", "chunking", {"n": 2000, "d": 256, "chunk_size": 250}, 5 * MiB, mode="infer")]
    write_jsonl(data / "sweeps" / "other-run.jsonl", [measurement("slice_loop", "chunking",
                                                                  {"n": 2000, "d": 256, "chunk_size": 250}, 13 * MiB)])
    ctx = build_context(results, data, extra_runs=[write_jsonl(tmp_path / "infer.jsonl", infer)])
    family = ctx["pages"][1]
    train = next(s for s in family["sections"] if "train" in s["heading"])
    keys = [c["key"] for c in train["table"]["columns"]]
    assert "run" in keys and "mode" not in keys  # two runs, one mode per section
    nums = {c["key"] for c in train["table"]["columns"] if c["num"]}
    assert {"peak_allocated", "step", "throughput", "relative"} <= nums
    row = next(r for r in train["table"]["rows"] if r["params"] == "chunk_size=250" and "other-run" in r["run"])
    assert row["peak_allocated__sort"] == 13 * MiB and row["step__sort"] == 2
    assert row["run"] == "other-run · 0123456" and row["machine"] == "Test CPU"  # the machine: its own column
    assert "machine" in keys
    files = family["files"]
    csv_text, json_text = files[train["table"]["csv"]], files[train["table"]["json"]]
    records = json.loads(json_text)
    assert len(records) == len(train["table"]["rows"]) == len(csv_text.strip().splitlines()) - 1
    assert [r["technique"] for r in records] == [r["technique"] for r in train["table"]["rows"]]
    at = train["table"]["rows"].index(row)
    assert records[at]["peak_allocated_bytes"] == 13 * MiB and records[at]["run"] == "other-run"
    assert csv_text.startswith("technique,peer,family,")
    # a table holding both modes gets a mode column (seed pages list train and infer rows)
    from memlab.site.page import Page
    from memlab.site.rows import measurement_table

    both = R.load_runs([write_jsonl(tmp_path / "both.jsonl", chunking_records()[:2] + infer)])
    assert "mode" in [c["key"] for c in measurement_table(Page("x.html"), "t", both)["columns"]]
    out = build_site(results, data, tmp_path / "out", extra_runs=[tmp_path / "infer.jsonl"])
    html = (out.parent / "family-chunking.html").read_text()
    assert 'data-type="num"' in html and f'data-sort="{13 * MiB}"' in html
    assert f'href="{train["table"]["csv"]}" download' in html and (out.parent / train["table"]["json"]).is_file()


def test_index_answers_each_question_once_per_family_with_why_and_footnotes(tmp_path):
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "chunking.jsonl", chunking_variants())
    write_jsonl(data / "sweeps" / "reversible.jsonl", reversible_records())
    index = build_context(results, data)["pages"][0]
    chunking, reversible = index["entries"]
    assert [p["label"] for p in reversible["panels"]] == ["batch=128", "batch=1024"]  # one section, two configurations
    small, large = reversible["panels"]
    assert small["answers"][0]["head"] == "No technique beats the baseline"
    assert small["answers"][0]["why"].startswith("parameter and input gradients (128.0 MiB) are 98% of the baseline's peak")
    assert (large["answers"][0]["technique"], large["answers"][0]["text"]) == (
        "reversible", "140.0 MiB, -31% against residual (204.0 MiB)")
    act = large["answers"][1]
    assert act["question"] == "lowest activation memory" and act["technique"] == "reversible"
    fast50, fast90 = large["answers"][2:]
    assert fast50["technique"] is None and fast90["technique"] == "checkpoint_block"
    assert "3906.2 ms median step" in fast90["text"]  # no relative step time in these rows: seconds, said so
    assert reversible["verdicts"] == "residual (the baseline) at 1, reversible at 1"
    summary = [(r["config"], r["memory"]) for r in reversible["summary"]["rows"]]
    assert summary == [("batch=128", "residual (nothing beats it)"), ("batch=1024", "reversible -31%")]
    assert [n["technique"] for n in reversible["notes"]] == ["memcnn"]
    assert "doubled" in reversible["notes"][0]["text"]
    einsum_note, = chunking["notes"]
    assert einsum_note["technique"] == "einsum_chunk" and "w1 @ w2" in einsum_note["text"]
    row = next(r for r in chunking["panels"][0]["table"]["rows"] if r["technique"] == "einsum_chunk")
    assert row["note"]["id"] == einsum_note["id"]
    assert large["measure"] == "peak allocated above the step's baseline"


def test_index_uses_total_peak_and_draws_memory_by_category(tmp_path):
    def cats(params, grads, inputs, saved, temps):
        return {"parameters": params * MiB, "gradients": grads * MiB, "optimizer_state": 0, "inputs": inputs * MiB,
                "saved_activations": saved * MiB, "temporaries": temps * MiB}

    recs = reversible_records()[3:6]
    for rec, c in zip(recs, (cats(64, 132, 4, 60, 10), cats(64, 132, 4, 2, 6), cats(64, 132, 4, 20, 2))):
        rec.update(peak_by_category_bytes=c, total_peak_bytes=sum(c.values()), schema=2)
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "reversible.jsonl", recs)
    ctx = build_context(results, data)
    panel, = ctx["pages"][0]["entries"][1]["panels"]
    assert panel["measure"] == "total peak (baseline included)"
    assert panel["answers"][0]["why"] == ("saved activations shrank most: 60.0 MiB → 2.0 MiB at the peak "
                                          "(270.0 MiB → 208.0 MiB in all).")
    stacked = json.loads(panel["chart"]["figure"])
    assert stacked["layout"]["barmode"] == "stack"
    assert [t["name"] for t in stacked["data"]] == ["parameters", "gradients", "inputs", "saved activations",
                                                    "temporaries"]  # optimizer state is zero: left out
    assert stacked["data"][3]["y"] == ["residual", "checkpoint_block", "reversible"]  # top-down: least memory first
    assert stacked["data"][3]["x"] == [60.0, 20.0, 2.0]
    family = next(p for p in ctx["pages"] if p["path"] == "family-reversible.html")
    assert any(c["title"] == "Peak by memory category" for s in family["sections"] for c in s["charts"])
    assert "total_peak" in [c["key"] for s in family["sections"] for c in s["table"]["columns"]]


def test_permalinks_on_every_part_and_a_footer_naming_the_data(tmp_path):
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "reversible.jsonl", reversible_records())
    out = build_site(results, data, tmp_path / "out").parent
    for page in sorted(out.glob("*.html")):
        html = page.read_text()
        ids = re.findall(r'\bid="([^"]+)"', html)
        assert len(ids) == len(set(ids)), page.name
        for tag in re.findall(r"<(?:section|figure)\b[^>]*>", html):
            (anchor,) = re.findall(r'id="([^"]+)"', tag)
            assert f'href="#{anchor}"' in html, (page.name, anchor)
        for box in re.findall(r'<div class="table-box" id="([^"]+)"', html):
            assert f'href="#{box}"' in html
        footer = html.split("<footer>", 1)[1]
        assert "Test CPU" in footer and "torch 2.13.0+cpu" in footer and "0123456789ab" in footer, page.name


def test_a_group_outside_the_workload_sweeps_still_sweeps_its_knob(tmp_path):
    """A plug-in family whose workload parameters vary (n and d) but whose chunk sizes are swept at
    one (n, d): a line against chunk_size, not bars."""
    recs = [measurement("plain", "plug", {"n": n, "d": d}, n * MiB) for n, d in ((1, 1), (2, 1), (2, 2))]
    recs += [measurement("chunky", "plug", {"n": 3, "d": 3, "chunk_size": c}, c * MiB) for c in (1, 2, 4)]
    sections = A.sweep_sections(_runs(tmp_path, recs))
    assert ({"d": 3, "n": 3}, "chunk_size") in [(config, swept) for config, swept, _ in sections]


def test_every_point_lies_inside_its_axis_range(tmp_path):
    """Axes with an explicit range (log axes with 1-2-5 ticks) hold every value drawn on them, in the
    units drawn (a range computed from bytes while points are in MiB would show an empty chart)."""
    from site_fixtures import rich_inputs

    results, data = rich_inputs(tmp_path)
    recs = [measurement("dense", "tensor_train", {"batch": b}, b * MiB, baseline=True, samples_per_s=100.0 * b)
            for b in (256, 1024, 4096)]
    write_jsonl(data / "sweeps" / "tt.jsonl", recs + [measurement("tt", "tensor_train", {"batch": b}, b * MiB // 8,
                                                                    samples_per_s=30.0 * b) for b in (256, 4096)])
    out = build_site(results, data, tmp_path / "out").parent
    checked = 0
    for page in out.glob("*.html"):
        for fig in _figures(page.read_text()):
            for axis in ("xaxis", "yaxis"):
                rng = fig["layout"][axis].get("range")
                if fig["layout"][axis].get("type") != "log" or not rng:
                    continue
                values = [v for t in fig["data"] for v in t.get(axis[0], []) if isinstance(v, (int, float))]
                lo, hi = 10 ** rng[0], 10 ** rng[1]
                assert values and all(lo <= v <= hi for v in values), (page.name, axis, rng, values[:5])
                assert all(lo <= v <= hi for v in fig["layout"][axis]["tickvals"])
                checked += 1
    assert checked >= 5


# -- issue 17: the paper pages' figures and the Choose page take the techniques' colours ---------------
def test_a_reproduction_series_takes_the_colour_of_the_technique_it_draws():
    colors = {"resnet": F.BASELINE_COLOR, "revnet": "#2ca02c", "resnet_checkpoint_block": "#1f77b4",
              "resnet_checkpoint_sqrt": "#d62728", "residual": F.BASELINE_COLOR, "reversible": "#d62728"}
    chen = ["resnet", "resnet_checkpoint_block", "resnet_checkpoint_sqrt"]
    assert F.series_technique("ResNet", ["resnet", "revnet"], colors) == "resnet"
    assert F.series_technique("RevNet", ["resnet", "revnet"], colors) == "revnet"
    assert F.series_technique("residual total peak", ["residual", "reversible"], colors) == "residual"
    assert F.series_technique("per-block activation", chen, colors) == "resnet_checkpoint_block"
    assert F.series_technique("sqrt(n) activation", chen, colors) == "resnet_checkpoint_sqrt"
    assert F.series_technique("plain activation", chen, colors) == "resnet"  # the baseline's word
    for name in ("analytic floor", "train", "infer", "checkpoint activation", 3):
        assert F.series_technique(name, chen, colors) is None, name
    # an x category names a technique only by its name
    assert F.series_technique("ResNet-110", ["resnet", "revnet"], colors, loose=False) is None
    assert F.series_technique("RevNet", ["resnet", "revnet"], colors, loose=False) == "revnet"


def test_a_reproduction_figure_draws_no_series_in_a_colour_that_is_not_its_own():
    colors = {"resnet": F.BASELINE_COLOR, "revnet": "#2ca02c", "slice_loop": "#9467bd", "unchunked": F.BASELINE_COLOR}
    bar = F.seed_figure({"type": "bar", "x": ["ResNet-110", "ResNet-164"], "series": {"ResNet": [257.1, 773.0],
                         "RevNet": [32.0, 132.0]}, "x_label": "networks", "y_label": "MiB"}, colors, ["resnet", "revnet"])
    assert [(t["name"], t["marker"]["color"], t["meta"]) for t in bar["data"]] == [
        ("ResNet", F.BASELINE_COLOR, {"technique": "resnet"}), ("RevNet", "#2ca02c", {"technique": "revnet"})]
    line = F.seed_figure({"type": "line", "x": [1, 10, 100], "log_x": True, "series": {
        "analytic floor": [1, 2, 3], "slice_loop": [4, 5, 6], "unchunked": [7, 7, 7]}}, colors, ["slice_loop", "unchunked"])
    styles = {t["name"]: (t["line"]["color"], t["line"]["dash"]) for t in line["data"]}
    assert styles == {"analytic floor": (F.NEUTRAL_COLOR, "dot"), "slice_loop": ("#9467bd", "solid"),
                      "unchunked": (F.BASELINE_COLOR, "solid")}
    assert line["layout"]["xaxis"]["tickvals"] == [1, 10, 100]
    # x categories that are techniques: each bar in its technique's colour, the series told apart by
    # hatching; the legend shows the hatching in grey, not the first bar's colour
    modes = F.seed_figure({"type": "bar", "x": ["unchunked", "slice_loop"], "series": {"infer": [1, 2], "train": [3, 4]}},
                          colors, ["slice_loop", "unchunked"])
    drawn = [t for t in modes["data"] if t["x"] != [None]]
    assert all(t["marker"]["color"] == [F.BASELINE_COLOR, "#9467bd"] and not t["showlegend"] for t in drawn)
    assert [t["marker"]["pattern"]["shape"] for t in drawn] == ["", "/"]
    legend = [t for t in modes["data"] if t["x"] == [None]]
    assert [(t["name"], t["marker"]["color"] in F.PALETTE) for t in legend] == [("infer", False), ("train", False)]
    assert {t["offsetgroup"] for t in legend} == {t["offsetgroup"] for t in drawn}  # the entries take no slot


def test_techniques_only_a_reproduction_or_a_model_names_get_their_family_s_next_colour(tmp_path):
    """A technique no sweep measured keeps clear of its family's colours (it used to restart the palette
    in a group of its own: leaky_ctx_output took checkpoint_block's blue); the swept ones keep theirs."""
    results, data = make_inputs(tmp_path)
    rep = json.loads((data / "reproductions" / "chunked-slicing.json").read_text())
    rep["measurements"].append(measurement("checkpoint_split_chunk", "chunking", {"n": 2000, "d": 256, "chunk_size": 500},
                                           9 * MiB))
    (data / "reproductions" / "chunked-slicing.json").write_text(json.dumps(rep))
    before = build_context(results, data)["colors"]
    assert before["checkpoint_split_chunk"] not in {before[t] for t in ("unchunked", "slice_loop", "vmap_chunks")}
    swept = {t: before[t] for t in ("unchunked", "slice_loop", "vmap_chunks")}
    (data / "models").mkdir()
    models = json.loads((REPO / "data" / "models" / "cpu-float32-sgd.json").read_text())
    (data / "models" / "cpu-float32-sgd.json").write_text(json.dumps(models))
    ctx = build_context(results, data)
    colors = ctx["colors"]
    assert {t: colors[t] for t in swept} == swept
    choose, = [p for p in ctx["pages"] if p["path"] == "choose.html"]
    app = json.loads(choose["app"])
    modelled = {e["technique"] for m in app["models"].values() for f in m["families"].values() for e in f["entries"]}
    assert app["colors"] == {t: colors[t] for t in modelled} and "#444444" not in app["colors"].values()
    # distinct within the chunking family (another family may reuse a colour: the transformer's checkpoint_layer)
    of_chunking = {e["technique"] for m in app["models"].values() for e in m["families"]["chunking"]["entries"]}
    chunking = sorted(t for t in colors if t in of_chunking | set(swept) and colors[t] != F.BASELINE_COLOR)
    assert len({colors[t] for t in chunking}) == len(chunking), {t: colors[t] for t in chunking}


def test_no_chart_mark_that_is_no_technique_takes_a_technique_s_colour():
    """The under-load ring, the neutral series and the category colours are none of the technique colours."""
    taken = set(F.PALETTE) | {F.BASELINE_COLOR}
    assert F.UNDER_LOAD_COLOR not in taken and F.NEUTRAL_COLOR not in taken
    assert not taken & set(F.CATEGORY_COLORS.values())


def test_a_long_reproduction_summary_becomes_a_list_of_labelled_items():
    from memlab.site.text import summary_items

    text = ("Claim: chunks save memory. Configuration: CPU, n=10000 (version 1.5.2: dots inside stay). "
            "Predicted CUDA (the allocator replayed): 10 vs 5 MiB. residual_stack peak (MiB) at depth 4: 1.8. "
            "So it holds: mostly. Verdict: reproduced.")
    items = summary_items(text)
    assert [i["label"] for i in items] == ["Configuration", "Predicted CUDA (the allocator replayed)",
                                           "residual_stack peak (MiB) at depth 4", "So it holds"]
    assert items[0]["text"] == "CPU, n=10000 (version 1.5.2: dots inside stay)."
    # a summary without labels stays one item; the claim alone is kept rather than nothing
    assert summary_items("slice_loop peaks at 13.0 MiB.") == [{"label": "", "text": "slice_loop peaks at 13.0 MiB."}]
    assert summary_items("Claim: x.") == [{"label": "Claim", "text": "x."}]


def test_a_section_that_mixes_thread_counts_says_so(tmp_path):
    from memlab.site.context import mixed_threads

    one = chunking_records()
    two = [dict(r, environment={**r["environment"], "threads": 1}) if r["technique"] == "vmap_chunks" else r
           for r in one]
    assert mixed_threads(_runs(tmp_path / "same", one)) == []
    assert mixed_threads(_runs(tmp_path / "mixed", two)) == [1, 2]
    for name, records in (("same", one), ("mixed", two)):
        data = tmp_path / name / "data"
        write_jsonl(data / "sweeps" / "s.jsonl", records)
        build_site(tmp_path / name / "results", data, tmp_path / name / "out")
    note = "intra-op threads (the <code>threads</code> of each row's environment)"
    assert note not in (tmp_path / "same" / "out" / "family-chunking.html").read_text()
    mixed = (tmp_path / "mixed" / "out" / "family-chunking.html").read_text()
    assert "These rows were measured at 1 and 2 " + note in mixed


def test_a_chart_promises_only_the_series_it_draws(tmp_path):
    """Issue 29: the cuda:0 bars promised grey reserved bars that were all 0; captions named peers and
    dotted floors on charts without them; one-point Pareto fronts were listed and drew nothing."""
    recs = [measurement(t, "chunking", {"n": 2000, "d": 256}, p * MiB, reserved=0, device="cuda:0")
            for t, p in (("unchunked", 20), ("slice_loop", 12))]
    rows = _runs(tmp_path, recs)
    fig = F.memory_by_technique(rows, A.line_variants(rows, None), {})
    assert [t["name"] for t in fig["data"]] == ["peak allocated"] and not F.draws_second_bars(rows)
    data = tmp_path / "data" / "sweeps"
    data.mkdir(parents=True)
    write_jsonl(data / "cuda.jsonl", recs)
    page = next(p for p in build_context(tmp_path / "results", tmp_path / "data")["pages"] if p.get("family"))
    caption = page["sections"][0]["charts"][0]["caption"]
    assert "grey bars" not in caption and "0 in every row" in caption
    # a line chart without peers or floors does not name them
    page = build_context(*make_inputs(tmp_path / "in"))["pages"][1]
    first = page["sections"][0]["charts"][0]
    assert "peers" in first["caption"]  # the fixtures' vmap_chunks is a peer
    no_peer = _runs(tmp_path, [r for r in chunking_records() if not r["peer"]])
    from memlab.site.context import _line_caption

    fig = F.memory_vs_param(no_peer, A.line_variants(no_peer, "chunk_size"), "chunk_size", "peak_allocated_bytes", "MiB", {},
                            floor_column="analytic_floor_bytes")
    assert "peers" not in _line_caption(fig, "floor") and "dotted: floor" in _line_caption(fig, "floor")
    # one point per configuration: no front drawn (nor listed)
    one = _runs(tmp_path, [measurement("t", "f", {"n": n}, n * MiB) for n in (1, 2)])
    fronts = [(str(n), one.index[[p["n"] == n for p in one["params"]]]) for n in (1, 2)]
    fig = F.throughput_vs_peak(one, A.line_variants(one, None), {}, fronts)
    assert not [t for t in fig["data"] if t["name"].startswith("Pareto")]


def test_a_bar_chart_of_a_reproduction_is_linear_even_when_its_spec_asks_for_log():
    spec = {"type": "bar", "x": ["dense", "tt"], "series": {"train": [15.6, 900.0]}, "x_label": "", "y_label": "MiB",
            "log_y": True}
    assert F.seed_figure(spec, {})["layout"]["yaxis"].get("type") != "log"
    line = {**spec, "type": "line", "x": [1, 10], "log_x": True}
    assert F.seed_figure(line, {})["layout"]["yaxis"]["type"] == "log"


def test_the_index_groups_rows_failing_the_same_way_with_their_count(tmp_path):
    """Issue 29: 13 near-identical memcnn rows (its known input-gradient defect at every size) were two
    screens of the index; now one row with its count; the family page still lists every row."""
    recs = [measurement("residual", "reversible", {"depth": d}, d * MiB, workload="stack", baseline=True) for d in (4, 8, 16)]
    recs += [{**measurement("memcnn", "reversible", {"depth": d}, d * MiB, workload="stack", peer=True),
              "status": "mismatch", "matches_reference": False, "error": f"grad:x differs from the reference by up to {d}.5"}
             for d in (4, 8, 16)]
    data = tmp_path / "data" / "sweeps"
    data.mkdir(parents=True)
    write_jsonl(data / "rev.jsonl", recs)
    ctx = build_context(tmp_path / "results", tmp_path / "data")
    index = ctx["pages"][0]
    (row,) = index["not_ranked"]["rows"]
    assert (row["technique"], row["status"], row["count"]) == ("memcnn", "mismatch", "3")
    assert "(and 2 more)" in row["params"] and index["n_bad"] == 3
    family = next(p for p in ctx["pages"] if p.get("family") == "reversible")
    assert len(family["not_ranked"]["rows"]) == 3


# -- issue 41: site text ---------------------------------------------------------------------------------
def test_a_seed_page_is_titled_by_what_it_settles_with_the_report_title_beneath(tmp_path):
    """The title comes from the reproduction module's own ``SETTLES`` (read from its source, never
    imported); the report's title (the reproduction file's ``title``) is shown beneath it."""
    from memlab.site.seed_meta import page_titles, seed_metadata

    results, data = make_inputs(tmp_path)
    report = "Memory consumption does not seem to reflect the indicated consumption of nvidia-smi"
    (data / "reproductions" / "reversible-memory-accounting.json").write_text(
        json.dumps({**reproduction("reversible-memory-accounting"), "title": report}))
    settles = seed_metadata("reversible-memory-accounting")["SETTLES"]
    assert settles == "Reversible nets: where the savings go and whether memory leaks across steps"
    build_site(results, data, tmp_path / "out")
    page = (tmp_path / "out" / "seed-reversible-memory-accounting.html").read_text()
    assert f"<h1>{settles}</h1>" in page
    assert f'<p class="report-title">User report: <cite>{report}</cite></p>' in page
    assert f"<title>{settles} · memlab</title>" in page
    index = (tmp_path / "out" / "index.html").read_text()
    assert settles in index and f"User report: <cite>{report}</cite>" in index
    # a seed whose module says nothing it settles keeps the report's title, with nothing beneath
    other = (tmp_path / "out" / "seed-chunked-slicing.html").read_text()
    assert "<h1>Report chunked-slicing</h1>" in other and "report-title" not in other
    assert page_titles("chunked-slicing", "Report chunked-slicing") == ("Report chunked-slicing", "")


def test_seed_metadata_is_read_from_the_module_source_not_imported(tmp_path):
    from memlab.site.seed_meta import page_titles, seed_metadata

    (tmp_path / "mine.py").write_text('import torch\nSEED = "mine"\nTITLE = "Why so much memory?"\n'
                                      'SETTLES = ("What the step keeps "\n           "and why")\nCLAIM = 1\n')
    (tmp_path / "_private.py").write_text('SEED = "hidden"\nSETTLES = "no"\n')
    (tmp_path / "broken.py").write_text('SEED = "broken"\nSETTLES = (\n')
    assert seed_metadata("mine", tmp_path) == {"SEED": "mine", "TITLE": "Why so much memory?",
                                               "SETTLES": "What the step keeps and why"}
    assert seed_metadata("hidden", tmp_path) == {} and seed_metadata("broken", tmp_path) == {}
    assert page_titles("mine", "Why so much memory?", tmp_path) == ("What the step keeps and why", "Why so much memory?")
    # every user report reproduced in memlab/reproductions says what it settles
    for seed in ("reversible-memory-accounting", "chunked-slicing-backward-spike", "tt-layer-memory"):
        meta = seed_metadata(seed)
        assert meta["SETTLES"] and meta["SETTLES"] != meta["TITLE"], seed


def test_a_chart_whose_series_are_all_zero_is_not_drawn_and_says_why():
    from memlab.site.page import Page

    page = Page("p.html")
    flat = {"data": [{"type": "scatter", "x": [1, 2], "y": [0, 0.0]}, {"type": "scatter", "x": [None], "y": [None]}],
            "layout": {}}
    c = page.chart(flat, "Peak resident vs batch", "a caption", absent="peak resident is 0 in every row.")
    assert c["figure"] == "" and c["absent"] == "peak resident is 0 in every row." and c["caption"] == ""
    assert page.chart({"data": [], "layout": {}}, "Nothing")["absent"]  # the general reason
    bars = {"data": [{"type": "bar", "orientation": "h", "y": ["a"], "x": [0]},
                     {"type": "bar", "orientation": "h", "y": ["b"], "x": [2.5]}], "layout": {}}
    assert F.draws_data(bars) and "absent" not in page.chart(bars, "Bars")
    assert not F.draws_data({"data": [{"type": "bar", "orientation": "h", "y": [1, 2], "x": [0, 0]}]})


def test_rows_that_reserve_nothing_get_no_resident_chart_and_no_empty_held_fixed_value(tmp_path):
    """A model file's sweep (issue 41): ``blocks`` left empty (the guess) and peak resident 0 in every
    row.  The family page draws no flat "Peak resident vs batch" (one line says why) and never reads
    ``blocks=``."""
    recs = [measurement(t, "model:toy", {"batch": b, "blocks": ""}, b * k * MiB, reserved=0)
            for b in (1, 2, 4) for t, k in (("toy__plain", 2), ("toy__checkpoint_blocks", 1))]
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "toy.jsonl", recs)
    ctx = build_context(results, data)
    page = next(p for p in ctx["pages"] if p.get("family") == "model:toy")
    section, = page["sections"]
    resident = next(c for c in section["charts"] if c["title"] == "Peak resident vs batch")
    assert resident["figure"] == "" and "0 in every row" in resident["absent"]
    assert section["fixed"] == "" and "blocks=" not in section["heading"]
    assert A.param_text({"batch": 2, "blocks": "", "x": None}) == "batch=2"
    build_site(results, data, tmp_path / "out")
    html = (tmp_path / "out" / "family-model-toy.html").read_text()
    assert "blocks=" not in html and "<code></code>" not in html
    assert "Not drawn: peak resident is 0 in every row" in html


def test_complexity_slopes_are_labelled_by_the_variable_they_are_fitted_against(tmp_path):
    """The transformer family sweeps ``seq``: its slopes read "against seq", never "against depth"."""
    from memlab.site.complexity import against, family_badges

    recs = [{**measurement(t, "transformer", {"seq": s, "batch": 2}, s * s * k * MiB // 64),
             "extra": {"activation_peak_bytes": s * (s if t == "eager" else 64) * MiB // 64}}
            for s in (32, 64, 128, 256) for t, k in (("eager", 2), ("sdpa", 1))]
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "transformer.jsonl", recs)
    df = _runs(tmp_path / "runs", recs)
    badges = family_badges(df)
    assert {b["x"] for b in badges} == {"seq"} and all("(4 values of seq)" in b["text"] for b in badges), badges
    assert against("O(n): exponent 1.00, R² 1.000 over 4x (3 depths)", "depth").endswith("(3 depths)")
    build_site(results, data, tmp_path / "out")
    html = (tmp_path / "out" / "family-transformer.html").read_text()
    section = html[html.index('id="complexity"'):html.index("</section>", html.index('id="complexity"'))]
    assert "against seq" in section and "against <code>seq</code>" in section
    assert "depth" not in section, section
