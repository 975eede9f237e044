"""The sweep's ETA scales each remaining point by its size (memlab.sweep.eta)."""
import math
from types import SimpleNamespace

import pytest

from memlab.sweep.eta import Eta, _power_law, size_of


def _point(technique, **params):
    return SimpleNamespace(technique=technique, params=params)


def test_size_is_the_product_of_the_numeric_workload_parameters():
    config = {"n": 1000, "d": 8, "hidden": 4.0, "x_requires_grad": True, "modes": [2, 3], "block": "mlp",
              "chunk_size": 10}
    assert size_of(config, ["n", "d", "hidden", "x_requires_grad", "modes", "block"]) == 1000 * 8 * 4 * 2 * 3
    assert size_of({"block": "mlp"}, ["block"]) is None and size_of({"n": 0}, ["n"]) is None


def test_power_law_recovers_its_exponent_and_clamps_it():
    pts = [(math.log(s), math.log(3e-6 * s ** 0.8)) for s in (1e3, 1e4, 1e5)]
    log_c, k = _power_law(pts)
    assert k == pytest.approx(0.8) and math.exp(log_c) == pytest.approx(3e-6)
    assert _power_law([(0.0, 1.0), (1.0, 10.0)])[1] == 1.5  # clamped
    assert _power_law([(2.0, 1.0)])[1] == 1.0  # one size: proportional


def test_remaining_points_are_scaled_by_size_not_by_the_mean_so_far():
    sizes = {1: 1e3, 2: 2e3, 3: 4e3, 4: 64e3}
    points = [_point("t", depth=d) for d in sizes]
    eta = Eta(points, lambda p: ("w", sizes[p.params["depth"]]), jobs=2)
    for d in (1, 2, 3):
        eta.finished(points[d - 1], sizes[d] / 1000)  # one second per thousand
    assert eta.seconds_left() == pytest.approx(64 / 2)  # the big point alone, two jobs at once
    eta.finished(points[3], 64.0)
    assert eta.seconds_left() == 0.0


def test_a_workload_not_reached_counts_the_median_and_a_failing_describe_never_stops_it():
    points = [_point("a"), _point("b"), _point("c")]

    def describe(p):
        if p.technique == "c":
            raise RuntimeError("no such technique")
        return p.technique, 10.0

    eta = Eta(points, describe)
    assert eta.seconds_left() == 0.0  # nothing measured yet
    eta.finished(points[0], 4.0)
    assert eta.seconds_left() == pytest.approx(8.0)  # b (other workload) and c (unknown): 4 s each
