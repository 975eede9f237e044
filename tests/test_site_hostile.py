"""A hostile corpus for ``memlab site``: every file is built here, in tmp_path, by the test itself.

Each test asserts the exact outcome: the site is still built (exit 0, ``index.html``), the one
warning names the file (and line), the good rows are kept, nothing prints a traceback; a refused
``--out`` is one line and exit 2 with the inputs untouched; wrong measurements are listed, never
ranked; no string reaches plotly unescaped.
"""
from __future__ import annotations

import html as htmlmod
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlab import results as R
from memlab.cli import main
from memlab.site import build_site
from memlab.site.render import MARKER
from process_checks import HANG_GUARD_S
from site_fixtures import (BENCH, EVIL, MiB, make_inputs, measurement, reproduction, schema2, timeline,
                           with_verdict, write_jsonl)

REPO = Path(__file__).resolve().parents[1]
BASE = {"n": 2000, "d": 256}


def _site(capsys, results: Path, data: Path, out: Path, runs=()) -> tuple[int, list[str]]:
    """``memlab site`` in this process: (exit status, stderr lines); never a traceback."""
    argv = ["site", "--results", str(results), "--data", str(data), "--out", str(out)]
    for run in runs:
        argv += ["--run", str(run)]
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err.splitlines()


def _warnings(lines: list[str]) -> list[str]:
    return [line.removeprefix("memlab: warning: ") for line in lines if line.startswith("memlab: warning: ")]


def _figures(page: str) -> list[dict]:
    return [json.loads(htmlmod.unescape(m)) for m in re.findall(r'data-figure="([^"]*)"', page)]


def _inputs(tmp_path: Path, records: list[dict]) -> tuple[Path, Path]:
    """The usual fixture inputs with ``data/sweeps/chunking.jsonl`` replaced by ``records``."""
    results, data = make_inputs(tmp_path)
    write_jsonl(data / "sweeps" / "chunking.jsonl", records)
    return results, data


def _good() -> list[dict]:
    return [measurement("unchunked", "chunking", BASE, 20 * MiB, baseline=True),
            measurement("slice_loop", "chunking", {**BASE, "chunk_size": 250}, 13 * MiB)]


def _page_rows(page: str) -> int:
    """Rows of the measurement tables of a family page."""
    sections = page.split('<section class="setting"', 1)[-1].split('<section class="not-ranked"', 1)[0]
    return len(re.findall(r'<tr class="status-', sections))


# -- A. every input file is read defensively ------------------------------------------------------
def test_integer_above_float_range_invalidates_that_row_only(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    huge = {**measurement("slice_loop", "chunking", {**BASE, "chunk_size": 500}, MiB)}
    text = json.dumps(huge, sort_keys=True).replace(f'"peak_allocated_bytes": {MiB}',
                                                    '"peak_allocated_bytes": 1' + "0" * 400)
    big_param = json.dumps(measurement("slice_loop", "chunking", {**BASE, "chunk_size": 7}, MiB), sort_keys=True)
    big_param = big_param.replace('"chunk_size": 7', '"chunk_size": ' + "9" * 5001)
    path = data / "sweeps" / "huge.jsonl"
    path.write_text("\n".join([json.dumps(r) for r in _good()] + [text, big_param]) + "\n")
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0 and (tmp_path / "out" / "index.html").exists()
    warned = _warnings(err)
    assert f"{path}:3: invalid measurement (field 'peak_allocated_bytes' must be a finite number >= 0 or null, got " \
           "1000000000... (401 digits), outside float range); skipped" in warned
    assert any(w.startswith(f"{path}:4: invalid measurement (field 'params.chunk_size' must be a finite number, "
                            "got 9999999999... (5001 digits), outside float range)") for w in warned)
    assert _page_rows((tmp_path / "out" / "family-chunking.html").read_text()) == 2 + 6  # and the fixture's 6


def test_integer_above_float_range_in_asv_results(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    path = results / "box" / ("b" * 8 + "-existing-py.json")
    text = path.read_text().replace("[200, 2000,", "[1" + "0" * 400 + ", 2000,")
    path.write_text(text)
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    assert f"{path}: benchmark '{BENCH}': value 1000000000... (401 digits), outside float range is not a finite " \
           "number; left out" in _warnings(err)
    (history,) = _figures((tmp_path / "out" / "history.html").read_text())
    # 8 values, 1 left out (not legend entries, not the x marks of the fixture's failed values)
    assert sum(len(t["y"]) for t in history["data"] if t["y"] != [None] and t["name"] != "failed") == 7


def test_deeply_nested_json_is_refused_without_recursion(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    deep = data / "timelines" / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    sweep = data / "sweeps" / "deep.jsonl"
    sweep.write_text(json.dumps(_good()[1]) + "\n" + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "\n")
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0 and (tmp_path / "out" / "timelines.html").exists()
    warned = _warnings(err)
    assert f"{deep}: JSON nested 100000 levels deep (memlab reads at most 64); skipped" in warned
    assert f"{sweep}:2: JSON nested 50000 levels deep (memlab reads at most 64); line skipped" in warned
    with pytest.warns(R.ResultsWarning):
        assert list(R.load_runs([sweep])["line"]) == [1]  # line 1 kept


def test_asv_file_without_result_columns(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    path = results / "box" / ("a" * 8 + "-existing-py.json")
    doc = json.loads(path.read_text())
    del doc["result_columns"]
    path.write_text(json.dumps(doc))
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    assert (f"{path}: no 'result_columns' list naming 'result' (not an asv 0.6 results file); skipped"
            in _warnings(err))
    (history,) = _figures((tmp_path / "out" / "history.html").read_text())
    # the other commit's 4 values (not the x marks of its failed values)
    assert sum(len(t["y"]) for t in history["data"] if t["y"] != [None] and t["name"] != "failed") == 4


def test_a_list_where_a_string_is_expected(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    bench = json.loads((results / "benchmarks.json").read_text())
    bench[BENCH]["unit"] = ["bytes"]
    (results / "benchmarks.json").write_text(json.dumps(bench))
    tl = timeline("slice_loop", {"chunk_size": 500})
    tl["events"][1]["phase"] = ["forward"]
    (data / "timelines" / "phase.json").write_text(json.dumps(tl))
    bad_error = with_verdict(measurement("x", "chunking", BASE, MiB), "error", ["RuntimeError", "boom"])
    write_jsonl(data / "sweeps" / "chunking.jsonl", _good() + [bad_error])
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    warned = _warnings(err)
    assert (f"{results / 'benchmarks.json'}: benchmark '{BENCH}': 'unit' is not a string (['bytes']); "
            "shown as unknown") in warned
    assert (f"{data / 'timelines' / 'phase.json'}: invalid timeline (event 1 has an 'op' or 'phase' that is not "
            "a string); skipped") in warned
    assert (f"{data / 'sweeps' / 'chunking.jsonl'}:3: invalid measurement (field 'error' must be a string or null, "
            "got ['RuntimeError', 'boom']); skipped") in warned
    assert len(_figures((tmp_path / "out" / "history.html").read_text())) == 1
    assert _page_rows((tmp_path / "out" / "family-chunking.html").read_text()) == 2


def test_nan_in_a_reproduction_figure(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    path = data / "reproductions" / "chunked-slicing.json"
    gap = reproduction("chunked-slicing")
    gap["figure"]["series"]["peak allocated"] = [20.0, float("nan")]
    path.write_text(json.dumps(gap))
    bad_x = reproduction("other-seed")
    bad_x["figure"]["x"] = ["unchunked", float("nan")]
    other = data / "reproductions" / "other-seed.json"
    other.write_text(json.dumps(bad_x))
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    warned = _warnings(err)
    assert f"{path}: figure series ['peak allocated'] hold NaN values; drawn as gaps" in warned
    assert f"{other}: figure 'x' values must be strings or finite numbers; figure left out" in warned
    fig = _figures((tmp_path / "out" / "seed-chunked-slicing.html").read_text())[0]  # then its timeline
    assert fig["data"][0]["y"] == [20.0, None]
    other_page = (tmp_path / "out" / "seed-other-seed.html").read_text()
    assert _figures(other_page) and "slicing in a loop spikes memory" in other_page  # its timeline chart only


def test_nan_infinity_and_strings_where_a_number_is_expected(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    good = json.dumps(_good()[0], sort_keys=True)
    nan_peak = good.replace(f'"peak_allocated_bytes": {20 * MiB}', '"peak_allocated_bytes": NaN')
    inf_time = good.replace('"samples_per_s": 1000.0', '"samples_per_s": Infinity')
    text_peak = good.replace(f'"peak_allocated_bytes": {20 * MiB}', '"peak_allocated_bytes": "20 MiB"')
    path = data / "sweeps" / "chunking.jsonl"
    path.write_text("\n".join([good, nan_peak, inf_time, text_peak]) + "\n")
    tl = timeline("slice_loop", {})
    tl["baseline_bytes"] = float("nan")
    (data / "timelines" / "nan.json").write_text(json.dumps(tl))
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    warned = _warnings(err)
    assert any(w.startswith(f"{path}:2: invalid measurement (field 'peak_allocated_bytes' must be a finite number "
                            ">= 0 or null, got nan)") for w in warned)
    assert any(w.startswith(f"{path}:3: invalid measurement (field 'samples_per_s'") for w in warned)
    assert any(w.startswith(f"{path}:4: invalid measurement (field 'peak_allocated_bytes' must be a finite number "
                            ">= 0 or null, got '20 MiB')") for w in warned)
    assert any(w.startswith(f"{data / 'timelines' / 'nan.json'}: invalid timeline (field 'baseline_bytes' must be "
                            "a number, got nan)") for w in warned)
    assert _page_rows((tmp_path / "out" / "family-chunking.html").read_text()) == 1


def test_missing_keys(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    nameless = measurement("x", "chunking", BASE, MiB)
    del nameless["technique"]
    write_jsonl(data / "sweeps" / "chunking.jsonl", _good() + [nameless])
    no_events = timeline("slice_loop", {})
    del no_events["events"]
    (data / "timelines" / "none.json").write_text(json.dumps(no_events))
    no_claim = reproduction("no-claim")
    del no_claim["claim"]
    (data / "reproductions" / "no-claim.json").write_text(json.dumps(no_claim))
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    warned = _warnings(err)
    assert (f"{data / 'sweeps' / 'chunking.jsonl'}:3: invalid measurement (field 'technique' must be a non-empty "
            "string, got None); skipped") in warned
    assert f"{data / 'timelines' / 'none.json'}: invalid timeline (field 'events' must be a list); skipped" in warned
    assert (f"{data / 'reproductions' / 'no-claim.json'}: invalid reproduction (field 'claim' must be a string); "
            "skipped") in warned
    assert not (tmp_path / "out" / "seed-no-claim.html").exists()


def test_one_non_utf8_line_drops_that_line_only(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    path = data / "sweeps" / "chunking.jsonl"
    one, two = (json.dumps(r).encode() for r in _good())
    path.write_bytes(one + b"\n" + two.replace(b'"slice_loop"', b'"slice\xff_loop"') + b"\n" + two + b"\n")
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    column = two.index(b'"slice_loop"') + 7
    assert _warnings(err) == [f"{path}:2: not UTF-8 (byte 0xff at column {column}); line skipped"]
    assert err[-1] == ("memlab: 1 input problem(s) left out of the site; listed on "
                       f"{(tmp_path / 'out' / 'methodology.html').resolve()}")
    assert _page_rows((tmp_path / "out" / "family-chunking.html").read_text()) == 2
    assert f"{path}:2: not UTF-8" in (tmp_path / "out" / "methodology.html").read_text()


def test_a_fifo_named_like_a_sweep_is_skipped_without_opening(tmp_path):
    results, data = make_inputs(tmp_path)
    os.mkfifo(data / "sweeps" / "pipe.jsonl")
    os.mkfifo(data / "timelines" / "pipe.json")
    cmd = [sys.executable, "-m", "memlab", "site", "--results", str(results), "--data", str(data),
           "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"memlab: warning: {data / 'sweeps' / 'pipe.jsonl'}: a FIFO, not a regular file; skipped without " \
           "opening it" in proc.stderr.splitlines()
    assert f"memlab: warning: {data / 'timelines' / 'pipe.json'}: a FIFO, not a regular file; skipped without " \
           "opening it" in proc.stderr.splitlines()
    assert (tmp_path / "out" / "index.html").exists()


def test_symlink_loops_dangling_links_and_folders_named_like_inputs(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    sweeps = data / "sweeps"
    os.symlink("b.jsonl", sweeps / "a.jsonl")
    os.symlink("a.jsonl", sweeps / "b.jsonl")
    os.symlink("gone.json", data / "timelines" / "dangling.json")
    (sweeps / "folder.jsonl").mkdir()
    os.symlink(".", results / "loop")  # a machine folder that is itself: read once, no recursion
    os.symlink("/dev/zero", sweeps / "zero.jsonl")  # endless: never opened
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    warned = _warnings(err)
    assert f"{sweeps / 'a.jsonl'}: symbolic link loop; skipped" in warned
    assert f"{sweeps / 'b.jsonl'}: symbolic link loop; skipped" in warned
    dangling = data / "timelines" / "dangling.json"
    assert f"{dangling}: dangling symbolic link (its target does not exist); skipped" in warned
    assert f"{sweeps / 'folder.jsonl'}: a directory, not a regular file; skipped without opening it" in warned
    assert f"{sweeps / 'zero.jsonl'}: a character device, not a regular file; skipped without opening it" in warned
    assert (tmp_path / "out" / "index.html").exists()


def test_warnings_are_capped_per_file(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    path = data / "sweeps" / "junk.jsonl"
    path.write_text("\n".join(["{not json"] * 12 + [json.dumps(_good()[0])]) + "\n")
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    mine = [w for w in _warnings(err) if str(path) in w]
    assert [w.split(": ", 1)[0] for w in mine[:5]] == [f"{path}:{i}" for i in range(1, 6)]
    assert mine[5:] == [f"... and 7 more problem(s) in {path}"]
    with pytest.warns(R.ResultsWarning):
        assert list(R.load_runs([path])["line"]) == [13]  # the good last line kept


def test_odd_names_and_strings_keep_each_warning_one_line(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    odd = data / "sweeps" / "new\nline\udcff.jsonl"
    odd.write_text("{\n")
    lone = json.dumps(measurement("lone\ud800surrogate", "chunking", BASE, MiB))  # "\ud800" escape in the JSON
    write_jsonl(data / "sweeps" / "chunking.jsonl", _good())
    (data / "sweeps" / "chunking.jsonl").open("a").write(lone + "\n")
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0
    assert f"{data / 'sweeps'}/new\\x0aline\ufffd.jsonl:1: not valid JSON" in "\n".join(_warnings(err))
    assert "lone?surrogate" in (tmp_path / "out" / "family-chunking.html").read_text()


# -- B. the output folder ---------------------------------------------------------------------------
def _refused(capsys, results, data, out, runs=()) -> str:
    rc, err = _site(capsys, results, data, out, runs)
    assert rc == 2 and len(err) == 1 and err[0].startswith("memlab: error: site output ")
    return err[0]


def test_out_as_a_symlink_to_an_earlier_build_is_refused(tmp_path, capsys):
    results, data = make_inputs(tmp_path)
    assert _site(capsys, results, data, tmp_path / "build")[0] == 0
    before = sorted(p.name for p in (tmp_path / "build").iterdir())
    os.symlink(tmp_path / "build", tmp_path / "link")
    assert "is a symbolic link" in _refused(capsys, results, data, tmp_path / "link")
    assert sorted(p.name for p in (tmp_path / "build").iterdir()) == before


def test_out_containing_the_inputs_is_refused_and_nothing_is_deleted(tmp_path, capsys):
    results, data = make_inputs(tmp_path / "X")
    (tmp_path / "X" / MARKER).write_text("an earlier build, as far as a marker says\n")
    line = _refused(capsys, results, data, tmp_path / "X")
    assert line == (f"memlab: error: site output {tmp_path / 'X'} contains the input {results}, which replacing it "
                    "would delete; choose a folder outside the inputs")
    assert (data / "sweeps" / "chunking.jsonl").exists() and (results / "benchmarks.json").exists()
    assert "is inside the input folder" in _refused(capsys, results, data, data / "site")
    assert not (data / "site").exists()
    run = tmp_path / "runs" / "quick.jsonl"
    write_jsonl(run, _good())
    assert "contains the input file" in _refused(capsys, results, data, tmp_path / "runs", runs=[run])
    assert run.exists()
    assert "contains the input" in _refused(capsys, results, data, data)


def test_a_failed_build_leaves_the_previous_site(tmp_path):
    results, data = make_inputs(tmp_path)
    out = tmp_path / "out"
    build_site(results, data, out)
    before = (out / "index.html").read_bytes()
    broken = tmp_path / "site-root"
    import shutil
    shutil.copytree(REPO / "site", broken)
    (broken / "templates" / "methodology.html").write_text("{{ no_such_variable }}")
    with pytest.raises(Exception, match="no_such_variable"):
        build_site(results, data, out, site_root=broken)
    assert (out / "index.html").read_bytes() == before and (out / "methodology.html").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == []


# -- C. verdicts on the site -----------------------------------------------------------------------
def _verdict_records() -> list[dict]:
    cs = lambda c: {**BASE, "chunk_size": c}  # noqa: E731
    return [
        schema2(measurement("unchunked", "chunking", BASE, 20 * MiB, samples_per_s=4000.0, baseline=True)),
        schema2(measurement("slice_loop", "chunking", cs(250), 13 * MiB, samples_per_s=3000.0)),
        schema2(measurement("slice_loop", "chunking", cs(500), 14 * MiB, samples_per_s=3500.0)),
        # wrong, and the lowest and fastest of all: never best, never on the front
        with_verdict(schema2(measurement("wrong_fast", "chunking", cs(250), 2 * MiB, samples_per_s=9000.0),
                             matches=False, max_abs=0.5), "mismatch",
                     "grad:x differs from the reference by up to 0.5 (outside tolerance)"),
        with_verdict(schema2(measurement("leaky", "chunking", cs(500), 3 * MiB, samples_per_s=8000.0)), "leak",
                     "live memory grows by 4.0 MiB per step", leak_bytes_per_step=4 * MiB),
        {**measurement("nan_out", "chunking", cs(1000), 4 * MiB, samples_per_s=7000.0), "max_abs_error": float("nan"),
         "matches_reference": False},
        {**measurement("drifting", "chunking", cs(1000), 5 * MiB, samples_per_s=6000.0), "matches_reference": False,
         "max_abs_error": 0.25},
        measurement("slice_loop", "chunking", cs(1), None, status="oom"),
    ]


def test_wrong_rows_are_listed_never_ranked(tmp_path, capsys):
    results, data = _inputs(tmp_path, _verdict_records())
    rc, err = _site(capsys, results, data, tmp_path / "out")
    assert rc == 0 and _warnings(err) == []
    index = (tmp_path / "out" / "index.html").read_text()
    family = (tmp_path / "out" / "family-chunking.html").read_text()
    headline = index.split('<div class="headline">', 1)[1].split("</div>", 1)[0]
    assert "slice_loop" in headline and "wrong_fast" not in headline and "leaky" not in headline
    summary, ranked_table = (part.split("</table>", 1)[0] for part in index.split('<table class="rows sortable">')[1:3])
    for name in ("wrong_fast", "leaky", "nan_out", "drifting"):
        assert name not in ranked_table and name not in summary
    not_ranked = index.split('id="not-ranked"', 1)[1]
    rows = {m[0]: m[1] for m in re.findall(r'<span class="tech">([^<]+)</span>.*?<td class="status">(\w+)', not_ranked)}
    assert rows == {"wrong_fast": "mismatch", "leaky": "leak", "nan_out": "mismatch", "drifting": "unverified",
                    "slice_loop": "oom"}
    assert "grad:x differs from the reference by up to 0.5 (outside tolerance)" in not_ranked
    assert "4.0 MiB per step" in not_ranked
    assert "non-finite values in output" in not_ranked and "NO: non-finite values in output" in not_ranked
    assert "verified in float32 only (schema 1); re-measure" in not_ranked
    assert 'id="not-ranked"' not in family and "<h2>Not ranked <a" in family and "wrong_fast" in family
    for fig in _figures(family) + _figures(index):
        drawn = json.dumps(fig)
        for name in ("wrong_fast", "leaky", "nan_out", "drifting"):
            assert name not in drawn
    scatter = next(f for f in _figures(family) if f["layout"]["yaxis"]["title"]["text"].startswith("throughput"))
    (front,) = [t for t in scatter["data"] if t["name"] == "Pareto front"]
    assert front["x"] == [13.0, 14.0, 20.0] and front["y"] == [3000.0, 3500.0, 4000.0]


def test_matches_reference_states_the_error_and_the_tolerance(tmp_path, capsys):
    results, data = _inputs(tmp_path, _verdict_records())
    assert _site(capsys, results, data, tmp_path / "out")[0] == 0
    index = (tmp_path / "out" / "index.html").read_text()
    assert "yes (float64, max |err| 3.1e-13 ≤ atol 1e-8 + rtol 1e-6·|ref|; float32 drift 2.4e-6)" in index
    assert ("NO (float64, max |err| 0.5, outside atol 1e-8 + rtol 1e-6·|ref|, max rel err 5; "
            "float32 drift 2.4e-6)") in index
    method = (tmp_path / "out" / "methodology.html").read_text()
    tolerances = method.split("Tolerances of the measurements shown", 1)[1].split("</table>", 1)[0]
    assert re.search(r'<code>wl</code></td><td>float64</td><td class="num" data-sort="1e-06">1e-6</td>'
                     r'<td class="num" data-sort="1e-08">1e-8</td>', tolerances)
    assert re.search(r'<code>wl</code></td><td>float32</td><td class="num" data-sort="0.0001">0.0001</td>'
                     r'<td class="num" data-sort="0.0001">0.0001</td>', tolerances)


def test_text_valued_swept_parameter_never_reaches_plotly_as_html(tmp_path, capsys):
    link = '<a href="https://example.invalid/">click</a>'
    records = [measurement("unchunked", "chunking", BASE, 20 * MiB, baseline=True)]
    records += [measurement("slice_loop", "chunking", {**BASE, "mode_name": f"{link}{i}"}, (10 + i) * MiB)
                for i in range(3)]
    records.append(measurement(EVIL, "chunking", {**BASE, "mode_name": link}, 9 * MiB))
    results, data = _inputs(tmp_path, records)
    assert _site(capsys, results, data, tmp_path / "out")[0] == 0
    for page in (tmp_path / "out").glob("*.html"):
        text = page.read_text()
        assert "<a href=\"https://example" not in text
        for fig in _figures(text):
            drawn = json.dumps(fig, ensure_ascii=False)
            assert "<a href" not in drawn and "<script" not in drawn and "<img" not in drawn, page.name
    family = _figures((tmp_path / "out" / "family-chunking.html").read_text())
    xs = [x for f in family for t in f["data"] for x in t.get("x", [])]
    assert "&lt;a href=\"https://example.invalid/\"&gt;click&lt;/a&gt;0" in xs


def test_everything_at_once_in_a_fresh_process(tmp_path):
    """The whole corpus in one data folder: exit 0, one warning line per problem, no traceback."""
    results, data = make_inputs(tmp_path)
    sweeps = data / "sweeps"
    (sweeps / "binary.jsonl").write_bytes(b"\xff\xfe\x00junk\n" + json.dumps(_good()[1]).encode() + b"\n")
    (sweeps / "deep.jsonl").write_text("[" * 100_000 + "\n")
    os.mkfifo(sweeps / "fifo.jsonl")
    os.symlink("loop.jsonl", sweeps / "loop.jsonl")
    (data / "timelines" / "int.json").write_text('{"baseline_bytes": 1' + "0" * 400 + "}")
    (data / "reproductions" / "nan.json").write_text("NaN")
    write_jsonl(sweeps / "verdicts.jsonl", _verdict_records())
    cmd = [sys.executable, "-m", "memlab", "site", "--results", str(results), "--data", str(data),
           "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=REPO)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    warned = [ln for ln in lines if ln.startswith("memlab: warning: ")]
    named = ["binary.jsonl:1: not UTF-8", "deep.jsonl:1: JSON nested 100000 levels", "fifo.jsonl: a FIFO",
             "loop.jsonl: symbolic link loop", "int.json: invalid timeline", "nan.json: a reproduction must be"]
    assert len(warned) == len(named) and all(any(n in w for w in warned) for n in named)
    assert all(ln.startswith("memlab: ") for ln in lines)
    assert (tmp_path / "out" / "index.html").exists()
