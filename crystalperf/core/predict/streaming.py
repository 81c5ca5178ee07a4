"""Throughput of a pipelined (streaming) job from the CPU its operators' threads used and the bytes its
busiest network link carried.

Every operator chain runs as one thread per subtask, all chains at once. A bounded stream therefore
takes as long as the largest of three limits: the busiest subtask thread (a chain's CPU work spread over its
subtasks), the machine (the CPU the job's processes need — task threads, but also serialisation,
network and GC threads — over the CPUs it may use) and, on a cluster, the busiest link (the bytes it carried
in its busier direction over its bandwidth: links run side by side, each host's as fast as its own).
Changing the parallelism moves the first limit, a CPU share or a CPU count moves the second, a faster CPU
moves both, a bandwidth change moves the third.

A round-trip change (``rtt``) moves the third too: Flink's credit-based flow control lets a receiving subtask
hold at most a window of buffers per remote input gate (``EXCLUSIVE_BUFFERS`` per remote channel and
``FLOATING_BUFFERS`` shared by the gate, of ``SEGMENT_BYTES`` each: Flink's fixed numbers since 2.0 and its
defaults before), and a sender sends only against credit it was given, so a link into a host carries at most
that host's windows once per round trip. The link's bandwidth becomes ``min(B, window / RTT)``: nothing at a
data centre's 0.2 ms (13 Gbit/s for one channel), a limit at 10 ms (260 Mbit/s). That bound holds where only the
round trip holds a credit back. Where the traced run's senders waited for credit most of the time, something on the
path also took time per buffer (the senders' Netty threads, the links, the receivers' stacks and task threads, which
return a credit only once they consumed its buffer), and a buffer may queue there behind others: the window's
buffers circulate through a closed loop of a delay (the round trip, which every buffer spends at once) and a server
(the path, one buffer at a time). Exact mean-value analysis of that loop (``credit_loop_rate``) gives its
throughput at any round trip from the window and the path's time per buffer, which the traced rate gives back at
the traced round trip. Near the knee, where the round trip alone would just let the path's rate through, a buffer
waits at the server the bound leaves out: measured on the namespaced cluster (``docs/accuracy.md``) at +5 ms the
job took 11.8 s where both bounds said 9.7 s, and the loop 11.1 s.

Where the trace splits each TaskManager's CPU time by thread kind (``Executor.thread_cpu``, schema 1.6), the
machine limit counts only the work a run must do whatever its length (``WORK_KINDS``: the task threads, the
network threads that move the records, the collector, whose work follows what the records allocate, and the JIT
compilers, which compile a job's code once per run). The rest (the other threads: timers, heartbeats, RPC, the
reporter's sampler; and the JobManager) is background the processes pay per second they run, ``b`` CPU-s/s over
the traced span: small wake-ups that yield to the work when the CPUs are busy, so they set no limit. Without
the split all of the processes' CPU time is work, as before the split was recorded: a run traced while a slow
link held it back then counts the background of its long wait as work a faster link would have to redo.

A JVM's collector moves with the CPUs and the records it is given (``core.predict.jvm``): the serial collector its
ergonomics take below two processors, and the heap a TaskManager's subtasks share, whose old collections grow
with how full of live data it is.

The traced runtime ``D`` is at least the traced limit ``T``; the part of it beyond ``T`` is time the limits
did not set (start-up, a rate-limited source, waits). A slower configuration needs ``max(D, T')``: extra
work first fills that slack. A faster one saves what the limit saves, ``D - (T - T')``. Both in one:
``max(T', D - max(0, T - T'))``. So a job paced by its input keeps its runtime until a change pushes a
limit past it: predictions assume the observed input rate (paper §7.1).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from crystalperf.core import trace as tr
from crystalperf.core.predict import jvm
from crystalperf.core.predict.base import Changes, describe_rtt
from crystalperf.core.predict.jvm import MAX_LIVE_SHARE, Heap, ergonomic_g1, heaps, serial_at
from crystalperf.core.profile.bottleneck import Pace
from crystalperf.core.profile.dag import ExecutionProfile
from crystalperf.core.profile.machine import ClusterSpread
from crystalperf.core.units import format_bandwidth, format_size

# Changes this model answers (a network change too where it knows the busiest link); anything else (disk,
# memory...) is left to the resource models.
KEYS = frozenset({"parallelism", "cpu_share", "cpu_speed"})
# Below this fraction of the runtime the limits did not set the pace (said in the note only).
SATURATED = 0.75
# An exchange stalled this share of the run or more (senders backpressured, receivers idle) shows the link between
# them set the pace: 0.90 behind a 50 Mbit/s link on the namespaced cluster, 0.24-0.36 at 1 Gbit/s.
STALLED = 0.5
# Thread kinds (trace.ThreadCpu fields) whose CPU time a run pays whatever its length: the rest is paid per second.
# Measured on the namespaced cluster (bench.whatif.flink_cluster), a run of 58 s behind 50 Mbit/s links against
# one of 5-6 s at 1 Gbit/s: "other" 3.7-4.0 against 0.6-0.9 CPU-s (per second), JIT 1.6-2.3 against 1.1-3.0 (per run),
# GC 0.75 against 0.47 (mostly per record); a CPU-bound Yahoo run compiled for 8.8 of its 62 CPU-s.
WORK_KINDS = ("task", "network", "gc", "jit", "gc_concurrent")
# Flink's credit-based flow control (NettyShuffleEnvironmentConfiguration: fixed since 2.0, the defaults of
# taskmanager.network.memory.buffers-per-channel / floating-buffers-per-gate / taskmanager.memory.segment-size
# before): buffers a receiver grants a remote input channel of its own, buffers its input gate shares among them.
EXCLUSIVE_BUFFERS = 2
FLOATING_BUFFERS = 8
SEGMENT_BYTES = 32 * 1024
# Credit loops up to this many buffers are solved exactly (the recursion's cost grows with them); larger ones by
# Schweitzer's approximation.
EXACT_LOOP_BUFFERS = 1024
# Edges whose records stay in their subtask (no channel to another process).
_LOCAL_STRATEGIES = ("FORWARD",)


@dataclass(frozen=True)
class Chain:
    """One operator chain: the CPU seconds of each of its subtasks' busiest thread (the subtask's CPU time, unless
    its threads ran side by side: a FLIP-27 source's split fetchers beside its task thread, :func:`busiest_thread`)."""

    cpu_s: Sequence[float]


@dataclass(frozen=True)
class Link:
    """The busiest network link of the job: the bytes it carried in its busier direction, and the bandwidth
    (bytes/s) the traced run had on it."""

    bytes: float
    bandwidth: float
    active_s: float | None = None  # seconds in which the counters saw it move the job's data (None: unknown)
    # The bandwidth is the link's capacity, declared by the hook; else it is the rate the job was seen to reach,
    # which a job held back by anything else reaches too.
    declared: bool = False


@dataclass(frozen=True)
class StreamingCpu:
    chains: Sequence[Chain]
    process_cpu_s: float  # all CPU the job's processes used, task threads included
    cpu_count: int
    runtime_s: float
    link: Link | None = None  # None: no link's bytes known, network changes are left to the resource models
    # The part of process_cpu_s a run pays whatever its length (WORK_KINDS) and the rest, the background, in CPU-s
    # per second of the traced span, where the trace split the CPU time by thread kind; None: all of it is work.
    work_cpu_s: float | None = None
    background_per_s: float = 0.0
    # The largest share of the run in which an exchange's senders were backpressured while its receivers sat
    # idle: the records were in neither's hands but on their way (None: the trace has no such times).
    stalled_exchange: float | None = None
    # The credit window (bytes) into the host that grants the least of it: what crosses a link per round trip
    # (None: no input channel crossed hosts, or the trace does not say where subtasks ran).
    window_bytes: float | None = None
    # The host granting that window also sends records to another host: its credits leave through the same
    # queue as its own records and wait behind them (see ``predict``).
    window_shares_queue: bool = False
    # The largest share of their run time an exchange's senders over a link waited for buffers to send into: its
    # credits held them back (None: the trace has no such times).
    credit_waits: float | None = None
    # The JVMs whose ergonomics chose G1: (processors each saw, CPU-s of its collector's concurrent threads).
    ergonomic_g1: Sequence[tuple[int, float]] = ()
    # The workers a parallelism runs on, where the trace says what the cluster had (None: the traced CPUs stay).
    spread: ClusterSpread | None = None
    # The heaps of the processes that ran the job's tasks, where the trace has their live data (schema 1.11).
    heaps: Sequence[Heap] = ()
    first_touch: jvm.FirstTouch | None = None  # their kernel time, where the trace has it (schema 1.13)

    @classmethod
    def of(cls, trace: tr.Trace, runtime_s: float, link: Link | None = None,
           spread: ClusterSpread | None = None) -> StreamingCpu | None:
        """The inputs from a trace that has them (the Flink reporter with sampling on), else None. ``link``: the
        busiest link, where the trace's byte counters saw one carry the job's data; ``spread``: the cluster's
        workers, where the trace says what it had."""
        utilization = trace.metrics.get("cpu_utilization")
        count = trace.environment.cpu_count
        duration = trace.application.duration
        chains = []
        for op in trace.operations:
            if not op.tasks:
                continue
            cpu = [busiest_thread(t) for t in op.tasks]
            if any(c is None for c in cpu):
                return None
            chains.append(Chain([float(c) for c in cpu if c is not None]))
        if not chains or not utilization or not count or duration <= 0 or runtime_s <= 0:
            return None
        if link is not None and (link.bytes <= 0 or link.bandwidth <= 0):
            link = None
        process = utilization * duration
        stalled = stalled_exchange(trace)
        window, shares_queue = credit_window(trace), credits_share_a_queue(trace)
        waits = credit_waits(trace)
        work = work_cpu(trace)
        if work is None:
            return cls(chains, process, count, runtime_s, link, stalled_exchange=stalled, window_bytes=window,
                       window_shares_queue=shares_queue, credit_waits=waits, spread=spread)
        work = min(work, process)
        return cls(chains, process, count, runtime_s, link, work, (process - work) / duration, stalled, window,
                   shares_queue, waits, ergonomic_g1(trace), spread, heaps(trace), jvm.first_touch(trace))

    def limit(self, parallelism: int | None = None, cpu_share: float = 1.0, cpu_speed: float = 1.0,
              bandwidth: float | None = None, heap_bytes: float | None = None) -> float:
        """Seconds the job needs at the given parallelism (None: as traced), CPU share, speed, bandwidth of the
        busiest link (bytes/s; None: as traced) and heap of each process (bytes; None: as traced)."""
        # The busiest subtask keeps its share of the chain's work (its skew), and one subtask does it all.
        thread = max(
            min(sum(c.cpu_s), max(c.cpu_s) * (len(c.cpu_s) / parallelism if parallelism else 1.0))
            for c in self.chains
            if c.cpu_s
        )
        network = self.link.bytes / (bandwidth or self.link.bandwidth) if self.link is not None else 0.0
        return max(thread / cpu_speed, self.machine(cpu_share, cpu_speed, parallelism, heap_bytes), network)

    def machine(self, cpu_share: float = 1.0, cpu_speed: float = 1.0, parallelism: int | None = None,
                heap_bytes: float | None = None) -> float:
        """The machine limit: seconds the job's CPU time needs on its CPUs at that share and speed, the CPUs of as
        many of the cluster's workers as the parallelism (None: as traced) takes. A worker more also compiles and
        collects for itself: left out (a second or so of a JVM's compilers, beside the job's CPU-s)."""
        workers = self.workers(parallelism)
        if self.work_cpu_s is None:
            work = self.process_cpu_s
        else:
            work = self.work_cpu_s - self.serial_savings(cpu_share) - self.heap_savings(1 / workers, heap_bytes)
            if self.first_touch is not None and parallelism:  # subtasks side by side in each process: s times
                work += self.first_touch.extra_s(parallelism / max(len(c.cpu_s) for c in self.chains) / workers)
        return max(0.0, work) / (self.cpu_count * workers * cpu_share) / cpu_speed

    def workers(self, parallelism: int | None) -> float:
        """How many times the traced workers a parallelism runs on (1: as traced, or the trace does not say)."""
        return self.spread.factor(parallelism) if self.spread is not None and parallelism else 1.0

    def heap_savings(self, records: float, heap_bytes: float | None = None) -> float:
        """CPU-s the collections would not spend (negative: would spend more) with ``records`` times the traced
        records in each process and a heap of ``heap_bytes`` each (None: as traced)."""
        if records == 1.0 and heap_bytes is None:
            return 0.0
        return sum(heap.savings(records, heap_bytes / heap.max_bytes if heap_bytes else 1.0) for heap in self.heaps)

    def heap_note(self, changes: Changes) -> str | None:
        """What a change of the records or the heap per process does to the collections, in words (None: nothing)."""
        workers = self.workers(cpu_changes(changes)[0])
        heap_bytes = heap_change(changes)
        if (workers == 1.0 and heap_bytes is None) or not any(h.old_gc_s + h.young_gc_s > 0 for h in self.heaps):
            return None
        heap = max(self.heaps, key=lambda h: h.old_gc_s)
        traced = sum(h.old_gc_s + h.young_gc_s for h in self.heaps)
        new = traced - self.heap_savings(1 / workers, heap_bytes)
        changed = [f"{1 / workers:.2g} times the records per process"] if workers != 1.0 else []
        if heap_bytes is not None:
            changed.append(f"a heap of {format_size(heap_bytes)}")
        text = (f"the heap: the old generation was {100 * heap.live_share:.0f} % live after its collections "
                f"({format_size(heap.live_bytes)} of {format_size(heap.max_bytes)}), and the collections took {traced:.2f} "
                f"CPU-s; with {' and '.join(changed)}, {new:.2f} CPU-s"
                + (f" ({new / workers:.2f} per process)" if workers != 1.0 else ""))
        if heap.live_bytes / workers > MAX_LIVE_SHARE * (heap_bytes or heap.max_bytes):
            text += (f" at least: the live data would fill more than {100 * MAX_LIVE_SHARE:.0f} % of the heap, where "
                     "the JVM collects without end or fails with OutOfMemoryError")
        return text

    def serial_savings(self, cpu_share: float) -> float:
        """CPU-s of G1's concurrent threads in the JVMs that would take the serial collector at that CPU share: those
        whose ergonomics chose G1 and that would see fewer than ``SERVER_CLASS_PROCESSORS`` processors (a quota or a
        mask of ``share`` of them, rounded up as the JVM's container support does)."""
        return sum(concurrent for processors, concurrent in self.ergonomic_g1
                   if serial_at(processors, cpu_share))

    def collector_note(self, changes: Changes) -> str | None:
        """The collector change a CPU share brings, in words (None: none)."""
        share = changes.number("cpu_share", 1.0)
        saved = self.serial_savings(share)
        if not saved:
            return None
        return (f"cpu share {share:g}: the JVM sees one processor and its ergonomics take the serial garbage "
                f"collector instead of G1: {saved:.2f} CPU-s of G1's concurrent threads (refinement, marking) are not "
                "spent, its pause work is (a serial pause also scans the cards G1 refined beside the job, which this "
                "leaves out)")

    @property
    def keys(self) -> frozenset[str]:
        """The what-if keys this model answers: the CPU's; the link's where it knows the busiest link; ``memory``
        (each process's heap) where it knows the heaps' live data."""
        return KEYS | ({"network", "rtt"} if self.link is not None else set()) | ({"memory"} if self.heaps else set())

    def predict(self, changes: Changes) -> float | None:
        """The runtime under changes, or None when they involve resources this model does not cover."""
        if not set(changes.values) <= self.keys:
            return None
        parallelism, share, speed = cpu_changes(changes)
        heap_bytes = heap_change(changes)
        # the traced run's bandwidth as the user stated it (network=OLD:NEW), else as the trace gave it
        old = changes.baselines.get("network", self.link.bandwidth if self.link is not None else None)
        new = changes.number("network", old) if old is not None else None
        rtt = changes.rtt()
        if rtt is not None and old is not None and new is not None and self.window_bytes:
            # what the credits let through a round trip bounds the link, before and after
            old, new = self.credit_rates(changes, rtt, old, new)
        before = self.limit(bandwidth=old)
        after = self.limit(parallelism, share, speed, new, heap_bytes)
        runtime = max(after, self.runtime_s - max(0.0, before - after))
        if self.link is not None and self.link.active_s is not None and new is not None:
            link_s = self.link.bytes / new
            idle = max(0.0, self.runtime_s - self.link.active_s)
            cpu = self.limit(parallelism, share, speed, float("inf"), heap_bytes)
            if link_s > cpu:
                # The link sets the pace: the job's time is the transfer's plus the time the counters saw the
                # link carry nothing (deployment, the first records, the last window's output), which no
                # bandwidth shortens and the slack rule above lets the slower transfer absorb.
                runtime = max(runtime, link_s + idle)
            elif old is not None and self.link.bytes / old > self.limit(bandwidth=float("inf")):
                # The link set the traced pace and the change hands it to the CPUs. The slack rule would add the
                # link's idle seconds to the CPU limit, but that limit holds the CPU time of the whole traced run,
                # those seconds included (the first records' serialisation, JIT, the last window): counted once.
                runtime = max(cpu, link_s + idle)
        return runtime

    def band(self, changes: Changes) -> tuple[float, float] | None:
        """Where a CPU limit set the traced pace, the runtime with and without the seconds of the traced run beyond
        it (start-up, the first records, the last output: what the limits do not explain, which the point estimate
        lets extra work fill): the new limit alone, and the new limit with those seconds. None where the changes
        are not this model's CPU changes or the job was paced by its input or a link."""
        if not set(changes.values) <= self.keys - {"network", "rtt"} or self.pace().limit not in ("thread", "machine"):
            return None
        after = self.limit(*cpu_changes(changes), heap_bytes=heap_change(changes))
        return after, after + max(0.0, self.runtime_s - self.limit())

    def credit_rates(self, changes: Changes, rtt: tuple[float, float], old: float, new: float) -> tuple[float, float]:
        """The busiest link's rate (bytes/s) as the credits leave it, traced and under the changes, from its bandwidth
        before and after (``old``, ``new``) and the round trips."""
        assert self.window_bytes
        delay_old, delay_new = self.credit_delays(changes, rtt)
        service = self.buffer_service_s(delay_old)
        if service is None:
            return min(old, self.window_bytes / delay_old), min(new, self.window_bytes / delay_new)
        # a bandwidth change changes the path's time per buffer by the buffer's time on the wire
        changed = max(0.0, service + SEGMENT_BYTES / new - SEGMENT_BYTES / old)
        return (min(old, credit_loop_rate(self.window_bytes, delay_old, service)),
                min(new, credit_loop_rate(self.window_bytes, delay_new, changed)))

    def credit_delays(self, changes: Changes, rtt: tuple[float, float]) -> tuple[float, float]:
        """Seconds a credit takes to come back, traced and under the changes: the round trip, plus its wait behind
        the receiver's own records where that is counted (``credit_queueing``)."""
        queued = self.credit_queueing(changes)
        return (rtt[0] + queued[0], rtt[1] + queued[1]) if queued else rtt

    def buffer_service_s(self, delay_s: float) -> float | None:
        """Seconds the path took per buffer in the traced run, where its senders waited for credit for at least
        ``STALLED`` of their time (the credit loop set the traced rate): the time per buffer at which the loop, at the
        traced round trip, moves the link's bytes at the rate the counters saw while it carried them. None where the
        loop did not set the rate (the round trip's bound is all that is known), or the rate is not known."""
        if (self.link is None or not self.window_bytes or not self.link.active_s
                or (self.credit_waits or 0.0) < STALLED):
            return None
        return credit_loop_service(self.window_bytes, delay_s, self.link.bytes / self.link.active_s)

    def capacity(self, changes: Changes) -> float | None:
        """The busiest link's capacity (bytes/s) in the traced run: stated by the user (``network=OLD:NEW``) or
        declared by the hook; None where only the rate the job reached is known."""
        if "network" in changes.baselines:
            return changes.baselines["network"]
        return self.link.bandwidth if self.link is not None and self.link.declared else None

    def credit_queueing(self, changes: Changes) -> tuple[float, float] | None:
        """Seconds a credit waits per round trip, traced and under the changes, where the receiving host's credits
        share its outgoing queue with its own records: a receiver that also sends (both ends of a keyed exchange
        do) has up to a window of records queued ahead of the credit it returns, as many bytes as the other side
        granted it, which the link drains at its capacity. Measured on the namespaced cluster at +10 ms: 2.2-2.8 ms
        a round trip on top of the delay, where a 320 KiB window takes 2.6 ms at 1 Gbit/s. None where the queue
        is not shared or the capacity is not known (the rate the job reached understates a link it did not fill,
        and would overstate the wait)."""
        capacity = self.capacity(changes)
        if not self.window_shares_queue or not self.window_bytes or not capacity:
            return None
        return self.window_bytes / capacity, self.window_bytes / changes.number("network", capacity)

    def window_note(self, changes: Changes) -> str | None:
        """What a round-trip change does to the link, in words (None: the scenario does not change it)."""
        rtt = changes.rtt()
        if rtt is None:
            return None
        shown = describe_rtt(rtt)
        if not self.window_bytes:
            return f"{shown}: no input channel of this job crossed hosts, so no credit waits on a round trip"
        queued = self.credit_queueing(changes)
        old, new = self.credit_delays(changes, rtt)
        text = (f"{shown}: Flink's credits let {format_size(self.window_bytes)} into the busiest receiving host per "
                f"round trip, at most {format_bandwidth(self.window_bytes / new)} "
                f"(from {format_bandwidth(self.window_bytes / old)})")
        service = self.buffer_service_s(old)
        if service is not None:
            loop = credit_loop_rate(self.window_bytes, new, service)
            text += (f"; its senders waited for credit {100 * (self.credit_waits or 0.0):.0f} % of their time and the path "
                     f"took {service * 1000:.2f} ms a buffer, where the buffers queue: {format_bandwidth(loop)}")
        if queued:
            text += (f"; its credits wait {queued[1] * 1000:.1f} ms a round trip behind the records it sends the "
                     "other way")
        elif self.window_shares_queue:
            text += ("; its credits also wait behind the records it sends the other way, left out: state the link's "
                     "capacity (network=CAPACITY:CAPACITY) to count them")
        return text

    def pace(self) -> Pace:
        """Which limit set the traced run's pace, and what each limit was."""
        # the link first: where it ties with a CPU limit, the link is what the records wait for
        limits = {"link": self.link.bytes / self.link.bandwidth} if self.link is not None else {}
        limits["thread"] = max(max(c.cpu_s) for c in self.chains if c.cpu_s)
        limits["machine"] = self.machine()
        candidates = [k for k in limits if k != "link" or self.link_confirmed()]
        binding = max(candidates, key=lambda k: limits[k])
        if limits[binding] < SATURATED * self.runtime_s:
            binding = "input"
        return Pace(binding, limits, self.runtime_s)

    def link_confirmed(self) -> bool:
        """Whether the busiest link's seconds are a limit and not merely the time the job took: its bandwidth is
        the declared capacity, or the records sat between senders held back and receivers waiting for them for
        most of the run (a link moving all a job sent at the rate it was sent shows no stall)."""
        if self.link is None:
            return False
        return self.link.declared or (self.stalled_exchange or 0.0) >= STALLED

    def note(self) -> str:
        pace = self.pace()
        busiest = pace.limits["thread"]
        paced = {"link": "bound by its busiest link", "input": "paced by its input"}.get(pace.limit, "CPU-bound")
        if self.link is not None and pace.limit != "link" and pace.limits["link"] >= SATURATED * self.runtime_s:
            paced += " (its busiest link was busy, but its senders and receivers did not wait on each other)"
        text = (f"streaming throughput: busiest subtask thread {busiest:.2f} CPU-s, the job's processes "
                f"{self.process_cpu_s:.2f} CPU-s on {self.cpu_count} CPUs")
        if self.work_cpu_s is not None:
            text += (f" ({self.work_cpu_s:.2f} CPU-s in task, network, GC and JIT threads; the rest, "
                     f"{self.background_per_s:.2f} CPU-s a second of background, sets no limit)")
        if self.link is not None:
            text += (f", the busiest link {format_size(self.link.bytes)} at {format_bandwidth(self.link.bandwidth)} "
                     f"({pace.limits['link']:.2f} s)")
        return f"{text}, over {self.runtime_s:.2f} s: {paced}; predictions assume the observed input rate"


def stalled_exchange(trace: tr.Trace) -> float | None:
    """The largest share of the run in which an exchange (a top-level operation and one it reads from) had its
    senders backpressured and its receivers idle: the smaller of the two shares of their tasks' run time. None
    where no exchange has both times measured."""
    by_id = {op.id: op for op in trace.operations}
    best: float | None = None
    for receiver in trace.operations:
        idle = _time_share(receiver, tr.METRIC_IDLE_TIME)
        if idle is None:
            continue
        for parent in receiver.parents:
            sender = by_id.get(parent)
            backpressured = _time_share(sender, tr.METRIC_BACKPRESSURED_TIME) if sender is not None else None
            if backpressured is not None:
                best = max(best or 0.0, min(idle, backpressured))
    return best


def credit_waits(trace: tr.Trace) -> float | None:
    """The largest share of their run time the senders of an exchange over a link (``_shipping_exchanges``) were
    backpressured: their output buffers were full, waiting for credit. None where no such sender has the time."""
    shares = [_time_share(sender, tr.METRIC_BACKPRESSURED_TIME) for sender, _ in _shipping_exchanges(trace)]
    known = [share for share in shares if share is not None]
    return max(known) if known else None


def credit_loop_rate(window_bytes: float, delay_s: float, service_s: float) -> float:
    """Bytes/s through a credit loop: the window's buffers (``SEGMENT_BYTES`` each) circulate between a delay that
    every buffer spends at once (``delay_s``: the round trip and a credit's queueing) and a server that takes
    ``service_s`` a buffer, one at a time. Exact mean-value analysis of the closed network (Reiser and Lavenberg),
    service times exponential: between the bounds ``window / (delay + service)`` (the round trip holds the
    buffers) and ``SEGMENT_BYTES / service`` (the server is never idle), below both near the knee, where buffers
    queue at the server. ``service_s`` 0: the first bound. Above ``EXACT_LOOP_BUFFERS`` buffers (a host with hundreds
    of remote channels) Schweitzer's approximation takes the place of the exact recursion, whose cost grows with
    the buffers; it is within a few per cent of it and exact at both bounds."""
    buffers = max(1, round(window_bytes / SEGMENT_BYTES))
    if service_s <= 0:
        return window_bytes / delay_s
    queue = rate = 0.0
    if buffers > EXACT_LOOP_BUFFERS:
        # the queue one buffer finds is the others' share of the whole loop's queue; iterate to its fixed point
        queue = buffers * service_s / (delay_s + buffers * service_s) * buffers
        for _ in range(200):
            response = service_s * (1.0 + queue * (buffers - 1) / buffers)
            rate = buffers / (delay_s + response)
            queue = 0.5 * queue + 0.5 * rate * response
        return rate * SEGMENT_BYTES
    for circulating in range(1, buffers + 1):
        response = service_s * (1.0 + queue)
        rate = circulating / (delay_s + response)
        queue = rate * response
    return rate * SEGMENT_BYTES


def credit_loop_service(window_bytes: float, delay_s: float, rate: float) -> float:
    """The server's seconds a buffer at which ``credit_loop_rate`` gives ``rate`` (bytes/s) at ``delay_s``; 0 where
    the delay alone explains the rate (it reached the round trip's bound)."""
    if rate >= window_bytes / delay_s:
        return 0.0
    # the loop's rate falls as the server slows, from the bound at 0 to nothing: bisect on a log scale
    low, high = 1e-9, SEGMENT_BYTES / rate
    for _ in range(100):
        middle = math.sqrt(low * high)
        if credit_loop_rate(window_bytes, delay_s, middle) > rate:
            low = middle
        else:
            high = middle
    return math.sqrt(low * high)


def heap_change(changes: Changes) -> float | None:
    """The heap of each process the changes give (``memory``, bytes); None: as traced."""
    if "memory" not in changes:
        return None
    return changes.number("memory", 0.0) or None


def cpu_changes(changes: Changes) -> tuple[int | None, float, float]:
    """The parallelism (None: as traced), CPU share and CPU speed the changes give, as ``limit`` takes them."""
    return int(changes.number("parallelism", 0)) or None, changes.number("cpu_share", 1.0), changes.number("cpu_speed", 1.0)


def long_running(profile: ExecutionProfile) -> bool:
    """Whether the job is one operator chain of long-running subtasks (a Flink job whose operators all chained):
    its subtasks run side by side from its start to its end, as a pipeline's chains do, with no other chain to
    overlap. A trace with streaming figures is such a job's (the hook ran its subtasks so); one whose operation
    recorded fewer tasks than its parallelism ran them in waves and is not."""
    nodes = list(profile.top.nodes.values())
    if profile.trace.streaming is None or len(nodes) != 1:
        return False
    op = nodes[0].op
    return bool(op.tasks) and op.parallelism == len(op.tasks)


def busiest_thread(task: tr.Task) -> float | None:
    """CPU seconds of the task's busiest thread: where its reader threads ran beside its main thread (a FLIP-27
    source's fetchers, ``reader_cpu_time_s``), the larger of their part and the main thread's; else its CPU time
    (None: not measured). Each of a subtask's threads runs on one core at a time, so its busiest thread, not the
    sum, is what a subtask of fewer or more records takes longer or shorter for."""
    cpu = task.metrics.get(tr.METRIC_CPU_TIME)
    threads = task.metrics.get(tr.METRIC_THREADS_CPU_TIME)
    reader = task.metrics.get(tr.METRIC_READER_CPU_TIME)
    if cpu is None or threads is None or reader is None:
        return cpu
    return min(cpu, max(threads - reader, reader))


def _time_share(op: tr.Operation, metric: str) -> float | None:
    run = part = 0.0
    for task in op.tasks:
        waited, ran = task.metrics.get(metric), task.metrics.get(tr.METRIC_RUN_TIME)
        if waited is None or not ran:
            continue
        part += waited
        run += ran
    return min(1.0, part / run) if run > 0 else None


def work_cpu(trace: tr.Trace) -> float | None:
    """CPU seconds of the job's processes that scale with its records (``WORK_KINDS``), added up over the
    TaskManagers; None unless every process that ran a task split its CPU time by thread kind."""
    executors = {e.id: e for e in trace.environment.executors}
    used = {t.executor for op in trace.iter_operations() for t in op.tasks}
    if not executors or not used or None in used or not used <= set(executors):
        return None
    if any(e.thread_cpu is None for e in executors.values()):
        return None
    return sum(getattr(e.thread_cpu, kind) for e in executors.values() for kind in WORK_KINDS
               if e.thread_cpu is not None)


def credit_window(trace: tr.Trace) -> float | None:
    """The credit window (bytes) of the receiving host that grants the least of it: per input gate of a subtask,
    ``EXCLUSIVE_BUFFERS`` for each channel from a subtask in another process on another host, and
    ``FLOATING_BUFFERS`` shared by them, summed over the host's gates. None where no channel crossed hosts or
    the subtasks' places are not in the trace."""
    windows: dict[str, float] = {}
    for sender, receiver in _shipping_exchanges(trace):
        for task in receiver.tasks:
            if task.host is None or task.executor is None:
                return None
            remote = sum(1 for s in sender.tasks
                         if s.host is not None and s.host != task.host and s.executor != task.executor)
            if remote:
                windows[task.host] = windows.get(task.host, 0.0) + (
                    EXCLUSIVE_BUFFERS * remote + FLOATING_BUFFERS) * SEGMENT_BYTES
    return min(windows.values()) if windows else None


def credits_share_a_queue(trace: tr.Trace) -> bool:
    """Whether every host that receives records over a link also sends records over one: the credits it returns
    then leave in the same queue as its own records (a keyed exchange between hosts, both ways)."""
    receiving: set[str] = set()
    sending: set[str] = set()
    for sender, receiver in _shipping_exchanges(trace):
        senders = {t.host for t in sender.tasks if t.host is not None}
        receivers = {t.host for t in receiver.tasks if t.host is not None}
        # a host receives over a link where a sender runs on another host, and sends where a receiver does
        receiving |= {h for h in receivers if senders - {h}}
        sending |= {h for h in senders if receivers - {h}}
    return bool(receiving) and receiving <= sending


def _shipping_exchanges(trace: tr.Trace) -> list[tuple[tr.Operation, tr.Operation]]:
    """(sender, receiver) of every edge whose records may leave their subtask (not ``FORWARD``)."""
    by_id = {op.id: op for op in trace.operations}
    edges = []
    for receiver in trace.operations:
        strategies = ship_strategies(receiver)
        for parent in receiver.parents:
            sender = by_id.get(parent)
            if sender is not None and strategies.get(parent, "").split("[", 1)[0].strip().upper() not in _LOCAL_STRATEGIES:
                edges.append((sender, receiver))
    return edges


def ship_strategies(op: tr.Operation) -> dict[str, str]:
    """Parent id -> how records reach ``op`` from it (``HASH[k]``, ``FORWARD``...), from the ``ship_strategy``
    attribute the Flink hook writes (``chain0: HASH[k, w], chain1: FORWARD``: a strategy may hold commas)."""
    text = op.attributes.get("ship_strategy", "")
    if not text or not op.parents:
        return {}
    ids = "|".join(re.escape(p) for p in sorted(op.parents, key=len, reverse=True))
    return dict(re.findall(rf"(?:^|, )({ids}): (.*?)(?=, (?:{ids}): |$)", text))
