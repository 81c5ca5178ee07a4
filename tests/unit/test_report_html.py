"""The self-contained HTML report: structure, caps for big traces, and escaping of trace strings."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.report import renderer_for
from crystalperf.core.report.html import MAX_BARS, MAX_DAG_NODES, HtmlRenderer
from crystalperf.core.report.json import INDENT_UP_TO_OPERATIONS, JsonRenderer, dumps_in_pieces
from crystalperf.core.report.svg import COLOURS, Hierarchy, render_bars, render_dag, select_nodes
from crystalperf.core.trace.synthetic import spark_like_trace

HOSTILE = "<script>alert(1)</script>"
QUOTES = "x\" onmouseover=\"alert(2)\" y='z'"
VOID = {"meta", "br", "img", "input", "link", "hr", "col", "source", "wbr", "area", "base", "embed", "track"}
# SVG elements written self-closed (<rect/>) are closed by the parser's startendtag.


class Collector(HTMLParser):
    """Tags, attributes and balance of the document, as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            if tag in self.stack:
                while self.stack and self.stack.pop() != tag:
                    pass
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def with_class(self, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]

    def by_id(self, ident: str) -> list[tuple[str, dict[str, str | None]]]:
        return [(t, a) for t, a in self.tags if a.get("id") == ident]


def parse(html: str) -> Collector:
    c = Collector()
    c.feed(html)
    c.close()
    assert not c.errors, c.errors[:5]
    assert c.stack == [], c.stack
    return c


@pytest.fixture(scope="module")
def small_report() -> dict:
    return analyze(spark_like_trace(seed=3), classifier=KeywordClassifier()).report


@pytest.fixture(scope="module")
def small_html(small_report: dict) -> str:
    return HtmlRenderer().render(small_report)


def test_renderer_is_chosen_by_name_and_extension() -> None:
    assert isinstance(renderer_for("html"), HtmlRenderer)
    assert isinstance(renderer_for("crystalperf-report.html"), HtmlRenderer)
    assert HtmlRenderer.extension == ".html"


def test_page_is_well_formed_and_has_every_section(small_html: str) -> None:
    assert small_html.startswith("<!DOCTYPE html>")
    doc = parse(small_html)
    for ident in ("bottleneck", "advice", "dag", "resource-bars", "verdict-bar", "what-if", "whatif-table",
                  "operations-table", "sources", "vector-sources", "warnings"):
        assert doc.by_id(ident), f"no element with id {ident}"
    ids = [a["id"] for _, a in doc.tags if a.get("id")]
    assert len(ids) == len(set(ids)), "duplicate ids"


def test_page_fetches_nothing(small_html: str) -> None:
    doc = parse(small_html)
    assert not [t for t, _ in doc.tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    for _, attrs in doc.tags:
        for name in ("src", "href"):
            value = attrs.get(name)
            assert value is None or value.startswith("#"), f"{name}={value}"
    # The only URLs are the SVG namespace declarations, which are never fetched.
    urls = set(re.findall(r"https?://[^\s\"')]+", small_html))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls
    assert "@import" not in small_html and "url(" not in small_html.replace("url(#arrow", "")


def test_verdict_sentence_and_numbers(small_report: dict, small_html: str) -> None:
    b = small_report["bottleneck"]
    doc = parse(small_html)
    text = " ".join(doc.text)
    assert b["sentence"] in text
    assert f"{b['resource']}" in text
    segments = [a for t, a in doc.tags if t == "rect" and (a.get("class") or "").startswith("seg-")]
    assert {s["class"] for s in segments} >= {f"seg-{b['resource']}"}


def test_dag_draws_every_operation_and_highlights_the_critical_path(small_report: dict, small_html: str) -> None:
    doc = parse(small_html)
    ops = small_report["operations"]
    leaves = [o for o in ops if not o["children"]]
    parents = [o for o in ops if o["children"]]
    drawn_nodes = {a["data-path"] for a in doc.with_class("a", "op-node")}
    drawn_clusters = {a["data-path"] for a in doc.with_class("g", "cluster")}
    assert drawn_nodes == {o["path"] for o in leaves}
    assert drawn_clusters == {o["path"] for o in parents}
    critical = {a["data-path"] for a in doc.with_class("a", "op-node") + doc.with_class("g", "cluster")
                if "critical" in (a.get("class") or "").split()}
    assert critical == {o["path"] for o in ops if o["on_critical_path"]}
    assert set(small_report["critical_path"]) <= critical
    edges = doc.with_class("path", "edge")
    assert len(edges) == len(small_report["edges"])
    assert doc.with_class("path", "critical"), "no critical-path edge highlighted"
    # Every DAG node links to its row in the operations table.
    rows = {a["id"] for t, a in doc.tags if t == "tr" and (a.get("id") or "").startswith("op-")}
    links = {a["href"][1:] for a in doc.with_class("a", "op-node")}
    assert links <= rows


def test_bars_stack_the_three_resources_largest_first(small_report: dict, small_html: str) -> None:
    doc = parse(small_html)
    leaves = [o for o in small_report["operations"] if not o["children"]]
    rows = doc.with_class("g", "bar-row")
    assert len(rows) == len(leaves)
    classes = {c for t, a in doc.tags if t == "rect" for c in (a.get("class") or "").split()}
    assert {"bar-cpu", "bar-disk", "bar-network"} <= classes
    # The first row's width is the largest total.
    widths: list[float] = []
    row_total = 0.0
    for tag, attrs in doc.tags:
        if tag == "g" and "bar-row" in (attrs.get("class") or ""):
            if row_total:
                widths.append(row_total)
            row_total = 0.0
        elif tag == "rect" and "bar " in (attrs.get("class") or "") + " ":
            row_total += float(attrs["width"] or 0)
    widths.append(row_total)
    assert widths == sorted(widths, reverse=True)


def test_whatif_table_shows_all_three_predictors(small_report: dict, small_html: str) -> None:
    from crystalperf.core.units import format_seconds

    table = small_html.split('id="whatif-table"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == len(small_report["predictions"]) + 1
    for p in small_report["predictions"]:
        row = table.split(f"<b>{p['description']}</b>", 1)[1].split("</tr>", 1)[0]
        assert format_seconds(p["crystalperf"]["runtime_s"]) in row
        assert format_seconds(p["crystalperf"]["low_s"]) in row and format_seconds(p["crystalperf"]["high_s"]) in row
        assert format_seconds(p["linear"]["runtime_s"]) in row
        assert format_seconds(p["replay"]["runtime_s"]) in row


def test_top_functions_advice_and_sources(small_report: dict, small_html: str) -> None:
    text = " ".join(parse(small_html).text)
    for o in small_report["operations"]:
        for f in o["top_functions"]:
            assert f["name"] in text
    for line in small_report["advice"]:
        assert line in text
    assert small_report["sources"]["classifier"] in text
    assert f"{small_report['sources']['samples']:,}" in text
    for source in small_report["sources"]["vector_sources"]:
        assert source in text


def hostile_trace():
    trace = spark_like_trace(jobs=2, seed=5)
    trace.application.name = f"app {HOSTILE} {QUOTES}"
    trace.application.id = f"id-{HOSTILE}"
    for job in trace.operations:
        job.name = f"job {HOSTILE} & {QUOTES}"
        job.kind = f"kind{HOSTILE}"
        for stage in job.children:
            stage.name = f"stage {QUOTES} {HOSTILE}"
            stage.attributes = {f"key{HOSTILE}": f"value {QUOTES}"}
    for frame in trace.samples.frames:
        frame.name = f"{frame.name}{HOSTILE}"
    trace.warnings.append(f"warning {HOSTILE} {QUOTES}")
    return trace


def test_every_trace_string_is_escaped() -> None:
    report = analyze(hostile_trace(), classifier=KeywordClassifier()).report
    report["sources"]["problems"] = [f"problem {HOSTILE} {QUOTES}"]
    report["advice"] = list(report["advice"]) + [f"advice {HOSTILE}"]
    html = HtmlRenderer().render(report)
    assert HOSTILE not in html
    assert "onmouseover=\"alert" not in html
    doc = parse(html)
    assert not [t for t, _ in doc.tags if t == "script"]
    assert not [a for _, a in doc.tags if any(k.startswith("on") for k in a)], "an injected event attribute"
    text = "".join(doc.text)
    # The names still read correctly once the browser decodes them.
    assert f"job {HOSTILE} & {QUOTES}" in text
    assert f"warning {HOSTILE} {QUOTES}" in text
    assert f"problem {HOSTILE} {QUOTES}" in text
    assert f"value {QUOTES}" in text
    assert "&lt;script&gt;" in html


def test_big_trace_caps_the_dag_and_the_bars() -> None:
    trace = spark_like_trace(jobs=40, stages_per_job=8, tasks_per_stage=2, slots=2, samples_per_second=2, seed=1)
    report = analyze(trace, classifier=KeywordClassifier()).report
    n_ops = len(report["operations"])
    assert n_ops > MAX_DAG_NODES
    html = HtmlRenderer().render(report)
    doc = parse(html)
    drawn = {a["data-path"] for a in doc.with_class("a", "op-node") + doc.with_class("g", "cluster")}
    assert len(drawn) <= MAX_DAG_NODES
    tops = {o["path"] for o in report["operations"] if o["parent"] is None}
    assert tops <= drawn, "every top-level operation is drawn"
    # The whole chain is critical here, so the budget goes to critical-path stages in order of size.
    assert len(drawn) == MAX_DAG_NODES
    assert all(o["on_critical_path"] for o in report["operations"] if o["path"] in drawn)
    assert f"of {n_ops} operations are drawn" in html
    assert "more not drawn" in html
    assert len(doc.with_class("g", "bar-row")) == MAX_BARS
    assert "smaller operations left out add up to" in html


def test_node_selection_keeps_ancestors_and_prefers_the_critical_path() -> None:
    trace = spark_like_trace(jobs=10, stages_per_job=6, tasks_per_stage=2, slots=2, samples_per_second=1, seed=2)
    report = analyze(trace, classifier=KeywordClassifier()).report
    h = Hierarchy.of(report)
    keep = select_nodes(h, 25)
    assert len(keep) <= 25
    for path in keep:
        parent = h.ops[path]["parent"]
        assert parent is None or parent in keep
    assert len(keep) == 25
    # Mark a few small stages as the critical path: they are drawn before larger ones.
    stages = sorted((o for o in report["operations"] if o["parent"]), key=lambda o: sum(o["resource_seconds"].values()))
    small = {o["path"] for o in stages[:5]}
    for o in report["operations"]:
        o["on_critical_path"] = o["path"] in small or o["parent"] is None
    h = Hierarchy.of(report)
    keep = select_nodes(h, 25)
    assert small <= keep
    biggest = {o["path"] for o in stages[-10:]}
    assert biggest <= keep, "the rest of the budget goes to the largest"


def test_renders_without_samples_and_after_a_json_round_trip() -> None:
    report = analyze(spark_like_trace(samples_per_second=0, seed=4), classifier=KeywordClassifier()).report
    assert {o["vector_source"] for o in report["operations"] if not o["children"]} == {"metrics"}
    loaded = json.loads(JsonRenderer().render(report))
    loaded["predictions"][0]["speedup"] = None  # what JSON makes of an infinite speed-up
    html = HtmlRenderer().render(loaded)
    doc = parse(html)
    assert doc.by_id("dag") and doc.by_id("resource-bars")
    assert "none in the trace" in html


def test_empty_and_minimal_reports_render() -> None:
    html = HtmlRenderer().render({"application": {"name": "x"}, "operations": [], "predictions": []})
    doc = parse(html)
    assert not doc.by_id("dag")
    assert "The trace has no operations." in html


def _browser() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium on this machine")
def test_a_real_browser_builds_the_same_document(small_html: str, tmp_path: Path) -> None:
    """Chromium's parser (HTML with inline SVG) must see the elements our own parser sees: a stray
    character in an SVG path or an unclosed element would make the browser drop or re-nest them."""
    page = tmp_path / "crystalperf-report.html"
    page.write_text(small_html, encoding="utf-8")
    dom = subprocess.run(
        [str(_browser()), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    ours, theirs = parse(small_html), parse(dom)
    for tag in ("svg", "rect", "table", "tr", "details", "section"):
        assert len([t for t, _ in theirs.tags if t == tag]) == len([t for t, _ in ours.tags if t == tag]), tag
    def words(doc: Collector) -> list[str]:
        return "".join(doc.text).split()

    assert words(theirs) == words(ours)


def _png_pixels(png: bytes) -> set[tuple[int, int, int]]:
    """The distinct RGB colours of an 8-bit, non-interlaced RGB/RGBA PNG (what Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour_type in (2, 6)
            channels = 3 if colour_type == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, colours = zlib.decompress(idat), width * channels, set()
    previous = bytearray(stride)
    for row in range(height):
        line = raw[row * (stride + 1):(row + 1) * (stride + 1)]
        kind, data = line[0], bytearray(line[1:])
        for i in range(stride):
            left = data[i - channels] if i >= channels else 0
            up, up_left = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                data[i] = (data[i] + left) & 0xFF
            elif kind == 2:
                data[i] = (data[i] + up) & 0xFF
            elif kind == 3:
                data[i] = (data[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                data[i] = (data[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        colours.update(tuple(data[i:i + 3]) for i in range(0, stride, channels))  # type: ignore[misc]
        previous = data
    return colours


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium on this machine")
@pytest.mark.parametrize("part", ["dag", "bars"])
def test_a_real_browser_paints_the_dag_and_the_bars(small_report: dict, tmp_path: Path, part: str) -> None:
    """Each drawing alone, screenshotted by headless Chromium: its resource colours must reach the
    screen (an SVG that fails to paint leaves a white page), and the browser logs no console error."""
    svg = render_dag(small_report)[0] if part == "dag" else render_bars(small_report)[0]
    page = tmp_path / f"{part}.html"
    page.write_text(f"<!DOCTYPE html><html><body style='margin:0;background:#fff'>{svg}</body></html>",
                    encoding="utf-8")
    shot = tmp_path / f"{part}.png"
    run = subprocess.run(
        [str(_browser()), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert not [line for line in run.stderr.splitlines() if "CONSOLE" in line], run.stderr[-2000:]
    painted = _png_pixels(shot.read_bytes())
    for resource in ("cpu", "disk", "network"):
        assert _rgb(COLOURS[resource]) in painted, f"{resource} colour not on screen in the {part} drawing"


@pytest.mark.parametrize("seed", range(5))
def test_a_large_report_is_encoded_in_pieces_to_the_same_text(seed: int) -> None:
    rng = random.Random(seed)

    def value(depth: int) -> object:
        kind = rng.randrange(7 if depth < 3 else 4)
        if kind == 0:
            return rng.uniform(-1e6, 1e6)
        if kind == 1:
            return rng.choice(["op-1", "Stage 3 \u00e9\u4e2d", 'quote " and \\ back', "", "\n\t\x01"])
        if kind == 2:
            return rng.choice([None, True, False, rng.randrange(-10**20, 10**20)])
        if kind == 3:
            return []
        if kind == 4:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        if kind == 5:
            return {rng.choice(["a", "b\u00e9", "c d", 1, 2.5, None, True]): value(depth + 1) for _ in range(3)}
        return (value(depth + 1), value(depth + 1))

    document = {
        "operations": [{"id": f"op-{i}", "v": value(1)} for i in range(rng.choice([0, 99, 100, 101, 250, 1000]))],
        "edges": [value(1) for _ in range(rng.randrange(300))],
        "partial": rng.choice([True, False]),
        "bottleneck": {"resource": "cpu", "seconds": {"cpu": 1.25}},
        "name": "\u00e9\u4e2d",
    }
    assert dumps_in_pieces(document) == json.dumps(document, allow_nan=False)
    assert dumps_in_pieces({1: "a", "b": [1]}) == json.dumps({1: "a", "b": [1]})  # the encoder converts such keys
    with pytest.raises(ValueError):
        dumps_in_pieces({"operations": [{"x": 1.0}] * 150 + [{"x": math.nan}]})


def test_a_report_past_the_indent_limit_renders_as_the_encoder_would_with_infinities_as_null() -> None:
    operations = [{"id": f"op-{i}", "speedup": 1.5} for i in range(INDENT_UP_TO_OPERATIONS + 1)]
    operations[1234]["speedup"] = math.inf
    text = JsonRenderer().render({"operations": operations, "total_runtime_s": 2.0})
    expected = [dict(o) for o in operations]
    expected[1234]["speedup"] = None
    assert text == json.dumps({"operations": expected, "total_runtime_s": 2.0}) + "\n"
