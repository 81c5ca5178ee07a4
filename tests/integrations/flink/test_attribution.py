"""Faithful attribution on real PyFlink SQL jobs configured from ``crystalperf flink-conf``: a job that hashes
every row as fast as datagen makes them is CPU-bound; a job whose datagen source is rate-limited waited for
its input (never disk or network); a FLIP-27 file source's reading, done in its fetcher thread, is its
subtask's work, not waiting; no top function is plumbing; Flink's frames are located from its jars."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crystalperf.core import trace as t
from crystalperf.integrations import flink as cpflink
from crystalperf.integrations.flink.assemble import SOURCE_WAITS_ON
from crystalperf.integrations.flink.reader import FETCHER_ROLE

from .reports import plumbing_top_functions

HASH_STATEMENT = "INSERT INTO snk SELECT k, MAX(SHA512(REPEAT(CAST(v AS STRING), 16))) FROM src GROUP BY k"


def _conf_from_cli(out: Path, *options: str) -> Any:
    """A PyFlink Configuration holding what ``crystalperf flink-conf [options]`` prints, as a user pastes it."""
    from pyflink.common import Configuration

    printed = subprocess.run(
        [sys.executable, "-m", "crystalperf.core.cli", "flink-conf", "--output-dir", str(out), *options],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    config = Configuration()
    for line in printed.splitlines():
        key, value = line.split(": ", 1)
        config.set_string(key, value)
    config.set_string("parallelism.default", "1")
    return config


def _table_env(config: Any, streaming: bool) -> Any:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    settings = EnvironmentSettings.new_instance()
    settings = settings.in_streaming_mode() if streaming else settings.in_batch_mode()
    return TableEnvironment.create(settings.with_configuration(config).build())


def _run(out: Path, *, streaming: bool, rows: int, rows_per_second: int) -> None:
    env = _table_env(_conf_from_cli(out), streaming)
    env.execute_sql(
        f"CREATE TABLE src (k INT, v DOUBLE) WITH ('connector'='datagen', 'number-of-rows'='{rows}', "
        f"'rows-per-second'='{rows_per_second}', 'fields.k.min'='0', 'fields.k.max'='9')"
    )
    env.execute_sql("CREATE TABLE snk (k INT, h STRING) WITH ('connector'='blackhole')")
    assert cpflink.record_plan(env, out, HASH_STATEMENT) is not None
    env.execute_sql(HASH_STATEMENT).wait()


def _report(out: Path, timeout_s: float = 240) -> dict[str, Any]:
    """The report written by the analysis the reporter started at job end (nobody calls finish here), once
    its log says it is done."""
    deadline = time.monotonic() + timeout_s
    while True:
        log = "".join(p.read_text() for p in out.glob("crystalperf-flink-*.log"))
        if "crystalperf: wrote" in log or "Error" in log or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    report = out / "crystalperf-report.json"
    assert report.exists(), f"no report; analysis log: {log!r}"
    return dict(json.loads(report.read_text()))


def _trace(out: Path) -> t.Trace:
    return t.load_trace(out / "crystalperf-trace.json.gz")


@pytest.fixture(scope="module")
def cpu_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyflink")
    out = tmp_path_factory.mktemp("flink-cpu")
    # datagen unthrottled: the source chain hashes rows as fast as it can make them
    _run(out, streaming=False, rows=1_000_000, rows_per_second=1_000_000_000)
    return out


@pytest.fixture(scope="module")
def throttled_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyflink")
    out = tmp_path_factory.mktemp("flink-throttled")
    # 20 rows a second for about 25 s: the same hashing is nothing next to the wait for the next row
    _run(out, streaming=True, rows=500, rows_per_second=20)
    return out


@pytest.fixture(scope="module")
def file_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyflink")
    out = tmp_path_factory.mktemp("flink-file")
    data = out / "lines.csv"
    # 128 MB of lines, just written so read from the page cache: the fetcher thread parses CSV as fast as it can,
    # a second or two on an idle 2-core machine, so it is sampled every 10 ms (the budget lets it)
    line = ("x" * 99 + "\n").encode()
    with data.open("wb") as f:
        for _ in range(1280):
            f.write(line * 1000)
    env = _table_env(_conf_from_cli(out, "--sample-interval-ms", "10", "--cpu-budget", "0.1"), streaming=True)
    env.execute_sql(f"CREATE TABLE lines (line STRING) WITH ('connector'='filesystem', 'path'='file://{data}', "
                    "'format'='csv', 'csv.field-delimiter'='|')")
    env.execute_sql("CREATE TABLE snk (line STRING) WITH ('connector'='blackhole')")
    statement = "INSERT INTO snk SELECT line FROM lines WHERE line LIKE '%zzzz%'"
    assert cpflink.record_plan(env, out, statement) is not None
    env.execute_sql(statement).wait()
    return out


def test_a_cpu_bound_sql_job_is_cpu_bound(cpu_job: Path) -> None:
    report = _report(cpu_job)
    assert report["bottleneck"]["resource"] == "cpu", report["bottleneck"]["sentence"]
    source = next(op for op in report["operations"] if op["id"] == "chain0")
    assert source["vector"]["cpu"] > max(source["vector"]["disk"], source["vector"]["network"],
                                         source["vector"]["waiting"])
    # the source chain's thread CPU time was measured, not inferred
    trace = _trace(cpu_job)
    chain = trace.operations[0]
    assert chain.tasks[0].metrics[t.METRIC_CPU_TIME] > 0
    assert t.METRIC_CPU_TIME in chain.tasks[0].metrics and source["measured"].get("cpu", 0) > 0
    assert plumbing_top_functions(report) == []


def test_flink_frames_are_located_from_the_recorded_classpath(cpu_job: Path) -> None:
    report = _report(cpu_job)
    trace = _trace(cpu_job)
    classpath = trace.environment.classpath
    assert any(Path(entry).name.startswith("flink-dist") for entry in classpath)
    assert any(Path(entry).name.startswith("flink-table-runtime") for entry in classpath)
    assert str(cpflink.jar_path()) in classpath  # the job's own jars (pipeline.jars) too
    # most samples name a function located from source or bytecode, not by the frame's name alone
    assert report["sources"]["located_fraction"] > 0.5, report["sources"]
    functions = [f for op in report["operations"] for f in op["top_functions"]]
    flink = [f for f in functions if f["name"].startswith("org.apache.flink.")]
    assert flink and all(f["origin"] != "frame-name" for f in flink)


def test_a_rate_limited_source_is_waiting_for_its_input(throttled_job: Path) -> None:
    report = _report(throttled_job)
    bottleneck = report["bottleneck"]
    assert bottleneck["resource"] == "waiting", bottleneck["sentence"]
    assert bottleneck["seconds"]["waiting"] > 5 * max(bottleneck["seconds"][r] for r in ("disk", "network"))
    assert "input" in bottleneck["waiting_on"] and "backpressured" not in bottleneck["waiting_on"]
    assert "input" in bottleneck["sentence"]
    trace = _trace(throttled_job)
    source, aggregation = trace.operations
    assert source.attributes[t.ATTRIBUTE_WAITS_ON] == SOURCE_WAITS_ON
    # the aggregation's subtask measured most of its running time as idle: waiting for the source's rows
    task = aggregation.tasks[0].metrics
    assert task[t.METRIC_IDLE_TIME] > task[t.METRIC_RUN_TIME] / 2
    # both chains ran for the whole job, and their tasks say so rather than the job's span by default
    assert source.tasks[0].end - source.tasks[0].start > 10
    assert plumbing_top_functions(report) == []


def test_a_file_sources_fetcher_thread_is_sampled_as_its_subtasks_work(file_job: Path) -> None:
    report = _report(file_job)
    trace = _trace(file_job)
    samples = trace.samples
    assert samples is not None
    source = trace.operations[0]
    assert source.name.startswith("Source: lines")
    # the fetcher's stacks are keyed to the source chain's subtask, with their role, and show the reading
    fetched = [(samples.keys[k], samples.stacks[s]) for k, s in zip(samples.key, samples.stack, strict=True)
               if samples.keys[k].thread == FETCHER_ROLE]
    assert fetched and {key.operation for key, _ in fetched} == {source.id, source.children[0].id}
    assert {key.task for key, _ in fetched} == {source.tasks[0].id}
    names = {samples.frames[f].name for _, stack in fetched for f in stack}
    assert "org.apache.flink.connector.file.src.impl.FileSourceSplitReader.fetch" in names
    # the task thread's idle time was its wait for the fetcher, whose samples split it: not measured waiting;
    # the fetcher's CPU time counts in the subtask's
    task = source.tasks[0].metrics
    assert t.METRIC_IDLE_TIME not in task and task[t.METRIC_CPU_TIME] > 0
    # the reporter measured the fetcher's part of the subtask's threads' CPU time: neither thread used all of it
    assert 0 < task[t.METRIC_READER_CPU_TIME] < task[t.METRIC_THREADS_CPU_TIME]
    assert report["bottleneck"]["resource"] == "cpu", report["bottleneck"]["sentence"]
    assert plumbing_top_functions(report) == []
