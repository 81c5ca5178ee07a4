"""The OS side of the fidelity benchmark: the cgroups a job runs in (CPU accounting, a disk read limit),
a traffic-shaped link to a data server in another network namespace, page-cache eviction, and the
counters that confirm each job's dominant resource.

Everything set up here is undone in ``finally`` blocks: a job that fails or is interrupted leaves no
cgroup, namespace, veth pair or qdisc behind, and nothing on the machine stays throttled.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SERVER = Path(__file__).with_name("server.py")


def block_device(path: Path) -> str:
    """``major:minor`` of the block device holding ``path`` (what a blkio throttle rule names)."""
    dev = path.resolve().stat().st_dev
    return f"{os.major(dev)}:{os.minor(dev)}"


def evict(paths: list[Path]) -> None:
    """Drop the files from the page cache so that the job's reads reach the device.

    Per file (``POSIX_FADV_DONTNEED``) rather than ``echo 3 > /proc/sys/vm/drop_caches``: the machine is
    shared, and dropping every cache would make the JVM's and TensorFlow's libraries cold too, so their
    start-up would be read through the job's throttle. The job's ``read_bytes`` confirms the reads were cold.
    """
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            fd = os.open(file, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def warm(paths: list[Path]) -> None:
    """Read the files once, so that the job's reads are served by the page cache."""
    for path in paths:
        for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
            with open(file, "rb") as f:
                while f.read(1 << 22):
                    pass


# Joins the cgroups whose ``cgroup.procs`` files come before "--", then execs the command after it.
_JOIN_EXEC = ("import os, sys\n"
              "split = sys.argv.index('--')\n"
              "for procs in sys.argv[1:split]:\n"
              "    with open(procs, 'w') as f:\n"
              "        f.write(str(os.getpid()))\n"
              "os.execvp(sys.argv[split + 1], sys.argv[split + 1:])\n")


def in_cgroups(argv: Sequence[str], groups: Sequence[Path | None]) -> list[str]:
    """``argv`` started in the groups (None: none): a fresh interpreter joins them and execs it, so the process
    and every child it starts (a JVM, a worker) are in them from the start. Not a ``preexec_fn``: that runs
    Python between fork and exec in a copy of this process, whose other threads (py4j's, a shaped server's) may
    hold a lock it then waits on for ever."""
    procs = [str(group / "cgroup.procs") for group in groups if group is not None]
    if not procs:
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _JOIN_EXEC, *procs, "--", *argv]


@dataclass
class Cgroups:
    """A job's cgroups (v1): ``cpuacct`` always (the process tree's CPU time, dead children included),
    ``blkio`` always (its read bytes), with a read limit on one device when asked."""

    cpuacct: Path
    blkio: Path
    device: str

    def enter(self) -> None:
        """Move the calling process into both groups."""
        pid = str(os.getpid())
        for group in (self.cpuacct, self.blkio):
            (group / "cgroup.procs").write_text(pid)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started in both groups (:func:`in_cgroups`)."""
        return in_cgroups(argv, [self.cpuacct, self.blkio])

    def as_config(self) -> dict[str, str]:
        return {"cpuacct": str(self.cpuacct), "blkio": str(self.blkio), "device": self.device}


def _empty_and_remove(group: Path) -> None:
    root = group.parent
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            pass
        # Stragglers (a finisher the hook started in the background) go back to the root group, where no
        # limit applies, so that the group can go.
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (root / "cgroup.procs").write_text(pid)
        time.sleep(0.1)
    print(f"warning: could not remove cgroup {group}", file=sys.stderr)


@contextlib.contextmanager
def cgroups(device: str, read_bps: int | None = None) -> Iterator[Cgroups]:
    tag = uuid.uuid4().hex[:8]
    cpuacct = CGROUP_ROOT / "cpuacct" / f"crystalperf-fidelity-{tag}"
    blkio = CGROUP_ROOT / "blkio" / f"crystalperf-fidelity-{tag}"
    made: list[Path] = []
    try:
        for group in (cpuacct, blkio):
            group.mkdir()
            made.append(group)
        if read_bps:
            (blkio / "blkio.throttle.read_bps_device").write_text(f"{device} {read_bps}")
        yield Cgroups(cpuacct, blkio, device)
    finally:
        for group in made:
            if group == blkio and read_bps:
                with contextlib.suppress(OSError):
                    (blkio / "blkio.throttle.read_bps_device").write_text(f"{device} 0")
            _empty_and_remove(group)


@dataclass
class Link:
    """A data server behind a shaped link: ``url`` reaches it, ``host_if`` counts what came through."""

    url: str
    host_if: str
    rate_bps: int  # bytes per second the link lets through


def _run(*args: str) -> None:
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` failed: {proc.stderr.strip()}")


def shaping_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces and tc need root"
    for tool in ("/usr/sbin/ip", "/usr/sbin/tc"):
        if not Path(tool).exists():
            return f"{tool} is not installed (iproute2)"
    return None


def throttle_unavailable() -> str | None:
    if not (CGROUP_ROOT / "blkio" / "blkio.throttle.read_bps_device").exists():
        return "no cgroup v1 blkio controller with read throttling"
    if not os.access(CGROUP_ROOT / "blkio", os.W_OK):
        return "the blkio cgroup hierarchy is not writable (needs root)"
    return None


@contextlib.contextmanager
def shaped_link(rate_mbit: int = 20) -> Iterator[Link]:
    """A network namespace holding an HTTP data server (``server.py``), joined to this one by a veth
    pair whose namespace end sends through a token bucket of ``rate_mbit``."""
    tag = uuid.uuid4().hex[:6]
    ns, host_if, ns_if = f"cpfid{tag}", f"cpf{tag}h", f"cpf{tag}n"
    subnet = int(tag[:2], 16)  # 10.231.<n>.0/30: unlikely to clash with another bench run on the machine
    host_ip, ns_ip = f"10.231.{subnet}.1", f"10.231.{subnet}.2"
    server: subprocess.Popen[bytes] | None = None
    try:
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _run("ip", "link", "set", ns_if, "netns", ns)
        _run("ip", "addr", "add", f"{host_ip}/30", "dev", host_if)
        _run("ip", "link", "set", host_if, "up")
        _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _run("ip", "netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        # burst above the largest GSO packet a veth hands over (64 KiB), or tbf drops those outright
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", ns_if, "root", "tbf", "rate",
             f"{rate_mbit}mbit", "burst", "128kb", "latency", "500ms")
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(SERVER), ns_ip, "8000"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((ns_ip, 8000), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the data server in the namespace did not start") from None
                time.sleep(0.2)
        yield Link(f"http://{ns_ip}:8000", host_if, rate_mbit * 1_000_000 // 8)
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        # deleting one end of the pair deletes both, and the qdisc with them
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
