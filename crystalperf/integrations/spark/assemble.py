"""Typed parts -> ``Trace``: an event log's state as a trace, and the PySpark workers' samples merged into
the trace the listener wrote.

The trace is built as the JSON document the listener writes too, then validated once by
:func:`crystalperf.core.trace.parse_trace` (so a log that yields an invalid trace is one clear error).
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crystalperf.core import limits
from crystalperf.core import trace as tr
from crystalperf.core.record.sampling import merge_samples
from crystalperf.core.units import format_duration
from crystalperf.integrations.spark.config import INTEGRATION
from crystalperf.integrations.spark.connect import CONNECT_NAME, CONNECT_PREFIX, connect_name
from crystalperf.integrations.spark.pydriver import DriverCall
from crystalperf.integrations.spark.records import (
    AppRecord,
    EventLogState,
    ExecutorRecord,
    JobRecord,
    StageInfo,
    StageRun,
    StageTasks,
    TaskRecord,
)

Document = dict[str, Any]  # a part of the trace's JSON document
# CPU seconds of a task spent in its PySpark worker (already counted in the task's cpu_time_s).
METRIC_PYTHON_CPU_TIME = "python_cpu_time_s"
# Seconds its PySpark worker's threads queued for a core (already counted in the task's cpu_wait_s).
METRIC_PYTHON_CPU_WAIT_TIME = "python_cpu_wait_s"

# Job-wide totals of these task metrics, over the stages that ran.
_TOTALS = (tr.METRIC_SPILL_DISK_BYTES, tr.METRIC_SPILL_MEMORY_BYTES, tr.METRIC_SHUFFLE_WRITE_BYTES,
           tr.METRIC_SHUFFLE_READ_BYTES, tr.METRIC_INPUT_BYTES, tr.METRIC_OUTPUT_BYTES)
# Job properties kept as the job's attributes: attribute -> Spark's property.
_JOB_ATTRIBUTES = (("call_site", "callSite.short"), ("description", "spark.job.description"),
                   ("sql_execution_id", "spark.sql.execution.id"))


@dataclasses.dataclass
class _Assembly:
    """What the operations of one trace share while they are built."""

    state: EventLogState
    start: float  # the application's start and end
    end: float
    owner: dict[int, int]  # stage id -> the job it ran in
    totals: dict[str, float] = dataclasses.field(default_factory=dict)


def fill_missing_times(state: EventLogState) -> None:
    """Times the log does not give, from what it does: Spark before 1.3 wrote no job submission or completion
    time and no stage submission time. A stage without one spans its tasks (their launch and finish times are in
    every log); a job, the stages that ran in it (those no job of a lower id listed first), its end only once it
    ended: a running job runs to the log's end."""
    for sid, run in state.stages.items():
        tasks = state.tasks.get(sid)
        if tasks is None or tasks.first_start is None or tasks.last_end is None:
            continue
        if run.start is None:
            run.start = tasks.first_start
        if run.status is not None and (run.end is None or run.end <= run.start):
            run.end = tasks.last_end
    claimed: set[int] = set()
    for _jid, job in sorted(state.jobs.items()):
        own = [ran for sid in job.stages if sid not in claimed
               and (ran := state.stages.get(sid)) is not None and ran.start is not None]
        claimed.update(sid for sid in job.stages if sid in state.stages)
        if job.start is None and own:
            job.start = min(ran.start for ran in own if ran.start is not None)
        if job.end is None and job.status is not None:
            ends = [ran.end for ran in own if ran.end is not None]
            if ends:
                job.end = max(ends)


def stage_owners(jobs: dict[int, JobRecord], stages: dict[int, StageRun]) -> dict[int, int]:
    """The job each submitted stage ran in: the first job (by id) containing it that started before it.
    A stage listed by a later job too was skipped there (its output was reused)."""
    owner: dict[int, int] = {}
    for jid, job in sorted(jobs.items()):
        for sid in job.stages:
            run = stages.get(sid)
            if run is not None and run.start is not None and sid not in owner \
                    and (job.start or 0) - 0.001 <= run.start:
                owner[sid] = jid
    return owner


def _stage_id(sid: int, jid: int, owner: dict[int, int]) -> str:
    return f"stage-{sid}" if owner.get(sid) == jid else f"stage-{sid}-skipped-in-job-{jid}"


def _task(task: TaskRecord) -> Document:
    # the record's own metrics dict, not a copy: the trace's validation copies it
    return {"id": task.id, "index": task.index, "attempt": task.attempt, "executor": task.executor,
            "host": task.host, "start": task.start, "end": task.end, "status": task.status,
            "metrics": task.metrics}


def _sampled(op: Document, tasks: StageTasks) -> None:
    """What a stage whose tasks are a sample carries (schema 1.4): how many ran, and their exact totals."""
    op["task_count"] = tasks.count
    op["metrics"] = dict(tasks.sums)
    attributes = op["attributes"]
    attributes["tasks_sampled"] = (f"{len(tasks.kept)} of {tasks.count} ({limits.MAX_TASKS_PER_OPERATION.env}, "
                                   f"{limits.MAX_EVENTLOG_TASKS.env})")
    if tasks.failed:
        attributes["failed_tasks"] = str(tasks.failed)
    if tasks.killed:
        attributes["killed_tasks"] = str(tasks.killed)


def _stage(sid: int, jid: int, job: JobRecord, job_start: float, job_end: float, ctx: _Assembly) -> Document:
    info = ctx.state.stage_info.get(sid, StageInfo())
    op: Document = {
        "id": _stage_id(sid, jid, ctx.owner), "name": f"stage {sid}: {info.name}", "kind": "stage",
        "parents": [_stage_id(p, jid, ctx.owner) for p in info.parents if p in job.stages],
        "parallelism": info.num_tasks, "attributes": {"call_site": info.call_site},
    }
    if ctx.owner.get(sid) != jid:
        op.update(start=job_start, end=job_start, status="skipped")
        return op
    run = ctx.state.stages[sid]
    start = run.start if run.start is not None else job_start  # a stage that ran in a job has a start
    tasks = ctx.state.tasks.get(sid)
    op.update(start=start, end=max(start, run.end or job_end), status=run.status or "running",
              tasks=[_task(t) for t in tasks.records()] if tasks is not None else [])
    if tasks is not None:
        if tasks.sampled:
            _sampled(op, tasks)
        for key in _TOTALS:
            ctx.totals[key] = ctx.totals.get(key, 0.0) + tasks.sums.get(key, 0.0)
    return op


def _job(jid: int, job: JobRecord, ctx: _Assembly) -> Document:
    start = job.start or ctx.start
    end = max(start, job.end or ctx.end)
    props = job.properties if isinstance(job.properties, dict) else {}
    attrs = {attr: str(props[prop]) for attr, prop in _JOB_ATTRIBUTES if props.get(prop)}
    if attrs.get("call_site", "").startswith(CONNECT_PREFIX) and props.get("callSite.long"):
        # the whole request, whose relations name the job (name_operations); the short form is cut after a few lines
        attrs["call_site_long"] = str(props["callSite.long"])
    batch = f"{props.get('sql.streaming.queryId')}/{props.get('streaming.sql.batchId')}"
    trigger = ctx.state.streaming_triggers.get(batch)
    if trigger is not None:
        attrs[tr.ATTRIBUTE_STREAMING_TRIGGER_START] = repr(trigger[0])
        if trigger[1] is not None:
            attrs[tr.ATTRIBUTE_STREAMING_TRIGGER_S] = repr(trigger[1])
    name = attrs.get("description") or attrs.get("call_site") or _unnamed_job_label(jid, job, attrs, ctx.state)
    children = [_stage(sid, jid, job, start, end, ctx) for sid in job.stages]
    return {"id": f"job-{jid}", "name": f"job {jid}: {name}", "kind": "job", "start": start, "end": end,
            "status": job.status or "running", "children": children, "attributes": attrs}


def _unnamed_job_label(jid: int, job: JobRecord, attrs: dict[str, str], state: EventLogState) -> str:
    """A job with neither description nor call site (a SQL job run from the JVM) is named as the listener names
    it: after its SQL query, else its result stage."""
    sql = state.sql_plans.get(int(attrs["sql_execution_id"])) if attrs.get("sql_execution_id", "").isdigit() else None
    if sql is not None and sql.description:
        return f"SQL {attrs['sql_execution_id']}: {sql.description}"
    result = state.stage_info.get(job.stages[-1]) if job.stages else None
    return result.name if result is not None and result.name else f"job {jid}"


# Spark names a stage after the Spark method the application's code called ("count at App.scala:12"). A query
# stage that adaptive execution submits from a pool thread has no application code on its stack and is named
# after a closure of Spark's ("$anonfun$withThreadLocalCaptured$1 at CompletableFuture.java:1768").
_CLOSURE_NAME = re.compile(r"\$anonfun\$\S* at \S+:-?\d+$")
# The description Spark gives a structured streaming micro-batch's jobs (StreamExecution): the query's name (empty
# when it has none), its id, its run's id and the batch. Their stages are named after the call that started the
# query, the same in every batch.
_MICRO_BATCH = re.compile(r"(?:(?P<query>[^\n]*)\n)?id = (?P<id>\S+)\nrunId = \S+\nbatch = (?P<batch>[^\n]+)")


def name_operations(trace: tr.Trace) -> None:
    """Names that say which work an operation did where Spark's do not: a job a Spark Connect client asked for, its
    stages and its SQL query are named after the relations of its request (``Spark Connect: range → aggregate``,
    :mod:`crystalperf.integrations.spark.connect`) instead of the request's text; a structured streaming micro-batch's job,
    stages and SQL query are named after the query and the batch (``streaming_query_id`` and ``streaming_batch`` kept as the
    job's attributes), a stage that Spark named after one of its closures after its job (the action or SQL query
    that ran it). A stage renamed keeps Spark's name as its ``spark_stage_name`` attribute. A trace with
    micro-batches gets a warning: its length is the queries', not their work's, and how long their batches took."""
    batches: dict[str, dict[str, tuple[float, float]]] = {}  # query -> batch -> its jobs' span
    connect_queries: dict[str, str] = {}  # SQL execution id -> the Connect request's name
    for job in trace.operations:
        if job.kind != "job":
            continue
        request = _connect_request(job)
        if request is not None:
            job.name = f"{job.name.split(': ', 1)[0]}: {request}"
            if "sql_execution_id" in job.attributes:
                connect_queries[job.attributes["sql_execution_id"]] = request
        batch = None if request is not None else _MICRO_BATCH.fullmatch(job.attributes.get("description", "").strip())
        if batch is not None:
            query = _query_name(batch)
            batch_id = batch["batch"].strip()
            spans = batches.setdefault(query, {})
            start, end = spans.get(batch_id, (job.start, job.end))
            spans[batch_id] = (min(start, job.start), max(end, job.end))
            job.name = f"{job.name.split(': ', 1)[0]}: {query} batch {batch_id}"
            job.attributes.update(streaming_query_id=batch["id"], streaming_batch=batch_id)
        label = job.name.split(": ", 1)[1] if ": " in job.name else ""
        if not label or _CLOSURE_NAME.match(label):
            continue
        for stage in job.children:
            prefix, _, spark_name = stage.name.partition(": ")
            if stage.kind == "stage" and (batch is not None or spark_name.startswith(CONNECT_PREFIX)
                                          or _CLOSURE_NAME.match(spark_name)):
                stage.name = f"{prefix}: {label}"
                stage.attributes["spark_stage_name"] = spark_name
    for sql in trace.sql_queries:
        if sql.execution_id in connect_queries and sql.description.startswith(CONNECT_PREFIX):
            sql.description = connect_queries[sql.execution_id]
        micro_batch = _MICRO_BATCH.fullmatch(sql.description.strip())
        if micro_batch is not None:
            sql.description = f"{_query_name(micro_batch)} batch {micro_batch['batch'].strip()}"
    if batches:
        queries = "; ".join(_batches_text(query, spans) for query, spans in sorted(batches.items()))
        warning = (f"the application ran structured streaming micro-batches ({queries}): it lasted as long as its "
                   "queries ran, not as long as their work took; the runtimes predicted keep each query's schedule: "
                   "a batch that waited for its trigger starts no earlier, and right after the batch before once "
                   "that one runs past it")
        if warning not in trace.warnings:
            trace.warnings.append(warning)


def _query_name(batch: re.Match[str]) -> str:
    """A streaming query's name, or its id's first characters where it has none (Spark's description then starts with
    an empty line)."""
    return (batch["query"] or "").strip() or f"query {batch['id'][:8]}"


def _connect_request(job: tr.Operation) -> str | None:
    """The name of the Spark Connect request a job ran (``Spark Connect: range → aggregate``), None for a job that
    no Connect client asked for."""
    site = job.attributes.get("description") or job.attributes.get("call_site") or ""
    return connect_name(site, job.attributes.get("call_site_long"))


# Spark properties that list files the application ships to its executors (comma-separated paths or URLs).
_SHIPPED_FILES = ("spark.submit.pyFiles", "spark.files", "spark.yarn.dist.pyFiles", "spark.yarn.dist.files")
_MAX_SHIPPED_ROOTS = 64


def add_shipped_file_roots(trace: tr.Trace, added: Sequence[str] = ()) -> None:
    """The directories of the local files an application shipped to its workers (``--py-files``, ``--files``,
    ``SparkContext.addPyFile``: ``added``) as source roots of the trace: the workers import the copies Spark keeps
    in a directory it deletes when the application stops, before the job-end analysis looks for the code of the
    functions sampled in them (``.../userFiles-<id>/deps.zip/etl/parse.py`` is found as ``deps.zip/etl/parse.py``
    under the original's directory)."""
    shipped = [entry.strip() for key in _SHIPPED_FILES
               for entry in trace.environment.properties.get(key, "").split(",")]
    roots = list(trace.environment.source_roots)
    for entry in [*shipped, *added]:
        path = "/" + entry[len("file:"):].lstrip("/") if entry.startswith("file:") else entry
        if not path or "://" in path or not path.startswith("/"):
            continue  # a URL (hdfs:, s3a:, local:) or a relative path: nothing this machine can look under
        root = str(Path(path).parent)
        if root not in roots and len(roots) < _MAX_SHIPPED_ROOTS:
            roots.append(root)
    trace.environment.source_roots = roots


# Where Spark's call site of a job submitted through py4j points: the JDK's reflection accessor, NativeMethodAccessorImpl
# through JDK 17, DirectMethodHandleAccessor from JDK 18 on, or the accessor the JDK generates for a method called
# many times, whose class has no file (Spark's "<unknown>").
_REFLECTIVE_SITE = re.compile(r" at (?:NativeMethodAccessorImpl\.java|DirectMethodHandleAccessor\.java"
                              r"|GeneratedMethodAccessor\d*\.java|<unknown>):-?\d+")
# A call site in JVM code that is not the reflection accessor: a library's own job started inside one call from the
# program (MLlib's ``treeAggregate at RDDLossFunction.scala:61`` during ``LogisticRegression.fit``), or Spark's
# (a broadcast's ``run at ThreadPoolExecutor.java:1136``).
_JVM_SITE = re.compile(r" at [^ ]+\.(?:scala|java|kt):-?\d+$")
# The JVM's event times are whole milliseconds, the driver's Python clock finer.
_CLOCK_SLACK_S = 0.001


def _with_site(name: str, site: str) -> str:
    """``name`` with the program's line in place of the reflection accessor (taken as written: a path's
    backslashes are not escapes), after the request a Spark Connect job is named after, or after the JVM code a
    library's job is named after."""
    if _names_connect_request(name):
        return f"{name} at {site}"
    if _REFLECTIVE_SITE.search(name):
        return _REFLECTIVE_SITE.sub(lambda _: f" at {site}", name)
    if _JVM_SITE.search(name):
        return f"{name}, from {site}"
    return name


def _names_program_site(name: str) -> bool:
    """Whether a job's name says nothing of the program's line: the reflection accessor, a Connect request, or JVM
    code (PySpark's RDD API names its jobs after the program's line itself)."""
    return bool(_REFLECTIVE_SITE.search(name) or _names_connect_request(name) or _JVM_SITE.search(name))


def _names_connect_request(name: str) -> bool:
    return name.partition(": ")[2].startswith(CONNECT_NAME) or name.startswith(CONNECT_NAME)


def name_python_call_sites(trace: tr.Trace, calls: Sequence[DriverCall]) -> int:
    """Put the PySpark program's line (the calls from the driver's Python into the JVM, or a Spark Connect client's
    requests) in place of the reflection accessor Spark names a job after (after a Connect request's name, or after
    the JVM code a library's job is named after), in the names of the jobs submitted during one call,
    of their stages and of their SQL queries: ``count at NativeMethodAccessorImpl.java:0`` becomes ``count at
    /jobs/etl.py:42``, ``treeAggregate at RDDLossFunction.scala:61`` ``treeAggregate at RDDLossFunction.scala:61,
    from /jobs/train.py:30``. A job during calls of two lines at once (actions on two Python threads) and a micro-batch of
    a streaming query keep Spark's names. The job keeps the line as its ``python_call_site`` attribute. Returns the
    jobs renamed."""
    if not calls:
        return 0
    # One thread's calls follow each other: the one a job's submission may fall in is the last to start before it.
    by_thread: dict[int, list[DriverCall]] = {}
    for call in sorted(calls, key=lambda c: c.start):
        by_thread.setdefault(call.thread, []).append(call)
    starts = {thread: [c.start for c in own] for thread, own in by_thread.items()}
    renamed = 0
    queries: dict[str, set[str]] = {}
    for job in trace.operations:
        if (job.kind != "job" or job.start is None or "streaming_query_id" in job.attributes
                or not _names_program_site(job.name)):
            continue
        sites = set()
        for thread, own in by_thread.items():
            at = bisect.bisect_right(starts[thread], job.start + _CLOCK_SLACK_S) - 1
            if at >= 0 and own[at].end + _CLOCK_SLACK_S >= job.start:
                sites.add(own[at].site)
        query = job.attributes.get("sql_execution_id")
        if len(sites) != 1:
            if query is not None:
                queries.setdefault(query, set()).add("")  # its query keeps Spark's name too
            continue
        site = sites.pop()
        job.name = _with_site(job.name, site)
        job.attributes["python_call_site"] = site
        for stage in job.children:
            if stage.kind == "stage":
                stage.name = _with_site(stage.name, site)
        if query is not None:
            queries.setdefault(query, set()).add(site)
        renamed += 1
    for sql in trace.sql_queries:
        sites = queries.get(sql.execution_id, set())
        if len(sites) == 1 and "" not in sites:
            sql.description = _with_site(sql.description, next(iter(sites)))
    return renamed


def _batches_text(query: str, spans: dict[str, tuple[float, float]]) -> str:
    """How many batches a query ran, how long each took and how often one started (medians): a query whose batches
    take as long as the time between them does not keep up with its trigger or its input."""
    took = statistics.median(end - start for start, end in spans.values())
    text = f"'{query}': {len(spans)} batch{'es' if len(spans) != 1 else ''} of {format_duration(took)}"
    starts = sorted(start for start, _ in spans.values())
    if len(starts) > 1:
        every = statistics.median(b - a for a, b in zip(starts, starts[1:], strict=False))
        text += f" (medians) every {format_duration(every)}"
        if every > 0:
            text += f", busy {min(1.0, took / every):.0%} of the time"
    return text


def _local_cores(properties: dict[str, str]) -> int | None:
    """The n of a ``local[n]`` master (the executor's cores, which local mode does not log)."""
    master = properties.get("spark.master", "")
    if not master.startswith("local["):
        return None
    cores = master[6:-1]
    return int(cores) if cores.isdigit() else None


def _workers(state: EventLogState) -> list[ExecutorRecord]:
    """The executors that ran tasks: all but the driver, unless the driver is all there is (local mode)."""
    workers = [e for e in state.executors.values() if e.id != "driver"] or list(state.executors.values())
    local = state.properties.get("spark.master", "").startswith("local[")
    return [dataclasses.replace(e, cores=_local_cores(state.properties)) if not e.cores and local else e
            for e in workers]


def _without_none(document: Document) -> Document:
    return {k: v for k, v in document.items() if v is not None}


def _environment(state: EventLogState) -> Document:
    workers = _workers(state)
    slots = sum(e.cores or 0 for e in workers)
    memory = sum(e.memory_bytes or 0 for e in workers)
    return _without_none({
        "executors": [_without_none(dataclasses.asdict(e)) for e in workers],
        "hosts": sorted({e.host for e in workers if e.host}),
        "total_slots": slots or None, "memory_bytes": memory or None,
        "classpath": state.classpath, "properties": state.properties, "scaling": list(INTEGRATION.scaling),
    })


def _application(app: AppRecord | None, jobs: dict[int, JobRecord], start: float, end: float,
                 path: Path) -> Document:
    app = app or AppRecord()
    if app.exit_code:  # the driver said it failed
        status = "failed"
    elif not app.ended:  # still running, or the driver died before it could say
        status = "unknown"
    else:
        # An exit code of 0 says little: a PySpark program's JVM stops its context with 0 before Python's own
        # status is known, whatever the program did after its last job failed.
        status = "failed" if any(j.status == "failed" for j in jobs.values()) else "succeeded"
    return _without_none({
        "framework": "spark", "framework_version": app.version,
        "id": app.id if app.id is not None else path.name, "name": app.name, "attempt": app.attempt,
        "start": start, "end": end, "status": status, "user": app.user,
    })


def application_times(state: EventLogState) -> tuple[float, float]:
    """The application's start and end: as logged, else the first and last event's time."""
    app = state.app or AppRecord()
    start = app.start or state.first or 0.0
    end = app.end or state.last or start
    return start, max(start, end)


def build_trace(state: EventLogState, path: Path) -> tr.Trace:
    """The trace of an event log's state (``path`` names the log in errors and stands in for a missing app id)."""
    fill_missing_times(state)
    start, end = application_times(state)
    ctx = _Assembly(state, start, end, stage_owners(state.jobs, state.stages))
    operations = [_job(jid, job, ctx) for jid, job in sorted(state.jobs.items())]
    ended = state.app is not None and state.app.ended
    doc = {
        "schema_version": tr.SCHEMA_VERSION,
        "producer": {"name": "crystalperf", "hook": "spark-eventlog"},
        "application": _application(state.app, state.jobs, start, end, path),
        "environment": _environment(state),
        "operations": operations,
        "metrics": ctx.totals,
        "warnings": [] if ended else ["the event log has no application end (a running or crashed app)"],
    }
    if state.sql_plans:
        doc["sql_queries"] = sql_queries(state)
    trace = tr.parse_trace(doc, path)
    name_operations(trace)
    return trace


def sql_queries(state: EventLogState) -> list[Document]:
    """The trace's ``sql_queries`` from the log's SQL plans: a node ran in the stages whose completed info
    lists one of its metrics' accumulators, as the listener records them live."""
    stages_of: dict[int, set[int]] = {}
    for sid, metrics in state.stage_sql_metrics.items():
        for metric in metrics:
            stages_of.setdefault(metric, set()).add(sid)
    out = []
    for execution, record in sorted(state.sql_plans.items()):
        nodes = []
        for index, (name, detail, parent, node_metrics) in enumerate(record.nodes):
            stages = sorted({s for m in node_metrics for s in stages_of.get(m, ())})
            node: Document = {"id": index, "name": name}
            if detail and detail != name:
                node["detail"] = detail
            if parent is not None:
                node["parent"] = parent
            if stages:
                node["stages"] = stages
            nodes.append(node)
        query: Document = {"execution_id": str(execution), "nodes": nodes}
        if record.description:
            query["description"] = record.description
        if record.clipped:
            query["clipped"] = True
        out.append(query)
    return out


def merge_worker_samples(trace: tr.Trace, parts: Sequence[tr.StackSamples]) -> None:
    """Add the PySpark workers' samples to the trace's (the listener's JVM samples, if any), on the
    trace's time buckets; a trace without samples gets buckets from the application's start."""
    if not parts:
        return
    own = trace.samples
    base = [own] if own is not None else []
    origin = own.origin if own is not None else None
    merged = merge_samples([*base, *parts], origin=origin, bucket_s=own.bucket_s if own is not None else None)
    if merged is not None and origin is None:
        merged = merge_samples([merged], origin=min(merged.origin, trace.application.start))
    trace.samples = merged


def add_worker_cpu(trace: tr.Trace, cpu: dict[tuple[str, str], float]) -> None:
    """Count the PySpark workers' CPU time in their tasks' measured CPU time.

    Spark's ``executorCpuTime`` is the JVM task thread's alone, and while a Python UDF runs that thread waits
    for its worker: without the worker's CPU a Python stage would measure as mostly not CPU. The worker's
    seconds are kept apart too (``python_cpu_time_s``); the sum stays within the task's run time, of which
    it is a part (the JVM thread and the worker overlap when they pipeline).
    """
    def room(m: dict[str, float]) -> float | None:
        run = m.get(tr.METRIC_RUN_TIME)
        return run if run is not None and run > 0 else None

    _add_worker_seconds(trace, cpu, METRIC_PYTHON_CPU_TIME, tr.METRIC_CPU_TIME, room)


def add_worker_cpu_wait(trace: tr.Trace, waits: dict[tuple[str, str], float]) -> None:
    """Count the run-queue delay of the PySpark workers' threads in their tasks' ``cpu_wait_s``.

    On a machine with fewer cores than runnable threads the worker is ready to compute but waits for a core;
    its CPU time alone would make a CPU-bound UDF look as if it spent its time on something else. The
    worker's seconds are kept apart too (``python_cpu_wait_s``). Call it after :func:`add_worker_cpu`: the
    task's CPU time and run-queue delay together stay within its run time (a thread is either on a core or
    queued for one, never both).
    """
    def room(m: dict[str, float]) -> float | None:
        run = m.get(tr.METRIC_RUN_TIME)
        return max(0.0, run - m.get(tr.METRIC_CPU_TIME, 0.0)) if run is not None and run > 0 else None

    _add_worker_seconds(trace, waits, METRIC_PYTHON_CPU_WAIT_TIME, tr.METRIC_CPU_WAIT_TIME, room)


def _add_worker_seconds(trace: tr.Trace, per_task: dict[tuple[str, str], float], kept_as: str, metric: str,
                        room: Callable[[dict[str, float]], float | None]) -> None:
    """Add the workers' seconds of each (operation, task) to the task's ``metric``, within the limit ``room``
    gives (None: no limit known), and keep them apart as ``kept_as``.

    The operation's totals (schema 1.4 ``metrics``, over all its tasks) get the same: the sum of its tasks'
    additions while every task is in the trace; once the tasks are a sample, every task's seconds, within the
    operation's own limit."""
    by_op: dict[str, dict[str, float]] = {}
    for (op_id, task_id), seconds in per_task.items():
        by_op.setdefault(op_id, {})[task_id] = seconds
    for op in trace.iter_operations():
        mine = by_op.get(op.id)
        if not mine:
            continue
        added = 0.0
        for task in op.tasks:
            if task.id not in mine:
                continue
            seconds = mine[task.id]
            m = task.metrics
            m[kept_as] = seconds
            before = m.get(metric, 0.0)
            total = before + seconds
            limit = room(m)
            m[metric] = min(total, limit) if limit is not None else total
            added += m[metric] - before
        if not op.metrics:
            continue
        sampled = op.task_count is not None and op.task_count > len(op.tasks)
        op.metrics[kept_as] = op.metrics.get(kept_as, 0.0) + sum(mine.values())
        if sampled:
            total = op.metrics.get(metric, 0.0) + sum(mine.values())
            limit = room(op.metrics)
            op.metrics[metric] = min(total, limit) if limit is not None else total
        else:
            op.metrics[metric] = op.metrics.get(metric, 0.0) + added
