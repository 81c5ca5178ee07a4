"""Executors starting on the machine the application already keeps busy.

The time before a Spark application's first operation is start-up: the driver's JVM and Python, registering with
the cluster manager, the executors' JVMs starting and registering, the first query planned. Where the executors
run on hosts of their own, more executors start side by side on more machines and that time does not change, as
the model keeps it. Where they share one machine with the driver (a test cluster in network namespaces, a
single-box standalone cluster: ``SharedMachine.one_machine``) and that machine's CPUs were busy through the
start-up, each added executor's JVM adds its start-up CPU (class loading, the JIT, registering: seconds of CPU
on a JVM of Spark's size) to that of everything else, and the first operation starts later.

Each executor's start-up CPU comes from its hook (``HookProcess.startup_cpu_s``, schema 1.12: the plugin starts
once the executor has registered). The phase's work must all be done before the first operation, so its CPU over
the machine's CPUs bounds its length from below. For ``k`` executors more of ``c`` CPU-seconds each on ``n`` CPUs:

- the point, ``k·c / n``: the phase's idle CPU time was where nothing else could run yet (the driver's JVM
  starting alone before it asked for executors), so all of the added CPU stretches it;
- the band's other end, ``max(0, k·c − I) / n``: the added CPU first fills the ``I`` CPU-seconds the phase left
  idle.

Fewer executors give the same back, mirrored, only where the phase was busy enough that it waited for CPU
(``SATURATED``). On the scale bench's one-machine cluster (executors of 3.0–3.7 CPU-seconds each on two CPUs,
docs/accuracy.md) a second executor started the first operation 2.35 s later (medians), where the point says about
1.6 s.
"""

from __future__ import annotations

from dataclasses import dataclass

from crystalperf.core import trace as tr
from crystalperf.core.attribution.observed import counter_series
from crystalperf.core.profile.dag import ExecutionProfile
from crystalperf.core.profile.machine import worker_executors
from crystalperf.core.profile.shared import SharedMachine

# A start-up phase whose machine was busy at least this share of its CPUs' time waited for CPU: one executor's
# start-up less gives its CPU back. Below it the phase waited for something else (a cluster manager, the network).
SATURATED = 0.8
# Executor processes are named so by the Spark hook's cost report.
EXECUTOR_PREFIX = "executor:"


@dataclass(frozen=True)
class StartUp:
    """The traced run's start-up phase, where added or removed executors would change it."""

    seconds: float  # from the application's start to its first operation
    busy_share: float  # of the machine's CPUs over the part of it the counters cover
    cpus: int  # the machine's
    executor_cpu_s: float  # the CPU seconds an executor's JVM took to start and register (the traced ones' mean)
    executors: int  # traced executors, all registered before the first operation

    @property
    def idle_cpu_s(self) -> float:
        return max(0.0, 1.0 - self.busy_share) * self.cpus * self.seconds

    def ends(self, executors: int) -> tuple[float, float]:
        """The seconds ``executors`` executors add to the phase (negative: take from it): the point (all of their
        start-up CPU over the machine's CPUs), then the band's other end (the idle time filled first)."""
        delta = executors - self.executors
        if delta == 0 or self.cpus <= 0 or (delta < 0 and self.busy_share < SATURATED):
            return 0.0, 0.0
        added = delta * self.executor_cpu_s
        hidden = max(0.0, abs(added) - self.idle_cpu_s) / self.cpus
        return max(added / self.cpus, -self.seconds), hidden if delta > 0 else -hidden

    def note(self, executors: int) -> str:
        point, other = self.ends(executors)
        return (f"start-up: the traced {self.executors} executor JVM{'s' if self.executors != 1 else ''} took "
                f"{self.executor_cpu_s:.2f} s of CPU each to start, on the machine the application shares, whose "
                f"{self.cpus} CPUs were {self.busy_share:.0%} busy in the {self.seconds:.2f} s before the first "
                f"operation; {executors} change that time by {point:+.2f} s (the band spans to {other:+.2f} s, "
                "where the added CPU would first fill the idle time)")


def start_up(profile: ExecutionProfile, machine: SharedMachine | None) -> StartUp | None:
    """The traced start-up phase, where the trace shows what executors cost it: every executor registered before
    the first operation, their hooks measured their start-up, and all of the application ran on one machine.
    Computed once per profile."""
    return profile.memoised("start_up", lambda: _start_up(profile.trace, machine))


def _start_up(trace: tr.Trace, machine: SharedMachine | None) -> StartUp | None:
    if machine is None or not machine.one_machine or not trace.operations or trace.hook is None:
        return None
    first = min(op.start for op in trace.operations)
    seconds = first - trace.application.start
    executors = worker_executors(trace.environment)
    if seconds <= 0 or not executors or any(e.added is None or e.added > first for e in executors):
        return None
    ids = {e.id for e in executors}
    costs = [p.startup_cpu_s for p in trace.hook.processes
             if p.source.startswith(EXECUTOR_PREFIX) and p.source[len(EXECUTOR_PREFIX):] in ids
             and p.startup_cpu_s is not None]
    if len(costs) != len(ids):
        return None
    busy = _busy_share(trace, trace.application.start, first)
    if busy is None:
        return None
    share, cpus = busy
    return StartUp(seconds, share, cpus, sum(costs) / len(costs), len(executors))


def _busy_share(trace: tr.Trace, start: float, end: float) -> tuple[float, int] | None:
    """How busy the machine's CPUs were between ``start`` and ``end``, from the source whose rows cover most of it,
    and their number."""
    by_source: dict[str, list[tr.IoSample]] = {}
    for row in sorted(trace.io, key=lambda r: r.t):
        by_source.setdefault(row.source, []).append(row)
    best: tuple[float, float, int] | None = None  # covered seconds, busy share, cpus
    for rows in by_source.values():
        busy = counter_series(rows, "host_cpu_busy_s")
        total = counter_series(rows, "host_cpu_s")
        cpus = max((r.host_cpus for r in rows if r.host_cpus), default=None)
        if busy is None or total is None or not cpus:
            continue
        a, b = max(start, busy.t[0]), min(end, busy.t[-1])
        capacity = total.between(a, b)
        if b - a <= 0 or capacity <= 0:
            continue
        if best is None or b - a > best[0]:
            best = (b - a, min(1.0, busy.between(a, b) / capacity), cpus)
    if best is None or best[0] < (end - start) / 2:
        return None
    return best[1], best[2]
