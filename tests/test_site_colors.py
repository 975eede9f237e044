"""Colours are a function of the technique's name (issue 29): fixed for memlab's own techniques,
a stable hash for any other; a plug-in never moves a built-in's colour and is never grey."""
from __future__ import annotations

import json
import subprocess
import sys

from memlab.site import colors as K
from memlab.site import figures as F
from memlab.site.context import build_context
from site_fixtures import MiB, make_inputs, measurement, write_jsonl


def test_every_registered_technique_has_its_fixed_colour_baselines_grey_no_two_alike_in_a_family():
    from memlab.registry import get_technique, list_techniques

    by_family: dict[str, list[str]] = {}
    for name in list_techniques():
        cls = get_technique(name)
        if not cls.__module__.startswith("memlab.families.") or cls.family().startswith("model:"):
            continue  # a plug-in or a model file another test loaded: hashed colours, tested below
        assert name in K.BUILTIN_COLORS, f"{name}: add it to memlab.site.colors.BUILTIN_COLORS"
        assert (K.BUILTIN_COLORS[name] == K.BASELINE_COLOR) == bool(cls.baseline), name
        by_family.setdefault(cls.family(), []).append(K.BUILTIN_COLORS[name])
    for family, colors in by_family.items():
        assert len(set(colors)) == len(colors), family


def test_any_other_name_takes_a_hashed_colour_the_same_in_every_process():
    names = ["half_and_half", "my_technique", "plain", "<script>"]
    here = [K.technique_color(n) for n in names]
    code = f"from memlab.site.colors import technique_color as c; print([c(n) for n in {names!r}])"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    assert there.stdout.strip() == str(here)
    builtin = set(K.BUILTIN_COLORS.values())
    assert all(c in K.HASHED_COLORS and c not in builtin and c != K.BASELINE_COLOR for c in here)
    assert set(K.PALETTE) == (builtin - {K.BASELINE_COLOR}) | set(K.HASHED_COLORS)


def _chart_colors(ctx) -> dict[str, set[str]]:
    """technique -> every colour a chart of any page draws it in (``meta`` names the technique)."""
    seen: dict[str, set[str]] = {}
    for page in ctx["pages"]:
        for section in page.get("sections", []):
            for chart in section.get("charts", []):
                for t in json.loads(chart["figure"])["data"]:
                    meta, c = t.get("meta") or {}, (t.get("line") or t.get("marker") or {}).get("color")
                    if isinstance(c, list):
                        for tech, ci in zip(meta.get("techniques", []), c):
                            seen.setdefault(tech, set()).add(ci)
                    elif meta.get("technique") and c:
                        seen.setdefault(meta["technique"], set()).add(c)
    return seen


def test_a_plug_in_moves_no_built_in_colour_and_is_styled_as_a_technique(tmp_path):
    results, data = make_inputs(tmp_path)
    without = build_context(results, data)
    plug = [measurement("half_and_half", "chunking", {"n": 2000, "d": 256, "split": s}, (10 + s) * MiB)
            for s in (2, 4, 8)]
    extra = write_jsonl(tmp_path / "plugin.jsonl", plug)
    with_plugin = build_context(results, data, extra_runs=[extra])
    builtin = [t for t in without["colors"] if t in K.BUILTIN_COLORS]
    assert builtin and all(without["colors"][t] == with_plugin["colors"][t] for t in builtin)
    drawn_without, drawn_with = _chart_colors(without), _chart_colors(with_plugin)
    for tech in builtin:
        assert drawn_with.get(tech, set()) <= {K.BUILTIN_COLORS[tech]} >= drawn_without.get(tech, set()), tech
    assert drawn_with["half_and_half"] == {K.technique_color("half_and_half")} != {F.BASELINE_COLOR}
