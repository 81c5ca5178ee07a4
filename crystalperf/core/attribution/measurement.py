"""What the framework or the OS measured of an operation's time (task CPU time, fetch wait, shuffle-write time,
idle and backpressured time), taken as it is; the samples split only the rest (ARCHITECTURE: the order of
evidence)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

from crystalperf.core import trace as tr
from crystalperf.core.attribution.vectors import SOURCE_METRICS, OperationVector
from crystalperf.core.resources import CATEGORIES, ResourceVector
from crystalperf.core.trace.totals import metric_total, task_scale, task_seconds

_DISK_BYTES = (tr.METRIC_INPUT_BYTES, tr.METRIC_OUTPUT_BYTES, tr.METRIC_SPILL_DISK_BYTES, tr.METRIC_SHUFFLE_WRITE_BYTES)
_NETWORK_BYTES = (tr.METRIC_SHUFFLE_REMOTE_READ_BYTES, tr.METRIC_NETWORK_BYTES)
_WAITING_METRICS = (tr.METRIC_IDLE_TIME, tr.METRIC_BACKPRESSURED_TIME, tr.METRIC_WAIT_TIME)
# category -> the metrics that measure (a lower bound of) its time.
_MEASURES = {
    "waiting": _WAITING_METRICS,
    "cpu": (tr.METRIC_CPU_TIME, tr.METRIC_CPU_WAIT_TIME),
    "network": (tr.METRIC_NETWORK_WAIT,),
    "disk": (tr.METRIC_DISK_TIME,),
}


# waiting first: the order in which each unit's parts are clipped to its run time
_MEASURES_ITEMS = tuple(_MEASURES.items())
assert _MEASURES_ITEMS[0][0] == "waiting"


@dataclass
class Measurement:
    """What the framework or the OS measured of some units' run time (tasks, or an operation), in seconds."""

    run: float = 0.0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    cpu_measured: bool = False  # some unit's CPU time was measured
    disk_bytes: float = 0.0
    network_bytes: float = 0.0

    @property
    def measured(self) -> float:
        return sum(self.seconds.values())

    @property
    def open(self) -> float:
        return max(0.0, self.run - self.measured)

    def fractions(self) -> dict[str, float]:
        if self.run <= 0:
            return {}
        return {c: s / self.run for c, s in self.seconds.items() if s > 0}


def measure(units: Iterable[tuple[float, dict[str, float]]], *, waiting: bool = True) -> Measurement | None:
    """The measured parts of (wall duration, metrics) units; None when nothing of their time was measured.

    Each unit's parts are clipped to its run time in the order waiting, CPU (CPU time plus run-queue delay),
    network, disk. Each is a lower bound of its category's time (a thread can want a core its CPU time does
    not show; fetch wait and shuffle-write time are parts of the network's and the disk's); how far the
    samples may add to them is :func:`bounded_vector`'s business."""
    result = Measurement()
    seconds = result.seconds
    any_measured = False
    cpu_in_any_unit = False
    measures = _MEASURES_ITEMS if waiting else _MEASURES_ITEMS[1:]
    # Lookups inlined: a trace of 20,000 operations brings 40,000 units here.
    run_time, cpu_time = tr.METRIC_RUN_TIME, tr.METRIC_CPU_TIME
    disk_bytes = network_bytes = 0.0
    for duration, m in units:
        run = m.get(run_time, 0.0)
        if not run > 0:
            run = duration
        if run <= 0:
            continue
        result.run += run
        left = run
        if not cpu_in_any_unit and cpu_time in m:
            cpu_in_any_unit = True
        for category, names in measures:
            present, total = False, 0.0
            for name in names:
                value = m.get(name)
                if value is not None:
                    present = True
                    if value > 0:
                        total += value
            if not present:
                continue
            any_measured = True
            part = total if total < left else left
            seconds[category] += part
            left -= part
        disk_bytes += _positive_sum(m, _DISK_BYTES)
        network_bytes += _positive_sum(m, _NETWORK_BYTES)
    result.disk_bytes = disk_bytes
    result.network_bytes = network_bytes
    if not any_measured or result.run <= 0:
        return None
    result.cpu_measured = cpu_in_any_unit
    return result


def _positive_sum(metrics: dict[str, float], names: Sequence[str]) -> float:
    total = 0.0
    for name in names:
        value = metrics.get(name, 0.0)
        if value > 0:
            total += value
    return total


def _open_by_bytes(measurement: Measurement, idle: Collection[str] = ()) -> dict[str, float]:
    """How to split time nothing else explains: between disk and network by the bytes each moved, else CPU
    (the paper's reading of a task that moved nothing). Bytes of an ``idle`` resource (a local channel's, which
    a framework counts as sent) crossed no device."""
    disk = 0.0 if "disk" in idle else measurement.disk_bytes
    network = 0.0 if "network" in idle else measurement.network_bytes
    if disk + network > 0:
        return {"disk": disk / (disk + network), "network": network / (disk + network)}
    return {"cpu": 1.0}


def bounded_vector(measurement: Measurement, sampled: ResourceVector | None,
                   idle: Collection[str] = ()) -> ResourceVector:
    """The split of a measured operation: measured parts as they are, the open rest split by the samples.

    The samples' share of a measured category is first reduced by what was measured of it (the samples of an
    idle second are in the measured idle time already). A runnable thread waiting for a core on a busy machine
    wants CPU its CPU time does not show, so CPU samples may claim open time — but no more than the CPU time
    measured (a load that halves each thread's share): a scan blocked on a slow disk under frames that look
    like computing must not be called CPU-bound against the framework's own counters. What CPU cannot claim
    goes to the other categories the samples saw, else follows the bytes moved (CPU when none). A resource the OS
    counters saw the job not use (``idle``) takes none of it: a sample blocked on a socket is one wait, not the
    open time of a thread that waited for a core."""
    seconds = dict(measurement.seconds)
    open_time = measurement.open
    if open_time <= 0:
        return ResourceVector.of(seconds["cpu"], seconds["disk"], seconds["network"], seconds["waiting"])
    weights: dict[str, float] = {}
    if sampled is not None:
        weights = {c: max(0.0, sampled[i] - measurement.seconds[c] / measurement.run)
                   for i, c in enumerate(CATEGORIES)}
    total = sum(weights.values())
    assigned = 0.0
    if total > 1e-9:
        for category, weight in weights.items():
            share = open_time * weight / total
            if category == "cpu" and measurement.cpu_measured:
                share = min(share, measurement.seconds["cpu"])
            seconds[category] += share
            assigned += share
    rest = open_time - assigned
    if rest > 1e-9:
        # What CPU could not claim goes to what else the samples saw, else by the bytes moved.
        others = {c: w for c, w in weights.items() if c != "cpu" and c not in idle and w > 0}
        spread = ({c: w / sum(others.values()) for c, w in others.items()} if others
                  else _open_by_bytes(measurement, idle))
        for category, weight in spread.items():
            seconds[category] += rest * weight
    return ResourceVector.of(seconds["cpu"], seconds["disk"], seconds["network"], seconds["waiting"])


def metrics_vector(units: Iterable[tuple[float, dict[str, float]]], *, waiting: bool = True) -> ResourceVector | None:
    """Vector from native metrics of tasks (or of an operation): (wall duration, metrics) pairs; None when
    none of their time was measured. What measurement leaves open follows the bytes moved, else CPU.
    ``waiting=False`` reads the metrics as the paper's method does, with no waiting category."""
    measurement = measure(units, waiting=waiting)
    return bounded_vector(measurement, None) if measurement is not None else None


def operation_units(op: tr.Operation) -> list[tuple[float, dict[str, float]]]:
    """(wall duration, metrics) of the units whose time was measured: the tasks, or the operation itself.

    A hook that kept a sample of the tasks gives the exact totals over all of them in the operation's
    metrics: the units are then one unit of all the tasks, with those totals (a metric only the sample has
    is the sample's sum scaled to all the tasks)."""
    if not op.tasks:
        return [(op.duration, op.metrics)]
    scale = task_scale(op)
    if scale <= 1.0:
        return [(t.duration, t.metrics) for t in op.tasks]
    names = {name for t in op.tasks for name in t.metrics} | set(op.metrics)
    totals = {name: metric_total(op, name) for name in names}
    return [(task_seconds(op), totals)]


def operation_metrics_vector(op: tr.Operation, *, waiting: bool = True) -> ResourceVector | None:
    return metrics_vector(operation_units(op), waiting=waiting)


def bound_by_measurement(op: tr.Operation, sampled: OperationVector | None,
                         prefer_metrics: bool = False, idle: Collection[str] = ()) -> OperationVector | None:
    """The operation's vector with what was measured of it taken as it is (ARCHITECTURE: the order of
    evidence), the samples splitting only the rest; the samples still name its functions. ``prefer_metrics``
    (the hook measured the split itself) leaves the samples out of the split."""
    measurement = measure(operation_units(op))
    if measurement is None:
        return sampled
    vector = bounded_vector(measurement, None if prefer_metrics or sampled is None else sampled.vector, idle)
    if sampled is None:
        return OperationVector(vector, SOURCE_METRICS, measured=measurement.fractions())
    source = SOURCE_METRICS if prefer_metrics else sampled.source
    # the samples' wait for other threads' reads keeps its part of the waiting the measurement left
    waited = sampled.vector.waiting
    awaiting_io = sampled.awaiting_io * vector.waiting / waited if waited > 0 else 0.0
    return replace(sampled, vector=vector, source=source, measured=measurement.fractions(),
                   awaiting_io=min(awaiting_io, vector.waiting))
