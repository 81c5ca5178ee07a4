"""The reporter's files -> typed parts: load and validate a part, merge the parts of one job, find the
recorded plan that names the job's operators, and wait until a job's parts hold final values.

The reporter (``java/``) writes one part per process and job, ``crystalperf-flink-<job_id>.<pid>.json``:
the scopes it saw (job / task = operator chain / operator, per subtask) with when their metrics were
registered and removed (a task's lifetime), the final value of each numeric metric per scope, the CPU time
of the subtasks' threads and the process, the classpath the job's code was loaded from, and the stack samples
it aggregated per (chain, subtask, 1 s bucket, thread state, thread role, stack): the role is empty for the
task thread (and a legacy source's thread), ``fetcher`` for the threads a FLIP-27 source reads in; since
version 3, ``io``: the process's I/O counter rows (``crystalperf.core.trace.IoSample``) over the job's span,
with one row before and one after; since version 4, ``stacks``: every stack once, which the sample rows name
by index (``[other]`` stands for the stacks the reporter's byte bound left out, ``max.sample.bytes``); since
version 5, ``thread_kinds_cpu_s``: the process's CPU time over the job (the span of ``process_cpu_s``) split by
thread kind, :data:`THREAD_KINDS` (``gc_concurrent`` since the reporter split the collector's threads; a part without
it counts them in ``gc``), and ``collector``: the JVM's garbage collector beans and the option that chose it
(:func:`garbage_collector`); since version 6, ``hook``: what the hook cost in the process over the job (a
trace ``HookProcess`` whose ``cpu_s`` is the sum of its ``parts``), and a ``hook`` thread kind (crystalperf's own
threads, before counted in ``other``); since version 7, a ``thread_cpu`` row of a subtask with a FLIP-27 source's
fetcher threads holds a fourth figure, their part of its CPU time: they run beside the task thread, so the subtask's
CPU time is not one thread's; since version 8, ``cluster`` (in the JobManager's part): the task slots and
TaskManagers registered with the cluster, the most its gauges read while the job ran (not kept from a process that
also ran subtasks: a mini cluster sizes its slots to its job); since version 9, ``heap``: the heap's maximum, the old
generation's live data after its collections during the job and the collections of each generation then
(:func:`heap_use`, kept with the collector); since version 10, ``status`` and ``failure`` (in the JobManager's part,
where the jar's job status listener is configured): how the job ended, Flink's name of the state, and the exception
it failed with, and ``cut``: why the part was written while the job still ran (the reporter closed, the JVM exited);
since version 11, ``process_faults``: the process's page faults served from memory and its kernel seconds over the
job, and its task threads' kernel seconds.
Version 1 parts (no thread states, lifetimes or classpath), parts without
roles, version 2 parts (no I/O rows) and parts without the split are still read. :func:`crystalperf.integrations.flink.record_plan` writes the job
graph beside them as ``crystalperf-flink-plan-<hash>.json``. Standard library only: reading the files
needs no PyFlink.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from crystalperf.core import limits
from crystalperf.core.errors import BadInputError
from crystalperf.core.trace import MAX_INDEX, MAX_TIME, THREAD_STATES, HookProcess, IoSample

log = logging.getLogger(__name__)

FORMAT = "crystalperf-flink-metrics"
# The role of the samples of the threads a FLIP-27 source reads in ("Source Data Fetcher for <task thread>").
FETCHER_ROLE = "fetcher"
PLAN_FORMAT = "crystalperf-flink-plan"
PLAN_PREFIX = "crystalperf-flink-plan-"
# Flink's terminal job states (JobStatus) a part's ``status`` may name (version 10), and the application status each
# one is in a trace.
JOB_STATES = {"FINISHED": "succeeded", "FAILED": "failed", "CANCELED": "cancelled", "SUSPENDED": "cancelled"}
MAX_FAILURE_CHARS = 2000

# The kinds of thread a part splits its process's CPU time into (version 5): the job's subtask threads, Flink's
# netty (data exchange) threads, the garbage collector's, the JIT compilers' and the rest (timers, heartbeats,
# RPC, the reporter's sampler).
THREAD_KINDS = ("task", "network", "gc", "jit", "other", "gc_concurrent", "hook")
# A collector bean's name (java.lang.management.GarbageCollectorMXBean) -> the collector family it belongs to.
_COLLECTOR_BEANS = (("G1 ", "g1"), ("Copy", "serial"), ("MarkSweepCompact", "serial"), ("PS ", "parallel"),
                    ("ZGC", "z"), ("Shenandoah", "shenandoah"), ("ParNew", "cms"), ("ConcurrentMarkSweep", "cms"))
_COLLECTOR_OPTION = re.compile(r"-XX:\+Use[A-Za-z]{1,30}GC")


@dataclass(frozen=True)
class Scope:
    """Where a metric was registered: a chain's task (``operator_name`` empty), one of its operators, or
    the job itself (``task_name`` empty: JobManager-side uptime and restarts), for one subtask."""

    task_name: str
    operator_name: str
    subtask: str  # as Flink's <subtask_index> variable spells it, which the task ids repeat
    index: int  # the subtask's number
    values: dict[str, float] = field(default_factory=dict)  # metric name -> final value (finite only)
    added: float | None = None  # when its first metric was registered (a task: deployed)
    removed: float | None = None  # when its last metric went away (a task: finished); None: still live
    host: str | None = None  # the TaskManager's host (Flink's <host> variable) and id (<tm_id>)
    taskmanager: str | None = None


@dataclass(frozen=True)
class SampleRow:
    """How many times the sampler saw one stack on one subtask's thread within one time bucket."""

    task_name: str
    subtask: str
    bucket: int  # counted from ``origin`` in the part's bucket_s
    stack: str  # one frame a line, top first: "class.method<TAB>file<TAB>line"
    count: int
    origin: float  # the sample origin of the process that took it: each process buckets from its own
    state: str = ""  # the thread's state (JVM Thread.State lower-cased); "": unknown (version 1 parts)
    thread: str = ""  # the thread's role: "" the task thread, FETCHER_ROLE a FLIP-27 source's fetcher


@dataclass
class Part:
    """One process's part of a job, or (after :func:`merge_parts`) all of them joined."""

    path: Path
    job_id: str
    job_name: str
    start: float
    end: float
    complete: bool  # no metric of the job left in that process when it was written
    written: float
    scopes: list[Scope]
    thread_cpu: dict[tuple[str, str], float]  # (task name, subtask) -> CPU seconds of its threads
    process_cpu_s: float | None  # CPU the process used while the job ran
    cpu_count: int  # 0: unknown
    dropped_metrics: int
    dropped_samples: int
    samples: list[SampleRow]
    sample_origin: float | None
    sample_bucket_s: float
    sample_interval_s: float
    classpath: list[str] = field(default_factory=list)  # jars and class directories of the job's code
    io: list[IoSample] = field(default_factory=list)  # the processes' I/O counter rows (version 3)
    parts: int = 1  # how many process parts were merged into this one
    # The process's CPU seconds by thread kind (version 5; None: not recorded), and the same per TaskManager id
    # for the parts whose subtasks all ran on one TaskManager (a TaskManager's process, a one-TaskManager mini
    # cluster): after merging, one entry per such TaskManager.
    thread_kinds: dict[str, float] | None = None
    taskmanager_kinds: dict[str, dict[str, float]] = field(default_factory=dict)
    # The JVM's garbage collector (trace.GarbageCollector fields: family, option, processors) per TaskManager id,
    # for the same parts as taskmanager_kinds (absent: the part does not say).
    taskmanager_collectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The process's page faults served from memory and its kernel seconds over the job (version 11,
    # trace.ThreadCpu's minor_faults and kernel) per TaskManager id, for the same parts as taskmanager_kinds.
    taskmanager_faults: dict[str, dict[str, float]] = field(default_factory=dict)
    # What the hook cost in each process over the job (version 6): one entry per part.
    hook: list[HookProcess] = field(default_factory=list)
    # (task name, subtask) -> CPU seconds of its fetcher threads, part of its thread_cpu (version 7): a subtask
    # absent here ran on its task thread (and a legacy source's thread, which take turns).
    fetcher_cpu: dict[tuple[str, str], float] = field(default_factory=dict)
    # The task slots and TaskManagers registered with the cluster (version 8, the JobManager's part; None: unknown).
    cluster: Cluster | None = None
    # How the job ended, as Flink's JobStatus names it (version 10, the JobManager's part where the job status
    # listener ran; "": not recorded), and the failure it ended with ("": none).
    status: str = ""
    failure: str = ""
    # Why the part was written before the job ended (version 10: the reporter closed, the JVM exited); "": it was not.
    cut: str = ""


@dataclass(frozen=True)
class Cluster:
    task_slots: int
    taskmanagers: int


@dataclass(frozen=True)
class PlanEdge:
    source: str  # id of the upstream plan node
    ship_strategy: str  # FORWARD, HASH[k], REBALANCE, …


@dataclass(frozen=True)
class PlanNode:
    id: str
    name: str  # the operator's name, as the job's metrics name it
    predecessors: tuple[PlanEdge, ...]


def _number(value: Any) -> float | None:
    """A finite JSON number as float; None otherwise (legacy sources report busy time as NaN)."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _text(value: Any) -> str | None:
    return value[:200] if isinstance(value, str) and value else None


def _read_json(path: Path) -> Any:
    """A file's JSON document: a regular file within ``CRYSTALPERF_MAX_PART_BYTES`` (a FIFO would block)."""
    data = limits.read_regular(path, limits.MAX_PART_BYTES, "crystalperf Flink metrics file")
    return json.loads(data.decode("utf-8"))


def _time(value: Any) -> float:
    """A time or duration in seconds: a finite number within the trace's range, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a time")
    seconds = float(value)
    if not math.isfinite(seconds) or abs(seconds) > MAX_TIME:
        raise ValueError(f"{value!r} is not a time")
    return seconds


def _count(value: Any) -> int:
    count = int(value)
    if not 0 <= count <= MAX_INDEX:
        raise ValueError(f"{value!r} is out of range")
    return count


def _document(path: Path) -> dict[str, Any]:
    try:
        doc = _read_json(path)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInputError(
            f"not a readable crystalperf Flink metrics file ({exc.__class__.__name__})", path
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadInputError(f"not a crystalperf Flink metrics file (expected format {FORMAT!r})", path)
    return doc


def _scopes(doc: dict[str, Any]) -> list[Scope]:
    raw: list[dict[str, Any]] = doc["scopes"]
    values: list[dict[str, float]] = [{} for _ in raw]
    for scope_index, name, value in doc["metrics"]:
        index, finite = int(scope_index), _number(value)
        if finite is not None and 0 <= index < len(raw):
            values[index][str(name)] = finite
    scopes = []
    for index, scope in enumerate(raw):
        subtask = str(scope.get("subtask_index", "0"))
        scopes.append(Scope(str(scope.get("task_name") or ""), str(scope.get("operator_name") or ""), subtask,
                            int(subtask or 0), values[index], _number(scope.get("added")),
                            _number(scope.get("removed")), _text(scope.get("host")), _text(scope.get("tm_id"))))
    return scopes


def _state(rest: list[Any]) -> str:
    state = str(rest[0]) if rest else ""
    return state if state in THREAD_STATES else ""  # a state this version does not know: unknown


def _role(rest: list[Any]) -> str:
    return str(rest[1]) if len(rest) > 1 and rest[1] else ""


def _stack(stack: Any, stacks: Any) -> str:
    # version 4 interns each stack once (``stacks``) and a row names it by index; earlier rows hold the text
    if isinstance(stack, int) and not isinstance(stack, bool):
        if not isinstance(stacks, list) or not 0 <= stack < len(stacks):
            raise ValueError(f"a sample row refers to stack {stack}, which does not exist")
        return str(stacks[stack])
    return str(stack)


def _samples(doc: dict[str, Any], origin: float) -> list[SampleRow]:
    stacks = doc.get("stacks") or []
    try:
        return [
            SampleRow(str(task), str(subtask), _count(bucket), _stack(stack, stacks), max(1, _count(count)), origin,
                      _state(rest), _role(rest))
            for task, subtask, bucket, stack, count, *rest in doc.get("samples") or []
        ]
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadInputError(f"malformed stack samples in a crystalperf Flink metrics file ({exc})") from None


def _io(doc: dict[str, Any]) -> list[IoSample]:
    try:
        return [IoSample.model_validate(row) for row in doc.get("io") or []]
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise BadInputError(f"malformed I/O counters in a crystalperf Flink metrics file ({exc})") from None


def load_part(path: Path) -> Part:
    """One part as the reporter wrote it; :class:`BadInputError` naming the file when it is not one."""
    path = Path(path)
    doc = _document(path)
    try:
        start = _time(doc["start"])
        origin = doc.get("sample_origin")
        own_origin = _time(origin) if origin is not None else start
        scopes = _scopes(doc)
        samples = _samples(doc, own_origin)
        io = _io(doc)
    except BadInputError as exc:
        raise BadInputError(exc.problem, path) from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise BadInputError(f"malformed crystalperf Flink metrics file ({exc})", path) from None
    try:
        thread_cpu, fetcher_cpu = _thread_cpu(doc.get("thread_cpu") or [])
        process_cpu = _number(doc["process_cpu_s"]) if "process_cpu_s" in doc else None
        if process_cpu is not None and not 0 <= process_cpu <= MAX_TIME:
            raise ValueError(f"process_cpu_s {process_cpu} is out of range")
        cpu_count = min(_count(doc.get("cpu_count") or 0), 2**20)
        classpath = [str(entry) for entry in doc.get("classpath") or []]
        kinds = _thread_kinds(doc.get("thread_kinds_cpu_s")) if process_cpu is not None else None
        faults = _process_faults(doc.get("process_faults"))
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise BadInputError(f"malformed CPU times in a crystalperf Flink metrics file ({exc})", path) from None
    try:
        hook = [HookProcess.model_validate(_hook_document(doc["hook"]))] if doc.get("hook") is not None else []
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"malformed hook cost in a crystalperf Flink metrics file ({exc})", path) from None
    try:
        collector = garbage_collector(doc.get("collector"), cpu_count)
        heap = heap_use(doc.get("heap"))
        if heap:
            collector = {**(collector or {}), **heap}
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadInputError(f"malformed garbage collector in a crystalperf Flink metrics file ({exc})", path) from None
    try:
        cluster = _cluster(doc.get("cluster"))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise BadInputError(f"malformed cluster in a crystalperf Flink metrics file ({exc})", path) from None
    taskmanagers = {s.taskmanager for s in scopes if s.task_name and s.taskmanager}
    if taskmanagers:
        # A JobManager that ran subtasks is a mini cluster's (local execution), which sizes its slots to the job
        # it runs: its gauges say nothing of what a larger parallelism would find.
        cluster = None
    try:
        return Part(
            path=path,
            job_id=str(doc.get("job_id", "")),
            job_name=str(doc.get("job_name", "")),
            start=start,
            end=max(start, _time(doc["end"])),
            complete=bool(doc.get("complete", True)),
            written=_time(doc.get("written", 0)),
            scopes=scopes,
            thread_cpu=thread_cpu,
            fetcher_cpu=fetcher_cpu,
            process_cpu_s=process_cpu,
            cpu_count=cpu_count,
            dropped_metrics=_count(doc.get("dropped_metrics") or 0),
            dropped_samples=_count(doc.get("dropped_samples") or 0),
            samples=samples,
            sample_origin=own_origin if origin is not None else None,
            sample_bucket_s=_positive(doc.get("sample_bucket_s", 1.0)),
            sample_interval_s=_positive(doc.get("sample_interval_s", 0.1)),
            classpath=classpath,
            io=io,
            thread_kinds=kinds,
            taskmanager_kinds={next(iter(taskmanagers)): kinds} if kinds is not None and len(taskmanagers) == 1 else {},
            taskmanager_collectors=(
                {next(iter(taskmanagers)): collector} if collector is not None and len(taskmanagers) == 1 else {}),
            taskmanager_faults=(
                {next(iter(taskmanagers)): faults} if faults is not None and kinds is not None and len(taskmanagers) == 1
                else {}),
            hook=hook,
            cluster=cluster,
            status=_job_status(doc.get("status")),
            failure=str(doc.get("failure") or "")[:MAX_FAILURE_CHARS],
            cut=str(doc.get("cut") or "")[:MAX_FAILURE_CHARS],
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise BadInputError(f"malformed crystalperf Flink metrics file ({exc})", path) from None


def _job_status(value: Any) -> str:
    """A part's ``status``: one of Flink's terminal job states, else "" (not recorded, or a state we do not know)."""
    return value if isinstance(value, str) and value in JOB_STATES else ""


def _cluster(value: Any) -> Cluster | None:
    """A part's ``cluster``; None when absent or when the JobManager had no TaskManager registered yet."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("cluster is not an object")
    slots, taskmanagers = _count(value["task_slots"]), _count(value["taskmanagers"])
    return Cluster(slots, taskmanagers) if slots and taskmanagers else None


def _hook_document(value: Any) -> dict[str, Any]:
    """A part's ``hook`` as a trace ``HookProcess`` document: its CPU seconds are the sum of its parts."""
    if not isinstance(value, dict) or not isinstance(value.get("parts", {}), dict):
        raise ValueError("hook is not an object with parts")
    parts = {str(k): max(0.0, _time(v)) for k, v in value.get("parts", {}).items()}
    return {**value, "parts": {k: v for k, v in parts.items() if v > 0}, "cpu_s": sum(parts.values())}


def _thread_cpu(rows: Any) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """A part's ``thread_cpu`` rows, ``[task name, subtask, CPU-s]`` with (version 7) the fetcher threads' part of
    it fourth: the CPU seconds per subtask, and those of its fetchers where the row has them (at most its total)."""
    if not isinstance(rows, list):
        raise ValueError("thread_cpu is not a list")
    total: dict[tuple[str, str], float] = {}
    fetchers: dict[tuple[str, str], float] = {}
    for row in rows:
        if not isinstance(row, list) or len(row) not in (3, 4):
            raise ValueError(f"thread_cpu row {row!r} is not [task, subtask, seconds(, fetcher seconds)]")
        key = (str(row[0]), str(row[1]))
        total[key] = max(0.0, _time(row[2]))
        if len(row) == 4:
            fetchers[key] = min(total[key], max(0.0, _time(row[3])))
    return total, fetchers


def _thread_kinds(value: Any) -> dict[str, float] | None:
    """A part's CPU seconds by thread kind: every kind of :data:`THREAD_KINDS` (a kind missing is 0, an unknown
    one is ignored); None when the part has none."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("thread_kinds_cpu_s is not an object")
    return {kind: max(0.0, _time(value.get(kind, 0.0))) for kind in THREAD_KINDS}


def _process_faults(value: Any) -> dict[str, float] | None:
    """A part's ``process_faults`` (version 11), ``[minor faults, kernel seconds, the task threads' kernel
    seconds]`` (the third may be missing), as trace.ThreadCpu fields; None when the part has none."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) not in (2, 3):
        raise ValueError("process_faults is not [minor faults, kernel seconds, task threads' kernel seconds]")
    faults = {"minor_faults": _count(value[0]), "kernel": max(0.0, _time(value[1]))}
    if len(value) == 3:
        faults["task_kernel"] = max(0.0, _time(value[2]))
    return faults


def garbage_collector(value: Any, processors: int) -> dict[str, Any] | None:
    """A part's ``collector`` (``{"names": [bean names], "option": "-XX:+UseG1GC" or null}``) as
    ``trace.GarbageCollector`` fields; None when the part has none. Bean names of no family this version knows give
    family None."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("names", []), list):
        raise ValueError("collector is not an object with a list of names")
    families = {family for name in value.get("names", [])[:16] for prefix, family in _COLLECTOR_BEANS
                if str(name).startswith(prefix)}
    option = value.get("option")
    return {"family": families.pop() if len(families) == 1 else None,
            "option": option if isinstance(option, str) and _COLLECTOR_OPTION.fullmatch(option) else None,
            "processors": processors or None}


_HEAP_BYTES = ("max_bytes", "live_bytes", "live_max_bytes")
_HEAP_COUNTS = ("old_collections", "young_collections")
_HEAP_TIMES = ("old_collection_s", "young_collection_s")


def heap_use(value: Any) -> dict[str, Any]:
    """A part's ``heap`` (version 9) as ``trace.GarbageCollector`` fields (``max_bytes`` becomes
    ``heap_max_bytes``); figures the part leaves out stay out. ValueError when it is malformed."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("heap is not an object")
    found: dict[str, Any] = {}
    for key in (*_HEAP_BYTES, *_HEAP_COUNTS, *_HEAP_TIMES):
        if value.get(key) is None:
            continue
        if key in _HEAP_TIMES:
            number: float = _time(value[key])
            if number < 0:
                raise ValueError(f"heap {key} {value[key]!r} is negative")
        else:
            bound = MAX_INDEX if key in _HEAP_COUNTS else 2**63
            if isinstance(value[key], bool) or not isinstance(value[key], int) or not 0 <= value[key] <= bound:
                raise ValueError(f"heap {key} {value[key]!r} is not a count of bytes or collections")
            number = value[key]
        found["heap_max_bytes" if key == "max_bytes" else key] = number
    if found.get("heap_max_bytes") == 0:
        del found["heap_max_bytes"]
    return found


def _positive(value: Any) -> float:
    seconds = _time(value)
    if seconds < 1e-6:
        raise ValueError(f"{value!r} is not a positive period")
    return seconds


def sibling_parts(path: Path, job_id: str) -> list[Path]:
    """The other parts of the same job in path's directory, in name order."""
    if not job_id:
        return []
    return sorted(
        p for p in path.parent.glob(f"crystalperf-flink-{job_id}.*.json") if p.resolve() != path.resolve()
    )


def _add(merged: Part, part: Part) -> None:
    merged.scopes.extend(part.scopes)
    merged.start = min(merged.start, part.start)
    merged.end = max(merged.end, part.end)
    merged.dropped_metrics += part.dropped_metrics
    merged.dropped_samples += part.dropped_samples
    merged.thread_cpu.update(part.thread_cpu)
    merged.fetcher_cpu.update(part.fetcher_cpu)
    merged.cluster = merged.cluster or part.cluster  # the JobManager's part has it
    merged.status = merged.status or part.status  # so has this
    merged.failure = merged.failure or part.failure
    merged.cut = merged.cut or part.cut
    if part.process_cpu_s is not None:
        merged.process_cpu_s = (merged.process_cpu_s or 0.0) + part.process_cpu_s
    for taskmanager, kinds in part.taskmanager_kinds.items():
        # two processes naming one TaskManager (a restart): its figures are not one process's any more
        merged.taskmanager_kinds[taskmanager] = (
            {k: merged.taskmanager_kinds[taskmanager][k] + kinds[k] for k in THREAD_KINDS}
            if taskmanager in merged.taskmanager_kinds else dict(kinds))
    for taskmanager, collector in part.taskmanager_collectors.items():
        merged.taskmanager_collectors.setdefault(taskmanager, collector)
    for taskmanager, faults in part.taskmanager_faults.items():
        known_faults = merged.taskmanager_faults.get(taskmanager)
        merged.taskmanager_faults[taskmanager] = (
            {k: known_faults[k] + faults[k] for k in faults if k in known_faults} if known_faults is not None
            else dict(faults))
    merged.samples.extend(part.samples)
    # every process lists the same Flink jars; the order of the first part is kept
    known = set(merged.classpath)
    merged.classpath.extend(entry for entry in dict.fromkeys(part.classpath) if entry not in known)
    merged.io.extend(part.io)
    merged.hook.extend(part.hook)
    merged.parts += 1


def merge_parts(first: Part, others: Iterable[Path]) -> Part:
    """Join the parts that the JobManager and each TaskManager wrote for the same job, starting from
    ``first`` (its job name and sampling settings are kept)."""
    merged = replace(first, scopes=list(first.scopes), thread_cpu=dict(first.thread_cpu),
                     fetcher_cpu=dict(first.fetcher_cpu),
                     samples=list(first.samples), classpath=list(first.classpath), io=list(first.io), parts=1,
                     hook=list(first.hook),
                     thread_kinds=dict(first.thread_kinds) if first.thread_kinds is not None else None,
                     taskmanager_kinds={tm: dict(kinds) for tm, kinds in first.taskmanager_kinds.items()},
                     taskmanager_collectors=dict(first.taskmanager_collectors),
                     taskmanager_faults={tm: dict(faults) for tm, faults in first.taskmanager_faults.items()})
    parts = [first]
    for path in others:
        part = load_part(path)
        _add(merged, part)
        parts.append(part)
    merged.cpu_count = job_cpus(parts)
    # the split stands for the merged process time only when every part with a process time has one
    timed = [p for p in parts if p.process_cpu_s is not None]
    merged.thread_kinds = (
        {k: sum(p.thread_kinds[k] for p in timed if p.thread_kinds is not None) for k in THREAD_KINDS}
        if timed and all(p.thread_kinds is not None for p in timed) else None)
    return merged


def job_cpus(parts: Sequence[Part]) -> int:
    """CPUs the job's processes could use: each TaskManager host's own, added up over the hosts (TaskManagers of
    one host share its CPUs, hosts do not); the JobManager's part (no task scopes) counts only alone. The
    machine limit of the streaming model divides all the processes' CPU time by it."""
    per_host: dict[str, int] = {}
    for part in parts:
        for host in {s.host for s in part.scopes if s.task_name and s.host}:
            per_host[host] = max(per_host.get(host, 0), part.cpu_count)
    return sum(per_host.values()) or max((p.cpu_count for p in parts), default=0)


def load_job(path: Path) -> Part:
    """The part at path merged with the job's other parts in its directory (one per cluster process)."""
    first = load_part(Path(path))
    return merge_parts(first, sibling_parts(first.path, first.job_id))


_PLANNER_ID = re.compile(r"\[(\d+)\]")


def relative_ids(names: Iterable[str]) -> dict[str, str]:
    """Name -> name with the SQL planner's ``[n]`` operator ids made relative to the smallest one.

    The planner numbers operators with a counter that keeps running across translations, so the plan
    recorded by ``explain_sql`` says ``Calc[8]`` where the job that runs later says ``Calc[14]``.
    """
    names = set(names)
    ids = [int(m) for name in names for m in _PLANNER_ID.findall(name)]
    base = min(ids, default=0)
    return {name: _PLANNER_ID.sub(lambda m: f"[{int(m.group(1)) - base}]", name) for name in names}


def _plan_nodes(candidate: Path) -> list[PlanNode] | None:
    """The nodes of one recorded plan file, as it names them; None when it holds none."""
    doc = _read_json(candidate)
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        return None
    nodes = []
    for node in doc["plan"]["nodes"] or []:
        edges = tuple(
            PlanEdge(str(pred["id"]), str(pred.get("ship_strategy", "")))
            for pred in node.get("predecessors") or []
            if pred.get("id") is not None
        )
        nodes.append(PlanNode(str(node["id"]), str(node["type"]), edges))
    return nodes or None


def find_plan(directory: Path, operator_names: set[str]) -> list[PlanNode] | None:
    """The nodes of the newest recorded plan in directory that names every operator of the job, renamed
    to the job's names; None when no plan there does."""
    wanted = {relative: name for name, relative in relative_ids(operator_names).items()}
    for candidate in sorted(directory.glob(f"{PLAN_PREFIX}*.json"), key=lambda p: -p.stat().st_mtime):
        try:
            nodes = _plan_nodes(candidate)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, BadInputError):
            log.warning("crystalperf: ignoring unreadable Flink plan %s", candidate)
            continue
        renamed = relative_ids(n.name for n in nodes or [])
        if nodes and set(wanted) <= set(renamed.values()):
            return [PlanNode(n.id, wanted.get(renamed[n.name], n.name), n.predecessors) for n in nodes]
    return None


@dataclass(frozen=True)
class _PartStatus:
    job_id: str
    complete: bool
    end: float
    written: float


def _status(path: Path) -> _PartStatus | None:
    try:
        doc = _read_json(path)
        return _PartStatus(str(doc.get("job_id", path.name)), bool(doc.get("complete", True)),
                           float(doc.get("end", 0)), float(doc.get("written", 0)))
    except (OSError, ValueError, TypeError, AttributeError, OverflowError, RecursionError, BadInputError):
        return None  # being replaced right now


def parts_ready(found: list[Path]) -> bool:
    """Every job has a complete part (no metric of it left in that process: the job ended there) and each
    other part (a TaskManager's, flushed periodically) was written after that end, so it holds final values."""
    by_job: dict[str, list[_PartStatus]] = defaultdict(list)
    for path in found:
        status = _status(path)
        if status is None:
            return False
        by_job[status.job_id].append(status)
    for statuses in by_job.values():
        ends = [s.end for s in statuses if s.complete]
        if not ends or any(s.written < max(ends) for s in statuses if not s.complete):
            return False
    return True


def part_files(out_dir: Path, job_id: str | None = None) -> list[Path]:
    """The reporter's parts in out_dir (of one job, or of all), in name order."""
    pattern = f"crystalperf-flink-{job_id or '*'}.*.json"
    return sorted(p for p in Path(out_dir).glob(pattern) if not p.name.startswith(PLAN_PREFIX))


def wait_for_metrics(
    out_dir: str | Path,
    job_id: str | None = None,
    timeout_s: float = 30.0,
    parts: int = 1,
) -> list[Path]:
    """The reporter's files in out_dir (one per job and process), waiting until at least ``parts`` are
    there and hold the job's final values: the reporter writes a part when the job's metrics go away in
    its process, shortly after the job ends, and a TaskManager flushes its part every ``flush.interval.ms``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = part_files(Path(out_dir), job_id)
        if (len(found) >= parts and parts_ready(found)) or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)
