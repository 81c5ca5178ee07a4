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


def traced_slots(trace: tr.Trace) -> TracedSlots:
    """The traced run's slots as the trace declares them; a streaming job's widest operator; else the most tasks
    that ran at once (said in ``assumptions``)."""
    env = trace.environment
    assumptions: list[str] = []
    executors = max(1, len([e for e in env.executors if e.id != "driver"]) or len(env.executors) or 1)
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
