"""The Spark event log reader and the trace assembly on a real event log (tests/data/spark-eventlog.json.gz,
recorded by tests/data/record/spark_eventlog.py); no pyspark needed.

The oracle is a plain count over the log's JSON lines, independent of the reader.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.errors import BadInputError
from crystalperf.integrations.spark import read_event_log
from crystalperf.integrations.spark.reader import HANDLERS, EventLogState, read_state

EVENT_LOG = Path(__file__).resolve().parents[1] / "data" / "spark-eventlog.json.gz"
NO_END = "the event log has no application end (a running or crashed app)"


def _lines() -> list[str]:
    with gzip.open(EVENT_LOG, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def _events(kind: str) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, _lines()) if e["Event"] == kind]


@pytest.fixture(scope="module")
def trace() -> tr.Trace:
    return read_event_log(EVENT_LOG)


def _stages(trace: tr.Trace) -> dict[str, tr.Operation]:
    return {s.id: s for job in trace.operations for s in job.children}


def test_application_facts(trace: tr.Trace) -> None:
    (start,) = _events("SparkListenerApplicationStart")
    (end,) = _events("SparkListenerApplicationEnd")
    (log_start,) = _events("SparkListenerLogStart")
    app = trace.application
    assert (app.framework, app.id, app.name, app.user) == ("spark", "local-1795550840668", "crystalperf-golden", "root")
    assert app.framework_version == log_start["Spark Version"] == "4.3.0"
    assert app.start == start["Timestamp"] / 1000 and app.end == end["Timestamp"] / 1000
    assert app.status == "succeeded" and trace.warnings == []
    assert trace.producer.hook == "spark-eventlog" and trace.schema_version == tr.SCHEMA_VERSION


def test_jobs_stages_and_parents(trace: tr.Trace) -> None:
    job_starts = _events("SparkListenerJobStart")
    assert [j.id for j in trace.operations] == [f"job-{e['Job ID']}" for e in job_starts] == ["job-0", "job-1", "job-2"]
    assert [[s.id for s in j.children] for j in trace.operations] == [
        ["stage-0", "stage-1"], ["stage-2", "stage-3"], ["stage-4-skipped-in-job-2", "stage-5", "stage-6"]]
    stages = _stages(trace)
    assert stages["stage-1"].parents == ["stage-0"] and stages["stage-3"].parents == ["stage-2"]
    # job 2 reuses the shuffle output of job 1's reduceByKey: Spark lists stage 4 but never submits it
    submitted = {e["Stage Info"]["Stage ID"] for e in _events("SparkListenerStageSubmitted")}
    assert submitted == {0, 1, 2, 3, 5, 6}
    skipped = stages["stage-4-skipped-in-job-2"]
    assert skipped.status == "skipped" and skipped.tasks == [] and skipped.start == skipped.end
    assert stages["stage-5"].parents == ["stage-4-skipped-in-job-2"] and stages["stage-6"].parents == ["stage-5"]
    assert {s.status for sid, s in stages.items() if sid != skipped.id} == {"success"}
    names = [j.name for j in trace.operations]
    assert names[0] == "job 0: collect at /work/main/tests/data/record/spark_eventlog.py:64"
    assert trace.operations[0].attributes["sql_execution_id"] == "0"
    assert stages["stage-5"].name.startswith("stage 5: join at ") and stages["stage-5"].parallelism == 6


def test_task_counts_per_stage(trace: tr.Trace) -> None:
    ends = _events("SparkListenerTaskEnd")
    per_stage = Counter(f"stage-{e['Stage ID']}" for e in ends)
    assert per_stage == {"stage-0": 4, "stage-1": 4, "stage-2": 4, "stage-3": 4, "stage-5": 6, "stage-6": 6}
    assert {sid: len(s.tasks) for sid, s in _stages(trace).items() if s.tasks} == per_stage
    assert sum(per_stage.values()) == 28 == len(_events("SparkListenerTaskStart"))
    tasks = [t for s in _stages(trace).values() for t in s.tasks]
    assert {t.executor for t in tasks} == {"driver"} and {t.status for t in tasks} == {"success"}


def test_a_tasks_metrics(trace: tr.Trace) -> None:
    raw = next(e for e in _events("SparkListenerTaskEnd") if e["Stage ID"] == 2)
    info, m = raw["Task Info"], raw["Task Metrics"]
    task = next(t for t in _stages(trace)["stage-2"].tasks if t.id == str(info["Task ID"]))
    assert (task.index, task.attempt, task.host) == (info["Index"], info["Attempt"], info["Host"])
    assert task.start == info["Launch Time"] / 1000 and task.end == info["Finish Time"] / 1000
    sw, sr = m["Shuffle Write Metrics"], m["Shuffle Read Metrics"]
    assert task.metrics["run_time_s"] == m["Executor Run Time"] / 1000
    assert task.metrics["cpu_time_s"] == m["Executor CPU Time"] / 1e9
    assert task.metrics["shuffle_write_bytes"] == sw["Shuffle Bytes Written"] > 0
    assert task.metrics["disk_time_s"] == sw["Shuffle Write Time"] / 1e9
    assert task.metrics["records_out"] == sw["Shuffle Records Written"] > 0
    assert task.metrics["shuffle_read_bytes"] == sr["Remote Bytes Read"] + sr["Local Bytes Read"] == 0
    # Spark's own numeric metrics are kept under their own names too
    assert task.metrics["Executor Run Time"] == m["Executor Run Time"]


def test_job_totals(trace: tr.Trace) -> None:
    ends = _events("SparkListenerTaskEnd")
    written = sum(e["Task Metrics"]["Shuffle Write Metrics"]["Shuffle Bytes Written"] for e in ends)
    read = sum(e["Task Metrics"]["Shuffle Read Metrics"]["Remote Bytes Read"]
               + e["Task Metrics"]["Shuffle Read Metrics"]["Local Bytes Read"] for e in ends)
    assert trace.metrics["shuffle_write_bytes"] == written == 6683
    # job 2 also reads the shuffle output job 1 wrote for the stage it skipped
    assert trace.metrics["shuffle_read_bytes"] == read == 8775
    assert trace.metrics["spill_disk_bytes"] == trace.metrics["input_bytes"] == 0


def test_executor_and_slots(trace: tr.Trace) -> None:
    (added,) = _events("SparkListenerExecutorAdded")
    (bm,) = _events("SparkListenerBlockManagerAdded")
    env = trace.environment
    (executor,) = env.executors
    assert executor.id == added["Executor ID"] == "driver"
    assert executor.cores == added["Executor Info"]["Total Cores"] == 2 == env.total_slots
    assert executor.memory_bytes == bm["Maximum Memory"] == env.memory_bytes
    assert executor.added == added["Timestamp"] / 1000 and env.hosts == [added["Executor Info"]["Host"]]
    (update,) = _events("SparkListenerEnvironmentUpdate")
    assert env.properties["spark.master"] == "local[2]"
    assert len(env.classpath) == sum("://" not in e for e in update["Classpath Entries"])


def test_sql_plan_and_the_stages_that_ran_each_node(trace: tr.Trace) -> None:
    """The log's SQL execution (a groupBy over a Python UDF over spark.range): its plan in pre-order, each node
    with the stages whose completed info lists its metrics' accumulators, as the listener records them."""
    (query,) = trace.sql_queries
    assert query.execution_id == "0" and query.description.startswith("collect at ")
    names = [n.name for n in query.nodes]
    assert names[:4] == ["WholeStageCodegen (3)", "HashAggregate", "InputAdapter", "Exchange"]
    assert "BatchEvalPython" in names and names[-1] == "Range"
    by_name = {n.name: n for n in query.nodes}
    assert by_name["Exchange"].stages == [0, 1]  # written by the map stage, read by the final one
    assert by_name["WholeStageCodegen (3)"].stages == [1] and by_name["Range"].stages == [0]
    assert by_name["Project"].stages == []  # no metrics of its own: the analysis places it from its parent
    assert all(n.parent is None or n.parent < n.id for n in query.nodes)
    assert trace.operations[0].attributes["sql_execution_id"] == "0"


def _without_times(value: Any) -> Any:
    """An event as Spark before 1.3 wrote it: no job or stage submission or completion time."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in ("Submission Time", "Completion Time")}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def test_a_log_without_job_and_stage_times_spans_them_by_their_tasks(tmp_path: Path, trace: tr.Trace) -> None:
    old = tmp_path / "app-old"
    old.write_text("".join(json.dumps(_without_times(json.loads(line))) + "\n" for line in _lines()))
    found = read_event_log(old)
    stages, traced = _stages(found), _stages(trace)
    assert list(stages) == list(traced) and [s.status for s in stages.values()] == [s.status for s in traced.values()]
    for sid, stage in stages.items():
        if stage.status == "skipped":
            continue
        tasks = {t.id: t for t in stage.tasks}
        # a stage spans its tasks: from the first launch to the last finish, within the span Spark gave it
        assert stage.start == min(t.start for t in tasks.values()) and stage.end == max(t.end for t in tasks.values())
        assert traced[sid].start <= stage.start <= stage.end <= traced[sid].end
    for job, full in zip(found.operations, trace.operations, strict=True):
        ran = [s for s in job.children if s.status != "skipped"]
        assert job.start == min(s.start for s in ran) and job.end == max(s.end for s in ran)
        assert full.start <= job.start <= job.end <= full.end
    # the jobs follow each other as they ran, none spans the application
    assert [j.end <= k.start for j, k in zip(found.operations, found.operations[1:], strict=False)] == [True, True]


def test_a_log_without_a_version_event_takes_the_version_of_spark_s_jar(tmp_path: Path) -> None:
    # Spark before 1.3 wrote no SparkListenerLogStart; its assembly jar on the classpath names the version
    lines = [line for line in _lines() if json.loads(line)["Event"] != "SparkListenerLogStart"]
    old = tmp_path / "app-old"
    for jar, version in (("/opt/spark-1.2.0-bin-hadoop2.4/lib/spark-assembly-1.2.0-hadoop2.4.0.jar", "1.2.0"),
                         ("/home/u/.ivy2/jars/spark-core_2.10-1.2.1.jar", "1.2.1"),
                         # not Spark's core: the version comes from the log's own classpath, pyspark's jars
                         ("/opt/lib/spark-sql_2.12-3.1.1.jar", "4.3.0")):
        env = {"Event": "SparkListenerEnvironmentUpdate", "Spark Properties": {},
               "Classpath Entries": {jar: "System Classpath", "/opt/conf": "System Classpath"}}
        old.write_text("\n".join([json.dumps(env), *lines]) + "\n")
        assert read_event_log(old).application.framework_version == version


def test_rolling_log_directory_reads_like_the_file(tmp_path: Path, trace: tr.Trace) -> None:
    rolling = tmp_path / "eventlog_v2_local-1795550840668"
    rolling.mkdir()
    (rolling / "appstatus_local-1795550840668").write_text("")
    lines = _lines()
    (rolling / "events_2_local-1795550840668").write_text("\n".join(lines[40:]) + "\n")
    (rolling / "events_1_local-1795550840668").write_bytes(gzip.compress(("\n".join(lines[:40]) + "\n").encode()))
    assert read_event_log(rolling) == trace


def test_truncated_last_line_is_skipped_and_warned(tmp_path: Path) -> None:
    lines = _lines()
    assert json.loads(lines[-1])["Event"] == "SparkListenerApplicationEnd"
    cut = tmp_path / "cut.json"
    cut.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:25])
    trace = read_event_log(cut)
    assert trace.warnings == [NO_END]
    assert len(trace.operations) == 3
    # with no ApplicationEnd the application ends at the last event read (job 2's end)
    (job2_end,) = [e for e in _events("SparkListenerJobEnd") if e["Job ID"] == 2]
    assert trace.application.end == job2_end["Completion Time"] / 1000


def test_unknown_event_kinds_are_skipped() -> None:
    events = [json.loads(line) for line in _lines()]
    unknown = [e for e in events if e["Event"] not in HANDLERS]
    assert {e["Event"] for e in unknown} >= {"SparkListenerTaskStart", "SparkListenerResourceProfileAdded",
                                            "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd"}
    made_up = {"Event": "com.example.SomethingNew", "Payload": [1, 2]}
    with_it, without = read_state(iter([*events, made_up])), read_state(iter(events))
    assert with_it.seen == without.seen + 1 == len(events) + 1
    with_it.seen = without.seen
    assert with_it == without


def test_task_end_without_launch_time_is_not_a_task() -> None:
    state = EventLogState()
    event = json.loads(next(line for line in _lines() if '"SparkListenerTaskEnd"' in line))
    event["Task Info"]["Launch Time"] = 0
    HANDLERS["SparkListenerTaskEnd"](state, event)
    assert state.tasks == {}


def test_not_an_event_log(tmp_path: Path) -> None:
    bad = tmp_path / "eventlog"
    bad.write_text('{"Event": "SomethingElse"}\nnot json\n')
    with pytest.raises(BadInputError, match="not a Spark event log"):
        read_event_log(bad)
    empty = tmp_path / "eventlog_v2_x"
    empty.mkdir()
    with pytest.raises(BadInputError, match="no Spark event log files"):
        read_event_log(empty)


# --- a log of many tasks: exact totals, a bounded sample -----------------------------------------------

def _many_tasks_log(path: Path, copies: int) -> list[dict[str, Any]]:
    """The golden log with each task's end repeated ``copies`` times under new task ids and indices (the
    tasks of a stage as Spark would log a wider one); the task ends written, for the oracle."""
    ends = []
    with path.open("w") as out:
        next_id = 1000
        for line in _lines():
            event = json.loads(line)
            if event["Event"] != "SparkListenerTaskEnd":
                out.write(line + "\n")
                continue
            for k in range(copies):
                event["Task Info"].update({"Task ID": next_id, "Index": k})
                event["Task Metrics"]["Executor Run Time"] = 1 + (next_id * 7919) % 1000  # ms, varied
                next_id += 1
                out.write(json.dumps(event, separators=(",", ":")) + "\n")
                ends.append(json.loads(json.dumps(event)))
    return ends


def test_a_stage_of_many_tasks_keeps_a_sample_and_exact_totals(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRYSTALPERF_MAX_TASKS_PER_OPERATION", "50")
    log = tmp_path / "many.json"
    ends = _many_tasks_log(log, 40)  # 4 or 6 tasks a stage in the golden log: 160-240 here
    trace = read_event_log(log)
    for sid, stage in _stages(trace).items():
        mine = [e for e in ends if f"stage-{e['Stage ID']}" == sid]
        if not mine:
            continue
        assert stage.task_count == len(mine) > 50 and len(stage.tasks) == 50
        assert stage.attributes["tasks_sampled"].startswith(f"50 of {len(mine)} ")
        run = sum(e["Task Metrics"]["Executor Run Time"] for e in mine) / 1000
        written = sum(e["Task Metrics"]["Shuffle Write Metrics"]["Shuffle Bytes Written"] for e in mine)
        assert stage.metrics["run_time_s"] == pytest.approx(run, rel=1e-12)
        assert stage.metrics["shuffle_write_bytes"] == written
        slowest = max(mine, key=lambda e: e["Task Metrics"]["Executor Run Time"])
        assert str(slowest["Task Info"]["Task ID"]) in {t.id for t in stage.tasks}
        assert [t.id for t in stage.tasks] == sorted((t.id for t in stage.tasks), key=int)  # the log's order
    assert trace.metrics["shuffle_write_bytes"] == sum(
        e["Task Metrics"]["Shuffle Write Metrics"]["Shuffle Bytes Written"] for e in ends)
    assert read_event_log(log) == trace  # seeded: the same log reads the same


def test_past_the_budget_every_stage_keeps_fewer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRYSTALPERF_MAX_EVENTLOG_TASKS", "100")
    log = tmp_path / "many.json"
    ends = _many_tasks_log(log, 40)
    trace = read_event_log(log)
    stages = [s for s in _stages(trace).values() if s.tasks]
    assert sum(len(s.tasks) for s in stages) <= 100
    assert sum(s.task_count or 0 for s in stages) == len(ends)
    assert len({len(s.tasks) for s in stages}) == 1  # the same share of each stage


def test_partly_decoded_events_fold_into_the_same_state(tmp_path: Path) -> None:
    """The fast path (msgspec: task ends and kinds without a handler built only in the fields read) and json
    reading every line whole give the same state, malformed lines included."""
    pytest.importorskip("msgspec")
    from crystalperf.integrations.spark.eventjson import decoder, whole
    from crystalperf.integrations.spark.reader import events

    log = tmp_path / "odd.json"
    lines = _lines()
    task_end = next(i for i, line in enumerate(lines) if '"SparkListenerTaskEnd"' in line)
    odd = json.loads(lines[task_end])
    odd["Task Info"] = [1, 2]  # not an object: msgspec refuses it, json reads it and the handler skips it
    lines[task_end:task_end] = [json.dumps(odd), lines[task_end].replace("1795550", "NaN", 1),
                                '{"Event": "SparkListenerTaskEnd", "Stage ID": 1e400}', "{not json"]
    log.write_text("\n".join(lines) + "\n")
    fast = read_state(events(log, decode=decoder(HANDLERS)))
    slow = read_state(events(log, decode=whole))
    assert fast == slow and fast.seen == slow.seen


AQE_STAGE_NAME = "$anonfun$withThreadLocalCaptured$1 at CompletableFuture.java:1768"


def test_a_stage_named_after_a_spark_closure_takes_its_jobs_name(tmp_path: Path) -> None:
    """Adaptive execution submits a query's stages from a pool thread, and an application that calls Spark from
    the JVM sets no call site: Spark names the stages after its own closure. The golden log's SQL job made so."""
    def as_from_the_jvm(event: dict[str, Any]) -> dict[str, Any]:
        infos = [event["Stage Info"]] if "Stage Info" in event else event.get("Stage Infos", [])
        for info in infos:
            if info["Stage ID"] in (0, 1):
                info["Stage Name"] = AQE_STAGE_NAME
        if event["Event"] == "SparkListenerJobStart" and event["Job ID"] == 0:
            del event["Properties"]["callSite.short"]
        return event

    log = tmp_path / "from-the-jvm.json"
    log.write_text("\n".join(json.dumps(as_from_the_jvm(json.loads(line))) for line in _lines()) + "\n")
    trace = read_event_log(log)
    (sql,) = _events("org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart")
    job = trace.operations[0]
    assert job.name == f"job 0: SQL 0: {sql['description']}"
    stages = _stages(trace)
    for sid in ("stage-0", "stage-1"):
        assert stages[sid].name == f"{sid.replace('-', ' ')}: SQL 0: {sql['description']}"
        assert stages[sid].attributes["spark_stage_name"] == AQE_STAGE_NAME
    # stages Spark named after the application's code keep their names
    assert stages["stage-3"].name == "stage 3: count at /work/main/tests/data/record/spark_eventlog.py:67"
    assert "spark_stage_name" not in stages["stage-3"].attributes


def test_a_streaming_micro_batch_is_named_after_its_query_and_batch(tmp_path: Path) -> None:
    """Spark describes a structured streaming micro-batch's jobs as the query's name, id, run id and batch, and
    names their stages after the call that started the query. The golden log's second job made one of batch 3."""
    query_id = "c0e2d6cc-4f83-4993-9c77-43953bbd57cd"

    def as_a_micro_batch(event: dict[str, Any]) -> dict[str, Any]:
        if event["Event"] == "SparkListenerJobStart" and event["Job ID"] == 1:
            event["Properties"].update({"spark.job.description": f"counts\nid = {query_id}\nrunId = 5f1d\nbatch = 3",
                                        "sql.streaming.queryId": query_id, "streaming.sql.batchId": "3"})
        if event["Event"].endswith("SQLExecutionStart"):  # the batch's query, as StreamExecution describes it
            event["description"] = f"\nid = {query_id}\nrunId = 5f1d\nbatch = 3"
        return event

    # the batch's progress (Spark logs it after the batch; batch 2's belongs to no job of the log)
    progress = [{"Event": "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent",
                 "progress": {"id": query_id, "runId": "5f1d", "name": "counts", "timestamp": stamp, "batchId": batch,
                              "durationMs": {"triggerExecution": ran, "queryPlanning": 40}}}
                 for batch, stamp, ran in ((2, "2026-12-04T03:23:00.000Z", 800), (3, "2026-12-04T03:23:01.000Z", 1234))]
    log = tmp_path / "streaming.json"
    log.write_text("\n".join([*(json.dumps(as_a_micro_batch(json.loads(line))) for line in _lines()),
                              *map(json.dumps, progress)]) + "\n")
    trace = read_event_log(log)
    job = trace.operations[1]
    assert job.name == "job 1: counts batch 3"
    assert (job.attributes["streaming_query_id"], job.attributes["streaming_batch"]) == (query_id, "3")
    # when its trigger fired (2026-12-04 03:23:01 UTC) and how long it ran
    assert float(job.attributes["streaming_trigger_start"]) == 1796354581.0
    assert float(job.attributes["streaming_trigger_s"]) == 1.234
    assert [s.name for s in job.children] == ["stage 2: counts batch 3", "stage 3: counts batch 3"]
    assert job.children[1].attributes["spark_stage_name"] == "count at /work/main/tests/data/record/spark_eventlog.py:67"
    span = job.end - job.start
    assert any(f"structured streaming micro-batches ('counts': 1 batch of {span:.2f} s)" in w for w in trace.warnings), \
        trace.warnings
    # its SQL query, of a query without a name, is named after its id and the batch
    assert [q.description for q in trace.sql_queries] == [f"query {query_id[:8]} batch 3"]
    # the other jobs are no micro-batches
    assert trace.operations[0].name.startswith("job 0: collect at") and "streaming_batch" not in trace.operations[2].attributes


@pytest.mark.parametrize("message, status, app_status", [
    ("[SPARK_JOB_CANCELLED] Job 1 cancelled Query counts [id = c0e2] was stopped SQLSTATE: XXKDA", "killed",
     "succeeded"),  # Spark 4: a streaming query stopped mid-batch
    ("Job 1 cancelled part of cancelled job group etl", "killed", "succeeded"),  # Spark 3's words
    ("Job aborted due to stage failure: Task 3 in stage 2.0 failed 1 times", "failed", "failed"),
])
def test_a_cancelled_job_is_killed_and_fails_no_application(tmp_path: Path, message: str, status: str,
                                                            app_status: str) -> None:
    def as_ended(event: dict[str, Any]) -> dict[str, Any]:
        if event["Event"] == "SparkListenerJobEnd" and event["Job ID"] == 1:
            event["Job Result"] = {"Result": "JobFailed", "Exception": {"Message": message, "Stack Trace": []}}
        if event["Event"] == "SparkListenerApplicationEnd":
            event.pop("ExitCode", None)  # as before Spark 3.4
        return event

    log = tmp_path / "ended.json"
    log.write_text("\n".join(json.dumps(as_ended(json.loads(line))) for line in _lines()) + "\n")
    trace = read_event_log(log)
    assert [job.status for job in trace.operations] == ["success", status, "success"]
    assert trace.application.status == app_status


@pytest.mark.parametrize("end, status", [
    ({"ExitCode": 1}, "failed"),  # the driver's exit code says it, whatever the jobs did
    ({"ExitCode": 0}, "succeeded"),  # 0 leaves it to the jobs (a PySpark driver's JVM always says 0)
    (None, "unknown"),  # no ApplicationEnd: a running application, or a driver that died without saying
])
def test_the_application_failed_where_the_drivers_exit_code_says_so(tmp_path: Path, end: dict[str, Any] | None,
                                                                    status: str) -> None:
    events = [json.loads(line) for line in _lines()]
    kept = []
    for event in events:
        if event["Event"] == "SparkListenerApplicationEnd":
            if end is None:
                continue
            event = {**{k: v for k, v in event.items() if k != "ExitCode"}, **end}
        kept.append(event)
    log = tmp_path / "ended.json"
    log.write_text("\n".join(map(json.dumps, kept)) + "\n")
    assert read_event_log(log).application.status == status


def test_a_log_cut_off_mid_stage_ends_with_its_last_task(tmp_path: Path) -> None:
    """A log of a running (or crashed) application: its last events are tasks that ended after the last job or
    stage event, and the application lasts until the last of them, so the running stage keeps their time."""
    events = [json.loads(line) for line in _lines()]
    last_stage_end = max(i for i, e in enumerate(events) if e["Event"] == "SparkListenerStageCompleted")
    cut = events[:last_stage_end]  # the last stage's tasks ended; its completion and all after it are lost
    log = tmp_path / "cut.json"
    log.write_text("\n".join(map(json.dumps, cut)) + "\n")
    trace = read_event_log(log)
    last_task = max(e["Task Info"]["Finish Time"] for e in cut if e["Event"] == "SparkListenerTaskEnd") / 1000
    assert trace.application.end == pytest.approx(last_task)
    assert trace.application.status == "unknown"
    running = [s for job in trace.operations for s in job.children if s.tasks and s.status in ("running", "unknown")]
    assert running and all(s.end >= max(t.end for t in s.tasks) - 1e-6 for s in running), \
        [(s.id, s.status, s.start, s.end) for s in running]
