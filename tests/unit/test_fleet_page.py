"""The fleet's HTML page in a real browser: headless Chromium builds the ranking table and paints the bottleneck
mix (a screenshot), from the rows of real recorded logs (tests/data/spark-fleet, spark-eventlog.json.gz)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import load_classifier
from crystalperf.core.report.svg import COLOURS
from crystalperf.fleet.discover import discover
from crystalperf.fleet.page import render
from crystalperf.fleet.row import report_row
from crystalperf.fleet.summary import FleetSummary
from crystalperf.integrations.spark import read_event_log
from tests.unit.test_report_html import _browser, _png_pixels, _rgb, parse

DATA = Path(__file__).resolve().parents[1] / "data"

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(_browser() is None, reason="no headless Chromium on this machine")]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FleetSummary]:
    summary = FleetSummary()
    classifier = load_classifier()
    for source in discover([DATA / "spark-fleet", DATA / "spark-eventlog.json.gz"]):
        trace = read_event_log(Path(source.path))
        summary.add(report_row(source, analyze(trace, classifier=classifier).report, tasks=0))
    path = tmp_path_factory.mktemp("fleet") / "crystalperf-fleet.html"
    path.write_text(render(summary, title="recorded fleet"), encoding="utf-8")
    return path, summary


def test_chromium_builds_the_ranking_table(page: tuple[Path, FleetSummary]) -> None:
    path, summary = page
    dom = subprocess.run([str(_browser()), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          path.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    doc = parse(dom)
    tags = [t for t, _ in doc.tags]
    assert [t for t, a in doc.tags if a.get("id") == "ranking-table"] == ["table"]
    assert tags.count("tr") == 1 + summary.applications  # the head and one row per application
    assert {a.get("id") for _, a in doc.tags} >= {"fleet-mix", "fleet-scatter", "ranking", "mix"}
    words = " ".join(doc.text)
    assert "fleet-skewed" in words and "fleet-failed" in words and "crystalperf-golden" in words


def test_chromium_paints_the_bottleneck_mix(page: tuple[Path, FleetSummary], tmp_path: Path) -> None:
    path, summary = page
    shot = tmp_path / "fleet.png"
    run = subprocess.run(
        [str(_browser()), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", "--window-size=1300,1400", path.as_uri()],
        capture_output=True, text=True, timeout=120, check=True)
    assert not [line for line in run.stderr.splitlines() if "CONSOLE" in line], run.stderr[-2000:]
    painted = _png_pixels(shot.read_bytes())
    resources = [resource for resource, _, _ in summary.mix()]
    assert len(resources) >= 2, resources  # the recorded fleet has more than one bottleneck
    for resource in resources:
        assert _rgb(COLOURS[resource]) in painted, f"{resource}'s colour is not on the screen"
