"""Compute devices (paper Algorithm 1): replay the tasks on N' slots, and scale CPU time by s/s'."""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Sequence

from crystalperf.core.predict.base import (
    DEFAULT_GPU_SPEEDUP,
    STORAGE_READ_BYTES,
    Baseline,
    Changes,
    OpContext,
    TaskParts,
)
from crystalperf.core.profile import ExecutionProfile

MAX_WARMUP = 3.0


def replay(
    durations: Sequence[float],
    slots: int,
    *,
    original_slots: int | None = None,
    warmup: float = 1.0,
) -> float:
    """Makespan of tasks run in their original order by a list scheduler on ``slots`` slots.

    Each task goes to the slot that frees first (Algorithm 1). A task that was in the first wave of
    the traced run (one of its first ``original_slots``) but is not in the new first wave ran slower
    than it needs to (JIT, caches, connections warming up): it is sped up by ``warmup``; a task moved
    into the new first wave is slowed down by it.
    """
    if not durations:
        return 0.0
    n_old = original_slots or slots
    free = [0.0] * max(1, slots)
    heapq.heapify(free)
    makespan = 0.0
    for i, d in enumerate(durations):
        was_first, is_first = i < n_old, i < slots
        if was_first and not is_first:
            d /= warmup
        elif is_first and not was_first:
            d *= warmup
        start = heapq.heappop(free)
        end = start + d
        heapq.heappush(free, end)
        makespan = max(makespan, end)
    return makespan


def estimate_warmup(profile: ExecutionProfile, slots: int) -> tuple[float, list[float]]:
    """First-wave over later-wave task duration, from operations with at least two waves.

    Returns the task-weighted mean factor (clamped to [1, 3]) and the per-operation factors."""
    factors: list[tuple[float, int]] = []
    for prof in profile.walk():
        tasks = sorted(prof.op.tasks, key=lambda t: t.start)
        if len(tasks) < 2 * slots or slots < 1:
            continue
        first = [t.duration for t in tasks[:slots]]
        later = [t.duration for t in tasks[slots:]]
        later_median = statistics.median(later)
        if later_median <= 0:
            continue
        factor = statistics.median(first) / later_median
        factors.append((min(MAX_WARMUP, max(1.0, factor)), len(tasks)))
    if not factors:
        return 1.0, []
    total = sum(n for _, n in factors)
    return sum(f * n for f, n in factors) / total, [f for f, _ in factors]


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
        device = changes.get("device")
        if device is not None and device != baseline.device:
            speedup = changes.number("gpu_speedup", DEFAULT_GPU_SPEEDUP)
            self.gpu_factor = 1 / speedup if device == "gpu" else speedup
            if "gpu_speedup" not in changes:
                notes.append(f"GPU assumed {speedup:g}x faster than the CPU on compute operations "
                             f"(set gpu_speedup=... to change)")
        return notes

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        factor = self.factor
        if self.gpu_factor != 1.0 and _is_device_op(ctx):
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
    disk_s = sum(
        prof.vector.vector.disk * (sum(t.duration for t in prof.op.tasks) if prof.op.tasks else prof.op.duration)
        for prof in profile.walk()
        if not prof.children
    )
    if disk_s <= 0:
        return 0.0
    return max(0.0, 1.0 - (read / baseline.disk_bandwidth) / disk_s)


def _is_device_op(ctx: OpContext) -> bool:
    """Operations a GPU would run: compute kernels, not input pipelines or host-side work."""
    attrs = ctx.profile.op.attributes
    placement = attrs.get("placement") or attrs.get("device_eligible")
    if placement is not None:
        return placement.lower() in ("device", "true", "gpu")
    return ctx.profile.op.kind in ("op", "kernel", "compute")
