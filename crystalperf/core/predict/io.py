"""I/O and network (paper Algorithm 2).

For a task with I/O time ``t`` at bandwidth ``B``: it moved ``D = t*B`` bytes in ``D/S_B`` buffers;
the per-buffer processing ``t_p = (D/S_B)*o`` does not depend on the bandwidth, the communication
``t_c = t - t_p`` scales with ``B/B'``.

Constants: ``S_B`` is Linux's default socket receive buffer (``net.core.rmem_default`` = 212,992
bytes) for the network and the default read-ahead window (128 KiB) for disks; the per-buffer
overheads were measured on our 2-core machine by ``bench/io_constants.py`` (syscall and wake-up cost
of one buffer whose bytes cost nothing), see docs/whatif.md.

When the trace measured the bytes the job's processes read from the storage device
(``storage_read_bytes``: ``read_bytes`` of /proc/<pid>/io, page-cache hits excluded), a disk change is
modelled from those bytes instead: the device delivers them ``R/B' - R/B`` seconds later (or sooner),
shared by the tasks that read input (by their input bytes) and by the slots they ran on side by side.
Disk time of spill and shuffle files is left alone: written and read back within the job, it is served
by the page cache and never waits on the device. Writes are assumed absorbed by the page cache too.
"""

from __future__ import annotations

from crystalperf.core import trace as tr
from crystalperf.core.predict.base import (
    STORAGE_READ_BYTES,
    Baseline,
    Changes,
    OpContext,
    TaskParts,
    job_unit_metrics,
    unit_metrics,
)
from crystalperf.core.profile import ExecutionProfile
from crystalperf.core.units import format_bandwidth, format_byte_rate, format_size

NETWORK_BUFFER_BYTES = 212_992
NETWORK_BUFFER_OVERHEAD_S = 25e-6  # bench/io_constants.py: 25.2 us (loopback ping-pong)
DISK_BUFFER_BYTES = 131_072
DISK_BUFFER_OVERHEAD_S = 0.6e-6  # bench/io_constants.py: 0.58 us (cached pread)


def scale_io_time(t: float, bandwidth: float, new_bandwidth: float, buffer_bytes: float, overhead_s: float) -> float:
    """Algorithm 2 for one task's I/O time on one resource."""
    if t <= 0 or bandwidth == new_bandwidth:
        return t
    data = t * bandwidth
    processing = min(t, data / buffer_bytes * overhead_s)
    communication = t - processing
    return processing + communication * bandwidth / new_bandwidth


class IOModel:
    """Network and disk bandwidth changes."""

    name = "io"
    keys = frozenset({"network", "disk"})

    def __init__(self) -> None:
        self.network: tuple[float, float] | None = None
        self.disk: tuple[float, float] | None = None
        self.device_extra_s = 0.0  # the device's extra (or saved, < 0) seconds for the measured reads
        self.input_bytes = 0.0  # input bytes of all tasks: who shares the device's extra time
        self.slots = 1

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        self.network = self.disk = None
        notes = []
        if "network" in changes:
            self.network = (baseline.network_bandwidth, changes.number("network", baseline.network_bandwidth))
            notes.append(f"network {format_bandwidth(self.network[0])} -> {format_bandwidth(self.network[1])}")
        self.device_extra_s, self.input_bytes, self.slots = 0.0, 0.0, max(1, baseline.slots)
        if "disk" in changes:
            self.disk = (baseline.disk_bandwidth, changes.number("disk", baseline.disk_bandwidth))
            notes.append(f"disk {format_byte_rate(self.disk[0])} -> {format_byte_rate(self.disk[1])}")
            read = profile.trace.metrics.get(STORAGE_READ_BYTES)
            self.input_bytes = sum(m.get(tr.METRIC_INPUT_BYTES, 0.0) for m in job_unit_metrics(profile))
            if read is not None and self.input_bytes > 0:
                old, new = self.disk
                self.device_extra_s = read / new - read / old
                self.disk = None  # spill/shuffle disk time stays: the page cache serves it
                notes.append(f"disk: the job read {format_size(read)} from the storage device; at the new "
                             f"bandwidth that takes {self.device_extra_s:+.2f} s, shared by the tasks reading input; "
                             f"spill/shuffle files and writes assumed served by the page cache")
        return notes

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        for p in parts:
            if self.network:
                p.network = scale_io_time(p.network, *self.network, NETWORK_BUFFER_BYTES, NETWORK_BUFFER_OVERHEAD_S)
            if self.disk:
                p.disk = scale_io_time(p.disk, *self.disk, DISK_BUFFER_BYTES, DISK_BUFFER_OVERHEAD_S)
        if self.device_extra_s and self.input_bytes > 0:
            # tasks that read side by side share the device: each waits for the others' bytes too
            side_by_side = min(self.slots, max(1, len(parts)))
            for p, m in zip(parts, unit_metrics(ctx), strict=False):
                share = m.get(tr.METRIC_INPUT_BYTES, 0.0) / self.input_bytes
                p.disk = max(0.0, p.disk + self.device_extra_s * share * side_by_side)
        return parts
