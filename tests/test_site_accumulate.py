"""Issue 44 item 1 on the site: rows measured with micro-batches accumulated (``accumulate``) or with
gradients zeroed between steps (``grads``) are another setting, never ranked or drawn with the plain
step's rows; rows from before the options existed read ``accumulate`` 1 and ``grads`` none.

Built from the committed CPU sweep: every row again with ``accumulate`` 2 (figures 4,096 bytes higher,
so a comparison that mixed the two would match neither)."""
from __future__ import annotations

import json
from pathlib import Path

from memlab import results as R
from memlab.site import ranking as A

REPO = Path(__file__).resolve().parents[1]
SHIFT = 4096


def _rows(tmp_path: Path):
    plain = REPO / "data" / "sweeps" / "cpu.jsonl"
    lines = []
    for line in plain.read_text().splitlines():
        rec = json.loads(line)
        rec.pop("accumulate", None), rec.pop("grads", None)  # as rows from before the options were written
        lines.append(rec)
        two = {**rec, "accumulate": 2}
        if isinstance(two.get("peak_allocated_bytes"), int):
            two["peak_allocated_bytes"] += SHIFT
        lines.append(two)
    path = tmp_path / "accumulated.jsonl"
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))
    return R.load_runs([path])


def test_old_rows_read_one_micro_batch_and_no_kept_gradients(tmp_path):
    rows = _rows(tmp_path)
    old = rows[rows.index % 2 == 0]
    assert set(old["accumulate"]) == {1} and set(old["grads"]) == {"none"}


def test_accumulated_rows_are_their_own_setting(tmp_path):
    rows = _rows(tmp_path)
    settings = A.settings(rows)
    assert len(settings) == 2 * len({s[:A.SETTING.index("accumulate")] for s in settings})
    for setting in settings:
        inside = A.in_setting(rows, setting)
        assert set(inside["accumulate"]) == {setting[A.SETTING.index("accumulate")]}
        text = A.setting_text(setting)
        assert ("2 micro-batches accumulated" in text) == (setting[A.SETTING.index("accumulate")] == 2), text
        assert "grads" not in text  # the default, not named


def test_the_machine_stays_the_last_field_of_a_setting(tmp_path):
    rows = _rows(tmp_path)
    setting = A.settings(rows)[0]
    assert A.SETTING[-1] == "machine"
    assert A.setting_text(setting, machine=True).endswith(f"on {setting[-1]}")
    assert not A.machines_apart(A.settings(rows))  # accumulate 1 and 2 differ in more than the machine


def test_a_row_above_its_baseline_under_accumulation_shows_its_reason(tmp_path):
    """Issue 44 item 2: the technique's ``accumulation_note``, recorded on an accumulate-2 row, is on
    its family page beside the row; the plain row of the same technique has none."""
    from site_fixtures import chunking_records, make_inputs
    from memlab.site import build_site

    results, data = make_inputs(tmp_path)
    records = chunking_records()
    why = "its chunk gradients are summed as backward goes"
    two = [{**r, "accumulate": 2, "extra": {**(r.get("extra") or {}), "accumulation_note": why}} for r in records]
    (data / "sweeps" / "chunking.jsonl").write_text(
        "".join(json.dumps(r, sort_keys=True) + "\n" for r in [*records, *two]))
    index = build_site(results, data, tmp_path / "out")
    page = (index.parent / "family-chunking.html").read_text()
    plain, _, accumulated = page.partition("2 micro-batches accumulated")
    assert accumulated and why in accumulated
    assert why not in plain
