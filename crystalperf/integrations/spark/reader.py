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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from crystalperf.core import limits
from crystalperf.core import trace as tr
from crystalperf.core.errors import BadInputError
from crystalperf.core.record.hooks import guard
from crystalperf.core.record.samplejournal import MAX_READ_BYTES as MAX_SPOOL_READ_BYTES
from crystalperf.core.record.samplejournal import JournalContents, read_journal
from crystalperf.integrations.spark.codecs import DamagedLogError, open_text
from crystalperf.integrations.spark.config import SPOOL_CPU_FILE, SPOOL_FILE
from crystalperf.integrations.spark.redact import redact

Event = dict[str, Any]

_ROLLING_FILE = re.compile(r"events_(\d+)")
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


def _event(line: str) -> Event | None:
    """One line as an event object, or None for a line that is not one (not JSON, or JSON of another shape)."""
    line = line.strip()
    if not line:
        return None
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, a number of thousands of digits, nesting too deep
        return None
    return event if isinstance(event, dict) else None


def events(path: Path, reading: Reading | None = None) -> Iterator[Event]:
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
                    event = _event(line)
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


_MAX_MS = tr.MAX_TIME * 1000.0


def seconds(ms: Any) -> float | None:
    """Spark's epoch milliseconds as seconds; None for a missing or unset (0) time, and for one no clock
    could give (infinite, or beyond the trace's time range)."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 < ms <= _MAX_MS:
        return None
    return float(ms) / 1000.0


def number(value: Any) -> float | None:
    """A finite JSON number within the trace's range of quantities, else None (a string, a null, 1e400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and abs(value) > tr.MAX_QUANTITY:
        return None
    value = float(value)
    return value if math.isfinite(value) and abs(value) <= tr.MAX_QUANTITY else None


def integer(value: Any, low: int = -tr.MAX_INDEX, high: int = tr.MAX_INDEX) -> int | None:
    """A JSON integer (or an integral number) within [low, high], else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and low <= value <= high:
        return value
    return None


def text(value: Any) -> str | None:
    """A JSON string, or a number written as one; None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def section(value: Any) -> dict[str, Any]:
    """A JSON object of an event, or an empty one when the field is missing or of another type."""
    return value if isinstance(value, dict) else {}


def task_metrics(m: Any) -> dict[str, float]:
    """A task's metrics under the core's well-known names and Spark's own."""
    m = section(m)
    sr = section(m.get("Shuffle Read Metrics"))
    sw = section(m.get("Shuffle Write Metrics"))
    inp = section(m.get("Input Metrics"))
    out = section(m.get("Output Metrics"))

    def g(d: dict[str, Any], k: str) -> float:
        v = number(d.get(k, 0))
        return max(0.0, v) if v is not None else 0.0

    remote, local = g(sr, "Remote Bytes Read"), g(sr, "Local Bytes Read")
    metrics = {
        tr.METRIC_RUN_TIME: g(m, "Executor Run Time") / 1000.0,
        tr.METRIC_CPU_TIME: g(m, "Executor CPU Time") / 1e9,
        tr.METRIC_GC_TIME: g(m, "JVM GC Time") / 1000.0,
        tr.METRIC_NETWORK_WAIT: g(sr, "Fetch Wait Time") / 1000.0,
        tr.METRIC_DISK_TIME: g(sw, "Shuffle Write Time") / 1e9,
        tr.METRIC_INPUT_BYTES: g(inp, "Bytes Read"),
        tr.METRIC_OUTPUT_BYTES: g(out, "Bytes Written"),
        tr.METRIC_SHUFFLE_READ_BYTES: remote + local,
        tr.METRIC_SHUFFLE_REMOTE_READ_BYTES: remote,
        tr.METRIC_SHUFFLE_WRITE_BYTES: g(sw, "Shuffle Bytes Written"),
        tr.METRIC_SPILL_DISK_BYTES: g(m, "Disk Bytes Spilled"),
        tr.METRIC_SPILL_MEMORY_BYTES: g(m, "Memory Bytes Spilled"),
        tr.METRIC_PEAK_MEMORY_BYTES: g(m, "Peak Execution Memory"),
        tr.METRIC_RECORDS_IN: g(inp, "Records Read") + g(sr, "Total Records Read"),
        tr.METRIC_RECORDS_OUT: g(out, "Records Written") + g(sw, "Shuffle Records Written"),
    }
    for key, value in m.items():
        kept = number(value)
        if kept is not None and isinstance(key, str) and key not in metrics:
            metrics[key] = kept
    return metrics


# --- typed records of what the log says ----------------------------------------------------------------

@dataclass
class AppRecord:
    """The application; it exists once any application-level event was read."""

    id: str | None = None
    name: str = ""
    user: str | None = None
    attempt: str | None = None
    version: str | None = None
    start: float | None = None
    end: float | None = None
    ended: bool = False  # an ApplicationEnd was read (even one without a usable time)


@dataclass
class JobRecord:
    start: float | None
    stages: list[int]  # sorted stage ids
    properties: dict[str, Any]
    end: float | None = None
    status: str | None = None  # success / failed once it ended


@dataclass
class StageInfo:
    """What Spark says about a stage (its Stage Info, the latest one read)."""

    name: str = ""
    parents: list[int] = field(default_factory=list)
    num_tasks: int = 1
    call_site: str = ""

    @classmethod
    def from_json(cls, info: dict[str, Any]) -> StageInfo:
        parents = info.get("Parent IDs")
        return cls(name=text(info.get("Stage Name")) or "",
                   parents=[p for p in (integer(x) for x in (parents if isinstance(parents, list) else []))
                            if p is not None],
                   num_tasks=integer(info.get("Number of Tasks"), 1, tr.MAX_INDEX) or 1,
                   call_site=(text(info.get("Details")) or "").split("\n", 1)[0].strip())


@dataclass
class StageRun:
    """A stage that was submitted (it ran, in one of the jobs that contain it)."""

    start: float | None = None
    end: float | None = None
    status: str | None = None


@dataclass
class TaskRecord:
    id: str
    index: int | None
    attempt: int
    executor: str | None
    host: str | None
    start: float
    end: float
    status: str
    metrics: dict[str, float]


@dataclass
class ExecutorRecord:
    id: str
    host: str | None = None
    cores: int | None = None
    memory_bytes: int | None = None
    added: float | None = None
    removed: float | None = None


# Bounds on the SQL plans kept from a log, as the listener's (SqlPlans.java).
MAX_SQL_EXECUTIONS = 1000
MAX_PLAN_NODES = 2000
MAX_PLAN_DETAIL = 400
MAX_SQL_METRICS = 1_000_000


@dataclass
class SqlPlanRecord:
    """A SQL execution's last physical plan, flattened in pre-order: (name, detail, parent, metric ids)."""

    description: str = ""
    nodes: list[tuple[str, str, int | None, tuple[int, ...]]] = field(default_factory=list)
    clipped: bool = False


@dataclass
class EventLogState:
    """Everything read from an event log so far."""

    app: AppRecord | None = None
    jobs: dict[int, JobRecord] = field(default_factory=dict)
    stage_info: dict[int, StageInfo] = field(default_factory=dict)
    stages: dict[int, StageRun] = field(default_factory=dict)
    tasks: dict[int, list[TaskRecord]] = field(default_factory=dict)
    executors: dict[str, ExecutorRecord] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    classpath: list[str] = field(default_factory=list)
    sql_plans: dict[int, SqlPlanRecord] = field(default_factory=dict)
    sql_metrics: set[int] = field(default_factory=set)  # accumulator ids of the plans' SQL metrics
    stage_sql_metrics: dict[int, set[int]] = field(default_factory=dict)  # stage -> SQL metrics it updated
    first: float | None = None  # earliest and latest time of any event
    last: float | None = None
    seen: int = 0  # JSON events read
    malformed: int = 0  # events of a known kind skipped because their fields made no sense
    first_malformed: str | None = None

    def application(self) -> AppRecord:
        if self.app is None:
            self.app = AppRecord()
        return self.app

    def executor(self, executor_id: str) -> ExecutorRecord:
        return self.executors.setdefault(executor_id, ExecutorRecord(executor_id))

    def observe(self, stamp: float | None) -> None:
        if stamp is not None:
            self.first = stamp if self.first is None else min(self.first, stamp)
            self.last = stamp if self.last is None else max(self.last, stamp)


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
    state.classpath.extend(str(e) for e in entries if "://" not in str(e))


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


def _job_end(state: EventLogState, event: Event) -> None:
    job_id = integer(event.get("Job ID"))
    job = state.jobs.get(job_id) if job_id is not None else None
    if job is not None:
        job.end = seconds(event.get("Completion Time"))
        result = section(event.get("Job Result")).get("Result", "")
        job.status = "success" if result == "JobSucceeded" else "failed"


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
    state.tasks.setdefault(stage, []).append(TaskRecord(
        id=str(text(info.get("Task ID"))), index=integer(info.get("Index")),
        attempt=integer(info.get("Attempt", 0), 0) or 0,
        executor=text(info.get("Executor ID")), host=text(info.get("Host")), start=start,
        end=max(start, seconds(info.get("Finish Time")) or start), status=status,
        metrics=task_metrics(event.get("Task Metrics"))))


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
    from crystalperf.integrations.spark.assemble import build_trace

    path = Path(path)
    reading = Reading(in_progress(path))
    state = read_state(events(path, reading))
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


def _describe(path: Path, *, check: bool) -> LoggedApplication | None:
    """The application of one event log, from the first events of its first file; with ``check``, None
    when the file does not begin as a Spark event log does (any other file in the directory)."""
    name, start, app_id = "", None, None
    try:
        with _open(log_files(path)[0]) as lines:
            event = _event(lines.readline(_FIRST_LINE))
            if check and not (isinstance(event, dict) and "Event" in event):
                return None
            for _ in range(_HEAD_EVENTS):
                if isinstance(event, dict) and event.get("Event") == "SparkListenerApplicationStart":
                    attempt = text(event.get("App Attempt ID"))
                    app_id = f"{text(event.get('App ID'))}" + (f"_{attempt}" if attempt else "")
                    name, start = text(event.get("App Name")) or "", seconds(event.get("Timestamp"))
                    break
                line = lines.readline(_FIRST_LINE)
                if not line:
                    break
                event = _event(line)
    except (BadInputError, OSError, UnicodeError):
        if check:
            return None  # the listing names what it can read; importing the log says what is wrong
    files = log_files(path) if path.is_dir() else [path]
    return LoggedApplication(id=app_id or _log_key(path), name=name, start=start,
                             status="in progress" if in_progress(path) else "complete",
                             size=sum(f.stat().st_size for f in files), path=path)


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


def read_spool(spool: Path) -> list[tr.StackSamples]:
    """The samples of every PySpark worker in the spool directory; an unreadable file is logged and skipped."""
    parts: list[tr.StackSamples] = []
    for path in sorted(spool.glob(SPOOL_FILE.format(pid="*"))):
        with guard(f"reading Python worker samples {path}"):
            if path.stat().st_size > MAX_SPOOL_READ_BYTES:
                raise ValueError(f"{path} is larger than {MAX_SPOOL_READ_BYTES} bytes")
            parts.append(tr.StackSamples.model_validate_json(path.read_text()))
    for contents in _journals(spool):
        if contents.samples is not None:
            parts.append(without_jvm_waits(contents.samples))
    return parts


def _read_worker_seconds(spool: Path, name: str) -> dict[tuple[str, str], float]:
    """(operation, task) -> the sum of the ``name`` seconds the workers' CPU files give that task (tasks
    without it are left out); an unreadable file is logged and skipped."""
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
    for contents in _journals(spool):
        for task, figures in contents.tasks.items():
            if name in figures and math.isfinite(figures[name]):
                seconds[task] = seconds.get(task, 0.0) + figures[name]
    return seconds


def read_worker_cpu(spool: Path) -> dict[tuple[str, str], float]:
    """(operation, task) -> the CPU seconds the PySpark workers spent on that task, over every worker's file
    in the spool; an unreadable file is logged and skipped."""
    return _read_worker_seconds(spool, "cpu_time_s")


def read_worker_cpu_wait(spool: Path) -> dict[tuple[str, str], float]:
    """(operation, task) -> the seconds the PySpark workers' threads were runnable but waited for a core
    during that task (schedstat's run-queue delay), where the workers could read it."""
    return _read_worker_seconds(spool, "cpu_wait_s")
