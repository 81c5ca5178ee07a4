"""I/O and network (paper Algorithm 2).

For a task with I/O time ``t`` at bandwidth ``B``: it moved ``D = t*B`` bytes in ``D/S_B`` buffers;
the per-buffer processing ``t_p = (D/S_B)*o`` does not depend on the bandwidth, the communication
``t_c = t - t_p`` scales with ``B/B'``.

Constants: ``S_B`` is Linux's default socket receive buffer (``net.core.rmem_default`` = 212,992
bytes) for the network and the default read-ahead window (128 KiB) for disks; the per-buffer
overheads were measured on our 2-core machine by ``bench/io_constants.py`` (syscall and wake-up cost
of one buffer whose bytes cost nothing), see docs/whatif.md.
"""

from __future__ import annotations

from crystalperf.core.predict.base import Baseline, Changes, OpContext, TaskParts
from crystalperf.core.profile import ExecutionProfile
from crystalperf.core.units import format_bandwidth, format_byte_rate

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

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        self.network = self.disk = None
        notes = []
        if "network" in changes:
            self.network = (baseline.network_bandwidth, changes.number("network", baseline.network_bandwidth))
            notes.append(f"network {format_bandwidth(self.network[0])} -> {format_bandwidth(self.network[1])}")
        if "disk" in changes:
            self.disk = (baseline.disk_bandwidth, changes.number("disk", baseline.disk_bandwidth))
            notes.append(f"disk {format_byte_rate(self.disk[0])} -> {format_byte_rate(self.disk[1])}")
        return notes

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        for p in parts:
            if self.network:
                p.network = scale_io_time(p.network, *self.network, NETWORK_BUFFER_BYTES, NETWORK_BUFFER_OVERHEAD_S)
            if self.disk:
                p.disk = scale_io_time(p.disk, *self.disk, DISK_BUFFER_BYTES, DISK_BUFFER_OVERHEAD_S)
        return parts
