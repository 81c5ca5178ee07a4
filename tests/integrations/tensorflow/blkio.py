"""A read limit on this process's device reads (cgroup v1 blkio), for tests that need a disk slower than the
machine's: a virtual disk the host caches reads about as fast as memory."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BLKIO = Path("/sys/fs/cgroup/blkio")


def own_blkio_path() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "blkio" in controllers.split(","):
            return path
    raise LookupError("no blkio hierarchy")


def blkio_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (joins a cgroup with a blkio read limit)"
    if not (BLKIO / "blkio.throttle.read_bps_device").exists():
        return "needs cgroup v1 blkio with throttling (/sys/fs/cgroup/blkio)"
    try:
        own_blkio_path()
    except (OSError, LookupError):
        return "this process is in no blkio cgroup"
    return None


@contextmanager
def read_limited(folder: Path, bps: int) -> Iterator[None]:
    """This process (all its threads) in a fresh blkio cgroup reading the folder's device at ``bps``; back
    where it was afterwards with the processes it started meanwhile, the cgroup removed."""
    dev = folder.stat().st_dev
    origin = BLKIO / own_blkio_path().lstrip("/")
    group = BLKIO / f"crystalperf-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "blkio.throttle.read_bps_device").write_text(f"{os.major(dev)}:{os.minor(dev)} {bps}")
        (group / "cgroup.procs").write_text(str(os.getpid()))
        try:
            yield
        finally:
            # with the processes started meanwhile (a finish process), which would keep the cgroup in use
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    (origin / "cgroup.procs").write_text(pid)
                except ProcessLookupError:
                    pass
    finally:
        group.rmdir()
