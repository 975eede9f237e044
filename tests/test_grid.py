"""`memlab sweep --grid`: any parameter, a plug-in's own included, as a validated cross product."""
import json

import pytest

from memlab.cli import main
from memlab.sweep import parse_grid

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

PLUGIN = '''
import torch
import memlab
from memlab.families.chunking.workload import ChainedMatmul


class Pieces(memlab.Technique, name="grid_pieces"):
    """Rows in `pieces` parts, concatenated."""
    workload = ChainedMatmul
    params = {"pieces": memlab.Param(2, low=1, high=64, doc="number of row blocks")}

    def forward(self, problem):
        x, m = problem.inputs["x"], problem.model
        return torch.cat([(p @ m.w1) @ m.w2 for p in x.chunk(self.config["pieces"])])
'''


def test_parse_grid_keeps_text_and_rejects_malformed_specs():
    assert parse_grid(["a=1,2", "b= x ,y"]) == {"a": ["1", "2"], "b": ["x", "y"]}
    with pytest.raises(ValueError, match="not of the form"):
        parse_grid(["a"])
    with pytest.raises(ValueError, match="names 'a' twice"):
        parse_grid(["a=1", "a=2"])


def test_a_plugin_parameter_is_swept_as_a_cross_product(tmp_path, capsys):
    plugin = tmp_path / "pieces.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "grid.jsonl"
    rc = main(["sweep", "--plugin", str(plugin), "--technique", "grid_pieces", "--grid", "pieces=2,4",
               "--grid", "n=32,64", "--grid", "d=4", "--grid", "hidden=8", "--in-process", "--iterations", "2",
               "--repeats", "1", "--time-budget", "0", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rc == 0, capsys.readouterr().err
    assert sorted((r["params"]["pieces"], r["params"]["n"]) for r in rows) == [(2, 32), (2, 64), (4, 32), (4, 64)]
    assert all(r["status"] == "ok" for r in rows)


def test_bad_grid_values_are_one_line_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "never.jsonl"
    assert main(["sweep", "--technique", "slice_loop", "--grid", "chunk_size=0", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == "memlab: error: chunk_size=0 is out of range: expected integer in [1, 10000000]"
    assert not out.exists()


def test_a_swept_plugin_parameter_is_the_x_axis_of_its_site_chart(tmp_path):
    """Issue 13's done-when: the plug-in's own parameter, swept by --grid, is what its family chart draws against."""
    plugin = tmp_path / "pieces_site.py"  # its own name: the other test's plug-in stays registered in this process
    plugin.write_text(PLUGIN.replace('name="grid_pieces"', 'name="grid_pieces_site"'))
    out = tmp_path / "grid.jsonl"
    assert main(["sweep", "--plugin", str(plugin), "--technique", "grid_pieces_site", "--grid", "pieces=1,2,4",
                 "--grid", "n=64", "--grid", "d=4", "--grid", "hidden=8", "--in-process", "--iterations", "3",
                 "--repeats", "1", "--time-budget", "0", "--out", str(out)]) == 0
    from memlab.site import build_site

    index = build_site(tmp_path / "no-results", tmp_path / "no-data", tmp_path / "site", extra_runs=[out])
    page = (index.parent / "family-chunking.html").read_text()
    assert "Peak allocated vs pieces" in page
