"""What this machine lets the benchmark vary for real; each probe returns None or the reason it can't.

Probes try the real operation (create a cgroup and write its limit, create a network namespace with a
shaped veth pair) and undo it, because a file being present does not mean the kernel lets us write it.
Run ``python bench/whatif/machine.py`` to see the answers for this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
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


def cpu_quota_unavailable() -> str | None:
    """cgroup v2 ``cpu.max`` where the cpu controller is delegated, else v1 ``cpu.cfs_quota_us``."""
    unified = CGROUP_ROOT / "cgroup.controllers"
    if unified.exists() and "cpu" in unified.read_text().split():
        return _try_cgroup(CGROUP_ROOT, "cpu.max", "50000 100000")
    if (CGROUP_ROOT / "cpu").is_dir():
        return _try_cgroup(CGROUP_ROOT / "cpu", "cpu.cfs_quota_us", "50000")
    return "no cgroup cpu controller (neither cgroup v2 cpu.max nor v1 cpu.cfs_quota_us)"


def block_device(path: Path) -> str:
    """``major:minor`` of the block device holding ``path`` (what an I/O throttle rule names)."""
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


def network_shaping_unavailable() -> str | None:
    """A network namespace joined by a veth pair shaped with tc's token bucket filter."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "network namespaces and tc need root"
    tag = uuid.uuid4().hex[:6]
    ns, host_if, ns_if = f"cpprobe{tag}", f"cpp{tag}a", f"cpp{tag}b"
    steps = [["ip", "netns", "add", ns],
             ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
             ["ip", "link", "set", ns_if, "netns", ns],
             ["tc", "qdisc", "add", "dev", host_if, "root", "tbf", "rate", "100mbit", "burst", "32kbit",
              "latency", "50ms"]]
    try:
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                return f"`{' '.join(step)}` failed: {proc.stderr.strip()}"
        return None
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


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
