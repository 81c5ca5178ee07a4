"""What a Spark event log says, as typed records: the values of its events checked as they are taken, the
application, its jobs, stages, tasks and executors, and :class:`EventLogState`, everything read so far.

:mod:`.reader` fills the state from the log, :mod:`.assemble` turns it into a trace; both import these
records, neither imports the other's reverse.

A stage's tasks are not held whole (:class:`StageTasks`): a log of a million tasks would hold a million
records. Each task is folded into its stage's exact totals as it is read and offered to a seeded uniform
sample, bounded per stage (``CRYSTALPERF_MAX_TASKS_PER_OPERATION``) and over the whole log
(``CRYSTALPERF_MAX_EVENTLOG_TASKS``: past it every stage's sample is halved until the total fits), which is
what the listener keeps while the application runs (``TaskTable.java``) and what the trace's schema 1.4
``task_count`` and operation ``metrics`` carry.
"""

from __future__ import annotations

import datetime
import math
import random
import zlib
from dataclasses import dataclass, field
from operator import add, itemgetter
from typing import Any

from crystalperf.core import limits
from crystalperf.core import trace as tr

_MAX_MS = tr.MAX_TIME * 1000.0
_MAX_QUANTITY = tr.MAX_QUANTITY


def seconds(ms: Any) -> float | None:
    """Spark's epoch milliseconds as seconds; None for a missing or unset (0) time, and for one no clock
    could give (infinite, or beyond the trace's time range)."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 < ms <= _MAX_MS:
        return None
    return float(ms) / 1000.0


def iso_seconds(value: Any) -> float | None:
    """An ISO-8601 time as Spark's progress reports write it ("2026-12-04T03:23:01.000Z") in epoch seconds; None
    for anything else, or a time no clock could give."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            return None
        return seconds(moment.timestamp() * 1000.0)
    except (ValueError, OverflowError, OSError):
        return None


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


def _amount(d: dict[str, Any], key: str) -> float:
    """A non-negative metric of the task, 0 when it is missing, negative or not a number the trace can hold.
    (:func:`number` and a floor at 0, spelled out: it is called 17 times for each of a million tasks.)"""
    value = d.get(key, 0)
    kind = type(value)
    return float(value) if (kind is int or kind is float) and 0 <= value <= _MAX_QUANTITY else 0.0


def task_metrics(m: Any) -> dict[str, float]:
    """A task's metrics under the core's well-known names and Spark's own."""
    m = section(m)
    sr = section(m.get("Shuffle Read Metrics"))
    sw = section(m.get("Shuffle Write Metrics"))
    inp = section(m.get("Input Metrics"))
    out = section(m.get("Output Metrics"))
    g = _amount
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
        # number(value), spelled out as in _amount; the keys of a JSON object are strings
        kind = type(value)
        if (kind is int or kind is float) and -_MAX_QUANTITY <= value <= _MAX_QUANTITY and key not in metrics:
            metrics[key] = float(value)
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
    exit_code: int | None = None  # the driver's exit code, where the ApplicationEnd gives it (Spark 3.4+)


@dataclass
class JobRecord:
    start: float | None
    stages: list[int]  # sorted stage ids
    properties: dict[str, Any]
    end: float | None = None
    status: str | None = None  # success / failed / killed (cancelled) once it ended


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


@dataclass(slots=True)
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
MAX_STREAMING_TRIGGERS = 100_000


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
    tasks: dict[int, StageTasks] = field(default_factory=dict)
    executors: dict[str, ExecutorRecord] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    classpath: list[str] = field(default_factory=list)
    sql_plans: dict[int, SqlPlanRecord] = field(default_factory=dict)
    sql_metrics: set[int] = field(default_factory=set)  # accumulator ids of the plans' SQL metrics
    stage_sql_metrics: dict[int, set[int]] = field(default_factory=dict)  # stage -> SQL metrics it updated
    # a streaming micro-batch's trigger, "query id/batch id" -> (when it fired, how long it ran or None), seconds
    streaming_triggers: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    first: float | None = None  # earliest and latest time of any event
    last: float | None = None
    seen: int = 0  # JSON events read
    malformed: int = 0  # events of a known kind skipped because their fields made no sense
    first_malformed: str | None = None
    # the bounds on the task records kept (StageTasks), read when the state is made
    task_cap: int = field(default_factory=limits.MAX_TASKS_PER_OPERATION.get)
    task_budget: int = field(default_factory=limits.MAX_EVENTLOG_TASKS.get)
    kept_tasks: int = 0

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

    def add_task(self, stage: int, task: TaskRecord) -> None:
        """A task ended in ``stage``: counted, summed and offered to the stage's sample, within the bounds."""
        tasks = self.tasks.get(stage)
        if tasks is None:
            tasks = self.tasks[stage] = StageTasks(stage, self.task_cap)
        if tasks.add(task):
            self.kept_tasks += 1
            if self.kept_tasks > self.task_budget:
                self._shrink()

    def _shrink(self) -> None:
        """Halve every stage's sample until the records kept fit the budget (one a stage at least)."""
        while self.kept_tasks > self.task_budget and self.task_cap > 1:
            largest = max(len(t.kept) for t in self.tasks.values())
            self.task_cap = max(1, min(self.task_cap, largest) // 2)
            for tasks in self.tasks.values():
                self.kept_tasks -= tasks.shrink(self.task_cap)


@dataclass
class StageTasks:
    """A stage's tasks as the log is read: how many ended, the exact totals of their metrics, how many failed or
    were killed, and a uniform sample of their records (algorithm R, seeded by the stage id so that a log reads
    the same every time) that always holds the slowest task. While they fit ``cap`` every task is kept, in the
    order the log lists them."""

    stage: int
    cap: int
    count: int = 0
    failed: int = 0
    killed: int = 0
    kept: list[tuple[int, TaskRecord]] = field(default_factory=list)  # (its place among the stage's tasks, it)
    slowest: tuple[float, int, TaskRecord] | None = None
    first_start: float | None = None  # the earliest launch and the latest finish of all its tasks, sampled or not
    last_end: float | None = None
    _random: random.Random | None = field(default=None, compare=False, repr=False)
    # The running totals of the metrics named as the last task named them (a stage's tasks name the same ones in
    # the same order): each task's values are added in one C loop, in the order the tasks came.
    _sums: dict[str, float] = field(default_factory=dict, repr=False)
    _names: tuple[str, ...] = field(default=(), repr=False)
    _totals: list[float] = field(default_factory=list, repr=False)

    @property
    def sums(self) -> dict[str, float]:
        """Each metric's total over the stage's tasks."""
        self._sums.update(zip(self._names, self._totals, strict=True))
        return self._sums

    @property
    def sampled(self) -> bool:
        """Whether some tasks are left out of the records (the totals still count them)."""
        return self.count > len(self.kept)

    def _rng(self) -> random.Random:
        if self._random is None:
            self._random = random.Random(zlib.crc32(f"stage-{self.stage}".encode()))
        return self._random

    def add(self, task: TaskRecord) -> bool:
        """Count, sum and offer one task; true when the sample grew by it."""
        index = self.count
        self.count = index + 1
        if self.first_start is None or task.start < self.first_start:
            self.first_start = task.start
        if self.last_end is None or task.end > self.last_end:
            self.last_end = task.end
        if task.status == "failed":
            self.failed += 1
        elif task.status == "killed":
            self.killed += 1
        metrics = task.metrics
        names = tuple(metrics)
        if names != self._names:
            sums = self.sums
            self._names = names
            self._totals = [sums.get(name, 0.0) for name in names]
        self._totals = list(map(add, self._totals, metrics.values()))
        busy = metrics.get(tr.METRIC_RUN_TIME)
        if busy is None:
            busy = task.end - task.start
        if self.slowest is None or busy > self.slowest[0]:
            self.slowest = (busy, index, task)
        if len(self.kept) < self.cap:
            self.kept.append((index, task))
            return True
        j = self._rng().randrange(index + 1)
        if j < self.cap:
            self.kept[j] = (index, task)
        return False

    def shrink(self, cap: int) -> int:
        """Keep a uniform subset of ``cap`` records (a uniform subset of a uniform sample is one: partial
        Fisher-Yates); the number of records dropped."""
        self.cap = cap
        n = len(self.kept)
        if n <= cap:
            return 0
        rng, kept = self._rng(), self.kept
        for i in range(cap):
            j = i + rng.randrange(n - i)
            kept[i], kept[j] = kept[j], kept[i]
        del kept[cap:]
        return n - cap

    def records(self) -> list[TaskRecord]:
        """The records kept, in the log's order; a sample always holds the slowest task."""
        kept = list(self.kept)
        slowest = self.slowest
        if self.sampled and slowest is not None and kept and all(t is not slowest[2] for _, t in kept):
            kept[self._rng().randrange(len(kept))] = (slowest[1], slowest[2])
        kept.sort(key=itemgetter(0))
        return [t for _, t in kept]
