"""What a process's cgroups allow it: the strictest byte-rate limits on its devices and the cores it may use
(affinity, CPU quota), read from ``/proc/<pid>/cgroup`` and the v1 or v2 hierarchy. Apart from the I/O counters
that record them, because the hook's CPU budget needs the cores too."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path


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


def _hierarchy(pid: int | str, mounts: Iterable[tuple[str, Path]]) -> Iterator[tuple[str, Path]]:
    """(controller, directory) of the process's cgroup and of each of its ancestors up to the hierarchy's root, in
    each of ``mounts`` (controller, where its hierarchy is mounted; "" for the unified v2 one) that is there."""
    paths = _cgroup_paths(pid)
    for controller, base in mounts:
        path = paths.get(controller)
        if path is None or not base.is_dir():
            continue
        directory = base / path.lstrip("/")
        while True:
            yield controller, directory
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent


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
    read: list[float] = []
    write: list[float] = []
    for controller, directory in _hierarchy(pid, (("blkio", root / "blkio"), ("", root))):
        if controller:
            limits = (_v1_limit(directory, "blkio.throttle.read_bps_device"),
                      _v1_limit(directory, "blkio.throttle.write_bps_device"))
        else:
            limits = (_v2_limit(directory, "rbps"), _v2_limit(directory, "wbps"))
        if limits[0] is not None:
            read.append(limits[0])
        if limits[1] is not None:
            write.append(limits[1])
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
    for controller, directory in _hierarchy(pid, (("cpu", root / "cpu"), ("cpu", root / "cpu,cpuacct"), ("", root))):
        quota = _v1_quota(directory) if controller else _v2_quota(directory)
        if quota is not None:
            limits.append(quota)
    return min(limits) if limits else None
