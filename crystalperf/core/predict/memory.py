"""Memory: a reversed roofline (paper §5).

Below the job's data size ``D``, the bytes that do not fit, ``X(M) = D - M``, go to disk and back:
runtime falls linearly as memory grows, with a slope set by how much slower the disk is than memory
(``2/B_disk - 1/B_mem`` seconds per byte: written once, read once, instead of read from memory).
From ``M >= D`` on, everything fits and runtime stays flat.
"""

from __future__ import annotations

from crystalperf.core import trace as tr
from crystalperf.core.predict.base import (
    DEFAULT_MEMORY_BANDWIDTH,
    Baseline,
    Changes,
    OpContext,
    TaskParts,
    job_metric_total,
    unit_metrics,
)
from crystalperf.core.profile.dag import ExecutionProfile
from crystalperf.core.units import format_size

_DISK_BYTES = (tr.METRIC_INPUT_BYTES, tr.METRIC_OUTPUT_BYTES, tr.METRIC_SHUFFLE_WRITE_BYTES)
_DATA_BYTES = (tr.METRIC_SHUFFLE_WRITE_BYTES, tr.METRIC_SHUFFLE_READ_BYTES, tr.METRIC_INPUT_BYTES,
               tr.METRIC_SPILL_MEMORY_BYTES)


def overflow(data: float, memory: float) -> float:
    return max(0.0, data - memory)


class MemoryModel:
    name = "memory"
    keys = frozenset({"memory"})

    def __init__(self) -> None:
        self.active = False
        self.ratio = 1.0  # X(M')/X(M) when the traced run spilled
        self.extra_s = 0.0  # seconds of new spilling when the traced run did not spill
        self.weight_total = 0.0
        self.disk_bandwidth = 1.0

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        self.active = False
        self.ratio, self.extra_s, self.weight_total = 1.0, 0.0, 0.0
        if "memory" not in changes:
            return []
        if baseline.memory_bytes is None:
            return ["memory: the trace does not say how much memory the job had; no change predicted"]
        if baseline.data_bytes is None:
            return ["memory: the trace records no data size (cached/spilled bytes); no change predicted"]
        data, memory = baseline.data_bytes, float(baseline.memory_bytes)
        new_memory = changes.number("memory", memory)
        before, after = overflow(data, memory), overflow(data, new_memory)
        self.disk_bandwidth = baseline.disk_bandwidth
        note = (f"memory {format_size(memory)} -> {format_size(new_memory)} for {format_size(data)} of data "
                f"({format_size(before)} -> {format_size(after)} not fitting)")
        if before > 0:
            self.ratio = after / before
            self.active = self.ratio != 1.0
        elif after > 0:
            per_byte = 2.0 / baseline.disk_bandwidth - 1.0 / DEFAULT_MEMORY_BANDWIDTH
            self.extra_s = after * max(0.0, per_byte)
            self.weight_total = job_metric_total(profile, _weight, memo="memory_data_bytes")
            self.active = self.extra_s > 0 and self.weight_total > 0
        return [note]

    @property
    def unchanged(self) -> bool:
        return not self.active

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        if not self.active:
            return parts
        for p, m in zip(parts, unit_metrics(ctx), strict=False):
            if self.extra_s:
                p.disk += self.extra_s * _weight(m) / self.weight_total
                continue
            spill_s = self._spill_time(p, m)
            if spill_s <= 0:
                continue
            delta = spill_s * (self.ratio - 1.0)
            if p.disk > 0:
                p.disk = max(0.0, p.disk + delta)
            else:
                p.cpu = max(0.0, p.cpu + delta)
        return parts

    def _spill_time(self, p: TaskParts, m: dict[str, float]) -> float:
        spilled = m.get(tr.METRIC_SPILL_DISK_BYTES, 0.0)
        if spilled <= 0:
            return 0.0
        if p.disk > 0:
            other = sum(m.get(k, 0.0) for k in _DISK_BYTES)
            return p.disk * spilled / (spilled + other)
        # Spilling the vector did not see as disk (serialisation shows as CPU): estimate from bytes.
        return min(p.total, 2 * spilled / self.disk_bandwidth)


def _weight(metrics: dict[str, float]) -> float:
    return sum(metrics.get(k, 0.0) for k in _DATA_BYTES)
