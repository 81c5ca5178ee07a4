"""Spark's native files -> typed parts: the event log (the History Server's input) and the PySpark
workers' spool files.

``crystalperf import spark-eventlog PATH`` reads a past run's event log with :func:`read_event_log`.
Event logs have no stacks, so the resource vectors come from the task metrics. The log is streamed line by
line (logs of long applications are gigabytes), decompressed on the fly whatever Spark's codec
(:mod:`.codecs`); event kinds we do not use, and lines that are not JSON (a log cut off by a crash, or
still being written), are skipped. :func:`list_applications` finds the applications of a History Server
directory (``--list``, ``--app``, ``--all``). Each kind we use has one small handler that updates an
:class:`EventLogState`; :mod:`.assemble` turns that state into the trace.

The log is input we do not control: a line longer than ``CRYSTALPERF_MAX_EVENT_LINE_BYTES`` is skipped
unread, every field is checked for its type and range as it is taken (a string where a number belongs, a
null, an id of 400 digits, an infinite time), and an event that still does not make sense is skipped and
counted in the trace's warnings, never the end of the reading.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from crystalperf.core import limits
from crystalperf.core import trace as tr
from crystalperf.core.errors import BadInputError
from crystalperf.core.record.hooks import guard
from crystalperf.core.record.samplejournal import MAX_READ_BYTES as MAX_SPOOL_READ_BYTES
from crystalperf.core.record.samplejournal import JournalContents, read_journal
from crystalperf.integrations.spark.assemble import build_trace
from crystalperf.integrations.spark.codecs import DamagedLogError, open_text
from crystalperf.integrations.spark.config import SPOOL_CPU_FILE, SPOOL_FILE
from crystalperf.integrations.spark.eventjson import Event, decoder, whole
from crystalperf.integrations.spark.records import (
    MAX_PLAN_DETAIL,
    MAX_PLAN_NODES,
    MAX_SQL_EXECUTIONS,
    MAX_SQL_METRICS,
    MAX_STREAMING_TRIGGERS,
    EventLogState,
    JobRecord,
    SqlPlanRecord,
    StageInfo,
    StageRun,
    TaskRecord,
    integer,
    iso_seconds,
    number,
    seconds,
    section,
    task_metrics,
    text,
)
from crystalperf.integrations.spark.redact import redact

_ROLLING_FILE = re.compile(r"events_(\d+)")
# Spark's own jar on the driver's classpath, for logs older than the version event (Spark before 1.3):
# spark-assembly-1.2.0-hadoop2.4.0.jar, spark-core_2.10-1.2.1.jar
_SPARK_JAR = re.compile(r"(?:^|/)spark-(?:assembly|core_\d+\.\d+)-(\d+\.\d+\.\d+)(?:[-.][\w.-]*)?\.jar$")
_IN_PROGRESS = ".inprogress"
MAX_JUNK_LINES = 1_000_000  # lines in a row that are not JSON events before the reading gives up
IN_PROGRESS_WARNING = "the event log is in progress (Spark was still writing it): the trace ends where the log did"


# --- the files and the JSON event stream ---------------------------------------------------------------

def _open(path: Path) -> IO[str]:
    return open_text(path)


def _rolling_index(path: Path) -> int:
    found = _ROLLING_FILE.match(path.name)
    return int(found.group(1)) if found else 0


def log_files(path: Path) -> list[Path]:
    """The files of an event log in order: the file itself, or a rolling log's ``events_<n>_<app>`` files."""
    if path.is_dir():  # rolling event log: eventlog_v2_<app>/events_<n>_<app>...
        files = [p for p in path.iterdir() if p.is_file() and p.name.startswith("events_")]
        if not files:
            raise BadInputError("directory holds no Spark event log files (events_*)", path)
        return sorted(files, key=_rolling_index)
    return [path]


def in_progress(path: Path) -> bool:
    """Whether Spark was still writing the log when it was read: a ``<app>.inprogress`` file, or a rolling
    log whose ``appstatus_<app>`` file (or whose last events file) ends in ``.inprogress``."""
    if not path.is_dir():
        return path.name.endswith(_IN_PROGRESS)
    if any(p.name.startswith("appstatus_") and p.name.endswith(_IN_PROGRESS) for p in path.iterdir()):
        return True
    files = [p for p in path.iterdir() if p.is_file() and p.name.startswith("events_")]
    return bool(files) and max(files, key=_rolling_index).name.endswith(_IN_PROGRESS)


@dataclass
class Reading:
    """What reading a log's files found besides its events."""

    in_progress: bool = False
    damage: DamagedLogError | None = None  # the data that could not be decoded; reading stopped there
    long_lines: int = 0  # lines skipped for their length


def _lines(stream: IO[str], limit: int, reading: Reading | None) -> Iterator[str]:
    """The stream's lines, each read with at most ``limit`` characters held: a longer line is skipped
    (read through in pieces, never whole) and counted."""
    while True:
        line = stream.readline(limit)
        if not line:
            return
        if len(line) >= limit and not line.endswith("\n"):
            while (rest := stream.readline(limit)) and not rest.endswith("\n"):
                pass
            if reading is not None:
                reading.long_lines += 1
            continue
        yield line


def events(path: Path, reading: Reading | None = None, *,
           decode: Callable[[str], Event | None] = whole) -> Iterator[Event]:
    """Every JSON object of the event log, in order; blank lines and lines that are not JSON are skipped.

    Compressed data that cannot be decoded ends the stream: with ``reading`` the damage is recorded there,
    else :class:`DamagedLogError` is raised after the events before it. The end of the last file of a log
    still in progress is expected to be cut off (Spark is still writing it) and is no damage.
    """
    own = reading if reading is not None else Reading(in_progress(path))
    files = log_files(path)
    limit = limits.MAX_EVENT_LINE_BYTES.get()
    for file in files:
        try:
            with _open(file) as lines:
                junk = 0
                for line in _lines(lines, limit, own):
                    event = decode(line)
                    if event is not None:
                        junk = 0
                        yield event
                        continue
                    junk += 1
                    if junk > MAX_JUNK_LINES:
                        # Real logs have a damaged line here and there, never a million in a row (a
                        # compressed file of newlines would otherwise be read for minutes).
                        raise BadInputError(f"more than {MAX_JUNK_LINES:,} lines in a row are not Spark events: "
                                            "not an event log, or a damaged one", file)
        except DamagedLogError as exc:
            if exc.truncated and own.in_progress and file == files[-1]:
                return
            if reading is None:
                raise
            reading.damage = exc
            return


# --- one handler per event kind ------------------------------------------------------------------------

def _application_start(state: EventLogState, event: Event) -> None:
    app = state.application()
    app.id = text(event.get("App ID")) or "unknown"
    app.name = text(event.get("App Name")) or ""
    app.user = text(event.get("User"))
    app.start = seconds(event.get("Timestamp"))
    app.attempt = text(event.get("App Attempt ID"))


def _application_end(state: EventLogState, event: Event) -> None:
    app = state.application()
    app.end = seconds(event.get("Timestamp"))
    app.ended = True
    app.exit_code = integer(event.get("ExitCode"))


def _log_start(state: EventLogState, event: Event) -> None:
    state.application().version = text(event.get("Spark Version"))


def _pairs(value: Any) -> Iterator[tuple[Any, Any]]:
    """Key-value pairs of an event's section, written as an object or (older logs) a list of pairs."""
    if isinstance(value, dict):
        yield from value.items()
    elif isinstance(value, list):
        yield from ((p[0], p[1]) for p in value if isinstance(p, list) and len(p) == 2)


def _environment_update(state: EventLogState, event: Event) -> None:
    props = event.get("Spark Properties") or {}
    state.properties.update(redact({str(k): str(v) for k, v in _pairs(props)}))
    cp = event.get("Classpath Entries") or {}
    entries = (cp.keys() if isinstance(cp, dict)
               else (p[0] for p in cp if isinstance(p, list) and p) if isinstance(cp, list) else ())
    # Only local jars and directories can serve as a bytecode fallback.
    local = [str(e) for e in entries if "://" not in str(e)]
    state.classpath.extend(local)
    if state.app is None or state.app.version is None:
        version = next((found.group(1) for e in local if (found := _SPARK_JAR.search(e))), None)
        if version is not None:
            state.application().version = version


def _executor_added(state: EventLogState, event: Event) -> None:
    info = section(event.get("Executor Info"))
    ex = state.executor(str(text(event.get("Executor ID"))))
    ex.host = text(info.get("Host"))
    ex.cores = integer(info.get("Total Cores"), 1, tr.MAX_SLOTS)
    ex.added = seconds(event.get("Timestamp"))


def _executor_removed(state: EventLogState, event: Event) -> None:
    ex = state.executors.get(str(text(event.get("Executor ID"))))
    if ex is not None:
        ex.removed = seconds(event.get("Timestamp"))


def _block_manager_added(state: EventLogState, event: Event) -> None:
    bm = section(event.get("Block Manager ID"))
    ex = state.executor(str(text(bm.get("Executor ID"))))
    if ex.host is None:
        ex.host = text(bm.get("Host"))
    ex.memory_bytes = integer(event.get("Maximum Memory"), 0, 2**63)


def _job_start(state: EventLogState, event: Event) -> None:
    job_id = integer(event.get("Job ID"))
    if job_id is None:
        raise ValueError("a job without a numeric Job ID")
    ids = event.get("Stage IDs")
    stage_ids = sorted({s for s in (integer(x) for x in (ids if isinstance(ids, list) else [])) if s is not None})
    state.jobs[job_id] = JobRecord(seconds(event.get("Submission Time")), stage_ids,
                                   section(event.get("Properties")))
    infos = event.get("Stage Infos")
    for info in infos if isinstance(infos, list) else []:
        stage_id = integer(info.get("Stage ID")) if isinstance(info, dict) else None
        if stage_id is not None:
            # A later StageSubmitted/Completed says more about the stage than the job's plan does.
            state.stage_info.setdefault(stage_id, StageInfo.from_json(info))


_CANCELLED = re.compile(r"SPARK_JOB_CANCELLED|\bJob \d+ cancelled\b")


def is_cancellation(message: str) -> bool:
    """Spark ends a cancelled job (a streaming query stopped, a job group cancelled) with JobFailed too, and its
    message says so; such a job is ``killed``, and does not make the application ``failed``."""
    return _CANCELLED.search(message[:10_000]) is not None


def _job_end(state: EventLogState, event: Event) -> None:
    job_id = integer(event.get("Job ID"))
    job = state.jobs.get(job_id) if job_id is not None else None
    if job is not None:
        job.end = seconds(event.get("Completion Time"))
        outcome = section(event.get("Job Result"))
        if outcome.get("Result", "") == "JobSucceeded":
            job.status = "success"
        else:
            message = section(outcome.get("Exception")).get("Message")
            job.status = "killed" if isinstance(message, str) and is_cancellation(message) else "failed"


def _stage_update(state: EventLogState, event: Event) -> tuple[dict[str, Any], StageRun]:
    info = section(event.get("Stage Info"))
    sid = integer(info.get("Stage ID", -1))
    if sid is None:
        raise ValueError("a stage without a numeric Stage ID")
    state.stage_info[sid] = StageInfo.from_json(info)
    run = state.stages.setdefault(sid, StageRun())
    submitted = seconds(info.get("Submission Time"))
    if submitted is not None and run.start is None:
        run.start = submitted
    return info, run


def _stage_submitted(state: EventLogState, event: Event) -> None:
    _stage_update(state, event)


def _stage_completed(state: EventLogState, event: Event) -> None:
    info, run = _stage_update(state, event)
    run.end = seconds(info.get("Completion Time")) or run.start
    run.status = "failed" if info.get("Failure Reason") else "success"
    sid = integer(info.get("Stage ID", -1))
    accumulables = info.get("Accumulables")
    if sid is not None and isinstance(accumulables, list):
        updated = {i for i in (integer(section(a).get("ID")) for a in accumulables) if i is not None}
        if updated & state.sql_metrics:
            state.stage_sql_metrics.setdefault(sid, set()).update(updated & state.sql_metrics)


def _sql_plan(state: EventLogState, event: Event) -> None:
    """A SQL execution started, or adaptive execution re-planned it: its plan is now the event's."""
    execution = integer(event.get("executionId"))
    if execution is None:
        raise ValueError("a SQL execution without a numeric executionId")
    record = state.sql_plans.get(execution)
    if record is None:
        if len(state.sql_plans) >= MAX_SQL_EXECUTIONS:
            return
        record = state.sql_plans[execution] = SqlPlanRecord(text(event.get("description")) or "")
    record.nodes, record.clipped = _flatten_plan(section(event.get("sparkPlanInfo")))
    for _, _, _, metrics in record.nodes:
        if len(state.sql_metrics) < MAX_SQL_METRICS:
            state.sql_metrics.update(metrics)


def _flatten_plan(root: dict[str, Any]) -> tuple[list[tuple[str, str, int | None, tuple[int, ...]]], bool]:
    """Pre-order, without recursion (a plan may be thousands of nodes deep); true when clipped."""
    nodes: list[tuple[str, str, int | None, tuple[int, ...]]] = []
    stack: list[tuple[dict[str, Any], int | None]] = [(root, None)]
    while stack:
        info, parent = stack.pop()
        if len(nodes) >= MAX_PLAN_NODES:
            return nodes, True
        metrics = info.get("metrics")
        ids = tuple(sorted(i for i in (integer(section(m).get("accumulatorId")) for m in
                                       (metrics if isinstance(metrics, list) else [])) if i is not None))
        name = (text(info.get("nodeName")) or "?")[:200]
        detail = (text(info.get("simpleString")) or "")[:MAX_PLAN_DETAIL]
        index = len(nodes)
        nodes.append((name, detail, parent, ids))
        children = info.get("children")
        for child in reversed(children if isinstance(children, list) else []):
            stack.append((section(child), index))
    return nodes, False


def _task_end(state: EventLogState, event: Event) -> None:
    info = section(event.get("Task Info"))
    start = seconds(info.get("Launch Time"))
    stage = integer(event.get("Stage ID", -1))
    if start is None or stage is None:
        return
    status = "failed" if info.get("Failed") else "killed" if info.get("Killed") else "success"
    state.observe(seconds(info.get("Finish Time")))  # a log cut off mid-stage: its tasks end after its last event
    state.add_task(stage, TaskRecord(
        id=str(text(info.get("Task ID"))), index=integer(info.get("Index")),
        attempt=integer(info.get("Attempt", 0), 0) or 0,
        executor=text(info.get("Executor ID")), host=text(info.get("Host")), start=start,
        end=max(start, seconds(info.get("Finish Time")) or start), status=status,
        metrics=task_metrics(event.get("Task Metrics"))))


def _streaming_progress(state: EventLogState, event: Event) -> None:
    """A micro-batch's progress: when its trigger fired (ISO-8601) and how long it ran (``triggerExecution``)."""
    progress = section(event.get("progress"))
    query, batch = text(progress.get("id")), integer(progress.get("batchId"))
    fired = iso_seconds(progress.get("timestamp"))
    if query is None or batch is None or fired is None or len(state.streaming_triggers) >= MAX_STREAMING_TRIGGERS:
        return
    ran = number(section(progress.get("durationMs")).get("triggerExecution"))
    state.streaming_triggers[f"{query}/{batch}"] = (fired, ran / 1000.0 if ran is not None and ran >= 0 else None)


Handler = Callable[[EventLogState, Event], None]

HANDLERS: dict[str, Handler] = {
    "SparkListenerApplicationStart": _application_start,
    "SparkListenerApplicationEnd": _application_end,
    "SparkListenerLogStart": _log_start,
    "SparkListenerEnvironmentUpdate": _environment_update,
    "SparkListenerExecutorAdded": _executor_added,
    "SparkListenerExecutorRemoved": _executor_removed,
    "SparkListenerBlockManagerAdded": _block_manager_added,
    "SparkListenerJobStart": _job_start,
    "SparkListenerJobEnd": _job_end,
    "SparkListenerStageSubmitted": _stage_submitted,
    "SparkListenerStageCompleted": _stage_completed,
    "SparkListenerTaskEnd": _task_end,
    "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart": _sql_plan,
    "org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveExecutionUpdate": _sql_plan,
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent": _streaming_progress,
}


def read_state(stream: Iterator[Event]) -> EventLogState:
    """Fold an event stream into the state; kinds without a handler only count and move the clock."""
    state = EventLogState()
    for event in stream:
        state.seen += 1
        state.observe(seconds(event.get("Timestamp") or event.get("Submission Time")
                              or event.get("Completion Time")))
        handler = HANDLERS.get(str(event.get("Event")))
        if handler is not None:
            try:
                handler(state, event)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                # An event of a known kind whose fields make no sense (hand-edited, damaged, another
                # program's): skipped, and the trace says how many.
                state.malformed += 1
                if state.first_malformed is None:
                    state.first_malformed = f"{event.get('Event')}: {type(exc).__name__}: {exc}"[:300]
    return state


def read_event_log(path: Path) -> tr.Trace:
    """Read a Spark event log (a file or a rolling-log directory; plain, zstd, lz4, snappy, lzf or gzip;
    complete or in progress) into a trace.

    Damaged compressed data ends the reading: the events before it make the trace, and a warning says
    where it stopped; a log whose damage leaves no event is a :class:`BadInputError`.
    """
    path = Path(path)
    reading = Reading(in_progress(path))
    # the events as the handlers read them: the kinds without a handler and the tasks' accumulables not built
    state = read_state(events(path, reading, decode=decoder(HANDLERS)))
    if reading.damage is not None and not state.seen:
        raise reading.damage
    if not state.seen:
        raise BadInputError("not a Spark event log (no JSON events)", path)
    if state.app is None and not state.jobs:
        raise BadInputError("not a Spark event log (no application or job events)", path)
    trace = build_trace(state, path)
    if reading.in_progress:
        trace.warnings.append(IN_PROGRESS_WARNING)
    if reading.damage is not None:
        trace.warnings.append(f"{reading.damage}; reading stopped there, the {state.seen} events before it "
                              "were used")
    if state.malformed:
        trace.warnings.append(f"{state.malformed} events were skipped: their fields make no sense (the first: "
                              f"{state.first_malformed})")
    if reading.long_lines:
        trace.warnings.append(f"{reading.long_lines} lines longer than {limits.MAX_EVENT_LINE_BYTES.get()} "
                              f"characters were skipped ({limits.MAX_EVENT_LINE_BYTES.env})")
    return trace


# --- a History Server directory: the applications in it ------------------------------------------------

@dataclass(frozen=True)
class LoggedApplication:
    """One application's event log found in a directory (a line of ``crystalperf import ... --list``)."""

    id: str  # the App ID, with ``_<attempt>`` for an attempt, as Spark names the log
    name: str
    start: float | None  # epoch seconds
    status: str  # "complete" or "in progress"
    size: int  # bytes on disk, all files of a rolling log together
    path: Path  # what read_event_log reads


_HEAD_EVENTS = 200  # ApplicationStart comes within the first few events; do not read a whole log for it
_FIRST_LINE = 1 << 16  # a log's first line (LogStart) is short; a longer one is some other file


def _log_key(path: Path) -> str:
    """The application id (and attempt) Spark put in the log's name."""
    name = path.name.removeprefix("eventlog_v2_")
    while Path(name).suffix in (_IN_PROGRESS, ".compact", ".zstd", ".zst", ".lz4", ".snappy", ".lzf", ".gz"):
        name = str(Path(name).with_suffix(""))
    return name


# The names Spark gives an application's log: its id (local mode, standalone, YARN, Kubernetes), then an
# attempt, a codec and .inprogress.
_LOG_NAME = re.compile(r"(eventlog_v2_)?(local-\d+|app-\d{14}-\d+|application_\d+_\d+|spark-[0-9a-f]{16,})"
                       r"(_[\w-]+)?(\.[a-z0-9]+)*$")
_START = "SparkListenerApplicationStart"
# The events before the application's start decoded only as far as their kind (an environment update is 100 KB).
_decode_head = decoder({_START})


def _describe(path: Path, *, check: bool) -> LoggedApplication | None:
    """The application of one event log, from the first events of its first file; with ``check``, None
    when the file does not begin as a Spark event log does (any other file in the directory) unless its name is
    one Spark gives its logs (a damaged log is listed: reading it says what is wrong)."""
    name, start, app_id = "", None, None
    try:
        with _open(log_files(path)[0]) as lines:
            event = _decode_head(lines.readline(_FIRST_LINE))
            if check and not (isinstance(event, dict) and "Event" in event):
                return _named(path)
            for _ in range(_HEAD_EVENTS):
                if isinstance(event, dict) and event.get("Event") == "SparkListenerApplicationStart":
                    attempt = text(event.get("App Attempt ID"))
                    app_id = f"{text(event.get('App ID'))}" + (f"_{attempt}" if attempt else "")
                    name, start = text(event.get("App Name")) or "", seconds(event.get("Timestamp"))
                    break
                line = lines.readline(_FIRST_LINE)
                if not line:
                    break
                event = _decode_head(line)
    except (BadInputError, OSError, UnicodeError):
        if check:
            return _named(path)  # importing the log says what is wrong
    return _logged(path, app_id or _log_key(path), name, start)


def _logged(path: Path, app_id: str, name: str, start: float | None) -> LoggedApplication:
    files = log_files(path) if path.is_dir() else [path]
    return LoggedApplication(id=app_id, name=name, start=start,
                             status="in progress" if in_progress(path) else "complete",
                             size=sum(f.stat().st_size for f in files), path=path)


def _named(path: Path) -> LoggedApplication | None:
    """A file that does not read as an event log, listed when Spark would have named it so."""
    if not _LOG_NAME.match(path.name):
        return None
    try:
        return _logged(path, _log_key(path), "", None)
    except (BadInputError, OSError):
        return None


def _is_rolling_log(path: Path) -> bool:
    return path.is_dir() and any(p.is_file() and p.name.startswith("events_") for p in path.iterdir())


def list_applications(path: Path) -> list[LoggedApplication]:
    """The applications whose event logs are at ``path``: a History Server directory (``spark.eventLog.dir``:
    single-file logs, ``.inprogress`` ones and rolling ``eventlog_v2_*`` directories side by side), or one
    log (a file or a rolling-log directory). Entry point ``crystalperf.trace_catalogs: spark-eventlog``."""
    path = Path(path)
    if not path.is_dir() or _is_rolling_log(path):
        described = _describe(path, check=False)
        return [described] if described is not None else []
    found = []
    for child in sorted(path.iterdir()):
        # Hidden files are Hadoop's .crc checksums; crystalperf-* are traces imported next to the logs.
        if child.name.startswith((".", "_", "crystalperf-")) or child.name.endswith(".crc"):
            continue
        if child.is_dir() and not (child.name.startswith("eventlog_v2_") and _is_rolling_log(child)):
            continue
        described = _describe(child, check=True)
        if described is not None:
            found.append(described)
    return found


# --- the PySpark workers' spool ------------------------------------------------------------------------

# Each PySpark worker appends to its journal (crystalperf.core.record.samplejournal) beside where older versions
# rewrote one StackSamples document (SPOOL_FILE) and one CPU file (SPOOL_CPU_FILE); both are read.
SPOOL_JOURNAL_FILE = SPOOL_FILE + "l"

# Innermost Python frames of a worker blocked reading from the JVM: the JVM side is busy producing the
# input then (and is sampled there), so counting these as the worker's stacks would double-count that
# time as network.
_WAITING_FOR_JVM = frozenset({"pyspark.serializers.read_int", "pyspark.serializers.read_long",
                              "pyspark.serializers.read_bool", "pyspark.serializers.FramedSerializer._read_with_length",
                              "pyspark.serializers.UTF8Deserializer.loads"})


def without_jvm_waits(samples: tr.StackSamples) -> tr.StackSamples:
    """The samples minus rows whose stack is blocked reading from the JVM (see _WAITING_FOR_JVM)."""
    waiting = {i for i, stack in enumerate(samples.stacks)
               if stack and samples.frames[stack[0]].name in _WAITING_FOR_JVM}
    if not waiting:
        return samples
    keep = [r for r, stack in enumerate(samples.stack) if stack not in waiting]
    return samples.model_copy(update={
        "key": [samples.key[r] for r in keep], "bucket": [samples.bucket[r] for r in keep],
        "stack": [samples.stack[r] for r in keep], "count": [samples.count[r] for r in keep]})


def _journals(spool: Path) -> list[JournalContents]:
    """Every worker journal of the spool; an unreadable one is logged and skipped."""
    found = []
    for path in sorted(spool.glob(SPOOL_JOURNAL_FILE.format(pid="*"))):
        with guard(f"reading Python worker journal {path}"):
            found.append(read_journal(path))
    return found


@dataclass
class WorkerSpool:
    """What the PySpark workers left in a spool directory, each file read once."""

    samples: list[tr.StackSamples]
    cpu: dict[tuple[str, str], float]  # (operation, task) -> the workers' CPU seconds on that task
    cpu_wait: dict[tuple[str, str], float]  # (operation, task) -> their run-queue delay during it
    hook: list[tr.HookProcess]  # what the hook cost in each worker, as its journal last said


def read_worker_spool(spool: Path) -> WorkerSpool:
    """Everything the PySpark workers of the spool recorded; an unreadable file is logged and skipped."""
    journals = _journals(spool)
    return WorkerSpool(samples=_spool_samples(spool, journals),
                       cpu=_read_worker_seconds(spool, "cpu_time_s", journals),
                       cpu_wait=_read_worker_seconds(spool, "cpu_wait_s", journals),
                       hook=[contents.hook for contents in journals if contents.hook is not None])


def read_spool(spool: Path) -> list[tr.StackSamples]:
    """The samples of every PySpark worker in the spool directory; an unreadable file is logged and skipped."""
    return _spool_samples(spool, _journals(spool))


def _spool_samples(spool: Path, journals: list[JournalContents]) -> list[tr.StackSamples]:
    parts: list[tr.StackSamples] = []
    for path in sorted(spool.glob(SPOOL_FILE.format(pid="*"))):
        with guard(f"reading Python worker samples {path}"):
            if path.stat().st_size > MAX_SPOOL_READ_BYTES:
                raise ValueError(f"{path} is larger than {MAX_SPOOL_READ_BYTES} bytes")
            parts.append(tr.StackSamples.model_validate_json(path.read_text()))
    for contents in journals:
        if contents.samples is not None:
            parts.append(without_jvm_waits(contents.samples))
    return parts


def _read_worker_seconds(spool: Path, name: str, journals: list[JournalContents]) -> dict[tuple[str, str], float]:
    """(operation, task) -> the sum of the ``name`` seconds the workers' CPU files and ``journals`` give that task
    (tasks without it are left out); an unreadable file is logged and skipped."""
    seconds: dict[tuple[str, str], float] = {}
    for path in sorted(spool.glob(SPOOL_CPU_FILE.format(pid="*"))):
        with guard(f"reading Python worker CPU times {path}"):
            found: dict[tuple[str, str], float] = {}
            for entry in json.loads(path.read_text())["tasks"]:
                if name in entry:
                    task = (str(entry["operation"]), str(entry["task"]))
                    found[task] = found.get(task, 0.0) + float(entry[name])
            for task, value in found.items():  # a damaged file adds nothing, not half of itself
                seconds[task] = seconds.get(task, 0.0) + value
    for contents in journals:
        for task, figures in contents.tasks.items():
            if name in figures and math.isfinite(figures[name]):
                seconds[task] = seconds.get(task, 0.0) + figures[name]
    return seconds


def read_worker_cpu(spool: Path) -> dict[tuple[str, str], float]:
    """(operation, task) -> the CPU seconds the PySpark workers spent on that task, over every worker's file
    in the spool; an unreadable file is logged and skipped."""
    return _read_worker_seconds(spool, "cpu_time_s", _journals(spool))


def read_worker_cpu_wait(spool: Path) -> dict[tuple[str, str], float]:
    """(operation, task) -> the seconds the PySpark workers' threads were runnable but waited for a core
    during that task (schedstat's run-queue delay), where the workers could read it."""
    return _read_worker_seconds(spool, "cpu_wait_s", _journals(spool))
