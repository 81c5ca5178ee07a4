"""Ceilings: what the tasks share bounds every scenario from below, whatever its task slots.

From what the job's processes used (``crystalperf.core.profile.shared``), each operation of a scenario takes at
least:

- **cores**: its CPU work — its tasks' own CPU time and its share of what its processes did beside them (the
  collector, the compilers, shuffle and fetcher threads), both scaled by a CPU speed change — over the cores the
  processes can have: the cores they may use (as near to all of them as the busiest second of the run got, where
  the job wanted more than that second gave it: ``machine_reach``), less what other processes of the hosts kept
  busy, or what the operation was seen using where that was more. Task slots add no cores: only more executors
  (more hosts), a quota that follows the executor's cores (a container's), or a CPU share change do. Where the
  whole application ran on one machine (``SharedMachine.one_machine``), its executors, however many, have no more
  than that machine's CPUs less what else used them; and each executor more that runs an operation's tasks adds
  what one executor's process spent beside its tasks in it, less the collector's pauses (its compilers warm the
  same code up again);
- **the storage device**: the bytes it read from the device over the device's bandwidth (the traced one, or the
  scenario's ``disk``), or what the operation was seen reading at where that was faster;
- **the link**: the bytes over the busiest link over its bandwidth (the traced one, or the scenario's
  ``network``), where the trace gave the link's bandwidth rather than assuming one.

Each floor is at most the operation's traced span when nothing changes, so a scenario of no change stays the
traced run.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from crystalperf.core.predict.base import (
    KNOWN_BANDWIDTH,
    Baseline,
    Changes,
    device_factor,
    is_device_operation,
)
from crystalperf.core.predict.jvm import first_touch
from crystalperf.core.profile.dag import ExecutionProfile
from crystalperf.core.profile.machine import ClusterSpread
from crystalperf.core.profile.shared import OperationShare, SharedMachine, shared_machine
from crystalperf.core.units import format_bandwidth, format_byte_rate

# A floor that adds less than this share to an operation's replayed time does not make a note.
NOTED_SHARE = 0.05
# A limit on the cores within this of the slots per host is taken to follow the executor's cores (a container's
# CPU quota): more cores per executor then come with their quota.
TIED_QUOTA = 0.5

# The traced job asked for this many more cores than its busiest second gave it (its task slots, its processes'
# other threads and the hosts' other processes together): the machine, not the job, stopped that second short of
# all its cores.
WANTED_MORE = 0.25

# A floor drawn for the band is at most this far off its point value.
MAX_JITTER = 0.5

CORES, DEVICE, LINK = "cores", "device", "link"
# The what-if key that gives each ceiling more of its resource.
RESOURCE_KEY = {CORES: "host_cpus", DEVICE: "disk", LINK: "network"}


@dataclass
class Floors:
    """One scenario's floors, by unit operation path, and which ceiling each is."""

    seconds: dict[str, float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    # seconds each ceiling added to the scenario's point estimate, over the operations' replayed times, and how
    # many times more of the resource the most bound operation would need for its floor not to bind
    added: dict[str, float] = field(default_factory=dict)
    needed: dict[str, float] = field(default_factory=dict)

    def record(self, kind: str, floor: float, replayed: float) -> None:
        self.added[kind] = self.added.get(kind, 0.0) + floor - replayed
        if replayed > 0:
            self.needed[kind] = max(self.needed.get(kind, 1.0), floor / replayed)

    def reset(self) -> None:
        self.added = {}
        self.needed = {}


def machine_cores_factor(machine: SharedMachine, baseline: Baseline, changes: Changes, new_slots: int,
                         hosts: float = 1.0) -> float:
    """How many times the cores the traced run's processes could have the scenario's have, on ``hosts`` times the
    traced run's hosts."""
    factor = hosts
    per_executor = machine.cores / max(1, baseline.executors)
    if machine.limited_by == "limit" and abs(per_executor - baseline.cores_per_executor) <= TIED_QUOTA:
        # a container's quota that matched the executor's cores: more cores per executor come with theirs
        factor *= changes.number("cores", baseline.cores_per_executor) / baseline.cores_per_executor
    if "host_cpus" in changes:
        factor *= changes.number("host_cpus", 1.0) * machine.hosts / machine.cores
    if "cpu_share" in changes:
        # a CPU share is CPUs per task slot: a quota of share x slots on the processes
        quota = changes.number("cpu_share", 1.0) * new_slots
        factor = min(factor, quota / machine.cores)
    return factor


class Ceilings:
    """The shared machine of a traced job, turned into each scenario's floors."""

    def __init__(self, profile: ExecutionProfile, baseline: Baseline, spread: ClusterSpread | None = None) -> None:
        self.baseline = baseline
        self.spread = spread
        self.machine: SharedMachine | None = shared_machine(profile)
        # a GPU takes over these operations' CPU work, and with it their demand on the cores
        self.device_paths = {p.path for p in profile.walk() if is_device_operation(p.op)}
        self.first_touch = first_touch(profile.trace)
        self.reach = machine_reach(self.machine, baseline.slots) if self.machine is not None else 1.0
        observed = baseline.origins
        # a bandwidth assumed (not in the trace) bounds nothing: the job may have had far more
        self.device_known = observed.get("disk") in KNOWN_BANDWIDTH
        self.link_known = observed.get("network") in KNOWN_BANDWIDTH and not baseline.network_idle

    @property
    def useful(self) -> bool:
        return self.machine is not None and bool(self.machine.shares)

    def workers_factor(self, changes: Changes, new_slots: int) -> float:
        """How many times the traced run's workers a parallelism change spreads the job over (its workers' cores,
        disks and processes with it), where the trace says what the cluster had; else 1."""
        if self.spread is None or "parallelism" not in changes:
            return 1.0
        return self.spread.factor(new_slots)

    def executors_factor(self, changes: Changes, new_slots: int) -> float:
        """How many times the traced run's executors or workers (processes) the scenario's job runs in."""
        executors = self.baseline.executors
        factor = changes.number("executors", executors) / executors if "executors" in changes else 1.0
        return factor * self.workers_factor(changes, new_slots)

    def hosts_factor(self, changes: Changes, new_slots: int) -> float:
        """How many times the traced run's hosts (each with its cores and device) the scenario's job runs on: as
        many more as executors unless the scenario says ``hosts``."""
        if "hosts" not in changes:
            return self.executors_factor(changes, new_slots)
        before, after = self.baseline.hosts_for(changes)
        return after / before * self.workers_factor(changes, new_slots)

    def side_by_side(self, changes: Changes, new_slots: int) -> float:
        """How many times the traced run's task slots each process runs side by side in the scenario."""
        return new_slots / (max(1, self.baseline.slots) * self.executors_factor(changes, new_slots))

    def cores_factor(self, changes: Changes, new_slots: int) -> float:
        """How many times the cores the traced run's processes could have the scenario's have."""
        assert self.machine is not None
        return machine_cores_factor(self.machine, self.baseline, changes, new_slots,
                                    self.hosts_factor(changes, new_slots))

    def floors(self, changes: Changes, baseline: Baseline, new_slots: int, pessimistic: bool = False) -> Floors:
        """The scenario's floor for every unit operation (``baseline``: the traced run's, as the scenario states
        it). ``pessimistic``: the band's high end, each operation keeping its cores no busier than it did."""
        found = Floors()
        machine = self.machine
        if machine is None:
            return found
        cpu_factor = 1.0 / changes.number("cpu_speed", 1.0)
        on_device = device_factor(changes, baseline)
        cores = self.cores_factor(changes, new_slots)
        hosts = self.hosts_factor(changes, new_slots)
        processes = self.executors_factor(changes, new_slots)
        disk = (changes.number("disk", baseline.disk_bandwidth) / baseline.disk_bandwidth) * hosts
        network = changes.number("network", baseline.network_bandwidth) / baseline.network_bandwidth
        machine_cpus = (changes.number("host_cpus", 1.0) * machine.hosts if "host_cpus" in changes
                        else float(machine.host_cpus)) * self.workers_factor(changes, new_slots)
        # the kernel's first touches of a fresh JVM's heap grow with the subtasks side by side in it (jvm.FirstTouch)
        touched = (self.first_touch.share * (self.side_by_side(changes, new_slots) - 1.0)
                   if self.first_touch is not None else 0.0)
        for path, share in machine.shares.items():
            # every process more that runs the operation's tasks pays what one pays for itself again: its compilers
            # and timers, and its first task's cold code
            cpu_s = share.cpu_s * (1.0 + touched) + (share.per_process_cpu_s + share.cold_cpu_s) * (
                _busy_workers(share, baseline.executors * processes) / _busy_workers(share, baseline.executors) - 1.0)
            factor = cpu_factor * (on_device if path in self.device_paths else 1.0)
            candidates = [(self._cores_floor(share, machine, cpu_s * factor, cores, machine_cpus, pessimistic),
                           CORES)]
            if self.device_known and share.read_bytes > 0:
                candidates.append((self._bandwidth_floor(share.read_bytes, share.window_s, baseline.disk_bandwidth,
                                                         disk), DEVICE))
            if self.link_known and share.network_bytes > 0:
                candidates.append((self._bandwidth_floor(share.network_bytes, share.window_s,
                                                         baseline.network_bandwidth, network), LINK))
            seconds, kind = max(candidates)
            if seconds > 0:
                found.seconds[path] = seconds
                found.kinds[path] = kind
        return found

    def _cores_floor(self, share: OperationShare, machine: SharedMachine, cpu_s: float, cores: float,
                     machine_cpus: float, pessimistic: bool = False) -> float:
        if share.window_s <= 0 or share.cpu_s <= 0:
            return 0.0
        used = share.cpu_s / share.window_s
        # the cores it could have: what others left of the processes' cores, as near to all of them as the machine
        # reaches (the band's pessimistic end: no nearer than the operation itself got), or what it was seen using
        # where that was more
        reach = used / machine.cores if pessimistic else self.reach
        available = max(machine.cores * reach - share.other_cores, used) * cores
        if machine.one_machine:
            # workers of one machine, however many, share its CPUs with what else ran there
            available = min(available, max(machine_cpus - share.other_cores, used))
        return cpu_s / available

    @staticmethod
    def _bandwidth_floor(moved: float, window_s: float, bandwidth: float, factor: float) -> float:
        if window_s <= 0:
            return 0.0
        seen = max(bandwidth, moved / window_s)
        return moved / (seen * factor)

    def drawn(self, floors: Floors, rng: random.Random) -> Floors:
        """The floors of one Monte Carlo draw: each operation's figures are read over its window from counters read
        every ``reading_interval_s``, so each end of the window may be off by that much; a floor of a window of
        ``w`` seconds is off by up to ``2 x interval / w`` of itself (at most ``MAX_JITTER``)."""
        machine = self.machine
        if machine is None:
            return floors
        seconds = {}
        for path, floor in floors.seconds.items():
            share = machine.shares.get(path)
            jitter = (min(MAX_JITTER, 2 * machine.reading_interval_s / share.window_s)
                      if share is not None and share.window_s > 0 else 0.0)
            seconds[path] = floor * (1.0 + rng.uniform(-jitter, jitter))
        return Floors(seconds, floors.kinds)

    def notes(self, floors: Floors, runtime_s: float) -> list[str]:
        """What bound the scenario, where a ceiling added at least ``NOTED_SHARE`` of the run."""
        machine = self.machine
        if machine is None:
            return []
        notes: list[str] = []
        for kind, added in sorted(floors.added.items(), key=lambda kv: -kv[1]):
            if added < NOTED_SHARE * runtime_s:
                continue
            if kind == CORES:
                background = machine.background_cores
                used = (f"the job's processes kept {machine.busy_cores:.2f} of their {machine.cores:g} cores busy "
                        f"in the traced run")
                if background is not None:
                    used += f" ({background:.2f} of them beside the tasks' threads: collector, compilers, fetchers)"
                if machine.other_cores >= 0.05:
                    used += f", other processes {machine.other_cores:.2f}"
                if machine.one_machine and machine.host_cpus > machine.cores:
                    used += f"; its workers share one machine's {machine.host_cpus} CPUs"
                notes.append(f"ceiling: the cores — {used}; task slots share the same cores, which add "
                             f"{added:.2f} s over the replay")
            elif kind == DEVICE:
                seen = self.baseline.observed.get("disk")
                rate = format_byte_rate(self.baseline.disk_bandwidth)
                moved = (f"{seen.bytes / 1e6:.1f} MB at up to {rate} in {seen.active_s:.1f} s of transfer"
                         if seen is not None else f"at {rate}")
                notes.append(f"ceiling: the storage device — it moved {moved}; more task slots read no faster "
                             f"({added:.2f} s over the replay)")
            elif kind == LINK:
                notes.append(f"ceiling: the network link at {format_bandwidth(self.baseline.network_bandwidth)}; "
                             f"more task slots send no faster ({added:.2f} s over the replay)")
        return notes

    def more(self, kind: str, factor: float, changes: Changes, baseline: Baseline) -> Changes:
        """``changes`` with ``factor`` times the traced run's resource of the ceiling ``kind``: what lets its floor
        stop binding."""
        values = dict(changes.values)
        if kind == CORES and self.machine is not None:
            values["host_cpus"] = max(1, math.ceil(self.machine.cores / max(1, self.machine.hosts) * factor - 1e-9))
        elif kind == DEVICE:
            values["disk"] = baseline.disk_bandwidth * factor
        elif kind == LINK:
            values["network"] = baseline.network_bandwidth * factor
        return Changes(values, changes.baselines, changes.added)


def _busy_workers(share: OperationShare, executors: float) -> float:
    """How many of ``executors`` workers run the operation's tasks: each is a process (a JVM) of its own, and
    what one pays for itself (its compilers warming the same code up) comes with every one more that runs them."""
    return max(1.0, min(executors, share.tasks) if share.tasks > 0 else executors)


def machine_reach(machine: SharedMachine, slots: int) -> float:
    """How near to all of their cores the job's processes can get: the busiest second's share of the cores where
    the traced job wanted more than that second gave it (the machine stopped short: hypervisor, kernel, memory
    stalls), else all of them — a job its own task slots held back (one thread on two cores) never showed where
    the machine stops, and its busiest second is only its own demand."""
    got = machine.peak_utilization * machine.cores
    wanted = slots + (machine.background_cores or 0.0) + machine.other_cores
    return machine.peak_utilization if wanted >= got + WANTED_MORE else 1.0
