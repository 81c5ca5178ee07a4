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

A change of the executor count changes how much of a shuffle crosses the network: a reduce task fetches its
blocks from the map outputs of every executor, and those another executor of its own host wrote it reads from that
host's disk (Spark's ``spark.shuffle.readHostLocalDisk``, on by default), so with map outputs spread evenly over
``H`` hosts ``(H-1)/H`` of them are remote (none on one host). The hosts are the scenario's ``hosts``, else as many
as keep the traced run's executors per host. A task whose shuffle read was measured (remote and
total bytes) has its network time scaled from the remote share it saw to that of the new count; a task that
read everything locally (one host before) gets the new remote bytes over the link, shared with the tasks
of its executor that run beside it.

A change of the round-trip time between hosts (``rtt``) costs a task the round trips on its own path: its launch
(the driver sends it when the slot's previous task reported back: one round trip between driver and executor per
task, where executors are processes of their own) and its shuffle fetches (a reduce task sends its block
requests at once, at most ``FETCH_IN_FLIGHT_BYTES`` outstanding: one round trip per that many bytes it read
remotely, at least one). Bulk transfers are not slowed: TCP's window grows to the link's bandwidth-delay
product (Linux's default limit, 6 MiB, is 5 Gbit/s at 10 ms; this machine allows 32 MiB) and moves the bytes
at the link's rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from crystalperf.core import trace as tr
from crystalperf.core.predict.base import (
    STORAGE_READ_BYTES,
    Baseline,
    Changes,
    OpContext,
    TaskParts,
    any_unit_share,
    describe_rtt,
    job_metric_total,
    unit_metrics,
    unit_seconds,
)
from crystalperf.core.profile.dag import ExecutionProfile
from crystalperf.core.profile.outside import outside_time
from crystalperf.core.units import format_bandwidth, format_byte_rate, format_size

NETWORK_BUFFER_BYTES = 212_992
NETWORK_BUFFER_OVERHEAD_S = 25e-6  # bench/io_constants.py: 25.2 us (loopback ping-pong)
DISK_BUFFER_BYTES = 131_072
DISK_BUFFER_OVERHEAD_S = 0.6e-6  # bench/io_constants.py: 0.58 us (cached pread)
FETCH_IN_FLIGHT_BYTES = 48 * 2**20  # spark.reducer.maxSizeInFlight's default


def scale_io_time(t: float, bandwidth: float, new_bandwidth: float, buffer_bytes: float, overhead_s: float) -> float:
    """Algorithm 2 for one task's I/O time on one resource."""
    if t <= 0 or bandwidth == new_bandwidth:
        return t
    data = t * bandwidth
    processing = min(t, data / buffer_bytes * overhead_s)
    communication = t - processing
    return processing + communication * bandwidth / new_bandwidth


def scale_io_columns(t: np.ndarray, bandwidth: float, new_bandwidth: float, buffer_bytes: float,
                     overhead_s: float) -> np.ndarray:
    """:func:`scale_io_time` on many tasks' times at once."""
    if bandwidth == new_bandwidth:
        return t
    data = t * bandwidth
    processing = np.minimum(t, data / buffer_bytes * overhead_s)
    communication = t - processing
    return np.where(t > 0, processing + communication * bandwidth / new_bandwidth, t)


class _MovedBytes:
    """A bandwidth change applied to the bytes the job measurably moved: they arrive ``D/B' - D/B`` seconds
    later (or sooner), shared by the tasks that moved them (by their input bytes, else by their time on the
    resource), times the tasks that moved them side by side (they share the device or link). Savings are
    bounded by Algorithm 2 on the task's own time there: ``D/B`` overstates the old transfer time when some
    bytes came faster than ``B`` (a limit joined after start-up, a device's bursts)."""

    def __init__(self, resource: str, moved: float, old: float, new: float, weights: str, total: float) -> None:
        self.resource, self.moved, self.old, self.new = resource, moved, old, new
        self.extra_s = moved / new - moved / old
        self.weights, self.total = weights, total

    def adjust(self, parts: list[TaskParts], metrics: list[dict[str, float]], slots: int, width: int,
               count: int) -> None:
        side_by_side = min(slots, max(1, count, width))
        for p, m in zip(parts, metrics, strict=False):
            own = p.disk if self.resource == "disk" else p.network
            share = (m.get(tr.METRIC_INPUT_BYTES, 0.0) if self.weights == "input bytes" else own) / self.total
            extra = self.extra_s * share * side_by_side
            if extra < 0:
                # sooner bytes shorten the transfers, then the source's waits for them
                saving = min(-extra, (own + p.input_wait) * (1 - self.old / self.new))
                from_transfers = min(own, saving)
                p.input_wait = max(0.0, p.input_wait - (saving - from_transfers))
                extra = -from_transfers
            if self.resource == "disk":
                p.disk = max(0.0, p.disk + extra)
            else:
                p.network = max(0.0, p.network + extra)


class IOModel:
    """Network and disk bandwidth changes."""

    name = "io"
    keys = frozenset({"network", "disk", "executors", "hosts", "rtt"})

    def __init__(self) -> None:
        self.network: tuple[float, float] | None = None
        self.disk: tuple[float, float] | None = None
        self.moved: list[_MovedBytes] = []
        self.slots = 1
        self.locality: _ShuffleLocality | None = None
        self.round_trips: _RoundTrips | None = None
        self.point_unchanged = True  # changes nothing with the operations' measured vectors (prepare says)

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        self.network = self.disk = None
        self.moved = []
        self.slots = max(1, baseline.slots)
        self.locality = _ShuffleLocality.of(profile, baseline, changes)
        notes = [self.locality.note] if self.locality is not None else []
        self.round_trips, rtt_note = _RoundTrips.of(profile, changes)
        if rtt_note:
            notes.append(rtt_note)
        if "network" in changes:
            self.network = (baseline.network_bandwidth, changes.number("network", baseline.network_bandwidth))
            notes.append(f"network {format_bandwidth(self.network[0])} -> {format_bandwidth(self.network[1])}")
            seen = baseline.observed.get("network")
            total = unit_seconds(profile, "network")
            if baseline.network_idle:
                # What the samples call network time moved no bytes over a network: it is no link's to speed up.
                self.network = None
                notes.append("network: the job's network counters saw no traffic on any host its tasks ran on "
                             "(under 1 MiB each way): a bandwidth change leaves it as it is")
            elif seen is not None and total > 0:
                moved = _MovedBytes("network", seen.bytes, *self.network, "network time", total)
                self.moved.append(moved)
                self.network = None
                notes.append(f"network: the job's host {seen.direction} {format_size(seen.bytes)}; at the new "
                             f"bandwidth that takes {moved.extra_s:+.2f} s, shared by the tasks that waited on the "
                             f"network (counters of the whole network namespace: other traffic on the host counts)")
        if "disk" in changes:
            self.disk = (baseline.disk_bandwidth, changes.number("disk", baseline.disk_bandwidth))
            notes.append(f"disk {format_byte_rate(self.disk[0])} -> {format_byte_rate(self.disk[1])}")
            read = device_read_bytes(profile, baseline)
            input_bytes = job_metric_total(profile, lambda m: m.get(tr.METRIC_INPUT_BYTES, 0.0), memo="input_bytes")
            # who read is told by the input bytes, else by the disk time (a Flink source counts no input bytes)
            weights, total = ("input bytes", input_bytes) if input_bytes > 0 else ("disk time", unit_seconds(
                profile, "disk"))
            if read is not None and total > 0:
                moved = _MovedBytes("disk", read, *self.disk, weights, total)
                self.moved.append(moved)
                self.disk = None  # spill/shuffle disk time stays: the page cache serves it
                notes.append(f"disk: the job read {format_size(read)} from the storage device; at the new "
                             f"bandwidth that takes {moved.extra_s:+.2f} s, shared by the tasks reading input; "
                             f"spill/shuffle files and writes assumed served by the page cache")
        # Algorithm 2 scales each task's own time on the resource: where no operation's vector gives it any,
        # the point estimate has nothing to scale (a Monte Carlo draw of the vectors may still give it some).
        self.point_unchanged = (not self.moved and self.locality is None and self.round_trips is None
                                and (self.network is None or not any_unit_share(profile, "network"))
                                and (self.disk is None or not any_unit_share(profile, "disk")))
        return notes

    @property
    def unchanged(self) -> bool:
        return (self.network is None and self.disk is None and not self.moved and self.locality is None
                and self.round_trips is None)

    def adjust_columns(self, ctxs: Sequence[OpContext], parts: np.ndarray, task_unit: np.ndarray) -> bool:
        """``adjust`` on the tasks of many operations at once, for the bandwidth scaling of Algorithm 2 (bytes
        moved and shuffle locality are shared between tasks: those go task by task)."""
        if self.locality is not None or self.moved or self.round_trips is not None:
            return False
        if self.network:
            parts[:, 2] = scale_io_columns(parts[:, 2], *self.network, NETWORK_BUFFER_BYTES, NETWORK_BUFFER_OVERHEAD_S)
        if self.disk:
            parts[:, 1] = scale_io_columns(parts[:, 1], *self.disk, DISK_BUFFER_BYTES, DISK_BUFFER_OVERHEAD_S)
        return True

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        if self.locality is not None:
            self.locality.adjust(parts, unit_metrics(ctx))
        if self.round_trips is not None:
            self.round_trips.adjust(parts, unit_metrics(ctx))
        for p in parts:
            if self.network:
                p.network = scale_io_time(p.network, *self.network, NETWORK_BUFFER_BYTES, NETWORK_BUFFER_OVERHEAD_S)
            if self.disk:
                p.disk = scale_io_time(p.disk, *self.disk, DISK_BUFFER_BYTES, DISK_BUFFER_OVERHEAD_S)
        for moved in self.moved:
            # an operation adjusted as one unit (an operator on a streaming path) stands for its parallel tasks
            moved.adjust(parts, unit_metrics(ctx), self.slots, 1 if ctx.tasks else ctx.profile.op.parallelism or 1,
                         ctx.count or len(parts))
        return parts


def remote_share(executors: int) -> float:
    """The share of a shuffle's blocks a reduce task fetches from other executors, map outputs spread evenly."""
    return (executors - 1) / executors if executors > 1 else 0.0


@dataclass(frozen=True)
class _ShuffleLocality:
    """A new executor count: shuffle reads remote in a new share (module docstring)."""

    share_before: float  # what the traced run fetched remotely, of all it read
    share_after: float
    bandwidth: float  # bytes/s of one executor's link, for bytes that were local before
    side_by_side: int  # tasks of one executor sharing its link
    note: str

    @classmethod
    def of(cls, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> _ShuffleLocality | None:
        if "executors" not in changes and "hosts" not in changes:
            return None
        # a block another executor of the same host wrote is read from that host's disk, not fetched
        before, after = baseline.hosts_for(changes)
        read = job_metric_total(profile, lambda m: m.get(tr.METRIC_SHUFFLE_READ_BYTES, 0.0), memo="shuffle_read")
        if after == before or read <= 0:
            return None
        recorded = job_metric_total(profile, lambda m: float(tr.METRIC_SHUFFLE_REMOTE_READ_BYTES in m),
                                    memo="shuffle_remote_recorded")
        if not recorded:
            return None  # a hook that does not split remote from local: the share it saw is unknown
        remote = job_metric_total(profile, lambda m: m.get(tr.METRIC_SHUFFLE_REMOTE_READ_BYTES, 0.0),
                                  memo="shuffle_remote_read")
        bandwidth = changes.number("network", baseline.network_bandwidth)
        share = remote_share(after)
        note = (f"hosts {before} -> {after}: {share:.0%} of a shuffle's blocks are fetched from other "
                f"hosts (the traced run fetched {remote / read:.0%} of {format_size(read)} remotely); "
                f"shuffle network time scaled to that share")
        return cls(remote / read, share, bandwidth, max(1, baseline.cores_per_executor), note)

    @property
    def more_remote(self) -> bool:
        return self.share_after > self.share_before

    def adjust(self, parts: list[TaskParts], metrics: list[dict[str, float]]) -> None:
        for p, m in zip(parts, metrics, strict=False):
            read = m.get(tr.METRIC_SHUFFLE_READ_BYTES, 0.0)
            if read <= 0:
                continue
            seen = m.get(tr.METRIC_SHUFFLE_REMOTE_READ_BYTES, 0.0) / read
            if seen > 0:
                p.network *= self.share_after / seen
            else:
                p.network += read * self.share_after / self.bandwidth * self.side_by_side


@dataclass(frozen=True)
class _RoundTrips:
    """A new round-trip time between hosts: ``delta_s`` more (or less) for every round trip on a task's path
    (module docstring)."""

    delta_s: float
    launched_remotely: bool  # tasks ran in executors of their own, launched by a driver over the network

    @classmethod
    def of(cls, profile: ExecutionProfile, changes: Changes) -> tuple[_RoundTrips | None, str | None]:
        rtt = changes.rtt()
        if rtt is None or rtt[1] == rtt[0]:
            return None, None
        delta = rtt[1] - rtt[0]
        executors = {t.executor for op in profile.trace.iter_operations() for t in op.tasks if t.executor}
        remote = bool(executors - {"driver"}) and len(profile.trace.environment.executors) > 1
        fetched = job_metric_total(profile, lambda m: m.get(tr.METRIC_SHUFFLE_REMOTE_READ_BYTES, 0.0),
                                   memo="shuffle_remote_read")
        shown = describe_rtt(rtt)
        if not remote and fetched <= 0:
            return None, (f"{shown}: the tasks ran in the driver's process and fetched nothing from other hosts, "
                          "so no round trip between hosts is on their path")
        what = ["each task's launch"] if remote else []
        if fetched > 0:
            what.append(f"one per {format_size(FETCH_IN_FLIGHT_BYTES)} a task fetched from other executors "
                        f"({format_size(fetched)} in all)")
        return cls(delta, remote), f"{shown}: {delta * 1000:+g} ms for " + " and ".join(what)

    def adjust(self, parts: list[TaskParts], metrics: list[dict[str, float]]) -> None:
        for p, m in zip(parts, metrics, strict=False):
            if self.launched_remotely:
                p.fixed = max(0.0, p.fixed + self.delta_s)
            fetched = m.get(tr.METRIC_SHUFFLE_REMOTE_READ_BYTES, 0.0)
            if fetched > 0:
                p.network = max(0.0, p.network + self.delta_s * math.ceil(fetched / FETCH_IN_FLIGHT_BYTES))


def device_read_bytes(profile: ExecutionProfile, baseline: Baseline) -> float | None:
    """Bytes the job's processes read from the storage device while operations ran: the hook's job total, else
    what the trace's byte counters saw over the job, less what they read outside every operation (start-up, the
    driver between jobs: ``crystalperf.core.profile.outside``, which the simulation scales on its own)."""
    read = profile.trace.metrics.get(STORAGE_READ_BYTES)
    if read is None:
        seen = baseline.observed.get("disk")
        if seen is not None and seen.direction == "read":
            read = seen.bytes
    outside = outside_time(profile)
    if read is not None and outside is not None:
        read = max(0.0, read - outside.read_bytes)
    return read
