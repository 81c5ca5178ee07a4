"""What a hook costs, and a CPU budget that keeps it small.

:class:`HookCpu` adds up the hook's own CPU time in a process, by part: the hook's own threads (a sampler, the I/O
counters) add their thread's CPU time per round of work (:meth:`HookCpu.own_thread`), and work the hook does on
the job's threads (a training callback) adds its elapsed time (:meth:`HookCpu.timed`): that code never blocks,
so its wall time is its CPU time, read without a system call. The trace's ``hook`` section is made of it
(:func:`process_cost`), and so is the budget.

:class:`CpuBudget` is a budget, not a rate: it keeps a balance of the CPU time the hook may still use (``share`` of
the cores the process may use, :func:`allowed_cores`: its CPUs, cpuset and CPU quota, accrued per second, less what
the hook spent), and a sampler's :class:`Pace` waits after each round until the balance has paid back what the
hook owes, never less than its configured interval and never more than ``floor_s`` (what the analysis needs: a
sample per time bucket). It adapts from the first round, so a job of a few seconds keeps to the budget too; the
balance holds at most ``WINDOW_S`` of the budget either way, so a burst (a job's first tasks, a GC) neither buys
a later one nor throws the interval far. The rate is also reported over windows of ``WINDOW_S`` (how many were
over the budget). The Java hooks run the same rule (``org.crystalperf.common.CpuBudget``).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator

from crystalperf.core import trace as tr
from crystalperf.core.record import cgroups

DEFAULT_SHARE = 0.01
SHARE_ENV = "CRYSTALPERF_CPU_BUDGET"
WINDOW_S = 2.0


class HookCpu:
    """The hook's CPU seconds in this process, by part (thread-safe)."""

    def __init__(self) -> None:
        self._parts: dict[str, float] = {}
        self._lock = threading.Lock()
        self._nested = threading.local()  # per thread: time of the inner timed blocks of each open one

    def add(self, part: str, seconds: float) -> None:
        if seconds > 0:
            with self._lock:
                self._parts[part] = self._parts.get(part, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """Work the hook does on the job's thread: its elapsed time (the code never blocks). A block timed inside
        another counts for its own part only."""
        inner: list[float] = self._nested.__dict__.setdefault("open", [])
        started = time.perf_counter()
        inner.append(0.0)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self.add(part, elapsed - inner.pop())
            if inner:
                inner[-1] += elapsed

    @contextlib.contextmanager
    def own_thread(self, part: str) -> Iterator[None]:
        """A round of work on one of the hook's own threads: that thread's CPU time."""
        started = time.thread_time()
        try:
            yield
        finally:
            self.add(part, time.thread_time() - started)

    def parts(self) -> dict[str, float]:
        with self._lock:
            return dict(self._parts)

    def since(self, start: dict[str, float]) -> dict[str, float]:
        """The parts counted after ``start`` (an earlier :meth:`parts`): one hook's share of a process that ran
        others before it (a notebook's earlier fits, a client's earlier jobs)."""
        return {k: v - start.get(k, 0.0) for k, v in self.parts().items()}

    def reset(self) -> None:
        """Forget what was counted (a forked process starts from nothing of its parent's)."""
        with self._lock:
            self._parts.clear()

    def total(self) -> float:
        with self._lock:
            return sum(self._parts.values())


# The process's accounting: every hook of a process adds to it, so one budget covers them all.
PROCESS = HookCpu()


def parse_share(text: str) -> float | None:
    """``text`` as a budget's share of the cores, a number in [0, 1]; None if it is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value <= 1 else None


def share_from_env(default: float = DEFAULT_SHARE) -> float:
    """The budget's share of the cores: ``CRYSTALPERF_CPU_BUDGET`` when it is a number in [0, 1]."""
    raw = os.environ.get(SHARE_ENV, "").strip()
    value = parse_share(raw) if raw else None
    return default if value is None else value


class CpuBudget:
    """``share`` of ``cores``, over the CPU seconds ``spent()`` returns (default: :data:`PROCESS`'s) and a
    ``clock`` in seconds; a share of 0 turns it off (the samplers keep their intervals)."""

    def __init__(self, share: float = DEFAULT_SHARE, cores: float | None = None,
                 spent: Callable[[], float] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share if math.isfinite(share) and share > 0 else 0.0
        self.cores = max(0.01, cores if cores is not None else allowed_cores())
        self.spent = spent if spent is not None else PROCESS.total
        self.clock = clock
        self._window_start = self._seen_at = clock()
        self._spent_at_start = self._spent_seen = self.spent()
        self._balance = 0.0
        self.windows = 0
        self.windows_over = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.share > 0

    @property
    def allowed_rate(self) -> float:
        """CPU seconds per second the hook may use."""
        return self.share * self.cores

    def owed(self) -> float:
        """The CPU seconds the hook has spent beyond its budget so far (0 when within it); closes a reporting
        window when it is long enough."""
        with self._lock:
            now, spent = self.clock(), self.spent()
            limit = self.allowed_rate * WINDOW_S
            earned = self.allowed_rate * (now - self._seen_at)
            self._balance = max(-limit, min(limit, self._balance + earned - (spent - self._spent_seen)))
            self._seen_at, self._spent_seen = now, spent
            if now - self._window_start >= WINDOW_S:
                rate = (spent - self._spent_at_start) / (now - self._window_start)
                self._window_start, self._spent_at_start = now, spent
                self.windows += 1
                if rate > self.allowed_rate:
                    self.windows_over += 1
            return max(0.0, -self._balance)


class Pace:
    """One sampler's interval under a budget: call :meth:`next` after each round that sampled something (it is
    counted as ``interval / base`` rounds of the configured rate, so the thinning is known), :meth:`adapt` after
    one that found nothing; both return the next wait."""

    def __init__(self, budget: CpuBudget | None, base_s: float, floor_s: float) -> None:
        self.budget = budget
        self.base_s = max(1e-3, base_s)
        self.floor_s = max(self.base_s, floor_s)
        self.interval_s = self.base_s
        self.taken = 0
        self._planned = 0.0

    @property
    def planned(self) -> int:
        """Rounds the configured interval would have taken over the same time."""
        return round(self._planned)

    def next(self) -> float:
        self.taken += 1
        self._planned += self.interval_s / self.base_s
        return self.adapt()

    def adapt(self) -> float:
        """The wait that pays back what the hook owes, within [base, floor]."""
        budget = self.budget
        if budget is None or not budget.enabled:
            return self.interval_s
        payback = budget.owed() / budget.allowed_rate
        self.interval_s = min(self.floor_s, max(self.base_s, payback))
        return self.interval_s


def allowed_cores() -> float:
    """The cores this process may use: the CPUs it may run on (affinity, cpuset), fewer where a CPU quota says so
    (:func:`crystalperf.core.record.cgroups.cpu_limit`)."""
    found = cgroups.cpu_limit()
    return max(0.01, found) if found is not None else float(os.cpu_count() or 1)


def process_cpu_seconds() -> float:
    """This process's CPU seconds (every thread)."""
    return time.process_time()


def process_cost(source: str, parts: dict[str, float], *, host: str | None = None,
                 process_cpu_s: float | None = None, budget: CpuBudget | None = None,
                 paces: list[Pace] | None = None) -> tr.HookProcess:
    """The trace's entry for one process."""
    paces = paces or []
    return tr.HookProcess(
        source=source, host=host, cpu_s=sum(parts.values()), parts={k: v for k, v in parts.items() if v > 0},
        process_cpu_s=process_cpu_s, cores=budget.cores if budget is not None else None,
        budget_share=budget.share if budget is not None else None,
        samples_taken=sum(p.taken for p in paces) if paces else None,
        samples_planned=max(sum(p.taken for p in paces), sum(p.planned for p in paces)) if paces else None,
        windows=budget.windows if budget is not None else None,
        windows_over_budget=budget.windows_over if budget is not None else None)


def add_hook_part(trace: tr.Trace, source: str, part: str, seconds: float) -> None:
    """Adds what the hook spent on something the trace could not hold when it was written (writing it) to the
    process's entry (made where there is none)."""
    if not seconds > 0 or not math.isfinite(seconds):
        return
    if trace.hook is None:
        trace.hook = tr.HookCost()
    entry = next((p for p in trace.hook.processes if p.source == source), None)
    if entry is None:
        entry = tr.HookProcess(source=source, cpu_s=0.0)
        trace.hook.processes.append(entry)
    entry.parts[part] = entry.parts.get(part, 0.0) + seconds
    entry.cpu_s += seconds
    if entry.process_cpu_s is not None:
        entry.process_cpu_s += seconds  # the process spent them too, after the figure was taken


def add_hook_processes(trace: tr.Trace, processes: list[tr.HookProcess]) -> None:
    """Adds the hook cost of processes recorded apart from the trace (the PySpark workers' journals)."""
    if not processes:
        return
    if trace.hook is None:
        trace.hook = tr.HookCost()
    trace.hook.processes.extend(processes[: 100_000 - len(trace.hook.processes)])
