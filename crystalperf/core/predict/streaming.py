"""Throughput of a pipelined (streaming) job from the CPU its operators' threads used.

Every operator chain runs as one thread per subtask, all chains at once. A bounded stream therefore
takes as long as the larger of two limits: the busiest subtask thread (a chain's CPU work spread over its
subtasks) and the machine (all CPU the job's processes used — task threads, but also serialisation,
network and GC threads — over the CPUs it may use). Changing the parallelism moves the first limit, a
CPU share or a CPU count moves the second, a faster CPU moves both.

The traced runtime ``D`` is at least the traced limit ``T``; the part of it beyond ``T`` is time the limits
did not set (start-up, a rate-limited source, waits). A slower configuration needs ``max(D, T')``: extra
work first fills that slack. A faster one saves what the limit saves, ``D - (T - T')``. Both in one:
``max(T', D - max(0, T - T'))``. So a job paced by its input keeps its runtime until a change pushes a
limit past it: predictions assume the observed input rate (paper §7.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crystalperf.core import trace as tr
from crystalperf.core.predict.base import Changes

# Changes this model answers; anything else (network, disk, memory...) is left to the resource models.
KEYS = frozenset({"parallelism", "cpu_share", "cpu_speed"})
# Below this fraction of the runtime the limits did not set the pace (said in the note only).
SATURATED = 0.75


@dataclass(frozen=True)
class Chain:
    """One operator chain: the CPU seconds of each of its subtask threads."""

    cpu_s: Sequence[float]


@dataclass(frozen=True)
class StreamingCpu:
    chains: Sequence[Chain]
    process_cpu_s: float  # all CPU the job's processes used, task threads included
    cpu_count: int
    runtime_s: float

    @classmethod
    def of(cls, trace: tr.Trace, runtime_s: float) -> StreamingCpu | None:
        """The inputs from a trace that has them (the Flink reporter with sampling on), else None."""
        utilization = trace.metrics.get("cpu_utilization")
        count = trace.environment.cpu_count
        duration = trace.application.duration
        chains = []
        for op in trace.operations:
            if not op.tasks:
                continue
            cpu = [t.metrics.get(tr.METRIC_CPU_TIME) for t in op.tasks]
            if any(c is None for c in cpu):
                return None
            chains.append(Chain([float(c) for c in cpu if c is not None]))
        if not chains or not utilization or not count or duration <= 0 or runtime_s <= 0:
            return None
        return cls(chains, utilization * duration, count, runtime_s)

    def limit(self, parallelism: int | None = None, cpu_share: float = 1.0, cpu_speed: float = 1.0) -> float:
        """Seconds the job needs at the given parallelism (None: as traced), CPU share and speed."""
        # The busiest subtask keeps its share of the chain's work (its skew), and one subtask does it all.
        thread = max(
            min(sum(c.cpu_s), max(c.cpu_s) * (len(c.cpu_s) / parallelism if parallelism else 1.0))
            for c in self.chains
            if c.cpu_s
        )
        machine = self.process_cpu_s / (self.cpu_count * cpu_share)
        return max(thread, machine) / cpu_speed

    def predict(self, changes: Changes) -> float | None:
        """The runtime under changes, or None when they involve resources this model does not cover."""
        if not set(changes.values) <= KEYS:
            return None
        parallelism = int(changes.number("parallelism", 0)) or None
        before = self.limit()
        after = self.limit(parallelism, changes.number("cpu_share", 1.0), changes.number("cpu_speed", 1.0))
        return max(after, self.runtime_s - max(0.0, before - after))

    def note(self) -> str:
        before = self.limit()
        busiest = max(max(c.cpu_s, default=0.0) for c in self.chains)
        paced = "CPU-bound" if before >= SATURATED * self.runtime_s else "paced by its input"
        return (f"streaming throughput: busiest subtask thread {busiest:.2f} CPU-s, the job's processes "
                f"{self.process_cpu_s:.2f} CPU-s on {self.cpu_count} CPUs, over {self.runtime_s:.2f} s: "
                f"{paced}; predictions assume the observed input rate")
