"""What a sweep measures: technique x configuration points, from a family's grid, a ``--grid`` cross
product or each technique's defaults."""
from __future__ import annotations

import itertools
from typing import Any

from ..registry import get_technique, list_families, list_techniques
from ..core.setting import DEFAULTS, Point, Setting

__all__ = ["SweepPoint", "parse_grid", "plan_sweep"]

#: a sweep's point is a :class:`memlab.core.setting.Point` (technique, parameters, setting); the old name stays
SweepPoint = Point


def parse_grid(specs: list[str]) -> dict[str, list[str]]:
    """``["chunk_size=100,1000", "batch=256"]`` -> ``{"chunk_size": ["100", "1000"], "batch": ["256"]}``.

    Values stay text here; each technique parses them with its own :class:`~memlab.Param`.
    Raises ValueError naming the malformed spec or the repeated parameter.
    """
    grid: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key or not items:
            raise ValueError(f"--grid {spec!r} is not of the form name=value1,value2,...")
        if key in grid:
            raise ValueError(f"--grid names {key!r} twice; give all its values in one --grid {key}=a,b,c")
        grid[key] = items
    return grid


def _grid_points(cls, grid: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The cross product of ``grid`` for one technique, each value parsed by the technique's Param."""
    specs = cls.all_params()
    unknown = [k for k in grid if k not in specs]
    if unknown:
        raise ValueError(f"technique {cls.name!r} has no parameter {unknown[0]!r}; valid parameters: "
                         f"{', '.join(sorted(specs))}")
    keys = list(grid)
    parsed = [[specs[k].parse(k, v) for v in grid[k]] for k in keys]
    points = [dict(zip(keys, combo)) for combo in itertools.product(*parsed)]
    for p in points:
        cls.resolve(p)  # cross-parameter checks (divisibility...) up front: one line, before measuring
        cls(**p)
    return points


def plan_sweep(family: str | None = None, quick: bool = False, techniques: list[str] | None = None,
               grid: dict[str, list[str]] | None = None, defaults: bool = False,
               setting: Setting = DEFAULTS) -> list[Point]:
    """Technique x configuration pairs to measure, as points in ``setting``.

    The configurations are the workload's sweep grid (``quick``: its small one); or, with ``grid``
    (``{parameter: [values as text]}``), the cross product of those values for every selected
    technique, which must all have those parameters (a plug-in's own included); or, with
    ``defaults``, each technique's default configuration only.
    Grid keys a technique does not have are dropped and the resulting duplicates measured once.
    The order is configuration-major and round-robin over families: the first grid entry of every
    family for every technique, then the second..., so an interrupted sweep has covered every
    technique (and every family) at the configurations it reached.
    Raises ValueError for an unknown family, technique or parameter, or a value out of range.
    """
    families = list_families()
    if family is not None and family not in families:
        raise ValueError(f"unknown family {family!r}; available: {', '.join(families)}")
    if grid and defaults:
        raise ValueError("--grid and --defaults exclude each other: --defaults measures each technique's defaults only")
    names = techniques if techniques is not None else list_techniques(family)
    keyed: list[tuple[int, str, int, SweepPoint]] = []
    for order, name in enumerate(names):
        cls = get_technique(name)
        if family is not None and cls.family() != family:
            continue
        valid = cls.all_params()
        seen: list[dict[str, Any]] = []
        configs = _grid_points(cls, grid) if grid else [{}] if defaults else cls.workload.sweep_grid(quick)
        for index, cfg in enumerate(configs):
            kept = {k: v for k, v in cfg.items() if k in valid}
            if kept not in seen:
                seen.append(kept)
                keyed.append((index, cls.family(), order, Point(name, kept, setting)))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]
