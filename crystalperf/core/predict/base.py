"""What-if changes, the job's baseline resources, and the interface of a resource model."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from crystalperf.core import trace as tr
from crystalperf.core.attribution.observed import ObservedBandwidth, network_counted_idle, observed_bandwidths
from crystalperf.core.errors import BadInputError
from crystalperf.core.profile.dag import ExecutionProfile, OperationProfile, unit_profiles
from crystalperf.core.profile.machine import data_bytes, executor_hosts, scaled_hosts, traced_slots
from crystalperf.core.trace.totals import task_scale, task_seconds
from crystalperf.core.units import (
    format_bandwidth,
    format_byte_rate,
    format_size,
    parse_bandwidth,
    parse_duration,
    parse_size,
)

# Assumed when the trace does not record them. Sources in docs/whatif.md.
DEFAULT_NETWORK_BANDWIDTH = 10e9 / 8  # 10 Gbit/s: a common data-centre NIC
DEFAULT_DISK_BANDWIDTH = 500e6  # 500 MB/s: a SATA SSD's sequential read
DEFAULT_MEMORY_BANDWIDTH = 10e9  # 10 GB/s: one core streaming from DRAM
DEFAULT_GPU_SPEEDUP = 8.0  # a mid-range GPU over a few CPU cores on dense kernels
DEFAULT_RTT_S = 0.2e-3  # a round trip between two hosts on one data-centre switch (0.1-0.3 ms)
log = logging.getLogger(__name__)

# Trace metric: bytes the job's processes read from the storage device (/proc/<pid>/io read_bytes,
# page-cache hits excluded).
STORAGE_READ_BYTES = "storage_read_bytes"
# Where a bandwidth comes from when the trace gives the traced run's (an assumed one bounds nothing).
KNOWN_BANDWIDTH = ("declared", "observed", "stated")


# What a what-if may ask for, per key: beyond these the question is a typo, not a machine (docs/whatif.md).
MAX_SLOTS = 1_000_000
SPEED_RANGE = (0.01, 100.0)  # cpu_speed: a hundredth to a hundred times the traced CPU
SHARE_RANGE = (0.01, 64.0)  # cpu_share: a hundredth of a CPU to 64 CPUs per slot
GPU_SPEEDUP_RANGE = (0.01, 1000.0)
MEMORY_RANGE = (float(1 << 20), float(1 << 50))  # 1 MiB to 1 PiB
BANDWIDTH_RANGE = (1.0, 10e12 / 8)  # 1 B/s to 10 Tbit/s
RTT_RANGE = (1e-6, 10.0)  # a microsecond to ten seconds: beyond, a link no job runs over
_MAX_TEXT = 40  # characters of one value: no number a person means is longer


def _text(key: str, text: str) -> str:
    text = text.strip()
    if len(text) > _MAX_TEXT:
        raise ValueError(f"{key}: {text[:20]!r}... is longer than {_MAX_TEXT} characters")
    return text


def _in_range(key: str, value: float, low: float, high: float, shown: str) -> float:
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{key} must be between {shown}")
    return value


def _slots(key: str, text: str) -> int:
    text = _text(key, text)
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{key} must be a whole number from 1 to {MAX_SLOTS:,}, not {text!r}") from None
    if value < 1:
        raise ValueError(f"{key} must be at least 1, not {text}")
    if value > MAX_SLOTS:
        raise ValueError(f"{key} must be at most {MAX_SLOTS:,}, not {text}")
    return value


def _ratio(low: float, high: float) -> Callable[[str, str], float]:
    def parse(key: str, text: str) -> float:
        text = _text(key, text)
        try:
            value = float(text.rstrip("x"))
        except ValueError:
            raise ValueError(f"{key} must be a number such as 2 or 0.5, not {text!r}") from None
        return _in_range(key, value, low, high, f"{low:g} and {high:g}, not {text}")

    return parse


def _share(key: str, text: str) -> float:
    text = _text(key, text)
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{key} must be a fraction of a CPU such as 0.5 or 50%, not {text!r}") from None
    low, high = SHARE_RANGE
    return _in_range(key, value, low, high, f"{low:g} and {high:g} CPUs per slot (e.g. 0.5 or 50%), not {text}")


def _memory(key: str, text: str) -> int:
    value = parse_size(_text(key, text))
    low, high = MEMORY_RANGE
    _in_range(key, float(value), low, high, f"1 MiB and 1 PiB, not {text.strip()}")
    return value


def _bandwidth(key: str, text: str) -> float:
    value = parse_bandwidth(_text(key, text))
    low, high = BANDWIDTH_RANGE
    return _in_range(key, value, low, high, f"1 B/s and 10 Tbit/s, not {text.strip()}")


def _duration(key: str, text: str) -> float:
    value = parse_duration(_text(key, text))
    low, high = RTT_RANGE
    return _in_range(key, value, low, high, f"1us and 10s, not {text.strip()}")


def _device(key: str, text: str) -> str:
    value = text.strip().lower()
    if value not in ("cpu", "gpu"):
        raise ValueError(f"{key} must be cpu or gpu")
    return value


PARSERS: dict[str, tuple[Callable[[str, str], float | str], str]] = {
    "cores": (_slots, "task slots per executor (Spark cores, TF threads); the total for one process"),
    "executors": (_slots, "number of executors / workers (Spark)"),
    "hosts": (_slots, "hosts the executors run on (Spark; default: the traced executors per host, more hosts for "
                      "more executors): executors on one host share its CPUs and links and its shuffle blocks"),
    "parallelism": (_slots, "operator parallelism (Flink)"),
    "slots": (_slots, "total tasks that run at once"),
    "host_cpus": (_slots, "CPUs each host gives the job's processes (the traced run's: its cores, or its cgroup "
                          "quota or cpuset)"),
    "cpu_speed": (_ratio(*SPEED_RANGE), "CPU speed relative to the traced run (2 = twice as fast)"),
    "cpu_share": (_share, "CPU share per slot relative to the traced run (0.5 or 50% = half)"),
    "memory": (_memory, "memory for the job's data, e.g. 4g"),
    "network": (_bandwidth,
                "network bandwidth, e.g. 1gbit; OLD:NEW states the traced run's too, e.g. 40mbit:100mbit"),
    "disk": (_bandwidth, "disk bandwidth, e.g. 200MB/s; OLD:NEW states the traced run's too"),
    "rtt": (_duration, "round-trip time between hosts, e.g. 10ms; +10ms adds to the traced run's, OLD:NEW "
                       "states it"),
    "device": (_device, "compute device: cpu or gpu"),
    "gpu_speedup": (_ratio(*GPU_SPEEDUP_RANGE),
                    f"GPU over CPU speed for compute ops (default {DEFAULT_GPU_SPEEDUP:g})"),
}
KNOWN_KEYS = tuple(PARSERS)
# Keys whose traced value a user may state as OLD:NEW when the trace cannot know it.
STATABLE_KEYS = ("network", "disk")
# Keys that may also be stated as an addition to the traced value (``rtt=+10ms``) or as OLD:NEW.
RELATIVE_KEYS = ("rtt",)


@dataclass(frozen=True)
class Changes:
    """A what-if scenario: the resources that differ from the traced run."""

    values: Mapping[str, float | str] = field(default_factory=dict)
    # what the traced run had, where the user stated it (``network=40mbit:100mbit``): overrides the trace
    baselines: Mapping[str, float] = field(default_factory=dict)
    # keys whose value is added to the traced run's (``rtt=+10ms``)
    added: frozenset[str] = frozenset()

    def get(self, key: str, default: float | str | None = None) -> float | str | None:
        return self.values.get(key, default)

    def number(self, key: str, default: float) -> float:
        """A numeric change, or ``default`` when the scenario does not change it."""
        value = self.values.get(key, default)
        return float(value)

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def describe(self) -> str:
        def one(key: str, value: float | str) -> str:
            stated = self.baselines.get(key)
            plus = "+" if key in self.added else ""
            return f"{key}={plus}{_show(key, value)}" + (f" (from {_show(key, stated)})" if stated is not None else "")

        return ", ".join(one(k, v) for k, v in self.values.items()) or "as traced"

    @classmethod
    def parse(cls, assignments: Sequence[str], source: str | None = None) -> Changes:
        """``["cores=4", "network=1gbit"]`` -> Changes. Bad keys/values raise BadInputError."""
        values: dict[str, float | str] = {}
        stated: dict[str, float] = {}
        added: set[str] = set()
        for whole in assignments:
            # Quoted back in full only when short: an error line stays one readable line.
            item = whole if len(whole) <= 60 else whole[:57] + "..."
            key, sep, raw = whole.partition("=")
            key = key.strip().lower().replace("-", "_")
            if not sep or not raw.strip():
                raise BadInputError(f"--set {item!r}: expected KEY=VALUE", source)
            if key not in PARSERS:
                raise BadInputError(
                    f"--set {item!r}: unknown resource {key[:40]!r} (known: {', '.join(KNOWN_KEYS)})", source
                )
            parse, _ = PARSERS[key]
            old, colon, new = raw.strip().rpartition(":")
            if colon and key not in STATABLE_KEYS + RELATIVE_KEYS:
                raise BadInputError(f"--set {item!r}: only {', '.join(STATABLE_KEYS + RELATIVE_KEYS)} take OLD:NEW",
                                    source)
            plus = not colon and raw.strip().startswith("+")
            if plus and key not in RELATIVE_KEYS:
                raise BadInputError(f"--set {item!r}: +VALUE is for {', '.join(RELATIVE_KEYS)} only", source)
            try:
                values[key] = parse(key, new.strip() if colon else raw.strip().removeprefix("+"))
                if plus:
                    added.add(key)
                else:
                    added.discard(key)
                if colon:
                    if not old.strip():
                        raise ValueError("expected OLD:NEW, e.g. 40mbit:100mbit")
                    stated[key] = float(parse(key, old.strip()))
            except (ValueError, OverflowError) as exc:
                raise BadInputError(f"--set {item!r}: {exc}", source) from None
        return cls(values, stated, frozenset(added))

    def rtt(self) -> tuple[float, float] | None:
        """The traced run's round-trip time between hosts (stated, else assumed) and the scenario's, in seconds;
        None when the scenario leaves it alone."""
        if "rtt" not in self.values:
            return None
        old = self.baselines.get("rtt", DEFAULT_RTT_S)
        value = float(self.values["rtt"])
        return old, old + value if "rtt" in self.added else value


ROUND_TRIPS_NOTE = "round trips between hosts"


def describe_rtt(rtt: tuple[float, float]) -> str:
    """``round trips between hosts 0.2 -> 10.2 ms``: how every note on a round-trip change begins."""
    return f"{ROUND_TRIPS_NOTE} {rtt[0] * 1000:g} -> {rtt[1] * 1000:g} ms"


def _show(key: str, value: float | str) -> str:
    from crystalperf.core.units import format_bandwidth, format_byte_rate, format_size

    if key == "memory":
        return format_size(float(value))
    if key == "network":
        return format_bandwidth(float(value))
    if key == "disk":
        return format_byte_rate(float(value))
    if key == "rtt":
        return f"{float(value) * 1000:g}ms"
    return str(value)


@dataclass
class Baseline:
    """The resources of the traced run, from the trace or stated assumptions."""

    slots: int
    executors: int
    cores_per_executor: int
    network_bandwidth: float
    disk_bandwidth: float
    memory_bytes: float | None
    data_bytes: float | None
    device: str
    assumptions: list[str] = field(default_factory=list)
    # where network_bandwidth / disk_bandwidth come from: declared (by the hook), observed (from the trace's
    # byte counters), stated (by the user, OLD:NEW) or assumed
    origins: dict[str, str] = field(default_factory=dict)
    observed: dict[str, ObservedBandwidth] = field(default_factory=dict)
    # the job's network counters covered every host its tasks ran on and saw no traffic (a local-mode job)
    network_idle: bool = False
    # the hosts the executors ran on (0: not in the trace, taken to be one each)
    hosts: int = 0

    def hosts_for(self, changes: Changes) -> tuple[int, int]:
        """The hosts of the traced run's executors and of the scenario's: ``hosts`` where the scenario states them,
        else as many as keep the traced run's executors per host (one each: a host for every executor added)."""
        before = self.hosts or self.executors
        executors = changes.number("executors", self.executors)
        if "hosts" in changes:
            # a host without an executor runs nothing of the job
            return before, int(min(changes.number("hosts", before), executors))
        return before, scaled_hosts(before, self.executors, executors)

    def bandwidth(self, key: str) -> float:
        return self.network_bandwidth if key == "network" else self.disk_bandwidth

    def stated(self, changes: Changes) -> Baseline:
        """This baseline with what the scenario states of the traced run (``network=40mbit:100mbit``)."""
        if not changes.baselines:
            return self
        copy = replace(self, origins=dict(self.origins), assumptions=list(self.assumptions))
        for key, value in changes.baselines.items():
            if key == "network":
                copy.network_bandwidth = value
            elif key == "disk":
                copy.disk_bandwidth = value
            copy.origins[key] = "stated"
            copy.assumptions = [a for a in copy.assumptions if not a.startswith(f"{key} bandwidth assumed")]
        return copy

    def notes_for(self, changes: Changes) -> list[str]:
        """Where the traced run's bandwidths come from, for the ones the scenario changes."""
        notes = []
        for key in STATABLE_KEYS:
            if key not in changes:
                continue
            origin = self.origins.get(key)
            if origin == "observed":
                notes.append(self.observed[key].describe())
            elif origin == "stated":
                rate = format_bandwidth if key == "network" else format_byte_rate
                notes.append(f"{key} bandwidth of the traced run stated as {rate(self.bandwidth(key))}")
        return notes

    @classmethod
    def of(cls, trace: tr.Trace) -> Baseline:
        env = trace.environment
        traced = traced_slots(trace)
        slots, executors, cores = traced.slots, traced.executors, traced.cores_per_executor
        assumptions = list(traced.assumptions)
        observed = observed_bandwidths(trace)
        origins: dict[str, str] = {}
        bandwidths: dict[str, float] = {}
        for key, declared, default, shown in (
                ("network", env.network_bandwidth, DEFAULT_NETWORK_BANDWIDTH, "10 Gbit/s"),
                ("disk", env.disk_bandwidth, DEFAULT_DISK_BANDWIDTH, "500 MB/s")):
            if declared is not None:
                bandwidths[key], origins[key] = declared, "declared"
            elif key in observed and observed[key].conclusive:
                bandwidths[key], origins[key] = observed[key].effective, "observed"
            else:
                bandwidths[key], origins[key] = default, "assumed"
                few = (f"; the job {observed[key].direction} {format_size(observed[key].bytes)}, too little to say "
                       "what the device moves" if key in observed else "")
                assumptions.append(f"{key} bandwidth assumed {shown} (not in the trace{few}; state the traced run's "
                                   f"with --set {key}=OLD:NEW)")
        device = "gpu" if any(d.kind == "gpu" for d in env.devices) else "cpu"
        return cls(slots, executors, cores, bandwidths["network"], bandwidths["disk"], env.memory_bytes,
                   data_bytes(trace), device, assumptions, origins, observed,
                   network_idle="network" not in observed and network_counted_idle(trace),
                   hosts=executor_hosts(trace))


@dataclass(slots=True)
class TaskParts:
    """A task's duration split by resource (sequential-use assumption of paper §4.1)."""

    cpu: float
    disk: float
    network: float
    fixed: float = 0.0  # time no resource change affects
    # waiting for the operation's own input (a source's reader): the device or link that delivers the input
    # shortens it when it delivers the same bytes sooner
    input_wait: float = 0.0

    @property
    def total(self) -> float:
        return self.cpu + self.disk + self.network + self.fixed + self.input_wait

    def copy(self) -> TaskParts:
        return TaskParts(self.cpu, self.disk, self.network, self.fixed, self.input_wait)


@dataclass
class OpContext:
    """What a model may read about the operation whose tasks it adjusts.

    ``tasks`` are the units whose parts the model is given, in start order; on an operation of many tasks (or
    one whose hook kept a sample of them) each stands for ``count / len(tasks)`` of the operation's tasks, which
    the model's per-task figures are for."""

    profile: OperationProfile
    tasks: list[tr.Task]  # empty: the operation itself is the one unit
    task_count: int = 0  # tasks the units stand for (0: as many as listed)

    @property
    def count(self) -> int:
        return max(self.task_count, len(self.tasks))


def unit_metrics(ctx: OpContext) -> list[dict[str, float]]:
    """Metrics of the units a model adjusts, in the order of their parts: the tasks, or the operation."""
    return [t.metrics for t in ctx.tasks] if ctx.tasks else [ctx.profile.op.metrics]


def job_metric_total(profile: ExecutionProfile, weigh: Callable[[dict[str, float]], float],
                     memo: str | None = None) -> float:
    """``weigh`` of every unit of the job summed: each unit operation's tasks (a recorded sample counted for all
    the tasks it stands for), or the operation itself. ``memo`` names the figure, to compute it once per
    profile."""
    key = f"job_metric_total:{memo}"
    if memo is not None and key in profile.memo:
        return profile.memo[key]
    units = profile.memo.get("job_metric_units")
    if units is None:
        # what every total reads, gathered once: the models ask for a handful of totals over 20,000 operations
        units = profile.memo["job_metric_units"] = [
            (prof.op.metrics, None) if not prof.op.tasks
            else ([t.metrics for t in prof.op.tasks], task_scale(prof.op))
            for prof in unit_profiles(profile)]
    total = 0.0
    for metrics, scale in units:
        if scale is None:
            total += weigh(metrics)
        else:
            total += sum([weigh(m) for m in metrics]) * scale
    if memo is not None:
        profile.memo[key] = total
    return total


def unit_share(prof: OperationProfile, resource: str) -> float:
    """A unit's share of its time on one resource as the prediction splits it: the vector's share, less what a
    wait given to awaited work took from it."""
    index = _RESOURCE_INDEX[resource]
    through = prof.vector.through
    return max(0.0, prof.vector.vector[index] - (through[index] if through is not None else 0.0))


_RESOURCE_INDEX = {"cpu": 0, "disk": 1, "network": 2}


def unit_seconds(profile: ExecutionProfile, resource: str) -> float:
    """Time on one resource (disk or network) of every unit of the job, as the prediction splits it
    (:func:`unit_share`)."""
    memo = f"unit_seconds:{resource}"
    if memo not in profile.memo:
        total = 0.0  # added in order (sum() compensates from Python 3.12: other last digits on other versions)
        for prof in unit_profiles(profile):
            total += unit_share(prof, resource) * task_seconds(prof.op)
        profile.memo[memo] = total
    return profile.memo[memo]


def any_unit_share(profile: ExecutionProfile, resource: str) -> bool:
    """Whether any unit of the job gives a share of its time to the resource (:func:`unit_share`)."""
    memo = f"any_unit_share:{resource}"
    if memo not in profile.memo:
        profile.memo[memo] = any(unit_share(prof, resource) > 0 for prof in unit_profiles(profile))
    return bool(profile.memo[memo])


class ResourceModel(Protocol):
    """Adjusts the per-resource parts of an operation's tasks for a scenario (pluggable).

    A model may also propose what-ifs for the report with a method
    ``scenarios(profile, baseline) -> list[dict[str, float | str]]`` (the TensorFlow model proposes the
    other device); models without it propose nothing. A model whose attribute ``unchanged`` is true after
    ``prepare`` changes no task in that scenario and is not asked to adjust any (it saves a call per task);
    one whose ``point_unchanged`` is true changes none at the operations' measured vectors (only at a Monte
    Carlo draw of them), and is asked only in the draws. A model may also offer
    ``adjust_columns(contexts, parts, task_unit) -> bool``: ``adjust`` on the tasks of many operations at once,
    ``parts`` a float array of one row per task (cpu, disk, network, fixed, input wait) changed in place,
    ``task_unit`` each row's operation (an index into ``contexts``); it returns False, having changed nothing,
    when it cannot (the operations are then adjusted one at a time). Its results must be those of ``adjust``."""

    name: str
    keys: frozenset[str]

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        """Called once per scenario; returns notes (assumptions, reasons it does nothing)."""
        ...

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]: ...


def is_device_operation(op: tr.Operation) -> bool:
    """Operations a GPU would run: compute kernels, not input pipelines or host-side work."""
    placement = op.attributes.get("placement") or op.attributes.get("device_eligible")
    if placement is not None:
        return placement.lower() in ("device", "true", "gpu")
    return op.kind in ("op", "kernel", "compute")


def device_factor(changes: Changes, baseline: Baseline) -> float:
    """New over old CPU time of a device operation when the scenario moves the job to the other device."""
    device = changes.get("device")
    if device is None or device == baseline.device:
        return 1.0
    speedup = changes.number("gpu_speedup", DEFAULT_GPU_SPEEDUP)
    return 1 / speedup if device == "gpu" else speedup
