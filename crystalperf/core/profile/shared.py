"""What the job's tasks shared, as its processes' counters saw it (``Trace.io``, schema 1.8): the cores their
processes may use, how much of them the tasks and everything else in those processes used (the collector, the
compilers, shuffle and network threads, fetchers, the hook), how much other processes of the hosts took, and
the bytes that went through the storage device and the network — per operation, over its time window.

A prediction (``crystalperf.core.predict.ceilings``) turns these into floors no scenario goes below: an
operation's CPU work over the cores it can have, its device bytes over the device's bandwidth, its network
bytes over the link's. Adding task slots to a job whose cores its own JVM threads keep busy, or whose disk
moves all it can, then gains (about) nothing, as it does for real.

Quantities of a window are shared among the operations running in it by their task time in it (their tasks'
overlap with the window, each recorded task standing for the tasks it was sampled from).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from crystalperf.core import trace as tr
from crystalperf.core.attribution.observed import COORDINATORS, WORKERS, CounterSeries, counter_series
from crystalperf.core.profile.dag import ExecutionProfile, OperationProfile, unit_profiles
from crystalperf.core.trace.totals import metric_total, task_scale

# Counters of CPU time are read every 250 ms in 10 ms ticks: a window shorter than this says little.
MIN_WINDOW_S = 0.5
# A run whose busiest second used less than this of its cores is taken to say nothing of how near to all of them
# a busier one gets.
MIN_PEAK_UTILIZATION = 0.5


@dataclass(frozen=True)
class OperationShare:
    """What one operation took of what its tasks shared, over its window (seconds from its start to its end)."""

    window_s: float
    cpu_s: float  # CPU seconds of the job's processes given to it: its tasks' own and its share of the rest
    task_cpu_s: float | None  # its tasks' own CPU time, where the framework measured it
    other_cores: float  # cores other processes kept busy on the job's hosts, on average over the window
    read_bytes: float  # bytes read from the storage devices, its share
    network_bytes: float  # bytes over the busiest link (received or sent, the larger), its share
    gc_s: float = 0.0  # its tasks' time in the collector's pauses, where measured (the collector ran as long)
    tasks: float = 0.0  # its tasks (each recorded one standing for those it was sampled from)
    # of the processes' CPU beside their tasks, the share each pays for itself (compilers, timers, the hook), where
    # the hooks split every task process's CPU by thread kind (the collector and the network threads follow the work)
    own_share: float | None = None
    # CPU seconds its tasks' first on each process used beyond its tasks' median: the code every JVM runs cold
    # (interpreted, then compiled) the first time, which a process more that runs its tasks pays again
    cold_cpu_s: float = 0.0

    @property
    def background_cpu_s(self) -> float:
        """CPU seconds its processes spent beside its tasks' threads (where the tasks' own was measured)."""
        return max(0.0, self.cpu_s - self.task_cpu_s) if self.task_cpu_s is not None else 0.0

    @property
    def per_process_cpu_s(self) -> float:
        """Of the background, what each process pays for itself rather than for the records — the compilers warming
        the same code up in every JVM, its timers, heartbeats and RPC dispatch: the background's share of them where
        the processes' CPU was split by thread kind, else all but the collector's pauses (which grow with what the
        tasks allocate)."""
        if self.own_share is not None:
            return self.background_cpu_s * self.own_share
        return max(0.0, self.background_cpu_s - self.gc_s)


@dataclass
class SharedMachine:
    """The hosts the job's tasks ran on, as one pool: the cores their processes may use and what the job used."""

    cores: float  # cores the processes running tasks may use, all hosts together
    hosts: int
    host_cpus: int  # logical CPUs of those hosts together
    limited_by: str  # what set ``cores``: "cpus" (the hosts' own) or "limit" (a cpuset or a cgroup CPU quota)
    span_s: float  # the job's span the counters cover
    process_cpu_s: float  # CPU seconds the processes used over it
    task_cpu_s: float | None  # of which the tasks' own, where measured
    other_cpu_s: float  # CPU seconds other processes of the hosts used over it
    shares: dict[str, OperationShare] = field(default_factory=dict)  # by unit operation path
    # the most of their cores the processes (and the hosts' other processes) kept busy in any second of the run:
    # how near to all of them a job that wants more gets
    peak_utilization: float = 1.0
    # seconds between two counter readings (the median): how far a window's figures may be off at each end
    reading_interval_s: float = 0.25
    # every process of the application (its coordinator too) reported one host name: one machine, whose workers
    # (network namespaces, as in a test cluster on one box) come out of its CPUs, not with CPUs of their own.
    # Containers with host names of their own look like machines apart: each worker keeps its own CPUs.
    one_machine: bool = False

    @property
    def busy_cores(self) -> float:
        """Cores the job's processes kept busy, on average over the run."""
        return self.process_cpu_s / self.span_s if self.span_s > 0 else 0.0

    @property
    def background_cores(self) -> float | None:
        """Cores its processes used beside its tasks' threads, on average (None where the tasks' was not measured)."""
        if self.task_cpu_s is None or self.span_s <= 0:
            return None
        return max(0.0, self.process_cpu_s - self.task_cpu_s) / self.span_s

    @property
    def other_cores(self) -> float:
        return self.other_cpu_s / self.span_s if self.span_s > 0 else 0.0


def _task_processes(trace: tr.Trace) -> dict[str, list[tr.IoSample]]:
    """The counter rows of the processes that ran the job's tasks, by source: on a cluster the workers (Spark's
    executors, Flink's TaskManagers), else every process (a local driver, a mini cluster, a Keras fit)."""
    by_source: dict[str, list[tr.IoSample]] = {}
    for row in sorted(trace.io, key=lambda r: r.t):
        by_source.setdefault(row.source, []).append(row)
    if any(source.startswith(WORKERS) for source in by_source):
        by_source = {s: rows for s, rows in by_source.items() if not s.startswith(COORDINATORS)}
    return by_source


class _Activity:
    """The task time running at each moment, all unit operations together: its integral over a window, from the
    tasks' starts and ends sorted once."""

    def __init__(self, intervals: Sequence[tuple[float, float, float]]) -> None:
        starts = sorted((s, w) for s, _e, w in intervals)
        ends = sorted((e, w) for _s, e, w in intervals)
        self.starts = np.array([s for s, _ in starts], dtype=np.float64)
        self.ends = np.array([e for e, _ in ends], dtype=np.float64)
        self.start_w = np.concatenate([[0.0], np.cumsum([w for _, w in starts])])
        self.start_ws = np.concatenate([[0.0], np.cumsum([s * w for s, w in starts])])
        self.end_w = np.concatenate([[0.0], np.cumsum([w for _, w in ends])])
        self.end_ws = np.concatenate([[0.0], np.cumsum([e * w for e, w in ends])])

    def integral(self, t: np.ndarray) -> np.ndarray:
        """Task-seconds run before each time of ``t``."""
        i = np.searchsorted(self.starts, t, side="right")
        j = np.searchsorted(self.ends, t, side="right")
        return (self.start_w[i] * t - self.start_ws[i]) - (self.end_w[j] * t - self.end_ws[j])


def _units(profile: ExecutionProfile) -> list[tuple[OperationProfile, list[tuple[float, float, float]]]]:
    """Each unit operation and its tasks' (start, end, weight) — the operation itself when it recorded none."""
    found = []
    for prof in unit_profiles(profile):
        op = prof.op
        if op.duration <= 0:
            continue
        scale = task_scale(op)
        intervals = ([(t.start, t.end, scale) for t in op.tasks if t.end > t.start] if op.tasks
                     else [(op.start, op.end, 1.0)])
        if intervals:
            found.append((prof, intervals))
    return found


def shared_machine(profile: ExecutionProfile) -> SharedMachine | None:
    """What the job's tasks shared, where its hooks counted its processes' CPU time; None for traces without
    (written before schema 1.8, or by a hook that could not read /proc)."""
    trace = profile.trace
    processes = _task_processes(trace)
    cpu: list[CounterSeries] = []
    hosts: dict[str | None, list[list[tr.IoSample]]] = {}
    for rows in processes.values():
        series = counter_series(rows, "process_cpu_s")
        if series is None:
            continue
        cpu.append(series)
        hosts.setdefault(rows[0].host, []).append(rows)
    if not cpu:
        return None
    cores = 0.0
    host_cpus = 0
    limited_by = "cpus"
    busy: list[CounterSeries] = []
    addresses = {e.id: e.host for e in trace.environment.executors if e.host}
    for host_rows in hosts.values():
        rows = [r for source_rows in host_rows for r in source_rows]
        cpus = max((r.host_cpus for r in rows if r.host_cpus), default=None)
        limit = _machine_limit(host_rows, addresses)
        if cpus is None and limit is None:
            return None
        host_cores = min(x for x in (cpus, limit) if x is not None)
        if limit is not None and (cpus is None or limit < cpus):
            limited_by = "limit"
        cores += host_cores
        host_cpus += cpus or int(round(host_cores))
        # the host's busy CPU: any one process's reading of /proc/stat (they read the same host)
        longest = max(host_rows, key=len)
        host_busy = counter_series(longest, "host_cpu_busy_s")
        if host_busy is not None:
            busy.append(host_busy)
    app = trace.application
    start, end = max(app.start, min(s.t[0] for s in cpu)), min(app.end, max(s.t[-1] for s in cpu))
    if end - start < MIN_WINDOW_S:
        return None
    process_cpu = sum(s.between(start, end) for s in cpu)
    other = max(0.0, sum(s.between(start, end) for s in busy) - process_cpu) if busy else 0.0
    units = _units(profile)
    measured = [metric_total(p.op, tr.METRIC_CPU_TIME) for p, _ in units
                if any(tr.METRIC_CPU_TIME in t.metrics for t in p.op.tasks) or tr.METRIC_CPU_TIME in p.op.metrics]
    machine = SharedMachine(cores, len(hosts), host_cpus, limited_by, end - start, process_cpu,
                            sum(measured) if measured else None, other)
    # the coordinator counts here: a driver on the executors' machine is the application's whole cluster there
    machine.one_machine = len(hosts) == 1 and len({r.host for r in trace.io}) == 1
    machine.shares = _operation_shares(trace, processes, cpu, busy, units)
    machine.peak_utilization = _peak_utilization(busy or cpu, cores, start, end)
    gaps = [b - a for series in cpu for a, b in zip(series.t, series.t[1:], strict=False) if b > a]
    if gaps:
        machine.reading_interval_s = statistics.median(gaps)
    return machine


def _machine_limit(process_rows: list[list[tr.IoSample]], addresses: dict[str, str]) -> float | None:
    """The cores a machine's task processes may use together under their limits: the processes of one network
    address (one host, one container) are taken to share one limit (the median of theirs: a worker and the
    executors it started sit in its cgroup), while workers at addresses of their own (containers, pods or
    namespaced hosts on one machine) each have theirs, so those add up."""
    by_address: dict[str | None, list[float]] = {}
    for rows in process_rows:
        source = rows[0].source
        address = addresses.get(source.split(":", 1)[1]) if source.startswith(WORKERS) else None
        by_address.setdefault(address, []).extend(r.cpu_limit for r in rows if r.cpu_limit)
    limits = [statistics.median(found) for found in by_address.values() if found]
    return sum(limits) if limits else None


def _peak_utilization(series: list[CounterSeries], cores: float, start: float, end: float) -> float:
    """The largest share of ``cores`` the series (summed) kept busy over any whole second of [start, end]."""
    peak = 0.0
    t = start
    while t + 1.0 <= end:
        peak = max(peak, sum(s.between(t, t + 1.0) for s in series) / cores)
        t += 1.0
    return min(1.0, max(MIN_PEAK_UTILIZATION, peak))


def _operation_shares(trace: tr.Trace, processes: dict[str, list[tr.IoSample]], cpu: list[CounterSeries],
                      busy: list[CounterSeries], units: list[tuple[OperationProfile, list[tuple[float, float, float]]]],
                      ) -> dict[str, OperationShare]:
    """Each unit operation's share of the processes' CPU, of the other processes' and of the bytes moved, over
    its window."""
    if not units:
        return {}
    activity = _Activity([iv for _p, intervals in units for iv in intervals])
    bounds = np.array([[p.op.start, p.op.end] for p, _ in units], dtype=np.float64)
    totals = activity.integral(bounds[:, 1]) - activity.integral(bounds[:, 0])
    read = [s for rows in processes.values() if (s := counter_series(rows, "storage_read_bytes")) is not None]
    network = _busiest_link(processes)
    per_process = _own_share(trace)
    shares: dict[str, OperationShare] = {}
    for (prof, intervals), total in zip(units, totals.tolist(), strict=True):
        op = prof.op
        a, b = op.start, op.end
        own = sum((e - s) * w for s, e, w in intervals)
        share = min(1.0, own / total) if total > 0 else 0.0
        window_cpu = sum(s.between(a, b) for s in cpu)
        window_busy = sum(s.between(a, b) for s in busy) if busy else window_cpu
        measured = (metric_total(op, tr.METRIC_CPU_TIME)
                    if any(tr.METRIC_CPU_TIME in t.metrics for t in op.tasks) or tr.METRIC_CPU_TIME in op.metrics
                    else None)
        shares[prof.path] = OperationShare(
            window_s=b - a,
            cpu_s=max(window_cpu * share, measured or 0.0),
            task_cpu_s=measured,
            other_cores=max(0.0, window_busy - window_cpu) / (b - a),
            read_bytes=sum(s.between(a, b) for s in read) * share,
            network_bytes=(max(s.between(a, b) for s in network) * share) if network else 0.0,
            gc_s=metric_total(op, tr.METRIC_GC_TIME) if measured is not None else 0.0,
            tasks=sum(w for _s, _e, w in intervals) if op.tasks else 0.0,
            own_share=per_process,
            cold_cpu_s=cold_task_cpu(op),
        )
    return shares


# A process's first task of an operation counts as cold only where it ran at least this many of its tasks: a lone
# task is its own median.
MIN_TASKS_PER_PROCESS = 2


def cold_task_cpu(op: tr.Operation) -> float:
    """CPU seconds the operation's first recorded task on each process (executor) used beyond the median of its
    tasks, over the processes that ran at least ``MIN_TASKS_PER_PROCESS`` of them. A JVM runs code it has not run
    before interpreted until its compilers have compiled it: on the namespace cluster's SHA-256 stage, each
    executor's first task used 0.47–0.54 CPU-s and the rest 0.05 (docs/whatif.md, "Ceilings")."""
    by_process: dict[str, list[tr.Task]] = {}
    for task in op.tasks:
        if task.executor is not None and tr.METRIC_CPU_TIME in task.metrics:
            by_process.setdefault(task.executor, []).append(task)
    recorded = [tasks for tasks in by_process.values() if len(tasks) >= MIN_TASKS_PER_PROCESS]
    if not recorded:
        return 0.0
    warm = statistics.median(t.metrics[tr.METRIC_CPU_TIME] for tasks in by_process.values() for t in tasks)
    return sum(max(0.0, min(tasks, key=lambda t: t.start).metrics[tr.METRIC_CPU_TIME] - warm) for tasks in recorded)


def _own_share(trace: tr.Trace) -> float | None:
    """Of the CPU the processes that ran tasks used beside their task threads, the share of the kinds each process
    pays for itself (``jit``, ``other``, ``hook``), over the job; None unless each of them split its CPU by kind."""
    used = {t.executor for op in trace.iter_operations() for t in op.tasks}
    executors = [e for e in trace.environment.executors if e.id in used]
    if not executors or len(executors) != len(used) or any(e.thread_cpu is None for e in executors):
        return None
    kinds = [e.thread_cpu for e in executors if e.thread_cpu is not None]
    background = sum(k.total - k.task for k in kinds)
    if background <= 0:
        return None
    return sum(k.jit + k.other + k.hook for k in kinds) / background


def _busiest_link(processes: dict[str, list[tr.IoSample]]) -> list[CounterSeries]:
    """The network counters of each distinct host namespace (received and sent, the larger direction by the end)."""
    found: list[CounterSeries] = []
    seen: set[str | None] = set()
    for rows in processes.values():
        if rows[0].host in seen:
            continue  # one namespace's interfaces read by two processes: the same bytes
        rx, tx = counter_series(rows, "network_rx_bytes"), counter_series(rows, "network_tx_bytes")
        larger = max((s for s in (rx, tx) if s is not None), key=lambda s: s.v[-1] - s.v[0], default=None)
        if larger is not None:
            found.append(larger)
            seen.add(rows[0].host)
    return found
