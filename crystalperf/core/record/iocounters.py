"""Counters of the job's processes, read during the run: what the job really moved to and from storage and the
network, the CPU time its processes and their whole host used, and the limits in force on it (cgroup read and
write rates, the cores it may use). The analysis (``crystalperf.core.attribution.observed``) turns the series into
the bandwidth the job saw and the cores it shared, which what-ifs scale from instead of assuming the hardware.

Linux only (``/proc``); elsewhere every counter is ``None`` and the sampler records nothing. The Java hooks
(Spark listener, Flink reporter) read the same files the same way and write the same rows (``trace.IoSample``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path

from crystalperf.core import trace as tr

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.25
# 4096 rows of 9 numbers: well under a megabyte however long the job runs (the sampler halves its
# resolution when full).
MAX_SAMPLES = 4096
_UNLIMITED = 0.0


def _proc_io(pid: int | str) -> tuple[int, int] | None:
    """read_bytes and write_bytes of one process (bytes that reached the storage device)."""
    try:
        text = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("read_bytes", "write_bytes"):
            values[key] = int(value)
    if len(values) != 2:
        return None
    return values["read_bytes"], values["write_bytes"]


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_cpu(pid: int | str) -> float | None:
    """CPU seconds (user + system) one process used so far (``/proc/<pid>/stat``; its children's are theirs)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: the fields start after the last ')'
    fields = text[text.rfind(")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (IndexError, ValueError):
        return None


def host_cpu() -> tuple[float, float, int] | None:
    """(busy, total) CPU seconds of the whole host since boot, summed over its CPUs, and how many CPUs it has
    online (``/proc/stat``: busy is all but idle and iowait)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    try:
        values = [int(v) for v in lines[0].split()[1:]]
    except (IndexError, ValueError):
        return None
    if len(values) < 4 or not lines[0].startswith("cpu "):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    # guest time is already in user time (and guest_nice in nice)
    total = sum(values[:8])
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu") and line[3:4].isdigit())
    return (total - idle) / _CLOCK_TICKS, total / _CLOCK_TICKS, max(1, cpus)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text()
            found += [int(c) for c in text.split()]
    except (OSError, ValueError):
        pass
    return found


def descendants(pid: int, limit: int = 512) -> list[int]:
    """The process and its descendants (bounded: a fork bomb must not stall the sampler)."""
    seen = [pid]
    i = 0
    while i < len(seen) and len(seen) < limit:
        seen += [c for c in _children(seen[i]) if c not in seen]
        i += 1
    return seen[:limit]


def network_bytes(pid: int | str = "self") -> tuple[int, int] | None:
    """Received and sent bytes on the non-loopback interfaces of the process's network namespace."""
    try:
        lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    except OSError:
        return None
    rx = tx = 0
    for line in lines:
        name, _, counters = line.partition(":")
        fields = counters.split()
        if name.strip() == "lo" or len(fields) < 9:
            continue
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx


def _cgroup_paths(pid: int | str) -> dict[str, str]:
    """controller -> path of the process's cgroup ("" for the unified v2 hierarchy)."""
    paths: dict[str, str] = {}
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    except (OSError, ValueError):
        pass
    return paths


def _v1_limit(directory: Path, name: str) -> float | None:
    strictest: float | None = None
    try:
        lines = (directory / name).read_text().split("\n")
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) == 2 and fields[1].isdigit() and int(fields[1]) > 0:
            value = float(fields[1])
            strictest = value if strictest is None else min(strictest, value)
    return strictest


def _v2_limit(directory: Path, key: str) -> float | None:
    strictest: float | None = None
    try:
        lines = (directory / "io.max").read_text().split("\n")
    except OSError:
        return None
    for line in lines:
        for item in line.split()[1:]:
            name, _, value = item.partition("=")
            if name == key and value.isdigit() and int(value) > 0:
                strictest = float(value) if strictest is None else min(strictest, float(value))
    return strictest


def disk_limits(pid: int | str = "self", root: Path = Path("/sys/fs/cgroup")) -> tuple[float | None, float | None]:
    """The strictest read and write byte-rate limits of the process's cgroup and its ancestors (v1 blkio
    throttle or v2 io.max), any device; ``None`` where none is set."""
    paths = _cgroup_paths(pid)
    read: list[float] = []
    write: list[float] = []
    for controller, base in (("blkio", root / "blkio"), ("", root)):
        path = paths.get(controller)
        if path is None or not base.is_dir():
            continue
        directory = base / path.lstrip("/")
        while True:
            if controller:
                limits = (_v1_limit(directory, "blkio.throttle.read_bps_device"),
                          _v1_limit(directory, "blkio.throttle.write_bps_device"))
            else:
                limits = (_v2_limit(directory, "rbps"), _v2_limit(directory, "wbps"))
            if limits[0] is not None:
                read.append(limits[0])
            if limits[1] is not None:
                write.append(limits[1])
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return (min(read) if read else None), (min(write) if write else None)


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v2_quota(directory: Path) -> float | None:
    try:
        quota, _, period = (directory / "cpu.max").read_text().strip().partition(" ")
        return int(quota) / int(period) if quota.isdigit() and period.isdigit() and int(period) > 0 else None
    except (OSError, ValueError):
        return None


def cpu_limit(pid: int | str = "self", root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cores the process may use: its CPU affinity (a cpuset, ``taskset``) and the strictest CPU quota of its
    cgroup and its ancestors (v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``, v2 ``cpu.max``), whichever is less;
    None where neither can be read."""
    limits: list[float] = []
    try:
        limits.append(float(len(os.sched_getaffinity(0 if pid == "self" else int(pid)))))
    except (AttributeError, OSError, ValueError):
        pass
    paths = _cgroup_paths(pid)
    for controller, base in (("cpu", root / "cpu"), ("cpu", root / "cpu,cpuacct"), ("", root)):
        path = paths.get(controller)
        if path is None or not base.is_dir():
            continue
        directory = base / path.lstrip("/")
        while True:
            quota = _v1_quota(directory) if controller else _v2_quota(directory)
            if quota is not None:
                limits.append(quota)
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return min(limits) if limits else None


class _ProcessTreeIo:
    """Storage bytes of a process tree, accumulated per pid so that a child's exit never makes the total go
    down (its last reading stays counted)."""

    def __init__(self, pid: int, include_children: bool) -> None:
        self.pid = pid
        self.include_children = include_children
        self.last: dict[int, tuple[int, int]] = {}
        self.last_cpu: dict[int, float] = {}
        self.read = 0
        self.written = 0
        self.cpu = 0.0
        self.ok = False
        self.cpu_ok = False
        self.primed = False  # what runs at the first reading counts from then, a later child from its birth

    def update(self) -> None:
        pids = descendants(self.pid) if self.include_children else [self.pid]
        for pid in pids:
            self._update_cpu(pid)
            now = _proc_io(pid)
            if now is None:
                continue
            self.ok = True
            before = self.last.get(pid)
            if before is None:
                # a process met for the first time: the root counts from the sampler's start, a child
                # (forked during the run, its counters starting at 0) from its birth
                before = now if pid == self.pid or not self.primed else (0, 0)
            self.read += max(0, now[0] - before[0])
            self.written += max(0, now[1] - before[1])
            self.last[pid] = now
        self.primed = True
        if len(self.last) + len(self.last_cpu) > 8 * len(pids) + 128:  # forget exited pids (what they used stays)
            alive = set(pids)
            self.last = {p: v for p, v in self.last.items() if p in alive}
            self.last_cpu = {p: v for p, v in self.last_cpu.items() if p in alive}

    def _update_cpu(self, pid: int) -> None:
        now = _proc_cpu(pid)
        if now is None:
            return
        self.cpu_ok = True
        before = self.last_cpu.get(pid)
        if before is None:
            before = now if pid == self.pid or not self.primed else 0.0
        self.cpu += max(0.0, now - before)
        self.last_cpu[pid] = now


class IoCounterSampler:
    """Reads the counters of a process (and its descendants) every ``interval_s`` on a daemon thread.

    Memory is bounded: past ``max_samples`` rows every other row is dropped and the interval doubles.
    Failures are logged once and stop nothing but the sampler."""

    def __init__(self, source: str, *, pid: int | None = None, interval_s: float = DEFAULT_INTERVAL_S,
                 max_samples: int = MAX_SAMPLES, include_children: bool = True) -> None:
        self.source = source
        self.pid = pid or os.getpid()
        self.interval_s = interval_s
        self.max_samples = max(8, max_samples)
        self.host = socket.gethostname()
        self._tree = _ProcessTreeIo(self.pid, include_children)
        self._net0: tuple[int, int] | None = None
        self._host0: tuple[float, float, int] | None = None
        self._rows: list[tr.IoSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> tr.IoSample | None:
        try:
            self._tree.update()
            net = network_bytes(self.pid)
            if net is not None and self._net0 is None:
                self._net0 = net
            read_limit, write_limit = disk_limits(self.pid)
            host = host_cpu()
            if host is not None and self._host0 is None:
                self._host0 = host
            row = tr.IoSample(
                t=time.time(), source=self.source, host=self.host,
                storage_read_bytes=float(self._tree.read) if self._tree.ok else None,
                storage_write_bytes=float(self._tree.written) if self._tree.ok else None,
                network_rx_bytes=float(max(0, net[0] - self._net0[0])) if net and self._net0 else None,
                network_tx_bytes=float(max(0, net[1] - self._net0[1])) if net and self._net0 else None,
                disk_read_limit=read_limit, disk_write_limit=write_limit,
                process_cpu_s=self._tree.cpu if self._tree.cpu_ok else None,
                host_cpu_busy_s=max(0.0, host[0] - self._host0[0]) if host and self._host0 else None,
                host_cpu_s=max(0.0, host[1] - self._host0[1]) if host and self._host0 else None,
                host_cpus=host[2] if host else None,
                cpu_limit=cpu_limit(self.pid),
            )
        except Exception as exc:  # never the job's problem
            log.debug("crystalperf: I/O counters unreadable: %s", exc)
            return None
        with self._lock:
            self._rows.append(row)
            if len(self._rows) >= self.max_samples:
                self._rows = self._rows[:-1:2] + self._rows[-1:]
                self.interval_s *= 2
        return row

    def start(self) -> IoCounterSampler:
        if self._thread is None:
            self.sample_once()
            self._thread = threading.Thread(target=self._run, name="crystalperf-io-counters", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def stop(self) -> list[tr.IoSample]:
        """Stops the thread (without waiting for more than one interval), takes a last reading and returns
        every row."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=min(2.0, self.interval_s + 1.0))
        self.sample_once()
        return self.samples()

    def samples(self) -> list[tr.IoSample]:
        with self._lock:
            return list(self._rows)
