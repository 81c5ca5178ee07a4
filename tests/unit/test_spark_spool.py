"""Merging a real PySpark worker's spool file (tests/data/spark-pyworker.json.gz, recorded with the listener on
by tests/data/record/spark_eventlog.py, in the same run as spark-eventlog.json.gz) into a trace, and the
finish step that does it at job end; no pyspark needed."""

from __future__ import annotations

import gzip
import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from crystalperf.core import trace as tr
from crystalperf.integrations.spark import read_event_log
from crystalperf.integrations.spark.assemble import (
    METRIC_PYTHON_CPU_TIME,
    METRIC_PYTHON_CPU_WAIT_TIME,
    add_shipped_file_roots,
    add_worker_cpu,
    add_worker_cpu_wait,
    merge_worker_samples,
    name_python_call_sites,
)
from crystalperf.integrations.spark.finish import main as finish
from crystalperf.integrations.spark.pydriver import CALLS_FILE, DriverCall, program_frame, read_driver_calls
from crystalperf.integrations.spark.reader import read_spool, read_worker_cpu, read_worker_cpu_wait

DATA = Path(__file__).resolve().parents[1] / "data"


def _worker_json() -> dict[str, Any]:
    return json.loads(gzip.decompress((DATA / "spark-pyworker.json.gz").read_bytes()))


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    directory = tmp_path / "spool"
    directory.mkdir()
    (directory / "pyworker-4242.json").write_text(json.dumps(_worker_json()))
    (directory / "unrelated.json").write_text("{}")
    return directory


def test_spool_files_are_read(spool: Path) -> None:
    (part,) = read_spool(spool)
    raw = _worker_json()
    assert part.total == sum(raw["count"]) == 12
    assert {k.operation for k in part.keys} == {"stage-0"} and {k.thread for k in part.keys} == {"python-worker"}


def test_worker_samples_merge_into_a_trace_without_samples(spool: Path) -> None:
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    assert trace.samples is None
    raw = _worker_json()
    merge_worker_samples(trace, read_spool(spool))
    merged = trace.samples
    assert merged is not None and merged.total == sum(raw["count"])
    # the buckets start at the application's start (the worker began sampling later)
    assert raw["origin"] > trace.application.start and merged.origin == trace.application.start
    assert merged.bucket_s == raw["bucket_s"]
    # a sample's time is the middle of its bucket in the worker's table, re-bucketed from the new origin
    first_time = raw["origin"] + (min(raw["bucket"]) + 0.5) * raw["bucket_s"]
    assert min(merged.bucket) == math.floor((first_time - trace.application.start) / raw["bucket_s"])
    # every sample is charged to a stage of the trace: the UDF's stage, where the Python function ran
    stage_ids = {s.id for job in trace.operations for s in job.children}
    assert {k.operation for k in merged.keys} == {"stage-0"} <= stage_ids
    udf_rows = [r for r, stack in enumerate(merged.stack)
                if any(merged.frames[f].name == "__main__.slow_square" for f in merged.stacks[stack])]
    udf_frame = next(i for i, f in enumerate(raw["frames"]) if f["name"] == "__main__.slow_square")
    udf_samples = sum(c for s, c in zip(raw["stack"], raw["count"], strict=True) if udf_frame in raw["stacks"][s])
    assert sum(merged.count[r] for r in udf_rows) == udf_samples == 10


def test_no_worker_files_leave_the_trace_alone(tmp_path: Path) -> None:
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    merge_worker_samples(trace, read_spool(tmp_path))
    assert trace.samples is None


def test_a_damaged_worker_file_is_skipped(spool: Path, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CRYSTALPERF_TESTING", "0")
    (spool / "pyworker-7.json").write_text('{"interval_s": 0.1, "bucket')
    with caplog.at_level(logging.WARNING, logger="crystalperf"):
        parts = read_spool(spool)
    assert len(parts) == 1 and "pyworker-7.json" in caplog.text


def test_finish_merges_the_spool_and_writes_the_trace(spool: Path, tmp_path: Path) -> None:
    listener_trace = tmp_path / "listener" / "crystalperf-trace.json.gz"
    listener_trace.parent.mkdir()
    tr.save_trace(read_event_log(DATA / "spark-eventlog.json.gz"), listener_trace)
    out = tmp_path / "out"
    assert finish([str(listener_trace), "--out", str(out), "--spool", str(spool), "--no-analysis"]) == 0
    written = tr.load_trace(out / "crystalperf-trace.json.gz")
    assert written.samples is not None and written.samples.total == 12
    assert not spool.exists(), "the spool is removed once merged"


def _a_udf_task(trace: tr.Trace) -> tuple[str, tr.Task]:
    stage = next(op for op in trace.iter_operations() if op.id == "stage-0" and op.tasks)
    return stage.id, stage.tasks[0]


def test_the_workers_cpu_time_counts_in_its_tasks_cpu_time(spool: Path, tmp_path: Path) -> None:
    """Spark's executorCpuTime is the JVM task thread's; the PySpark worker's CPU is added at job end."""
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    stage, task = _a_udf_task(trace)
    jvm_cpu, run = task.metrics[tr.METRIC_CPU_TIME], task.metrics[tr.METRIC_RUN_TIME]
    worker_cpu = min(0.05, (run - jvm_cpu) / 2)
    other = tmp_path / "other-worker"
    (spool / "pycpu-4242.json").write_text(json.dumps({"tasks": [
        {"operation": stage, "task": task.id, "cpu_time_s": worker_cpu / 2},
        {"operation": "stage-99", "task": "1", "cpu_time_s": 5.0}]}))
    (spool / "pycpu-4243.json").write_text(json.dumps({"tasks": [
        {"operation": stage, "task": task.id, "cpu_time_s": worker_cpu / 2}]}))  # a second worker, same task
    assert read_worker_cpu(spool)[(stage, task.id)] == pytest.approx(worker_cpu)
    listener_trace = other / "crystalperf-trace.json.gz"
    other.mkdir()
    tr.save_trace(trace, listener_trace)
    assert finish([str(listener_trace), "--out", str(tmp_path / "out"), "--spool", str(spool), "--no-analysis"]) == 0
    _, written = _a_udf_task(tr.load_trace(tmp_path / "out" / "crystalperf-trace.json.gz"))
    assert written.metrics[METRIC_PYTHON_CPU_TIME] == pytest.approx(worker_cpu)
    assert written.metrics[tr.METRIC_CPU_TIME] == pytest.approx(jvm_cpu + worker_cpu)


def test_the_workers_cpu_time_stays_within_the_tasks_run_time() -> None:
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    stage, task = _a_udf_task(trace)
    add_worker_cpu(trace, {(stage, task.id): 1000.0})
    assert task.metrics[tr.METRIC_CPU_TIME] == task.metrics[tr.METRIC_RUN_TIME]
    assert task.metrics[METRIC_PYTHON_CPU_TIME] == 1000.0


def test_the_workers_run_queue_delay_counts_in_its_tasks_cpu_wait(spool: Path, tmp_path: Path) -> None:
    """Runnable but waiting for a core (schedstat): the JVM thread's delay (from the listener) and every
    worker's delay for the task add up in cpu_wait_s; the workers' part is kept apart too."""
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    stage, task = _a_udf_task(trace)
    jvm_cpu, run = task.metrics[tr.METRIC_CPU_TIME], task.metrics[tr.METRIC_RUN_TIME]
    room = run - jvm_cpu
    task.metrics[tr.METRIC_CPU_WAIT_TIME] = room / 8  # as the listener writes the task thread's
    (spool / "pycpu-4242.json").write_text(json.dumps({"tasks": [
        {"operation": stage, "task": task.id, "cpu_time_s": 0.0, "cpu_wait_s": room / 8},
        {"operation": "stage-99", "task": "1", "cpu_time_s": 1.0, "cpu_wait_s": 5.0}]}))
    (spool / "pycpu-4243.json").write_text(json.dumps({"tasks": [
        {"operation": stage, "task": task.id, "cpu_time_s": 0.0, "cpu_wait_s": room / 8}]}))
    assert read_worker_cpu_wait(spool) == pytest.approx({(stage, task.id): room / 4, ("stage-99", "1"): 5.0})
    listener_trace = tmp_path / "listener" / "crystalperf-trace.json.gz"
    listener_trace.parent.mkdir()
    tr.save_trace(trace, listener_trace)
    assert finish([str(listener_trace), "--out", str(tmp_path / "out"), "--spool", str(spool), "--no-analysis"]) == 0
    _, written = _a_udf_task(tr.load_trace(tmp_path / "out" / "crystalperf-trace.json.gz"))
    assert written.metrics[METRIC_PYTHON_CPU_WAIT_TIME] == pytest.approx(room / 4)
    assert written.metrics[tr.METRIC_CPU_WAIT_TIME] == pytest.approx(room / 8 + room / 4)
    assert written.metrics[tr.METRIC_CPU_TIME] == pytest.approx(jvm_cpu)


def test_cpu_time_and_run_queue_delay_stay_within_the_tasks_run_time() -> None:
    # A thread is on a core or queued for one, never both: the two are parts of the run time together.
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    stage, task = _a_udf_task(trace)
    run = task.metrics[tr.METRIC_RUN_TIME]
    add_worker_cpu(trace, {(stage, task.id): run / 4})
    add_worker_cpu_wait(trace, {(stage, task.id): 1000.0})
    assert task.metrics[METRIC_PYTHON_CPU_WAIT_TIME] == 1000.0
    assert task.metrics[tr.METRIC_CPU_TIME] + task.metrics[tr.METRIC_CPU_WAIT_TIME] == pytest.approx(run)
    add_worker_cpu(trace, {(stage, task.id): 1000.0})  # CPU time alone fills the run time: no room to queue
    add_worker_cpu_wait(trace, {(stage, task.id): 1.0})
    assert task.metrics[tr.METRIC_CPU_WAIT_TIME] == 0.0


def test_workers_that_could_not_read_schedstat_add_no_cpu_wait(spool: Path, tmp_path: Path) -> None:
    """A worker without /proc writes its CPU time only: no task gains a cpu_wait_s."""
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    stage, task = _a_udf_task(trace)
    (spool / "pycpu-4242.json").write_text(json.dumps({"tasks": [
        {"operation": stage, "task": task.id, "cpu_time_s": 0.01}]}))
    assert read_worker_cpu_wait(spool) == {}
    listener_trace = tmp_path / "listener" / "crystalperf-trace.json.gz"
    listener_trace.parent.mkdir()
    tr.save_trace(trace, listener_trace)
    assert finish([str(listener_trace), "--out", str(tmp_path / "out"), "--spool", str(spool), "--no-analysis"]) == 0
    written = tr.load_trace(tmp_path / "out" / "crystalperf-trace.json.gz")
    metrics = [t.metrics for op in written.iter_operations() for t in op.tasks]
    assert metrics and not any(tr.METRIC_CPU_WAIT_TIME in m or METRIC_PYTHON_CPU_WAIT_TIME in m for m in metrics)
    assert any(METRIC_PYTHON_CPU_TIME in m for m in metrics)


# --- the lines of the PySpark program that started the jobs ------------------------------------------------------


def _as_dataframe_actions(trace: tr.Trace) -> tr.Trace:
    """The golden log's jobs named as Spark names a DataFrame action called through py4j."""
    for number, job in enumerate(trace.operations):
        prefix = job.name.split(": ", 1)[0]
        job.name = f"{prefix}: SQL {number}: count at NativeMethodAccessorImpl.java:0"
        job.attributes["sql_execution_id"] = str(number)
        for stage in job.children:
            stage.name = f"{stage.name.split(': ', 1)[0]}: count at NativeMethodAccessorImpl.java:0"
    trace.sql_queries = [tr.SqlQuery(execution_id=str(n), description="count at NativeMethodAccessorImpl.java:0")
                         for n in range(len(trace.operations))]
    return trace


def test_jobs_started_from_python_are_named_after_the_programs_line() -> None:
    trace = _as_dataframe_actions(read_event_log(DATA / "spark-eventlog.json.gz"))
    job0, job1, job2 = trace.operations
    calls = [
        DriverCall(job0.start - 0.2, job0.end + 0.1, thread=1, file="/jobs/etl.py", line=10),
        # the JVM's times are whole milliseconds: a job 0.5 ms past the call's recorded end is still its
        DriverCall(job1.start - 0.3, job1.start - 0.0005, thread=1, file="/jobs/etl.py", line=12),
        # two Python threads in actions at once: which one started job 2 is not known
        DriverCall(job2.start - 0.1, job2.end, thread=1, file="/jobs/etl.py", line=14),
        DriverCall(job2.start - 0.2, job2.end, thread=2, file="/jobs/etl.py", line=30),
    ]
    assert name_python_call_sites(trace, calls) == 2
    assert job0.name == "job 0: SQL 0: count at /jobs/etl.py:10"
    assert job0.attributes["python_call_site"] == "/jobs/etl.py:10"
    assert [s.name for s in job0.children] == ["stage 0: count at /jobs/etl.py:10", "stage 1: count at /jobs/etl.py:10"]
    assert job1.name.endswith("count at /jobs/etl.py:12")
    assert job2.name.endswith("count at NativeMethodAccessorImpl.java:0") and "python_call_site" not in job2.attributes
    assert [q.description for q in trace.sql_queries] == [
        "count at /jobs/etl.py:10", "count at /jobs/etl.py:12", "count at NativeMethodAccessorImpl.java:0"]


def test_only_reflective_call_sites_outside_streaming_batches_are_renamed() -> None:
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    job0, job1, job2 = trace.operations
    spark_named = job0.name  # PySpark set the line itself (collect)
    job1.name = "job 1: count at DirectMethodHandleAccessor.java:103"  # JDK 18 on
    job2.name = "job 2: q1 batch 4"
    job2.attributes["streaming_query_id"] = "q1-id"
    calls = [DriverCall(trace.application.start, trace.application.end, thread=7, file="/jobs/s.py", line=3)]
    late = DriverCall(job1.start + 0.01, job1.end, thread=8, file="/jobs/s.py", line=9)  # started after the job
    assert name_python_call_sites(trace, [*calls, late]) == 1
    assert job0.name == spark_named and job2.name == "job 2: q1 batch 4"
    assert job1.name == "job 1: count at /jobs/s.py:3"
    assert name_python_call_sites(trace, []) == 0


def test_a_library_s_jobs_during_a_call_say_the_programs_line_after_their_own() -> None:
    """MLlib's fit runs its jobs from Scala code inside one call from the program: Spark names them after that code,
    which the name keeps, and the program's line follows; a job PySpark named after the program's line keeps it."""
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    job0, job1, job2 = trace.operations
    job1.name = "job 1: treeAggregate at RDDLossFunction.scala:61"
    for stage in job1.children:
        stage.name = f"{stage.name.split(': ', 1)[0]}: treeAggregate at RDDLossFunction.scala:61"
    job2.name = "job 2: run at ThreadPoolExecutor.java:1136"
    pyspark_named = job0.name
    calls = [DriverCall(trace.application.start, trace.application.end, thread=1, file="/jobs/train.py", line=30)]
    assert name_python_call_sites(trace, calls) == 2
    assert job0.name == pyspark_named and "python_call_site" not in job0.attributes
    assert job1.name == "job 1: treeAggregate at RDDLossFunction.scala:61, from /jobs/train.py:30"
    assert [s.name.split(": ", 1)[1] for s in job1.children] == [
        "treeAggregate at RDDLossFunction.scala:61, from /jobs/train.py:30"] * len(job1.children)
    assert job1.attributes["python_call_site"] == "/jobs/train.py:30"
    assert job2.name == "job 2: run at ThreadPoolExecutor.java:1136, from /jobs/train.py:30"


def test_the_finish_reads_the_driver_calls_and_skips_damaged_lines(spool: Path, tmp_path: Path) -> None:
    listener_trace = tmp_path / "listener" / "crystalperf-trace.json.gz"
    listener_trace.parent.mkdir()
    trace = _as_dataframe_actions(read_event_log(DATA / "spark-eventlog.json.gz"))
    tr.save_trace(trace, listener_trace)
    job0 = trace.operations[0]
    lines = [json.dumps({"start": job0.start - 0.1, "end": job0.end, "thread": 5, "file": "/jobs/etl.py", "line": 7}),
             '{"start": "soon"}', "not json"]
    (spool / CALLS_FILE.format(pid=99)).write_text("\n".join(lines) + "\n")
    calls, added = read_driver_calls(spool)
    assert [c.site for c in calls] == ["/jobs/etl.py:7"] and added == []
    out = tmp_path / "out"
    assert finish([str(listener_trace), "--out", str(out), "--spool", str(spool), "--no-analysis"]) == 0
    written = tr.load_trace(out / "crystalperf-trace.json.gz")
    assert [j.name for j in written.operations][0] == "job 0: SQL 0: count at /jobs/etl.py:7"
    assert written.operations[1].name.endswith("NativeMethodAccessorImpl.java:0")


def test_the_programs_frame_is_the_first_outside_the_libraries(tmp_path: Path) -> None:
    import inspect

    here = inspect.currentframe()
    assert program_frame(here, ()) is here
    assert program_frame(here, (str(Path(__file__).parent) + "/",)) is not here  # the test runner's frame
    assert program_frame(here, ("/",)) is None


def test_the_directories_of_shipped_files_become_source_roots(spool: Path, tmp_path: Path) -> None:
    trace = read_event_log(DATA / "spark-eventlog.json.gz")
    trace.environment.source_roots = ["/src"]
    trace.environment.properties.update({
        "spark.submit.pyFiles": "/jobs/deps.zip,file:///jobs/lib/util.py, hdfs:///shared/x.zip",
        "spark.files": "relative/conf.json,local:///opt/y.txt,file:/etc/job/settings.ini",
    })
    add_shipped_file_roots(trace, ["/home/me/extra.egg", "s3a://bucket/z.zip"])
    assert trace.environment.source_roots == ["/src", "/jobs", "/jobs/lib", "/etc/job", "/home/me"]
    # what SparkContext.addPyFile added at run time comes through the driver's file
    (spool / CALLS_FILE.format(pid=7)).write_text(json.dumps({"added": "/home/me/more.zip"}) + "\n")
    assert read_driver_calls(spool) == ([], ["/home/me/more.zip"])


def test_a_line_in_a_windows_like_path_is_put_in_as_written() -> None:
    trace = _as_dataframe_actions(read_event_log(DATA / "spark-eventlog.json.gz"))
    job0 = trace.operations[0]
    call = DriverCall(job0.start - 0.1, job0.end, thread=1, file=r"C:\jobs\g\etl.py", line=4)
    assert name_python_call_sites(trace, [call]) == 1
    assert job0.name == r"job 0: SQL 0: count at C:\jobs\g\etl.py:4"


def test_a_call_after_the_spool_is_gone_is_dropped_without_a_warning(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """SparkContext.stop() returns after the job-end finish took the spool away: its call belongs to no job, and the
    user's console must not say a recording failed; a spool that cannot be written to still says so."""
    from crystalperf.integrations.spark import pydriver

    gone = tmp_path / "gone"
    gone.mkdir()
    pydriver._state.update(spool=gone, failed=False, written=0)  # what install() sets, without py4j
    gone.rmdir()
    with caplog.at_level(logging.WARNING, logger="crystalperf"):
        pydriver._write({"start": 1.0, "end": 2.0, "thread": 1, "file": "/jobs/etl.py", "line": 9})
    assert pydriver._state["failed"] and not caplog.records
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    pydriver._state.update(spool=blocked, failed=False, written=0)
    (blocked / CALLS_FILE.format(pid=pydriver.os.getpid())).mkdir()  # not a file: the write fails
    with caplog.at_level(logging.WARNING, logger="crystalperf"):
        pydriver._write({"start": 1.0, "end": 2.0, "thread": 1, "file": "/jobs/etl.py", "line": 9})
    assert pydriver._state["failed"] and "could not record" in caplog.text
    pydriver._state.update(spool=None, failed=False, written=0)
