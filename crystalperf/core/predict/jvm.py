"""What a TaskManager's JVM does beside the job's threads that a change of its CPUs or its records moves.

A JVM whose collector its ergonomics chose takes the serial collector when it sees fewer than two processors
(HotSpot's server-class test): a CPU share or a CPU mask of one CPU. Where the trace names the collector and splits
its threads (schema 1.7), a G1 JVM's concurrent threads (remembered-set refinement, marking: ``gc_concurrent``) then
have nothing to do, and the machine limit drops their CPU time; the pause work stays, done by one thread. Measured on
the word count job (``python -m bench.whatif.jvm_threads``): G1's pause workers 11.8 / 18.2 CPU-s and its concurrent
threads 11.1 / 12.1 CPU-s at two CPUs; the serial collector 17.6 / 20.7 CPU-s on one. The serial collector does
more than G1's pauses (it scans its card table in each pause, where G1 refined the cards beside the job) and less
than G1 in all, so this predicts somewhat less work than the run does: the share of G1's concurrent work that
becomes pause work depends on the job's old-to-young references, which the trace does not show.

The heap a TaskManager's subtasks share is a ceiling too. An old collection (a full or mixed one) takes time in
proportion to the live data it keeps, and comes when the old generation's free room, ``H - L``, has filled with what
the process promoted: the records still in flight at each young collection, which come as often as the young
generation (a share of the heap: ``NewRatio``, G1's young sizing) fills, so what is promoted grows with the records
and shrinks with the heap. Its collector's CPU time for the old generation goes as ``records / H * L / (H - L)``,
and so explodes as the live data fills the heap. Where the trace has the heap's size, the
live data after its old collections and the split of the collections' time (schema 1.11), a change that gives each
process ``f`` times its records (a parallelism spread over ``1/f`` times the TaskManagers) scales that CPU time by
``f * (fL / (H - fL)) / (L / (H - L))`` (a heap of ``H'`` instead: ``H'`` in the new terms, and ``H / H'`` as
much promoted), the live data taken to be the job's (state, buffered records), so that it
follows the records per process; a TaskManager's own (tens of MB) counted with it overstates the relief where the
heap holds mostly that. Each of the ``1/f`` processes collects its own old generation. The young collections' CPU time
follows the records, which the processes share out, and ``H / H'``: they come as often as the young generation fills
and each copies what survives, the records in flight. Past ``MAX_LIVE_SHARE`` of the heap the JVM would collect
without end or fail, which no runtime describes: the share is held there and the note says so. Measured on the
namespaced cluster (the scale case ``flink/cluster-sha`` of ``docs/accuracy.md``: one-slot TaskManagers with a 156 MB
heap and the serial collector, a datagen sequence source that keeps its subtask's values): at parallelism 1 the old
generation was 64-67 % live after 68-84 full collections that took 5.6-7.7 s; at 2 each TaskManager collected it
once, 56-76 MB live, its collector using 0.21-0.30 CPU-s where the model gives each 0.83 CPU-s; the model predicted
3.0x the speed (4.11 s), the runs gave 2.99x: the second TaskManager's compilers and other threads, which it leaves
out, took what the collections it overstates did not.

A fresh JVM (a mini cluster, a per-job cluster) also takes a page fault for each 4 KiB of heap it first touches,
in the thread that touches it, and more subtasks side by side in one process cost more of them: they allocate
faster, so the collector grows more young generation, and faults taken at once contend in the kernel. Where the
trace has each task process's kernel time (schema 1.13), a change that puts ``s`` times the traced subtasks side by
side in each process gives its task threads' kernel time ``s`` times itself (:class:`FirstTouch`; the process's
whole kernel time where the trace does not split the task threads' out). Measured on the Flink scale cases
(``python -m bench.whatif.cpu_per_row``, ``docs/whatif.md``, "Known limits"): parallelism 1 -> 2 took the kernel
time 2.3x (groupby-warm, 0.85 -> 1.95 CPU-s) and 2.6x (stream-files, 2.46 -> 6.50 CPU-s), on 1.4x and 1.6x the
faults, so ``s`` understates the growth there; 85-95 % of it was the task threads'. A Spark SQL job hashing rows
in one fresh local JVM spent 0.55-0.72 CPU-s of its 13 in the kernel at ``local[1]`` and at ``local[2]`` alike,
0.14-0.28 of it in its task threads: its tasks allocate little, and what the JVM's other threads fault in does not
grow with the tasks. The kernel time also holds the reads from the page cache, which do not grow, so ``s``
overstates the growth where those are much of it. A process whose heap was touched before the job (a TaskManager
that has run for a while) has little kernel time over the job and nothing to scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crystalperf.core import trace as tr

# HotSpot takes a machine for a server, and lets its ergonomics pick G1 (JDK 9+) rather than the serial collector,
# from this many processors (os::is_server_class_machine; the memory half of the test, 1792 MB, every host meets).
SERVER_CLASS_PROCESSORS = 2
# The most of a heap the live data is taken to fill under a change: beyond it a JVM collects without end or fails.
MAX_LIVE_SHARE = 0.95


@dataclass(frozen=True)
class Heap:
    """One process's heap over the traced run: its size, the live data after its old collections and the CPU-s its
    collector spent on the old generation (its threads' CPU time, in the old collections' share of the collections'
    time)."""

    max_bytes: float
    live_bytes: float
    old_gc_s: float
    young_gc_s: float = 0.0  # its collector's CPU-s in the young collections' share

    @property
    def live_share(self) -> float:
        return self.live_bytes / self.max_bytes

    def old_gc_at(self, records: float, heap: float = 1.0) -> float:
        """The old collections' CPU-s with ``records`` times the traced records in the process and ``heap`` times its
        heap (see the module doc)."""
        traced = min(self.live_share, MAX_LIVE_SHARE)
        changed = min(self.live_share * records / heap, MAX_LIVE_SHARE)
        # what is promoted: the records still in flight at each young collection, which come as often as the young
        # generation (a share of the heap) fills
        promoted = records / heap
        if traced <= 0:
            return self.old_gc_s * promoted
        return self.old_gc_s * promoted * (changed / (1 - changed)) / (traced / (1 - traced))

    def savings(self, records: float, heap: float = 1.0) -> float:
        """CPU-s the collections of the processes this one becomes would not spend (negative: would spend more), with
        ``records`` times the traced records in each (``1 / records`` of them) and ``heap`` times its heap. Each
        collects its own old generation. The young collections come as often as the young generation (a share of the
        heap) fills and each copies what survives, the records in flight: their CPU time follows the records, which
        the processes share out, and the inverse of the heap."""
        return self.old_gc_s - self.old_gc_at(records, heap) / records + self.young_gc_s * (1 - 1 / heap)


def heaps(trace: tr.Trace) -> list[Heap]:
    """The :class:`Heap` of every process whose trace entry has its heap's size, its live data after old collections
    and its collector's CPU time split from the rest."""
    found = []
    for executor in trace.environment.executors:
        collector, cpu = executor.garbage_collector, executor.thread_cpu
        if collector is None or cpu is None or not collector.heap_max_bytes or collector.live_bytes is None:
            continue
        old, young = collector.old_collection_s or 0.0, collector.young_collection_s or 0.0
        if old <= 0:
            continue
        found.append(Heap(collector.heap_max_bytes, collector.live_bytes, cpu.gc * old / (old + young),
                          cpu.gc * young / (old + young)))
    return found


def largest_heap(trace: tr.Trace) -> float | None:
    """The largest heap of the trace's processes (schema 1.11), None where no process recorded one."""
    sizes = [e.garbage_collector.heap_max_bytes for e in trace.environment.executors
             if e.garbage_collector is not None and e.garbage_collector.heap_max_bytes]
    return float(max(sizes)) if sizes else None


def serial_at(processors: int, cpu_share: float) -> bool:
    """Whether a JVM that saw ``processors`` would see fewer than ``SERVER_CLASS_PROCESSORS`` at that share."""
    return math.ceil(processors * cpu_share - 1e-9) < SERVER_CLASS_PROCESSORS <= processors


def ergonomic_g1(trace: tr.Trace) -> list[tuple[int, float]]:
    """(processors, concurrent collector CPU-s) of every process whose trace entry says its JVM ran G1 by the
    ergonomics' choice (no collector option) and splits its collector's threads."""
    found = []
    for executor in trace.environment.executors:
        collector, cpu = executor.garbage_collector, executor.thread_cpu
        if (collector is not None and cpu is not None and collector.family == "g1" and collector.option is None
                and collector.processors and cpu.gc_concurrent > 0):
            found.append((collector.processors, cpu.gc_concurrent))
    return found


@dataclass(frozen=True)
class FirstTouch:
    """The kernel CPU-s of the processes that ran the job's tasks over the job, their page faults served from memory,
    their CPU-s in all, and the part of that kernel time in their task threads (None: not split; schema 1.13; see
    the module doc)."""

    kernel_s: float
    faults: int
    process_cpu_s: float
    task_kernel_s: float | None = None

    @property
    def scaled_s(self) -> float:
        """The kernel CPU-s that grow with the subtasks side by side: the task threads' where the trace splits it (the
        rest is the collector's, the compilers', the framework's own threads'), else all of it."""
        return self.task_kernel_s if self.task_kernel_s is not None else self.kernel_s

    @property
    def share(self) -> float:
        """The scaled kernel time's share of the processes' CPU time."""
        return self.scaled_s / self.process_cpu_s if self.process_cpu_s > 0 else 0.0

    def extra_s(self, side_by_side: float) -> float:
        """CPU-s more (negative: fewer) with ``side_by_side`` times the traced subtasks side by side in each process."""
        return self.scaled_s * (side_by_side - 1.0)

    def note(self, side_by_side: float) -> str | None:
        """The change in words (None: no change)."""
        if abs(side_by_side - 1.0) < 1e-9 or self.scaled_s <= 0:
            return None
        if self.task_kernel_s is not None:
            whose = (f"the task threads spent {self.scaled_s:.2f} CPU-s in the kernel over the job (their processes "
                     f"{self.kernel_s:.2f}, ")
        else:
            whose = f"the task processes spent {self.kernel_s:.2f} CPU-s in the kernel over the job ("
        return (f"page faults: {whose}{self.faults:,} page faults memory served: a JVM first touching its heap); "
                f"{side_by_side:.2g} times the subtasks side by side in each take {self.scaled_s * side_by_side:.2f} "
                "CPU-s there")


def first_touch(trace: tr.Trace) -> FirstTouch | None:
    """The :class:`FirstTouch` of the trace's task processes, where each one that split its CPU by thread kind also
    counted its kernel time and page faults (a Flink TaskManager, a Spark executor: schema 1.13); else None. The task
    threads' part counts where every process split it out."""
    cpus = [e.thread_cpu for e in trace.environment.executors if e.thread_cpu is not None]
    if not cpus or any(c.kernel is None or c.minor_faults is None for c in cpus):
        return None
    split = all(c.task_kernel is not None for c in cpus)
    return FirstTouch(sum(c.kernel or 0.0 for c in cpus), sum(c.minor_faults or 0 for c in cpus),
                      sum(c.total for c in cpus), sum(c.task_kernel or 0.0 for c in cpus) if split else None)
