"""Which combination `crystalperf train` ships: the weighted one only with a clear gain over the average."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crystalperf.models.cli import _ship_combination


def _report(test: tuple[float, float], verified: tuple[float, float]) -> dict:
    return {part: {"combined": {"accuracy": avg}, "weighted": {"accuracy": weighted}}
            for part, (avg, weighted) in (("test", test), ("verified", verified))}


@pytest.mark.parametrize(
    ("test", "verified", "method"),
    [
        ((0.749, 0.755), (0.451, 0.446), "average"),  # the shipped weights' figures
        ((0.700, 0.705), (0.500, 0.505), "average"),  # half a point each: within noise
        ((0.700, 0.720), (0.500, 0.490), "average"),  # wins on one split only
        ((0.700, 0.720), (0.500, 0.515), "weighted"),
    ],
)
def test_weighted_ships_only_with_a_point_of_gain_on_both_splits(
    tmp_path: Path, test: tuple[float, float], verified: tuple[float, float], method: str
) -> None:
    shipped = _ship_combination(_report(test, verified), {"doc_weight": 0.35}, tmp_path)
    assert shipped["method"] == method
    written = json.loads((tmp_path / "combine.json").read_text())
    assert written["method"] == method and written["params"] == {"doc_weight": 0.35}
    assert ("why_average" in written) == (method == "average")
