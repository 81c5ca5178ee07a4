"""The bandwidth the job saw, from the byte counters its hooks read during the run (``Trace.io``).

What-ifs scale I/O and network time from the bandwidth the job had (paper Algorithm 2's ``B``): a job traced
behind a 40 Mbit/s link asked about 100 Mbit/s gets faster by what that link change gives, not slower because
the hardware was assumed to be 10 Gbit/s. The counters say how many bytes moved and when; the rate in the
windows where the job moved data, taken at their upper quartile (a saturated link or throttled device runs at
a plateau; ramps and partial windows fall below it), is the bandwidth the job saw. A cgroup limit in force
while the job read is the device bandwidth it had, exactly.

Counters are per source (a driver, a TaskManager, a Python process); network counters are namespace-wide, so
two sources in one namespace see the same bytes: sources of one host and namespace are not added twice.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from crystalperf.core import trace as tr
from crystalperf.core.units import format_bandwidth, format_byte_rate, format_seconds, format_size

WINDOW_S = 1.0  # rates over at least a second: one 250 ms row of a bursty link says little
MIN_BYTES = 1 << 20  # below a MiB moved, the rate is noise (a heartbeat, a jar load)
# A device's rate needs more: a program that reads a few MiB from it (a JVM's jars and classes, a configuration) reads
# them as fast as it asks for them, not as fast as the device moves them, and a rate under a MiB a second from such
# reads would scale every disk what-if and the time between the operations. Under a cgroup limit the limit is known.
DISK_MIN_BYTES = 16 << 20
ACTIVE_SHARE = 0.2  # a window moving at least this share of the fastest window's rate is "moving data"
QUANTILE = 0.75

RESOURCES = ("network", "disk")
# Counter sources (``IoSample.source``) of the processes that run a cluster job's tasks, and of those that only
# coordinate them.
WORKERS = ("executor:", "taskmanager:")
COORDINATORS = ("driver", "jobmanager:")
# Sources of Flink's processes that run tasks, whose names are not the tasks' executor ids: TaskManagers, and the
# local mini cluster (the JVM a PyFlink program starts). Spark's executors are named by their ids.
FLINK_RUNNERS = ("taskmanager:", "minicluster:")
_COUNTERS = {
    "network": (("network_rx_bytes", "received"), ("network_tx_bytes", "sent")),
    "disk": (("storage_read_bytes", "read"), ("storage_write_bytes", "written")),
}


@dataclass(frozen=True)
class ObservedBandwidth:
    """What one resource carried for the job."""

    resource: str  # "network" or "disk"
    direction: str  # the direction that moved more bytes: received/sent, read/written
    bytes: float  # moved in that direction over the job
    active_s: float  # seconds of windows in which the job moved data
    bandwidth: float  # bytes/s the job saw while it moved data (all its tasks together)
    limit: float | None = None  # a cgroup limit in force while it moved data (disk), bytes/s
    sources: int = 1

    @property
    def conclusive(self) -> bool:
        """Whether the rate is the device's or the link's: a disk's needs DISK_MIN_BYTES read or written, or a
        cgroup limit in force (the bytes say how busy it was either way)."""
        return self.resource != "disk" or self.limit is not None or self.bytes >= DISK_MIN_BYTES

    @property
    def effective(self) -> float:
        """The bandwidth the job had: the limit in force where one was, else what it was seen moving."""
        return self.limit if self.limit is not None else self.bandwidth

    def describe(self) -> str:
        rate = format_bandwidth if self.resource == "network" else format_byte_rate
        if not self.conclusive:
            return (f"{self.resource}: {format_size(self.bytes)} {self.direction} in {format_seconds(self.active_s)} "
                    f"at up to {rate(self.bandwidth)}, too little to say what the device moves")
        text = (f"{self.resource} bandwidth {rate(self.effective)} as the job saw it: {format_size(self.bytes)} "
                f"{self.direction} in {format_seconds(self.active_s)} of transfer at up to {rate(self.bandwidth)}")
        if self.limit is not None:
            text += f"; a cgroup limit of {rate(self.limit)} was in force"
        return text


class CounterSeries:
    """A cumulative counter of one process (or host) as a function of time, linear between readings."""

    def __init__(self, points: Sequence[tuple[float, float]]) -> None:
        self.t = [p[0] for p in points]
        self.v = [p[1] for p in points]

    def at(self, t: float) -> float:
        i = bisect.bisect_left(self.t, t)
        if i <= 0:
            return self.v[0]
        if i >= len(self.t):
            return self.v[-1]
        t0, t1, v0, v1 = self.t[i - 1], self.t[i], self.v[i - 1], self.v[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1

    def between(self, a: float, b: float) -> float:
        return max(0.0, self.at(b) - self.at(a))


def counter_series(rows: Sequence[tr.IoSample], name: str) -> CounterSeries | None:
    points: list[tuple[float, float]] = []
    for row in rows:
        value = getattr(row, name)
        if value is None:
            continue
        if points and value < points[-1][1]:  # a restarted process: count on from where it was
            value = points[-1][1] + value
        points.append((row.t, float(value)))
    return CounterSeries(points) if len(points) >= 2 else None


def _span_rows(rows: Sequence[tr.IoSample], start: float, end: float) -> list[tr.IoSample]:
    """The rows within the job's span, plus the last one before and the first one after it (the bytes of the
    interval that straddles a boundary belong partly to the job)."""
    ordered = sorted(rows, key=lambda r: r.t)
    inside = [i for i, r in enumerate(ordered) if start <= r.t <= end]
    if not inside:
        before = [i for i, r in enumerate(ordered) if r.t < start]
        after = [i for i, r in enumerate(ordered) if r.t > end]
        if before and after:
            return [ordered[before[-1]], ordered[after[0]]]
        return []
    lo, hi = max(0, inside[0] - 1), min(len(ordered) - 1, inside[-1] + 1)
    return ordered[lo:hi + 1]


def _windows(rows: Sequence[tr.IoSample], counter: str) -> list[tuple[float, float, tr.IoSample]]:
    """(seconds, bytes, last row) of consecutive windows of at least WINDOW_S."""
    points = [(r.t, getattr(r, counter), r) for r in rows if getattr(r, counter) is not None]
    windows: list[tuple[float, float, tr.IoSample]] = []
    if len(points) < 2:
        return windows
    t0, v0, _ = points[0]
    last = len(points) - 1
    for i, (t, v, row) in enumerate(points[1:], start=1):
        if t - t0 >= WINDOW_S or i == last:
            if t > t0:
                # a counter that went down was reset (a restarted process): count from its new value
                windows.append((t - t0, v - v0 if v >= v0 else v, row))
            t0, v0 = t, v
    return windows


def _weighted_quantile(values: Sequence[tuple[float, float]], q: float) -> float:
    """Quantile of ``(value, weight)`` pairs."""
    ordered = sorted(values)
    total = sum(w for _, w in ordered)
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= q * total:
            return value
    return ordered[-1][0]


@dataclass(frozen=True)
class _SourceRate:
    bytes: float
    active_s: float
    bandwidth: float
    limit: float | None


def _source_rate(rows: Sequence[tr.IoSample], counter: str, limit_field: str | None) -> _SourceRate | None:
    windows = _windows(rows, counter)
    moved = sum(b for _, b, _ in windows)
    if moved < MIN_BYTES:
        return None
    rates = [(b / s, s, row) for s, b, row in windows if s > 0]
    peak = max(r for r, _, _ in rates)
    active = [(r, s, row) for r, s, row in rates if r >= ACTIVE_SHARE * peak]
    bandwidth = _weighted_quantile([(r, s) for r, s, _ in active], QUANTILE)
    limits = [getattr(row, limit_field) for _, _, row in active if limit_field and getattr(row, limit_field)]
    # the limit the job mostly ran under while it moved data (a limit joined after start-up counts from then)
    limit = min(limits) if limits and len(limits) * 2 >= len(active) else None
    return _SourceRate(moved, sum(s for _, s, _ in active), bandwidth, limit)


def network_counted_idle(trace: tr.Trace) -> bool:
    """True when network counters covered every host the job's tasks ran on and saw under MIN_BYTES received and
    under MIN_BYTES sent over the run: the job moved nothing over a network (a local-mode job), so no bandwidth
    change can touch it, whatever its sampled functions look like."""
    moved = _moved_per_source(trace, ("network_rx_bytes", "network_tx_bytes"))
    return moved is not None and all(rx < MIN_BYTES and tx < MIN_BYTES for rx, tx in moved)


# Writes below this over a run sit in the page cache (far under any kernel's dirty limits): they never wait for
# the device unless the job syncs them, which dataflow jobs' output and spill writers do not.
BUFFERED_WRITE_BYTES = 64 << 20


def storage_counted_idle(trace: tr.Trace) -> tuple[float, float] | None:
    """(read, written) bytes where storage counters covered every process that ran the job's tasks and saw it
    read under MIN_BYTES from storage and write under BUFFERED_WRITE_BYTES over the run: no function of the job
    can have waited on a disk (reads served from the page cache are copies, CPU work). None otherwise."""
    moved = _moved_per_source(trace, ("storage_read_bytes", "storage_write_bytes"))
    if moved is None:
        return None
    read, written = sum(r for r, _ in moved), sum(w for _, w in moved)
    return (read, written) if read < MIN_BYTES and written < BUFFERED_WRITE_BYTES else None


def _moved_per_source(trace: tr.Trace, counters: tuple[str, str]) -> list[tuple[float, float]] | None:
    """Bytes each counter source moved over the run, by the two ``counters``; None unless counters covered
    every process that ran the job's tasks and every source has an interval to count over. Covered: Spark's
    driver (local mode) or each executor's plugin by name; or as many sources of processes
    that run tasks (``FLINK_RUNNERS``: TaskManagers or a local mini cluster) as the tasks name executors (their
    ids are not the counters' names); a job of one process, a Keras fit, is its own counters."""
    app = trace.application
    by_source: dict[str, list[tr.IoSample]] = {}
    for row in trace.io:
        if any(getattr(row, c) is not None for c in counters):
            by_source.setdefault(row.source, []).append(row)
    # a source with no reading in or around the job (all before it, or all after) counted another run: a Python
    # program's file left in a reused output directory
    spans = {source: span for source, rows in by_source.items() if (span := _span_rows(rows, app.start, app.end))}
    if not spans:
        return None
    executors = {task.executor for op in trace.iter_operations() for task in op.tasks} - {None}
    named = all((e if e == "driver" else f"executor:{e}") in spans for e in executors)
    runners = sum(1 for source in spans if source.startswith(FLINK_RUNNERS))
    if executors and not named and runners < len(executors):
        return None
    if not executors and len(spans) != 1:
        return None  # several unnamed processes: which ran the tasks is unknown
    moved = []
    for span in spans.values():
        if len(span) < 2:
            return None  # no interval to count over
        totals = []
        for counter in counters:
            values = [getattr(r, counter) for r in span if getattr(r, counter) is not None]
            totals.append(values[-1] - values[0] if values else 0.0)
        moved.append((totals[0], totals[1]))
    return moved


def observed_bandwidths(trace: tr.Trace) -> dict[str, ObservedBandwidth]:
    """The network and disk bandwidth the job saw, for the resources whose counters moved enough bytes."""
    if not trace.io:
        return {}
    app = trace.application
    start, end = app.start, app.end
    by_source: dict[str, list[tr.IoSample]] = {}
    for row in trace.io:
        by_source.setdefault(row.source, []).append(row)
    found: dict[str, ObservedBandwidth] = {}
    for resource in RESOURCES:
        sources = by_source
        if resource == "network" and any(name.startswith(WORKERS) for name in by_source):
            # On a cluster the workers' counters (Spark executors, Flink TaskManagers) are the job's links; the
            # coordinator (driver, JobManager) moves no task data, and its namespace may see the workers' traffic
            # pass (a bridge on this host), which is not another link.
            sources = {k: v for k, v in by_source.items() if not k.startswith(COORDINATORS)}
        best: ObservedBandwidth | None = None
        for counter, direction in _COUNTERS[resource]:
            limit_field = None
            if resource == "disk":
                limit_field = "disk_read_limit" if direction == "read" else "disk_write_limit"
            rates: list[_SourceRate] = []
            hosts: list[str | None] = []
            for rows in sources.values():
                rate = _source_rate(_span_rows(rows, start, end), counter, limit_field)
                if rate is None:
                    continue
                if resource == "network" and any(
                        host == rows[0].host and abs(other.bytes - rate.bytes) <= 0.05 * max(other.bytes, rate.bytes)
                        for host, other in zip(hosts, rates, strict=True)):
                    continue  # one namespace's interfaces read by two processes: the same bytes, counted once
                hosts.append(rows[0].host)
                rates.append(rate)
            if not rates:
                continue
            # A disk's bytes add up; each network source counts its own namespace's interfaces, whose links run
            # side by side: the busiest link's bytes are what a bandwidth change delays.
            moved = max(r.bytes for r in rates) if resource == "network" else sum(r.bytes for r in rates)
            limits = [r.limit for r in rates if r.limit is not None]
            candidate = ObservedBandwidth(
                resource=resource, direction=direction, bytes=moved,
                active_s=max(r.active_s for r in rates),
                # each source's link or device: the bandwidth of the one that moved the median byte
                bandwidth=_weighted_quantile([(r.bandwidth, r.bytes) for r in rates], 0.5),
                limit=min(limits) if limits and len(limits) == len(rates) else None,
                sources=len(rates),
            )
            if best is None or candidate.bytes > best.bytes:
                best = candidate
        if best is not None:
            found[resource] = best
    return found


# A device or link that moved the job's data at this share of its bandwidth over an operation's window was busy
# for it: a thread of the operation waiting on another thread's read waited on it.
BUSY_SHARE = 0.5


def window_busy(trace: tr.Trace, bandwidths: dict[str, ObservedBandwidth], start: float, end: float) -> dict[str, float]:
    """How busy the storage device and the network link were with the job's data over [start, end]: the bytes the
    job's processes moved then over the window at the bandwidth the job saw, per resource (0 where unknown)."""
    busy: dict[str, float] = {}
    if end - start <= 0:
        return busy
    for resource, names in (("disk", ("storage_read_bytes", "storage_write_bytes")),
                            ("network", ("network_rx_bytes", "network_tx_bytes"))):
        seen = bandwidths.get(resource)
        if seen is None or not seen.conclusive:
            continue
        by_source: dict[str, list[tr.IoSample]] = {}
        for row in trace.io:
            by_source.setdefault(row.source, []).append(row)
        moved = 0.0
        for rows in by_source.values():
            rows = sorted(rows, key=lambda r: r.t)
            series = counter_series(rows, names[0] if seen.direction in ("read", "received") else names[1])
            if series is not None:
                value = series.between(start, end)
                moved = moved + value if resource == "disk" else max(moved, value)
        busy[resource] = min(1.0, moved / ((end - start) * seen.effective))
    return busy
