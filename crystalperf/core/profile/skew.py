"""Skew and stragglers: per operation, how its tasks' times (and what they read) are distributed, which
operations a few slow tasks held up, and what the job would take had those tasks been balanced.

The rule (unit-tested by hand in ``tests/unit/test_skew.py``). For an operation that ran tasks (a Spark stage,
a Flink operator), take its recorded tasks that neither failed nor were killed (a failed attempt is retried
and its retry counts) and, when there are at least ``MIN_TASKS`` of them, their durations ``d`` (end - start):

- ``p50`` and ``p75`` are quantiles with linear interpolation between the sorted durations (position
  ``q * (n - 1)``, numpy's default), ``mean`` the mean;
- the *slow* tasks are those with ``d > SLOW_RATIO * p75`` (1.5 x p75); none, no skew;
- what a task read: storage input plus shuffle read bytes, or the records it read where no task read bytes;
- the *balanced* task time: when the slow tasks read more (their mean read at least ``DATA_RATIO`` x the
  median task's), their time is the data's (``cause`` "data"), and balancing the data spreads the same total
  work over the same tasks: every task takes the ``mean``. When they read no more than the others, the data
  does not explain it (``cause`` "straggler": a slow or busy slot, a long GC): re-run elsewhere, a slow task
  takes the ``median`` and the others what they took. A slow task that read no more and ran on a *cold*
  executor (it started before any task there had ended: the JVM still loading classes and compiling) in an
  operation most of whose tasks ran warm is neither: a fresh executor's first tasks are slow wherever they run
  (the what-ifs' first wave counts it). It is not slow, and is left as it ran when the others are balanced.
  Without read figures (``cause`` "time") the mean: the conservative assumption, that the slow tasks' excess is
  work that has to run somewhere;
- the stage's saving ``saved = replay(d) - replay(balanced)``: both replayed in start order on the traced
  task slots by the predictor's list scheduler (a sample of the tasks each standing for the tasks it was
  drawn from), so waves, and a slow task that overlapped other tasks' waves, count as they ran;
- the operation is *skewed* when ``saved >= MIN_STAGE_SHARE`` (10 %) of its runtime and ``saved >=
  MIN_JOB_SHARE`` (2 %) of the application's runtime: the slow tasks cost a tenth of the stage, and enough of
  the job for a person to look (a few milliseconds of noise among tiny tasks are not skew).

What it would save the *job* (``crystalperf.core.predict.balance``) is the predictor's re-traversal of the DAG with that operation's tasks balanced
and every other operation as traced: nothing when the operation was off the critical path. When the hook kept
only a sample of an operation's tasks, the slow tasks it names are the slowest of the sample.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from crystalperf.core import trace as tr
from crystalperf.core.profile.dag import ExecutionProfile, OperationProfile, unit_profiles
from crystalperf.core.schedule import replay
from crystalperf.core.trace.totals import task_count
from crystalperf.core.units import format_seconds, format_size

__all__ = ["CAUSE_STRAGGLER", "Skew", "SkewFindings", "TaskTimes", "find_skew", "task_times"]

MIN_TASKS = 3
SLOW_RATIO = 1.5
DATA_RATIO = 1.5
MIN_STAGE_SHARE = 0.10
MIN_JOB_SHARE = 0.02
COLD_SLACK_S = 0.1
# Flagged operations whose job-level gain is predicted (and reported), the largest stage savings first: each
# prediction re-traverses the whole DAG.
MAX_REPORTED = 10
MAX_NAMED = 3  # slow tasks named per operation

CAUSE_DATA = "data"
CAUSE_STRAGGLER = "straggler"
CAUSE_TIME = "time"

_READ_BYTES = (tr.METRIC_INPUT_BYTES, tr.METRIC_SHUFFLE_READ_BYTES)


@dataclass(frozen=True)
class TaskTimes:
    """The distribution of an operation's task durations (seconds) and of what its tasks read."""

    count: int  # tasks the operation ran
    recorded: int  # of them in the trace (and in these figures): fewer when the hook kept a sample
    p50: float
    p75: float
    max: float
    mean: float
    read_unit: str | None = None  # "bytes" or "records"; None when the tasks recorded neither
    read_p50: float | None = None
    read_max: float | None = None

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"count": self.count, "recorded": self.recorded, "p50": round(self.p50, 6),
                             "p75": round(self.p75, 6), "max": round(self.max, 6), "mean": round(self.mean, 6)}
        if self.read_unit is not None:
            d["read"] = {"unit": self.read_unit, "p50": self.read_p50, "max": self.read_max}
        return d


@dataclass(frozen=True)
class SlowTask:
    id: str
    index: int | None  # the partition (Spark) or subtask index
    executor: str | None
    duration_s: float
    read: float | None  # in the operation's read unit

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "index": self.index, "executor": self.executor,
                "duration_s": round(self.duration_s, 6), "read": self.read}


@dataclass
class Skew:
    """A skewed operation: its distribution, the slow tasks, and the balanced figures."""

    profile: OperationProfile
    times: TaskTimes
    slow: list[SlowTask]  # slowest first, at most MAX_NAMED
    slow_count: int  # slow tasks among the recorded ones
    cause: str
    balanced_task_s: float  # what a balanced task takes (the mean, or the median for a straggler)
    threshold_s: float  # a task slower than this is slow (SLOW_RATIO x p75)
    stage_saved_s: float
    warming_up: frozenset[str] = frozenset()  # ids of slow tasks on cold executors, left as they ran
    job_runtime_s: float | None = None  # traced; None for a streaming job (its runtime is not a makespan)
    balanced_job_s: float | None = None

    @property
    def runtime_s(self) -> float:
        return self.profile.runtime

    @property
    def balanced_stage_s(self) -> float:
        return max(0.0, self.runtime_s - self.stage_saved_s)

    @property
    def job_saved_s(self) -> float:
        if self.job_runtime_s is None or self.balanced_job_s is None:
            return 0.0
        return max(0.0, self.job_runtime_s - self.balanced_job_s)

    def sentence(self) -> str:
        """One line a person reads: the operation, its slowest task against the median, the balanced runtime."""
        t, slow = self.times, self.slow[0]
        where = f"task {slow.id}" + (f" (partition {slow.index})" if slow.index is not None else "")
        ratio = f", {slow.duration_s / t.p50:.0f}x the median {format_seconds(t.p50)}" if t.p50 > 0 else ""
        read = ""
        if slow.read is not None and t.read_p50 is not None:
            shown = format_size if t.read_unit == "bytes" else (lambda n: f"{n:,.0f} records")
            read = f", reading {shown(slow.read)} vs {shown(t.read_p50)}"
        others = f" ({self.slow_count - 1} more slow task{'s' if self.slow_count > 2 else ''})" \
            if self.slow_count > 1 else ""
        balanced = {CAUSE_DATA: "with its data balanced", CAUSE_TIME: "balanced",
                    CAUSE_STRAGGLER: "with its slow tasks at the median time"}[self.cause]
        if self.job_runtime_s is not None and self.balanced_job_s is not None:
            outcome = (f"{balanced}, the job is predicted to take {format_seconds(self.balanced_job_s)} instead of "
                       f"{format_seconds(self.job_runtime_s)}")
            if self.job_saved_s <= 0:
                outcome += " (the stage is off the critical path)"
        else:
            outcome = (f"{balanced}, the operation is predicted to take {format_seconds(self.balanced_stage_s)} "
                       f"instead of {format_seconds(self.runtime_s)}")
        what = {CAUSE_DATA: "Data skew", CAUSE_STRAGGLER: "Straggler", CAUSE_TIME: "Skew"}[self.cause]
        return (f"{what} in {self.profile.op.name}: {where} ran {format_seconds(slow.duration_s)}{ratio}{read}{others}; "
                f"{outcome}.")

    def as_dict(self) -> dict[str, Any]:
        op = self.profile.op
        return {
            "operation": self.profile.path,
            "id": op.id,
            "name": op.name,
            "kind": op.kind,
            "cause": self.cause,
            "task_time_s": self.times.as_dict(),
            "slow_threshold_s": round(self.threshold_s, 6),
            "slow_tasks": self.slow_count,
            "slowest": [s.as_dict() for s in self.slow],
            "balanced_task_s": round(self.balanced_task_s, 6),
            "runtime_s": round(self.runtime_s, 6),
            "balanced_runtime_s": round(self.balanced_stage_s, 6),
            "saved_s": round(self.stage_saved_s, 6),
            "job_runtime_s": None if self.job_runtime_s is None else round(self.job_runtime_s, 6),
            "balanced_job_runtime_s": None if self.balanced_job_s is None else round(self.balanced_job_s, 6),
            "job_saved_s": round(self.job_saved_s, 6),
            "sentence": self.sentence(),
        }


@dataclass
class SkewFindings:
    """Every operation's task-time distribution, and the skewed ones, the largest job gain first."""

    times: dict[str, TaskTimes] = field(default_factory=dict)  # by operation path
    skewed: list[Skew] = field(default_factory=list)  # reported: at most MAX_REPORTED
    flagged: set[str] = field(default_factory=set)  # paths of every skewed operation, reported or not


def _counted(tasks: Sequence[tr.Task]) -> list[tr.Task]:
    return [t for t in tasks if t.status not in ("failed", "killed")]


def _read(tasks: Sequence[tr.Task]) -> tuple[str, list[float]] | None:
    """What each task read: bytes (storage input + shuffle read), else records; None when neither was recorded."""
    storage, shuffle = _READ_BYTES
    data = [max(0.0, m.get(storage, 0.0)) + max(0.0, m.get(shuffle, 0.0)) for m in (t.metrics for t in tasks)]
    if any(v > 0 for v in data):
        return "bytes", data
    records = [max(0.0, t.metrics.get(tr.METRIC_RECORDS_IN, 0.0)) for t in tasks]
    if any(v > 0 for v in records):
        return "records", records
    return None


def task_times(op: tr.Operation) -> TaskTimes | None:
    """The distribution of the operation's counted tasks, or None with fewer than ``MIN_TASKS`` of them."""
    tasks = _counted(op.tasks)
    if len(tasks) < MIN_TASKS:
        return None
    durations = sorted([t.end - t.start for t in tasks])
    read = _read(tasks)
    unit, p50, top = None, None, None
    if read is not None:
        unit, values = read
        p50, top = statistics.median(values), max(values)
    # "inclusive": linear interpolation between the sorted durations at 0.75 * (n - 1), as numpy's default
    p75 = statistics.quantiles(durations, n=4, method="inclusive")[2]
    return TaskTimes(task_count(op), len(op.tasks), statistics.median(durations), p75,
                     durations[-1], statistics.fmean(durations), unit, p50, top)


def _balanced(tasks: Sequence[tr.Task], balanced_by_mean: bool, mean: float, median: float,
              slow: Sequence[tr.Task]) -> list[float]:
    # Balancing data redistributes the same total work over the same tasks: each takes the mean. The median
    # would make the slow tasks' extra work vanish and promise more than any re-partitioning gives. A
    # straggler's excess is no work of its data's: the slow task alone goes back to the median.
    if balanced_by_mean:
        return [mean] * len(tasks)
    stragglers = {id(t) for t in slow}
    return [median if id(t) in stragglers else t.duration for t in tasks]


def cold_tasks(trace: tr.Trace) -> frozenset[int]:
    """The tasks (by ``id()``) that started on an executor before any task there had ended, where the executor
    went on to run tasks after: a fresh JVM's first wave. A task's end is when its status reached the driver,
    which may be after the next task on the freed slot launched: starts within ``COLD_SLACK_S`` of the first end
    are not the first wave's."""
    by_executor: dict[str, list[tr.Task]] = {}
    for op in trace.iter_operations():
        for task in op.tasks:
            if task.executor:
                by_executor.setdefault(task.executor, []).append(task)
    cold: set[int] = set()
    for tasks in by_executor.values():
        first_end = min(t.end for t in tasks)
        first_wave = [t for t in tasks if t.start < first_end - COLD_SLACK_S]
        if len(first_wave) < len(tasks):
            cold.update(id(t) for t in first_wave)
    return frozenset(cold)


def assess(prof: OperationProfile, slots: int, job_runtime_s: float, times: TaskTimes | None = None,
           cold: frozenset[int] = frozenset()) -> Skew | None:
    """The rule of the module docstring for one operation: a Skew when it holds (no job figures yet), else None.
    ``times``: the operation's ``task_times``, when already computed; ``cold``: ``cold_tasks`` of its trace."""
    op = prof.op
    times = times or task_times(op)
    if times is None:
        return None
    threshold = SLOW_RATIO * times.p75
    tasks = _counted(op.tasks)
    slow = sorted((t for t in tasks if t.duration > threshold), key=lambda t: -t.duration)
    if not slow:
        return None
    read = _read(tasks)
    by_task: dict[int, float] = {}
    median_read = times.read_p50 or 0.0
    if read is not None:
        by_task = {id(t): v for t, v in zip(tasks, read[1], strict=True)}
    warming: list[tr.Task] = []
    if sum(id(t) in cold for t in tasks) < len(tasks) / 2:
        warming = [t for t in slow
                   if id(t) in cold and (not by_task or by_task[id(t)] < DATA_RATIO * median_read)]
        slow = [t for t in slow if t not in warming]
        if not slow:
            return None
    if read is None:
        cause = CAUSE_TIME
    else:
        slow_read = statistics.fmean(by_task[id(t)] for t in slow)
        cause = CAUSE_DATA if slow_read > 0 and slow_read >= DATA_RATIO * median_read else CAUSE_STRAGGLER
    by_mean = cause != CAUSE_STRAGGLER
    balanced_task = times.mean if by_mean else times.p50
    ordered = sorted(tasks, key=lambda t: t.start)
    durations = [t.duration for t in ordered]
    weight = task_count(op) / len(op.tasks)
    before = replay(durations, slots, weight=weight)
    after = replay(_balanced(ordered, by_mean, times.mean, times.p50, slow), slots, weight=weight)
    saved = before - after
    if before > prof.runtime > 0:
        # The replay takes longer than the operation did (it had more slots than the trace says): the saving
        # in proportion, as the predictor takes it.
        saved = prof.runtime * saved / before
    if saved < MIN_STAGE_SHARE * prof.runtime or saved < MIN_JOB_SHARE * job_runtime_s or saved <= 0:
        return None
    named = [SlowTask(t.id, t.index, t.executor, t.duration, by_task.get(id(t))) for t in slow[:MAX_NAMED]]
    return Skew(prof, times, named, len(slow), cause, balanced_task, threshold, saved,
                frozenset(t.id for t in warming))


def find_skew(profile: ExecutionProfile, slots: int) -> SkewFindings:
    """Every unit operation's task-time distribution, and the skewed ones (at most ``MAX_REPORTED``, the largest
    stage savings first) with no job figures yet: ``crystalperf.core.predict.balance`` predicts the job with each
    balanced and orders them by the job's gain."""
    findings = SkewFindings()
    runtime = profile.trace.application.duration
    candidates: list[Skew] = []
    cold = cold_tasks(profile.trace)
    for prof in unit_profiles(profile):
        if not prof.op.tasks:
            continue
        times = task_times(prof.op)
        if times is None:
            continue
        findings.times[prof.path] = times
        skew = assess(prof, slots, runtime, times, cold)
        if skew is not None:
            candidates.append(skew)
            findings.flagged.add(skew.profile.path)
    candidates.sort(key=lambda s: -s.stage_saved_s)
    findings.skewed = candidates[:MAX_REPORTED]
    return findings
