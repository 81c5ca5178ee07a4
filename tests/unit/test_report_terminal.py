"""The terminal summary's "top function" column names where an operation worked, not where it waited."""

from __future__ import annotations

from pathlib import Path

from crystalperf.core.analysis import analyze_path
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.report.terminal import TerminalRenderer, _top_busy_function
from crystalperf.core.trace import save_trace
from crystalperf.core.trace.synthetic import spark_like_trace

PARKED = {"name": "org.apache.flink.runtime.io.network.buffer.LocalBufferPool.requestMemorySegmentBlocking",
          "vector": {"cpu": 0.0, "disk": 0.0, "network": 0.0, "waiting": 1.0}}
ENCODER = {"name": "org.apache.flink.table.data.binary.StringUtf8Utils.encodeUTF8",
           "vector": {"cpu": 0.9, "disk": 0.0, "network": 0.0, "waiting": 0.1}}
SLEEPER = {"name": "time.sleep", "vector": {"cpu": 0.0, "disk": 0.0, "network": 0.0, "waiting": 1.0}}


def test_the_most_sampled_function_that_mostly_worked_is_named():
    assert _top_busy_function([PARKED, ENCODER]) is ENCODER
    assert _top_busy_function([ENCODER, PARKED]) is ENCODER


def test_an_operation_that_only_waited_names_where_it_waited():
    assert _top_busy_function([SLEEPER, PARKED]) is SLEEPER
    assert _top_busy_function([]) is None
    assert _top_busy_function([{"name": "f"}]) == {"name": "f"}  # a report without vectors: the most sampled


def test_the_table_shows_the_busy_function_and_the_json_keeps_the_order(tmp_path: Path):
    path = save_trace(spark_like_trace(jobs=1, tasks_per_stage=2), tmp_path / "crystalperf-trace.json.gz")
    report = analyze_path(path, tmp_path, classifier=KeywordClassifier()).report
    critical = [o for o in report["operations"] if o["on_critical_path"] and not o["children"]]
    assert critical
    for op in critical:
        op["top_functions"] = [PARKED, ENCODER]
    text = TerminalRenderer(width=400).render(report)
    assert "encodeUTF8" in text and "requestMemorySegmentBlocking" not in text
    assert [f["name"] for f in critical[0]["top_functions"]] == [PARKED["name"], ENCODER["name"]]


def test_the_summary_says_where_the_unmeasured_time_went(tmp_path: Path):
    from crystalperf.core.analysis import analyze
    from crystalperf.integrations.spark import read_event_log

    sampled = save_trace(spark_like_trace(jobs=1, tasks_per_stage=2), tmp_path / "crystalperf-trace.json.gz")
    report = analyze_path(sampled, tmp_path, classifier=KeywordClassifier()).report
    assert report["sources"].get("samples")
    assert "rest inferred from the sampled functions" in TerminalRenderer(width=400).render(report)
    # an event log has no stacks: its unmeasured time follows the bytes moved, and the line says so
    log = Path(__file__).resolve().parents[1] / "data" / "spark-eventlog.json.gz"
    report = analyze(read_event_log(log), classifier=KeywordClassifier(), scenarios=[], band=False).report
    assert not report["sources"].get("samples")
    text = TerminalRenderer(width=400).render(report)
    assert "split by the bytes the tasks moved (no stacks were sampled)" in text and "sampled functions" not in text
