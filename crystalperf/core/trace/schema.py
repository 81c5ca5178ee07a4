"""The versioned trace schema every hook writes and every analysis reads.

One document per application (a Spark application, a Keras ``fit``, a Flink job). Times are seconds
since the Unix epoch (floats), durations are seconds, sizes are bytes, bandwidths are bytes per second.

Stack samples are stored compactly: frames and stacks are interned once, and the sample table is
columnar (one row per operation/task key, time bucket and stack, with a count), so a job with a million
samples stays a few megabytes and validates fast.

Which versions a reader accepts: ``version``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crystalperf.core.trace.names import *  # noqa: F403  (one namespace: tr.METRIC_RUN_TIME, tr.THREAD_STATES...)
from crystalperf.core.trace.names import THREAD_STATES
from crystalperf.core.trace.version import (
    SCHEMA_ID,
    SCHEMA_MAJOR,
    SCHEMA_VERSION,
    major_version,
    shown_version,
)

TRACE_FILENAMES = ("crystalperf-trace.json.gz", "crystalperf-trace.json")

Framework = Literal["spark", "tensorflow", "flink", "other"]
Language = Literal["java", "scala", "python", "cpp", "native", "unknown"]

class _Model(BaseModel):
    # Unknown fields are kept (not rejected) so that a newer minor version still loads.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


# Bounds that keep every sum and product of the analysis finite and every per-slot structure small; real
# jobs are far inside them (times: epoch seconds until the year 33658; quantities: 1e21, above 2**64 bytes).
MAX_TIME = 1e12
MAX_QUANTITY = 1e21
MAX_SLOTS = 2**20  # cores of an executor, task slots of a job, CPUs of a machine
MAX_INDEX = 2**53  # ids and indices stay exact in a double


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    if abs(value) > MAX_TIME:
        raise ValueError(f"must be a time in seconds between -{MAX_TIME:.0e} and {MAX_TIME:.0e}")
    return value


# The same bounds as _finite and _finite_values, checked inside pydantic's core rather than by a Python call per
# value: the fields of tasks and operations, of which a trace of 20,000 operations brings 200,000.
FiniteTime = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_TIME, le=MAX_TIME)]
FiniteQuantity = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_QUANTITY, le=MAX_QUANTITY)]


def _optional_time(value: float | None) -> float | None:
    return None if value is None else _finite(value)


def _finite_values(values: dict[str, float]) -> dict[str, float]:
    for name, value in values.items():
        if not math.isfinite(value) or abs(value) > MAX_QUANTITY:
            raise ValueError(f"{name!r} must be a finite number of at most {MAX_QUANTITY:.0e} in size")
    return values


class Device(_Model):
    """A compute device available to the job."""

    kind: Literal["cpu", "gpu", "tpu", "other"] = "cpu"
    name: str | None = None
    count: int = Field(1, ge=1, le=MAX_SLOTS)
    memory_bytes: int | None = Field(None, ge=0, le=2**63)


class ThreadCpu(_Model):
    """CPU seconds a process used while the job ran, by the kind of thread (1.6), so that what scales with the
    records the job processes can be told from what the process pays for running at all (the streaming model counts
    all but other as work, ``core.predict.streaming.WORK_KINDS``); the kinds add up to the process's CPU time."""

    task: float = Field(0.0, ge=0, le=MAX_TIME, description="the job's task threads (Flink: subtask/mailbox threads)")
    network: float = Field(0.0, ge=0, le=MAX_TIME, description="the threads that move the job's data (Flink: netty)")
    gc: float = Field(0.0, ge=0, le=MAX_TIME, description="the garbage collector's threads (since 1.7 those that "
                      "work while the job is stopped, where the hook tells them apart: gc_concurrent)")
    jit: float = Field(0.0, ge=0, le=MAX_TIME, description="the JIT compilers' threads")
    other: float = Field(0.0, ge=0, le=MAX_TIME, description="the rest: timers, heartbeats, RPC")
    gc_concurrent: float = Field(0.0, ge=0, le=MAX_TIME, description="(1.7) the collector's threads that work beside "
                                 "the job (G1's refinement and marking)")
    hook: float = Field(0.0, ge=0, le=MAX_TIME, description="(1.9) crystalperf's own threads (earlier: in other)")
    # Cuts across the kinds: the whole process's (a fresh JVM faults on each page of heap it first touches), the tasks'
    kernel: float | None = Field(None, ge=0, le=MAX_TIME, description="(1.13) its CPU seconds in the kernel")
    minor_faults: int | None = Field(None, ge=0, le=MAX_INDEX, description="(1.13) page faults memory served")
    task_kernel: float | None = Field(None, ge=0, le=MAX_TIME, description="(1.13) the task threads' kernel seconds")

    @property
    def total(self) -> float:
        return self.task + self.network + self.gc + self.jit + self.other + self.gc_concurrent + self.hook


# The collector families a JVM may run, by the names of its collector beans (java.lang.management).
GC_FAMILIES = ("serial", "parallel", "g1", "z", "shenandoah", "cms")


class GarbageCollector(_Model):
    """The garbage collector a JVM ran (1.7): what a change of its CPUs may change, where the JVM chose it."""

    family: str | None = Field(None, max_length=32, description="the collector, one of GC_FAMILIES (another name: "
                               "one a later version knows); None: unknown")
    option: str | None = Field(
        None, max_length=64, description="the command-line option that chose it (-XX:+UseG1GC...); None: the JVM's "
        "ergonomics did, which pick the serial collector on fewer than two processors")
    processors: int | None = Field(None, ge=1, le=MAX_SLOTS, description="the processors the JVM saw")
    # (1.11) the heap the process's tasks shared over the job: its size, the old generation's live data after its
    # collections (their mean and most; None: not collected, or no generations), each generation's collections
    heap_max_bytes: int | None = Field(None, ge=1, le=2**63)
    live_bytes: int | None = Field(None, ge=0, le=2**63)
    live_max_bytes: int | None = Field(None, ge=0, le=2**63)
    old_collections: int | None = Field(None, ge=0, le=MAX_INDEX, description="full or mixed collections")
    old_collection_s: float | None = Field(None, ge=0, le=MAX_TIME)
    young_collections: int | None = Field(None, ge=0, le=MAX_INDEX)
    young_collection_s: float | None = Field(None, ge=0, le=MAX_TIME)


class Executor(_Model):
    """A process that runs tasks: a Spark executor, a Flink TaskManager, a TF worker."""

    id: str
    host: str | None = None
    cores: int | None = Field(None, ge=1, le=MAX_SLOTS, description="task slots (Spark cores, Flink slots, TF threads)")
    memory_bytes: int | None = Field(None, ge=0, le=2**63)
    added: float | None = None
    removed: float | None = None
    thread_cpu: ThreadCpu | None = Field(None, description="(1.6) the process's CPU seconds over the job by "
                                         "thread kind, where the hook measured them")
    garbage_collector: GarbageCollector | None = Field(None, description="(1.7) the JVM's collector, where known")

    _check_times = field_validator("added", "removed")(lambda v: _optional_time(v))


class Environment(_Model):
    """What the job ran on. Every field is optional: hooks fill in what their framework exposes."""

    hosts: list[str] = Field(default_factory=list)
    executors: list[Executor] = Field(default_factory=list)
    cores_per_executor: int | None = Field(None, ge=1, le=MAX_SLOTS)
    total_slots: int | None = Field(None, ge=1, le=MAX_SLOTS, description="tasks that can run at once in the whole job")
    cpu_count: int | None = Field(None, ge=1, le=MAX_SLOTS, description="logical CPUs of the machine(s) the tasks ran on")
    memory_bytes: int | None = Field(None, ge=0, le=2**63, description="memory available for the job's data")
    devices: list[Device] = Field(default_factory=list)
    network_bandwidth: float | None = Field(None, ge=1, le=MAX_QUANTITY, description="bytes/s between hosts")
    disk_bandwidth: float | None = Field(None, ge=1, le=MAX_QUANTITY, description="bytes/s of the storage the job reads")
    cpu_speed: float = Field(1.0, ge=1e-6, le=1e6, description="relative CPU speed; what-if ratios apply to it")
    classpath: list[str] = Field(default_factory=list, description="jars/dirs of the job (bytecode fallback)")
    source_roots: list[str] = Field(default_factory=list, description="user-configured source dirs/jars")
    properties: dict[str, str] = Field(default_factory=dict, description="framework configuration")
    cluster_slots: int | None = Field(None, ge=1, le=MAX_SLOTS, description="(1.10) task slots registered with "
                                      "the cluster when the job ran, the job's or not (Flink: taskSlotsTotal)")
    cluster_workers: int | None = Field(None, ge=1, le=MAX_SLOTS, description="(1.10) worker processes registered "
                                        "then, the job's or not (Flink: TaskManagers, numRegisteredTaskManagers)")
    scaling: list[str] = Field(default_factory=list, description="what-if keys that change how many tasks run at "
        "once, e.g. cores and executors, or parallelism for pipelined operators (empty: as the integration that "
        "wrote the trace declares)",
    )


class Task(_Model):
    """One unit of parallel work inside an operation (a Spark task, a Flink subtask...)."""

    id: str
    index: int | None = Field(None, ge=-MAX_INDEX, le=MAX_INDEX, description="partition / subtask index")
    attempt: int = Field(0, ge=0, le=MAX_INDEX)
    executor: str | None = None
    host: str | None = None
    slot: int | None = Field(None, ge=-MAX_INDEX, le=MAX_INDEX, description="slot/thread the task ran on, when known")
    start: FiniteTime
    end: FiniteTime
    status: Literal["success", "failed", "killed", "unknown"] = "success"
    metrics: dict[str, FiniteQuantity] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _end_after_start(self) -> Task:
        if self.end < self.start:
            raise ValueError(f"task {self.id}: end {self.end} is before start {self.start}")
        return self

    @property
    def duration(self) -> float:
        return self.end - self.start


class Operation(_Model):
    """A node of the job's DAG: a Spark job or stage, a TF op, a Flink operator (chain).

    ``parents`` name operations of the same level (siblings) that must finish before this one starts.
    ``children`` is the nested sub-DAG (Spark: job -> stages); ``tasks`` the parallel units it ran as.
    """

    id: str
    name: str
    kind: str = Field("operation", description="job, stage, op, operator, input, step... (framework's word)")
    parents: list[str] = Field(default_factory=list)
    start: FiniteTime
    end: FiniteTime
    status: Literal["success", "failed", "killed", "skipped", "running", "unknown"] = "success"
    children: list[Operation] = Field(default_factory=list)
    tasks: list[Task] = Field(default_factory=list)
    parallelism: int | None = Field(None, ge=1, le=MAX_INDEX, description="declared parallelism (tasks/subtasks/threads)")
    task_count: int | None = Field(
        None, ge=0, le=2**40,
        description="tasks the operation ran (1.4). When larger than len(tasks), the hook bounded its memory: "
        "tasks is a uniform sample of them and metrics holds the exact totals over all of them")
    metrics: dict[str, FiniteQuantity] = Field(default_factory=dict)
    attributes: dict[str, str] = Field(default_factory=dict, description="call site, op type, plan...")

    @model_validator(mode="after")
    def _consistent(self) -> Operation:
        if self.end < self.start:
            raise ValueError(f"operation {self.id}: end {self.end} is before start {self.start}")
        if self.id in self.parents:
            raise ValueError(f"operation {self.id} lists itself as a parent")
        ids = [c.id for c in self.children]
        if len(ids) != len(set(ids)):
            raise ValueError(f"operation {self.id}: duplicate child ids")
        return self

    @property
    def duration(self) -> float:
        return self.end - self.start


class Frame(_Model):
    """One interned stack frame. ``name`` is qualified: ``pkg.Class.method`` or ``module.function``."""

    name: str
    file: str | None = None
    line: int | None = None
    language: Language = "unknown"
    module: str | None = Field(None, description="jar, shared library or Python module the frame came from")


class SampleKey(_Model):
    """Whose samples a row counts: an operation, and optionally one of its tasks and a thread role."""

    operation: str
    task: str | None = None
    thread: str | None = Field(None, description="e.g. 'python-worker' for PySpark's Python side")


class EmbeddedFunction(_Model):
    """A function as the job-end analysis located and classified it (code and doc bounded in length)."""

    qualified_name: str
    language: str = "unknown"
    code: str = ""
    doc: str = ""
    origin: str = "source"
    location: str | None = None
    vector: list[float] = Field(min_length=3, max_length=3, description="<cpu, disk, network> it was given")

    @field_validator("vector")
    @classmethod
    def _probabilities(cls, value: list[float]) -> list[float]:
        if any(not math.isfinite(v) or v < 0 for v in value) or sum(value) <= 0:
            raise ValueError("a function's vector must be non-negative finite numbers, not all zero")
        return value


class EmbeddedResolution(_Model):
    """What the analysis at job end used for the sampled stacks, so that the report regenerates the same on
    a machine without the framework, its jars or the job's files: per interned stack, the function it was
    attributed to (an index into ``functions``), ``-1`` for a stack left out by the size bounds (located
    anew), ``-2`` for a stack that resolved to no function."""

    classifier: str = Field(description="the classifier whose vectors these are")
    functions: list[EmbeddedFunction] = Field(default_factory=list)
    stack_function: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _indices(self) -> EmbeddedResolution:
        n = len(self.functions)
        if any(i < -2 or i >= n for i in self.stack_function):
            raise ValueError("a stack refers to an embedded function that does not exist")
        return self


class StackSamples(_Model):
    """Aggregated call-stack samples.

    ``stacks[i]`` lists frame indices from the *top* (innermost call) down to the thread's entry point.
    Row ``r`` of the table says: ``count[r]`` samples of stack ``stack[r]`` were taken for key
    ``key[r]`` during bucket ``bucket[r]``, i.e. between ``origin + bucket*bucket_s`` and the next bucket.
    """

    interval_s: float = Field(0.1, ge=1e-9, le=MAX_TIME, description="sampling period")
    bucket_s: float = Field(1.0, ge=1e-9, le=MAX_TIME,
                            description="width of an aggregation bucket (a sampling interval of §4.1)")
    origin: float = Field(description="time of bucket 0")
    frames: list[Frame] = Field(default_factory=list)
    stacks: list[list[int]] = Field(default_factory=list)
    keys: list[SampleKey] = Field(default_factory=list)
    key: list[int] = Field(default_factory=list)
    bucket: list[int] = Field(default_factory=list)
    stack: list[int] = Field(default_factory=list)
    count: list[int] = Field(default_factory=list)
    dropped: int = Field(0, ge=0, description="samples that lost their stack, task or time detail because a memory "
                         "bound was reached: they are still counted, under an '[other]' stack, task or row")
    resolution: EmbeddedResolution | None = Field(
        None, description="the located functions and vectors the job-end analysis used (since 1.1)")
    states: list[str] = Field(
        default_factory=list,
        description="per stack (parallel to stacks; empty: unknown): the thread's state when it was sampled, "
        "runnable, blocked, waiting, timed_waiting or '' (since 1.2); stacks differing only in state are "
        "interned apart")

    _check_origin = field_validator("origin")(_finite)

    def state_of(self, stack: int) -> str:
        return self.states[stack] if self.states else ""

    @model_validator(mode="after")
    def _columns_consistent(self) -> StackSamples:
        n = len(self.key)
        if not (len(self.bucket) == len(self.stack) == len(self.count) == n):
            raise ValueError("sample columns key/bucket/stack/count differ in length")
        nframes, nstacks, nkeys = len(self.frames), len(self.stacks), len(self.keys)
        for i, s in enumerate(self.stacks):
            if any(f < 0 or f >= nframes for f in s):
                raise ValueError(f"stack {i} refers to a frame that does not exist")
        if n:
            if min(self.key) < 0 or max(self.key) >= nkeys:
                raise ValueError("a sample row refers to a key that does not exist")
            if min(self.stack) < 0 or max(self.stack) >= nstacks:
                raise ValueError("a sample row refers to a stack that does not exist")
            if min(self.count) < 1 or max(self.count) > MAX_INDEX:
                raise ValueError(f"sample counts must be positive and at most {MAX_INDEX}")
            if min(self.bucket) < 0 or max(self.bucket) > MAX_INDEX:
                raise ValueError(f"sample buckets must be non-negative and at most {MAX_INDEX}")
        if self.states and len(self.states) != nstacks:
            raise ValueError("states must give one thread state per stack")
        unknown = set(self.states) - set(THREAD_STATES)
        if unknown:
            raise ValueError(f"unknown thread state {sorted(unknown)[0]!r} (known: {', '.join(THREAD_STATES[1:])})")
        if self.resolution is not None and len(self.resolution.stack_function) != nstacks:
            raise ValueError("the embedded resolution does not cover every stack")
        return self

    def rows(self) -> Iterator[tuple[int, int, int, int]]:
        """(key, bucket, stack, count) per row."""
        return zip(self.key, self.bucket, self.stack, self.count, strict=True)

    @property
    def total(self) -> int:
        return sum(self.count)


class Application(_Model):
    framework: Framework
    framework_version: str | None = None
    id: str
    name: str = ""
    attempt: str | None = None
    start: float
    end: float
    status: Literal["succeeded", "failed", "cancelled", "unknown"] = "unknown"
    output_dir: str | None = None
    user: str | None = None

    _check_times = field_validator("start", "end")(_finite)

    @model_validator(mode="after")
    def _end_after_start(self) -> Application:
        if self.end < self.start:
            raise ValueError(f"application end {self.end} is before start {self.start}")
        return self

    @property
    def duration(self) -> float:
        return self.end - self.start


MAX_PLAN_NODES = 20_000  # the hooks keep 2,000


class SqlPlanNode(_Model):
    """One node of a SQL execution's physical plan (1.5), in pre-order: ``id`` is its index in the query's
    node list, ``parent`` the index of the node above it."""

    id: int = Field(ge=0, lt=MAX_PLAN_NODES)
    name: str = Field(max_length=1000, description="Spark's node name: HashAggregate, Exchange, WholeStageCodegen (3)...")
    detail: str = Field("", max_length=10_000, description="the node's one-line description (columns, keys)")
    parent: int | None = Field(None, ge=0, lt=MAX_PLAN_NODES)
    stages: list[int] = Field(default_factory=list, max_length=10_000,
                              description="stages whose tasks updated the node's metrics")


class SqlQuery(_Model):
    """A SQL execution (a DataFrame action or a SQL statement) and its last physical plan (1.5); the jobs it ran
    carry its ``sql_execution_id`` attribute."""

    execution_id: str = Field(max_length=100)
    description: str = Field("", max_length=10_000)
    clipped: bool = Field(False, description="the hook kept only the first nodes of a very large plan")
    nodes: list[SqlPlanNode] = Field(default_factory=list, max_length=MAX_PLAN_NODES)

    @model_validator(mode="after")
    def _tree(self) -> SqlQuery:
        for index, node in enumerate(self.nodes):
            if node.id != index:
                raise ValueError(f"sql_queries {self.execution_id}: node {index} has id {node.id} (ids are the node's index)")
            if node.parent is not None and node.parent >= index:
                raise ValueError(f"sql_queries {self.execution_id}: node {index}'s parent {node.parent} does not come before it")
        return self


class Streaming(_Model):
    """Streaming jobs (Flink): the runtime we model is the latency of a record batch (paper §7.1)."""

    latency_s: float | None = Field(None, ge=0, le=MAX_TIME, description="observed end-to-end latency of a record batch")
    input_rate: float | None = Field(None, ge=0, le=MAX_QUANTITY, description="records/s the sources ingested")
    throughput: float | None = Field(None, ge=0, le=MAX_QUANTITY, description="records/s the sinks emitted")


# The kernel's byte counters are 64-bit; a limit is at least a byte a second (rates are divided by it).
IO_COUNTER_MAX = float(2**64)


class IoSample(_Model):
    """Counters of the job's processes on one source (a driver, a TaskManager, a Python process), read during the
    run. Counters are cumulative since that source's first sample (which reads 0), so rates come from differences
    and a lost sample costs nothing. The analysis derives from them the bandwidth the job saw and the cores it
    shared (``crystalperf.core.attribution.observed``), which what-ifs scale from."""

    t: float = Field(description="when the counters were read (epoch seconds)")
    source: str = Field("", description="whose counters: e.g. driver, taskmanager:<pid>, python:<pid>")
    host: str | None = None
    storage_read_bytes: float | None = Field(
        None, ge=0, le=IO_COUNTER_MAX, description="bytes read from storage devices (read_bytes of /proc/<pid>/io, the process and "
        "its descendants; page-cache hits excluded)")
    storage_write_bytes: float | None = Field(None, ge=0, le=IO_COUNTER_MAX, description="bytes written to storage devices")
    network_rx_bytes: float | None = Field(
        None, ge=0, le=IO_COUNTER_MAX, description="bytes received on the non-loopback interfaces of the process's network "
        "namespace (/proc/<pid>/net/dev: namespace-wide, not per process)")
    network_tx_bytes: float | None = Field(None, ge=0, le=IO_COUNTER_MAX, description="bytes sent on those interfaces")
    disk_read_limit: float | None = Field(
        None, ge=1, le=IO_COUNTER_MAX, description="bytes/s: the strictest cgroup read limit in force on the process (blkio/io.max)")
    disk_write_limit: float | None = Field(None, ge=1, le=IO_COUNTER_MAX, description="bytes/s: the strictest cgroup write limit")
    process_cpu_s: float | None = Field(
        None, ge=0, le=MAX_TIME, description="(1.8) CPU seconds (user + system) the process and its descendants used: "
        "task threads and everything else (collector, compilers, shuffle, the hook)")
    host_cpu_busy_s: float | None = Field(
        None, ge=0, le=MAX_TIME, description="(1.8) CPU seconds the whole host's CPUs were busy, every process's "
        "(/proc/stat: all but idle and iowait, summed over the CPUs)")
    host_cpu_s: float | None = Field(
        None, ge=0, le=MAX_TIME, description="(1.8) CPU seconds the host's CPUs had, busy or not (its CPUs times the "
        "time)")
    host_cpus: int | None = Field(None, ge=1, le=MAX_SLOTS, description="(1.8) logical CPUs online on the host")
    cpu_limit: float | None = Field(
        None, gt=0, le=MAX_SLOTS, description="(1.8) cores the process may use: its CPU affinity (cpuset) and the "
        "strictest cgroup CPU quota on it, whichever is less")

    _check_t = field_validator("t")(_finite)


class HookProcess(_Model):
    """What the hook cost in one process (1.9), measured by itself from its start there until it wrote its part."""

    source: str = Field(max_length=1000, description="whose cost: driver, executor:<id>, taskmanager:<pid>...")
    host: str | None = Field(None, max_length=1000)
    cpu_s: float = Field(ge=0, le=MAX_TIME, description="the hook's CPU seconds (the sum of parts)")
    parts: dict[str, FiniteQuantity] = Field(default_factory=dict, description="its CPU seconds by where they went")
    process_cpu_s: float | None = Field(None, ge=0, le=MAX_TIME, description="the process's CPU s over that span")
    cores: float | None = Field(None, gt=0, le=MAX_SLOTS, description="the cores the process may use")
    startup_cpu_s: float | None = Field(None, ge=0, le=MAX_TIME, description="CPU seconds before the hook started")
    process_start: FiniteTime | None = Field(None, description="when the process started, epoch seconds")
    budget_share: float | None = Field(None, ge=0, le=1, description="the hook's CPU budget, a share of cores")
    samples_taken: int | None = Field(None, ge=0, le=MAX_INDEX, description="rounds of stack sampling taken")
    samples_planned: int | None = Field(None, ge=0, le=MAX_INDEX, description="rounds the interval would take")
    windows: int | None = Field(None, ge=0, le=MAX_INDEX, description="budget windows measured (2 s each)")
    windows_over_budget: int | None = Field(None, ge=0, le=MAX_INDEX, description="windows over the budget")


class HookCost(_Model):
    """The hook's own cost (1.9), per process it ran in."""

    processes: list[HookProcess] = Field(default_factory=list, max_length=100_000)

    @property
    def cpu_s(self) -> float:
        return sum(p.cpu_s for p in self.processes)


class Producer(_Model):
    """Which hook wrote the trace."""

    name: str = "crystalperf"
    version: str = ""
    hook: str = Field("", description="e.g. spark-listener, keras-callback, flink-reporter, spark-eventlog")


class Trace(_Model):
    schema_version: str = SCHEMA_VERSION
    schema_id: str = Field(SCHEMA_ID, alias="$schema")
    producer: Producer = Field(default_factory=Producer)
    application: Application
    environment: Environment = Field(default_factory=Environment)
    operations: list[Operation] = Field(default_factory=list)
    samples: StackSamples | None = None
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="job-wide figures: cached/spilled/shuffled bytes, tensor bytes, data_bytes...",
    )
    _check_metrics = field_validator("metrics")(_finite_values)
    streaming: Streaming | None = None
    sql_queries: list[SqlQuery] = Field(default_factory=list, max_length=10_000,
                                        description="SQL executions and their physical plans (1.5)")
    io: list[IoSample] = Field(default_factory=list, description="byte counters read during the run (1.3)")
    hook: HookCost | None = Field(None, description="what the hook itself cost, as it measured it (1.9)")
    warnings: list[str] = Field(default_factory=list, description="problems the hook met while recording")
    partial: str | None = Field(
        None, max_length=1000,
        description="set when the hook wrote before the run ended (1.4): why, e.g. 'the driver received SIGTERM'; "
        "what was recorded until then is complete, what came after is missing")

    @field_validator("schema_version")
    @classmethod
    def _supported_version(cls, value: str) -> str:
        major = major_version(value)
        if major is None:
            raise ValueError(f"schema_version {shown_version(value)!r} is not of the form MAJOR.MINOR")
        if major != SCHEMA_MAJOR:
            raise ValueError(f"schema_version {shown_version(value)} is not supported (this crystalperf reads "
                             f"{SCHEMA_MAJOR}.x)")
        return value

    @model_validator(mode="after")
    def _ids_unique_and_parents_known(self) -> Trace:
        _check_level(self.operations, "top level")
        return self

    def iter_operations(self) -> Iterator[Operation]:
        """Every operation, depth first (parents before children)."""
        stack = list(reversed(self.operations))
        while stack:
            op = stack.pop()
            yield op
            stack.extend(reversed(op.children))

    def to_json(self, *, indent: int | None = None) -> str:
        try:
            return self.model_dump_json(by_alias=True, exclude_none=True, indent=indent)
        except ValueError:
            # A string holding a lone surrogate (a file name that is not UTF-8, decoded with surrogateescape) cannot
            # be serialised by pydantic. Such a byte becomes the text \xNN (a JSON-escaped backslash), any other
            # lone surrogate U+FFFD: the document stays valid UTF-8 JSON and the name stays recognisable.
            document = self.model_dump(mode="python", by_alias=True, exclude_none=True)
            text = json.dumps(document, indent=indent, ensure_ascii=False, allow_nan=False)
            return _LONE_SURROGATE.sub(_readable_surrogate, text)


MAX_DEPTH = 32  # levels of nested operations (Spark uses 2: jobs and their stages)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _readable_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def _check_level(ops: list[Operation], where: str, depth: int = 1) -> None:
    if depth > MAX_DEPTH and ops:
        raise ValueError(f"operations nested more than {MAX_DEPTH} levels deep")
    ids = {op.id for op in ops}
    if len(ids) != len(ops):
        raise ValueError(f"duplicate operation ids at {where}")
    for op in ops:
        unknown = [p for p in op.parents if p not in ids]
        if unknown:
            raise ValueError(f"operation {op.id}: parent(s) {unknown} not found at {where}")
        if op.children:
            _check_level(op.children, f"children of {op.id}", depth + 1)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the trace document, with the schema version in ``$id``."""
    schema = Trace.model_json_schema(by_alias=True, mode="validation")
    schema["$id"] = SCHEMA_ID
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"crystalperf trace {SCHEMA_VERSION}"
    return schema
