"""``crystalperf.load_report``: a report (or a trace, analysed) that Jupyter renders inline."""

from __future__ import annotations

import html
import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import crystalperf
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import load_classifier
from crystalperf.core.errors import BadInputError
from crystalperf.core.report.json import JsonRenderer
from crystalperf.core.trace import load_trace, save_trace
from crystalperf.core.trace.synthetic import spark_like_trace

VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "embed", "source", "track", "wbr"}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CRYSTALPERF_CACHE_DIR", str(tmp_path / "cache"))


class _Page(HTMLParser):
    """Checks that every element is closed in order, and collects the iframes' srcdoc and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.frames: list[dict[str, str | None]] = []
        self.text: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "iframe":
            self.frames.append(dict(attrs))
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass  # <rect .../>, <path .../>: closed where they open

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:]} ")
        else:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(markup: str) -> _Page:
    page = _Page()
    page.feed(markup)
    page.close()
    assert not page.problems and not page.open, (page.problems[:5], page.open[-5:])
    return page


def _trace(tmp_path: Path, name: str = "notebook job") -> Path:
    trace = spark_like_trace(jobs=1, stages_per_job=2, tasks_per_stage=4, slots=2)
    trace.application.name = name
    path = tmp_path / "crystalperf-trace.json.gz"
    save_trace(trace, path)
    return path


def test_a_report_renders_inline_as_a_sandboxed_frame_holding_the_whole_page(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    report = analyze(load_trace(trace), classifier=load_classifier("keyword")).report
    path = tmp_path / "crystalperf-report.json"
    path.write_text(JsonRenderer().render(report))
    loaded = crystalperf.load_report(path)
    assert loaded.to_dict() == json.loads(path.read_text())
    outer = parsed(loaded._repr_html_())
    [frame] = outer.frames
    assert frame["sandbox"] == ""  # no script, no same-origin access to the notebook
    inner = parsed(frame["srcdoc"] or "")
    text = " ".join(inner.text)
    for op in report["operations"]:
        assert op["name"] in text
    assert (frame["srcdoc"] or "").startswith("<!DOCTYPE html>")
    assert "Bottleneck" in loaded.summary and loaded.bottleneck == report["bottleneck"]["resource"]


def test_a_trace_is_analysed_with_its_what_ifs(tmp_path: Path) -> None:
    loaded = crystalperf.load_report(_trace(tmp_path).parent, classifier="keyword")
    assert loaded.to_dict()["predictions"] and loaded.total_runtime_s > 0
    assert "notebook job" in repr(loaded)


def test_names_from_the_trace_cannot_break_out_of_the_frame(tmp_path: Path) -> None:
    hostile = '"></iframe><script>alert(1)</script><img src=x onerror=alert(2)>'
    markup = crystalperf.load_report(_trace(tmp_path, hostile), classifier="keyword")._repr_html_()
    assert "<script" not in markup and "<img" not in markup
    outer = parsed(markup)
    assert len(outer.frames) == 1
    inner = outer.frames[0]["srcdoc"] or ""
    assert "<script" not in inner and hostile in html.unescape(inner)


def test_bad_input_raises_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"neither": 1}')
    with pytest.raises(BadInputError, match="neither a crystalperf trace nor a report"):
        crystalperf.load_report(tmp_path / "x.json")
    with pytest.raises(BadInputError, match="no such file"):
        crystalperf.load_report(tmp_path / "missing.json")


def test_import_crystalperf_stays_light() -> None:
    code = ("import sys, crystalperf; heavy = sorted(m for m in sys.modules if m.startswith(('crystalperf.', "
            "'pydantic', 'networkx', 'rich'))); print(heavy); print(callable(crystalperf.load_report))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "True"
