"""Compute devices (paper Algorithm 1): replay the tasks on N' slots, and scale CPU time by s/s'."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence

import numpy as np

from crystalperf.core import trace as tr
from crystalperf.core.attribution.vectors import SOURCE_SAMPLES
from crystalperf.core.predict.base import (
    DEFAULT_GPU_SPEEDUP,
    STORAGE_READ_BYTES,
    Baseline,
    Changes,
    OpContext,
    TaskParts,
    device_factor,
    is_device_operation,
)
from crystalperf.core.predict.ceilings import machine_cores_factor
from crystalperf.core.profile.dag import ExecutionProfile, OperationProfile
from crystalperf.core.profile.machine import cluster_spread
from crystalperf.core.profile.shared import SharedMachine, shared_machine
from crystalperf.core.trace.totals import task_count, task_seconds

MAX_WARMUP = 3.0


def _waves(profile: ExecutionProfile, slots: int) -> Iterator[tuple[list[float], list[float], int]]:
    """Per operation with at least two waves: its first wave's task durations, the later ones', its task count."""
    for prof in profile.walk():
        tasks = sorted(prof.op.tasks, key=lambda t: t.start)
        count = task_count(prof.op)
        if count < 2 * slots or slots < 1 or len(tasks) < 2:
            continue
        # A recorded task of a sample stands for ``scale`` tasks in a row: the first wave is the first few.
        scale = count / len(tasks)
        wave = max(1, min(len(tasks) - 1, round(slots / scale)))
        yield [t.duration for t in tasks[:wave]], [t.duration for t in tasks[wave:]], count


def estimate_warmup(profile: ExecutionProfile, slots: int) -> tuple[float, list[float]]:
    """First-wave over later-wave task duration, from operations with at least two waves.

    Returns the task-weighted mean factor (clamped to [1, 3]) and the per-operation factors."""
    factors: list[tuple[float, int]] = []
    for first, later, count in _waves(profile, slots):
        later_median = statistics.median(later)
        if later_median <= 0:
            continue
        factor = statistics.median(first) / later_median
        factors.append((min(MAX_WARMUP, max(1.0, factor)), count))
    if not factors:
        return 1.0, []
    total = sum(n for _, n in factors)
    return sum(f * n for f, n in factors) / total, [f for f, _ in factors]


def warmup_evidence(profile: ExecutionProfile, slots: int) -> int:
    """First-wave tasks the warm-up factor was estimated from, all operations together."""
    return sum(len(first) for first, later, _count in _waves(profile, slots) if statistics.median(later) > 0)


class ComputeModel:
    """CPU speed, CPU share and CPU<->GPU: the CPU part of each task is scaled by s/s'."""

    name = "compute"
    keys = frozenset({"cpu_speed", "cpu_share", "device", "gpu_speedup"})

    def __init__(self) -> None:
        self.factor = 1.0
        self.gpu_factor = 1.0
        self.cached_io = 0.0  # share of disk time that is page-cache copying, i.e. CPU work

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        notes: list[str] = []
        self.factor = 1.0
        self.gpu_factor = 1.0
        self.cached_io = 0.0
        self.factor /= changes.number("cpu_speed", 1.0)
        share = changes.number("cpu_share", 1.0)
        utilization = profile.trace.metrics.get("cpu_utilization")
        if "cpu_share" in changes and utilization and baseline.slots > 0:
            # A quota slows only the CPU the job used beyond it: a process that kept U of its N CPUs busy
            # needs U / (share * N) times as long, and nothing longer when that is below 1.
            slowdown = max(1.0, utilization / (share * baseline.slots))
            notes.append(f"CPU share {share:g}: the job used {utilization:.2f} of {baseline.slots} CPUs, "
                         f"so its CPU time stretches x{slowdown:.2f}")
            self.factor *= slowdown
        else:
            self.factor /= share
        if self.factor != 1.0:
            self.cached_io = _page_cache_share(profile, baseline)
            if self.cached_io > 0:
                notes.append(f"{self.cached_io:.0%} of the disk time is not explained by the bytes read from the "
                             "storage device: page-cache copies, slowed like the CPU")
        self.gpu_factor = device_factor(changes, baseline)
        if self.gpu_factor != 1.0:
            speedup = changes.number("gpu_speedup", DEFAULT_GPU_SPEEDUP)
            if "gpu_speedup" not in changes:
                notes.append(f"GPU assumed {speedup:g}x faster than the CPU on compute operations "
                             f"(set gpu_speedup=... to change)")
        return notes

    @property
    def unchanged(self) -> bool:
        return self.factor == 1.0 and self.gpu_factor == 1.0

    def adjust_columns(self, ctxs: Sequence[OpContext], parts: np.ndarray, task_unit: np.ndarray) -> bool:
        """``adjust`` on the tasks of many operations at once (``base.ResourceModel``)."""
        if self.gpu_factor != 1.0:
            device = np.array([is_device_operation(ctx.profile.op) for ctx in ctxs], dtype=bool)
            factor: np.ndarray | float = np.where(device, self.factor * self.gpu_factor, self.factor)[task_unit]
        elif self.factor == 1.0:
            return True
        else:
            factor = self.factor
        changed = np.asarray(factor) != 1.0  # a task whose CPU keeps its speed keeps its disk time too
        cached = parts[:, 1] * self.cached_io
        parts[:, 1] = np.where(changed, parts[:, 1] - cached, parts[:, 1])
        parts[:, 0] = np.where(changed, (parts[:, 0] + cached) * factor, parts[:, 0])
        return True

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        factor = self.factor
        if self.gpu_factor != 1.0 and is_device_operation(ctx.profile.op):
            factor *= self.gpu_factor
        if factor == 1.0:
            return parts
        for p in parts:
            cached = p.disk * self.cached_io
            p.disk -= cached
            p.cpu = (p.cpu + cached) * factor
        return parts


def _page_cache_share(profile: ExecutionProfile, baseline: Baseline) -> float:
    """The share of the job's disk time the storage device does not account for.

    Disk time is time in file reads and writes; when the trace measured the bytes read from the device
    (``storage_read_bytes``), only ``R / B`` seconds of it waited on the device. The rest copied to and
    from the page cache (spill and shuffle files written and read back within the job): memory copies a
    CPU change slows like any other CPU work. 0 without a measurement: all disk time stays disk.
    """
    read = profile.trace.metrics.get(STORAGE_READ_BYTES)
    if read is None:
        return 0.0
    disk_s = sum(prof.vector.vector.disk * task_seconds(prof.op) for prof in profile.walk() if not prof.children)
    if disk_s <= 0:
        return 0.0
    return max(0.0, 1.0 - (read / baseline.disk_bandwidth) / disk_s)


# Below this run-queue delay (a share of the CPU time) a host's CPUs were not measurably saturated: how far below
# saturation they were is unknown, so more tasks side by side are not taken to wait for a core.
SATURATED_WAIT_SHARE = 0.10
# Cores this busy (the job's processes and the host's others, a share of the cores the processes may use) over an
# operation's window were saturated: its tasks' CPU beyond their measured CPU time was waiting for a core.
SATURATED_CORES = 0.9


class SharedHostModel:
    """More or fewer task slots on the same hosts: the tasks side by side on a host share its CPUs and its
    storage device.

    A thread that needs ``c`` seconds of CPU on cores loaded ``L`` times over (processor sharing) is runnable
    ``c * L`` seconds and waits ``c * (L - 1)`` of them for a core: the run-queue delay the hook measured
    (``cpu_wait_s``) gives ``L = 1 + wait / cpu``. The load comes from the tasks and the work they cause (the
    collector, compression, the kernel filling the page cache), so it scales with the tasks side by side: ``L' =
    L * k' / k``, and a task's CPU part (CPU time plus run-queue delay) scales by ``max(L', 1) / L``. Where the
    trace measured no saturation (a delay under ``SATURATED_WAIT_SHARE`` of the CPU time) more tasks are taken
    to find cores enough: how far below saturation the cores were is not in the trace. Without a measured delay,
    the time the samples saw the tasks' threads runnable less their CPU time is the delay, counted in thread
    seconds: a task whose threads ran side by side (a source's fetcher beside its task thread) was runnable in
    each of them.

    The device part of the disk time (what ``storage_read_bytes`` at the bandwidth the job saw accounts for)
    scales by ``k' / k`` as well: tasks reading side by side share the device's bandwidth, which is what the
    disk what-ifs assume too. Page-cache copies stay CPU work and follow the CPU part.

    ``k`` is the tasks of one operation that ran side by side on a host: its tasks per executor, at most the
    slots per executor. ``executors`` alone (the same slots per executor, on hosts of their own) changes
    neither, nor does a parallelism that spreads over workers of the cluster the job did not use
    (:class:`crystalperf.core.profile.machine.ClusterSpread`)."""

    name = "contention"
    keys = frozenset({"cores", "slots", "executors", "parallelism", "hosts"})

    def __init__(self) -> None:
        self.before = self.after = 1.0  # task slots per host
        # what the tasks spread over, traced and scenario's: the executors, or the hosts a scenario states (the
        # tasks side by side on a host share it, whichever executor runs them)
        self.spread_over = (1, 1)
        self.device_share = 0.0
        self._factors: dict[str, tuple[float, float]] = {}
        self._machine: SharedMachine | None = None
        self._interval_s = 0.0  # the seconds one stack sample stands for
        self._cores_factor = 1.0  # how many times the traced run's cores the scenario's processes may have

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        self._factors = {}
        executors = max(1, baseline.executors)
        new_executors = max(1, int(changes.number("executors", executors)))
        if "slots" in changes or "parallelism" in changes:
            slots = max(1.0, changes.number("slots", changes.number("parallelism", baseline.slots)))
            spread = cluster_spread(profile.trace, baseline.slots) if "parallelism" in changes else None
            if spread is not None:
                # the parallelism takes more (or fewer) of the cluster's workers, each on a host of its own
                new_executors = max(1, round(executors * spread.factor(int(slots))))
        elif "cores" in changes or "executors" in changes or "hosts" in changes:
            slots = max(1.0, changes.number("cores", baseline.cores_per_executor) * new_executors)
        else:
            slots = float(baseline.slots)
        self.spread_over = baseline.hosts_for(changes) if "hosts" in changes else (executors, new_executors)
        self.before = max(1.0, baseline.slots / self.spread_over[0])
        self.after = max(1.0, slots / self.spread_over[1])
        if not self.unchanged and not any(len(prof.op.tasks) > 1 for prof in profile.walk()):
            self.after = self.before  # no operation ran tasks side by side (a TensorFlow step is one unit)
        if self.unchanged:
            return []
        read = profile.trace.metrics.get(STORAGE_READ_BYTES)
        self.device_share = 1.0 - _page_cache_share(profile, baseline) if read else 0.0
        self._machine = _shared(profile)
        if self._machine is not None:
            self._cores_factor = machine_cores_factor(self._machine, baseline, changes, int(slots))
        samples = profile.trace.samples
        hook = profile.trace.hook
        # seconds a sample stands for: the interval, stretched where the hook's budget took fewer rounds
        self._interval_s = samples.interval_s * _sampling_stretch(hook) if samples is not None else 0.0
        waited, cpu = self._run_queue_delay(profile)
        notes = [f"task slots per host {self.before:g} -> {self.after:g}: the tasks side by side share their host's "
                 f"CPUs and storage device"]
        if cpu > 0:
            notes.append(f"the traced tasks waited {waited:.2f} s for a core (run-queue delay, {waited / cpu:.0%} of "
                         f"their {cpu:.2f} s of CPU time): the load on the cores scales with the tasks side by side")
        else:
            notes.append("the trace measured no run-queue delay (cpu_wait_s): the tasks' CPU time is left as it is")
        if self.device_share > 0:
            notes.append(f"{self.device_share:.0%} of the disk time waited on the storage device, shared by the tasks "
                         "reading side by side")
        return notes

    @property
    def unchanged(self) -> bool:
        return self.before == self.after

    def _op_factors(self, ctx: OpContext) -> tuple[float, float]:
        key = ctx.profile.path
        found = self._factors.get(key)
        if found is not None:
            return found
        old_executors, new_executors = self.spread_over
        count = max(1, ctx.count)
        side_by_side = min(self.before, math.ceil(count / old_executors))
        new_side_by_side = min(self.after, math.ceil(count / new_executors))
        ratio = new_side_by_side / side_by_side
        cpu_factor = 1.0
        waited, cpu = self._delay_of(ctx.profile)
        if cpu > 0 and ratio != 1.0:
            load = 1.0 + waited / cpu
            demand = self._demand(ctx.profile, load, ratio) if old_executors == new_executors else None
            if demand is not None:
                # the tasks' CPU part (CPU time and wait) was load x their CPU time; now the new load's
                cpu_factor = max(1.0, demand) / load
            elif ratio < 1.0 or waited / cpu >= SATURATED_WAIT_SHARE:
                cpu_factor = max(1.0, load * ratio) / load
        disk_factor = 1.0 + self.device_share * (ratio - 1.0)
        found = self._factors[key] = (cpu_factor, disk_factor)
        return found

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        cpu_factor, disk_factor = self._op_factors(ctx)
        if cpu_factor == 1.0 and disk_factor == 1.0:
            return parts
        for p in parts:
            p.cpu *= cpu_factor
            p.disk *= disk_factor
        return parts

    def adjust_columns(self, ctxs: Sequence[OpContext], parts: np.ndarray, task_unit: np.ndarray) -> bool:
        """``adjust`` on the tasks of many operations at once (``base.ResourceModel``)."""
        factors = np.array([self._op_factors(ctx) for ctx in ctxs], dtype=float).reshape(-1, 2)
        parts[:, 0] *= factors[task_unit, 0]
        parts[:, 1] *= factors[task_unit, 1]
        return True

    def _demand(self, prof: OperationProfile, load: float, ratio: float) -> float | None:
        """The load on the cores with ``ratio`` times the tasks side by side, where the counters measured what the
        operation's processes did beside its tasks (None elsewhere): the tasks' threads, which wanted ``load``
        times the cores they got, and the collector (whose work follows what the tasks allocate) want ``ratio``
        times as many; the rest of the background (the compilers, the driver planning the next query, timers) as
        many as before; over the cores the scenario's processes may have, less what other processes used."""
        machine = self._machine
        share = machine.shares.get(prof.path) if machine is not None else None
        if machine is None or share is None or share.task_cpu_s is None or share.window_s <= 0:
            return None
        cores = machine.cores * self._cores_factor - share.other_cores
        if cores <= 0:
            return None
        following = (share.task_cpu_s * load + min(share.gc_s, share.background_cpu_s)) / share.window_s
        fixed = share.per_process_cpu_s / share.window_s
        return (following * ratio + fixed) / cores

    def _delay_of(self, prof: OperationProfile) -> tuple[float, float]:
        """An operation's tasks' run-queue delay and CPU time: measured (schedstat), else, where the OS counters
        saw its processes and the host's others keep the cores saturated over its window, the CPU its samples
        gave its tasks beyond the CPU time they measured — time runnable, waiting for a core."""
        waited, cpu = _run_queue_delay_of(prof.op)
        if cpu > 0 or self._machine is None:
            return waited, cpu
        share = self._machine.shares.get(prof.path)
        measured = share.task_cpu_s if share is not None else None
        if share is None or not measured or share.window_s <= 0:
            return 0.0, 0.0
        busy = share.cpu_s / share.window_s + share.other_cores
        if busy < SATURATED_CORES * self._machine.cores:
            return 0.0, 0.0
        sampled_cpu = prof.vector.vector.cpu * max(task_seconds(prof.op), self._thread_seconds(prof))
        return max(0.0, sampled_cpu - measured), measured

    def _thread_seconds(self, prof: OperationProfile) -> float:
        """Seconds the operation's sampled threads were sampled in, all its tasks' threads together: more than its
        tasks' wall time where a task's threads ran side by side (a source's fetcher beside its task thread)."""
        if prof.vector.source != SOURCE_SAMPLES:
            return 0.0
        return prof.vector.samples * self._interval_s

    def _run_queue_delay(self, profile: ExecutionProfile) -> tuple[float, float]:
        waited = cpu = 0.0
        for prof in profile.walk():
            w, c = self._delay_of(prof)
            waited, cpu = waited + w, cpu + c
        return waited, cpu


def _sampling_stretch(hook: tr.HookCost | None) -> float:
    """How many planned sampling rounds a round taken stands for (planned / taken over the processes that said,
    at least 1): above 1 where the budget stretched the samplers' interval."""
    rounds = [(p.samples_taken, p.samples_planned) for p in (hook.processes if hook is not None else [])
              if p.samples_taken and p.samples_planned]
    taken = sum(t for t, _ in rounds)
    return max(1.0, sum(planned for _, planned in rounds) / taken) if taken else 1.0


def _shared(profile: ExecutionProfile) -> SharedMachine | None:
    """The profile's shared machine, computed once for every model and scenario that reads it."""
    return profile.memoised("shared_machine", lambda: shared_machine(profile))


def _run_queue_delay_of(op: tr.Operation) -> tuple[float, float]:
    """Run-queue delay and CPU time of an operation's recorded tasks (0, 0 where the delay was not measured)."""
    waited = cpu = 0.0
    for task in op.tasks:
        wait = task.metrics.get(tr.METRIC_CPU_WAIT_TIME)
        if wait is None:
            continue
        waited += max(0.0, wait)
        cpu += max(0.0, task.metrics.get(tr.METRIC_CPU_TIME, 0.0))
    return waited, cpu
