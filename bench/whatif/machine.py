"""What this machine lets the benchmark vary for real; each probe returns None or the reason it can't.

Probes try the real operation (create a cgroup and write its limit, create a network namespace with a
shaped veth pair) and undo it, because a file being present does not mean the kernel lets us write it.
Run ``python bench/whatif/machine.py`` to see the answers for this machine.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _try_cgroup(controller_dir: Path, limit_file: str, value: str) -> str | None:
    probe = controller_dir / f"crystalperf-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as exc:
        return f"cannot create a cgroup under {controller_dir}: {exc.strerror}"
    try:
        target = probe / limit_file
        if not target.exists():
            return f"{target} does not exist (controller not enabled)"
        try:
            target.write_text(value)
        except OSError as exc:
            return f"cannot write {limit_file}: {exc.strerror}"
        return None
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass


@contextmanager
def cgroup(controller: str, limits: dict[str, str], *, settle_s: float = 15.0) -> Iterator[Path | None]:
    """A fresh cgroup (v1 controller dir) with the given limit files written (None when there are none);
    removed afterwards. A JVM is often still exiting when the Python process that started it has returned,
    and a cgroup with a process in it cannot be removed: removal waits up to ``settle_s`` for it to empty."""
    if not limits:
        yield None
        return
    path = CGROUP_ROOT / controller / f"crystalperf-bench-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        for name, value in limits.items():
            (path / name).write_text(value)
        yield path
    finally:
        deadline = time.monotonic() + settle_s
        while True:
            try:
                path.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    break  # left behind, empty or not: never fail a run for it
                time.sleep(0.2)


def cpu_quota_unavailable() -> str | None:
    """cgroup v2 ``cpu.max`` where the cpu controller is delegated, else v1 ``cpu.cfs_quota_us``."""
    unified = CGROUP_ROOT / "cgroup.controllers"
    if unified.exists() and "cpu" in unified.read_text().split():
        return _try_cgroup(CGROUP_ROOT, "cpu.max", "50000 100000")
    if (CGROUP_ROOT / "cpu").is_dir():
        return _try_cgroup(CGROUP_ROOT / "cpu", "cpu.cfs_quota_us", "50000")
    return "no cgroup cpu controller (neither cgroup v2 cpu.max nor v1 cpu.cfs_quota_us)"


def block_device(path: Path) -> str:
    """``major:minor`` of the block device holding ``path`` (what an I/O throttle rule names); a path not
    created yet is on its nearest existing parent's device."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    dev = path.stat().st_dev
    return f"{os.major(dev)}:{os.minor(dev)}"


def disk_throttle_unavailable(path: Path = Path(".")) -> str | None:
    """A read limit on the device holding ``path``: cgroup v2 ``io.max`` where delegated, else v1
    ``blkio.throttle.read_bps_device``."""
    device = block_device(path.resolve())
    unified = CGROUP_ROOT / "cgroup.controllers"
    if unified.exists() and "io" in unified.read_text().split():
        return _try_cgroup(CGROUP_ROOT, "io.max", f"{device} rbps=52428800")
    blkio = CGROUP_ROOT / "blkio"
    if blkio.is_dir():
        return _try_cgroup(blkio, "blkio.throttle.read_bps_device", f"{device} 52428800")
    return "no cgroup io/blkio controller"


def blkio_read_limit_unavailable(path: Path) -> str | None:
    """Why a cgroup v1 blkio read limit cannot slow the reads of ``path`` here (root, the v1 controller, a real
    block device under it), or None; the integration tests that move a JVM into a limited group need all three."""
    if os.geteuid() != 0:
        return "a cgroup blkio read limit needs root"
    if not (CGROUP_ROOT / "blkio" / "blkio.throttle.read_bps_device").exists():
        return "needs the cgroup v1 blkio controller at /sys/fs/cgroup/blkio (read throttling)"
    if os.major(path.stat().st_dev) == 0:
        return f"{path} is not on a block device (tmpfs/overlay): a read limit would not apply"
    return disk_throttle_unavailable(path)


def network_shaping_unavailable() -> str | None:
    """A server in a network namespace behind a veth pair shaped with tc (``bench.whatif.shaped``): started,
    downloaded from once, and removed."""
    from bench.whatif import shaped

    return shaped.unavailable()


def taskset_unavailable() -> str | None:
    return None if shutil.which("taskset") else "taskset is not installed (util-linux)"


PROBES = {
    "cpu_share (cgroup cpu quota)": cpu_quota_unavailable,
    "disk (cgroup I/O throttle)": disk_throttle_unavailable,
    "network (netns + veth + tc)": network_shaping_unavailable,
    "cores (taskset)": taskset_unavailable,
}


if __name__ == "__main__":
    for name, probe in PROBES.items():
        reason = probe()
        print(f"{name}: {'available' if reason is None else 'unavailable: ' + reason}")
