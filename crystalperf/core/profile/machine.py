"""The resources the traced run had: how many of its tasks could run at once (its slots, executors and cores per
executor, as the trace declares them or as its tasks show them), the keys that resize it, and the data it wants
in memory."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from importlib import metadata

from crystalperf.core import trace as tr
from crystalperf.core.trace.totals import metric_total, task_count, task_scale

log = logging.getLogger(__name__)


@dataclass
class TracedSlots:
    """Task slots of the traced run: ``slots`` tasks could run at once, on ``executors`` executors of
    ``cores_per_executor`` slots each."""

    slots: int
    executors: int
    cores_per_executor: int
    assumptions: list[str] = field(default_factory=list)


def worker_executors(env: tr.Environment) -> list[tr.Executor]:
    """The processes that run tasks, a cluster's driver left out (in local mode the driver is the only one)."""
    return [e for e in env.executors if e.id != "driver"]


def traced_slots(trace: tr.Trace) -> TracedSlots:
    """The traced run's slots as the trace declares them; a streaming job's widest operator; else the most tasks
    that ran at once (said in ``assumptions``)."""
    env = trace.environment
    assumptions: list[str] = []
    executors = max(1, len(worker_executors(env)) or len(env.executors) or 1)
    slots = env.total_slots
    if slots is None and env.cores_per_executor:
        slots = env.cores_per_executor * executors
    if slots is None and "parallelism" in scaling_keys(trace):
        # Streaming subtasks run side by side for the whole job: the parallelism is the measure.
        widths = [op.parallelism or task_count(op) for op in trace.iter_operations()]
        slots = min(tr.MAX_SLOTS, max([w for w in widths if w] or [1]))
    if slots is None:
        slots = observed_concurrency(trace)
        assumptions.append(f"task slots taken as the observed concurrency ({slots})")
    cores = env.cores_per_executor or max(1, slots // executors)
    return TracedSlots(slots, executors, cores, assumptions)


def executor_hosts(trace: tr.Trace) -> int:
    """The hosts the executors (not a cluster's driver) ran on; 0 where an executor's host is not in the trace."""
    executors = worker_executors(trace.environment)
    if not executors or any(not e.host for e in executors):
        return 0
    return len({e.host for e in executors})


def scaled_hosts(hosts: int, executors: float, new_executors: float) -> int:
    """The hosts ``new_executors`` executors take where they keep the executors per host of ``executors`` on
    ``hosts`` (one each: a host for every executor added)."""
    return max(1, round(hosts * new_executors / executors))


@dataclass(frozen=True)
class ClusterSpread:
    """How many of the cluster's workers a job of some task slots runs on, where the trace says what the cluster had
    registered beside what the job used (``cluster_slots``, ``cluster_workers``): a scheduler that fills a worker's
    slots before it takes the next (Flink's default, ``cluster.evenly-spread-out-slots: false``) takes
    ``ceil(slots / slots per worker)`` of them, at most all. Each worker taken or given back brings or takes its
    CPUs: the traced workers' ``cpus`` each, the ones the job did not use taken to be like them."""

    slots_per_worker: int
    workers: int  # registered with the cluster
    used: int  # the workers the traced job ran tasks on
    cpus: float  # CPUs each traced worker could use

    def workers_for(self, slots: int) -> int:
        return min(self.workers, max(1, -(-slots // self.slots_per_worker)))

    def factor(self, slots: int) -> float:
        """The workers (and their CPUs) a job of ``slots`` slots has, as a multiple of the traced run's."""
        return self.workers_for(slots) / self.used

    def note(self, slots: int) -> str | None:
        """What ``slots`` slots take of the cluster, in words; None where they take the traced workers."""
        taken = self.workers_for(slots)
        if taken == self.used:
            return None
        return (f"{slots} task slots take {taken} of the {self.workers} workers registered with the cluster "
                f"({self.slots_per_worker} slot{'s' if self.slots_per_worker != 1 else ''} each) instead of "
                f"{self.used}: {taken * self.cpus:g} CPUs instead of {self.used * self.cpus:g}, the workers the "
                "traced job did not use taken to be like those it did")


def cluster_spread(trace: tr.Trace, traced: int) -> ClusterSpread | None:
    """The trace's :class:`ClusterSpread` (``traced``: the traced run's task slots); None where the trace does not
    say what the cluster had, where the traced workers shared a host (the others' hosts are then unknown), or where
    the fill-first rule does not give the traced run's own placement (the scheduler spread its slots otherwise)."""
    env = trace.environment
    workers = worker_executors(env)
    if not env.cluster_slots or not env.cluster_workers or not workers or not env.cpu_count:
        return None
    if len({e.host for e in workers}) < len(workers) or None in {e.host for e in workers}:
        return None
    spread = ClusterSpread(max(1, env.cluster_slots // env.cluster_workers), env.cluster_workers, len(workers),
                           env.cpu_count / len(workers))
    return spread if spread.workers_for(traced) == spread.used else None


def scaling_keys(trace: tr.Trace) -> tuple[str, ...]:
    """The what-if keys that change how many tasks of this job run at once: as the trace declares them, else
    (traces written before the declaration) as the integration registered under the trace's framework name
    declares them (``crystalperf.integrations`` entry points), else ``parallelism`` for a streaming job and
    ``cores`` for any other."""
    if trace.environment.scaling:
        return tuple(trace.environment.scaling)
    try:
        found = metadata.entry_points(group="crystalperf.integrations", name=trace.application.framework)
        for entry in found:
            declared = tuple(getattr(entry.load(), "scaling", ()))
            if declared:
                return declared
    except Exception as exc:  # a broken plug-in must not stop the analysis: fall back to the trace's shape
        log.debug("integration %s could not be loaded: %s", trace.application.framework, exc)
    return ("parallelism",) if trace.streaming is not None else ("cores",)


def observed_concurrency(trace: tr.Trace) -> int:
    """Most tasks that ran at the same time anywhere in the job (at least 1). A recorded task of a sample
    counts for the tasks it stands for."""
    events: list[tuple[float, float]] = []
    for op in trace.iter_operations():
        scale = task_scale(op)
        for t in op.tasks:
            events.append((t.start, scale))
            events.append((t.end, -scale))
    events.sort(key=lambda e: (e[0], e[1]))
    best = running = 0.0
    for _, delta in events:
        running += delta
        best = max(best, running)
    return max(1, min(tr.MAX_SLOTS, round(best)))


def data_bytes(trace: tr.Trace) -> float | None:
    """Bytes the job wants in memory: given by the hook, else what was cached plus what spilled."""
    m = trace.metrics
    if m.get("data_bytes", 0) > 0:
        return m["data_bytes"]
    cached = m.get("cached_bytes", 0.0)
    spilled = m.get(tr.METRIC_SPILL_MEMORY_BYTES, 0.0)
    if not spilled:
        spilled = sum(metric_total(op, tr.METRIC_SPILL_MEMORY_BYTES) for op in trace.iter_operations() if op.tasks)
    total = cached + spilled
    memory = trace.environment.memory_bytes
    if spilled and memory:
        # What spilled did not fit next to what did: the data needs the memory plus the spill.
        total = max(total, memory + spilled)
    return total or None
