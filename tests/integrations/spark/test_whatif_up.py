"""What-ifs start from what the job saw (issue 20): a real local Spark job traced on a throttled resource,
``crystalperf predict`` asked for a faster one, and the job re-run for real on the faster one.

- network: the job's tasks download from a server behind a shaped 40 Mbit/s link (``bench.whatif.shaped``:
  its own network namespace, a veth pair, ``tc``), predicted and re-run at 100 Mbit/s;
- disk: the job scans files evicted from the page cache, its driver and JVM in a cgroup v1 blkio group that
  limits reads from the files' device to 5 MB/s, predicted and re-run at 20 MB/s.

A prediction must be faster than the traced run and within a generous bound (40 %) of the real re-run; the
numbers are printed (``pytest -s``). Both need root; they skip with the reason where the machine cannot.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bench.fidelity.machine import evict
from bench.whatif import shaped
from bench.whatif.spark import UP_JOB, ensure_text

BOUND = 0.4

def run_job(tmp_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """One Spark application in a fresh Python (as a user runs it); its RESULT line."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, CRYSTALPERF_TESTING="1")
    config = {"master": "local[2]", **config}
    done = subprocess.run([sys.executable, "-c", UP_JOB, json.dumps(config)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.split(" ", 1)[1])


def predict(trace: Path, change: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "crystalperf.core.cli", "predict", str(trace), "--set", change, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def io_rows(trace: Path) -> int:
    return len(json.loads(gzip.decompress(trace.read_bytes())).get("io", []))


def check(name: str, change: str, traced: dict[str, Any], trace: Path, real: dict[str, Any]) -> None:
    """Faster than traced, and within BOUND of the real re-run (the prediction expressed in the job's own
    runtime, as the benchmark does: the trace's span also holds ``spark.stop()``)."""
    doc = predict(trace, change)
    baseline, predicted = doc["baseline_runtime_s"], doc["crystalperf"]["runtime_s"]
    scaled = predicted * traced["runtime_s"] / baseline
    error = abs(scaled - real["runtime_s"]) / real["runtime_s"]
    summary = (f"{name}: traced {traced['runtime_s']:.2f} s (trace span {baseline:.2f} s, "
               f"{io_rows(trace)} io rows); `--set {change}` predicts {scaled:.2f} s "
               f"(span {predicted:.2f} s, linear "
               f"{doc['linear']['runtime_s']:.2f} s); real re-run {real['runtime_s']:.2f} s; "
               f"error {error:.1%}")
    print(summary)
    assert predicted < baseline, f"predicted slower than traced: {summary}; notes: {doc.get('notes')}"
    assert error <= BOUND, f"{summary}; notes: {doc.get('notes')}"


@pytest.mark.slow
def test_faster_network_is_predicted_from_the_bandwidth_the_job_saw(tmp_path: Path) -> None:
    reason = shaped.unavailable()
    if reason:
        pytest.skip(f"no shaped link on this machine: {reason}")
    job = {"case": "download", "tasks": 6, "out": str(tmp_path / "traced")}
    with shaped.ShapedServer(rate_mbit=40) as server:
        job["url"] = server.url(10_000_000)  # 60 MB in all: ~13 s at 40 Mbit/s, ~5 s at 100
        traced = run_job(tmp_path, job)
        server.set_rate(100)
        real = run_job(tmp_path, {**job, "out": None})
    assert traced["result"] == real["result"] == 60_000_000
    trace = tmp_path / "traced" / "crystalperf-trace.json.gz"
    check("network 40->100 Mbit/s", "network=100mbit", traced, trace, real)


@contextmanager
def read_limit(device: str, bps: int) -> Iterator[Path]:
    """A fresh cgroup v1 blkio group limiting reads from ``device``; removed afterwards (its processes have
    exited by then)."""
    group = Path("/sys/fs/cgroup/blkio") / f"crystalperf-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "blkio.throttle.read_bps_device").write_text(f"{device} {bps}")
        yield group
    finally:
        # the JVM may still be exiting when its driver has returned
        deadline = time.monotonic() + 10
        while True:
            try:
                group.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def blkio_unavailable(data: Path) -> str | None:
    if os.geteuid() != 0:
        return "a cgroup blkio read limit needs root"
    if not (Path("/sys/fs/cgroup/blkio") / "blkio.throttle.read_bps_device").exists():
        return "needs the cgroup v1 blkio controller at /sys/fs/cgroup/blkio"
    dev = data.stat().st_dev
    if os.major(dev) == 0:
        return f"{data} is not on a block device (tmpfs/overlay): a blkio limit would not apply"
    try:
        with read_limit(f"{os.major(dev)}:{os.minor(dev)}", 5_000_000):
            pass
    except OSError as exc:
        return f"cannot create a blkio cgroup with a read limit: {exc}"
    return None


@pytest.mark.slow
def test_faster_disk_is_predicted_from_the_bandwidth_the_job_saw(tmp_path: Path) -> None:
    reason = blkio_unavailable(tmp_path)
    if reason:
        pytest.skip(reason)
    data = ensure_text(tmp_path, files=8, size=7_500_000)  # 60 MB: ~12 s at 5 MB/s, ~3 s at 20
    dev = data.stat().st_dev
    device = f"{os.major(dev)}:{os.minor(dev)}"
    runs = {}
    for bps, out in ((5_000_000, str(tmp_path / "traced")), (20_000_000, None)):
        evict([data])  # so that the scan's reads reach the device
        with read_limit(device, bps) as group:
            runs[bps] = run_job(tmp_path, {"case": "scan", "data": str(data), "cgroups": [str(group)], "out": out})
    assert runs[5_000_000]["result"] == runs[20_000_000]["result"]
    trace = tmp_path / "traced" / "crystalperf-trace.json.gz"
    check("disk 5->20 MB/s", "disk=20MB/s", runs[5_000_000], trace, runs[20_000_000])
